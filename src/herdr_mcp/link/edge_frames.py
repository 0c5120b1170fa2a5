"""The frames of the link <-> Edge protocol, version 1 (docs/edge-protocol.md), as the link sees them.

One parse boundary for what the Edge sends (`parse_frame`): a frame that exists is well-formed.
A known `type` with a missing or wrongly typed field is `FrameInvalid` (the link closes 1008);
an unknown `type` is `None` (ignored, for later additive frames). What the link sends back for a
`tool_request` is an `Outcome`: its frames and the delivery state they stand for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from herdr_mcp.strict_json import MESSAGE_LIMITS, JsonLimitExceeded, JsonLimits, loads_bounded

PROTOCOL = 1
#: docs/edge-protocol.md: at most 256 KiB of UTF-8 per frame, in both directions.
MAX_FRAME_BYTES = 262_144
#: A `tool_result_chunk`'s `data`: at most 192 KiB of the result's JSON text.
CHUNK_DATA_BYTES = 192 * 1024
#: The Edge reassembles up to 16 MiB per result; the link refuses larger ones itself.
MAX_RESULT_BYTES = 16 * 1024 * 1024
#: What a frame from the Edge may hold (docs/runtime.md "Parse boundaries"): a tool request is
#: a name and its arguments, far from 20,000 items.
FRAME_LIMITS = JsonLimits(max_bytes=MAX_FRAME_BYTES, max_items=20_000)
#: What a generation's answer to a relayed call may hold before the link reads it.
RESULT_LIMITS = JsonLimits(max_bytes=MAX_RESULT_BYTES, max_items=MESSAGE_LIMITS.max_items)
#: The protocol's heartbeat and silence limit (hello_ack says them again; the link follows hello_ack).
HEARTBEAT_S = 30.0
SILENCE_LIMIT_S = 90.0
DELIVERY_STATES = ("not_delivered", "delivery_unknown", "delivered")


class FrameInvalid(ValueError):
    """A frame from the Edge that breaks the protocol: the link closes with 1008."""


@dataclass(frozen=True)
class HelloAck:
    connection_id: str
    heartbeat_s: float
    silence_limit_s: float
    max_frame_bytes: int


@dataclass(frozen=True)
class Heartbeat:
    seq: int


@dataclass(frozen=True)
class ToolRequest:
    id: str
    tool: str
    arguments: dict[str, Any]
    deadline_ms: int


@dataclass(frozen=True)
class Cancel:
    id: str


@dataclass(frozen=True)
class ControlResult:
    id: str
    result: dict[str, Any] | None
    error: dict[str, str] | None


Frame = HelloAck | Heartbeat | ToolRequest | Cancel | ControlResult


def _field(document: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = document.get(name)
    if isinstance(value, bool) or not isinstance(value, kind):  # JSON true is no number here
        raise FrameInvalid(f"{document.get('type')}: field {name!r} is missing or not a {kind}")
    return value


def parse_frame(text: str | bytes) -> Frame | None:
    """One frame from the Edge; None for a type the link does not know. Raises `FrameInvalid`."""
    if isinstance(text, bytes):
        raise FrameInvalid("a frame is a text message, not a binary one")
    try:
        document = loads_bounded(text, FRAME_LIMITS, strict=False)
    except JsonLimitExceeded as exc:
        raise FrameInvalid(f"{exc.code}: {exc.message}") from None
    except ValueError as exc:
        raise FrameInvalid(f"not JSON: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("type"), str):
        raise FrameInvalid("a frame is a JSON object with a string `type`")
    kind = document["type"]
    if kind == "hello_ack":
        if _field(document, "protocol", int) != PROTOCOL:
            raise FrameInvalid(f"hello_ack: protocol {document['protocol']} is not {PROTOCOL}")
        heartbeat = float(_field(document, "heartbeat_s", (int, float)))
        silence = float(_field(document, "silence_limit_s", (int, float)))
        cap = _field(document, "max_frame_bytes", int)
        if not 0 < heartbeat < silence or not 1024 <= cap <= MAX_FRAME_BYTES:
            raise FrameInvalid("hello_ack: heartbeat_s, silence_limit_s or max_frame_bytes out of range")
        return HelloAck(_field(document, "connection_id", str), heartbeat, silence, cap)
    if kind == "heartbeat":
        return Heartbeat(_field(document, "seq", int))
    if kind == "tool_request":
        return ToolRequest(
            _field(document, "id", str),
            _field(document, "tool", str),
            _field(document, "arguments", dict),
            _field(document, "deadline_ms", int),
        )
    if kind == "cancel":
        return Cancel(_field(document, "id", str))
    if kind == "control_result":
        result, error = document.get("result"), document.get("error")
        if (result is None) == (error is None):
            raise FrameInvalid("control_result: exactly one of `result` and `error`")
        if result is not None and not isinstance(result, dict):
            raise FrameInvalid("control_result: `result` is an object")
        if error is not None and not (
            isinstance(error, dict)
            and isinstance(error.get("code"), str)
            and isinstance(error.get("message"), str)
        ):
            raise FrameInvalid("control_result: `error` is {code, message}")
        return ControlResult(_field(document, "id", str), result, error)
    return None


def encode(frame: dict[str, Any]) -> str:
    """A frame the link sends, as the text of one WebSocket message."""
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":"))


def result_frames(request_id: str, result: dict[str, Any], max_frame_bytes: int) -> list[str]:
    """`tool_result`, or `tool_result_chunk` frames when it would pass `max_frame_bytes`.

    A chunk's `data` is a slice of the result's JSON text (cut between characters, so the Edge
    joins the slices and parses once); a slice is halved until its frame, with the escaping JSON
    adds to a string, fits the cap.
    """
    whole = encode({"type": "tool_result", "id": request_id, "result": result})
    if len(whole.encode()) <= max_frame_bytes:
        return [whole]
    text = encode(result)
    slices: list[str] = []
    start = 0
    size = CHUNK_DATA_BYTES
    while start < len(text):
        piece = text[start : start + size]
        # Room for the frame's own fields: an index and count of up to 10 digits each.
        probe = encode(
            {"type": "tool_result_chunk", "id": request_id, "index": 10**9, "count": 10**9, "data": piece}
        )
        if len(piece.encode()) > CHUNK_DATA_BYTES or len(probe.encode()) > max_frame_bytes:
            size = max(1, size // 2)
            continue
        slices.append(piece)
        start += len(piece)
        size = CHUNK_DATA_BYTES
    return [
        encode(
            {
                "type": "tool_result_chunk",
                "id": request_id,
                "index": index,
                "count": len(slices),
                "data": piece,
            }
        )
        for index, piece in enumerate(slices)
    ]


def tool_error_frame(request_id: str, code: str, message: str, delivery_state: str) -> str:
    """A `tool_error` frame; only a call that was not delivered may be resent (`retryable`)."""
    return encode(
        {
            "type": "tool_error",
            "id": request_id,
            "code": code,
            "message": message,
            "retryable": delivery_state == "not_delivered",
            "delivery_state": delivery_state,
        }
    )


def jsonrpc_answer(data: bytes) -> dict[str, Any] | None:
    """The JSON-RPC answer in a JSON body or in the `data:` lines of an event stream."""
    texts = (
        [data]
        if data.lstrip().startswith(b"{")
        else [line[5:] for line in data.splitlines() if line.startswith(b"data:")]
    )
    for text in texts:
        try:
            message = loads_bounded(text, RESULT_LIMITS, strict=False)
        except ValueError:  # not JSON, or past the bounds: not an answer the link can relay
            continue
        if (
            isinstance(message, dict)
            and message.get("id") == 1
            and ("result" in message or "error" in message)
        ):
            return message
    return None


@dataclass(frozen=True)
class Outcome:
    """What the link answers a `tool_request` with: its frames, and the delivery state a `cancel_ack`
    names should the call have been cancelled meanwhile."""

    frames: list[str]
    delivery_state: str


def error_outcome(request_id: str, code: str, message: str, delivery_state: str) -> Outcome:
    return Outcome([tool_error_frame(request_id, code, message, delivery_state)], delivery_state)


def answer_outcome(request_id: str, status: int, data: bytes, max_frame_bytes: int) -> Outcome:
    """The generation's answer to the `tools/call` as frames (it ran: `delivered` either way)."""
    message = jsonrpc_answer(data)
    if message is None:
        return error_outcome(
            request_id,
            "runtime_answer_invalid",
            f"the runtime answered HTTP {status} without a JSON-RPC answer",
            "delivered",
        )
    result = message.get("result")
    if isinstance(result, dict):
        return Outcome(result_frames(request_id, result, max_frame_bytes), "delivered")
    error = message.get("error")
    text = error.get("message") if isinstance(error, dict) else None
    return error_outcome(
        request_id, "runtime_refused", str(text or "the runtime refused the call"), "delivered"
    )
