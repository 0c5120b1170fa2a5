"""Shell sessions for herdr_exec, herdr_exec_start, herdr_exec_read and herdr_exec_kill: the
owner of every session of one runtime (start, read, kill, prune, shutdown).

A session is one `bash -c <command>` run as the workstation user, in the environment their
login profile sets up (captured once, see `login_environment`), in a given working directory,
in its own process group (so a kill reaches the whole tree), with stdin from /dev/null. This
is a real shell with the user's full rights; nothing here is a sandbox. The parts: `live`
(a session this runtime drains), `output` (spool files and what reads return), `stored`
(sessions of earlier runtimes, from state/exec_sessions.py), `processes` (what belongs to a
session, signalling only it), `login_environment`.

A finished session with descendants is watched every `_DESCENDANT_POLL_SECONDS` until they are
gone, is neither pruned nor replaced meanwhile, and `kill` and `shutdown` stop them.

Kill sends SIGTERM to the process group and to the session's processes outside it, waits up to
`grace_ms` for the session to settle and nothing of it to be alive (zombies do not count:
orphans are not always reaped quickly), then sends SIGKILL to whatever is left. A process that
escaped unseen and still holds a pipe is cut off by closing our ends of the pipes.

Finished sessions stay readable for `retention_seconds`; pruning is lazy (on start, run and
read) and removes the spool directory (and the row of sessions of earlier runtimes). At most
`max_sessions` are kept: starting another one prunes the oldest finished session without
descendants, and is refused with `too_many_sessions` when there is none.

Database writes are best effort (a failure is logged; the session itself goes on) and take well
under a millisecond, so they run on the event loop.

Everything here runs on the runtime's event loop: `start` and `read` are plain methods that
must be called from a coroutine on that loop (they never block on the process); `run`, `kill`,
`prepare` and `shutdown` are coroutines.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.exec_sessions.live import LiveSession, epoch_ms, iso_from_ms
from herdr_mcp.runtime.exec_sessions.login_environment import (
    CAPTURE_TIMEOUT_SECONDS,
    LoginEnvironment,
    ShellLaunch,
)
from herdr_mcp.runtime.exec_sessions.output import (
    DEFAULT_READ_BYTES,
    Spool,
    StreamChoice,
    check_read_bytes,
    completed_answer,
    output_answer,
    read_chunk,
    remove_spool,
)
from herdr_mcp.runtime.exec_sessions.processes import (
    SESSION_ENV,
    ProcessTable,
    process_identity,
    start_ticks,
)
from herdr_mcp.runtime.exec_sessions.stored import StoredSession, kill_stored
from herdr_mcp.state.exec_sessions import ExecSessionEnd, ExecSessionRecords, ExecSessionStart
from herdr_mcp.state.store import StateStore, new_runtime_instance

__all__ = [
    "DEFAULT_GRACE_MS",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_RETENTION_SECONDS",
    "ExecSessions",
]

# Per stream, on disk. Large enough for a full build log, small enough that a runaway
# `yes` cannot fill the disk before somebody notices.
DEFAULT_MAX_OUTPUT_BYTES = 50 * 1024 * 1024
# The catalog default of herdr_exec_kill.grace_ms.
DEFAULT_GRACE_MS = 2000
DEFAULT_RETENTION_SECONDS = 3600.0
DEFAULT_MAX_SESSIONS = 100

# After SIGKILL the leader dies at once unless it is stuck in the kernel; do not wait forever.
_EXIT_WAIT_SECONDS = 5.0
# Once the process is gone, how long pipes may stay open before we close our ends.
_DRAIN_GRACE_SECONDS = 1.0
_POLL_SECONDS = 0.02
# How often a finished session's leftover processes are looked at: they are reported and
# killable at any moment regardless; this only bounds how long a zombie shell is kept after
# they end (and, where shells are not kept, the window in which a group id could be reused).
_DESCENDANT_POLL_SECONDS = 1.0

_SESSION_ID = re.compile(r"x[0-9a-f]{16}")
#: herdr_exec_start answers at once: it waits at most this long for a capture of the login
#: environment in flight (herdr_exec: half its timeout_ms, at most the capture's own deadline).
START_WAIT_SECONDS = 5.0


def _new_session_id() -> str:
    return "x" + secrets.token_hex(8)


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
        self._sessions: dict[str, LiveSession] = {}
        self._login = login_environment if login_environment is not None else LoginEnvironment((SESSION_ENV,))
        self._watcher: asyncio.Task[None] | None = None
        self.runtime_instance = runtime_instance if runtime_instance is not None else new_runtime_instance()
        self._records = None if store is None else ExecSessionRecords(store, self.runtime_instance)
        if self._records is not None:
            self._records.mark_lost()
            self._prune_records()

    def start(
        self, cwd: Path, command: str, *, op_id: str | None = None, shell: ShellLaunch | None = None
    ) -> dict[str, Any]:
        """Start `bash -c command` in `cwd` as a background session.

        Synchronous, but must be called on the running event loop that will drain the
        output; pass the `shell` that `await prepare()` chose so that a capture of the login
        environment, when one is due, does not block the loop (without it, up to
        `START_WAIT_SECONDS`). `op_id` links the session to the ledger operation it carries out
        (it must exist in `state.db`). Returns `{"session_id", "pid", "running": True,
        "started_at"}`, and `login_environment` (see `run`) when the command runs without it.
        Raises ToolError `cwd_not_found`, `too_many_sessions`, `shell_unavailable` or `exec_failed`.
        """
        session, shell = self._spawn(cwd, command, op_id, shell)
        answer: dict[str, Any] = {
            "session_id": session.session_id,
            "pid": session.pid,
            "running": True,
            "started_at": session.started_at,
        }
        if shell.report is not None:
            answer["login_environment"] = shell.report
        return answer

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

        A capture of the login environment that is due is waited for at most half of
        `timeout_ms` (and at most its own deadline), and that wait counts against `timeout_ms`;
        when the command runs without the login environment (the capture is slower, or failed)
        the answer carries `login_environment: {"used": false, "state", "reason"}`.
        """
        if timeout_ms < 1:
            raise ToolError("invalid_arguments", "timeout_ms must be at least 1; pass a positive timeout.")
        check_read_bytes(max_bytes)
        called = time.monotonic()
        bash = shutil.which("bash")
        wait_s = min(timeout_ms / 2000, CAPTURE_TIMEOUT_SECONDS)
        shell = None if bash is None else await self._login.shell_async(bash, wait_s)
        session, shell = self._spawn(cwd, command, op_id, shell)
        left_s = max(timeout_ms / 1000 - (time.monotonic() - called), 0.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(session.settled.wait(), left_s)
        end = session.finished_monotonic if session.finished_monotonic is not None else time.monotonic()
        duration_ms = round((end - session.started_monotonic) * 1000)
        if not session.running:
            answer = completed_answer(session.state(), session.view, max_bytes, duration_ms)
            answer |= session.descendants_answer()
            if answer["descendants_running"]:
                pids = answer.get("descendant_pids")
                answer["message"] = (
                    "The command finished, but processes it started are still running"
                    f"{f' (pids {pids})' if pids else ''}; they belong to session {session.session_id}: "
                    "watch them with herdr_exec_read, stop them with herdr_exec_kill; they are also "
                    "stopped when the runtime stops."
                )
            return self._reported(answer, shell)
        result = output_answer(
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
        return self._reported(result, shell)

    @staticmethod
    def _reported(answer: dict[str, Any], shell: ShellLaunch) -> dict[str, Any]:
        if shell.report is not None:
            answer["login_environment"] = shell.report
        return answer

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
        check_read_bytes(max_bytes)
        result = session.state() if isinstance(session, LiveSession) else session.state_answer()
        result |= session.descendants_answer()
        if stream in ("stdout", "both"):
            result["stdout"] = read_chunk(session.view("stdout"), stdout_offset, max_bytes)
        if stream in ("stderr", "both"):
            result["stderr"] = read_chunk(session.view("stderr"), stderr_offset, max_bytes)
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
        if isinstance(session, StoredSession):
            return await kill_stored(session, grace_ms)
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
        unknown, still running or lost. Lets a replay of an idempotent exec answer in full (but
        for `login_environment`, which is not stored).
        Raises ToolError `invalid_arguments` or `state_unavailable`.
        """
        check_read_bytes(max_bytes)
        session = self._sessions.get(session_id)
        if session is not None:
            if session.finished_monotonic is None:  # still running
                return None
            duration_ms = round((session.finished_monotonic - session.started_monotonic) * 1000)
            answer = completed_answer(session.state(), session.view, max_bytes, duration_ms)
            return answer | session.descendants_answer()
        stored = self._load(session_id)
        if stored is None or stored.state != "finished" or stored.finished_at_ms is None:
            return None
        duration_ms = stored.finished_at_ms - stored.started_at_ms
        answer = completed_answer(stored.state_answer(), stored.view, max_bytes, duration_ms)
        return answer | stored.descendants_answer()

    async def prepare(self) -> ShellLaunch | None:
        """How the next `start` runs its command (pass it as `start(shell=...)`): waits, off the
        event loop's back, up to `START_WAIT_SECONDS` for a capture of the login environment
        when one is due (the first one, or the profile changed); None without bash (`start`
        refuses then). See `login_environment`."""
        bash = shutil.which("bash")
        return None if bash is None else await self._login.shell_async(bash, START_WAIT_SECONDS)

    def login_status(self) -> dict[str, Any]:
        """The login environment's last capture, for /health (`LoginEnvironment.status`)."""
        return self._login.status()

    def session_of_operation(self, op_id: str) -> str | None:
        """The session that carries out ledger operation `op_id`, if one was started (needs a
        store; used to reconcile operations after a restart). Raises ToolError `state_unavailable`."""
        return self._records.session_of_operation(op_id) if self._records is not None else None

    async def shutdown(self, grace_ms: int = DEFAULT_GRACE_MS) -> None:
        """Kill every session that runs, or whose shell left processes running (TERM, then
        KILL after `grace_ms`), and wait for them.

        Spool files and metadata stay on disk (and their rows record how they ended). A capture
        of the login environment in flight is killed.
        """
        self._login.stop()
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
    ) -> tuple[LiveSession, ShellLaunch]:
        loop = asyncio.get_running_loop()
        self._prune()
        self._make_room()
        if not cwd.is_dir():
            raise ToolError(
                "cwd_not_found", f"The working directory {cwd} does not exist; pick an existing root."
            )
        # The bash `run` looked up for its capture, or looked up now.
        bash = shell.bash if shell is not None else shutil.which("bash")
        if bash is None:
            raise ToolError("shell_unavailable", "bash is not installed on this workstation; install bash.")
        self._spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        session_id = _new_session_id()
        directory = self._spool_dir / session_id
        directory.mkdir(mode=0o700)
        directory.chmod(0o700)
        started_ms = epoch_ms()
        session = LiveSession(
            session_id=session_id,
            command=command,
            cwd=cwd,
            directory=directory,
            stdout=Spool.create(directory / "stdout", self._max_output_bytes),
            stderr=Spool.create(directory / "stderr", self._max_output_bytes),
            started_at=iso_from_ms(started_ms),
            started_monotonic=time.monotonic(),
            started_epoch_ms=started_ms,
            loop=loop,
            on_settle=self._on_settle,
            on_exited=self._on_exited,
        )
        if shell is None:
            shell = self._login.shell(bash, START_WAIT_SECONDS)
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
            self._records.insert(
                ExecSessionStart(
                    session_id=session_id,
                    op_id=op_id,
                    command=command,
                    cwd=str(cwd),
                    pid=session.pid,
                    pid_start=pid_start,
                    started_at_ms=started_ms,
                )
            )
        return session, shell

    def _on_settle(self, session: LiveSession) -> None:
        if self._records is not None:
            self._records.finish(
                ExecSessionEnd(
                    session_id=session.session_id,
                    finished_at_ms=session.finished_epoch_ms,
                    exit_code=session.exit_code,
                    signal=session.signal_name,
                    stdout_total=session.stdout.total,
                    stderr_total=session.stderr.total,
                    stdout_dropped=session.stdout.dropped,
                    stderr_dropped=session.stderr.dropped,
                )
            )

    def _load(self, session_id: str) -> StoredSession | None:
        """A session of an earlier runtime from its row (needs a store)."""
        row = self._records.load(session_id) if self._records is not None else None
        return None if row is None else StoredSession.from_row(row, self._spool_dir)

    def _on_exited(self, session: LiveSession) -> None:
        # Look at once (most commands leave nothing, and their shell is reaped now); watch the
        # rest until it is gone.
        if session.check_descendants(ProcessTable.read(session.since)) != [] and (
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

    async def _terminate(self, session: LiveSession, grace_ms: int) -> None:
        async with session.kill_lock:
            if session.has_processes():
                await self._stop(session, grace_ms)

    async def _stop(self, session: LiveSession, grace_ms: int) -> None:
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

    def _lookup(self, session_id: str) -> LiveSession | StoredSession:
        """The live session, or the row of one an earlier runtime started."""
        session = self._sessions.get(session_id)
        if session is not None:
            return session
        if _SESSION_ID.fullmatch(session_id):
            stored = self._load(session_id)
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
        horizon_ms = epoch_ms() - round(self._retention_seconds * 1000)
        expired = [sid for sid in self._records.expired(horizon_ms) if sid not in self._sessions]
        if not expired:
            return
        self._records.delete(expired)
        for session_id in expired:
            remove_spool(self._spool_dir / session_id)

    def _make_room(self) -> None:
        while len(self._sessions) >= self._max_sessions:
            finished = [s for s in self._sessions.values() if not s.running and s.descendants_gone]
            if not finished:
                raise ToolError(
                    "too_many_sessions",
                    f"All {self._max_sessions} sessions, or processes they started, are still running; "
                    "stop one with herdr_exec_kill or wait for one to finish.",
                )
            oldest = min(finished, key=lambda session: session.finished_monotonic or 0.0)
            # The new command need not wait for the old files: under disk load their removal
            # cost milliseconds (measured 4 ms of a 33 ms herdr_exec). The session is forgotten
            # at once; asyncio.run and the runtime's shutdown wait for the worker thread.
            self._discard(oldest, files_later=True)

    def _discard(self, session: LiveSession, *, files_later: bool = False) -> None:
        del self._sessions[session.session_id]
        if files_later:
            session.loop.run_in_executor(None, remove_spool, session.directory)
        else:
            remove_spool(session.directory)
        if self._records is not None:
            self._records.delete([session.session_id])
