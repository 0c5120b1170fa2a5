"""Layouts: pane.layout/zoom/resize/swap/move/neighbor/edges/focus_direction and layout.*.

Herdr: src/app/api/panes.rs (each answers with the tab's PaneLayoutSnapshot; a change emits
layout_updated; zoom toggles `zoomed`, a single pane cannot zoom: reason single_pane) and
src/app/api/layouts.rs (export gives a LayoutDescription; apply builds a new tab from a LayoutNode
tree, emitting tab_created, pane_created for each pane and layout_updated; set_split_ratio sets
the split at a path of booleans, `split_not_found` when there is none).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from herdr_mcp.sim import layout
from herdr_mcp.sim.config import PaneConfig, TabConfig
from herdr_mcp.sim.methods.panes import target_pane
from herdr_mcp.sim.model import HerdrFailure, Tab

if TYPE_CHECKING:
    from herdr_mcp.sim.server import Simulator
    from herdr_mcp.sim.waits import Waits

Params = dict[str, Any]
RESIZE_STEP = 0.05


def _tab_of(sim: Simulator, params: Params) -> Tab:
    if params.get("tab_id") is not None:
        try:
            return sim.world.tab(params["tab_id"])
        except HerdrFailure:
            raise HerdrFailure("layout_not_found", "no such layout target") from None
    return sim.world.tab(target_pane(sim, params.get("pane_id")).tab_id)


def description(sim: Simulator, tab: Tab) -> dict[str, Any]:
    world = sim.world
    details = {}
    for pane_id in layout.pane_ids(tab.root):
        pane = world.panes[pane_id]
        details[pane_id] = {"cwd": str(pane.cwd), **({"label": pane.label} if pane.label else {})}
    return {
        "workspace_id": tab.workspace_id,
        "tab_id": tab.tab_id,
        "zoomed": tab.zoomed,
        "focused_pane_id": tab.focused_pane_id,
        "root": layout.describe(tab.root, details),
    }


async def pane_layout(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    tab = sim.world.tab(target_pane(sim, params.get("pane_id")).tab_id)
    return {"type": "pane_layout", "layout": sim.world.layout_snapshot(tab)}


async def pane_zoom(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    pane = target_pane(sim, params.get("pane_id"))
    tab = world.tab(pane.tab_id)
    mode = params.get("mode", "toggle")
    wanted = (not tab.zoomed) if mode == "toggle" else mode == "on"
    focus_changed = tab.focused_pane_id != pane.pane_id
    reason = None
    if len(layout.pane_ids(tab.root)) < 2 and wanted:
        reason, wanted = "single_pane", tab.zoomed
    elif wanted == tab.zoomed:
        reason = "already_zoomed" if wanted else "already_unzoomed"
    zoom_changed = wanted != tab.zoomed
    tab.focused_pane_id = pane.pane_id if wanted or focus_changed else tab.focused_pane_id
    tab.zoomed = wanted
    if zoom_changed or focus_changed:
        world.emit_layout(tab)
    result: dict[str, Any] = {
        "pane_id": pane.pane_id,
        "zoomed": tab.zoomed,
        "changed": zoom_changed or focus_changed,
        "zoom_changed": zoom_changed,
        "focus_changed": focus_changed,
        "focused_pane_id": tab.focused_pane_id,
        "layout": world.layout_snapshot(tab),
    }
    if reason is not None:
        result["reason"] = reason
    return {"type": "pane_zoom", "zoom": result}


def _enclosing_split(root: layout.Node, pane_id: str, direction: str) -> layout.Split | None:
    """The innermost split along `direction`'s axis that contains the pane."""
    axis = "right" if direction in ("left", "right") else "down"
    found = None
    node = root
    while isinstance(node, layout.Split):
        inside_first = pane_id in layout.pane_ids(node.first)
        if node.direction == axis:
            found = node
        node = node.first if inside_first else node.second
    return found


