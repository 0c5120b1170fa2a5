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

The fast path (issue 24). A `run` without an `op_id` (herdr_exec without an idempotency key)
starts its session in memory (see `live`): no spool directory, no metadata.json, no `state.db`
row, and nothing of it on disk unless it becomes durable, which it does, before anybody learns
its id, when it

- outlives `timeout_ms` (it goes on as a background session exactly as before; what it wrote so
  far is written to its spool files first, so nothing is lost),
- writes more than `output.MEMORY_SPOOL_BYTES` to a stream (the rest stays readable with
  herdr_exec_read, as before), or
- leaves processes behind when its shell exits (they are owned, reported and killable as
  before, and a later runtime finds them through the row).

A session in memory that finished is kept in memory (readable with herdr_exec_read while this
runtime runs, pruned like any other), but not across a restart: a restart forgets it. A `run`
with an `op_id` (a keyed herdr_exec, whose recovery reads the row and the spool) and `start`
are durable from the first byte, as before. Sessions in memory that still run do not count
against `max_sessions` (they are bounded by the calls waiting for them); a session that becomes
durable takes the oldest finished one's place, or goes beyond the limit when every other one
still runs (it is never killed for want of room).

What stays off the event loop: `run` spawns the shell in a worker thread (`subprocess.Popen`
waits for the child's exec, most of a spawn's time on a busy machine), and every look for
descendants after a shell's exit is taken in one look thread, one `/proc` scan for every shell
that exited since the last one (`_look`); `run` answers once that look is in. The login
environment's key and the `bash` on PATH are checked without rereading what did not change.

Everything here runs on the runtime's event loop: `start` and `read` are plain methods that
must be called from a coroutine on that loop (they never block on the process); `run`, `kill`,
`prepare` and `shutdown` are coroutines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.exec_sessions.live import LiveSession, epoch_ms
from herdr_mcp.runtime.exec_sessions.login_environment import (
    CAPTURE_TIMEOUT_SECONDS,
    LoginEnvironment,
    ShellLaunch,
)
from herdr_mcp.runtime.exec_sessions.output import (
    DEFAULT_READ_BYTES,
    MEMORY_SPOOL_BYTES,
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
    exit_fd,
    process_identity,
    start_ticks,
)
from herdr_mcp.runtime.exec_sessions.stored import StoredSession, kill_stored
from herdr_mcp.runtime.exec_sessions.workers import Workers
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

# Threads that spawn shells for `run` (each mostly waits for its child's exec).
_SPAWN_THREADS = 8
# How often finished sessions in memory, and rows of earlier runtimes, are looked at for expiry
# (at most; retention is an hour, or the retention_seconds given, when that is shorter).
_PRUNE_SECONDS = 1.0
_RECORD_PRUNE_SECONDS = 60.0

