"""The single-file mutations: fs_edit (replace one unique occurrence) and fs_write (create or
replace). Managed roots only: the gates of `boundary.gates` run in their fixed order before
anything is read, and `boundary.atomic` writes, refusing if the file changed meanwhile."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary import (
    FileIdentity,
    Policy,
    RootSet,
    atomic_write,
    check_acknowledged,
    check_target,
    refuse_if_read_only,
    refuse_non_regular,
)
from herdr_mcp.runtime.tools.fs.access import encode_text, read_text
from herdr_mcp.text import shown_answer


def fs_edit(roots: RootSet, policy: Policy, args: Mapping[str, Any]) -> dict[str, Any]:
    """herdr_fs_edit: replace one exact, unique occurrence of old_string with new_string.

    Gates (see boundary.gates) run before the file is read; the write is atomic and refused with
    `file_changed` if the file changed meanwhile. Result: path, root, start_line (where the
    replaced text began), bytes_written. Raises ToolError: gate and path codes, not_found,
    not_a_file, special_file, not_utf8, too_large, edit_not_found, edit_not_unique.
    """
    refuse_if_read_only(policy)
    old: str = args["old_string"]
    new: str = args["new_string"]
    target = roots.resolve(args["path"], for_write=True)
    check_target(policy, target)
    shown = target.lexical_relative
    if not target.exists:
        raise ToolError("not_found", f"{shown} does not exist; create it with herdr_fs_write.", path=shown)
    text, _, identity = read_text(target)
    first = text.find(old)
    if first == -1:
        raise ToolError(
            "edit_not_found",
            f"old_string does not occur in {shown}; re-read the file and copy it exactly.",
            path=shown,
        )
    if text.find(old, first + 1) != -1:
        raise ToolError(
            "edit_not_unique",
            f"old_string occurs more than once in {shown}; include more surrounding context.",
            path=shown,
            occurrences=text.count(old),
        )
    check_acknowledged(
        target.root,
        [target],
        confirm_busy=args["confirm_busy"],
        confirm_dirty=args["confirm_dirty"],
    )
    data = encode_text(text[:first] + new + text[first + len(old) :], shown)
    atomic_write(target, data, expect=identity)
    return shown_answer(
        {
            "path": str(target.path),
            "root": str(target.root.path),
            "start_line": text.count("\n", 0, first) + 1,
            "bytes_written": len(data),
        }
    )


def fs_write(roots: RootSet, policy: Policy, args: Mapping[str, Any]) -> dict[str, Any]:
    """herdr_fs_write: create a text file, or replace it when overwrite is true.

    The parent directory must already exist inside the root. Result: path, root, created,
    bytes_written. Raises ToolError: gate and path codes, not_found (missing parent), file_exists,
    not_a_file, special_file, not_utf8, too_large.
    """
    refuse_if_read_only(policy)
    target = roots.resolve(args["path"], for_write=True)
    check_target(policy, target)
    shown = target.lexical_relative
    data = encode_text(args["content"], shown)
    if target.missing_parents:
        raise ToolError(
            "not_found",
            f"The parent directory of {shown} does not exist; create it first (herdr_fs_patch creates "
            "directories for added files).",
            path=shown,
        )
    identity = None
    if target.exists:
        st = os.lstat(target.path)
        refuse_non_regular(st, shown)
        if not args["overwrite"]:
            raise ToolError("file_exists", f"{shown} exists; pass overwrite=true to replace it.", path=shown)
        identity = FileIdentity.of(st)
    check_acknowledged(
        target.root,
        [target],
        confirm_busy=args["confirm_busy"],
        confirm_dirty=args["confirm_dirty"],
    )
    atomic_write(target, data, expect=identity, create_only=identity is None)
    return shown_answer(
        {
            "path": str(target.path),
            "root": str(target.root.path),
            "created": identity is None,
            "bytes_written": len(data),
        }
    )
