"""The user's login environment for exec sessions, captured once instead of on every command.

Until 2026-12-01 every command ran as `bash -lc`, which sources the login profile each time
(~95-130 ms of a ~100-160 ms herdr_exec of `echo ok`). Now a login shell runs once, exports
what the profile set up, and every command runs as `bash -c` with that environment:

1. Capture: `bash -l -c 'exec "$@"' <python> ...` from the same environment the login shell
   got before (the runtime's own), in the user's home directory, stdin, stdout and stderr not
   ours (what the profile prints is written to a private file, so it no longer ends up in every
   command's output). The login shell replaces itself with a tiny Python that writes its
   exported variables and its umask to a private file. It runs in a thread of its own, with a
   deadline of `CAPTURE_TIMEOUT_SECONDS`; its process group is killed when it passes.
2. Reuse: the captured variables, minus those a shell sets for itself at start (`SHLVL`, `PWD`,
   `OLDPWD`, `_`: they keep what the runtime has, as before), plus the session's own variable,
   and the captured umask.
3. Capture again when anything it depends on changes: the files a login bash reads
   (`_SYSTEM_FILES`, `_HOME_FILES`, every entry of the profile.d/paths.d directories, and the directories
   themselves, so an added file counts), each keyed on (path, device, inode, size, mtime_ns,
   ctime_ns), the runtime's own environment, and the bash binary.

A call waits for a capture in flight only as long as its caller allows (`shell(bash, wait_s)`):
past that, or when the capture failed (the profile exits, runs past the deadline, or bash
cannot start), the command runs as `bash -c` in the runtime's own environment, without the
profile, and the launch carries a `report` saying so and why, for the call's answer; the
capture goes on in the background. Until 2026-12-02 a failure fell back to `bash -lc`: a profile
that exited stood in for every command (its exit code answered, the command never ran), and a
slow one was waited for twice a call. A failure is remembered for `RETRY_FAILED_SECONDS`; then
the next call starts one more capture in the background, which no call waits for (a change to
the watched files is tried at once, and waited for as a first capture is). `status()` is what
/health shows.

What a command no longer gets from the profile: shell functions it defines without `export -f`,
shell options (`set -o`, `shopt`) and unexported shell variables; the shell is no longer a login
shell (`shopt -q login_shell` fails, `exit` skips ~/.bash_logout). Aliases were never expanded
in a non-interactive shell. Files the profile sources from elsewhere (~/.cargo/env, a private
~/.profile.d) are not watched: touch ~/.profile after editing one, or restart the runtime.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import pwd
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from herdr_mcp.runtime.exec_sessions.live import epoch_ms, iso_from_ms

__all__ = ["CAPTURE_TIMEOUT_SECONDS", "RETRY_FAILED_SECONDS", "LoginEnvironment", "ShellLaunch"]

_log = logging.getLogger(__name__)

#: How long the one login shell of a capture may take. Generous: a slow profile (nvm, conda)
#: takes about a second; past this the capture is abandoned (its process group killed).
CAPTURE_TIMEOUT_SECONDS = 10.0
#: After a failed capture, commands run without the profile; with unchanged files a capture is
#: tried again (in the background) at most this often.
RETRY_FAILED_SECONDS = 60.0
# What bash -l reads: /etc/profile, then the first of ~/.bash_profile, ~/.bash_login, ~/.profile;
# Debian's /etc/profile reads /etc/profile.d/*.sh and (interactive only) /etc/bash.bashrc, and
# ~/.profile reads ~/.bashrc; macOS's /etc/profile runs path_helper over /etc/paths{,.d}.
_SYSTEM_FILES = ("/etc/profile", "/etc/bash.bashrc", "/etc/bashrc", "/etc/paths")
_SYSTEM_DIRECTORIES = ("/etc/profile.d", "/etc/paths.d")
_HOME_FILES = (".bash_profile", ".bash_login", ".profile", ".bashrc")
# Variables a shell sets for itself when it starts: taken from the runtime, as before.
_SHELL_OWN = ("SHLVL", "PWD", "OLDPWD", "_")
# Runs as the login shell's last act (exec): its environment is what the profile exported.
_DUMP = (
    "import os, sys\n"
    "mask = os.umask(0)\n"
    "os.umask(mask)\n"
    "entries = [b'%d' % mask] + [k + b'=' + v for k, v in os.environb.items()]\n"
    "with open(sys.argv[1], 'wb') as out:\n"
    "    out.write(b'\\0'.join(entries))\n"
)
_WITHOUT = (
    "this command ran as `bash -c` in the runtime's own environment, without what the login "
    "profile sets up (PATH additions, exported variables, umask)"
)

_Signature = tuple[tuple[str, tuple[int, int, int, int, int] | None], ...]


@dataclass(frozen=True)
class ShellLaunch:
    """How to start one command: `argv(command)` with `env` (add the per-command variables) and
    `umask` (None: leave the runtime's). `report` is None when `env` is the captured login
    environment; otherwise `{"used": False, "state": "capturing"|"failed", "reason"}` for the
    call's answer."""

    bash: str
    env: dict[str, str]
    umask: int | None
    report: dict[str, Any] | None = None

    def argv(self, command: str) -> list[str]:
        """The command line that runs `command`."""
        return [self.bash, "-c", command]


_Key = tuple[str, _Signature, dict[str, str]]


@dataclass(eq=False)
class _Attempt:
    """One capture for one key: running until `done` is set, then `launch` or `error`."""

    key: _Key
    #: The failure this attempt tries again after (no call waits for such a retry).
    retrying: str | None
    started: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    finished: float = 0.0
    finished_at_ms: int = 0
    launch: ShellLaunch | None = None
    error: str | None = None
    process: subprocess.Popen[bytes] | None = None
    waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = field(default_factory=list)


class LoginEnvironment:
    """The captured login environment of this runtime's user; thread-safe."""

    def __init__(
        self, own_variables: tuple[str, ...], *, timeout_seconds: float = CAPTURE_TIMEOUT_SECONDS
    ) -> None:
        """`own_variables` are set per command: never captured, never taken from the runtime."""
        self._own = own_variables
        self._timeout = timeout_seconds
        self._lock = threading.Lock()
        self._attempt: _Attempt | None = None
        # The runtime's environment as last seen (os.environ's own bytes) and the base made of it.
        self._base: tuple[dict[bytes, bytes], dict[str, str]] | None = None
        #: How many captures started (each one a login shell); for tests and diagnostics.
        self.captures = 0

    def shell(self, bash: str, wait_s: float) -> ShellLaunch:
        """How to run a command with `bash` now: in the captured environment, or, when none is
        captured for the current key within `wait_s` (a capture starts if due), in the
        runtime's own environment with a `report`. Blocks up to `wait_s`."""
        key = self._key(bash)
        attempt, wait = self._choose(key)
        if wait:
            attempt.done.wait(wait_s)
        return self._launch(attempt, key, wait_s if wait else None)

    def ready(self, bash: str) -> ShellLaunch | None:
        """`shell(bash, ...)` without any wait: None when a capture is due or in flight and is to
        be waited for (then wait with `shell_async`). Called from the spawn threads."""
        key = self._key(bash)
        attempt, wait = self._choose(key)
        if wait and not attempt.done.is_set():
            return None
        return self._launch(attempt, key, None)

    async def shell_async(self, bash: str, wait_s: float) -> ShellLaunch:
        """`shell`, waiting on the event loop (no thread held) for a capture in flight."""
        key = self._key(bash)
        attempt, wait = self._choose(key)
        if wait:
            loop = asyncio.get_running_loop()
            future: asyncio.Future[None] = loop.create_future()
            with self._lock:
                pending = not attempt.done.is_set()
                if pending:
                    attempt.waiters.append((loop, future))
            if pending:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(future, wait_s)
        return self._launch(attempt, key, wait_s if wait else None)

    def status(self) -> dict[str, Any]:
        """The last capture, for /health: `state` `not_captured`, `capturing`, `captured` or
        `failed` (with `reason`), `captures`, and when and how long."""
        with self._lock:
            attempt = self._attempt
        document: dict[str, Any] = {"captures": self.captures}
        if attempt is None:
            return {"state": "not_captured", **document}
        now = time.monotonic()
        if not attempt.done.is_set():
            document["capturing_for_ms"] = round((now - attempt.started) * 1000)
            if attempt.retrying is None:
                return {"state": "capturing", **document}
            return {"state": "failed", "reason": attempt.retrying, "retrying": True, **document}
        document["duration_ms"] = round((attempt.finished - attempt.started) * 1000)
        document["finished_at"] = iso_from_ms(attempt.finished_at_ms)
        if attempt.error is None:
            return {"state": "captured", **document}
        # Rounded up: 0 only once the next call does try again.
        retry_in = math.ceil(max(0.0, RETRY_FAILED_SECONDS - (now - attempt.finished)) * 10) / 10
        return {"state": "failed", "reason": attempt.error, "retry_in_s": retry_in, **document}

    def stop(self) -> None:
        """Kill the capture in flight, if any (the runtime is stopping)."""
        with self._lock:
            attempt = self._attempt
        process = None if attempt is None else attempt.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)

    def _key(self, bash: str) -> _Key:
        # The runtime's environment without the per-command variables: what a capture starts
        # from. Made again only when the environment changed: comparing os.environ's own bytes
        # costs a microsecond, decoding them every call tens (it is checked on every command).
        raw: dict[bytes, bytes] | None = getattr(os.environ, "_data", None)
        cached = self._base
        if raw is not None and cached is not None and cached[0] == raw:
            base = cached[1]
        else:
            base = {name: value for name, value in os.environ.items() if name not in self._own}
            if raw is not None:
                self._base = (dict(raw), base)
        return (bash, _signature(base), base)

    def _choose(self, key: _Key) -> tuple[_Attempt, bool]:
        """The attempt that decides this call, starting one when due, and whether to wait for it."""
        with self._lock:
            attempt = self._attempt
            if attempt is None or attempt.key != key:
                return self._begin(key, None), True
            if not attempt.done.is_set():
                return attempt, attempt.retrying is None
            if attempt.error is not None and time.monotonic() - attempt.finished >= RETRY_FAILED_SECONDS:
                return self._begin(key, attempt.error), False
            return attempt, False

    def _begin(self, key: _Key, retrying: str | None) -> _Attempt:
        # Under self._lock.
        attempt = _Attempt(key=key, retrying=retrying)
        self._attempt = attempt
        self.captures += 1
        threading.Thread(target=self._run, args=(attempt,), name="login-capture", daemon=True).start()
        return attempt

    def _launch(self, attempt: _Attempt, key: _Key, waited_s: float | None) -> ShellLaunch:
        if attempt.launch is not None:
            return attempt.launch
        bash, _, base = key
        if attempt.error is not None:
            reason = (
                f"{attempt.error}; {_WITHOUT}. Tried again after {RETRY_FAILED_SECONDS:g} s, or at "
                "once when a profile file changes."
            )
            report = {"used": False, "state": "failed", "reason": reason}
        elif attempt.retrying is not None:
            reason = f"{attempt.retrying}; {_WITHOUT}. Trying again now, in the background."
            report = {"used": False, "state": "failed", "reason": reason}
        else:
            running = time.monotonic() - attempt.started
            bound = "" if waited_s is None else f" (this call waits at most {waited_s:g} s)"
            reason = (
                f"the login profile (bash -l) was still running after {running:.1f} s{bound}; "
                f"{_WITHOUT}. The capture goes on in the background (up to {self._timeout:g} s) "
                "and later calls use it."
            )
            report = {"used": False, "state": "capturing", "reason": reason}
        return ShellLaunch(bash=bash, env=base, umask=None, report=report)

    def _run(self, attempt: _Attempt) -> None:
        """The capture thread: run the login shell, record how it went, wake the waiters."""
        bash, _, base = attempt.key
        launch: ShellLaunch | None = None
        error: str | None = None
        try:
            env, umask = _capture(bash, base, self._timeout, partial(setattr, attempt, "process"))
        except (_CaptureFailed, OSError) as exc:  # OSError: the scratch directory or its files
            error = str(exc) if isinstance(exc, _CaptureFailed) else f"the capture could not run: {exc}"
            _log.warning(
                "could not capture the login environment (%s); commands run without it, tried again "
                "in %g s or when the profile changes",
                exc,
                RETRY_FAILED_SECONDS,
            )
        else:
            for name in (*_SHELL_OWN, *self._own):
                env.pop(name, None)
            env.update((name, base[name]) for name in _SHELL_OWN if name in base)
            launch = ShellLaunch(bash=bash, env=env, umask=umask)
            took_ms = (time.monotonic() - attempt.started) * 1000
            _log.info("captured the login environment in %.0f ms", took_ms)
        with self._lock:
            attempt.launch, attempt.error, attempt.process = launch, error, None
            attempt.finished, attempt.finished_at_ms = time.monotonic(), epoch_ms()
            attempt.done.set()
            waiters, attempt.waiters = attempt.waiters, []
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_wake, future)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _CaptureFailed(Exception):
    pass


