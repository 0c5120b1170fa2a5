"""Shell sessions for herdr_exec, herdr_exec_start, herdr_exec_read and herdr_exec_kill.

A session is one `bash -lc <command>` run as the workstation user, in a given working
directory, in its own process group (so a kill reaches the whole tree), with stdin from
/dev/null. This is a real shell with the user's full rights; nothing here is a sandbox.

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

Kill sends SIGTERM to the process group, waits up to `grace_ms` for the session to settle and
the group to have no live members (zombies do not count: orphans are not always reaped quickly),
then sends SIGKILL to the group. A child that escaped the group (setsid) and still holds a pipe
is cut off by closing our ends of the pipes.

Finished sessions stay readable for `retention_seconds`; pruning is lazy (on start, run and
read) and removes the spool directory. At most `max_sessions` are kept: starting another one
prunes the oldest finished session, and is refused with `too_many_sessions` when all of them
are running. Each session directory also holds `metadata.json` (command, cwd, pid, times, exit
status), replaced atomically on start and on finish, so a later runtime can find old sessions.

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
import secrets
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

from herdr_mcp.errors import ToolError

__all__ = [
    "DEFAULT_GRACE_MS",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_READ_BYTES",
    "DEFAULT_RETENTION_SECONDS",
    "ExecSessions",
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
# One read per readiness callback; asyncio's own pipe transports use the same size.
_PIPE_CHUNK = 256 * 1024
# The longest UTF-8 sequence, minus one: how far a chunk end may have to move.
_UTF8_LOOKAHEAD = 3

StreamName = Literal["stdout", "stderr"]
StreamChoice = Literal["stdout", "stderr", "both"]


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _new_session_id() -> str:
    return "x" + secrets.token_hex(8)


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

    def read(self, offset: int, limit: int) -> bytes:
        if offset >= self.stored:
            return b""
        with self.path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(min(limit, self.stored - offset))


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
    loop: asyncio.AbstractEventLoop
    process: subprocess.Popen[bytes] | None = None
    returncode: int | None = None
    finished_at: str | None = None
    finished_monotonic: float | None = None
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

    def attach(self, process: subprocess.Popen[bytes]) -> None:
        """Start draining the process's pipes on the loop and watching for its exit."""
        self.process = process
        for spool, pipe in ((self.stdout, process.stdout), (self.stderr, process.stderr)):
            assert pipe is not None  # both are PIPE in _spawn
            spool.pipe = pipe
            os.set_blocking(pipe.fileno(), False)
            self.loop.add_reader(pipe.fileno(), self.on_readable, spool)
        threading.Thread(
            target=self._wait_for_exit, args=(process,), name=f"exec-wait-{self.session_id}", daemon=True
        ).start()

    def _wait_for_exit(self, process: subprocess.Popen[bytes]) -> None:
        returncode = process.wait()
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
        self.maybe_settle()

    def maybe_settle(self) -> None:
        if self.settled.is_set() or not self.exited.is_set():
            return
        if not (self.stdout.eof and self.stderr.eof):
            return
        self.finished_at = _utc_now()
        self.finished_monotonic = time.monotonic()
        self.settled.set()
        self.write_metadata()

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


