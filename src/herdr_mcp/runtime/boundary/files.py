"""Reading inside a root: regular files opened safely, directories walked without following links.

A file is refused unless it is a regular file BEFORE it is opened (FIFOs, sockets and devices are
never opened), and opened without following symlinks and with O_NONBLOCK so a FIFO swapped in
cannot block; fstat after the open must agree with the lstat before it. A walk opens each
directory relative to its parent with O_NOFOLLOW and never enters `.git` (in any letter case) or
secret-looking directories. The fs tools and the Python grep engine (a child process) share this.
"""

from __future__ import annotations

import operator
import os
import posixpath
import stat
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Literal, NamedTuple

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary.paths import ResolvedPath, is_git_name, open_beneath, open_error
from herdr_mcp.runtime.boundary.secrets import is_secret_entry, secret_entries

__all__ = [
    "EntryKind",
    "Offload",
    "SmallWork",
    "Visit",
    "WalkEntry",
    "WalkLevel",
    "WalkPrune",
    "open_directory",
    "open_file_in",
    "open_regular",
    "refuse_non_regular",
    "utf8_boundary",
    "walk",
    "walk_listing",
]

EntryKind = Literal["file", "dir", "symlink", "other"]


def refuse_non_regular(st: os.stat_result, shown: str) -> None:
    """Raise unless `st` is a regular file: not_a_file, symlink_refused or special_file."""
    if stat.S_ISDIR(st.st_mode):
        raise ToolError("not_a_file", f"{shown} is a directory; list it with herdr_fs_list.", path=shown)
    if stat.S_ISLNK(st.st_mode):
        raise ToolError(
            "symlink_refused", f"{shown} changed into a symlink; inspect it and retry.", path=shown
        )
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(
            "special_file",
            f"{shown} is a FIFO, socket or device, which fs tools never open; use a regular file.",
            path=shown,
        )


class Offload(Exception):
    """Raised by `open_regular` or `open_directory` inside `SmallWork` when the file or the
    directory is larger than its bound, before it is opened: the caller runs the whole call
    again in a worker thread (`runtime.tools.fs.placement`)."""


#: (largest file, largest directory) in `st_size` bytes, while `SmallWork` holds.
_SMALL_WORK: ContextVar[tuple[int, int] | None] = ContextVar("small_work", default=None)


class SmallWork:
    """Within this block (one call run on the event loop), `open_regular` refuses a file larger
    than `file_bytes` and `open_directory` a directory larger than `directory_bytes` with
    `Offload`. Outside it (and in a worker thread started outside it) neither is bounded. (A
    class, not a generator: it wraps every small fs call.)"""

    __slots__ = ("_bounds", "_token")

    def __init__(self, file_bytes: int, directory_bytes: int) -> None:
        self._bounds = (file_bytes, directory_bytes)

    def __enter__(self) -> None:
        self._token = _SMALL_WORK.set(self._bounds)

    def __exit__(self, *exc_info: object) -> None:
        _SMALL_WORK.reset(self._token)


@contextmanager
def open_regular(
    target: ResolvedPath, before: os.stat_result | None = None
) -> Iterator[tuple[int, os.stat_result]]:
    """Open a regular file for reading: type checked by lstat before opening, by fstat after.
    `before` is that lstat when the caller has it from just before (`target.status` right after
    `resolve`), else it is taken here."""
    shown = target.lexical_relative
    if before is None:
        try:
            before = os.lstat(target.path)
        except OSError as exc:
            raise open_error(exc, shown) from exc
    refuse_non_regular(before, shown)
    bounds = _SMALL_WORK.get()
    if bounds is not None and before.st_size > bounds[0]:
        raise Offload(shown)
    fd = open_beneath(target.root, target.relative, os.O_RDONLY | os.O_NONBLOCK)
    try:
        after = os.fstat(fd)
        refuse_non_regular(after, shown)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise ToolError("file_changed", f"{shown} was replaced while being opened; retry.", path=shown)
        yield fd, after
    finally:
        os.close(fd)


def open_directory(target: ResolvedPath) -> int:
    """An O_NOFOLLOW descriptor of the directory `target`; `not_a_directory` when it is not one."""
    shown = target.lexical_relative
    try:
        st = os.lstat(target.path)
    except OSError as exc:
        raise open_error(exc, shown) from exc
    if not stat.S_ISDIR(st.st_mode):
        raise ToolError(
            "not_a_directory", f"{shown} is not a directory; read files with herdr_fs_read.", path=shown
        )
    bounds = _SMALL_WORK.get()
    if bounds is not None and st.st_size > bounds[1]:
        raise Offload(shown)
    return open_beneath(target.root, target.relative, os.O_RDONLY | os.O_DIRECTORY)