def _home(base: dict[str, str]) -> Path:
    home = base.get("HOME")
    if home:
        return Path(home)
    with contextlib.suppress(KeyError):
        return Path(pwd.getpwuid(os.getuid()).pw_dir)
    return Path("/")


_Identity = tuple[int, int, int, int, int]
# directory -> (its identity, its sorted entries) when last listed: a directory lists the same
# names while its identity (mtime and ctime included) is unchanged.
_LISTINGS: dict[str, tuple[_Identity, list[str]]] = {}


def _identity(path: str) -> _Identity | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _entries(directory: str, identity: _Identity | None) -> list[str]:
    """The paths in `directory`, listed again only when its identity changed."""
    if identity is None:
        return []
    listed = _LISTINGS.get(directory)
    if listed is not None and listed[0] == identity:
        return listed[1]
    try:
        paths = [os.path.join(directory, name) for name in sorted(os.listdir(directory))]
    except OSError:
        return []
    _LISTINGS[directory] = (identity, paths)
    return paths


def _signature(base: dict[str, str]) -> _Signature:
    """(path, identity) of every watched file; identity None for a missing one. The watched
    files: `_SYSTEM_FILES`, each of `_SYSTEM_DIRECTORIES` and its entries, `_HOME_FILES`."""
    signature: list[tuple[str, _Identity | None]] = [(path, _identity(path)) for path in _SYSTEM_FILES]
    for directory in _SYSTEM_DIRECTORIES:
        identity = _identity(directory)
        signature.append((directory, identity))
        signature.extend((path, _identity(path)) for path in _entries(directory, identity))
    home = str(_home(base))
    signature.extend((path, _identity(path)) for path in (os.path.join(home, name) for name in _HOME_FILES))
    return tuple(signature)


