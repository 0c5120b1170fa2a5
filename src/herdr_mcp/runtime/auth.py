"""The local bearer token that guards `/mcp`.

The token lives in a 0600 file in the config dir and is created on first start (`tokens.py`).
Comparison is constant-time. `/health` stays open so the updater and the link can probe.
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send


class BearerGate:
    """ASGI middleware: requests under `protected_prefix` need `Authorization: Bearer <token>`."""

    def __init__(self, app: ASGIApp, token: str, protected_prefix: str = "/mcp") -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._prefix = protected_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._is_protected(scope["path"]):
            supplied = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(supplied, self._expected):
                await _unauthorized(send)
                return
        await self.app(scope, receive, send)

    def _is_protected(self, path: str) -> bool:
        return path == self._prefix or path.startswith(self._prefix + "/")


async def _unauthorized(send: Send) -> None:
    body = json.dumps(
        {
            "error": "unauthorized",
            "error_description": "send the local bearer token from the herdr-mcp token file "
            "(herdr-mcp token --path shows where it is)",
        }
    ).encode()
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