def _group_has_live_members(pgid: int) -> bool:
    """Whether any non-zombie process is still in process group `pgid`."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        # Fields after the parenthesised command name: state ppid pgrp ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 3 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


class ExecSessions:
    """Owns every shell session of one runtime: start, capture, read, kill, prune.

    Refusals raise `ToolError` with these codes: `session_not_found`, `too_many_sessions`,
    `cwd_not_found`, `shell_unavailable`, `exec_failed`, `invalid_argument`.
    """

    def __init__(
        self,
        spool_dir: Path,
        *,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        retention_seconds: float = DEFAULT_RETENTION_SECONDS,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        if max_output_bytes < 0 or max_sessions < 1 or retention_seconds < 0:
            raise ValueError("max_output_bytes, retention_seconds must be >= 0 and max_sessions >= 1")
        self._spool_dir = spool_dir
        self._max_output_bytes = max_output_bytes
        self._retention_seconds = retention_seconds
        self._max_sessions = max_sessions
        self._sessions: dict[str, _Session] = {}

    def start(self, cwd: Path, command: str) -> dict[str, Any]:
        """Start `bash -lc command` in `cwd` as a background session.

        Synchronous, but must be called on the running event loop that will drain the
        output. Returns `{"session_id", "pid", "running": True, "started_at"}`. Raises
        ToolError `cwd_not_found`, `too_many_sessions`, `shell_unavailable` or `exec_failed`.
        """
        session = self._spawn(cwd, command)
        return {
            "session_id": session.session_id,
            "pid": session.pid,
            "running": True,
            "started_at": session.started_at,
        }

    async def run(
        self, cwd: Path, command: str, timeout_ms: int, *, max_bytes: int = DEFAULT_READ_BYTES
    ) -> dict[str, Any]:
        """Run a command and wait up to `timeout_ms` for it to finish.

        Finished in time: `{"session_id", "completed": True, "exit_code", "signal", "stdout",
        "stderr", "stdout_total_bytes", "stderr_total_bytes", "truncated", "duration_ms"}`
        plus `stdout_next_offset`/`stderr_next_offset` (where a herdr_exec_read would continue).
        Otherwise the command keeps running as a background session and the answer is
        `{"session_id", "completed": False, "running": True, ...the same output keys...,
        "message"}`. `stdout`/`stderr` are the first `max_bytes` of each stream, never ending
        inside a UTF-8 sequence. Raises what `start` raises, and `invalid_argument`.
        """
        if timeout_ms < 1:
            raise ToolError("invalid_arguments", "timeout_ms must be at least 1; pass a positive timeout.")
        _check_read_bytes(max_bytes)
        session = self._spawn(cwd, command)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(session.settled.wait(), timeout_ms / 1000)
        now = time.monotonic()
        end = session.finished_monotonic if session.finished_monotonic is not None else now
        stdout = _chunk(session, session.stdout, 0, max_bytes)
        stderr = _chunk(session, session.stderr, 0, max_bytes)
        result: dict[str, Any] = {"session_id": session.session_id}
        if session.running:
            result |= {"completed": False, "running": True}
        else:
            result |= {"completed": True, "exit_code": session.exit_code, "signal": session.signal_name}
        result |= {
            "stdout": stdout["text"],
            "stderr": stderr["text"],
            "stdout_total_bytes": session.stdout.total,
            "stderr_total_bytes": session.stderr.total,
            "stdout_next_offset": stdout["next_offset"],
            "stderr_next_offset": stderr["next_offset"],
            "truncated": stdout["next_offset"] < session.stdout.total
            or stderr["next_offset"] < session.stderr.total,
            "duration_ms": round((end - session.started_monotonic) * 1000),
        }
        if session.running:
            result["message"] = (
                f"The command is still running after {timeout_ms} ms as background session "
                f"{session.session_id}; read with herdr_exec_read from stdout_offset="
                f"{stdout['next_offset']} and stderr_offset={stderr['next_offset']}, "
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

        Returns `{"session_id", "running", "exit_code", "signal"}` plus, for each requested
        stream, `{"text", "offset", "next_offset", "total_bytes", "dropped_bytes", "eof"}`.
        `next_offset` counts the bytes actually returned (a chunk never ends inside a UTF-8
        sequence); an offset at or past the stored bytes gives empty text; `eof` is true once
        the session has finished and everything stored has been read. Raises ToolError
        `session_not_found` or `invalid_argument`.
        """
        self._prune()
        session = self._get(session_id)
        if stream not in ("stdout", "stderr", "both"):
            raise ToolError("invalid_arguments", "stream must be stdout, stderr or both.")
        if stdout_offset < 0 or stderr_offset < 0:
            raise ToolError("invalid_arguments", "Offsets are byte offsets and must be 0 or more.")
        _check_read_bytes(max_bytes)
        result = self._state(session)
        if stream in ("stdout", "both"):
            result["stdout"] = _chunk(session, session.stdout, stdout_offset, max_bytes)
        if stream in ("stderr", "both"):
            result["stderr"] = _chunk(session, session.stderr, stderr_offset, max_bytes)
        return result

    async def kill(self, session_id: str, grace_ms: int = DEFAULT_GRACE_MS) -> dict[str, Any]:
        """Stop a session: SIGTERM to its process group, SIGKILL after `grace_ms` if needed.

        Returns the final state `{"session_id", "running", "exit_code", "signal",
        "stdout_total_bytes", "stderr_total_bytes", "already_finished", "escalated"}`;
        `escalated` says SIGKILL was needed. A finished session is not an error
        (`already_finished: True`). Raises ToolError `session_not_found` or `invalid_argument`.
        """
        if grace_ms < 0:
            raise ToolError("invalid_arguments", "grace_ms must be 0 or more.")
        session = self._get(session_id)
        already_finished = not session.running
        await self._terminate(session, grace_ms)
        return self._state(session) | {
            "stdout_total_bytes": session.stdout.total,
            "stderr_total_bytes": session.stderr.total,
            "already_finished": already_finished,
            "escalated": session.escalated,
        }

    async def shutdown(self, grace_ms: int = DEFAULT_GRACE_MS) -> None:
        """Kill every running session (TERM, then KILL after `grace_ms`) and wait for them.

        Spool files and metadata stay on disk.
        """
        running = [session for session in self._sessions.values() if session.running]
        await asyncio.gather(*(self._terminate(session, grace_ms) for session in running))

    def _spawn(self, cwd: Path, command: str) -> _Session:
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
        session = _Session(
            session_id=session_id,
            command=command,
            cwd=cwd,
            directory=directory,
            stdout=_Spool.create(directory / "stdout", self._max_output_bytes),
            stderr=_Spool.create(directory / "stderr", self._max_output_bytes),
            started_at=_utc_now(),
            started_monotonic=time.monotonic(),
            loop=loop,
        )
        try:
            process = subprocess.Popen(
                [bash, "-lc", command],
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except (OSError, ValueError) as exc:
            for spool in session.spools():
                spool.close_file()
            shutil.rmtree(directory, ignore_errors=True)
            raise ToolError(
                "exec_failed", f"The command could not be started ({exc}); check the root."
            ) from exc
        session.attach(process)
        self._sessions[session_id] = session
        session.write_metadata()
        return session

    async def _terminate(self, session: _Session, grace_ms: int) -> None:
        async with session.kill_lock:
            if session.running and session.pid is not None:
                await self._terminate_group(session, session.pid, grace_ms)

    async def _terminate_group(self, session: _Session, pgid: int, grace_ms: int) -> None:
        loop = asyncio.get_running_loop()
        # 1. Ask politely: SIGTERM to the whole group (start_new_session made pgid == pid).
        _signal_group(pgid, signal.SIGTERM)
        # 2. Wait for the session to settle and the group to empty, up to the grace period.
        deadline = loop.time() + grace_ms / 1000
        while not (session.settled.is_set() and not _group_has_live_members(pgid)):
            if loop.time() >= deadline:
                # 3. Insist: SIGKILL to whatever is left.
                session.escalated = True
                _signal_group(pgid, signal.SIGKILL)
                break
            await asyncio.sleep(_POLL_SECONDS)
        # 4. Collect the exit status and the last output.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(session.exited.wait(), _EXIT_WAIT_SECONDS)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(session.settled.wait(), _DRAIN_GRACE_SECONDS)
        if session.running and session.exited.is_set():
            # 5. Something outside the group still holds the pipes: stop listening to it.
            for spool in session.spools():
                session.close_pipe(spool)
            session.maybe_settle()

    def _get(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise ToolError(
                "session_not_found",
                f"No session {session_id!r}: it never existed or expired; start the command again.",
                session_id=session_id,
            )
        return session

    def _state(self, session: _Session) -> dict[str, Any]:
        return {
            "session_id": session.session_id,
            "running": session.running,
            "exit_code": session.exit_code,
            "signal": session.signal_name,
        }

    def _prune(self) -> None:
        horizon = time.monotonic() - self._retention_seconds
        for session in list(self._sessions.values()):
            if session.finished_monotonic is not None and session.finished_monotonic <= horizon:
                self._discard(session)

    def _make_room(self) -> None:
        while len(self._sessions) >= self._max_sessions:
            finished = [session for session in self._sessions.values() if not session.running]
            if not finished:
                raise ToolError(
                    "too_many_sessions",
                    f"All {self._max_sessions} sessions are still running; stop one with herdr_exec_kill "
                    "or wait for one to finish.",
                )
            self._discard(min(finished, key=lambda session: session.finished_monotonic or 0.0))

    def _discard(self, session: _Session) -> None:
        del self._sessions[session.session_id]
        shutil.rmtree(session.directory, ignore_errors=True)


def _check_read_bytes(max_bytes: int) -> None:
    if not 1 <= max_bytes <= _MAX_READ_BYTES:
        raise ToolError("invalid_arguments", f"max_bytes must be between 1 and {_MAX_READ_BYTES}.")


def _chunk(session: _Session, spool: _Spool, offset: int, max_bytes: int) -> dict[str, Any]:
    data = spool.read(offset, max_bytes + _UTF8_LOOKAHEAD)
    length = utf8_chunk_length(data, max_bytes, final=spool.eof)
    next_offset = offset + length
    return {
        "text": data[:length].decode("utf-8", errors="replace"),
        "offset": offset,
        "next_offset": next_offset,
        "total_bytes": spool.total,
        "dropped_bytes": spool.dropped,
        # Only once the session has settled, so that a reader who stops at eof has the exit status.
        "eof": not session.running and next_offset >= spool.stored,
    }