def _capture(
    bash: str, base: dict[str, str], timeout: float, started: Callable[[subprocess.Popen[bytes]], None]
) -> tuple[dict[str, str], int]:
    """Run the login shell once (`started` is given its process); its exported environment and
    umask. Raises _CaptureFailed."""
    home = _home(base)
    with tempfile.TemporaryDirectory(prefix="herdr-mcp-login-") as scratch:
        output = os.path.join(scratch, "environment")
        log_path = os.path.join(scratch, "profile-output")
        argv = [bash, "-l", "-c", 'exec "$@"', "bash", sys.executable, "-I", "-S", "-c", _DUMP, output]
        with open(log_path, "wb") as log:
            try:
                process = subprocess.Popen(
                    argv,
                    cwd=home if home.is_dir() else "/",
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                    env=base,
                )
            except OSError as exc:
                raise _CaptureFailed(f"bash could not start: {exc}") from exc
            started(process)
            try:
                returncode = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise _CaptureFailed(f"the login profile (bash -l) ran longer than {timeout:g} s") from None
        if returncode != 0:
            tail = Path(log_path).read_bytes()[-300:].decode("utf-8", "replace").strip()
            raise _CaptureFailed(f"the login profile (bash -l) exited with status {returncode}: {tail!r}")
        try:
            data = Path(output).read_bytes()
        except OSError as exc:
            raise _CaptureFailed(f"the login shell wrote no environment ({exc})") from exc
    mask, *entries = data.split(b"\0")
    if not mask.isdigit():
        raise _CaptureFailed("the login shell wrote an incomplete environment")
    env: dict[str, str] = {}
    for entry in entries:
        name, separator, value = entry.partition(b"=")
        if separator:
            env[os.fsdecode(name)] = os.fsdecode(value)
    return env, int(mask)
