"""The local bearer token that guards `/mcp`, `/push` and `/browser` (on loopback and on the
Unix socket alike).

The token lives in a 0600 file in the config dir and is created on first start (`tokens.py`).
Comparison is constant-time. `/health` stays open so the updater and the link can probe.
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send


class BearerGate:
    """ASGI middleware: requests under any of `protected_prefixes` need `Authorization: Bearer
    <token>`. A refusal is 401 with `{"error": "unauthorized", "error_description"}` on `/mcp`
    (the OAuth-style body MCP clients know) and `{"error": {"code": "unauthorized", "message"}}`
    elsewhere (the browser plane's error shape)."""

    def __init__(self, app: ASGIApp, token: str, protected_prefixes: tuple[str, ...] = ("/mcp",)) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._prefixes = protected_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._is_protected(scope["path"]):
            supplied = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(supplied, self._expected):
                await _unauthorized(send, mcp=scope["path"] == "/mcp" or scope["path"].startswith("/mcp/"))
                return
        await self.app(scope, receive, send)

    def _is_protected(self, path: str) -> bool:
        return any(path == prefix or path.startswith(prefix + "/") for prefix in self._prefixes)


_HOW = "send the local bearer token from the herdr-mcp token file (herdr-mcp token --path shows where it is)"


async def _unauthorized(send: Send, *, mcp: bool) -> None:
    document: dict[str, object] = (
        {"error": "unauthorized", "error_description": _HOW}
        if mcp
        else {"error": {"code": "unauthorized", "message": _HOW}}
    )
    body = json.dumps(document).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="herdr-mcp"'),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
