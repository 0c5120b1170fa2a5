"""Layouts: pane.layout/zoom/resize/swap/move/neighbor/edges/focus_direction and layout.*.

pane.move follows src/app/api/panes.rs handle_pane_move (see `pane_move`).

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
from herdr_mcp.sim.ids import pane_id_for, tab_id_for
from herdr_mcp.sim.methods.panes import target_pane
from herdr_mcp.sim.model import HerdrFailure, Tab, Workspace

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


def _move_result(
    pane: dict[str, Any], previous: tuple[str, str, str], target_layout: dict[str, Any], **rest: Any
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "changed": rest.pop("changed", True),
        "previous_pane_id": previous[0],
        "previous_workspace_id": previous[1],
        "previous_tab_id": previous[2],
        "pane": pane,
        "target_layout": target_layout,
        "focused_pane_id": target_layout["focused_pane_id"],
    }
    result.update({key: value for key, value in rest.items() if value is not None})
    return {"type": "pane_move", "move_result": result}


async def pane_move(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    """Herdr: src/app/api/panes.rs handle_pane_move (src/workspace.rs take_pane_for_move,
    insert_moved_pane_into_tab, create_tab_from_existing_pane, from_existing_pane).

    A zoomed source tab, or the pane's own tab as destination, answers unchanged with reason
    zoomed_tab / same_tab, as does a zoomed destination tab. Otherwise the pane leaves its tab
    (a tab left empty closes: tab_closed) and joins the destination: split next to
    `target_pane_id` (default the tab's focused pane; `target_pane_not_found` when it is not in
    that tab) at `ratio` (default 0.5), or alone in a new tab of a workspace (default its own),
    or in a new workspace. Within its workspace the pane keeps its id; moved to another one it
    gets the next pane number there, and its old id stays an alias of it. A workspace left empty
    by a move elsewhere closes (workspace_closed without a workspace). Events in Herdr's order:
    tab_closed, workspace_closed, workspace_created, tab_created, pane_moved, layout_updated of
    the source tab (when it remains) and of the target; `focus` (or no active workspace left)
    focuses the moved pane."""
    world = sim.world
    pane = world.pane(params["pane_id"])
    source_ws = world.workspaces[pane.workspace_id]
    source_tab = world.tab(pane.tab_id)
    previous = (pane.pane_id, pane.workspace_id, pane.tab_id)
    focus = params.get("focus", False)

    def unchanged(reason: str, source: Tab, target: Tab) -> dict[str, Any]:
        return _move_result(
            world.pane_info(pane),
            previous,
            world.layout_snapshot(target),
            changed=False,
            reason=reason,
            source_layout=world.layout_snapshot(source),
        )

    if source_tab.zoomed:
        return unchanged("zoomed_tab", source_tab, source_tab)
    destination = params["destination"]
    kind = destination["type"]
    target_tab: Tab | None = None
    target_ws: Workspace | None = None
    anchor = ""
    if kind == "tab":
        target_tab = world.tab(destination["tab_id"])
        if target_tab is source_tab:
            return unchanged("same_tab", source_tab, source_tab)
        if target_tab.zoomed:
            return unchanged("zoomed_tab", source_tab, target_tab)
        raw = destination.get("target_pane_id")
        if raw is None:
            anchor = target_tab.focused_pane_id
        else:
            found = world.panes.get(world.aliases.get(raw, raw))
            if found is None:
                raise HerdrFailure("target_pane_not_found", f"target pane {raw} not found")
            if found.tab_id != target_tab.tab_id:
                raise HerdrFailure(
                    "target_pane_not_found", f"target pane {raw} is not in tab {destination['tab_id']}"
                )
            anchor = found.pane_id
        target_ws = world.workspaces[target_tab.workspace_id]
    elif kind == "new_tab":
        target_ws = (
            world.workspace(destination["workspace_id"])
            if destination.get("workspace_id") is not None
            else source_ws
        )
    cross = target_ws is not source_ws

    before = world.focused_pane_id()
    # take_pane_for_move: the last pane of a tab takes its tab with it.
    closed_tab_id = closed_workspace_id = None
    remaining = layout.remove_leaf(source_tab.root, pane.pane_id)
    if remaining is None:
        world.drop_tab(source_ws, source_tab)
        closed_tab_id = source_tab.tab_id
    else:
        source_tab.root = remaining
        if source_tab.focused_pane_id == pane.pane_id:
            source_tab.focused_pane_id = layout.pane_ids(remaining)[0]
    source_tab.zoomed = False
    if cross and not source_ws.tabs:
        world.drop_workspace(source_ws)
        closed_workspace_id = source_ws.workspace_id

    created_ws: Workspace | None = None
    if kind == "new_workspace":
        created_ws = target_ws = Workspace(world.next_workspace_id(), destination.get("label"), pane.cwd)
        world.workspaces[target_ws.workspace_id] = target_ws
    assert target_ws is not None
    if cross:
        source_ws.pane_numbers -= 1
        new_id = pane_id_for(target_ws.workspace_id, target_ws.next_pane_number)
        target_ws.next_pane_number += 1
        target_ws.pane_numbers += 1
        sim.rekey_pane(pane, new_id)
        world.aliases[previous[0]] = new_id
        pane.workspace_id = target_ws.workspace_id
    created_tab: Tab | None = None
    if target_tab is not None:
        ratio = destination.get("ratio")
        ratio = layout.DEFAULT_RATIO if ratio is None or not 0 < ratio < 1 else ratio
        target_tab.root = layout.split_leaf(
            target_tab.root, anchor, pane.pane_id, destination["split"], ratio
        )
        target_tab.zoomed = False
        if focus:
            target_tab.focused_pane_id = pane.pane_id
    else:
        number = target_ws.next_tab_number
        target_ws.next_tab_number += 1
        label = destination.get("tab_label") if kind == "new_workspace" else destination.get("label")
        created_tab = target_tab = Tab.with_root(
            tab_id_for(target_ws.workspace_id, number), target_ws.workspace_id, number, label, pane.pane_id
        )
        target_ws.tabs.append(target_tab)
    pane.tab_id = target_tab.tab_id
    if world.active_workspace_id is None:
        world.active_workspace_id = target_ws.workspace_id
        focus = True

    pane_info = world.pane_info(pane)
    source_layout = (
        world.layout_snapshot(source_tab) if closed_tab_id is None and closed_workspace_id is None else None
    )
    changes: dict[str, Any] = {
        "created_workspace": world.workspace_info(created_ws) if created_ws is not None else None,
        "created_tab": world.tab_info(created_tab) if created_tab is not None else None,
        "closed_workspace_id": closed_workspace_id,
        "closed_tab_id": closed_tab_id,
    }
    if closed_tab_id is not None:
        world.emit("tab_closed", {"tab_id": closed_tab_id, "workspace_id": previous[1]})
    if closed_workspace_id is not None:
        world.emit("workspace_closed", {"workspace_id": closed_workspace_id})
    if changes["created_workspace"] is not None:
        world.emit("workspace_created", {"workspace": changes["created_workspace"]})
    if changes["created_tab"] is not None:
        world.emit("tab_created", {"tab": changes["created_tab"]})
    world.emit(
        "pane_moved",
        {
            "previous_pane_id": previous[0],
            "previous_workspace_id": previous[1],
            "previous_tab_id": previous[2],
            "pane": pane_info,
            **{key: value for key, value in changes.items() if value is not None},
        },
    )
    if source_layout is not None:
        world.emit("layout_updated", {"layout": source_layout})
    target_layout = world.layout_snapshot(target_tab)
    world.emit("layout_updated", {"layout": target_layout})
    if focus:
        world.focus_pane(pane)
    else:
        world.focus_changed(before)
    return _move_result(
        world.pane_info(pane),
        previous,
        world.layout_snapshot(target_tab),
        source_layout=source_layout,
        **changes,
    )


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
