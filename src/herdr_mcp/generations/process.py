"""Starting and stopping a generation's runtime process (process creation, not activation).

A generation installed by the updater (or built by `dev sync`) lives in its own runtime dir,
`<config dir>/runtimes/<id>/`:

    venv/          the generation's virtual environment (its `herdr-mcp` is the executable)
    launch.json    how it is started: the `serve` arguments, kept so the next generation is
                   started the same way (Herdr socket, read-only mode, write roots)
    runtime.pid    {"pid", "executable"} of the process started last
    starting.json  the start marker: written before the process is started, removed once its pid
                   is in runtime.pid (present afterwards: the starter died in between)
    runtime.log    its stdout and stderr

`start_runtime` runs `<executable> serve --host 127.0.0.1 --port 0 --config-dir <config dir>
<serve args>` (with `HERDR_MCP_IPC_SOCKET=<config dir>/ipc/<id>.sock`, the generation's own Unix
socket for the native host) in a new session (it outlives the updater, as a service-managed process would),
with its output appended to `runtime.log`, and waits until the runtime prints the line
`herdr-mcp serving http://127.0.0.1:<port>/mcp`; the port is the kernel's choice, so two
generations never race for one. `stop_runtime` sends SIGTERM, then SIGKILL after a grace period,
and only to a process whose command line still names the generation's executable (a recycled
pid is left alone).

A process of a generation can be found without its pid (`generation_processes`, Linux: /proc):
the launcher puts the runtime dir in its environment (`HERDR_MCP_GENERATION_DIR`; the updater's
install steps, venv and pip, carry it too). `serve` drops it from its own environment, so the
commands it runs do not inherit it, while /proc/<pid>/environ keeps showing it for the runtime
itself. Nothing else is matched: the link or `generation up` run from a generation's venv too
and are not that generation's processes. `stop_runtime` stops the recorded pid and then every
tagged process, and checks that none is left (`runtime_stop_failed` otherwise), so an updater
killed between starting a runtime and recording its pid leaves nothing the next clean-up cannot
stop. Elsewhere (macOS) only the recorded pid is known.

Errors: `GenerationError` with `runtime_start_failed` (exited, or never said where it listens,
with the tail of its log), `runtime_dir_invalid` (an unreadable launch.json), `runtime_stop_failed`
(a process of the generation survived SIGKILL).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from herdr_mcp.generations.control import Generation, GenerationError, GenerationStateError, check_endpoint
from herdr_mcp.layout import GENERATION_TAG_ENV, IPC_SOCKET_ENV, RUNTIMES_DIR, Layout
from herdr_mcp.records import FailRule, RecordInvalid, RecordKind, atomic_write

LAUNCH_FILE = "launch.json"
PID_FILE = "runtime.pid"
LOG_FILE = "runtime.log"
START_MARKER = "starting.json"
#: A runtime opens state.db, binds and prints its address in about a second; a cold venv on a slow
#: disk may need ten.
START_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
_SERVING = "herdr-mcp serving "
#: serve arguments the launcher sets itself; a launch.json may not override them.
_RESERVED = frozenset({"--host", "--port", "--config-dir", "--ipc-socket"})
MAX_LAUNCH_BYTES = 64 * 1024
#: A bad launch.json stops the start (`runtime_dir_invalid`): a guess could run other arguments.
LAUNCH_RECORD = RecordKind(LAUNCH_FILE, MAX_LAUNCH_BYTES, FailRule.CLOSED)
#: A bad runtime.pid fails open: it names no live runtime, so the supervisor starts one again.
PID_RECORD = RecordKind(PID_FILE, 4096, FailRule.OPEN)


def runtimes_dir(config_dir: Path) -> Path:
    return config_dir / RUNTIMES_DIR


def is_managed(config_dir: Path, spec: Generation) -> bool:
    """Whether `spec` runs from its runtime dir under `config_dir` (made by `update` or `dev
    sync`): only such generations are ever started, stopped or removed by herdr-mcp itself."""
    return spec.executable is not None and in_runtime_dir(config_dir, spec.generation, Path(spec.executable))


def in_runtime_dir(config_dir: Path, generation: str, path: Path) -> bool:
    """Whether `path` lies inside `generation`'s runtime dir under `config_dir`."""
    return path.is_relative_to(runtimes_dir(config_dir) / generation)