def open_file_in(dir_fd: int, name: str) -> int | None:
    """Open a regular file in a directory without following symlinks or blocking; None if not one."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def utf8_boundary(buf: bytes, cut: int) -> int:
    """The nearest cut at or before `cut` that does not split a UTF-8 sequence (after, if none)."""
    back = cut
    while back > 0 and back < len(buf) and (buf[back] & 0xC0) == 0x80:
        back -= 1
    if back > 0:
        return back
    while cut < len(buf) and (buf[cut] & 0xC0) == 0x80:
        cut += 1
    return cut


class WalkEntry(NamedTuple):  # a tuple: one is built per directory entry, so it must be cheap
    """One entry of `walk`; `dir_fd` is its directory, valid until the next entry is requested."""

    relative: str
    name: str
    kind: EntryKind
    size: int
    secret: bool
    dir_fd: int


def _kind(mode: int) -> EntryKind:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _sorted_names(dir_fd: int) -> list[str]:
    return sorted(os.listdir(dir_fd))


def walk(
    top_fd: int,
    root_relative: str,
    *,
    recursive: bool,
    skip: Callable[[WalkEntry], bool] | None = None,
) -> Iterator[WalkEntry]:
    """Depth-first, name-sorted entries under an open directory (owned: closed when done).

    Never follows symlinks and never descends into `.git` or secret-looking directories; every
    directory is opened relative to its parent with O_NOFOLLOW. Unreadable directories are
    skipped, and so is every entry `skip` says to skip (a directory is then not entered).
    """
    stack: list[tuple[int, str, Iterator[str]]] = []
    top_name = posixpath.basename(root_relative.rstrip("/"))
    try:
        stack.append((top_fd, "", iter(_sorted_names(top_fd))))
        while stack:
            dir_fd, prefix, names = stack[-1]
            parent = posixpath.basename(prefix.rstrip("/")) if prefix else top_name
            name = next(names, None)
            if name is None:
                os.close(dir_fd)
                stack.pop()
                continue
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                continue
            relative = prefix + name
            kind = _kind(st.st_mode)
            # Ancestors are known not to be secret (the listed directory was checked and secret
            # directories are never entered), so only this name and its parent pair can be.
            secret = is_secret_entry(parent, name)
            entry = WalkEntry(relative, name, kind, st.st_size, secret, dir_fd)
            if skip is not None and skip(entry):
                continue
            yield entry
            if recursive and kind == "dir" and not secret and not is_git_name(name):
                _push_directory(stack, dir_fd, name, relative)
    finally:
        for dir_fd, _, _ in stack:
            os.close(dir_fd)


def _push_directory(
    stack: list[tuple[int, str, Iterator[str]]], parent_fd: int, name: str, relative: str
) -> None:
    try:
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    except OSError:
        return
    try:
        names = _sorted_names(child)
    except OSError:
        os.close(child)
        return
    stack.append((child, relative + "/", iter(names)))


# --- fs_list's walk ---------------------------------------------------------------------------


class WalkLevel:
    """One directory open during a `walk_listing`: its entries in name order and where the walk is in them.

    `names` is the whole directory in name order (what a continuation glob is made from);
    `entries` are the ones the walk visits (all of them, or those `WalkPrune` leaves), `places`
    their indexes in `names` (None when `entries` are all of `names`). `resume` is the index in
    `entries` the walk goes on from once back in this directory; `secrets` are the names among
    them that look like secrets. `chain` holds the levels above
    this one with where each goes on from, and `waiting` how many of them still hold entries to
    visit (neither can change while this one is open).
    """

    __slots__ = (
        "chain", "entries", "fd", "name", "names", "places", "prefix", "resume", "secrets", "waiting",
    )  # fmt: skip

    def __init__(
        self,
        fd: int,
        prefix: str,
        name: str,
        entries: list[os.DirEntry[str]],
        names: list[str],
        places: list[int] | None,
        chain: tuple[tuple[WalkLevel, int], ...],
    ) -> None:
        self.fd = fd
        self.prefix = prefix  # the directory's path relative to the listed one, "" or ending in "/"
        self.name = name
        self.entries = entries
        self.names = names
        self.places = places
        self.resume = 0
        self.chain = chain
        self.waiting = sum(start < len(level.entries) for level, start in chain)
        # Ancestors are known not to be secret (the listed directory was checked and secret
        # directories are never entered), so only a name and its parent pair can be.
        self.secrets = secret_entries(name, names if places is None else [entry.name for entry in entries])

    def place(self, index: int) -> int:
        """The index in `names` of `entries[index]`."""
        return index if self.places is None else self.places[index]


class WalkPrune(NamedTuple):
    """The part of a tree a walk visits: inside the directories whose names `component` accepts
    at each of `depth` levels from the top (entered, not visited themselves), then the entries
    there that `keep` accepts (its argument is the path relative to the listed directory), with
    everything under them."""

    depth: int
    component: Callable[[int, str], bool]
    keep: Callable[[str], bool]


_BY_NAME = operator.attrgetter("name")


def _scan(fd: int) -> tuple[list[os.DirEntry[str]], list[str]]:
    with os.scandir(fd) as scanner:
        entries = sorted(scanner, key=_BY_NAME)
    return entries, [entry.name for entry in entries]


def _level(
    fd: int, prefix: str, name: str, prune: WalkPrune | None, chain: tuple[tuple[WalkLevel, int], ...]
) -> WalkLevel | None:
    """The level of the open directory `fd` (closed here when it cannot be read or visited)."""
    try:
        entries, names = _scan(fd)
    except OSError:
        os.close(fd)
        return None
    places: list[int] | None = None
    depth = len(chain)
    if prune is not None and depth <= prune.depth:
        if depth < prune.depth:
            component = prune.component
            places = [index for index, entry in enumerate(entries) if component(depth, entry.name)]
        else:
            keep = prune.keep
            places = [index for index, entry in enumerate(entries) if keep(prefix + entry.name)]
        entries = [entries[index] for index in places]
    return WalkLevel(fd, prefix, name, entries, names, places, chain)


#: One visited entry: its level, its index in `level.entries`, its path relative to the listed
#: directory, its kind, its size (files; 0 otherwise) and whether it looks like a secret.
Visit = tuple[WalkLevel, int, str, EntryKind, int, bool]


def walk_listing(
    top_fd: int,
    root_relative: str,
    *,
    recursive: bool,
    prune: WalkPrune | None = None,
) -> Generator[Visit, None, None]:
    """fs_list's walk: `walk`'s entries in its order, by the same rules, made for speed and for
    stopping part way (owned `top_fd`: closed when done).

    Never follows symlinks and never descends into `.git` or secret-looking directories; every
    directory is opened relative to its parent with O_NOFOLLOW. Unreadable directories and
    entries gone before they were looked at are skipped. Types come from the directory listing
    (d_type; lstat where the file system gives none); only regular files are stat'ed, for their
    size. With `prune`, only the part of the tree it names is visited (the directories it passes
    through are entered, not visited). Each visit names its level, which says where the walk
    is (for a caller that stops part way and must say where).
    """
    stack: list[WalkLevel] = []
    top = _level(top_fd, "", posixpath.basename(root_relative.rstrip("/")), prune, ())
    if top is None:
        return
    stack.append(top)
    try:
        while stack:
            level = stack[-1]
            entries = level.entries
            prefix = level.prefix
            parent = level.name
            passing = prune is not None and len(stack) <= prune.depth
            secrets = level.secrets
            descend: tuple[int, str, str] | None = None
            for index in range(level.resume, len(entries)):
                entry = entries[index]
                name = entry.name
                if passing:  # a directory on the way to the pruned part: entered, not visited
                    if (
                        entry.is_dir(follow_symlinks=False)
                        and not is_secret_entry(parent, name)
                        and not is_git_name(name)
                    ):
                        descend = (index, name, prefix + name)
                        break
                    continue
                try:
                    if entry.is_file(follow_symlinks=False):
                        kind: EntryKind = "file"
                        size = entry.stat(follow_symlinks=False).st_size
                    elif entry.is_dir(follow_symlinks=False):
                        kind, size = "dir", 0
                    elif entry.is_symlink():
                        kind, size = "symlink", 0
                    else:
                        kind, size = "other", 0
                except OSError:  # gone since the directory was read
                    continue
                relative = prefix + name
                secret = name in secrets if secrets else False
                yield level, index, relative, kind, size, secret
                if recursive and kind == "dir" and not secret and not is_git_name(name):
                    descend = (index, name, relative)
                    break
            if descend is None:
                os.close(level.fd)
                stack.pop()
                continue
            index, name, relative = descend
            level.resume = index + 1
            child = _open_child(level.fd, name, relative + "/", prune, (*level.chain, (level, index + 1)))
            if child is not None:
                stack.append(child)
    finally:
        for level in stack:
            os.close(level.fd)


def _open_child(
    parent_fd: int, name: str, prefix: str, prune: WalkPrune | None, chain: tuple[tuple[WalkLevel, int], ...]
) -> WalkLevel | None:
    try:
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    except OSError:
        return None
    return _level(child, prefix, name, prune, chain)
