"""Path vocabulary of the boundary: lexical normalization, containment, and symlink-free opens.

Two checks guard every path a remote planner names. The lexical one (`normalize_lexical`,
`is_within`) never touches the disk, so `..` cannot be smuggled through a symlinked directory. The
on-disk one happens at open time: `open_beneath` walks from the root's directory descriptor one
component at a time with O_NOFOLLOW, so a symlink swapped in after the check fails the open
instead of leading elsewhere.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from herdr_mcp.errors import ToolError

if TYPE_CHECKING:
    from herdr_mcp.runtime.boundary.roots import Root

__all__ = [
    "ResolvedPath",
    "check_lengths",
    "directory_prefixes",
    "is_git_name",
    "is_within",
    "lexical_text",
    "names_directory",
    "normalize_lexical",
    "open_beneath",
    "open_error",
    "relative_parts",
    "relative_text",
    "within",
]

# O_PATH (Linux) opens a directory only to use as an anchor, without needing read permission.
_DIR_ANCHOR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Used only when pathconf cannot answer: NAME_MAX of ext4, XFS, btrfs and APFS, and the PATH_MAX of
# macOS, the smaller of the two systems the runtime runs on (Linux has 4096).
_FALLBACK_NAME_MAX = 255
_FALLBACK_PATH_MAX = 1024


@dataclass(frozen=True)
class ResolvedPath:
    """A path a tool may use: checked lexically and by realpath against one root.

    `path` is the real location (no symlinks below `root.path`), `relative` its root-relative
    POSIX form ("." for the root itself), `lexical` what the caller named after `..` folding.
    `symlinked` is true when a symlink sits anywhere between the root and the target (mutations
    refuse that); `exists` says whether the target exists (only `for_write` resolution admits a
    missing target); `missing_parents` counts directories between the deepest existing ancestor
    and the target (fs_write refuses them, fs_patch creates them); `names_directory` is true when
    the caller's own syntax names a directory (`x/`, `x/.`), which a file mutation refuses.
    """

    root: Root
    path: Path
    relative: str
    lexical: Path
    symlinked: bool
    exists: bool
    missing_parents: int = 0
    names_directory: bool = False
    #: The lstat of `path` as the resolver saw it (None when it was not taken alone: through a
    #: symlink, or missing); `open_regular(target, target.status)` takes it as its lstat.
    status: os.stat_result | None = field(default=None, compare=False, repr=False)

    @property
    def lexical_relative(self) -> str:
        """The root-relative form of what the caller named (differs from `relative` via symlinks)."""
        return relative_text(str(self.lexical), str(self.root.path))


def relative_text(path: str, base: str) -> str:
    """`path` relative to `base` as POSIX text ("." for `base` itself); both are normalized
    absolute paths and `path` lies within `base` (`within`)."""
    if path == base:
        return "."
    return path[len(base) + 1 :] if base != "/" else path[1:]


def within(path: str, directory: str) -> bool:
    """`is_within` of normalized absolute paths as text (no `.`, `..`, doubled or trailing `/`)."""
    return path == directory or directory == "/" or path.startswith(directory + "/")


def normalize_lexical(path: str, *, base: Path | None) -> Path:
    """Fold `.`, `..` and empty segments without touching the disk.

    Absolute paths ignore `base`; relative ones are joined to it (`base` must then be given).
    `..` above `/` stays at `/`, as the kernel does.
    """
    return Path(lexical_text(path, None if base is None else str(base))[0])


def directory_prefixes(path: str, *, base: Path | None) -> list[Path]:
    """The lexical paths that `path`'s own syntax requires to be directories, as the kernel reads it.

    `normalize_lexical` folds `a/..` to nothing and `a/.` to `a`, but the kernel answers ENOTDIR
    for both when `a` is a file. So the component before each `..`, and the whole path when it
    ends in `/` or `/.`, must be directories (checked by the resolver when they exist).
    """
    return [Path(prefix) for prefix in lexical_text(path, None if base is None else str(base))[1]]


def lexical_text(path: str, base: str | None) -> tuple[str, list[str]]:
    """`normalize_lexical` and `directory_prefixes` of `path` at once, as normalized text.

    `base` is a normalized absolute path (a root's), needed when `path` is relative."""
    if path.startswith("/"):
        parts: list[str] = []
    elif base is None:
        raise ValueError("a relative path needs a base")
    else:
        parts = [part for part in base.split("/") if part not in ("", ".")]
    required: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if parts:
                required.append("/" + "/".join(parts))
                parts.pop()
            continue
        parts.append(segment)
    lexical = "/" + "/".join(parts)
    if names_directory(path):
        required.append(lexical)
    return lexical, required


def names_directory(path: str) -> bool:
    """Whether `path` ends in a way only a directory can (`/`, `/.`, `/..`)."""
    return path.rsplit("/", 1)[-1] in ("", ".", "..") and "/" in path


def is_git_name(name: str) -> bool:
    """Whether a path component is Git's own directory (or gitfile), in any letter case.

    Case-insensitive volumes (macOS, Windows) open `.GIT` as `.git`, so the same rule that keeps
    fs tools out of `.git` must hold for every spelling.
    """
    return name.casefold() == ".git"


def check_lengths(path: Path, within: Path, shown: str) -> None:
    """Refuse a path the OS could not create: a name over NAME_MAX or the whole over PATH_MAX bytes.

    Limits are counted in bytes of the filesystem encoding, as the kernel counts them (the tool
    schemas count characters: 128 `é` are 256 bytes), and asked of `within`'s filesystem. Names
    below `within` are checked; `within` itself exists. Raises ToolError (`path_invalid` for a
    name that cannot be encoded, `name_too_long`, `path_too_long`).
    """
    name_max = _pathconf(within, "PC_NAME_MAX", _FALLBACK_NAME_MAX)
    path_max = _pathconf(within, "PC_PATH_MAX", _FALLBACK_PATH_MAX)
    try:
        encoded = os.fsencode(path)
        names = [os.fsencode(name) for name in path.relative_to(within).parts]
    except UnicodeEncodeError as exc:
        raise ToolError(
            "path_invalid",
            f"{shown} holds characters no file name can (a lone surrogate); send the real name.",
            path=shown,
        ) from exc
    for name in names:
        if len(name) > name_max:
            raise ToolError(
                "name_too_long",
                f"{shown}: the name {name[:40].decode('utf-8', 'replace')}... is {len(name)} bytes, over "
                f"this filesystem's limit of {name_max}; use a shorter name.",
                path=shown,
                limit=name_max,
            )
    # PATH_MAX counts the terminating NUL.
    if len(encoded) >= path_max:
        raise ToolError(
            "path_too_long",
            f"{shown} would be {len(encoded)} bytes as an absolute path, over this system's limit of "
            f"{path_max - 1}; use a shallower path or shorter names.",
            path=shown,
            limit=path_max - 1,
        )


def _pathconf(path: Path, name: str, fallback: int) -> int:
    try:
        value = os.pathconf(path, name)
    except (OSError, ValueError):
        return fallback
    return value if value > 0 else fallback


def is_within(path: Path, directory: Path) -> bool:
    """Component-wise containment: /x/repo2 is not within /x/repo; a directory is within itself."""
    return path == directory or directory in path.parents


def relative_parts(relative: str) -> list[str]:
    """The components of a root-relative path ("." has none)."""
    if relative.startswith("/"):
        return [part for part in PurePosixPath(relative).parts if part != "."]
    return [part for part in relative.split("/") if part not in ("", ".")]


def open_error(exc: OSError, relative: str) -> ToolError:
    """Translate an OSError from a boundary open into the ToolError a planner sees."""
    if exc.errno == errno.ELOOP:
        return ToolError(
            "symlink_refused",
            f"{relative} is (or changed into) a symlink; symlinks are never followed here.",
            path=relative,
        )
    if exc.errno == errno.ENOENT:
        return ToolError("not_found", f"{relative} does not exist; check the path.", path=relative)
    if exc.errno == errno.ENOTDIR:
        return ToolError(
            "not_a_directory",
            f"A parent of {relative} is not a directory (or is a symlink); check the path.",
            path=relative,
        )
    return ToolError(
        "io_error", f"Could not open {relative}: {exc.strerror}; check permissions.", path=relative
    )


def open_beneath(root: Root, relative: str, flags: int) -> int:
    """Open `relative` under `root` without following any symlink on the way; return the fd.

    Every directory is opened relative to its parent's descriptor with O_NOFOLLOW, and the final
    component with `flags | O_NOFOLLOW | O_CLOEXEC`. Raises ToolError (`symlink_refused`,
    `not_found`, `not_a_directory`, `io_error`).
    """
    parts = relative_parts(relative)
    try:
        current = os.open(root.path, _DIR_ANCHOR_FLAGS)
    except OSError as exc:
        raise open_error(exc, relative) from exc
    try:
        if not parts:
            return os.open(".", flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current)
        for name in parts[:-1]:
            nxt = os.open(name, _DIR_ANCHOR_FLAGS, dir_fd=current)
            os.close(current)
            current = nxt
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current)
    except OSError as exc:
        raise open_error(exc, relative) from exc
    finally:
        os.close(current)
