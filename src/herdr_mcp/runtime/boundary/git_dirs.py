"""The Git directory of a mutation target, known by what it is rather than by its name.

The name rule (`is_git_name`: no `.git` component, in any letter case) misses a Git directory
under another name: a worktree whose `.git` is a file saying `gitdir: ./.bare`, a bare
repository inside a project, a worktree's private gitdir under `<common>/worktrees/<name>`.
Writing there changes what the user's next `git status` runs (`config`'s core.fsmonitor,
`hooks/pre-commit`). So every mutation target is also checked against the repository enclosing
it, asked anew for every target (nothing is cached, so a `.git` file written a moment ago counts):

1. Git is asked: `git rev-parse --git-dir --git-common-dir`, run from the nearest existing
   directory of the target (Git's own discovery: nested repositories, submodules, worktrees and
   `.git` files included), with `safe.bareRepository=all` so a bare directory inside the project
   is found even where the user's configuration refuses to use one implicitly. The target's
   realpath inside either answer is refused.
2. Whatever Git answered (and when it could not: missing, past `GIT_DIR_TIMEOUT_S`, failing, or
   stopped at a filesystem boundary), the target's own ancestors up to its root are looked at
   directly: a directory that has what Git requires of a Git directory (`HEAD`, and `objects` and
   `refs` or a `commondir` file) is one, and a `.git` file's `gitdir:` line names another.

What is not caught: files that would only together make a directory a Git directory (`HEAD`,
`objects/`, `refs/` written one by one into a plain directory) are ordinary files when each is
written; Git's `safe.bareRepository=explicit` is the user's protection there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary.paths import ResolvedPath, is_within
from herdr_mcp.runtime.git_command import run_git

__all__ = ["GIT_DIR_TIMEOUT_S", "enclosing_git_dirs", "refuse_git_dir"]

# `git rev-parse` answers in milliseconds; past this the filesystem is hung, and the structural
# check alone decides (it reads a few entries per ancestor).
GIT_DIR_TIMEOUT_S = 5.0
# A `.git` file holds one line; anything longer is not one.
_GITFILE_MAX_BYTES = 4096


def refuse_git_dir(target: ResolvedPath) -> None:
    """Raise `path_invalid` when `target` lies inside a Git directory, whatever its name."""
    for git_dir in enclosing_git_dirs(target):
        if is_within(target.path, git_dir):
            shown = target.lexical_relative
            raise ToolError(
                "path_invalid",
                f"{shown} is inside the Git directory {git_dir}; change Git state with Git, not fs tools.",
                path=shown,
                git_dir=str(git_dir),
            )


def enclosing_git_dirs(target: ResolvedPath) -> list[Path]:
    """Realpaths of the Git directories that could hold `target` (see the module docstring)."""
    start = _nearest_directory(target.path, target.root.path)
    found = _asked_of_git(start)
    directory = start
    while True:
        if _looks_like_git_dir(directory):
            found.append(directory)
        pointed = _gitfile_target(directory)
        if pointed is not None:
            found.append(pointed)
        if directory == target.root.path or not is_within(directory, target.root.path):
            break
        directory = directory.parent
    return list(dict.fromkeys(found))


def _nearest_directory(path: Path, root: Path) -> Path:
    """The deepest existing directory at or above `path` (the root at the highest)."""
    current = path
    while current != root and not current.is_dir():
        if current == current.parent:
            return root
        current = current.parent
    return Path(os.path.realpath(current))


def _asked_of_git(directory: Path) -> list[Path]:
    try:
        output = run_git(
            directory,
            ["-c", "safe.bareRepository=all", "rev-parse", "--git-dir", "--git-common-dir"],
            max_bytes=4 * _GITFILE_MAX_BYTES,
            timeout=GIT_DIR_TIMEOUT_S,
        )
    except ToolError:  # git_unavailable, git_timeout: the structural check decides alone
        return []
    if output.returncode != 0 or output.truncated:
        return []
    lines = os.fsdecode(output.stdout).splitlines()
    # Git prints these relative to the directory it ran in, or absolute (which join keeps).
    return [Path(os.path.realpath(directory / line)) for line in lines if line]


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False


def _looks_like_git_dir(directory: Path) -> bool:
    """What Git requires of a Git directory: HEAD, and objects/ and refs/ (or a commondir file,
    as a worktree's private gitdir has)."""
    if not os.path.lexists(directory / "HEAD"):
        return False
    if _is_file(directory / "commondir"):
        return True
    return _is_dir(directory / "objects") and _is_dir(directory / "refs")


def _gitfile_target(directory: Path) -> Path | None:
    """The realpath a `.git` file in `directory` points at (`gitdir: <path>`), else None."""
    gitfile = directory / ".git"
    try:
        fd = os.open(gitfile, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        head = os.read(fd, _GITFILE_MAX_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    first = os.fsdecode(head).splitlines()[0] if head else ""
    if not first.startswith("gitdir:"):
        return None
    pointed = first[len("gitdir:") :].strip()
    if not pointed:
        return None
    # Git reads a relative gitdir relative to the directory holding the `.git` file.
    return Path(os.path.realpath(directory / pointed))
