"""The user's login environment for exec sessions, captured once instead of on every command.

Until 2026-12-01 every command ran as `bash -lc`, which sources the login profile each time
(~95-130 ms of a ~100-160 ms herdr_exec of `echo ok`). Now a login shell runs once, exports
what the profile set up, and every command runs as `bash -c` with that environment:

1. Capture: `bash -l -c 'exec "$@"' <python> ...` from the same environment the login shell
   got before (the runtime's own), in the user's home directory, stdin, stdout and stderr not
   ours (what the profile prints is written to a private file, so it no longer ends up in every
   command's output). The login shell replaces itself with a tiny Python that writes its
   exported variables and its umask to a private file. Deadline `CAPTURE_TIMEOUT_SECONDS`; its
   process group is killed when it passes.
2. Reuse: the captured variables, minus those a shell sets for itself at start (`SHLVL`, `PWD`,
   `OLDPWD`, `_`: they keep what the runtime has, as before), plus the session's own variable,
   and the captured umask.
3. Capture again when anything it depends on changes: the files a login bash reads
   (`_PROFILE_FILES`, every entry of the profile.d/paths.d directories, and the directories
   themselves, so an added file counts), each keyed on (path, device, inode, size, mtime_ns,
   ctime_ns), the runtime's own environment, and the bash binary.

When the capture fails (the profile exits, or runs past the deadline, or bash cannot start),
commands run as `bash -lc` exactly as before, so a call still works; the failure is logged and
remembered for this key for `_RETRY_FAILED_SECONDS`, so a hanging profile is not waited for on
every call.

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
import os
import pwd
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CAPTURE_TIMEOUT_SECONDS", "LoginEnvironment", "ShellLaunch"]

_log = logging.getLogger(__name__)

#: How long the one login shell of a capture may take. Generous: a slow profile (nvm, conda)
#: takes about a second; past this the capture is abandoned and commands run as `bash -lc`.
CAPTURE_TIMEOUT_SECONDS = 10.0
# After a failed capture, commands run as `bash -lc` for this long before a capture is tried
# again with unchanged files (a change to them is tried at once).
_RETRY_FAILED_SECONDS = 300.0
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

_Signature = tuple[tuple[str, tuple[int, int, int, int, int] | None], ...]


@dataclass(frozen=True)
class ShellLaunch:
    """How to start one command: `argv(command)` with `env` (add the per-command variables) and
    `umask` (None: leave the runtime's)."""

    bash: str
    login: bool  # True: the fallback, `bash -lc` sourcing the profile itself
    env: dict[str, str]
    umask: int | None

    def argv(self, command: str) -> list[str]:
        """The command line that runs `command`."""
        return [self.bash, "-lc" if self.login else "-c", command]


_Key = tuple[str, _Signature, dict[str, str]]


@dataclass(frozen=True)
class _Capture:
    key: _Key
    launch: ShellLaunch
    at: float


class LoginEnvironment:
    """The captured login environment of this runtime's user; thread-safe."""

    def __init__(
        self, own_variables: tuple[str, ...], *, timeout_seconds: float = CAPTURE_TIMEOUT_SECONDS
    ) -> None:
        """`own_variables` are set per command: never captured, never taken from the runtime."""
        self._own = own_variables
        self._timeout = timeout_seconds
        self._lock = threading.Lock()
        self._capture: _Capture | None = None
        #: How many captures ran (each one a login shell); for tests and diagnostics.
        self.captures = 0

    def shell(self, bash: str) -> ShellLaunch:
        """How to run a command with `bash` now: `bash -c` in the captured environment, or
        `bash -lc` in the runtime's environment when the capture failed. Captures first when
        nothing is captured for the current key, blocking up to the capture deadline."""
        key = self._key(bash)
        capture = self._capture
        if capture is not None and self._usable(capture, key):
            return capture.launch
        return self._recapture(key).launch

    async def shell_async(self, bash: str) -> ShellLaunch:
        """`shell`, with a capture, when one is due, run in a worker thread off the event loop."""
        key = self._key(bash)
        capture = self._capture
        if capture is not None and self._usable(capture, key):
            return capture.launch
        return (await asyncio.to_thread(self._recapture, key)).launch

    def _key(self, bash: str) -> _Key:
        # The runtime's environment without the per-command variables: what a capture starts from.
        base = {name: value for name, value in os.environ.items() if name not in self._own}
        return (bash, _signature(base), base)

    def _usable(self, capture: _Capture, key: _Key) -> bool:
        if capture.key != key:
            return False
        return not capture.launch.login or time.monotonic() - capture.at < _RETRY_FAILED_SECONDS

    def _recapture(self, key: _Key) -> _Capture:
        with self._lock:
            capture = self._capture
            if capture is None or not self._usable(capture, key):
                capture = self._run_capture(key)
                self._capture = capture
            return capture

    def _run_capture(self, key: _Key) -> _Capture:
        bash, _, base = key
        self.captures += 1
        started = time.monotonic()
        try:
            env, umask = _capture(bash, base, self._timeout)
        except _CaptureFailed as exc:
            _log.warning(
                "could not capture the login environment (%s); commands run as `bash -lc` until the "
                "profile changes or %d s have passed",
                exc,
                _RETRY_FAILED_SECONDS,
            )
            fallback = ShellLaunch(bash=bash, login=True, env=base, umask=None)
            return _Capture(key=key, launch=fallback, at=time.monotonic())
        _log.info("captured the login environment in %.0f ms", (time.monotonic() - started) * 1000)
        for name in (*_SHELL_OWN, *self._own):
            env.pop(name, None)
        env.update((name, base[name]) for name in _SHELL_OWN if name in base)
        launch = ShellLaunch(bash=bash, login=False, env=env, umask=umask)
        return _Capture(key=key, launch=launch, at=time.monotonic())


class _CaptureFailed(Exception):
    pass


def _home(base: dict[str, str]) -> Path:
    home = base.get("HOME")
    if home:
        return Path(home)
    with contextlib.suppress(KeyError):
        return Path(pwd.getpwuid(os.getuid()).pw_dir)
    return Path("/")


def _watched(base: dict[str, str]) -> list[str]:
    paths = list(_SYSTEM_FILES)
    for directory in _SYSTEM_DIRECTORIES:
        paths.append(directory)
        with contextlib.suppress(OSError):
            paths.extend(os.path.join(directory, name) for name in sorted(os.listdir(directory)))
    home = _home(base)
    paths.extend(str(home / name) for name in _HOME_FILES)
    return paths


def _signature(base: dict[str, str]) -> _Signature:
    """(path, identity) of every watched file; identity None for a missing one."""
    signature: list[tuple[str, tuple[int, int, int, int, int] | None]] = []
    for path in _watched(base):
        try:
            info = os.stat(path)
        except OSError:
            signature.append((path, None))
            continue
        identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        signature.append((path, identity))
    return tuple(signature)


def _capture(bash: str, base: dict[str, str], timeout: float) -> tuple[dict[str, str], int]:
    """Run the login shell once; its exported environment and umask. Raises _CaptureFailed."""
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
            try:
                returncode = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise _CaptureFailed(f"the login profile ran longer than {timeout:g} s") from None
        if returncode != 0:
            tail = Path(log_path).read_bytes()[-300:].decode("utf-8", "replace").strip()
            raise _CaptureFailed(f"the login shell exited with status {returncode}: {tail!r}")
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
