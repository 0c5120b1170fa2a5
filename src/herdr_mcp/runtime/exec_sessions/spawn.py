"""Spawning a session's shell, and running a short command to its end, off the event loop.

`Spawner.spawn` runs in a worker thread for herdr_exec (inline for herdr_exec_start): it checks
the working directory, finds bash and the login environment, and spawns the shell
(`subprocess.Popen` waits for the child's exec: most of a spawn's time on a busy machine). For a
session in memory it then stays with the command for a short while (`BRIEF_SECONDS`, never past
the call's timeout, and, past `_PATIENT_SECONDS`, not while other spawns wait for a thread): it
drains both pipes into the memory buffers and waits for the exit, and, when the command ends in
that time, looks for what it left (`looks`) and reaps the shell when nothing is left. The
session then reaches the loop finished, in one hand-over, with none of its pipes ever registered
with the loop. A command that is not done by then, or outgrows its buffer, is handed to the loop
as it is (its pipes and exit watched there from where the thread stopped).
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.exec_sessions.live import epoch_ms
from herdr_mcp.runtime.exec_sessions.login_environment import LoginEnvironment, ShellLaunch
from herdr_mcp.runtime.exec_sessions.looks import Looks
from herdr_mcp.runtime.exec_sessions.processes import (
    SESSION_ENV,
    exit_fd,
    exited_status,
    process_identity,
    reap_shell,
    shell_started,
    start_ticks,
)

if TYPE_CHECKING:
    from herdr_mcp.runtime.exec_sessions.live import LiveSession
    from herdr_mcp.runtime.exec_sessions.output import Spool

__all__ = ["BRIEF_SECONDS", "Spawned", "Spawner", "check_cwd"]

#: How long a spawn thread stays with a command in memory before handing it to the loop.
BRIEF_SECONDS = 0.1
# How often, while it waits, the thread checks whether other spawns wait for a thread, which
# makes it hand the command over once it has stayed this long (most short commands end by then).
_SLICE_MS = 5
_PATIENT_SECONDS = 0.02
_PIPE_CHUNK = 256 * 1024


@dataclass
class Spawned:
    """What a spawn gives the loop. `process` None: nothing was spawned, the login environment
    must be waited for first."""

    process: subprocess.Popen[bytes] | None = None
    shell: ShellLaunch | None = None
    pid_start: str | None = None
    #: Open: the loop watches it for the exit (None: no pidfds here, or the exit was seen).
    pidfd: int | None = None
    #: The shell's exit status, when the thread saw it exit (it is still a zombie unless reaped).
    returncode: int | None = None
    #: Set when the thread saw the command end (exit and both end-of-files).
    finished_epoch_ms: int | None = None
    finished_monotonic: float | None = None
    #: The look after that end: processes of the session are still alive.
    left: bool = False
    #: A chunk read but not stored: it needs more than the memory buffer (the loop makes the
    #: session durable, then stores it).
    overflow: tuple[Spool, bytes] | None = None


def check_cwd(cwd: Path) -> None:
    """Raise ToolError `cwd_not_found` unless `cwd` is a directory."""
    if not os.path.isdir(cwd):
        raise ToolError(
            "cwd_not_found", f"The working directory {cwd} does not exist; pick an existing root."
        )


class Spawner:
    """Spawns the shells of one `ExecSessions`; its methods may run in any thread."""

    def __init__(self, login: LoginEnvironment, looks: Looks) -> None:
        self.login = login
        self.looks = looks
        self._bash_found: tuple[str | None, str | None] | None = None

    def bash(self) -> str | None:
        """`bash` on PATH, looked up again when PATH changed or the one found failed to start."""
        path = os.environ.get("PATH")
        found = self._bash_found
        if found is not None and found[0] == path and found[1] is not None:
            return found[1]
        bash = shutil.which("bash")
        self._bash_found = (path, bash)
        return bash

    def spawn(
        self,
        session: LiveSession,
        shell: ShellLaunch | None,
        wait_s: float | None,
        until: float | None = None,
        busy: Callable[[], bool] | None = None,
    ) -> Spawned:
        """Check the working directory, find bash and the login environment (when `shell` is
        not given: waiting up to `wait_s` for a capture that is due, or, with None, not at all:
        then nothing is spawned and the caller waits on the loop), spawn, and, with `until`
        (monotonic), stay with the command until then at most (see the module docs; `busy`
        says other spawns wait). Raises ToolError `cwd_not_found`, `shell_unavailable` or
        `exec_failed`."""
        check_cwd(session.cwd)
        if shell is None:
            bash = self.bash()
            if bash is None:
                raise ToolError(
                    "shell_unavailable", "bash is not installed on this workstation; install bash."
                )
            shell = self.login.shell(bash, wait_s) if wait_s is not None else self.login.ready(bash)
            if shell is None:
                return Spawned()
        try:
            process = subprocess.Popen(
                shell.argv(session.command),
                cwd=session.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env={**shell.env, SESSION_ENV: session.session_id},
                umask=-1 if shell.umask is None else shell.umask,
            )
        except (OSError, ValueError) as exc:
            self._bash_found = None  # look bash up again next time: it may be gone
            raise ToolError(
                "exec_failed", f"The command could not be started ({exc}); check the root."
            ) from exc
        shell_started(process.pid)
        for spool, pipe in ((session.stdout, process.stdout), (session.stderr, process.stderr)):
            assert pipe is not None
            os.set_blocking(pipe.fileno(), False)
            spool.pipe = pipe
        # Before anything can reap the shell: its identity, and a descriptor for its exit.
        spawned = Spawned(process, shell, process_identity(process.pid), exit_fd(process.pid))
        if until is not None and spawned.pidfd is not None:
            # The session is this thread's until it is handed over: what a look reads of it.
            session.process = process
            session.since = start_ticks(spawned.pid_start)
            self._stay(session, spawned, until, busy or (lambda: False))
        return spawned

    def _stay(self, session: LiveSession, spawned: Spawned, until: float, busy: Callable[[], bool]) -> None:
        """Drain the pipes and wait for the exit until `until`; if the command ends, look."""
        process, pidfd = spawned.process, spawned.pidfd
        assert process is not None
        assert pidfd is not None
        poller = select.poll()
        watched: dict[int, Spool] = {}
        for spool in session.spools():
            assert spool.pipe is not None
            watched[spool.pipe.fileno()] = spool
            poller.register(spool.pipe, select.POLLIN)
        poller.register(pidfd, select.POLLIN)
        patient_until = time.monotonic() + _PATIENT_SECONDS
        while watched or spawned.returncode is None:
            now = time.monotonic()
            left_ms = (until - now) * 1000
            if left_ms <= 0 or (now >= patient_until and busy()):
                return
            for fd, _ in poller.poll(min(_SLICE_MS, left_ms)):
                if fd == pidfd:
                    spawned.returncode = exited_status(process.pid)
                    if spawned.returncode is not None:
                        poller.unregister(pidfd)
                        os.close(pidfd)
                        spawned.pidfd = None
                    continue
                spool = watched[fd]
                data = _read(fd)
                if data is None:
                    continue
                if not data:
                    poller.unregister(fd)
                    del watched[fd]
                    assert spool.pipe is not None
                    spool.pipe.close()
                    spool.pipe = None
                    spool.eof = True
                    continue
                if spool.overflows(len(data)):
                    spawned.overflow = (spool, data)
                    return
                spool.append(data)
        spawned.finished_epoch_ms, spawned.finished_monotonic = epoch_ms(), time.monotonic()
        spawned.left = self.looks.look([session])[0]
        if not spawned.left:
            reap_shell(process)  # nothing of it is left: the group id may go


def _read(fd: int) -> bytes | None:
    """One chunk from a non-blocking pipe: None when nothing is there yet, b"" at end-of-file."""
    try:
        return os.read(fd, _PIPE_CHUNK)
    except BlockingIOError:
        return None
    except OSError:
        return b""
