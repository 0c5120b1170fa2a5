"""Shell sessions for herdr_exec, herdr_exec_start, herdr_exec_read and herdr_exec_kill.

A session is one `bash -c <command>` run as the workstation user, in the environment their
login profile sets up (captured once, see `login_environment`), in a given working directory,
in its own process group (so a kill reaches the whole tree), with stdin from /dev/null. This
is a real shell with the user's full rights; nothing here is a sandbox.

Capture design
--------------
`start` is synchronous: it spawns the process with `subprocess.Popen` and, before returning,
registers both pipes (made non-blocking) with the event loop's `add_reader`. Each time a pipe
is readable the loop reads one chunk and writes it at once, with `os.write`, to the session's
spool file (`<spool_dir>/<session_id>/stdout` and `.../stderr`, directory 0700, files 0600).
One daemon thread per session blocks in `wait()` and hands the exit status to the loop with
`call_soon_threadsafe` (the same thing asyncio's own child watcher does). Consequences:

- No deadlock on full pipes: the event loop drains both pipes continuously, whatever the
  reader of the session does, and nothing accumulates in memory.
- The cap holds while streaming: once `max_output_bytes` of a stream are on disk, further
  bytes are counted in `total_bytes` but dropped (`dropped_bytes` says how many).
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
A session owns every process it starts (see `session_processes` for how they are found: the
process group everywhere, plus, on Linux, every process still carrying the session's
`HERDR_MCP_EXEC_SESSION` variable). When the shell exits, the session looks for processes it
left behind; `run`, `read` and `kill` answer `descendants_running` (null while the shell runs,
then true or false) and, where they can be listed, `descendant_pids`. A finished session with
descendants is watched every `_DESCENDANT_POLL_SECONDS` until they are gone, is neither pruned
nor replaced meanwhile, and `kill` and `shutdown` stop them. On Linux its shell stays an
unreaped zombie until then, so the group id is never someone else's when it is signalled.

Kill sends SIGTERM to the process group and to the session's processes outside it, waits up to
`grace_ms` for the session to settle and nothing of it to be alive (zombies do not count:
orphans are not always reaped quickly), then sends SIGKILL to whatever is left. A process that
escaped unseen and still holds a pipe is cut off by closing our ends of the pipes.

Finished sessions stay readable for `retention_seconds`; pruning is lazy (on start, run and
read) and removes the spool directory. At most `max_sessions` are kept: starting another one
prunes the oldest finished session without descendants, and is refused with
`too_many_sessions` when there is none. Each session directory also holds `metadata.json`
(command, cwd, pid, times, exit status), replaced atomically on start and on finish, so a later
runtime can find old sessions.

Surviving a restart
-------------------
With a `StateStore`, every session also has an `exec_sessions` row in `state.db`: inserted at
start (command, cwd, pid, the pid's identity, this runtime instance, optionally the ledger
operation it carries out) and updated when it settles (exit status, totals, dropped bytes). A
later runtime answers `read`, `kill` and `result_of` for sessions it does not hold in memory
from that row and the spool files:

- A finished session stays readable until its retention ends, exactly as before the restart.
- A session whose row still says running but belongs to another runtime instance when this one
  starts is `lost`: its pipes died with the runtime that drained them, so its output up to that
  moment is all there will ever be. It reads as `running: false, lost: true, exit_code: null`.
  (If that other runtime is in fact still alive, its own finish update wins over `lost`.)
- Killing a lost session signals its process group only when the pid still names the very
  process that was started (same boot, same kernel start time); when that cannot be confirmed
  nothing is sent to the group, and the answer's `kill_result` says what was done. Processes
  that carry the session's variable (Linux) are its own whatever happened to the group: `read`
  reports them and `kill` stops them, for finished sessions too.
- Retention pruning deletes expired rows together with their spool directories.

Database writes are best effort (a failure is logged; the session itself goes on) and take well
under a millisecond, so they run on the event loop.

Everything here runs on the runtime's event loop: `start` and `read` are plain methods that
must be called from a coroutine on that loop (they never block on the process); `run`, `kill`
and `shutdown` are coroutines.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.login_environment import LoginEnvironment, ShellLaunch
from herdr_mcp.runtime.session_processes import (
    SESSION_ENV,
    ProcessTable,
    exit_fd,
    exited_status,
    group_alive,
    orphan_group_status,
    process_identity,
    signal_group,
    signal_marked,
    start_ticks,
    wait_keeping_zombie,
)
from herdr_mcp.state.store import StateStore, new_runtime_instance

__all__ = [
    "DEFAULT_GRACE_MS",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_READ_BYTES",
    "DEFAULT_RETENTION_SECONDS",
    "ExecSessions",
    "KillResult",
]

_log = logging.getLogger(__name__)

# Per stream, on disk. Large enough for a full build log, small enough that a runaway
# `yes` cannot fill the disk before somebody notices.
DEFAULT_MAX_OUTPUT_BYTES = 50 * 1024 * 1024
# The catalog default of herdr_exec_read.max_bytes.
DEFAULT_READ_BYTES = 65536
# The catalog default of herdr_exec_kill.grace_ms.
DEFAULT_GRACE_MS = 2000
DEFAULT_RETENTION_SECONDS = 3600.0
DEFAULT_MAX_SESSIONS = 100

# The catalog maximum of herdr_exec_read.max_bytes; run() honours the same bound.
_MAX_READ_BYTES = 262144
# After SIGKILL the leader dies at once unless it is stuck in the kernel; do not wait forever.
_EXIT_WAIT_SECONDS = 5.0
# Once the process is gone, how long pipes may stay open before we close our ends.
_DRAIN_GRACE_SECONDS = 1.0
_POLL_SECONDS = 0.02
# How often a finished session's leftover processes are looked at: they are reported and
# killable at any moment regardless; this only bounds how long a zombie shell is kept after
# they end (and, where shells are not kept, the window in which a group id could be reused).
_DESCENDANT_POLL_SECONDS = 1.0
# One read per readiness callback; asyncio's own pipe transports use the same size.
_PIPE_CHUNK = 256 * 1024
# What a session directory holds.
_SPOOL_FILES = ("stdout", "stderr", "metadata.json", ".metadata.json.tmp")
# The longest UTF-8 sequence, minus one: how far a chunk end may have to move.
_UTF8_LOOKAHEAD = 3

StreamName = Literal["stdout", "stderr"]
StreamChoice = Literal["stdout", "stderr", "both"]
#: What killing a session of an earlier runtime did (`kill_result` of its answer).
KillResult = Literal["terminated", "killed", "already_gone", "unverified"]

_SESSION_ID = re.compile(r"x[0-9a-f]{16}")
_KILL_MESSAGES: dict[KillResult, str] = {
    "terminated": "Processes of the session were still running and stopped on SIGTERM.",
    "killed": "Processes of the session were still running and needed SIGKILL after the grace period.",
    "already_gone": "No process of this session is running any more; nothing was sent.",
    "unverified": (
        "A process that may belong to this session still exists, but it cannot be confirmed to be the "
        "one that was started (its pid may have been reused), so nothing was sent; check it with ps "
        "and stop it by hand if it is yours."
    ),
}


def _new_session_id() -> str:
    return "x" + secrets.token_hex(8)


def _epoch_ms() -> int:
    return int(time.time() * 1000)


def _iso_from_ms(epoch_ms: int) -> str:
    return (
        datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def _utf8_sequence_length(lead: int) -> int:
    if lead < 0x80:
        return 1
    if 0xC0 <= lead < 0xE0:
        return 2
    if 0xE0 <= lead < 0xF0:
        return 3
    if 0xF0 <= lead < 0xF8:
        return 4
    return 1  # a stray continuation or invalid byte: it stands alone


def _incomplete_tail(chunk: bytes) -> tuple[int, int] | None:
    """(start, length) of a UTF-8 sequence cut off at the end of `chunk`, or None."""
    for index in range(len(chunk) - 1, max(len(chunk) - 5, -1), -1):
        byte = chunk[index]
        if byte & 0xC0 == 0x80:
            continue
        length = _utf8_sequence_length(byte)
        return (index, length) if len(chunk) - index < length else None
    return None


def utf8_chunk_length(data: bytes, limit: int, *, final: bool) -> int:
    """How many leading bytes of `data` to return so that no UTF-8 sequence is split.

    `data` holds the bytes available from the read position (a few more than `limit` when
    there are). The answer is at most `limit`, backed off to a sequence boundary, except when
    a single sequence is longer than `limit`: then that whole sequence (at most 4 bytes) is
    returned so the reader always makes progress. `final` says that no byte will ever follow
    `data`; an incomplete sequence at the very end is then returned as it is.
    """
    end = min(limit, len(data))
    if end == len(data) and final:
        return end
    tail = _incomplete_tail(data[:end])
    if tail is None:
        return end
    start, length = tail
    if start > 0:
        return start
    if length <= len(data):
        return length
    return len(data) if final else 0


@dataclass
class _Spool:
    """One captured stream: the pipe we drain and the capped 0600 file it goes to."""

    path: Path
    cap: int
    fd: int | None
    pipe: IO[bytes] | None = None
    total: int = 0
    stored: int = 0
    eof: bool = False
    write_error: str | None = None

    @classmethod
    def create(cls, path: Path, cap: int) -> _Spool:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
        return cls(path=path, cap=cap, fd=os.open(path, flags, 0o600))

    @property
    def dropped(self) -> int:
        return self.total - self.stored

    def append(self, data: bytes) -> None:
        self.total += len(data)
        room = self.cap - self.stored
        if room <= 0 or self.fd is None:
            return
        pending = memoryview(data)[:room]
        try:
            while pending:
                written = os.write(self.fd, pending)
                self.stored += written
                pending = pending[written:]
        except OSError as exc:
            # A full or broken disk must not stop the pipe from being drained; the rest of
            # the stream counts as dropped.
            self.write_error = f"{type(exc).__name__}: {exc}"
            self.close_file()

    def close_file(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def view(self, *, settled: bool) -> _StreamView:
        return _StreamView(self.path, self.stored, self.total, self.dropped, final=self.eof, settled=settled)


@dataclass(frozen=True)
class _StreamView:
    """What a read may see of one stream right now, whether it is live or from an earlier runtime."""

    path: Path
    stored: int  # bytes in the spool file that may be read
    total: int
    dropped: int
    final: bool  # no byte will ever be added to the file
    settled: bool  # the session is over: reading up to `stored` reaches the end

    def read(self, offset: int, limit: int) -> bytes:
        if offset >= self.stored:
            return b""
        try:
            with self.path.open("rb") as handle:
                handle.seek(offset)
                return handle.read(min(limit, self.stored - offset))
        except FileNotFoundError:  # the spool directory was removed by hand
            return b""


@dataclass
class _Session:
    session_id: str
    command: str
    cwd: Path
    directory: Path
    stdout: _Spool
    stderr: _Spool
    started_at: str
    started_monotonic: float
    started_epoch_ms: int
    loop: asyncio.AbstractEventLoop
    on_settle: Callable[[_Session], None] | None = None
    on_exited: Callable[[_Session], None] | None = None
    process: subprocess.Popen[bytes] | None = None
    # The shell's kernel start time (clock ticks): none of its processes started earlier.
    since: int | None = None
    # Set once nothing but (maybe) the shell is left: final, see check_descendants.
    descendants_gone: bool = False
    returncode: int | None = None
    finished_at: str | None = None
    finished_monotonic: float | None = None
    finished_epoch_ms: int | None = None
    escalated: bool = False
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    kill_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return not self.settled.is_set()

    @property
    def exit_code(self) -> int | None:
        if self.settled.is_set() and self.returncode is not None and self.returncode >= 0:
            return self.returncode
        return None

    @property
    def signal_name(self) -> str | None:
        if self.settled.is_set() and self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"SIG{-self.returncode}"
        return None

    def spools(self) -> tuple[_Spool, _Spool]:
        return self.stdout, self.stderr

    def view(self, stream: StreamName) -> _StreamView:
        return (self.stdout if stream == "stdout" else self.stderr).view(settled=not self.running)

    def state(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "running": self.running,
            "exit_code": self.exit_code,
            "signal": self.signal_name,
        }

    def attach(self, process: subprocess.Popen[bytes]) -> None:
        """Start draining the process's pipes on the loop and watching for its exit."""
        self.process = process
        for spool, pipe in ((self.stdout, process.stdout), (self.stderr, process.stderr)):
            assert pipe is not None  # both are PIPE in _spawn
            spool.pipe = pipe
            os.set_blocking(pipe.fileno(), False)
            self.loop.add_reader(pipe.fileno(), self.on_readable, spool)
        pidfd = exit_fd(process.pid)
        if pidfd is None:
            threading.Thread(
                target=self._wait_for_exit, args=(process,), name=f"exec-wait-{self.session_id}", daemon=True
            ).start()
        else:
            self.loop.add_reader(pidfd, self._on_exit_fd, pidfd, process.pid)

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

    def on_readable(self, spool: _Spool) -> None:
        if spool.pipe is None:
            return
        try:
            data = os.read(spool.pipe.fileno(), _PIPE_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            spool.append(data)
        else:
            self.close_pipe(spool)
            self.maybe_settle()

    def close_pipe(self, spool: _Spool) -> None:
        if spool.pipe is not None:
            self.loop.remove_reader(spool.pipe.fileno())
            spool.pipe.close()
            spool.pipe = None
        spool.eof = True
        spool.close_file()

    def on_exit(self, returncode: int) -> None:
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
        pids = table.marked(self.session_id, self.since)
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
        if running:
            return pids
        self.descendants_gone = True
        self.reap()
        return []

    def has_processes(self) -> bool:
        """Whether anything of this session may still run: its shell or what it left behind."""
        if self.running:
            return True
        return not self.descendants_gone and self.check_descendants(ProcessTable.read()) != []

    def descendants_answer(self) -> dict[str, Any]:
        """`descendants_running` (null while the shell runs) and `descendant_pids` if known."""
        if not self.exited.is_set():
            return {"descendants_running": None}
        return _descendants_answer(
            self.check_descendants(ProcessTable.read() if not self.descendants_gone else None)
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
            self.process.poll()

    def maybe_settle(self) -> None:
        if self.settled.is_set() or not self.exited.is_set():
            return
        if not (self.stdout.eof and self.stderr.eof):
            return
        self.finished_epoch_ms = _epoch_ms()
        self.finished_at = _iso_from_ms(self.finished_epoch_ms)
        self.finished_monotonic = time.monotonic()
        self.settled.set()
        self.write_metadata()
        if self.on_settle is not None:
            self.on_settle(self)

    def metadata(self) -> dict[str, Any]:
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


def _descendants_answer(pids: list[int] | None) -> dict[str, Any]:
    if pids == []:
        return {"descendants_running": False}
    return {"descendants_running": True} | ({} if pids is None else {"descendant_pids": pids})


@dataclass(frozen=True)
class _StoredSession:
    """A session known only from its `exec_sessions` row (started by an earlier runtime)."""

    session_id: str
    directory: Path
    state: Literal["running", "finished", "lost"]
    pid: int | None
    pid_start: str | None
    exit_code: int | None
    signal_name: str | None
    totals: dict[StreamName, int]
    dropped: dict[StreamName, int]
    started_at_ms: int
    finished_at_ms: int | None

    @classmethod
    def from_row(cls, row: sqlite3.Row, spool_dir: Path) -> _StoredSession:
        return cls(
            session_id=row["session_id"],
            directory=spool_dir / row["session_id"],
            state=row["state"],
            pid=row["pid"],
            pid_start=row["pid_start"],
            exit_code=row["exit_code"],
            signal_name=row["signal"],
            totals={"stdout": row["stdout_total"], "stderr": row["stderr_total"]},
            dropped={"stdout": row["stdout_dropped"], "stderr": row["stderr_dropped"]},
            started_at_ms=row["started_at"],
            finished_at_ms=row["finished_at"],
        )

    @property
    def running(self) -> bool:
        """Still running under another, live runtime (a lost session is not running)."""
        return self.state == "running"

    def view(self, stream: StreamName) -> _StreamView:
        path = self.directory / stream
        try:
            size = path.stat().st_size
        except OSError:
            size = 0
        if self.state == "finished":
            total, dropped = self.totals[stream], self.dropped[stream]
            return _StreamView(path, min(size, total - dropped), total, dropped, final=True, settled=True)
        # Lost: what is in the file is all there is (the totals were never recorded).
        # Running: the other runtime is still appending.
        return _StreamView(path, size, size, 0, final=not self.running, settled=not self.running)

    def state_answer(self) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "session_id": self.session_id,
            "running": self.running,
            "exit_code": self.exit_code,
            "signal": self.signal_name,
        }
        if self.state == "lost":
            answer["lost"] = True
        return answer

    def marked(self, table: ProcessTable | None) -> set[int] | None:
        """Live processes carrying this session's variable, its shell included; None where they
        cannot be found (no /proc) or another runtime still owns the session."""
        if table is None or self.state == "running":
            return None
        return table.marked(self.session_id, start_ticks(self.pid_start))

    def descendants_answer(self) -> dict[str, Any]:
        """As for a live session; a lost shell that still runs is not its own descendant."""
        marked = self.marked(ProcessTable.read())
        if marked is None:
            return {"descendants_running": None}
        return _descendants_answer(sorted(marked - {self.pid if self.pid is not None else -1}))


_SELECT_SESSION = (
    "SELECT session_id, state, pid, pid_start, exit_code, signal, stdout_total, stderr_total, "
    "stdout_dropped, stderr_dropped, started_at, finished_at FROM exec_sessions WHERE session_id = ?"
)


class _SessionRecords:
    """The `exec_sessions` rows of one runtime instance. Writes are best effort: a database error
    is logged and the session goes on in memory; reads raise ToolError `state_unavailable`."""

    def __init__(self, store: StateStore, runtime_instance: str, spool_dir: Path) -> None:
        self._store = store
        self._instance = runtime_instance
        self._spool_dir = spool_dir

    def mark_lost(self) -> None:
        """Every session another runtime left running: its pipes are gone with it."""
        with self._best_effort("mark lost sessions"), self._store.transaction() as tx:
            tx.execute(
                "UPDATE exec_sessions SET state = 'lost', finished_at = ? "
                "WHERE state = 'running' AND runtime_instance != ?",
                (_epoch_ms(), self._instance),
            )

    def insert(self, session: _Session, op_id: str | None, pid_start: str | None) -> None:
        with self._best_effort(f"record session {session.session_id}"), self._store.transaction() as tx:
            tx.execute(
                "INSERT INTO exec_sessions (session_id, op_id, command, cwd, pid, pid_start, "
                "runtime_instance, state, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?)",
                (
                    session.session_id,
                    op_id,
                    session.command,
                    str(session.cwd),
                    session.pid,
                    pid_start,
                    self._instance,
                    session.started_epoch_ms,
                ),
            )

    def finish(self, session: _Session) -> None:
        # Whatever the row says (another runtime may have marked it lost meanwhile), the owner knows.
        with (
            self._best_effort(f"record the end of session {session.session_id}"),
            self._store.transaction() as tx,
        ):
            tx.execute(
                "UPDATE exec_sessions SET state = 'finished', finished_at = ?, exit_code = ?, signal = ?, "
                "stdout_total = ?, stderr_total = ?, stdout_dropped = ?, stderr_dropped = ? "
                "WHERE session_id = ?",
                (
                    session.finished_epoch_ms,
                    session.exit_code,
                    session.signal_name,
                    session.stdout.total,
                    session.stderr.total,
                    session.stdout.dropped,
                    session.stderr.dropped,
                    session.session_id,
                ),
            )

    def load(self, session_id: str) -> _StoredSession | None:
        row = self._read(_SELECT_SESSION, (session_id,))
        return None if not row else _StoredSession.from_row(row[0], self._spool_dir)

    def expired(self, horizon_ms: int) -> list[str]:
        """Sessions over (finished or lost) at or before `horizon_ms`."""
        rows = self._read(
            "SELECT session_id FROM exec_sessions WHERE finished_at <= ? AND state != 'running'",
            (horizon_ms,),
        )
        return [row[0] for row in rows]

    def delete(self, session_ids: list[str]) -> None:
        with self._best_effort("forget expired sessions"), self._store.transaction() as tx:
            tx.executemany("DELETE FROM exec_sessions WHERE session_id = ?", [(sid,) for sid in session_ids])

    def session_of_operation(self, op_id: str) -> str | None:
        rows = self._read(
            "SELECT session_id FROM exec_sessions WHERE op_id = ? ORDER BY started_at DESC LIMIT 1", (op_id,)
        )
        return rows[0][0] if rows else None

    def _read(self, query: str, parameters: tuple[Any, ...]) -> list[sqlite3.Row]:
        try:
            return self._store.connection().execute(query, parameters).fetchall()
        except sqlite3.Error as exc:
            raise ToolError(
                "state_unavailable",
                f"The runtime's state database could not be read ({exc}); retry, and restart the runtime "
                "if it persists.",
            ) from exc

    @contextlib.contextmanager
    def _best_effort(self, what: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error:
            _log.warning("state.db: could not %s", what, exc_info=True)


class ExecSessions:
    """Owns every shell session of one runtime: start, capture, read, kill, prune.

    Refusals raise `ToolError` with these codes: `session_not_found`, `too_many_sessions`,
    `cwd_not_found`, `shell_unavailable`, `exec_failed`, `invalid_arguments`, and
    `state_unavailable` (a session not in memory could not be looked up in `state.db`).
    """

    def __init__(
        self,
        spool_dir: Path,
        *,
        store: StateStore | None = None,
        runtime_instance: str | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        retention_seconds: float = DEFAULT_RETENTION_SECONDS,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        login_environment: LoginEnvironment | None = None,
    ) -> None:
        """With `store`, sessions are recorded in `state.db` under `runtime_instance` (a fresh
        name when not given) and sessions of earlier runtimes stay readable; sessions other
        instances left running are marked lost now. Commands run in `login_environment` (one
        of its own when not given)."""
        if max_output_bytes < 0 or max_sessions < 1 or retention_seconds < 0:
            raise ValueError("max_output_bytes, retention_seconds must be >= 0 and max_sessions >= 1")
        self._spool_dir = spool_dir
        self._max_output_bytes = max_output_bytes
        self._retention_seconds = retention_seconds
        self._max_sessions = max_sessions
        self._sessions: dict[str, _Session] = {}
        self._login = login_environment if login_environment is not None else LoginEnvironment((SESSION_ENV,))
        self._watcher: asyncio.Task[None] | None = None
        self.runtime_instance = runtime_instance if runtime_instance is not None else new_runtime_instance()
        self._records = None if store is None else _SessionRecords(store, self.runtime_instance, spool_dir)
        if self._records is not None:
            self._records.mark_lost()
            self._prune_records()

    def start(self, cwd: Path, command: str, *, op_id: str | None = None) -> dict[str, Any]:
        """Start `bash -c command` in `cwd` as a background session.

        Synchronous, but must be called on the running event loop that will drain the
        output; await `prepare` first so that a capture of the login environment, when one is
        due, does not block the loop. `op_id` links the session to the ledger operation it
        carries out (it must exist in `state.db`). Returns `{"session_id", "pid", "running":
        True, "started_at"}`.
        Raises ToolError `cwd_not_found`, `too_many_sessions`, `shell_unavailable` or `exec_failed`.
        """
        session = self._spawn(cwd, command, op_id)
        return {
            "session_id": session.session_id,
            "pid": session.pid,
            "running": True,
            "started_at": session.started_at,
        }

    async def run(
        self,
        cwd: Path,
        command: str,
        timeout_ms: int,
        *,
        max_bytes: int = DEFAULT_READ_BYTES,
        op_id: str | None = None,
    ) -> dict[str, Any]:
        """Run a command and wait up to `timeout_ms` for it to finish.

        Finished in time: `{"session_id", "completed": True, "exit_code", "signal", "stdout",
        "stderr", "stdout_total_bytes", "stderr_total_bytes", "truncated", "duration_ms",
        "descendants_running"}` plus `stdout_next_offset`/`stderr_next_offset` (where a
        herdr_exec_read would continue); when the shell left processes running,
        `descendants_running` is true and `descendant_pids` (where known) and `message` say
        which and how to stop them. Otherwise the command keeps running as a background session
        and the answer is `{"session_id", "completed": False, "running": True, ...the same
        output keys..., "message"}`. `stdout`/`stderr` are the first `max_bytes` of each stream, never ending
        inside a UTF-8 sequence. `op_id` as for `start`. Raises what `start` raises, and
        `invalid_arguments`.
        """
        if timeout_ms < 1:
            raise ToolError("invalid_arguments", "timeout_ms must be at least 1; pass a positive timeout.")
        _check_read_bytes(max_bytes)
        bash = shutil.which("bash")
        shell = None if bash is None else await self._login.shell_async(bash)
        session = self._spawn(cwd, command, op_id, shell)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(session.settled.wait(), timeout_ms / 1000)
        end = session.finished_monotonic if session.finished_monotonic is not None else time.monotonic()
        duration_ms = round((end - session.started_monotonic) * 1000)
        if not session.running:
            answer = _completed_answer(session.state(), session.view, max_bytes, duration_ms)
            answer |= session.descendants_answer()
            if answer["descendants_running"]:
                pids = answer.get("descendant_pids")
                answer["message"] = (
                    "The command finished, but processes it started are still running"
                    f"{f' (pids {pids})' if pids else ''}; they belong to session {session.session_id}: "
                    "watch them with herdr_exec_read, stop them with herdr_exec_kill; they are also "
                    "stopped when the runtime stops."
                )
            return answer
        result = _output_answer(
            {"session_id": session.session_id, "completed": False, "running": True},
            session.view,
            max_bytes,
            duration_ms,
        )
        result |= session.descendants_answer()
        result["message"] = (
            f"The command is still running after {timeout_ms} ms as background session "
            f"{session.session_id}; read with herdr_exec_read from stdout_offset="
            f"{result['stdout_next_offset']} and stderr_offset={result['stderr_next_offset']}, "
            "or stop it with herdr_exec_kill."
        )
        return result

    def read(
        self,
        session_id: str,
        *,
        stream: StreamChoice = "both",
        stdout_offset: int = 0,
        stderr_offset: int = 0,
        max_bytes: int = DEFAULT_READ_BYTES,
    ) -> dict[str, Any]:
        """Read a session's output from byte offsets.

        Returns `{"session_id", "running", "exit_code", "signal", "descendants_running"}`
        (`descendant_pids` too when some run and can be listed; see `run`) plus, for each
        requested stream, `{"text", "offset", "next_offset", "total_bytes", "dropped_bytes", "eof"}`.
        `next_offset` counts the bytes actually returned (a chunk never ends inside a UTF-8
        sequence); an offset at or past the stored bytes gives empty text; `eof` is true once
        the session has finished and everything stored has been read. A session an earlier
        runtime left running also has `lost: true` (its output up to the restart is readable;
        totals are what was stored). Raises ToolError `session_not_found`, `invalid_arguments`
        or `state_unavailable`.
        """
        self._prune()
        session = self._lookup(session_id)
        if stream not in ("stdout", "stderr", "both"):
            raise ToolError("invalid_arguments", "stream must be stdout, stderr or both.")
        if stdout_offset < 0 or stderr_offset < 0:
            raise ToolError("invalid_arguments", "Offsets are byte offsets and must be 0 or more.")
        _check_read_bytes(max_bytes)
        result = session.state() if isinstance(session, _Session) else session.state_answer()
        result |= session.descendants_answer()
        if stream in ("stdout", "both"):
            result["stdout"] = _chunk(session.view("stdout"), stdout_offset, max_bytes)
        if stream in ("stderr", "both"):
            result["stderr"] = _chunk(session.view("stderr"), stderr_offset, max_bytes)
        return result

    async def kill(self, session_id: str, grace_ms: int = DEFAULT_GRACE_MS) -> dict[str, Any]:
        """Stop a session: SIGTERM to its process group, SIGKILL after `grace_ms` if needed.

        Processes the session left running after its shell exited are stopped the same way.
        Returns the final state `{"session_id", "running", "exit_code", "signal",
        "stdout_total_bytes", "stderr_total_bytes", "already_finished", "escalated",
        "descendants_running"}`; `escalated` says SIGKILL was needed. A session with nothing
        left running is not an error (`already_finished: True`, nothing sent). For a session an
        earlier runtime left running (lost, or still owned by another runtime) the group is
        signalled only if its pid still names the process that was started, and processes
        carrying the session's variable are stopped (finished sessions too); the answer adds
        `kill_result` (`terminated`, `killed`, `already_gone` or `unverified`: nothing sent to the
        group) and a `message`. Raises ToolError `session_not_found`, `invalid_arguments` or
        `state_unavailable`.
        """
        if grace_ms < 0:
            raise ToolError("invalid_arguments", "grace_ms must be 0 or more.")
        session = self._lookup(session_id)
        if isinstance(session, _StoredSession):
            return await _kill_stored(session, grace_ms)
        already_finished = not session.has_processes()
        await self._terminate(session, grace_ms)
        return (
            session.state()
            | {
                "stdout_total_bytes": session.stdout.total,
                "stderr_total_bytes": session.stderr.total,
                "already_finished": already_finished,
                "escalated": session.escalated,
            }
            | session.descendants_answer()
        )

    def result_of(self, session_id: str, *, max_bytes: int = DEFAULT_READ_BYTES) -> dict[str, Any] | None:
        """The answer `run()` gives for a completed command, for a session that has finished
        (in memory, or from `state.db` and its spool after a restart); None when the session is
        unknown, still running or lost. Lets a replay of an idempotent exec answer in full.
        Raises ToolError `invalid_arguments` or `state_unavailable`.
        """
        _check_read_bytes(max_bytes)
        session = self._sessions.get(session_id)
        if session is not None:
            if session.finished_monotonic is None:  # still running
                return None
            duration_ms = round((session.finished_monotonic - session.started_monotonic) * 1000)
            answer = _completed_answer(session.state(), session.view, max_bytes, duration_ms)
            return answer | session.descendants_answer()
        stored = self._records.load(session_id) if self._records is not None else None
        if stored is None or stored.state != "finished" or stored.finished_at_ms is None:
            return None
        duration_ms = stored.finished_at_ms - stored.started_at_ms
        answer = _completed_answer(stored.state_answer(), stored.view, max_bytes, duration_ms)
        return answer | stored.descendants_answer()

    async def prepare(self) -> None:
        """Capture the login environment in a worker thread if the next command would need a
        capture (the first one, or the profile changed); see `login_environment`."""
        bash = shutil.which("bash")
        if bash is not None:
            await self._login.shell_async(bash)

    def session_of_operation(self, op_id: str) -> str | None:
        """The session that carries out ledger operation `op_id`, if one was started (needs a
        store; used to reconcile operations after a restart). Raises ToolError `state_unavailable`."""
        return self._records.session_of_operation(op_id) if self._records is not None else None

    async def shutdown(self, grace_ms: int = DEFAULT_GRACE_MS) -> None:
        """Kill every session that runs, or whose shell left processes running (TERM, then
        KILL after `grace_ms`), and wait for them.

        Spool files and metadata stay on disk (and their rows record how they ended).
        """
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        sessions = list(self._sessions.values())
        await asyncio.gather(*(self._terminate(session, grace_ms) for session in sessions))
        for session in sessions:
            session.reap()

    def _spawn(
        self, cwd: Path, command: str, op_id: str | None, shell: ShellLaunch | None = None
    ) -> _Session:
        loop = asyncio.get_running_loop()
        self._prune()
        self._make_room()
        if not cwd.is_dir():
            raise ToolError(
                "cwd_not_found", f"The working directory {cwd} does not exist; pick an existing root."
            )
        bash = shutil.which("bash")
        if bash is None:
            raise ToolError("shell_unavailable", "bash is not installed on this workstation; install bash.")
        self._spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        session_id = _new_session_id()
        directory = self._spool_dir / session_id
        directory.mkdir(mode=0o700)
        directory.chmod(0o700)
        started_ms = _epoch_ms()
        session = _Session(
            session_id=session_id,
            command=command,
            cwd=cwd,
            directory=directory,
            stdout=_Spool.create(directory / "stdout", self._max_output_bytes),
            stderr=_Spool.create(directory / "stderr", self._max_output_bytes),
            started_at=_iso_from_ms(started_ms),
            started_monotonic=time.monotonic(),
            started_epoch_ms=started_ms,
            loop=loop,
            on_settle=self._on_settle,
            on_exited=self._on_exited,
        )
        if shell is None or shell.bash != bash:
            shell = self._login.shell(bash)
        try:
            process = subprocess.Popen(
                shell.argv(command),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env={**shell.env, SESSION_ENV: session_id},
                umask=-1 if shell.umask is None else shell.umask,
            )
        except (OSError, ValueError) as exc:
            for spool in session.spools():
                spool.close_file()
            shutil.rmtree(directory, ignore_errors=True)
            raise ToolError(
                "exec_failed", f"The command could not be started ({exc}); check the root."
            ) from exc
        # Before attach() starts the thread that reaps it: until then the pid cannot be reused.
        pid_start = process_identity(process.pid)
        session.since = start_ticks(pid_start)
        session.attach(process)
        self._sessions[session_id] = session
        session.write_metadata()
        if self._records is not None:
            self._records.insert(session, op_id, pid_start)
        return session

    def _on_settle(self, session: _Session) -> None:
        if self._records is not None:
            self._records.finish(session)

    def _on_exited(self, session: _Session) -> None:
        # Look at once (most commands leave nothing, and their shell is reaped now); watch the
        # rest until it is gone.
        if session.check_descendants(ProcessTable.read()) != [] and (
            self._watcher is None or self._watcher.done()
        ):
            self._watcher = session.loop.create_task(self._watch_descendants(), name="exec-descendants")

    async def _watch_descendants(self) -> None:
        """Look at what exited shells left behind until none of it runs any more."""
        while True:
            await asyncio.sleep(_DESCENDANT_POLL_SECONDS)
            left = [s for s in self._sessions.values() if s.exited.is_set() and not s.descendants_gone]
            if not left:
                return
            table = ProcessTable.read()
            for session in left:
                session.check_descendants(table)

    async def _terminate(self, session: _Session, grace_ms: int) -> None:
        async with session.kill_lock:
            if session.has_processes():
                await self._stop(session, grace_ms)

    async def _stop(self, session: _Session, grace_ms: int) -> None:
        loop = asyncio.get_running_loop()
        # 1. Ask politely: SIGTERM to the process group and the session's processes outside it.
        session.send(signal.SIGTERM)
        # 2. Wait for the session to settle and nothing of it to be alive, up to the grace period.
        deadline = loop.time() + grace_ms / 1000
        while not (session.settled.is_set() and not session.survivors(ProcessTable.read())[0]):
            if loop.time() >= deadline:
                # 3. Insist: SIGKILL to whatever is left.
                session.escalated = True
                session.send(signal.SIGKILL)
                break
            await asyncio.sleep(_POLL_SECONDS)
        # 4. Collect the exit status and the last output.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(session.exited.wait(), _EXIT_WAIT_SECONDS)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(session.settled.wait(), _DRAIN_GRACE_SECONDS)
        if session.running and session.exited.is_set():
            # 5. Something unseen outside the group still holds the pipes: stop listening to it.
            for spool in session.spools():
                session.close_pipe(spool)
            session.maybe_settle()
        # 6. SIGKILL takes a moment too: wait (bounded) until nothing is left, so the answer
        #    and the shutdown are true.
        give_up = loop.time() + _EXIT_WAIT_SECONDS
        while session.exited.is_set() and session.check_descendants(ProcessTable.read()) != []:
            if loop.time() >= give_up:
                break
            await asyncio.sleep(_POLL_SECONDS)

    def _lookup(self, session_id: str) -> _Session | _StoredSession:
        """The live session, or the row of one an earlier runtime started."""
        session = self._sessions.get(session_id)
        if session is not None:
            return session
        if self._records is not None and _SESSION_ID.fullmatch(session_id):
            stored = self._records.load(session_id)
            if stored is not None:
                return stored
        raise ToolError(
            "session_not_found",
            f"No session {session_id!r}: it never existed or expired; start the command again.",
            session_id=session_id,
        )

    def _prune(self) -> None:
        horizon = time.monotonic() - self._retention_seconds
        for session in list(self._sessions.values()):
            finished = session.finished_monotonic
            if finished is not None and finished <= horizon and session.descendants_gone:
                self._discard(session)
        self._prune_records()

    def _prune_records(self) -> None:
        """Forget sessions of earlier runtimes whose retention has ended: rows and spool files."""
        if self._records is None:
            return
        horizon_ms = _epoch_ms() - round(self._retention_seconds * 1000)
        expired = [sid for sid in self._records.expired(horizon_ms) if sid not in self._sessions]
        if not expired:
            return
        self._records.delete(expired)
        for session_id in expired:
            _remove_spool(self._spool_dir / session_id)

    def _make_room(self) -> None:
        while len(self._sessions) >= self._max_sessions:
            finished = [s for s in self._sessions.values() if not s.running and s.descendants_gone]
            if not finished:
                raise ToolError(
                    "too_many_sessions",
                    f"All {self._max_sessions} sessions, or processes they started, are still running; "
                    "stop one with herdr_exec_kill or wait for one to finish.",
                )
            self._discard(min(finished, key=lambda session: session.finished_monotonic or 0.0))

    def _discard(self, session: _Session) -> None:
        del self._sessions[session.session_id]
        _remove_spool(session.directory)
        if self._records is not None:
            self._records.delete([session.session_id])


def _remove_spool(directory: Path) -> None:
    """Remove a session's spool directory: the files a session writes, then the directory (what
    else was put there falls back to rmtree). Runs on the loop at every new session once the
    limit is reached; rmtree's generic walk cost four times as much."""
    try:
        for name in _SPOOL_FILES:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / name)
        os.rmdir(directory)
    except FileNotFoundError:
        return
    except OSError:
        shutil.rmtree(directory, ignore_errors=True)


async def _kill_stored(session: _StoredSession, grace_ms: int) -> dict[str, Any]:
    """Kill a session this runtime holds no pipes of; see `ExecSessions.kill`."""
    answer = session.state_answer() | {
        "stdout_total_bytes": session.view("stdout").total,
        "stderr_total_bytes": session.view("stderr").total,
    }
    if session.state == "finished" and not session.marked(ProcessTable.read()):
        return answer | {"already_finished": True, "escalated": False} | session.descendants_answer()
    outcome = await _stop_orphan(session, grace_ms)
    if outcome != "unverified":
        answer["running"] = False
    return (
        answer
        | {
            "already_finished": outcome == "already_gone",
            "escalated": outcome == "killed",
            "kill_result": outcome,
            "message": _KILL_MESSAGES[outcome],
        }
        | session.descendants_answer()
    )


async def _stop_orphan(session: _StoredSession, grace_ms: int) -> KillResult:
    """TERM, then KILL after `grace_ms`, to what an earlier runtime's session left: its process
    group only when its pid still names the shell that was started (a lost session), and the
    processes carrying its variable (each checked again before the signal)."""
    status: Literal["alive", "gone", "unsure"] = "gone"
    if session.state == "lost" and session.pid is not None:
        status = orphan_group_status(session.pid, session.pid_start)
    group = session.pid if status == "alive" else None

    def outside() -> set[int]:
        table = ProcessTable.read()
        marked = session.marked(table) or set()
        return marked - table.group(group) if table is not None and group is not None else marked

    def left() -> bool:
        return (group is not None and group_alive(group)) or bool(outside())

    def send(signum: signal.Signals) -> None:
        if group is not None:
            signal_group(group, signum)
        for pid in sorted(outside()):
            signal_marked(pid, session.session_id, signum)

    if not left():
        return "unverified" if status == "unsure" else "already_gone"
    loop = asyncio.get_running_loop()
    send(signal.SIGTERM)
    deadline = loop.time() + grace_ms / 1000
    while left():
        if loop.time() >= deadline:
            send(signal.SIGKILL)
            give_up = loop.time() + _EXIT_WAIT_SECONDS
            while left() and loop.time() < give_up:
                await asyncio.sleep(_POLL_SECONDS)
            return "killed"
        await asyncio.sleep(_POLL_SECONDS)
    return "terminated"


def _check_read_bytes(max_bytes: int) -> None:
    if not 1 <= max_bytes <= _MAX_READ_BYTES:
        raise ToolError("invalid_arguments", f"max_bytes must be between 1 and {_MAX_READ_BYTES}.")


def _output_answer(
    head: dict[str, Any], view: Callable[[StreamName], _StreamView], max_bytes: int, duration_ms: int
) -> dict[str, Any]:
    """`head` plus the first `max_bytes` of both streams and their totals, as `run()` answers."""
    stdout, stderr = view("stdout"), view("stderr")
    out = _chunk(stdout, 0, max_bytes)
    err = _chunk(stderr, 0, max_bytes)
    return head | {
        "stdout": out["text"],
        "stderr": err["text"],
        "stdout_total_bytes": stdout.total,
        "stderr_total_bytes": stderr.total,
        "stdout_next_offset": out["next_offset"],
        "stderr_next_offset": err["next_offset"],
        "truncated": out["next_offset"] < stdout.total or err["next_offset"] < stderr.total,
        "duration_ms": duration_ms,
    }


def _completed_answer(
    state: dict[str, Any], view: Callable[[StreamName], _StreamView], max_bytes: int, duration_ms: int
) -> dict[str, Any]:
    head = {
        "session_id": state["session_id"],
        "completed": True,
        "exit_code": state["exit_code"],
        "signal": state["signal"],
    }
    return _output_answer(head, view, max_bytes, duration_ms)


def _chunk(view: _StreamView, offset: int, max_bytes: int) -> dict[str, Any]:
    data = view.read(offset, max_bytes + _UTF8_LOOKAHEAD)
    length = utf8_chunk_length(data, max_bytes, final=view.final)
    next_offset = offset + length
    return {
        "text": data[:length].decode("utf-8", errors="replace"),
        "offset": offset,
        "next_offset": next_offset,
        "total_bytes": view.total,
        "dropped_bytes": view.dropped,
        # Only once the session has settled, so that a reader who stops at eof has the exit status.
        "eof": view.settled and next_offset >= view.stored,
    }
