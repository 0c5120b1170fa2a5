"""`GET /push/events` and `GET /push/state` as Starlette routes (docs/browser-protocol.md 3)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from herdr_mcp import __version__
from herdr_mcp.contract import contract_identity
from herdr_mcp.errors import HerdrMcpError, ToolError
from herdr_mcp.herdr import HerdrError
from herdr_mcp.runtime.browser.http import error_response, json_response
from herdr_mcp.runtime.push.stream import EventStreamResponse, event_frames, parse_after, state_answer

if TYPE_CHECKING:
    from herdr_mcp.runtime.services import Services

log = logging.getLogger(__name__)


def push_routes(services: Services) -> list[Route]:
    runtime: dict[str, Any] = {"version": __version__, "contract": contract_identity().to_dict()}
    plane = services.push

    async def events(request: Request) -> Response:
        try:
            after = parse_after(request)
        except HerdrMcpError as exc:
            return error_response(exc)
        frames = event_frames(plane.hub, plane.states, after, runtime, plane.stream, plane.inboxes)
        return EventStreamResponse(frames, plane.stream.send_timeout)

    async def state(request: Request) -> Response:
        try:
            if request.query_params:
                raise ToolError("invalid_argument", "/push/state takes no query parameters")
            seq = plane.hub.cursor
            try:
                # Side by side: Herdr answers each request on its own connection.
                listing = asyncio.create_task(services.herdr.call("workspace.list", {}))
                try:
                    agents = await services.herdr.call("agent.list", {})
                except BaseException:
                    listing.cancel()
                    await asyncio.gather(listing, return_exceptions=True)
                    raise
                workspaces = await listing
            except HerdrError as exc:
                raise ToolError("herdr_unavailable", f"Herdr did not answer ({exc.code}); retry") from exc
            return json_response(
                state_answer(
                    seq,
                    [w for w in workspaces.get("workspaces", []) if isinstance(w, dict)],
                    [a for a in agents.get("agents", []) if isinstance(a, dict)],
                )
            )
        except HerdrMcpError as exc:
            return error_response(exc)

    async def wrong_method(request: Request) -> Response:
        return error_response(ToolError("method_not_allowed", f"{request.url.path} takes GET"))

    return [
        Route("/push/events", events, methods=["GET"]),
        Route("/push/state", state, methods=["GET"]),
        Route("/push/events", wrong_method, methods=["POST", "PUT", "PATCH", "DELETE"]),
        Route("/push/state", wrong_method, methods=["POST", "PUT", "PATCH", "DELETE"]),
    ]
