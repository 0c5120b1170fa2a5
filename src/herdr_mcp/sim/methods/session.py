"""ping, session.snapshot, and the methods the simulator has nothing to simulate for.

Herdr: src/api/server.rs handle_request (ping's pong with version, protocol, capabilities);
src/app/api/session.rs; src/app/api.rs (notification.show, client.window_title.*, popup.close).
What the simulator has nothing to simulate for is answered as Herdr answers a method it has no
handler for: `not_implemented` (src/app/api.rs, the fallback arm of
handle_api_request_after_internal_events_drained) — server.* but live handoff (no server to stop
or reload), integration.install/uninstall, plugin mutations, agent views, graphics streams, and
protocol 22's client-UI gestures that need an attached client. `server.live_handoff` is
`unsupported_in_app_mode`, as in Herdr's app mode (src/app/api.rs); `client_shell.surface.set`
is `connection_local_only` (herdr_python_sdk's README: the normal socket server rejects it).
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


async def not_implemented(sim: Simulator, waits: Waits, request_id: str, params: Params) -> dict[str, Any]:
    raise HerdrFailure("not_implemented", "the Herdr simulator does not simulate this method")


async def live_handoff(sim: Simulator, waits: Waits, request_id: str, params: Params) -> dict[str, Any]:
    raise HerdrFailure("unsupported_in_app_mode", "the simulator is not a headless server")


async def local_only(sim: Simulator, waits: Waits, request_id: str, params: Params) -> dict[str, Any]:
    raise HerdrFailure("connection_local_only", "only the attached client's own connection may do this")


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
    "server.live_handoff": live_handoff,
    "client_shell.surface.set": local_only,
    **{
        name: not_implemented
        for name in (
            "server.stop",
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
            "product_announcement.dismiss",
            "release_notes.dismiss",
            "command.invoke",
            "pane.edit_scrollback",
            "pane.link.activate",
        )
    },
}
