"""pane.*: listing, reading, typing, splitting, closing, process info, reports and graphics.

Herdr: src/app/api/panes.rs (split emits pane_created then layout_updated and answers pane_info;
close emits pane_closed, then workspace_closed for the last pane or layout_updated; send_text,
send_keys and send_input type into the pane's terminal, an unknown key is `invalid_key`; read
reports revision 0), src/app/api/pane_graphics.rs, src/api/wait.rs wait_for_output.
Input to an agent pane goes to its fake agent (`methods.agents.type_into`); to a shell pane, to
the real shell on its pty.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import TYPE_CHECKING, Any

from herdr_mcp.sim.config import PaneConfig
from herdr_mcp.sim.methods.agents import type_into
from herdr_mcp.sim.methods.workspaces import tokens_update
from herdr_mcp.sim.model import HerdrFailure, Pane
from herdr_mcp.sim.terminal import InvalidKey, Key, parse_key, process_record, processes_in_group

if TYPE_CHECKING:
    from herdr_mcp.sim.server import Simulator
    from herdr_mcp.sim.waits import Waits

Params = dict[str, Any]


def target_pane(sim: Simulator, pane_id: str | None) -> Pane:
    """A pane_id param, or the focused pane when it is omitted."""
    if pane_id is not None:
        return sim.world.pane(pane_id)
    focused = sim.world.focused_pane_id()
    if focused is None:
        raise HerdrFailure("pane_not_found", "pane not found")
    return sim.world.panes[focused]


def parse_keys(keys: list[str]) -> list[Key]:
    try:
        return [parse_key(key) for key in keys]
    except InvalidKey as bad:
        raise HerdrFailure("invalid_key", str(bad)) from None


def deliver(sim: Simulator, pane: Pane, text: str, keys: list[Key]) -> None:
    if pane.agent is not None:
        type_into(sim, pane, text, keys)
        return
    if pane.process is None:
        raise HerdrFailure("pane_send_failed", "the pane has no running terminal")
    try:
        pane.process.write(text + "".join(key.data for key in keys))
    except OSError as exc:
        raise HerdrFailure("pane_send_failed", str(exc)) from None


async def pane_list(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    workspace_id = params.get("workspace_id")
    workspace = world.workspace(workspace_id) if workspace_id is not None else None
    return {"type": "pane_list", "panes": [world.pane_info(p) for p in world.ordered_panes(workspace)]}


async def pane_get(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    return {"type": "pane_info", "pane": sim.world.pane_info(sim.world.pane(params["pane_id"]))}


async def pane_current(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    return {
        "type": "pane_current",
        "pane": sim.world.pane_info(target_pane(sim, params.get("caller_pane_id"))),
    }


async def pane_focus(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = sim.world.pane(params["pane_id"])
    sim.world.focus_pane(pane)
    return {"type": "pane_info", "pane": sim.world.pane_info(pane)}


async def pane_rename(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = sim.world.pane(params["pane_id"])
    pane.label = params.get("label") or None
    sim.world.emit("pane_updated", {"pane": sim.world.pane_info(pane)})
    return {"type": "pane_info", "pane": sim.world.pane_info(pane)}


async def pane_read(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    return {"type": "pane_read", "read": sim.world.read(sim.world.pane(params["pane_id"]), params)}


async def pane_send_text(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    deliver(sim, sim.world.pane(params["pane_id"]), params["text"], [])
    return {"type": "ok"}


async def pane_send_keys(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = sim.world.pane(params["pane_id"])
    deliver(sim, pane, "", parse_keys(params["keys"]))
    return {"type": "ok"}


async def pane_send_input(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = sim.world.pane(params["pane_id"])
    deliver(sim, pane, params.get("text", ""), parse_keys(params.get("keys", [])))
    return {"type": "ok"}


async def pane_split(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    if params.get("target_pane_id") is not None:
        target = world.pane(params["target_pane_id"])
    elif params.get("workspace_id") is not None:
        workspace = world.workspaces.get(params["workspace_id"])
        if workspace is None:
            raise HerdrFailure("pane_not_found", "pane not found")
        target = world.panes[workspace.tabs[workspace.active_tab].focused_pane_id]
    else:
        target = target_pane(sim, None)
    cwd = Path(params["cwd"]) if params.get("cwd") is not None else target.cwd
    if not cwd.is_dir():
        raise HerdrFailure("pane_split_failed", f"{cwd} is not a directory")
    ratio = params.get("ratio")
    if ratio is not None and not 0 < ratio < 1:
        raise HerdrFailure("pane_split_failed", "ratio must be between 0 and 1")
    tab = world.tab(target.tab_id)
    pane = sim.split_pane(
        tab, target.pane_id, PaneConfig(cwd=cwd), params["direction"], ratio, params.get("env")
    )
    world.emit("pane_created", {"pane": world.pane_info(pane)})
    world.emit_layout(tab)
    if params.get("focus", False):
        world.focus_pane(pane)
    return {"type": "pane_info", "pane": world.pane_info(pane)}


async def pane_close(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    sim.close_pane(sim.world.pane(params["pane_id"]).pane_id)
    return {"type": "ok"}


async def pane_wait_for_output(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    return await waits.wait_for_output(params)


async def pane_process_info(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    """Real pids: the pane's shell and the processes of its terminal's foreground group."""
    pane = target_pane(sim, params.get("pane_id"))
    info: dict[str, Any] = {"pane_id": pane.pane_id}
    process = pane.process
    if process is not None:
        info["shell_pid"] = process.pid
        pgid = process.foreground_pgid()
        if pgid is not None:
            info["foreground_process_group_id"] = pgid
        if process.tty is not None:
            info["tty"] = process.tty
        records = [process_record(pid) for pid in processes_in_group(pgid)] if pgid else []
        found = [record for record in records if record is not None]
        if found:
            info["foreground_processes"] = found
    return {"type": "pane_process_info", "process_info": info}


async def pane_input_set(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = sim.world.pane(params["pane_id"])
    pane.right_click = str(params["right_click"])
    return {"type": "ok"}  # Herdr: src/app/api/panes.rs handle_pane_input_set


async def pane_report_agent(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    """A hook reports an agent and its state; Herdr treats `idle` from a working agent as done."""
    from herdr_mcp.sim.model import Agent

    pane = sim.world.pane(params["pane_id"])
    label = params["agent"].strip()
    if not label:
        raise HerdrFailure("invalid_agent", "the agent label is empty")
    if pane.agent is None:
        from herdr_mcp.sim.config import AgentScript

        pane.agent = Agent(label, AgentScript(()), "unknown", interactive_ready=False)
        sim.world.emit(
            "pane_agent_detected",
            {"pane_id": pane.pane_id, "workspace_id": pane.workspace_id, "agent": label},
        )
        sim.start_runner(pane)
    state = params["state"]
    status = "done" if state == "idle" and pane.agent.status == "working" else state
    sim.world.set_status(pane, status)
    return {"type": "ok"}


async def pane_report_metadata(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = sim.world.pane(params["pane_id"])
    if not params["source"].strip():
        raise HerdrFailure("invalid_metadata_source", "the metadata source must not be empty")
    if params.get("clear_title"):
        pane.title = None
    if params.get("title") is not None:
        pane.title = params["title"]
    tokens_update(pane.tokens, params)
    sim.world.emit("pane_updated", {"pane": sim.world.pane_info(pane)})
    return {"type": "ok"}


async def pane_ok(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    sim.world.pane(params["pane_id"])
    return {"type": "ok"}


async def graphics_set(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = sim.world.pane(params["pane_id"])
    if params["image_width"] <= 0 or params["image_height"] <= 0:
        raise HerdrFailure("invalid_graphics", "image dimensions must be positive")
    try:
        base64.b64decode(params.get("data_base64", ""), validate=True)
    except ValueError:
        raise HerdrFailure("invalid_graphics", "data_base64 is not base64") from None
    pane.graphics[params.get("layer_id") or "default"] = {
        "format": params["format"], "width": params["image_width"], "height": params["image_height"],
    }  # fmt: skip
    return {"type": "ok"}


async def graphics_clear(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = sim.world.pane(params["pane_id"])
    if params.get("layer_id") is None:
        pane.graphics.clear()
    else:
        pane.graphics.pop(params["layer_id"], None)
    return {"type": "ok"}


async def graphics_info(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = sim.world.pane(params["pane_id"])
    focused = sim.world.focused_tab()
    visible = focused is not None and pane.tab_id == focused.tab_id
    return {"type": "pane_graphics_info", "cell_width_px": 8, "cell_height_px": 16, "pane_visible": visible}


HANDLERS = {
    "pane.list": pane_list,
    "pane.get": pane_get,
    "pane.current": pane_current,
    "pane.focus": pane_focus,
    "pane.rename": pane_rename,
    "pane.read": pane_read,
    "pane.send_text": pane_send_text,
    "pane.send_keys": pane_send_keys,
    "pane.send_input": pane_send_input,
    "pane.split": pane_split,
    "pane.close": pane_close,
    "pane.wait_for_output": pane_wait_for_output,
    "pane.process_info": pane_process_info,
    "pane.input.set": pane_input_set,
    "pane.report_agent": pane_report_agent,
    "pane.report_agent_session": pane_ok,
    "pane.report_metadata": pane_report_metadata,
    "pane.clear_agent_authority": pane_ok,
    "pane.release_agent": pane_ok,
    "pane.graphics.set": graphics_set,
    "pane.graphics.clear": graphics_clear,
    "pane.graphics.info": graphics_info,
}