@dataclass(frozen=True)
class StartedRuntime:
    """A runtime process that said where it listens."""

    pid: int
    endpoint: str
    log: Path


def read_serve_args(runtime_dir: Path) -> tuple[str, ...] | None:
    """The `serve` arguments recorded in `runtime_dir/launch.json`, or None if there is none."""
    path = runtime_dir / LAUNCH_FILE
    try:
        document = LAUNCH_RECORD.read(path)
    except RecordInvalid as exc:
        raise GenerationStateError("runtime_dir_invalid", str(exc)) from None
    if document is None:
        return None
    args = document.get("serve_args")
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise GenerationStateError("runtime_dir_invalid", f'{path} is not {{"serve_args": [strings]}}')
    return check_serve_args(args)


def record_serve_args(runtime_dir: Path, serve_args: Sequence[str]) -> None:
    """Keep `serve_args` in `runtime_dir/launch.json`: the next start of that generation's runtime
    (`generation up`, `herdr-mcp start`) uses them."""
    args = check_serve_args(serve_args)
    atomic_write(runtime_dir / LAUNCH_FILE, json.dumps({"serve_args": list(args)}, indent=2).encode() + b"\n")


def check_serve_args(args: Sequence[str]) -> tuple[str, ...]:
    """`args` if none of them is one the launcher owns (--host, --port, --config-dir, --ipc-socket)."""
    for arg in args:
        if arg.split("=", 1)[0] in _RESERVED:
            raise GenerationError(
                "serve_args_invalid",
                f"{arg} is set by the launcher (loopback host, a free port, the config dir, the ipc socket)",
            )
    return tuple(args)


def start_runtime(
    executable: Path,
    runtime_dir: Path,
    config_dir: Path,
    serve_args: Sequence[str] = (),
    *,
    port: int = 0,
    timeout_s: float = START_TIMEOUT_S,
    on_spawn: Callable[[int], None] | None = None,
) -> StartedRuntime:
    """Start the generation's runtime and wait until it listens (module docstring); `port` 0 lets
    the kernel choose. `on_spawn(pid)` runs between the start and the recording of the pid (the
    updater's test hook for a kill in that window)."""
    args = check_serve_args(serve_args)
    runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    record_serve_args(runtime_dir, args)
    tag = generation_tag(runtime_dir)
    marker = runtime_dir / START_MARKER
    atomic_write(marker, json.dumps({"tag": tag, "starter_pid": os.getpid()}).encode() + b"\n")
    command = [
        str(executable), "serve", "--host", "127.0.0.1", "--port", str(port),
        "--config-dir", str(config_dir), *args,
    ]  # fmt: skip
    env = {**os.environ, "HERDR_MCP_CONFIG_DIR": str(config_dir)}
    # Each generation's runtime has its own Unix socket for the native host
    # (`browser_ipc.active_socket`); a runtime too old to know it ignores the variable.
    env[IPC_SOCKET_ENV] = str(Layout(config_dir).generation_socket(runtime_dir.name))
    env.pop("PYTHONPATH", None)  # the generation runs its own venv's code, nothing else
    env[GENERATION_TAG_ENV] = tag
    log_path = runtime_dir / LOG_FILE
    try:
        pid, announced = launch_detached(
            executable,
            command,
            env,
            log_path,
            runtime_dir / PID_FILE,
            _SERVING,
            timeout_s=timeout_s,
            on_spawn=on_spawn,
            recorded=lambda: marker.unlink(missing_ok=True),
        )
    finally:
        marker.unlink(missing_ok=True)
    if not announced.endswith("/mcp"):
        _terminate(pid)
        raise GenerationStateError(
            "runtime_start_failed", f"{executable} serve announced {announced!r}, not an MCP endpoint"
        )
    return StartedRuntime(pid=pid, endpoint=check_endpoint(announced[: -len("/mcp")]), log=log_path)


