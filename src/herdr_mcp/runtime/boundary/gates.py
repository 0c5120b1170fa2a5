"""Mutation gates: the checks every fs mutation passes, in one fixed order, before any byte moves.

Checklist (the order is part of the contract; the first failing gate answers):
1. read-only mode                      -> read_only_mode
2. the root is operational             -> operational_root_mutation_unsupported
3. outside the write-root allowlist    -> write_root_not_allowed
4. a secret-looking path               -> secret_path
5. a symlink on the way or as target   -> symlink_refused
   (and anything inside .git, in any letter case (Git's own files are changed with Git), or
   inside a Git directory of another name (`gitdir: ./.bare`, a bare repository; asked of Git
   for every target, see `git_dirs`), or a path ending in `/` or `/.`, which names a
   directory -> path_invalid)
6. an agent is working in the project  -> project_busy_unconfirmed (unless confirm_busy)
7. the file has uncommitted changes    -> dirty_file_unconfirmed (unless confirm_dirty)

Gates 1-5 are about the path (`check_target`), 6-7 need acknowledgement from the planner
(`check_acknowledged`). Tools run 1-5, then their own file checks (`file_exists`, `not_a_file`),
then 6-7, so a planner is never asked to confirm something that would be refused anyway.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary.git_dirs import refuse_git_dir
from herdr_mcp.runtime.boundary.paths import ResolvedPath, is_git_name, is_within, relative_parts
from herdr_mcp.runtime.boundary.roots import Root
from herdr_mcp.runtime.boundary.secrets import is_secret_path

__all__ = [
    "GIT_STATUS_TIMEOUT_S",
    "Policy",
    "check_acknowledged",
    "check_target",
    "dirty_paths",
    "refuse_if_read_only",
    "root_mutations",
]

# `git status` on a large monorepo can take a few seconds cold; beyond this something is wrong
# (a hung filesystem, a lock) and the planner is better told than kept waiting.
GIT_STATUS_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Policy:
    """Operator policy for mutations: a read-only switch and an optional write-root allowlist."""

    read_only: bool = False
    write_roots: tuple[Path, ...] | None = None


def refuse_if_read_only(policy: Policy) -> None:
    """Gate 1 on its own, so mutation tools can answer it before resolving any path."""
    if policy.read_only:
        raise ToolError(
            "read_only_mode",
            "The runtime is in read-only mode; ask the operator to allow writes, or only read.",
        )


def root_mutations(policy: Policy, root: Root) -> str:
    """What gates 1-3 answer for fs mutations in `root`, as herdr_inspect reports it.

    `allowed`, or the code of the first gate that refuses every path of the root
    (`read_only_mode`, `operational_root_mutation_unsupported`, `write_root_not_allowed`), or
    `allowed_in_write_roots` when only configured write roots inside the root may be changed.
    """
    if policy.read_only:
        return "read_only_mode"
    if root.kind != "managed":
        return "operational_root_mutation_unsupported"
    if policy.write_roots is None:
        return "allowed"
    allowed = [Path(os.path.realpath(path)) for path in policy.write_roots]
    if any(is_within(root.path, path) for path in allowed):
        return "allowed"
    if any(is_within(path, root.path) for path in allowed):
        return "allowed_in_write_roots"
    return "write_root_not_allowed"


def check_target(policy: Policy, target: ResolvedPath) -> None:
    """Gates 1-5 for one resolved mutation target. Raises ToolError; returns nothing."""
    refuse_if_read_only(policy)
    shown = target.lexical_relative
    if target.root.kind != "managed":
        raise ToolError(
            "operational_root_mutation_unsupported",
            f"{target.root.path} is an operational (non-Git) root: fs tools only read there. "
            "Use herdr_exec for deliberate changes, or work in a managed Git root.",
            root=str(target.root.path),
        )
    if policy.write_roots is not None and not any(
        is_within(target.path, Path(os.path.realpath(allowed))) for allowed in policy.write_roots
    ):
        raise ToolError(
            "write_root_not_allowed",
            f"{target.path} is outside the configured write roots; write only under "
            f"{', '.join(str(p) for p in policy.write_roots) or '(none configured)'}.",
            path=shown,
        )
    if is_secret_path(target.relative) or is_secret_path(shown):
        raise ToolError("secret_path", f"{shown} looks like a secret; fs tools never touch it.", path=shown)
    if target.symlinked:
        raise ToolError(
            "symlink_refused",
            f"{shown} is or passes through a symlink; mutations never follow symlinks. "
            f"Use the real path {target.relative}.",
            path=shown,
        )
    if any(is_git_name(part) for part in [*relative_parts(target.relative), *relative_parts(shown)]):
        raise ToolError(
            "path_invalid", f"{shown} is inside .git; change Git state with Git, not fs tools.", path=shown
        )
    refuse_git_dir(target)
    if target.names_directory:
        raise ToolError(
            "path_invalid",
            f"{shown} ends in '/' or '/.', which names a directory; fs tools write files, so name the "
            "file without it.",
            path=shown,
        )


def check_acknowledged(
    root: Root, targets: Sequence[ResolvedPath], *, confirm_busy: bool, confirm_dirty: bool
) -> None:
    """Gates 6-7: busy project and dirty files need explicit acknowledgement. Raises ToolError."""
    if root.busy and not confirm_busy:
        raise ToolError(
            "project_busy_unconfirmed",
            f"A Herdr agent is working in {root.path}; wait with herdr_since, or retry with "
            "confirm_busy=true.",
            root=str(root.path),
        )
    if confirm_dirty:
        return
    existing = [target.relative for target in targets if target.exists]
    if not existing:
        return
    dirty = dirty_paths(root, existing)
    if dirty:
        raise ToolError(
            "dirty_file_unconfirmed",
            f"{', '.join(dirty)} has uncommitted changes; inspect them with herdr_git and retry with "
            "confirm_dirty=true.",
            paths=dirty,
        )


def dirty_paths(root: Root, relatives: Sequence[str]) -> list[str]:
    """The given root-relative paths that Git reports as changed, staged, untracked or ignored.

    Ignored files count: their content exists nowhere else, so overwriting them loses work. When
    Git cannot answer, every path is reported dirty (the planner can still confirm_dirty).
    """
    prefix = _git(root, ["rev-parse", "--show-prefix"])
    status = _git(
        root,
        ["status", "--porcelain", "-z", "--untracked-files=all", "--ignored=matching", "--", *relatives],
    )
    if prefix is None or status is None:
        return list(relatives)
    # Porcelain paths are relative to the repository top level; the root may be a subdirectory.
    top_relative = {rel: os.fsdecode(prefix).strip() + ("" if rel == "." else rel) for rel in relatives}
    reported = _porcelain_paths(status)
    return [
        rel
        for rel, path in top_relative.items()
        if any(path == seen or path.startswith(seen.rstrip("/") + "/") for seen in reported)
    ]


def _git(root: Root, arguments: list[str]) -> bytes | None:
    """Run a read-only git command in `root` without optional locks or hooks; None on failure."""
    command = [
        "git",
        "--literal-pathspecs",
        "--no-optional-locks",
        "-c",
        "core.fsmonitor=false",
        "-C",
        str(root.path),
        *arguments,
    ]
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        done = subprocess.run(
            command, capture_output=True, env=env, timeout=GIT_STATUS_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _porcelain_paths(output: bytes) -> set[str]:
    """Paths named in `git status --porcelain -z` output (both sides of a rename)."""
    paths: set[str] = set()
    fields = output.split(b"\0")
    index = 0
    while index < len(fields):
        entry = fields[index]
        index += 1
        if len(entry) < 4:
            continue
        paths.add(os.fsdecode(entry[3:]))
        if entry[:1] in (b"R", b"C") or entry[1:2] in (b"R", b"C"):
            if index < len(fields):
                paths.add(os.fsdecode(fields[index]))
            index += 1
    return paths
