"""The 18 tool handlers of the epoch-5 contract, by name.

A handler takes the runtime `Services` and the schema-validated arguments and returns the
structured result (a dict) or an `ImageResult` (herdr_fs_image); refusals raise `ToolError`.
File and Git work is blocking and runs in a worker thread so one slow disk never stalls the
event loop, except a small herdr_fs_read or herdr_fs_list on a local disk, which runs on the
event loop (`tools.fs.placement`: the hand-off cost more than such a read).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.tools.fs.editing import fs_edit, fs_write
from herdr_mcp.runtime.tools.fs.image import ImageResult, fs_image
from herdr_mcp.runtime.tools.fs.patching import fs_patch
from herdr_mcp.runtime.tools.fs.placement import Placement
from herdr_mcp.runtime.tools.fs.reading import fs_grep, fs_list, fs_read
from herdr_mcp.runtime.tools.git import git_facts

if TYPE_CHECKING:
    from herdr_mcp.runtime.services import Services


Handler = Callable[["Services", dict[str, Any]], Awaitable["dict[str, Any] | ImageResult"]]


def _fs(function: Callable[..., dict[str, Any] | ImageResult]) -> Handler:
    async def handler(svc: Services, args: dict[str, Any]) -> dict[str, Any] | ImageResult:
        roots = await svc.topology.roots()
        return await asyncio.to_thread(function, roots, svc.policy, args)

    return handler


_PLACEMENT = Placement()


async def _fs_read(svc: Services, args: dict[str, Any]) -> dict[str, Any]:
    return await _PLACEMENT.run(fs_read, await svc.topology.roots(), svc.policy, args)


async def _fs_list(svc: Services, args: dict[str, Any]) -> dict[str, Any]:
    roots = await svc.topology.roots()
    if args["recursive"]:  # a tree: unbounded work, never on the event loop
        return await asyncio.to_thread(fs_list, roots, svc.policy, args)
    return await _PLACEMENT.run(fs_list, roots, svc.policy, args)


async def _git(svc: Services, args: dict[str, Any]) -> dict[str, Any]:
    root = (await svc.topology.roots()).root_for(args["root"])
    if root.kind != "managed":
        raise ToolError(
            "git_requires_managed_root",
            f"{root.path} is an operational root without Git; herdr_git only reads managed Git roots",
        )
    return await asyncio.to_thread(git_facts, root.path, args)


def _handlers() -> dict[str, Handler]:
    from herdr_mcp.runtime.tools import agents, execution, passthrough, skill, workstation

    table: dict[str, Handler] = {
        "herdr_inspect": workstation.inspect,
        "herdr_since": workstation.since,
        "herdr_skill": skill.skill,
        "herdr_methods": passthrough.methods,
        "herdr_call": passthrough.call,
        "herdr_git": _git,
        "herdr_exec": execution.exec_short,
        "herdr_exec_start": execution.exec_start,
        "herdr_exec_read": execution.exec_read,
        "herdr_exec_kill": execution.exec_kill,
        "herdr_prompt": agents.prompt,
    }
    for function in (fs_grep, fs_image, fs_edit, fs_write, fs_patch):
        table[f"herdr_{function.__name__}"] = _fs(function)
    table["herdr_fs_read"] = _fs_read
    table["herdr_fs_list"] = _fs_list
    return table


HANDLERS: Mapping[str, Handler] = _handlers()
