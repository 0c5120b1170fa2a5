"""herdr_fs_patch: a multi-file patch (format parsed by `runtime.tools.patch`) applied inside one
managed root, all or nothing: every path is resolved and gated and every hunk checked before the
first write, and a failure midway restores what was already written."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary import (
    FileIdentity,
    Policy,
    ResolvedPath,
    Root,
    RootSet,
    atomic_write,
    check_acknowledged,
    check_target,
    open_regular,
    refuse_if_read_only,
    remove_directories,
    remove_file,
)
from herdr_mcp.runtime.tools.fs.access import EDIT_MAX_BYTES, encode_text, read_capped, read_text
from herdr_mcp.runtime.tools.patch import (
    AddFile,
    DeleteFile,
    FileChange,
    UpdateFile,
    apply_hunks,
    new_file_content,
    parse_patch,
)

# fs_patch text cap: a patch is sent whole in one request; 4 MiB is far above a reviewable patch.
PATCH_MAX_BYTES = 4 << 20


@dataclass(frozen=True)
class _Step:
    """One file operation of a checked patch, with what is needed to undo it."""

    target: ResolvedPath
    data: bytes | None  # new content; None deletes the file
    original: bytes | None  # content before the patch; None when the file is new
    identity: FileIdentity | None


@dataclass
class _Plan:
    steps: list[_Step] = field(default_factory=list)
    report: list[dict[str, Any]] = field(default_factory=list)
    seen: set[Path] = field(default_factory=set)

    def claim(self, target: ResolvedPath, shown: str) -> None:
        """Each path once per patch, and never both a file and a directory of another file."""
        if target.path in self.seen:
            raise ToolError(
                "patch_invalid",
                f"{shown} appears in more than one section; combine its changes into one section.",
                path=shown,
            )
        if any(seen in target.path.parents or target.path in seen.parents for seen in self.seen):
            raise ToolError(
                "patch_invalid",
                f"{shown} is used as a file and as a directory in this patch; keep one of them.",
                path=shown,
            )
        self.seen.add(target.path)


def _patch_target(roots: RootSet, policy: Policy, root: Root, path: str) -> ResolvedPath:
    if path.startswith("/"):
        raise ToolError("path_invalid", f"Patch paths are relative to root; {path} is absolute.", path=path)
    target = roots.resolve(path, for_write=True, root=root)
    if target.root != root:
        raise ToolError(
            "path_outside_root",
            f"{path} lies in the nested root {target.root.path}; patch it there separately.",
            path=path,
        )
    if target.relative == ".":
        raise ToolError("path_invalid", f"{path} names the root directory itself; name a file.", path=path)
    check_target(policy, target)
    return target


def _require_existing(target: ResolvedPath, shown: str) -> None:
    if not target.exists:
        raise ToolError(
            "not_found", f"{shown} does not exist; check the path (or use '*** Add File:').", path=shown
        )


def _existing_bytes(target: ResolvedPath, shown: str) -> tuple[bytes, FileIdentity]:
    """A file about to be deleted: any content (text or not), kept in memory for the undo."""
    _require_existing(target, shown)
    with open_regular(target) as (fd, st):
        return read_capped(fd, EDIT_MAX_BYTES, shown), FileIdentity.of(st)


def _line_count(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def _plan_patch(roots: RootSet, policy: Policy, root: Root, text: str) -> _Plan:
    """Parse; resolve and gate EVERY path first; then check every file and compute its content."""
    patch = parse_patch(text)
    plan = _Plan()
    located: list[tuple[FileChange, ResolvedPath, ResolvedPath | None]] = []
    for change in patch.changes:
        target = _patch_target(roots, policy, root, change.path)
        plan.claim(target, change.path)
        destination = None
        if isinstance(change, UpdateFile) and change.move_to is not None:
            destination = _patch_target(roots, policy, root, change.move_to)
            plan.claim(destination, change.move_to)
        located.append((change, target, destination))
    for change, target, destination in located:
        if isinstance(change, AddFile):
            _refuse_existing(target, change.path, "use '*** Update File:'")
            content = new_file_content(change.lines)
            plan.steps.append(_Step(target, encode_text(content, change.path), None, None))
            plan.report.append(
                {"path": change.path, "action": "add", "added_lines": len(change.lines), "removed_lines": 0}
            )
        elif isinstance(change, DeleteFile):
            old_bytes, identity = _existing_bytes(target, change.path)
            plan.steps.append(_Step(target, None, old_bytes, identity))
            plan.report.append(
                {
                    "path": change.path,
                    "action": "delete",
                    "added_lines": 0,
                    "removed_lines": _line_count(old_bytes),
                }
            )
        else:
            _plan_update(plan, change, target, destination)
    return plan


def _refuse_existing(target: ResolvedPath, shown: str, hint: str) -> None:
    if target.exists or os.path.lexists(target.path):
        raise ToolError("file_exists", f"{shown} already exists; {hint}.", path=shown)


def _plan_update(
    plan: _Plan, change: UpdateFile, target: ResolvedPath, destination: ResolvedPath | None
) -> None:
    _require_existing(target, change.path)
    old_text, old_bytes, identity = read_text(target)
    new_bytes = encode_text(apply_hunks(old_text, change.hunks, path=change.path), change.path)
    entry: dict[str, Any] = {
        "path": change.path,
        "action": "update",
        "added_lines": sum(hunk.added for hunk in change.hunks),
        "removed_lines": sum(hunk.removed for hunk in change.hunks),
    }
    if destination is None:
        plan.steps.append(_Step(target, new_bytes, old_bytes, identity))
    else:
        _refuse_existing(destination, str(change.move_to), "move to a new path")
        plan.steps.append(_Step(destination, new_bytes, None, None))
        plan.steps.append(_Step(target, None, old_bytes, identity))
        entry.update(action="move", to=change.move_to)
    plan.report.append(entry)


def _apply_plan(plan: _Plan) -> None:
    """Write every file, then delete; on any failure undo what was done and re-raise, saying
    whether the undo restored everything."""
    done: list[tuple[_Step, list[Path]]] = []
    ordered = [step for step in plan.steps if step.data is not None] + [
        s for s in plan.steps if s.data is None
    ]
    try:
        for step in ordered:
            if step.data is None:
                remove_file(step.target, expect=step.identity)
                done.append((step, []))
            else:
                created = atomic_write(
                    step.target,
                    step.data,
                    create_parents=True,
                    create_only=step.original is None,
                    expect=step.identity,
                )
                done.append((step, created))
    except ToolError as exc:
        if not done:
            raise
        left = _undo(done)
        if not left:
            raise ToolError(
                exc.code, f"{exc.message} The files already written were restored.", **exc.details
            ) from exc
        raise ToolError(
            exc.code,
            f"{exc.message} Restoring what was already written failed for {', '.join(left)}; inspect "
            "them with herdr_git status and fix them by hand.",
            **exc.details,
            not_restored=left,
        ) from exc


def _undo(done: Sequence[tuple[_Step, list[Path]]]) -> list[str]:
    """Reverse the steps done, newest first; the root-relative paths that could not be restored."""
    left: list[str] = []
    for step, created in reversed(done):
        try:
            if step.original is None:
                remove_file(step.target)
            else:
                atomic_write(step.target, step.original)
        except ToolError:
            left.append(step.target.relative)
            continue
        left.extend(remove_directories(step.target.root, created))
    return left


def fs_patch(roots: RootSet, policy: Policy, args: Mapping[str, Any]) -> dict[str, Any]:
    """herdr_fs_patch: apply a multi-file patch inside one managed root, all or nothing.

    Checklist, every step for every file before any file is written:
    1. read-only mode; `root` names an admitted root (root_unknown); the patch parses.
    2. every path (and Move to) resolves inside `root` and passes gates 2-5 (path codes, with
       name_too_long and path_too_long counted in bytes, so no directory is created for a file
       that cannot be; operational_root_mutation_unsupported, write_root_not_allowed,
       secret_path, symlink_refused); none appears twice. dry_run runs all of this too.
    3. added files and move targets do not exist (file_exists); updated/deleted files exist, are
       regular UTF-8 files within EDIT_MAX_BYTES, and every hunk applies (patch_conflict).
    4. busy project and dirty files are acknowledged (gates 6-7).
    5. unless dry_run: write new contents atomically (creating missing directories), then delete;
       a failure midway restores what was already written and removes the directories it
       created; the error says so, or names what could not be restored (`not_restored`).
    Result: root, dry_run, files [{path, action add|update|delete|move, added_lines,
    removed_lines, (to)}].
    """
    refuse_if_read_only(policy)
    root = roots.root_for(args["root"])
    text: str = args["patch"]
    if len(text.encode("utf-8", "surrogatepass")) > PATCH_MAX_BYTES:
        raise ToolError(
            "too_large", f"The patch exceeds {PATCH_MAX_BYTES} bytes; split it.", limit=PATCH_MAX_BYTES
        )
    plan = _plan_patch(roots, policy, root, text)
    check_acknowledged(
        root,
        [step.target for step in plan.steps if step.original is not None],
        confirm_busy=args["confirm_busy"],
        confirm_dirty=args["confirm_dirty"],
    )
    dry_run: bool = args["dry_run"]
    if not dry_run:
        _apply_plan(plan)
    return {"root": str(root.path), "dry_run": dry_run, "files": plan.report}
