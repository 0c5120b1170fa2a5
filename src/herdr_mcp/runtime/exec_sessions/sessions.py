"""Shell sessions for herdr_exec, herdr_exec_start, herdr_exec_read and herdr_exec_kill: the
owner of every session of one runtime (start, read, kill, prune, shutdown).

A session is one `bash -c <command>` run as the workstation user, in the environment their
login profile sets up (captured once, see `login_environment`), in a given working directory,
in its own process group (so a kill reaches the whole tree), with stdin from /dev/null. This
is a real shell with the user's full rights; nothing here is a sandbox. The parts: `live`
(a session this runtime drains), `output` (spool files and what reads return), `stored`
(sessions of earlier runtimes, from state/exec_sessions.py), `processes` (what belongs to a
session, signalling only it), `login_environment`.

A finished session with descendants is watched every second (`looks`) until they are
gone, is neither pruned nor replaced meanwhile, and `kill` and `shutdown` stop them.

Kill: see `LiveSession.terminate` (and `stored.kill_stored` for sessions of earlier runtimes).

Finished sessions stay readable for `retention_seconds`, and at most `max_sessions` are kept
(`table`: pruning, and what starting one more does).

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
are durable from the first byte, as before. How sessions in memory count against
`max_sessions`: see `table`.

What stays off the event loop (see `spawn`, `looks`, `workers`): `run` spawns the shell in a
worker thread, which for a session in memory also drains a short command to its end and looks
for what it left; the looks for exits the loop sees are taken in one look thread, one `/proc`
scan for every shell that exited meanwhile; `run` answers once that look is in. The login
environment's key and the `bash` on PATH are checked without rereading what did not change.

Everything here runs on the runtime's event loop: `start` and `read` are plain methods that
must be called from a coroutine on that loop (they never block on the process); `run`, `kill`,
`prepare` and `shutdown` are coroutines.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import time
from pathlib import Path
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.exec_sessions.live import LiveSession, epoch_ms
from herdr_mcp.runtime.exec_sessions.login_environment import (
    CAPTURE_TIMEOUT_SECONDS,
    LoginEnvironment,
    ShellLaunch,
)
from herdr_mcp.runtime.exec_sessions.looks import Looks, LoopLooks
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
from herdr_mcp.runtime.exec_sessions.processes import SESSION_ENV, start_ticks
from herdr_mcp.runtime.exec_sessions.spawn import BRIEF_SECONDS, Spawned, Spawner, check_cwd
from herdr_mcp.runtime.exec_sessions.stored import StoredSession, kill_stored
from herdr_mcp.runtime.exec_sessions.table import SessionIds, SessionTable
from herdr_mcp.runtime.exec_sessions.workers import Workers
from herdr_mcp.state.exec_sessions import ExecSessionRecords
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


# Threads that spawn shells for `run` (each mostly waits: for its child's exec, for a short
# command's end).
_SPAWN_THREADS = 16

_log = logging.getLogger(__name__)

_SESSION_ID = re.compile(r"x[0-9a-f]{16}")
#: herdr_exec_start answers at once: it waits at most this long for a capture of the login
#: environment in flight (herdr_exec: half its timeout_ms, at most the capture's own deadline).
START_WAIT_SECONDS = 5.0


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
        self._login = login_environment if login_environment is not None else LoginEnvironment((SESSION_ENV,))
        self.runtime_instance = runtime_instance if runtime_instance is not None else new_runtime_instance()
        self._records = None if store is None else ExecSessionRecords(store, self.runtime_instance)
        self._ids = SessionIds()
        self._looks = Looks()
        self._spawner = Spawner(self._login, self._looks)
        # Worker threads (started at their first job): spawns for `run`, and the one look thread.
        self._spawn_threads = Workers(_SPAWN_THREADS, "exec-spawn")
        self._look_thread = Workers(1, "exec-look")
        # Jobs in a worker thread that shutdown waits for: spawns whose session is not
        # registered yet, removals of dropped sessions' files.
        self._in_flight: set[asyncio.Future[None]] = set()
        self._sessions = SessionTable(
            spool_dir,
            self._records,
            max_sessions=max_sessions,
            retention_seconds=retention_seconds,
            remove_later=self._remove_later,
        )
        self._loop_looks = LoopLooks(
            self._looks, self._look_thread, self._sessions.values, self._make_durable
        )
        if self._records is not None:
            self._records.mark_lost()
            self._sessions.prune_records()

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
            spawned = self._spawner.spawn(session, shell, START_WAIT_SECONDS)
        except BaseException:
            self._abandon(session)
            raise
        # A wait was allowed: there is a process.
        assert spawned.shell is not None
        shell = spawned.shell
        self._started(session, spawned, op_id)
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
        deadline = called + timeout_ms / 1000
        session = self._new_session(cwd, command, durable=op_id is not None if durable is None else durable)
        shell = await self._spawn_in_thread(session, None, op_id, deadline)
        if shell is None:
            # A capture of the login environment is due: wait for it as long as allowed.
            bash = self._spawner.bash()
            assert bash is not None  # the worker found it
            wait_s = min(timeout_ms / 2000, CAPTURE_TIMEOUT_SECONDS)
            launch = await self._login.shell_async(bash, wait_s)
            shell = await self._spawn_in_thread(session, launch, op_id, deadline)
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
        self._sessions.prune()
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
        await session.terminate(grace_ms)
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
        bash = self._spawner.bash()
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
        while self._in_flight:
            await asyncio.wait(list(self._in_flight))
        await self._loop_looks.stop()
        sessions = list(self._sessions.values())
        await asyncio.gather(*(session.terminate(grace_ms) for session in sessions))
        for session in sessions:
            session.reap()
        await self._loop_looks.settled()
        while self._in_flight:
            await asyncio.wait(list(self._in_flight))
        self._spawn_threads.stop()
        self._look_thread.stop()

    def _new_session(self, cwd: Path, command: str, *, durable: bool) -> LiveSession:
        """A session about to be spawned: room made for it, its id chosen, its spool files
        created when `durable` (after checking `cwd`; else its streams go to memory)."""
        loop = asyncio.get_running_loop()
        self._sessions.prune()
        self._sessions.make_room()
        session_id = self._ids.next()
        directory = self._spool_dir / session_id
        if durable:
            check_cwd(cwd)
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
            on_exited=self._loop_looks.look_at,
            on_idle=self._sessions.idle,
            on_overflow=None if durable else self._make_durable,
            durable=durable,
        )

    async def _spawn_in_thread(
        self, session: LiveSession, shell: ShellLaunch | None, op_id: str | None, deadline: float
    ) -> ShellLaunch | None:
        """`Spawner.spawn` in a worker thread (for a session in memory staying with the command
        until `deadline` at most), then `_started` on the loop; the launch used, or None when the
        login environment must be waited for first (nothing was spawned). A caller cancelled
        meanwhile does not stop it: the session is registered all the same and goes on as a
        durable background session."""
        loop = session.loop
        answer: asyncio.Future[ShellLaunch | None] = loop.create_future()
        job: asyncio.Future[None] = loop.create_future()
        self._in_flight.add(job)

        def done(spawned: Spawned | None, error: BaseException | None) -> None:
            self._in_flight.discard(job)
            job.set_result(None)
            if spawned is None or spawned.process is None:
                if error is not None or answer.done():  # failed, or nobody waits any more
                    self._abandon(session)
                if not answer.done():
                    if error is not None:
                        answer.set_exception(error)
                    else:
                        answer.set_result(None)
                return
            self._started(session, spawned, op_id)
            if answer.done():
                self._background(session)
            else:
                answer.set_result(spawned.shell)

        until = None if session.durable else min(deadline, time.monotonic() + BRIEF_SECONDS)
        arguments = (session, shell, None, until, self._spawn_threads.backlog)
        self._spawn_threads.submit(loop, self._spawner.spawn, arguments, done)
        return await answer

    def _background(self, session: LiveSession) -> None:
        """A `run` gave up waiting (its caller went away): if the session was started and still
        runs, it goes on as a durable background session."""
        if self._sessions.get(session.session_id) is session and session.running:
            self._make_durable(session)

    def _started(self, session: LiveSession, spawned: Spawned, op_id: str | None) -> None:
        """The shell was spawned (and maybe has run to its end in the spawn thread): register
        the session, drain what is left of it on the loop, record it when durable."""
        assert spawned.process is not None
        durable = session.durable
        session.process = spawned.process
        session.pid_start = spawned.pid_start
        session.since = start_ticks(spawned.pid_start)
        self._sessions.add(session)
        if spawned.finished_monotonic is not None and spawned.returncode is not None:
            assert spawned.finished_epoch_ms is not None
            session.finish(
                spawned.returncode, spawned.finished_epoch_ms, spawned.finished_monotonic, left=spawned.left
            )
            self._loop_looks.taken_in(session, spawned.left)
            return
        if spawned.overflow is not None:
            spool, data = spawned.overflow
            self._make_durable(session)
            spool.append(data)
        session.attach(spawned.process, spawned.pidfd, spawned.returncode)
        if durable:
            session.write_metadata()
            self._insert_row(session, op_id)

    def _abandon(self, session: LiveSession) -> None:
        """The shell could not be started: nothing of the session is kept."""
        for spool in session.spools():
            spool.close_file()
        if session.durable:
            shutil.rmtree(session.directory, ignore_errors=True)

    def _insert_row(self, session: LiveSession, op_id: str | None) -> None:
        if self._records is not None:
            self._records.insert(session.start_record(op_id))

    def _make_durable(self, session: LiveSession) -> None:
        """A session in memory gets its spool files (with what it wrote so far), its
        metadata.json and its row, and from now on is like any other (`LiveSession.to_disk`)."""
        if session.durable or not session.to_disk(self._spool_dir):
            return
        self._sessions.kept_now(session)
        self._insert_row(session, None)
        if not session.running:
            self._on_settle(session)
        self._sessions.trim()

    def _remove_later(self, session: LiveSession) -> None:
        """Remove a dropped session's spool files in a worker thread (shutdown waits for it)."""
        job: asyncio.Future[None] = session.loop.create_future()
        self._in_flight.add(job)

        def removed(_result: object, error: BaseException | None) -> None:
            self._in_flight.discard(job)
            job.set_result(None)
            if error is not None:
                _log.warning(
                    "could not remove the files of exec session %s", session.session_id, exc_info=error
                )

        self._spawn_threads.submit(session.loop, remove_spool, (session.directory,), removed)

    def _on_settle(self, session: LiveSession) -> None:
        self._sessions.kept_now(session)
        if session.durable and self._records is not None:
            self._records.finish(session.end_record())

    def _load(self, session_id: str) -> StoredSession | None:
        """A session of an earlier runtime from its row (needs a store)."""
        row = self._records.load(session_id) if self._records is not None else None
        return None if row is None else StoredSession.from_row(row, self._spool_dir)

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
