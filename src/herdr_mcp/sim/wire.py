"""What the simulator puts on Herdr's wire: newline-delimited JSON answers and errors, refused
requests, and the event subscribers that `events.subscribe` streams to."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from herdr_mcp.herdr.methods import AGENT_STATUS_SUBSCRIPTION

SUBSCRIBER_BACKLOG = 10_000
"""Events queued for one slow subscriber before it is disconnected."""


class Subscriber:
    """One `events.subscribe` connection: what it subscribed to and its bounded queue of lines."""

    def __init__(self, subscriptions: list[dict[str, Any]], writer: asyncio.StreamWriter) -> None:
        self.lifecycle = {
            s["type"].replace(".", "_") for s in subscriptions if s["type"] != AGENT_STATUS_SUBSCRIPTION
        }
        self.status_filters = [
            (s["pane_id"], s.get("agent_status"))
            for s in subscriptions
            if s["type"] == AGENT_STATUS_SUBSCRIPTION
        ]
        self.queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=SUBSCRIBER_BACKLOG)
        self.writer = writer
        self.overflowed = False

    def wants(self, event: str, data: dict[str, Any]) -> bool:
        """Whether this subscriber subscribed to `event` (for agent status: that pane and status)."""
        if event == AGENT_STATUS_SUBSCRIPTION:
            return any(
                pane_id == data["pane_id"] and status in (None, data["agent_status"])
                for pane_id, status in self.status_filters
            )
        return event in self.lifecycle


class BadRequest(Exception):
    """A request refused before any method ran: the id (if it had one), code and message."""

    def __init__(self, request_id: str, code: str, message: str) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.code = code
        self.message = message


def parse_request(
    line: bytes, validators: Mapping[str, Draft202012Validator], supported: frozenset[str]
) -> tuple[str, str, dict[str, Any]]:
    """(id, method, params) of one request line; a method must be in `supported` and its params
    valid against its schema in `validators`. Raises BadRequest with the answer's code."""
    try:
        request = json.loads(line)
    except (ValueError, RecursionError):
        raise BadRequest("", "invalid_request", "request is not valid JSON") from None
    if not isinstance(request, dict) or not isinstance(request.get("id"), str):
        raise BadRequest("", "invalid_request", "request must be an object with a string id")
    request_id = request["id"]
    method = request.get("method")
    if not isinstance(method, str):
        raise BadRequest(request_id, "invalid_request", "request needs a string method")
    if method not in validators or method not in supported:
        raise BadRequest(request_id, "invalid_request", f"unknown method {method!r}")
    if "params" not in request:
        raise BadRequest(request_id, "invalid_request", "request needs params (use {} for none)")
    params = request["params"]
    error = best_match(validators[method].iter_errors(params))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)
        raise BadRequest(request_id, "invalid_params", f"{where or 'params'}: {error.message}")
    return request_id, method, params


def error_answer(request_id: str, code: str, message: str) -> dict[str, Any]:
    """Herdr's error answer."""
    return {"id": request_id, "error": {"code": code, "message": message}}


def encode(message: dict[str, Any]) -> bytes:
    """One message as a compact JSON line."""
    return (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


async def send(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    """Write one message line and wait until it is flushed."""
    writer.write(encode(message))
    await writer.drain()
