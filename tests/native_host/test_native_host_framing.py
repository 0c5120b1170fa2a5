"""The native host's wire and parse boundary without a process: frame sizes around Chrome's 1 MiB
limit, chunking of messages dense in characters that grow when escaped, the header check, and
the table of frames the host refuses (docs/browser-protocol.md section 4)."""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from herdr_mcp.native_host import framing
from herdr_mcp.native_host.protocol import ROUTES, Cancel, Forward, Refused, parse

MIB = 1024 * 1024


def _reply_of_size(size: int, fill: str = "x") -> dict[str, Any]:
    """A reply whose compact JSON text is exactly `size` bytes (`fill` one byte, unescaped)."""
    reply: dict[str, Any] = {"id": "r1", "status": 200, "body": {"pad": ""}}
    overhead = len(json.dumps(reply, separators=(",", ":")))
    reply["body"]["pad"] = fill * (size - overhead)
    assert len(json.dumps(reply, separators=(",", ":"))) == size
    return reply


def _join(frames: list[bytes]) -> dict[str, Any]:
    """What the extension does with the frames of one message."""
    messages = []
    for frame in frames:
        (length,) = struct.unpack("=I", frame[:4])
        assert length == len(frame) - 4
        messages.append(json.loads(frame[4:]))
    if len(messages) == 1 and "chunk" not in messages[0]:
        single: dict[str, Any] = messages[0]
        return single
    assert [m["chunk"]["index"] for m in messages] == list(range(len(messages)))
    assert {m["chunk"]["count"] for m in messages} == {len(messages)}
    joined: dict[str, Any] = json.loads("".join(m["chunk"]["data"] for m in messages))
    return joined


@pytest.mark.parametrize(
    ("size", "frames"),
    [(MIB - 1, 1), (MIB, 2), (MIB + 1, 3), (3 * MIB, 6)],
    ids=["MiB-1", "MiB", "MiB+1", "3MiB"],
)
def test_a_message_of_1_mib_or_more_is_chunked(size: int, frames: int) -> None:
    reply = _reply_of_size(size)
    encoded = framing.encode(reply)
    assert len(encoded) == frames
    assert all(len(frame) - 4 < framing.MAX_OUTGOING_BYTES for frame in encoded)
    if frames > 1:
        assert all(len(json.loads(f[4:])["chunk"]["data"]) <= framing.CHUNK_TEXT_CHARS for f in encoded)
    assert _join(encoded) == reply


@pytest.mark.parametrize(
    "fill",
    ['"', "\\", "\u00e9", "\U0001f600", "\x01"],
    ids=["quote", "backslash", "e-acute", "emoji", "control"],
)
def test_characters_that_grow_when_escaped_still_give_frames_under_the_limit(fill: str) -> None:
    reply = {"id": "r1", "status": 200, "body": {"pad": fill * (700 * 1024)}}
    encoded = framing.encode(reply)
    assert len(encoded) > 1
    assert max(len(frame) - 4 for frame in encoded) < framing.MAX_OUTGOING_BYTES
    assert _join(encoded) == reply


def test_the_header_is_native_endian_and_checked_before_the_body() -> None:
    assert (
        framing.announced_length(struct.pack("=I", framing.MAX_INCOMING_BYTES)) == framing.MAX_INCOMING_BYTES
    )
    assert framing.announced_length(struct.pack("=I", 0)) == 0
    for length in (framing.MAX_INCOMING_BYTES + 1, 0xFFFFFFFF):
        with pytest.raises(framing.FrameTooLarge) as caught:
            framing.announced_length(struct.pack("=I", length))
        assert caught.value.length == length


REQUEST = {"id": "r1", "method": "POST", "path": "/browser/binding.get", "body": {"scope": "chatgpt:conv:1"}}


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"not json", "invalid_request"),
        (b"\xff\xfe", "invalid_request"),
        (b"[1, 2]", "invalid_request"),
        (b'{"id": "r1", "id": "r2", "method": "GET", "path": "/push/state"}', "invalid_request"),
        (b'{"id": "r1", "method": "POST", "path": "/mcp", "body": {"x": NaN}}', "invalid_request"),
        (json.dumps({**REQUEST, "id": ""}).encode(), "invalid_request"),
        (json.dumps({**REQUEST, "id": 7}).encode(), "invalid_request"),
        (json.dumps({**REQUEST, "id": "a" * 129}).encode(), "invalid_request"),
        (json.dumps({**REQUEST, "headers": {"Authorization": "x"}}).encode(), "invalid_request"),
        (json.dumps({**REQUEST, "stream": True}).encode(), "invalid_request"),
        (json.dumps({**REQUEST, "query": {"after": "1"}}).encode(), "invalid_request"),
        (json.dumps({"id": "s1", "method": "GET", "path": "/push/events"}).encode(), "invalid_request"),
        (
            json.dumps(
                {
                    "id": "s1",
                    "method": "GET",
                    "path": "/push/events",
                    "stream": True,
                    "query": {"after": "-1"},
                }
            ).encode(),
            "invalid_request",
        ),
        (
            json.dumps(
                {"id": "s1", "method": "GET", "path": "/push/events", "stream": True, "query": {"x": "1"}}
            ).encode(),
            "invalid_request",
        ),
        (
            json.dumps({"id": "r1", "method": "GET", "path": "/push/state", "body": {}}).encode(),
            "invalid_request",
        ),
        (json.dumps({"id": "s1", "cancel": False}).encode(), "invalid_request"),
        (json.dumps({"id": "s1", "cancel": True, "path": "/mcp"}).encode(), "invalid_request"),
        (json.dumps({**REQUEST, "path": "/health"}).encode(), "path_not_allowed"),
        (json.dumps({**REQUEST, "path": "/browser/binding.get/"}).encode(), "path_not_allowed"),
        (json.dumps({**REQUEST, "path": "/browser/../mcp"}).encode(), "path_not_allowed"),
        (json.dumps({**REQUEST, "path": "/mcp?x=1"}).encode(), "path_not_allowed"),
        (json.dumps({**REQUEST, "path": "http://example.com/mcp"}).encode(), "path_not_allowed"),
        (json.dumps({**REQUEST, "method": "GET"}).encode(), "path_not_allowed"),
        (json.dumps({**REQUEST, "method": "post"}).encode(), "path_not_allowed"),
        (json.dumps({**REQUEST, "method": "DELETE", "path": "/mcp"}).encode(), "path_not_allowed"),
        (json.dumps({"id": "r1", "method": "POST", "path": "/push/state"}).encode(), "path_not_allowed"),
    ],
)
def test_frames_the_host_refuses(payload: bytes, code: str) -> None:
    with pytest.raises(Refused) as caught:
        parse(payload)
    assert caught.value.code == code
    reply = caught.value.reply()
    assert set(reply) == {"id", "error"} and reply["error"]["code"] == code


def test_every_allowlisted_route_parses() -> None:
    for method, path in ROUTES:
        message: dict[str, Any] = {"id": "r1", "method": method, "path": path}
        if ROUTES[(method, path)].stream:
            message.update(stream=True, query={"after": 41})
        elif method == "POST":
            message["body"] = {"scope": "chatgpt:conv:1"}
        parsed = parse(json.dumps(message).encode())
        assert isinstance(parsed, Forward)
        assert (parsed.method, parsed.path, parsed.stream) == (method, path, ROUTES[(method, path)].stream)
        if parsed.stream:
            assert parsed.query == {"after": "41"}
        assert parsed.body == (None if method == "GET" else b'{"scope":"chatgpt:conv:1"}')
    assert parse(b'{"id": "s1", "cancel": true}') == Cancel("s1")