def launch_detached(
    executable: Path,
    command: Sequence[str],
    env: dict[str, str],
    log_path: Path,
    pid_path: Path,
    prefix: str,
    *,
    timeout_s: float = START_TIMEOUT_S,
    on_spawn: Callable[[int], None] | None = None,
    recorded: Callable[[], None] | None = None,
) -> tuple[int, str]:
    """Run `command` in its own session (it outlives this process) with its output appended to
    `log_path`, record `{"pid", "executable"}` in `pid_path`, and wait until it prints a line
    starting with `prefix`; the pid and the rest of that line. A process that exits first, or
    says nothing within `timeout_s` (it is stopped then), raises
    `GenerationStateError("runtime_start_failed")` with the tail of its log. `on_spawn(pid)` runs
    right after the start, `recorded()` right after the pid is recorded."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        offset = os.fstat(fd).st_size
        # posix_spawn, not Popen: the process outlives this one, which never waits for it, and
        # a Popen object would complain when collected while its child still runs.
        try:
            pid = _spawn(executable, list(command), env, fd)
        except OSError as exc:
            raise GenerationStateError(
                "runtime_start_failed", f"cannot run {executable}: {exc.strerror}"
            ) from None
    finally:
        os.close(fd)
    if on_spawn is not None:
        on_spawn(pid)
    atomic_write(pid_path, json.dumps({"pid": pid, "executable": str(executable)}).encode() + b"\n")
    if recorded is not None:
        recorded()
    deadline = time.monotonic() + timeout_s
    what = " ".join(command[1:2])
    while True:
        announced = _announced(log_path, offset, prefix)
        if announced is not None:
            return pid, announced
        code = _exit_code(pid)
        if code is not None or time.monotonic() > deadline:
            if code is None:
                _terminate(pid)
            raise GenerationStateError(
                "runtime_start_failed",
                f"{executable} {what} "
                + (f"exited with {code}" if code is not None else f"did not start within {timeout_s:.0f} s")
                + f"; its log ({log_path}) ends with: {_tail(log_path, offset)}",
            )
        time.sleep(0.05)


#: Runtimes started through Popen (where posix_spawn cannot start a session), kept referenced so
#: that no Popen object is collected while its runtime runs.
_POPEN_CHILDREN: list[subprocess.Popen[bytes]] = []


def _spawn(executable: Path, command: list[str], env: dict[str, str], log_fd: int) -> int:
    """Start `command` in a new session with stdin from /dev/null and stdout/stderr to `log_fd`."""
    try:
        return os.posix_spawn(
            str(executable),
            command,
            env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log_fd, 1),
                (os.POSIX_SPAWN_DUP2, log_fd, 2),
            ],
            setsid=True,
        )
    except NotImplementedError:  # a libc without POSIX_SPAWN_SETSID
        process = subprocess.Popen(
            command,
            executable=executable,
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            env=env,
            start_new_session=True,
        )
        _POPEN_CHILDREN.append(process)
        return process.pid


def _exit_code(pid: int) -> int | None:
    """The exit status of our child `pid` if it has ended (reaping it), else None."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return -1
    if done != pid:
        return None
    code = os.waitstatus_to_exitcode(status)
    _reaped(pid, code)
    return code


def _reaped(pid: int, code: int) -> None:
    """`pid` was reaped here: its Popen object, if it was started through one, learns its exit
    status and is let go (else it would warn "still running" when collected at exit)."""
    for process in [child for child in _POPEN_CHILDREN if child.pid == pid]:
        process.returncode = code
        _POPEN_CHILDREN.remove(process)


def _announced(log: Path, offset: int, prefix: str) -> str | None:
    with log.open("rb") as handle:
        handle.seek(offset)
        for raw in handle.read(256 * 1024).splitlines():
            line = raw.decode("utf-8", "replace").strip()
            if line.startswith(prefix):
                return line[len(prefix) :]
    return None


def _tail(log: Path, offset: int) -> str:
    with log.open("rb") as handle:
        handle.seek(offset)
        text = handle.read().decode("utf-8", "replace").strip()
    return text[-1500:] or "(nothing)"


