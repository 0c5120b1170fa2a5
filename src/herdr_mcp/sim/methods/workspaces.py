"""workspace.* and tab.*.

Herdr: src/app/api/workspaces.rs and src/app/api/tabs.rs (results workspace_created {workspace,
tab, root_pane}, tab_created {tab, root_pane}; workspace.move and tab.move answer the whole
list; events workspace_created/tab_created/pane_created/
layout_updated on creation (src/app/creation.rs), workspace_renamed, workspace_moved,
workspace_reordered, tab_renamed, tab_moved, tab_closed, workspace_closed; focus changes emit
workspace_focused, tab_focused, pane_focused). `focus` defaults to false.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from herdr_mcp.sim.config import PaneConfig, SimConfigError, TabConfig, WorkspaceConfig
from herdr_mcp.sim.model import HerdrFailure, Tab, Workspace

if TYPE_CHECKING:
    from herdr_mcp.sim.server import Simulator
    from herdr_mcp.sim.waits import Waits

Params = dict[str, Any]


def _cwd(raw: str | None, fallback: Path) -> Path:
    if raw is None:
        return fallback
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise HerdrFailure("workspace_create_failed", f"{raw} is not a directory")
    return path


def _default_cwd(sim: Simulator) -> Path:
    pane_id = sim.world.focused_pane_id()
    return sim.world.panes[pane_id].cwd if pane_id else Path.home()


def _env(raw: Any) -> dict[str, str]:
    env = raw or {}
    if not all(isinstance(k, str) and isinstance(v, str) and k for k, v in env.items()):
        raise HerdrFailure("invalid_env", "env keys and values must be non-empty strings")
    return dict(env)


async def workspace_list(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    return {
        "type": "workspace_list",
        "workspaces": [world.workspace_info(w) for w in world.workspaces.values()],
    }


async def workspace_get(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    return {
        "type": "workspace_info",
        "workspace": world.workspace_info(world.workspace(params["workspace_id"])),
    }


def create_workspace(
    sim: Simulator, cwd: Path, label: str | None, focus: bool, env: dict[str, str]
) -> Workspace:
    world = sim.world
    try:
        workspace = sim.build_workspace(WorkspaceConfig(cwd=cwd, label=label))
    except SimConfigError as exc:
        raise HerdrFailure("workspace_create_failed", str(exc)) from None
    root = world.panes[workspace.tabs[0].focused_pane_id]
    root.env.update(env)
    world.announce_workspace(workspace)
    if focus:
        world.focus_pane(root)
    return workspace


def created_result(sim: Simulator, workspace: Workspace, kind: str = "workspace_created") -> dict[str, Any]:
    world = sim.world
    tab = workspace.tabs[0]
    return {
        "type": kind,
        "workspace": world.workspace_info(workspace),
        "tab": world.tab_info(tab),
        "root_pane": world.pane_info(world.panes[tab.focused_pane_id]),
    }


async def workspace_create(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    cwd = _cwd(params.get("cwd"), _default_cwd(sim))
    workspace = create_workspace(
        sim, cwd, params.get("label"), params.get("focus", False), _env(params.get("env"))
    )
    return created_result(sim, workspace)


async def workspace_focus(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    workspace = world.workspace(params["workspace_id"])
    tab = workspace.tabs[workspace.active_tab]
    world.focus_pane(world.panes[tab.focused_pane_id])
    return {"type": "workspace_info", "workspace": world.workspace_info(workspace)}


async def workspace_rename(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    workspace = world.workspace(params["workspace_id"])
    workspace.label = params["label"]
    world.emit("workspace_renamed", {"workspace_id": workspace.workspace_id, "label": params["label"]})
    return {"type": "workspace_info", "workspace": world.workspace_info(workspace)}


def _reorder(sim: Simulator, order: list[str]) -> None:
    world = sim.world
    world.workspaces = {workspace_id: world.workspaces[workspace_id] for workspace_id in order}


async def workspace_move(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    """Herdr: handle_workspace_move: an insert_index past the end is `workspace_move_failed`;
    answers the workspace list (workspace_moved only when the order changed)."""
    world = sim.world
    workspace = world.workspace(params["workspace_id"])
    order = list(world.workspaces)
    if params["insert_index"] > len(order):
        raise HerdrFailure("workspace_move_failed", f"insert_index {params['insert_index']} is out of bounds")
    index = min(params["insert_index"], len(order) - 1)
    if order.index(workspace.workspace_id) != index:
        order.remove(workspace.workspace_id)
        order.insert(index, workspace.workspace_id)
        _reorder(sim, order)
        world.emit(
            "workspace_moved",
            {
                "workspace_id": workspace.workspace_id,
                "insert_index": params["insert_index"],
                "workspaces": [world.workspace_info(w) for w in world.workspaces.values()],
            },
        )
    return {
        "type": "workspace_list",
        "workspaces": [world.workspace_info(w) for w in world.workspaces.values()],
    }


async def workspace_move_block(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    block = params["workspace_ids"]
    if not block or len(set(block)) != len(block):
        raise HerdrFailure("workspace_move_block_failed", "workspace_ids must be distinct and not empty")
    for workspace_id in block:
        world.workspace(workspace_id)
    before = params.get("before_workspace_id")
    if before is not None:
        world.workspace(before)
        if before in block:
            raise HerdrFailure("workspace_move_block_failed", "before_workspace_id is in the moved block")
    rest = [w for w in world.workspaces if w not in block]
    at = rest.index(before) if before is not None else len(rest)
    _reorder(sim, rest[:at] + block + rest[at:])
    data: dict[str, Any] = {"workspace_ids": block}
    if before is not None:
        data["before_workspace_id"] = before
    data["workspaces"] = [world.workspace_info(w) for w in world.workspaces.values()]
    world.emit("workspace_reordered", data)
    return {"type": "workspace_list", "workspaces": data["workspaces"]}


def tokens_update(tokens: dict[str, str], params: Params) -> None:
    for key, value in params.get("tokens", {}).items():
        if not isinstance(key, str) or not key or (value is not None and not isinstance(value, str)):
            raise HerdrFailure("invalid_metadata_token", "tokens map non-empty keys to strings or null")
        if value is None:
            tokens.pop(key, None)
        else:
            tokens[key] = value


async def workspace_report_metadata(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    workspace = world.workspace(params["workspace_id"])
    if not params["source"].strip():
        raise HerdrFailure("invalid_metadata_source", "the metadata source must not be empty")
    if not params["tokens"]:
        raise HerdrFailure("invalid_metadata_token", "nothing to set or clear")
    tokens_update(workspace.tokens, params)
    world.emit("workspace_metadata_updated", {"workspace": world.workspace_info(workspace)})
    return {"type": "ok"}


async def workspace_close(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    world.close_workspace(world.workspace(params["workspace_id"]))
    return {"type": "ok"}


async def tab_list(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    workspace_id = params.get("workspace_id")
    if workspace_id is not None:
        world.workspace(workspace_id)
    tabs = [t for t in world.tabs() if workspace_id in (None, t.workspace_id)]
    return {"type": "tab_list", "tabs": [world.tab_info(t) for t in tabs]}


async def tab_get(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    return {"type": "tab_info", "tab": sim.world.tab_info(sim.world.tab(params["tab_id"]))}


async def tab_create(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    workspace_id = params.get("workspace_id") or world.active_workspace_id
    if workspace_id is None:
        raise HerdrFailure("workspace_not_found", "no active workspace")
    workspace = world.workspace(workspace_id)
    cwd = _cwd(params.get("cwd"), workspace.cwd)
    tab = sim.build_tab(workspace, TabConfig(label=params.get("label"), panes=(PaneConfig(cwd=cwd),)))
    world.panes[tab.focused_pane_id].env.update(_env(params.get("env")))
    world.announce_tab(tab)
    if params.get("focus", False):
        world.focus_pane(world.panes[tab.focused_pane_id])
    return {
        "type": "tab_created",
        "tab": world.tab_info(tab),
        "root_pane": world.pane_info(world.panes[tab.focused_pane_id]),
    }


async def tab_focus(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    tab = world.tab(params["tab_id"])
    world.focus_pane(world.panes[tab.focused_pane_id])
    return {"type": "tab_info", "tab": world.tab_info(tab)}


async def tab_rename(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    tab = world.tab(params["tab_id"])
    tab.label = params["label"]
    world.emit(
        "tab_renamed", {"tab_id": tab.tab_id, "workspace_id": tab.workspace_id, "label": params["label"]}
    )
    return {"type": "tab_info", "tab": world.tab_info(tab)}


async def tab_move(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    """Herdr: src/app/api/tabs.rs handle_tab_move: an insert_index past the end is
    `tab_move_failed`; answers the workspace's tab list (tab_moved only when the order changed)."""
    world = sim.world
    tab: Tab = world.tab(params["tab_id"])
    workspace = world.workspaces[tab.workspace_id]
    if params["insert_index"] > len(workspace.tabs):
        raise HerdrFailure("tab_move_failed", f"insert_index {params['insert_index']} is out of bounds")
    active = workspace.tabs[workspace.active_tab]
    index = min(params["insert_index"], len(workspace.tabs) - 1)
    if workspace.tabs.index(tab) != index:
        workspace.tabs.remove(tab)
        workspace.tabs.insert(index, tab)
        workspace.active_tab = workspace.tabs.index(active)
        world.emit(
            "tab_moved",
            {
                "tab_id": tab.tab_id,
                "workspace_id": tab.workspace_id,
                "insert_index": params["insert_index"],
                "tabs": [world.tab_info(t) for t in workspace.tabs],
            },
        )
    return {"type": "tab_list", "tabs": [world.tab_info(t) for t in workspace.tabs]}


async def tab_close(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    sim.world.close_tab(sim.world.tab(params["tab_id"]))
    return {"type": "ok"}


HANDLERS = {
    "workspace.list": workspace_list,
    "workspace.get": workspace_get,
    "workspace.create": workspace_create,
    "workspace.focus": workspace_focus,
    "workspace.rename": workspace_rename,
    "workspace.move": workspace_move,
    "workspace.move_block": workspace_move_block,
    "workspace.report_metadata": workspace_report_metadata,
    "workspace.close": workspace_close,
    "tab.list": tab_list,
    "tab.get": tab_get,
    "tab.create": tab_create,
    "tab.focus": tab_focus,
    "tab.rename": tab_rename,
    "tab.move": tab_move,
    "tab.close": tab_close,
}
