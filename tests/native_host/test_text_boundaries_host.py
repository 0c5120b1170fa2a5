"""Text the native host cannot refuse to carry: lone surrogates (Chrome passes them through native
messaging; JSON spells them `\\ud800`) and bytes that are not UTF-8, in every part of a frame and in
what the runtime answers and streams (docs/browser-protocol.md section 4, "Text").

Each odd frame is sent while a held request and a push stream are open: the host answers it (the
text as U+FFFD, or a refusal), and the held request, the stream and later requests are all still
served. Before the fix a lone surrogate in a body raised UnicodeEncodeError in the reader and the
host exited with every request and the stream.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.native_host_harness import HostProcess, StubRuntime, native_host, short_config_dir

FFFD = "\ufffd"


class OddRuntime(StubRuntime):
    """The stub runtime plus `/browser/pane.read`, which answers JSON spelling lone surrogates (a
    runtime or a proxy that escapes them, as `json.dumps` does by default)."""

    async def _odd(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._unauthorized()
        body = b'{"text": "lone \\ud800 high, \\udcff low", "\\udfff": "key", "raw": "bytes \xff\xfe"}'
        return Response(body, media_type="application/json")

    def app(self) -> Starlette:
        app = super().app()
        app.router.routes.append(Route("/browser/pane.read", self._odd, methods=["POST"]))
        return app


@pytest.fixture
def runtime() -> Iterator[StubRuntime]:
    with short_config_dir() as config:
        stub = OddRuntime(config).start()
        try:
            yield stub
        finally:
            stub.stop()


def _frame(text: str) -> bytes:
    """A frame body written by hand, so it can hold what `json.dumps` would not write."""
    return text.encode("utf-8")


def _get(body: str) -> bytes:
    """A `binding.get` frame (the stub echoes its body) with `body` as written."""
    return _frame('{"id": "odd", "method": "POST", "path": "/browser/binding.get", "body": ' + body + "}")


#: (name, frame body, what the host answers: a reply's echoed body, or (id, error code)).
ODD_FRAMES: list[tuple[str, bytes, Any]] = [
    (
        "escaped-lone-surrogates-in-body",
        _get('{"title": "cut \\ud83d", "low": "\\ude00 x", "\\ud800": ["\\udcff", {"deep": "\\udbff"}]}'),
        {"title": f"cut {FFFD}", "low": f"{FFFD} x", FFFD: [FFFD, {"deep": FFFD}]},
    ),
    (
        "a-pair-stays-a-pair",
        _frame(
            '{"id": "odd", "method": "POST", "path": "/browser/binding.get", "body": {"t": "\\ud83d\\ude00"}}'
        ),
        {"t": "\U0001f600"},
    ),
    (
        "raw-encoded-surrogate-and-bytes",
        b'{"id": "odd", "method": "POST", "path": "/browser/binding.get", '
        b'"body": {"t": "a\xed\xa0\x80b", "name": "caf\xff.txt"}}',
        {"t": f"a{FFFD * 3}b", "name": f"caf{FFFD}.txt"},
    ),
    (
        "surrogate-in-path",
        _frame('{"id": "odd", "method": "POST", "path": "/browser/\\ud800"}'),
        ("odd", "path_not_allowed"),
    ),
    (
        "surrogate-in-header",
        _frame(
            '{"id": "odd", "method": "POST", "path": "/mcp", "headers": {"mcp-name": "\\ud800"}, "body": {}}'
        ),
        ("odd", "invalid_request"),
    ),
    (
        "surrogate-in-header-name",
        _frame('{"id": "odd", "method": "POST", "path": "/mcp", "headers": {"\\udcff": "x"}, "body": {}}'),
        ("odd", "invalid_request"),
    ),
    (
        "surrogate-in-id",
        _frame('{"id": "\\ud800", "method": "GET", "path": "/push/state"}'),
        (None, "invalid_request"),
    ),
    (
        "nested-beyond-the-parser",
        _frame(
            '{"id": "odd", "method": "POST", "path": "/browser/binding.get", "body": ' + "[" * 200_000 + "}"
        ),
        (None, "json_too_deep"),  # the parse bound (docs/runtime.md "Parse boundaries")
    ),
]


def _odd_answer(host: HostProcess, expected: Any) -> None:
    """`expected`: the echoed body of a reply to "odd", or (the refusal's id, its code)."""
    if isinstance(expected, tuple):
        request_id, code = expected
        message = host.message(request_id)
        assert message["error"]["code"] == code, message
        return
    message = host.message("odd")
    assert message["status"] == 200, message
    assert message["body"]["echo"] == expected


@pytest.mark.timeout(60)
def test_odd_text_in_frames_never_ends_the_host(runtime: StubRuntime) -> None:
    with native_host(runtime.config_dir) as host:
        host.send({"id": "s1", "method": "GET", "path": "/push/events", "stream": True})
        assert host.message("s1")["event"] == "hello"
        host.send({"id": "held", "method": "POST", "path": "/browser/turn.resolve", "body": {}})
        for seq, (name, frame, expected) in enumerate(ODD_FRAMES, 1):
            host.send_raw(frame)
            try:
                _odd_answer(host, expected)
            except AssertionError as exc:
                raise AssertionError(f"{name}: {exc}") from exc
            # The stream and the other requests are still served after each one.
            runtime.push("agent_settled", seq, {"seq": seq, "title": "ok"})
            assert host.message("s1")["data"] == {"seq": seq, "title": "ok"}, name
            host.send({"id": f"after{seq}", "method": "GET", "path": "/push/state"})
            assert host.message(f"after{seq}")["status"] == 200, name
        runtime.release()
        assert host.message("held") == {"id": "held", "status": 200, "body": {"released": True}}
        assert host.process.poll() is None


@pytest.mark.timeout(60)
def test_odd_text_from_the_runtime_reaches_the_browser_as_fffd(runtime: StubRuntime) -> None:
    """A reply and a stream event spelling lone surrogates (and a reply with raw non-UTF-8 bytes)
    arrive as U+FFFD; the stream stays open."""
    with native_host(runtime.config_dir) as host:
        host.send({"id": "s1", "method": "GET", "path": "/push/events", "stream": True})
        assert host.message("s1")["event"] == "hello"
        host.send({"id": "odd", "method": "POST", "path": "/browser/pane.read", "body": {}})
        reply = host.message("odd")
        assert reply["status"] == 200, reply
        assert reply["body"] == {
            "text": f"lone {FFFD} high, {FFFD} low",
            FFFD: "key",
            "raw": f"bytes {FFFD}{FFFD}",
        }
        # The stub writes event data with json.dumps, which spells the surrogates as escapes.
        runtime.push("agent_settled", 1, {"title": "tab \ud83d", "name": "caf\udcff"})
        assert host.message("s1")["data"] == {"title": f"tab {FFFD}", "name": f"caf{FFFD}"}
        runtime.push("agent_settled", 2, {"title": "next"})
        assert host.message("s1")["data"] == {"title": "next"}
        # Every byte the host wrote is UTF-8 JSON (the harness parsed each frame; check the whole).
        bytes(host.raw).decode("utf-8")
        host.send({"id": "s1", "cancel": True})
        assert host.message("s1") == {"id": "s1", "end": True}


def test_frames_the_host_writes_always_encode() -> None:
    """The host's own encoder: a message holding lone surrogates (whatever put them there) is
    written as UTF-8, never raising."""
    from herdr_mcp.native_host import framing

    for message in (
        {"id": "x", "body": {"\ud800": "\udcff", "list": ["a\udfffb"]}},
        {"id": "y", "error": {"code": "c", "message": "path /browser/\ud800"}},
    ):
        (frame,) = framing.encode(message)
        json.dumps(json.loads(frame[4:].decode("utf-8")), ensure_ascii=False).encode("utf-8")
    (frame,) = framing.encode({"id": "x", "body": {"\ud800": "\udcff"}})
    assert json.loads(frame[4:]) == {"id": "x", "body": {FFFD: "\\xff"}}
