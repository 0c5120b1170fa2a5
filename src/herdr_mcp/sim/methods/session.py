"""ping, session.snapshot, and the methods the simulator has nothing to simulate for.

Herdr: src/api/server.rs handle_request (ping's pong with version, protocol, capabilities);
src/app/api/session.rs; src/app/api.rs (notification.show, client.window_title.*, popup.close).
`server.*`, `integration.*` and the plugin mutations are refused with `not_supported`: a
simulator has no server to stop, no integrations to install and no plugins to link.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from herdr_mcp.sim.model import HerdrFailure

if TYPE_CHECKING:
    from herdr_mcp.sim.server import Simulator
    from herdr_mcp.sim.waits import Waits

Params = dict[str, Any]


async def ping(sim: Simulator, waits: Waits, request_id: str, params: Params) -> dict[str, Any]:
    return {
        "type": "pong",
        "version": sim.world.version,
        "protocol": sim.world.protocol,
        "capabilities": {"live_handoff": False, "detached_server_daemon": False},
    }


async def snapshot(sim: Simulator, waits: Waits, request_id: str, params: Params) -> dict[str, Any]:
    return {"type": "session_snapshot", "snapshot": sim.world.snapshot()}


async def notification_show(sim: Simulator, waits: Waits, request_id: str, params: Params) -> dict[str, Any]:
    if not params["title"].strip():
        raise HerdrFailure("invalid_params", "the notification needs a title")
    return {"type": "notification_show", "shown": False, "reason": "no_foreground_client"}


async def window_title(sim: Simulator, waits: Waits, request_id: str, params: Params) -> dict[str, Any]:
    return {"type": "client_window_title", "changed": False, "reason": "no_foreground_client"}


async def ok(sim: Simulator, waits: Waits, request_id: str, params: Params) -> dict[str, Any]:
    return {"type": "ok"}


async def plugin_list(sim: Simulator, waits: Waits, request_id: str, params: Params) -> dict[str, Any]:
    return {"type": "plugin_list", "plugins": []}


async def plugin_action_list(sim: Simulator, waits: Waits, request_id: str, params: Params) -> dict[str, Any]:
    return {"type": "plugin_action_list", "actions": []}


async def plugin_log_list(sim: Simulator, waits: Waits, request_id: str, params: Params) -> dict[str, Any]:
    return {"type": "plugin_log_list", "logs": []}


async def plugin_missing(sim: Simulator, waits: Waits, request_id: str, params: Params) -> dict[str, Any]:
    raise HerdrFailure(
        "plugin_not_found", f"plugin {params.get('plugin_id') or params.get('action_id')} not found"
    )


async def not_supported(sim: Simulator, waits: Waits, request_id: str, params: Params) -> dict[str, Any]:
    raise HerdrFailure("not_supported", "the Herdr simulator does not simulate this method")


HANDLERS = {
    "ping": ping,
    "session.snapshot": snapshot,
    "notification.show": notification_show,
    "client.window_title.set": window_title,
    "client.window_title.clear": window_title,
    "popup.close": ok,
    "plugin.list": plugin_list,
    "plugin.action.list": plugin_action_list,
    "plugin.log.list": plugin_log_list,
    "plugin.action.invoke": plugin_missing,
    "plugin.pane.open": plugin_missing,
    "plugin.pane.focus": plugin_missing,
    "plugin.pane.close": plugin_missing,
    **{
        name: not_supported
        for name in (
            "server.stop",
            "server.live_handoff",
            "server.reload_config",
            "server.agent_manifests",
            "server.reload_agent_manifests",
            "integration.install",
            "integration.uninstall",
            "plugin.link",
            "plugin.unlink",
            "plugin.enable",
            "plugin.disable",
            "agent.view.set",
            "agent.view.clear",
            "pane.graphics.stream",
        )
    },
}
