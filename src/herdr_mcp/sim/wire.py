"""What the simulator reads and writes on Herdr's wire: one request line, answers and events.

Herdr: src/api/server.rs handle_connection_with_stop. The first line (at most 1 MiB; longer closes
the connection unanswered, as does no line within 5 s) is parsed whole by serde; whatever fails —
bad JSON, no string id, an unknown method, missing or ill-typed params — is answered with an empty
id and `invalid_request`. Unknown extra params are ignored.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Collection
from typing import Any

from herdr_mcp.sim.params import Invalid


class BadRequest(Exception):
    """A line Herdr's serde refuses: answered `{"id": "", "error": {"code": "invalid_request"}}`."""


def parse_request(
    line: bytes, methods: Collection[str], check: Callable[[str, Any], None]
) -> tuple[str, str, dict[str, Any]]:
    """The (id, method, params) of a request line of a protocol with `methods`, checked by `check`."""
    try:
        request = json.loads(line)
    except (ValueError, RecursionError):
        raise BadRequest("invalid request: not valid JSON") from None
    if not isinstance(request, dict):
        raise BadRequest("invalid request: expected an object")
    request_id, method = request.get("id"), request.get("method")
    if not isinstance(request_id, str):
        raise BadRequest("invalid request: missing field `id`")
    if not isinstance(method, str):
        raise BadRequest("invalid request: missing field `method`")
    if method not in methods:
        raise BadRequest(f"invalid request: unknown method {method!r}")
    if "params" not in request:
        raise BadRequest("invalid request: missing field `params`")
    try:
        check(method, request["params"])
    except Invalid as exc:
        raise BadRequest(f"invalid request: {method} params: {exc}") from None
    return request_id, method, request["params"]


def error_answer(request_id: str, code: str, message: str) -> dict[str, Any]:
    return {"id": request_id, "error": {"code": code, "message": message}}


def encode(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


async def send(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    writer.write(encode(message))
    await writer.drain()
