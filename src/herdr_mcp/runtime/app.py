"""The runtime's ASGI app: `/mcp` (bearer-guarded Streamable HTTP), `/health` (open), and the
browser plane's `/push/*` and `/browser/*` (bearer-guarded; docs/browser-protocol.md).

Composed once at start-up. The lifespan runs the SDK's session manager (without it every MCP
request fails), follows Herdr events for herdr_since, and stops background exec sessions on the
way out.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from herdr_mcp import __version__
from herdr_mcp.contract import contract_identity
from herdr_mcp.herdr import HerdrError
from herdr_mcp.runtime.auth import BearerGate
from herdr_mcp.runtime.background import running
from herdr_mcp.runtime.body_bounds import BoundedMcpBody
from herdr_mcp.runtime.browser import browser_routes
from herdr_mcp.runtime.browser.http import json_response
from herdr_mcp.runtime.dispatcher import ToolDispatcher
from herdr_mcp.runtime.grep.search import engine_in_use
from herdr_mcp.runtime.native import protocol_support
from herdr_mcp.runtime.push.routes import push_routes
from herdr_mcp.runtime.server import build_mcp_server
from herdr_mcp.runtime.services import Services
from herdr_mcp.state import STATE_SCHEMA

#: /health must answer fast even when Herdr hangs.
HEALTH_PING_TIMEOUT_SECONDS = 1.0


def build_app(services: Services, token: str, dispatcher: ToolDispatcher | None = None) -> ASGIApp:
    """The whole runtime app; `token` is required as a bearer on /mcp. `dispatcher` answers the
    tool calls (by default a new one; a test serving the app in process passes its own, to close
    its audit log when done)."""
    dispatcher = dispatcher if dispatcher is not None else ToolDispatcher(services)
    # The bearer the gate checks is redacted wherever a record holds it, whatever file it came from.
    dispatcher.audit.known_secrets.add(token)
    server = build_mcp_server(dispatcher)
    sdk_app = server.streamable_http_app(json_response=True, host=services.config.host)
    identity = contract_identity().to_dict()

    async def health(request: Request) -> JSONResponse:
        herdr: dict[str, Any] = {"socket": str(services.config.herdr_socket)}
        try:
            pong = await services.herdr.call("ping", {}, timeout=HEALTH_PING_TIMEOUT_SECONDS)
        except HerdrError as exc:
            herdr.update(reachable=False, error=exc.code)
        else:
            herdr.update(reachable=True, version=pong.get("version"), protocol=pong.get("protocol"))
            herdr.update(protocol_support(pong.get("version"), pong.get("protocol")))
        return json_response(
            {
                "status": "ok",
                "product": "herdr-mcp",
                "version": __version__,
                "contract": identity,
                "state_schema": STATE_SCHEMA,
                "herdr": herdr,
                "events": {"connected": services.events.connected, "cursor": services.events.last_seq},
                # /push/events streams open now and opened since start-up (a browser's extension
                # keeps one open, also across native-host restarts).
                "push": {"streams": services.push.hub.subscriber_count, "opened": services.push.hub.opened},
                # rg, or the slower Python engine when rg is not on PATH (runtime.grep).
                "grep": {"engine": engine_in_use()},
                # herdr_exec's login environment: captured, capturing, or failed and why.
                "login_environment": services.sessions.login_status(),
            }
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run(), running(services):
            yield

    routes = [
        Route("/health", health, methods=["GET"]),
        *push_routes(services),
        *browser_routes(services, dispatcher.audit),
    ]
    # /mcp first: it is matched on every tool call, the other routes' paths never overlap it.
    app = Starlette(routes=[*sdk_app.routes, *routes], lifespan=lifespan)
    # The bearer first: nothing of an unauthenticated body is read.
    return BearerGate(BoundedMcpBody(app), token, protected_prefixes=("/mcp", "/push", "/browser"))
