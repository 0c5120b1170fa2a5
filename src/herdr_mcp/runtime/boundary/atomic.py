"""Atomic, symlink-free file replacement and removal inside a root.

A write never leaves a half-written file and never goes through a symlink:
1. The parent directory is opened from the root one component at a time with O_NOFOLLOW (and,
   when asked, missing directories are created the same way), so every later step works on that
   exact directory.
2. A symlink as the target is refused (`symlink_refused`); a non-regular target is `not_a_file`.
3. The bytes go to a fresh temp file in the same directory (O_CREAT|O_EXCL, mode 0600), are
   fsynced, then the temp file gets the original file's mode (0644 for a new file).
4. Right before the rename, the parent path's realpath must still be the directory we hold, the
   target must still not be a symlink, and (when the caller read it first) must be unchanged.
5. os.replace inside that directory, then fsync the directory so the rename is durable.
Any failure removes the temp file and the directories step 1 created, so a refusal changes
nothing. Directories are removed the way they were made, each relative to its parent's descriptor,
so no absolute path (which PATH_MAX bounds) is ever needed.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary.paths import ResolvedPath, open_error, relative_parts
from herdr_mcp.runtime.boundary.roots import Root

__all__ = ["FileIdentity", "atomic_write", "remove_directories", "remove_file"]

_ANCHOR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_MODE = 0o644
_NEW_DIRECTORY_MODE = 0o755
# Leave room under NAME_MAX (255 bytes) for the ".<name>.<random>.herdr-tmp" decoration (24 bytes).
_TEMP_NAME_STEM_MAX = 200


@dataclass(frozen=True)
class FileIdentity:
    """What a file looked like when it was read, to detect a concurrent change before replacing."""

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        """The identity of a stat result."""
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _open_parent(target: ResolvedPath, *, create: bool) -> tuple[int, list[Path]]:
    """An O_NOFOLLOW descriptor of the target's parent and the directories created on the way."""
    parts = relative_parts(target.relative)[:-1]
    created: list[Path] = []
    try:
        fd = os.open(target.root.path, _ANCHOR_FLAGS)
    except OSError as exc:
        raise open_error(exc, target.relative) from exc
    try:
        walked = target.root.path
        for name in parts:
            walked = walked / name
            try:
                nxt = os.open(name, _ANCHOR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(name, _NEW_DIRECTORY_MODE, dir_fd=fd)
                created.append(walked)
                nxt = os.open(name, _ANCHOR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError as exc:
        os.close(fd)
        raise open_error(exc, target.relative) from exc
    return fd, created


def _target_mode(parent_fd: int, name: str, target: ResolvedPath) -> int | None:
    """The existing target's permission bits, or None when it does not exist."""
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise ToolError(
            "symlink_refused",
            f"{target.relative} is a symlink; mutations never follow symlinks.",
            path=target.relative,
        )
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(
            "not_a_file",
            f"{target.relative} is not a regular file; it cannot be replaced.",
            path=target.relative,
        )
    return stat.S_IMODE(st.st_mode)


def _recheck(
    parent_fd: int, name: str, target: ResolvedPath, expect: FileIdentity | None, *, create_only: bool
) -> None:
    """Step 4: the parent is still where we think and the target is still what we read."""
    parent = target.path.parent
    held = os.fstat(parent_fd)
    try:
        now = os.stat(parent)
    except OSError as exc:
        raise open_error(exc, target.relative) from exc
    if os.path.realpath(parent) != str(parent) or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
        raise ToolError(
            "symlink_refused",
            f"The directory of {target.relative} was moved or replaced during the write; inspect and retry.",
            path=target.relative,
        )
    mode = _target_mode(parent_fd, name, target)
    if create_only and mode is not None:
        raise ToolError(
            "file_exists",
            f"{target.relative} appeared while it was being created; inspect it and retry.",
            path=target.relative,
        )
    if expect is not None:
        current = (
            FileIdentity.of(os.stat(name, dir_fd=parent_fd, follow_symlinks=False))
            if mode is not None
            else None
        )
        if current != expect:
            raise ToolError(
                "file_changed",
                f"{target.relative} changed while it was being edited; read it again and retry.",
                path=target.relative,
            )


def _fsync_directory(parent_fd: int) -> None:
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=parent_fd)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(
    target: ResolvedPath,
    data: bytes,
    *,
    create_parents: bool = False,
    create_only: bool = False,
    expect: FileIdentity | None = None,
) -> list[Path]:
    """Replace (or create) `target` with `data` atomically; return directories it had to create.

    `create_parents` creates missing directories (without following symlinks); `create_only`
    refuses with `file_exists` when the target exists right before the rename; `expect` is the
    identity of the file the new content was computed from, and the write is refused with
    `file_changed` when the file differs right before the rename. Raises ToolError
    (`symlink_refused`, `not_a_file`, `file_exists`, `file_changed`, `not_found`, `io_error`).
    """
    name = relative_parts(target.relative)[-1]
    parent_fd, created = _open_parent(target, create=create_parents)
    temp_name = f".{_temp_stem(name)}.{secrets.token_hex(6)}.herdr-tmp"
    temp_created = False
    succeeded = False
    try:
        mode = _target_mode(parent_fd, name, target)
        fd = os.open(
            temp_name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=parent_fd,
        )
        temp_created = True
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            os.fchmod(fd, _NEW_FILE_MODE if mode is None else mode)
        finally:
            os.close(fd)
        _recheck(parent_fd, name, target, expect, create_only=create_only)
        os.replace(temp_name, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
        temp_created = False
        _fsync_directory(parent_fd)
        succeeded = True
    except OSError as exc:
        raise ToolError(
            "io_error",
            f"Could not write {target.relative}: {exc.strerror}; check disk space and permissions.",
            path=target.relative,
        ) from exc
    finally:
        if temp_created:
            try:
                os.unlink(temp_name, dir_fd=parent_fd)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise
        os.close(parent_fd)
        if not succeeded:
            remove_directories(target.root, created)
    return created


def _temp_stem(name: str) -> str:
    """The start of `name` that fits _TEMP_NAME_STEM_MAX bytes, cut between characters."""
    return os.fsencode(name)[:_TEMP_NAME_STEM_MAX].decode("utf-8", "ignore")


def remove_directories(root: Root, created: list[Path]) -> list[str]:
    """Remove directories a failed or rolled-back write created, deepest first.

    Each is removed relative to a descriptor of its parent opened from `root` without following
    symlinks, so depth and PATH_MAX do not matter. A directory someone else put files into stays.
    Returns the root-relative paths that could not be removed (empty when all were).
    """
    remaining: list[str] = []
    for directory in reversed(created):
        relative = directory.relative_to(root.path).as_posix()
        parts = relative_parts(relative)
        try:
            parent_fd = _open_directory_beneath(root, parts[:-1])
        except OSError:
            remaining.append(relative)
            continue
        try:
            os.rmdir(parts[-1], dir_fd=parent_fd)
        except FileNotFoundError:
            continue
        except OSError:
            remaining.append(relative)
        finally:
            os.close(parent_fd)
    return remaining


def _open_directory_beneath(root: Root, parts: list[str]) -> int:
    """An O_NOFOLLOW anchor descriptor of root/parts, opened one component at a time."""
    fd = os.open(root.path, _ANCHOR_FLAGS)
    try:
        for name in parts:
            nxt = os.open(name, _ANCHOR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError:
        os.close(fd)
        raise
    return fd


def remove_file(target: ResolvedPath, *, expect: FileIdentity | None = None) -> None:
    """Delete the regular file `target` (never a symlink, never a directory). Raises ToolError."""
    name = relative_parts(target.relative)[-1]
    parent_fd, _ = _open_parent(target, create=False)
    try:
        if _target_mode(parent_fd, name, target) is None:
            raise ToolError("not_found", f"{target.relative} does not exist.", path=target.relative)
        _recheck(parent_fd, name, target, expect, create_only=False)
        os.unlink(name, dir_fd=parent_fd)
        _fsync_directory(parent_fd)
    except OSError as exc:
        raise ToolError(
            "io_error",
            f"Could not delete {target.relative}: {exc.strerror}; check permissions.",
            path=target.relative,
        ) from exc
    finally:
        os.close(parent_fd)
