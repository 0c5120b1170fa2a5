"""The runtime's Unix socket for the native host (docs/browser-protocol.md, section 1).

`bind_ipc_socket(path)` returns a listening `AF_UNIX` socket that uvicorn serves beside the
loopback port (the same app, the same bearer). The rules:

- The directory is created 0700; an existing one must be a real directory (not a symlink) owned
  by this user with no group or other permissions, else `ipc_dir_unsafe`.
- A lock file beside the socket (`<name>.lock`, flock held for the runtime's life) says a runtime
  owns the path: when another holds it, `ipc_socket_in_use`. Without a holder, a socket file that
  still answers a connect belongs to something else: `ipc_socket_in_use` too; one that does not
  answer is stale (its runtime died) and is replaced. Anything else at the path (a file, a
  directory, a symlink) is refused with `ipc_path_not_socket`, never deleted.
- The socket is bound under a temporary name in the 0700 directory (`.<name>`), made 0600, and
  renamed onto the path, so it never appears with wider permissions (no process-wide umask
  change).
- A path longer than the platform allows for a socket address is `ipc_socket_path_too_long`.

`IpcSocket.close()` removes the socket file (only if it is still the one bound here) and releases
the lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from herdr_mcp.errors import LocalFault

#: sun_path holds 108 bytes on Linux and 104 on macOS, the terminating NUL included.
MAX_SOCKET_PATH_BYTES = 103 if sys.platform == "darwin" else 107
BACKLOG = 128
#: How long a connect to a leftover socket may take to tell live from stale.
PROBE_TIMEOUT_S = 1.0


class IpcError(LocalFault):
    """The Unix socket cannot be set up as the rules of the module docstring require."""


@dataclass
class IpcSocket:
    path: Path
    sock: socket.socket
    _lock_fd: int
    _identity: tuple[int, int]

    def close(self) -> None:
        """Stop listening, remove the socket file if it is still ours, release the lock."""
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError):
            info = os.lstat(self.path)
            if (info.st_dev, info.st_ino) == self._identity:
                os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)


def check_socket_path(path: Path) -> Path:
    """`path` if a socket can be bound there (absolute, short enough), else IpcError."""
    path = path if path.is_absolute() else Path.cwd() / path
    size = len(os.fsencode(str(path)))
    # One byte more for the temporary name the socket is bound under first (`.<name>`).
    if size + 1 > MAX_SOCKET_PATH_BYTES:
        raise IpcError(
            "ipc_socket_path_too_long",
            f"{path} is {size} bytes; a Unix socket path here may have at most {MAX_SOCKET_PATH_BYTES - 1}: "
            "pass --ipc-socket with a shorter path, or --no-ipc-socket",
        )
    return path


def _safe_dir(directory: Path) -> None:
    try:
        directory.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as exc:
        raise IpcError("ipc_dir_unsafe", f"cannot create {directory}: {exc.strerror}") from None
    info = os.lstat(directory)
    problem = None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        problem = "is not a directory (or is a symlink)"
    elif info.st_uid != os.getuid():
        problem = f"belongs to uid {info.st_uid}, not to this user"
    elif stat.S_IMODE(info.st_mode) & 0o077:
        problem = f"has mode {stat.S_IMODE(info.st_mode):o}, not 700"
    if problem is not None:
        raise IpcError(
            "ipc_dir_unsafe", f"{directory} {problem}: the socket's directory must be private (chmod 700)"
        )


def _answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT_S)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError as exc:
        return exc.errno not in (errno.ECONNREFUSED, errno.ENOENT)
    finally:
        probe.close()
    return True


def _take_lock(path: Path) -> int:
    lock_path = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise IpcError("ipc_dir_unsafe", f"cannot open {lock_path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise IpcError(
            "ipc_socket_in_use",
            f"another herdr-mcp runtime serves {path}; stop it, or pass --ipc-socket with another path",
        ) from None
    return fd


def _clear_leftover(path: Path) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise IpcError(
            "ipc_path_not_socket", f"{path} exists and is not a socket; move it aside (it is not deleted)"
        )
    if _answers(path):
        raise IpcError(
            "ipc_socket_in_use",
            f"something answers on {path}; stop it, or pass --ipc-socket with another path",
        )
    os.unlink(path)


def bind_ipc_socket(path: Path) -> IpcSocket:
    """A listening Unix socket at `path` (module docstring); raises IpcError."""
    path = check_socket_path(path)
    _safe_dir(path.parent)
    lock_fd = _take_lock(path)
    try:
        _clear_leftover(path)
        # Unique while the lock is held; a leftover of a runtime that died mid-bind goes.
        temporary = path.with_name("." + path.name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(temporary))
            try:
                os.chmod(temporary, 0o600)
                os.rename(temporary, path)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
            sock.listen(BACKLOG)
            sock.setblocking(False)
            info = os.lstat(path)
        except OSError as exc:
            sock.close()
            raise IpcError(
                "ipc_socket_unavailable", f"cannot listen on {path}: {exc.strerror or exc}"
            ) from None
    except BaseException:
        os.close(lock_fd)
        raise
    return IpcSocket(path, sock, lock_fd, (info.st_dev, info.st_ino))