async def pane_resize(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    pane = target_pane(sim, params.get("pane_id"))
    tab = world.tab(pane.tab_id)
    split = _enclosing_split(tab.root, pane.pane_id, params["direction"])
    amount = params.get("amount") or RESIZE_STEP
    changed = False
    if split is not None:
        grow = params["direction"] in ("right", "down")
        ratio = min(0.9, max(0.1, split.ratio + (amount if grow else -amount)))
        changed, split.ratio = ratio != split.ratio, ratio
    if changed:
        world.emit_layout(tab)
    result: dict[str, Any] = {
        "pane_id": pane.pane_id,
        "changed": changed,
        "focused_pane_id": tab.focused_pane_id,
        "layout": world.layout_snapshot(tab),
    }
    if not changed:
        result["reason"] = "unchanged"
    return {"type": "pane_resize", "resize": result}


async def pane_swap(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    source = target_pane(sim, params.get("source_pane_id") or params.get("pane_id"))
    tab = world.tab(source.tab_id)
    reason, target_id = None, params.get("target_pane_id")
    if target_id is None and params.get("direction") is not None:
        target_id = layout.neighbor(tab.root, source.pane_id, params["direction"])
        reason = None if target_id else "no_neighbor"
    elif target_id is None:
        raise HerdrFailure("invalid_pane_swap", "give target_pane_id or direction")
    if target_id is not None:
        target = world.pane(target_id)
        if target.tab_id != source.tab_id:
            reason, target_id = "cross_tab", target_id
        elif target_id == source.pane_id:
            reason = "same_pane"
    changed = reason is None and target_id is not None
    if changed and target_id is not None:
        tab.root = layout.swap_leaves(tab.root, source.pane_id, target_id)
        world.emit_layout(tab)
    result: dict[str, Any] = {
        "source_pane_id": source.pane_id,
        "changed": changed,
        "focused_pane_id": tab.focused_pane_id,
        "layout": world.layout_snapshot(tab),
    }
    if target_id is not None:
        result["target_pane_id"] = target_id
    if reason is not None:
        result["reason"] = reason
    return {"type": "pane_swap", "swap": result}


async def pane_neighbor(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = target_pane(sim, params.get("pane_id"))
    tab = sim.world.tab(pane.tab_id)
    result: dict[str, Any] = {"pane_id": pane.pane_id, "direction": params["direction"]}
    other = layout.neighbor(tab.root, pane.pane_id, params["direction"])
    if other is not None:
        result["neighbor_pane_id"] = other
    result["layout"] = sim.world.layout_snapshot(tab)
    return {"type": "pane_neighbor", "neighbor": result}


async def pane_edges(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = target_pane(sim, params.get("pane_id"))
    tab = sim.world.tab(pane.tab_id)
    edges = {d: layout.neighbor(tab.root, pane.pane_id, d) is None for d in ("left", "right", "up", "down")}
    return {
        "type": "pane_edges",
        "edges": {"pane_id": pane.pane_id, **edges, "layout": sim.world.layout_snapshot(tab)},
    }


async def pane_focus_direction(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    pane = target_pane(sim, params.get("pane_id"))
    tab = world.tab(pane.tab_id)
    other = layout.neighbor(tab.root, pane.pane_id, params["direction"])
    result: dict[str, Any] = {"source_pane_id": pane.pane_id, "changed": other is not None}
    if other is not None:
        world.focus_pane(world.panes[other])
        world.emit_layout(tab)
        result["focused_pane_id"] = other
    else:
        result["reason"] = "no_neighbor"
    result["layout"] = world.layout_snapshot(tab)
    return {"type": "pane_focus_direction", "focus": result}


async def pane_move(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    raise HerdrFailure("pane_move_failed", "the Herdr simulator does not move panes between tabs")


async def layout_export(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    return {"type": "layout_export", "layout": description(sim, _tab_of(sim, params))}


def _root_tab(sim: Simulator, workspace_id: str, node: dict[str, Any], label: str | None) -> Tab:
    cwd = Path(node["cwd"]) if node.get("cwd") else None
    if cwd is not None and not cwd.is_dir():
        raise HerdrFailure("invalid_layout", f"{cwd} is not a directory")
    config = PaneConfig(cwd=cwd, label=node.get("label"))
    return sim.build_tab(sim.world.workspaces[workspace_id], TabConfig(label=label, panes=(config,)))


async def layout_apply(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    if params.get("tab_id") is not None:
        workspace_id = world.tab(params["tab_id"]).workspace_id
    else:
        workspace_id = params.get("workspace_id") or world.active_workspace_id or ""
        world.workspace(workspace_id)
    root = params["root"]
    tab = _root_tab(sim, workspace_id, _leftmost_first(root), params.get("tab_label"))
    _apply_tree(sim, tab, root)
    world.announce_tab(tab)
    if params.get("focus", False):
        world.focus_pane(world.panes[tab.focused_pane_id])
    return {"type": "layout_apply", "layout": description(sim, tab)}


def _leftmost_first(node: dict[str, Any]) -> dict[str, Any]:
    while node["type"] == "split":
        node = node["first"]
    return node


def _apply_tree(sim: Simulator, tab: Tab, node: dict[str, Any]) -> None:
    """Grow the tab's single root pane into `node`'s tree by splitting leaves in order."""

    def grow(anchor: str, spec: dict[str, Any]) -> None:
        if spec["type"] == "pane":
            return
        second = _leftmost_first(spec["second"])
        cwd = Path(second["cwd"]) if second.get("cwd") else None
        if cwd is not None and not cwd.is_dir():
            raise HerdrFailure("invalid_layout", f"{cwd} is not a directory")
        new = sim.split_pane(
            tab, anchor, PaneConfig(cwd=cwd, label=second.get("label")), spec["direction"], spec["ratio"]
        )
        grow(anchor, spec["first"])
        grow(new.pane_id, spec["second"])

    grow(tab.focused_pane_id, node)


async def layout_set_split_ratio(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    tab = _tab_of(sim, params)
    ratio = params["ratio"]
    split = layout.split_at(tab.root, params["path"])
    if split is None:
        raise HerdrFailure("split_not_found", "no split at that path")
    split.ratio = min(0.9, max(0.1, float(ratio)))
    sim.world.emit_layout(tab)
    return {"type": "layout_split_ratio_set", "layout": description(sim, tab)}


HANDLERS = {
    "pane.layout": pane_layout,
    "pane.zoom": pane_zoom,
    "pane.resize": pane_resize,
    "pane.swap": pane_swap,
    "pane.neighbor": pane_neighbor,
    "pane.edges": pane_edges,
    "pane.focus_direction": pane_focus_direction,
    "pane.move": pane_move,
    "layout.export": layout_export,
    "layout.apply": layout_apply,
    "layout.set_split_ratio": layout_set_split_ratio,
}
