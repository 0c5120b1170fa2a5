"""A session this runtime started: the shell process, its pipes drained into the spool, its
exit, and the processes it leaves behind.

Capture design
--------------
`attach` runs right after the process is spawned: it registers both pipes (made non-blocking)
with the event loop's `add_reader`. Each time a pipe is readable the loop reads one chunk and
writes it at once, with `os.write`, to the session's spool file. The shell's exit is watched
the same way through a pidfd where the kernel has them (Linux 5.3), else by a daemon thread that
blocks in `wait()` and hands the exit status to the loop with `call_soon_threadsafe` (the same
thing asyncio's own child watchers do). Consequences:

- No deadlock on full pipes: the event loop drains both pipes continuously, whatever the
  reader of the session does, and nothing accumulates in memory.
- Nothing written before exit is lost: a session only settles (stops `running`) when the
  process has exited *and* both pipes have reached end-of-file, so stderr written just before
  `exit 3` is on disk before anybody can see the exit code.
- Reads of a running session see everything received so far (writes are unbuffered).

A consequence of "settled = exited and both pipes closed": a background child that keeps the
pipes open (`server &` without redirection) keeps the session running until it exits or the
session is killed, and its output stays readable. A child that redirects its output elsewhere
does not hold the session.

Descendants
-----------
A session owns every process it starts (see `processes` for how they are found: the process
group everywhere, plus, on Linux, every process still carrying the session's
`HERDR_MCP_EXEC_SESSION` variable). When the shell exits, the session looks for processes it
left behind; answers carry `descendants_running` (null while the shell runs, then true or false)
and, where they can be listed, `descendant_pids`. On Linux the shell stays an unreaped zombie
until they are gone, so the group id is never someone else's when it is signalled.

Each durable session's directory also holds `metadata.json` (command, cwd, pid, times, exit
status), replaced atomically on start and on finish, so a person can find old sessions on disk.

In memory first
---------------
A short herdr_exec without an idempotency key starts as a session in memory (`durable` false):
its streams go to memory buffers (`output.Spool.in_memory`), and it has no directory, no
metadata.json and no `state.db` row. Everything else is as above: the same pipes drained on the
loop, the same exit watch, the same process group and variable, the same look for descendants.
It becomes durable (`sessions.ExecSessions` writes the buffers to its spool files, then its
metadata and its row) as soon as it outlives its timeout, writes more than a buffer holds, or
leaves processes behind when its shell exits; it is never made memory-only again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from herdr_mcp.runtime.exec_sessions.output import Spool, StreamName, StreamView
from herdr_mcp.runtime.exec_sessions.processes import (
    ProcessTable,
    exited_status,
    group_alive,
    reap_shell,
    signal_group,
    signal_marked,
    wait_keeping_zombie,
)
from herdr_mcp.state.exec_sessions import ExecSessionEnd, ExecSessionStart

__all__ = ["LiveSession", "descendants_fields", "epoch_ms", "iso_from_ms"]

_log = logging.getLogger(__name__)

# One read; asyncio's own pipe transports use the same size.
_PIPE_CHUNK = 256 * 1024
# Reads per readiness callback at most.
_CHUNKS_PER_TURN = 4
# After SIGKILL the leader dies at once unless it is stuck in the kernel; do not wait forever.
_EXIT_WAIT_SECONDS = 5.0
# Once the process is gone, how long pipes may stay open before we close our ends.
_DRAIN_GRACE_SECONDS = 1.0
_POLL_SECONDS = 0.02


def epoch_ms() -> int:
    """Now, in Unix epoch milliseconds."""
    return int(time.time() * 1000)


def iso_from_ms(epoch_ms: int) -> str:
    """An epoch-milliseconds time as ISO 8601 UTC with milliseconds (`...Z`)."""
    return (
        datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


@dataclass
class LiveSession:
    """A session this runtime started and drains, on its event loop (a thread that waits for the
    exit, where there is one, only hands the status over)."""

    session_id: str
    command: str
    cwd: Path
    directory: Path
    stdout: Spool
    stderr: Spool
    started_monotonic: float
    started_epoch_ms: int
    loop: asyncio.AbstractEventLoop
    on_settle: Callable[[LiveSession], None] | None = None
    on_exited: Callable[[LiveSession], None] | None = None
    # Settled with nothing of it left running (called once).
    on_idle: Callable[[LiveSession], None] | None = None
    # A stream is about to outgrow its memory buffer (only while not durable).
    on_overflow: Callable[[LiveSession], None] | None = None
    process: subprocess.Popen[bytes] | None = None
    # Spool files, metadata.json and a state.db row (False: in memory, see module docs).
    durable: bool = True
    # In memory and running: not counted against the session limit (sessions' bookkeeping).
    unkept: bool = False
    # The disk refused the session's files once (`to_disk`): it stays in memory.
    disk_refused: bool = False
    # `<boot id>:<kernel start time>` of the shell (processes.process_identity).
    pid_start: str | None = None
    # The shell's kernel start time (clock ticks): none of its processes started earlier.
    since: int | None = None
    # Set once nothing but (maybe) the shell is left: final, see check_descendants.
    descendants_gone: bool = False
    returncode: int | None = None
    finished_monotonic: float | None = None
    finished_epoch_ms: int | None = None
    escalated: bool = False
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    # Set once the look for descendants that follows the shell's exit has been taken in.
    checked: asyncio.Event = field(default_factory=asyncio.Event)
    _settle_waiters: list[asyncio.Future[None]] = field(default_factory=list)
    kill_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def started_at(self) -> str:
        """When the session started, ISO 8601 UTC."""
        return iso_from_ms(self.started_epoch_ms)

    @property
    def finished_at(self) -> str | None:
        """When it settled, ISO 8601 UTC."""
        return None if self.finished_epoch_ms is None else iso_from_ms(self.finished_epoch_ms)

    @property
    def pid(self) -> int | None:
        """The shell's pid (the id of its process group) once spawned."""
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        """Until the shell exited and both pipes reached end-of-file."""
        return not self.settled.is_set()

    @property
    def exit_code(self) -> int | None:
        """The shell's exit status once settled; None when a signal ended it."""
        if self.settled.is_set() and self.returncode is not None and self.returncode >= 0:
            return self.returncode
        return None

    @property
    def signal_name(self) -> str | None:
        """The signal that ended the shell (`SIGTERM`), once settled."""
        if self.settled.is_set() and self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"SIG{-self.returncode}"
        return None

    def spools(self) -> tuple[Spool, Spool]:
        """stdout's and stderr's spool."""
        return self.stdout, self.stderr

    def view(self, stream: StreamName) -> StreamView:
        """What a read of `stream` may see now."""
        return (self.stdout if stream == "stdout" else self.stderr).view(settled=not self.running)

    def state(self) -> dict[str, Any]:
        """`session_id`, `running`, `exit_code` and `signal`, as answers carry them."""
        return {
            "session_id": self.session_id,
            "running": self.running,
            "exit_code": self.exit_code,
            "signal": self.signal_name,
        }

    def attach(
        self, process: subprocess.Popen[bytes], pidfd: int | None, returncode: int | None = None
    ) -> None:
        """Drain the pipes still open (`spawn` made them non-blocking) on the loop, and watch
        for the exit through `pidfd` (`processes.exit_fd`; None: a thread waits), unless the
        spawn thread saw the shell exit already (`returncode`)."""
        self.process = process
        for spool in self.spools():
            if spool.pipe is not None:
                self.loop.add_reader(spool.pipe.fileno(), self.on_readable, spool)
        if returncode is not None:
            self.on_exit(returncode)
        elif pidfd is None:
            threading.Thread(
                target=self._wait_for_exit, args=(process,), name=f"exec-wait-{self.session_id}", daemon=True
            ).start()
        else:
            self.loop.add_reader(pidfd, self._on_exit_fd, pidfd, process.pid)

    def finish(
        self, returncode: int, finished_epoch_ms: int, finished_monotonic: float, *, left: bool
    ) -> None:
        """The command ran to its end in the spawn thread, which looked for what it left
        (`left`) and, when nothing was, reaped the shell: the session is settled now."""
        self.returncode = returncode
        self.exited.set()
        self.descendants_gone = not left
        self._settle(finished_epoch_ms, finished_monotonic)

    def _on_exit_fd(self, pidfd: int, pid: int) -> None:
        returncode = exited_status(pid)
        if returncode is None:
            return
        self.loop.remove_reader(pidfd)
        os.close(pidfd)
        self.on_exit(returncode)

    def _wait_for_exit(self, process: subprocess.Popen[bytes]) -> None:
        returncode = wait_keeping_zombie(process)
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is listening
            self.loop.call_soon_threadsafe(self.on_exit, returncode)

    def on_readable(self, spool: Spool) -> None:
        """A pipe is readable: take what it holds into its spool (a few chunks at most, then
        the loop's other work comes first), and close it at end-of-file. Reading on until the
        pipe is empty sees the end-of-file that usually follows a short command's output at
        once, without another turn of the loop."""
        for _ in range(_CHUNKS_PER_TURN):
            if spool.pipe is None:
                return
            try:
                data = os.read(spool.pipe.fileno(), _PIPE_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.close_pipe(spool)
                self.maybe_settle()
                return
            if self.on_overflow is not None and spool.overflows(len(data)):
                self.on_overflow(self)
            spool.append(data)

    def close_pipe(self, spool: Spool) -> None:
        """Stop reading a pipe and close it; its stream is final."""
        if spool.pipe is not None:
            self.loop.remove_reader(spool.pipe.fileno())
            spool.pipe.close()
            spool.pipe = None
        spool.eof = True
        spool.close_file()

    def on_exit(self, returncode: int) -> None:
        """The shell exited (still a zombie on Linux): record it, look for descendants."""
        self.returncode = returncode
        self.exited.set()
        if self.on_exited is not None:
            self.on_exited(self)
        self.maybe_settle()

    def _group_id(self) -> int | None:
        """The process-group id while it is this session's to signal: until nothing was left in
        it (on Linux the zombie shell keeps the id reserved until then; see module docs)."""
        return None if self.process is None or self.descendants_gone else self.process.pid

    def survivors(self, table: ProcessTable | None) -> tuple[bool, list[int] | None]:
        """Whether processes of this session other than its shell are alive, and their pids
        (None where the system cannot list them: then the process group alone is looked at,
        and the shell counts while it runs)."""
        pgid = self._group_id()
        if table is None:
            return pgid is not None and group_alive(pgid), None
        pids = table.marked(self.session_id, self.since, self.pid)
        if pgid is not None:
            pids |= table.group(pgid)
        pids.discard(pgid if pgid is not None else -1)  # the shell itself
        return bool(pids), sorted(pids)

    def check_descendants(self, table: ProcessTable | None) -> list[int] | None:
        """After the shell exited: the pids of the processes it left ([] when none; None when
        some are alive but cannot be listed). Nothing left is final (whatever the session
        starts, it starts from a process of its own), so the shell is reaped then."""
        if self.descendants_gone:
            return []
        running, pids = self.survivors(table)
        return pids if self.take_look(running) else []

    def take_look(self, running: bool) -> bool:
        """Take in what a look after the shell's exit found (`survivors()[0]`, maybe from
        another thread: see `sessions`); whether processes of the session are still alive."""
        if self.descendants_gone:
            return False
        if not running:
            self.descendants_gone = True
            self.reap()
            self._maybe_idle()
        return running

    def _maybe_idle(self) -> None:
        if self.settled.is_set() and self.descendants_gone and self.on_idle is not None:
            self.on_idle(self)

    async def wait_settled(self, timeout_s: float) -> None:
        """Wait until the session settles, at most `timeout_s` (no error when it does not)."""
        if self.settled.is_set():
            return
        waiter = self.loop.create_future()
        self._settle_waiters.append(waiter)
        timer = self.loop.call_later(timeout_s, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            with contextlib.suppress(ValueError):
                self._settle_waiters.remove(waiter)

    def has_processes(self) -> bool:
        """Whether anything of this session may still run: its shell or what it left behind."""
        if self.running:
            return True
        return not self.descendants_gone and self.check_descendants(ProcessTable.read(self.since)) != []

    def descendants_answer(self) -> dict[str, Any]:
        """`descendants_running` (null while the shell runs) and `descendant_pids` if known."""
        if not self.exited.is_set():
            return {"descendants_running": None}
        return descendants_fields(
            self.check_descendants(ProcessTable.read(self.since) if not self.descendants_gone else None)
        )

    def send(self, signum: signal.Signals) -> None:
        """`signum` to the process group while it is ours, and to the session's processes
        outside it (each checked again just before, see signal_marked)."""
        pgid = self._group_id()
        table = ProcessTable.read()
        outside = set() if table is None else table.marked(self.session_id, self.since)
        if pgid is not None:
            outside -= table.group(pgid) if table is not None else set()
            signal_group(pgid, signum)
        for pid in sorted(outside):
            signal_marked(pid, self.session_id, signum)

    def reap(self) -> None:
        """Collect the exited shell (kept as a zombie on Linux, see wait_keeping_zombie)."""
        if self.process is not None and self.exited.is_set():
            reap_shell(self.process)

    def maybe_settle(self) -> None:
        """Settle once the shell exited and both pipes are closed: times, metadata, the row."""
        if self.settled.is_set() or not self.exited.is_set():
            return
        if not (self.stdout.eof and self.stderr.eof):
            return
        self._settle(epoch_ms(), time.monotonic())

    def _settle(self, finished_epoch_ms: int, finished_monotonic: float) -> None:
        self.finished_epoch_ms = finished_epoch_ms
        self.finished_monotonic = finished_monotonic
        self.settled.set()
        for waiter in self._settle_waiters:
            _wake(waiter)
        if self.durable:
            self.write_metadata()
        if self.on_settle is not None:
            self.on_settle(self)
        self._maybe_idle()

    def start_record(self, op_id: str | None) -> ExecSessionStart:
        """Its `state.db` row as it starts (`op_id`: the ledger operation it carries out)."""
        return ExecSessionStart(
            session_id=self.session_id,
            op_id=op_id,
            command=self.command,
            cwd=str(self.cwd),
            pid=self.pid,
            pid_start=self.pid_start,
            started_at_ms=self.started_epoch_ms,
        )

    def end_record(self) -> ExecSessionEnd:
        """How it ended, for its row."""
        return ExecSessionEnd(
            session_id=self.session_id,
            finished_at_ms=self.finished_epoch_ms,
            exit_code=self.exit_code,
            signal=self.signal_name,
            stdout_total=self.stdout.total,
            stderr_total=self.stderr.total,
            stdout_dropped=self.stdout.dropped,
            stderr_dropped=self.stderr.dropped,
        )

    def metadata(self) -> dict[str, Any]:
        """What metadata.json holds."""
        return {
            "session_id": self.session_id,
            "command": self.command,
            "cwd": str(self.cwd),
            "pid": self.pid,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "exit_code": self.exit_code,
            "signal": self.signal_name,
            "stdout_total_bytes": self.stdout.total,
            "stderr_total_bytes": self.stderr.total,
        }

    def to_disk(self, spool_dir: Path) -> bool:
        """Make a session in memory durable on disk: its directory, its spool files holding
        what it wrote so far (it goes on writing there), metadata.json; True once done. A disk
        that refuses is logged and not asked again: the session stays in memory, its streams
        capped at the buffer (the rest counts as dropped)."""
        if self.durable or self.disk_refused:
            return self.durable
        self.on_overflow = None
        try:
            spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.directory.mkdir(mode=0o700, exist_ok=True)
            self.directory.chmod(0o700)
            for spool in self.spools():
                spool.to_file()
        except OSError as exc:
            _log.warning("exec session %s stays in memory: %s", self.session_id, exc)
            self.disk_refused = True
            for spool in self.spools():
                if spool.memory is not None:
                    spool.write_error = f"{type(exc).__name__}: {exc} (kept in memory)"
            return False
        self.durable = True
        self.write_metadata()
        return True

    def write_metadata(self) -> None:
        """Replace metadata.json atomically; a failure is logged, never raised (best effort)."""
        target = self.directory / "metadata.json"
        temporary = self.directory / ".metadata.json.tmp"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
            fd = os.open(temporary, flags, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(self.metadata(), handle, indent=2)
                handle.write("\n")
            os.replace(temporary, target)
        except OSError:
            _log.warning("could not write %s", target, exc_info=True)

    async def terminate(self, grace_ms: int) -> None:
        """Stop the session if anything of it may still run: SIGTERM to its process group and
        to its processes outside it, wait up to `grace_ms` for the session to settle and nothing
        of it to be alive (zombies do not count: orphans are not always reaped quickly), then
        SIGKILL to whatever is left. A process that escaped unseen and still holds a pipe is
        cut off by closing our ends of the pipes. Then wait (bounded) for the exit, the last
        output, and nothing of it to be alive, so that answers and shutdown are true."""
        async with self.kill_lock:
            if self.has_processes():
                await self._stop(grace_ms)

    async def _stop(self, grace_ms: int) -> None:
        loop = self.loop
        # 1. Ask politely: SIGTERM to the process group and the session's processes outside it.
        self.send(signal.SIGTERM)
        # 2. Wait for the session to settle and nothing of it to be alive, up to the grace period.
        deadline = loop.time() + grace_ms / 1000
        while not (self.settled.is_set() and not self.survivors(ProcessTable.read())[0]):
            if loop.time() >= deadline:
                # 3. Insist: SIGKILL to whatever is left.
                self.escalated = True
                self.send(signal.SIGKILL)
                break
            await asyncio.sleep(_POLL_SECONDS)
        # 4. Collect the exit status and the last output.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.exited.wait(), _EXIT_WAIT_SECONDS)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.settled.wait(), _DRAIN_GRACE_SECONDS)
        if self.running and self.exited.is_set():
            # 5. Something unseen outside the group still holds the pipes: stop listening to it.
            for spool in self.spools():
                self.close_pipe(spool)
            self.maybe_settle()
        # 6. SIGKILL takes a moment too: wait (bounded) until nothing is left, so the answer
        #    and the shutdown are true.
        give_up = loop.time() + _EXIT_WAIT_SECONDS
        while self.exited.is_set() and self.check_descendants(ProcessTable.read()) != []:
            if loop.time() >= give_up:
                break
            await asyncio.sleep(_POLL_SECONDS)


def descendants_fields(pids: list[int] | None) -> dict[str, Any]:
    """`descendants_running` and, when known, `descendant_pids`, from what a look found."""
    if pids == []:
        return {"descendants_running": False}
    return {"descendants_running": True} | ({} if pids is None else {"descendant_pids": pids})


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
