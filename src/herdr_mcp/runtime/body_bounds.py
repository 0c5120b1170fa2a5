"""The bounds of a `/mcp` request body, checked before the SDK reads it (docs/runtime.md "Parse
boundaries").

The SDK's Streamable HTTP transport reads a POST body whole, with no size cap, and parses it
with its own parser (nested past 200 levels it answers a parse error; a wide body it builds
whole). This ASGI middleware collects the body first, within `MESSAGE_LIMITS` (the bounds a
stdio line has), and answers what passes them itself: 413 for a body over the size bound (as
soon as its `Content-Length` or its bytes say so), 400 for one too deep or with too many items,
each a JSON-RPC error -32600 whose `data` carries the bound's code (`json_too_large`,
`json_too_deep`, `json_too_many_items`) and its limit. A body within the bounds is handed on to
the SDK unchanged, in one piece.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from herdr_mcp.strict_json import MESSAGE_LIMITS, JsonLimitExceeded, JsonLimits, check_bounds, too_large

#: JSON-RPC 2.0's "Invalid Request": the message was not read, so it has no id to answer.
INVALID_REQUEST = -32600


class BoundedMcpBody:
    """ASGI middleware: POST bodies under `/mcp` within `limits` reach `app`; others are answered."""

    def __init__(self, app: ASGIApp, limits: JsonLimits = MESSAGE_LIMITS) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or not (path == "/mcp" or path.startswith("/mcp/"))
        ):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limits.max_bytes:
            await _refuse(send, 413, too_large(self.limits))
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before its body was whole: nothing to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limits.max_bytes:
                await _refuse(send, 413, too_large(self.limits))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            check_bounds(body, self.limits)
        except JsonLimitExceeded as exc:
            await _refuse(send, 413 if exc.code == "json_too_large" else 400, exc)
            return
        await self.app(scope, _replay(body, receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the whole body once, then whatever the connection says next."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _refuse(send: Send, status: int, exc: JsonLimitExceeded) -> None:
    error = {
        "code": INVALID_REQUEST,
        "message": f"{exc.message}; send smaller requests",
        "data": exc.to_dict(),
    }
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                # The rest of a refused body is not read: the connection cannot carry another request.
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