_log = logging.getLogger(__name__)

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
        # Worker threads (started at their first job): spawns for `run`, and the one look thread.
        self._spawner = Workers(_SPAWN_THREADS, "exec-spawn")
        self._looker = Workers(1, "exec-look")
        # Spawns in a worker thread whose session is not registered yet (shutdown waits).
        self._spawning: set[asyncio.Future[None]] = set()
        # Shells that exited and wait for a look at what they left; whether a look is under way.
        self._to_look: list[LiveSession] = []
        self._looking: asyncio.Future[None] | None = None
        self._bash_found: tuple[str | None, str | None] | None = None
        # Sessions in memory that still run (not counted against max_sessions).
        self._unkept = 0
        # Finished sessions with nothing left running: what pruning and room-making may drop.
        self._idle: dict[str, LiveSession] = {}
        self._pruned = -math.inf
        self._records_pruned = -math.inf
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
        session = self._new_session(cwd, command, durable=True)
        try:
            spawned = self._spawn_now(session, shell, START_WAIT_SECONDS)
        except BaseException:
            self._abandon(session)
            raise
        process, pid_start, pidfd, shell = spawned
        # A wait was allowed: there is a process.
        assert process is not None
        assert shell is not None
        self._started(session, process, pid_start, pidfd, op_id)
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
        durable: bool | None = None,
    ) -> dict[str, Any]:
        """Run a command and wait up to `timeout_ms` for it to finish.

        `durable` (default: whether an `op_id` is given) makes the session durable from the
        start; otherwise it starts in memory (see the module docs: it becomes durable when it
        outlives the timeout, outgrows its buffer or leaves processes behind).

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
        session = self._new_session(cwd, command, durable=op_id is not None if durable is None else durable)
        shell = await self._spawn_in_thread(session, None, op_id)
        if shell is None:
            # A capture of the login environment is due: wait for it as long as allowed.
            bash = self._bash()
            assert bash is not None  # the worker found it
            wait_s = min(timeout_ms / 2000, CAPTURE_TIMEOUT_SECONDS)
            shell = await self._spawn_in_thread(session, await self._login.shell_async(bash, wait_s), op_id)
            assert shell is not None
        left_s = max(timeout_ms / 1000 - (time.monotonic() - called), 0.0)
        try:
            await session.wait_settled(left_s)
            if not session.running:
                # The look at what the shell left (it makes the session durable if anything is).
                await session.checked.wait()
        except asyncio.CancelledError:
            # Nobody will learn its id from this call: it goes on as any background session.
            self._background(session)
            raise
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
        self._make_durable(session)
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
        bash = self._bash()
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
        # A shell being spawned for `run` is registered when its thread is done: wait for it.
        while self._spawning:
            await asyncio.wait(list(self._spawning))
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        sessions = list(self._sessions.values())
        await asyncio.gather(*(self._terminate(session, grace_ms) for session in sessions))
        for session in sessions:
            session.reap()
        while self._looking is not None:
            await asyncio.wait([self._looking])
        self._spawner.stop()
        self._looker.stop()

    def _bash(self) -> str | None:
        """`bash` on PATH, looked up again when PATH changed or the one found is gone."""
        path = os.environ.get("PATH")
        found = self._bash_found
        if found is not None and found[0] == path and found[1] is not None and os.access(found[1], os.X_OK):
            return found[1]
        bash = shutil.which("bash")
        self._bash_found = (path, bash)
        return bash

    def _new_session(self, cwd: Path, command: str, *, durable: bool) -> LiveSession:
        """A session about to be spawned: room made for it, its id chosen, its spool files
        created when `durable` (after checking `cwd`; else its streams go to memory)."""
        loop = asyncio.get_running_loop()
        self._prune()
        self._make_room()
        session_id = _new_session_id()
        directory = self._spool_dir / session_id
        if durable:
            _check_cwd(cwd)
            self._spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            directory.mkdir(mode=0o700)
            directory.chmod(0o700)
            stdout = Spool.create(directory / "stdout", self._max_output_bytes)
            stderr = Spool.create(directory / "stderr", self._max_output_bytes)
        else:
            stdout = Spool.in_memory(directory / "stdout", self._max_output_bytes)
            stderr = Spool.in_memory(directory / "stderr", self._max_output_bytes)
        return LiveSession(
            session_id=session_id,
            command=command,
            cwd=cwd,
            directory=directory,
            stdout=stdout,
            stderr=stderr,
            started_monotonic=time.monotonic(),
            started_epoch_ms=epoch_ms(),
            loop=loop,
            on_settle=self._on_settle,
            on_exited=self._on_exited,
            on_idle=self._on_idle,
            on_overflow=None if durable else self._make_durable,
            durable=durable,
        )

    def _spawn_now(self, session: LiveSession, shell: ShellLaunch | None, wait_s: float | None) -> _Spawned:
        """Check the working directory, find bash and the login environment (when `shell` is
        not given: waiting up to `wait_s` for a capture that is due, or, with None, not at all:
        then the answer has no process and the caller waits on the loop), and spawn. In a
        worker thread for `run`, inline for `start`. Raises ToolError `cwd_not_found`,
        `shell_unavailable` or `exec_failed`."""
        _check_cwd(session.cwd)
        if shell is None:
            bash = self._bash()
            if bash is None:
                raise ToolError(
                    "shell_unavailable", "bash is not installed on this workstation; install bash."
                )
            shell = self._login.shell(bash, wait_s) if wait_s is not None else self._login.ready(bash)
            if shell is None:
                return None, None, None, None
        try:
            process, pid_start, pidfd = _popen(shell, session.command, session.cwd, session.session_id)
        except ToolError:
            self._bash_found = None  # look bash up again next time: it may be gone
            raise
        return process, pid_start, pidfd, shell

    async def _spawn_in_thread(
        self, session: LiveSession, shell: ShellLaunch | None, op_id: str | None
    ) -> ShellLaunch | None:
        """`_spawn_now` in a worker thread, then `_started` on the loop; the launch used, or None
        when the login environment must be waited for first (nothing was spawned). A caller
        cancelled meanwhile does not stop it: the session is registered all the same and goes
        on as a durable background session."""
        loop = session.loop
        answer: asyncio.Future[ShellLaunch | None] = loop.create_future()
        job: asyncio.Future[None] = loop.create_future()
        self._spawning.add(job)

        def done(spawned: _Spawned | None, error: BaseException | None) -> None:
            self._spawning.discard(job)
            job.set_result(None)
            process, pid_start, pidfd, launch = (None, None, None, None) if spawned is None else spawned
            if process is None:
                if error is not None or answer.done():  # failed, or nobody waits any more
                    self._abandon(session)
                if not answer.done():
                    if error is not None:
                        answer.set_exception(error)
                    else:
                        answer.set_result(None)
                return
            self._started(session, process, pid_start, pidfd, op_id)
            if answer.done():
                self._background(session)
            else:
                answer.set_result(launch)

        self._spawner.submit(loop, self._spawn_now, (session, shell, None), done)
        return await answer

    def _background(self, session: LiveSession) -> None:
        """A `run` gave up waiting (its caller went away): if the session was started and still
        runs, it goes on as a durable background session."""
        if self._sessions.get(session.session_id) is session and session.running:
            self._make_durable(session)

    def _started(
        self,
        session: LiveSession,
        process: subprocess.Popen[bytes],
        pid_start: str | None,
        pidfd: int | None,
        op_id: str | None,
    ) -> None:
        """The shell runs: drain it, register the session, record it when durable."""
        session.pid_start = pid_start
        session.since = start_ticks(pid_start)
        session.attach(process, pidfd)
        self._sessions[session.session_id] = session
        if session.durable:
            session.write_metadata()
            self._insert_row(session, op_id)
        else:
            session.unkept = True
            self._unkept += 1

    def _abandon(self, session: LiveSession) -> None:
        """The shell could not be started: nothing of the session is kept."""
        for spool in session.spools():
            spool.close_file()
        if session.durable:
            shutil.rmtree(session.directory, ignore_errors=True)

    def _insert_row(self, session: LiveSession, op_id: str | None) -> None:
        if self._records is not None:
            self._records.insert(
                ExecSessionStart(
                    session_id=session.session_id,
                    op_id=op_id,
                    command=session.command,
                    cwd=str(session.cwd),
                    pid=session.pid,
                    pid_start=session.pid_start,
                    started_at_ms=session.started_epoch_ms,
                )
            )

    def _make_durable(self, session: LiveSession) -> None:
        """A session in memory gets its spool files (with what it wrote so far), its
        metadata.json and its row, and from now on is like any other. A disk that refuses is
        logged: the session stays in memory (its streams capped at the buffer) and a later
        attempt is not made."""
        if session.durable:
            return
        session.durable = True  # one attempt
        session.on_overflow = None
        try:
            self._spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            session.directory.mkdir(mode=0o700)
            session.directory.chmod(0o700)
            for spool in session.spools():
                spool.to_file()
        except OSError as exc:
            _log.warning("exec session %s stays in memory: %s", session.session_id, exc)
            session.durable = False
            for spool in session.spools():
                if spool.memory is not None:
                    spool.write_error = (
                        f"{type(exc).__name__}: {exc} (kept in memory, {MEMORY_SPOOL_BYTES} bytes)"
                    )
            return
        self._kept_now(session)
        session.write_metadata()
        self._insert_row(session, None)
        if not session.running:
            self._on_settle(session)
        self._trim()

    def _kept_now(self, session: LiveSession) -> None:
        """`session` counts against max_sessions from now on (it settled or became durable)."""
        if session.unkept:
            session.unkept = False
            self._unkept -= 1

    def _on_idle(self, session: LiveSession) -> None:
        self._idle[session.session_id] = session

    def _on_settle(self, session: LiveSession) -> None:
        self._kept_now(session)
        if session.durable and self._records is not None:
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
        # Look at once (most commands leave nothing, and their shell is reaped then); watch the
        # rest until it is gone.
        self._look_at(session)

    def _look_at(self, session: LiveSession) -> None:
        """Queue a look at what `session`'s exited shell left; looks are taken in the look
        thread, one `/proc` scan for every session queued since the last one."""
        self._to_look.append(session)
        if self._looking is None:
            self._start_look()

    def _start_look(self) -> None:
        batch, self._to_look = self._to_look, []
        loop = batch[0].loop
        self._looking = loop.create_future()
        self._looker.submit(loop, _look, (batch,), lambda found, error: self._looked(batch, found, error))

    def _looked(
        self, batch: list[LiveSession], found: Sequence[bool] | None, error: BaseException | None
    ) -> None:
        looking, self._looking = self._looking, None
        if error is not None:  # a look that failed is taken again by the watcher
            _log.warning("could not look for processes exec sessions left", exc_info=error)
        for index, session in enumerate(batch):
            left = found is None or session.take_look(found[index])
            if left:
                # What it left is owned like any session's: across a restart too.
                self._make_durable(session)
                if self._watcher is None or self._watcher.done():
                    self._watcher = session.loop.create_task(
                        self._watch_descendants(), name="exec-descendants"
                    )
            session.checked.set()
        if looking is not None:
            looking.set_result(None)
        if self._to_look:
            self._start_look()

    async def _watch_descendants(self) -> None:
        """Look at what exited shells left behind until none of it runs any more."""
        while True:
            await asyncio.sleep(_DESCENDANT_POLL_SECONDS)
            left = [s for s in self._sessions.values() if s.exited.is_set() and not s.descendants_gone]
            if not left:
                return
            for session in left:
                self._look_at(session)

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
        now = time.monotonic()
        if now - self._pruned >= min(_PRUNE_SECONDS, self._retention_seconds):
            self._pruned = now
            horizon = now - self._retention_seconds
            for session in list(self._idle.values()):
                finished = session.finished_monotonic
                if finished is not None and finished <= horizon:
                    self._discard(session)
        if now - self._records_pruned >= min(_RECORD_PRUNE_SECONDS, self._retention_seconds):
            self._prune_records()

    def _prune_records(self) -> None:
        """Forget sessions of earlier runtimes whose retention has ended: rows and spool files."""
        self._records_pruned = time.monotonic()
        if self._records is None:
            return
        horizon_ms = epoch_ms() - round(self._retention_seconds * 1000)
        expired = [sid for sid in self._records.expired(horizon_ms) if sid not in self._sessions]
        if not expired:
            return
        self._records.delete(expired)
        for session_id in expired:
            remove_spool(self._spool_dir / session_id)

    def _kept(self) -> int:
        """The sessions `max_sessions` bounds: all but those in memory that still run."""
        return len(self._sessions) - self._unkept

    def _trim(self) -> None:
        """`_make_room` for a session that is already running: beyond the limit when it must."""
        with contextlib.suppress(ToolError):
            self._make_room(self._max_sessions + 1)

    def _make_room(self, limit: int | None = None) -> None:
        while self._kept() >= (self._max_sessions if limit is None else limit):
            finished = self._idle.values()
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
        self._idle.pop(session.session_id, None)
        self._kept_now(session)
        if not session.durable:
            return  # nothing of it is anywhere but in memory
        if files_later:
            self._spawner.submit(session.loop, remove_spool, (session.directory,), _ignore)
        else:
            remove_spool(session.directory)
        if self._records is not None:
            self._records.delete([session.session_id])


#: What a spawn gives: the process, its identity, a pidfd for its exit (where there are pidfds),
#: the launch used; all None when the login environment must be waited for first.
_Spawned = tuple[subprocess.Popen[bytes] | None, str | None, int | None, ShellLaunch | None]


def _check_cwd(cwd: Path) -> None:
    if not os.path.isdir(cwd):
        raise ToolError(
            "cwd_not_found", f"The working directory {cwd} does not exist; pick an existing root."
        )


def _popen(
    shell: ShellLaunch, command: str, cwd: Path, session_id: str
) -> tuple[subprocess.Popen[bytes], str | None, int | None]:
    """Spawn `bash -c command` for a session (in its own process group, stdin from /dev/null,
    both outputs to pipes, which are made non-blocking) and read the shell's identity and open a
    pidfd for its exit before anything can reap it. Raises ToolError `exec_failed`."""
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
        raise ToolError("exec_failed", f"The command could not be started ({exc}); check the root.") from exc
    for pipe in (process.stdout, process.stderr):
        assert pipe is not None
        os.set_blocking(pipe.fileno(), False)
    return process, process_identity(process.pid), exit_fd(process.pid)


def _look(sessions: list[LiveSession]) -> list[bool]:
    """In the look thread: one look at the processes, and for each session whether anything of
    it other than its exited shell is alive (see `LiveSession.survivors`). The sessions' state
    is only read here; the loop takes the answers in (`LiveSession.take_look`)."""
    starts = [session.since for session in sessions]
    since = None if None in starts else min(start for start in starts if start is not None)
    table = ProcessTable.read(since)
    return [session.survivors(table)[0] for session in sessions]


def _ignore(_result: object, error: BaseException | None) -> None:
    if error is not None:
        _log.warning("could not remove a replaced session's files", exc_info=error)