def runtime_pid(runtime_dir: Path) -> int | None:
    """The pid of the generation's runtime if that process is alive and is still the generation's
    executable, else None."""
    return recorded_pid(runtime_dir / PID_FILE)


def recorded_pid(pid_path: Path) -> int | None:
    """The pid `launch_detached` recorded in `pid_path` if that process is alive and still runs
    the recorded executable, else None."""
    document = PID_RECORD.read(pid_path)
    if document is None:
        return None
    try:
        pid, executable = int(document["pid"]), str(document["executable"])
    except (ValueError, KeyError, TypeError):
        return None
    return pid if pid > 1 and _runs(pid, executable) else None


def _runs(pid: int, executable: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # someone else's process: a recycled pid
    if sys.platform == "linux":
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            stat_fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return False
        if stat_fields and stat_fields[0] == "Z":
            _reap(pid)
            return False
        if argv == [b""]:
            # A process that is exiting has released its memory (so its command line reads empty)
            # but maybe not yet its sockets: still running for our purposes, until it is gone.
            return True
        return any(arg.decode("utf-8", "replace") == executable for arg in argv)
    done = subprocess.run(
        ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, check=False
    )
    return executable in done.stdout


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            _reaped(pid, os.waitstatus_to_exitcode(status))


def stop_runtime(runtime_dir: Path, *, grace_s: float = STOP_GRACE_S) -> bool:
    """Stop the generation's runtime if it runs, and every other process of the generation
    (`generation_processes`); True if a process was stopped. Raises
    `GenerationStateError("runtime_stop_failed")` when one is still there afterwards."""
    stopped = stop_recorded(runtime_dir / PID_FILE, grace_s=grace_s)
    found = generation_processes(runtime_dir)
    for pid in found:
        _terminate(pid, grace_s)
    left = generation_processes(runtime_dir)
    if left:
        raise GenerationStateError(
            "runtime_stop_failed",
            f"processes {', '.join(map(str, left))} of the generation in {runtime_dir} survived "
            "SIGTERM and SIGKILL; its directory is left in place",
        )
    return stopped or bool(found)


def generation_tag(runtime_dir: Path) -> str:
    """The value of `HERDR_MCP_GENERATION_DIR` for the processes of the generation in
    `runtime_dir`: its absolute path."""
    return os.path.abspath(runtime_dir)


def generation_processes(runtime_dir: Path) -> list[int]:
    """The live processes of the generation in `runtime_dir` (module docstring), this process and
    its ancestors excepted; [] where there is no /proc."""
    tag = f"{GENERATION_TAG_ENV}={generation_tag(runtime_dir)}".encode()
    return [pid for pid, environ in _processes() if tag in environ]


def tagged_generations(runtimes: Path) -> dict[str, list[int]]:
    """The live tagged processes of every generation under `runtimes`, by generation name
    (directory present or not: an older clean-up removed directories but not their processes)."""
    prefix = f"{GENERATION_TAG_ENV}={generation_tag(runtimes)}{os.sep}".encode()
    found: dict[str, list[int]] = {}
    for pid, environ in _processes():
        for entry in environ:
            if entry.startswith(prefix):
                name = entry[len(prefix) :].decode("utf-8", "replace")
                if name and os.sep not in name:
                    found.setdefault(name, []).append(pid)
                break
    return found


def _processes() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, environment entries) of every live process readable here, but this one and its
    ancestors."""
    if sys.platform != "linux":
        return
    mine = _ancestors()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit() or int(entry) in mine:
            continue
        pid = int(entry)
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:  # gone, or not ours to read
            continue
        if not _zombie(pid):
            yield pid, environ


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return pids


def stop_recorded(pid_path: Path, *, grace_s: float = STOP_GRACE_S) -> bool:
    """Stop the process `pid_path` records if it still runs (`recorded_pid`); True if one was."""
    pid = recorded_pid(pid_path)
    if pid is None:
        return False
    _terminate(pid, grace_s)
    return True


def _terminate(pid: int, grace_s: float = STOP_GRACE_S) -> None:
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(pid)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            if sys.platform == "linux" and _zombie(pid):
                _reap(pid)
                return
            time.sleep(0.05)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
