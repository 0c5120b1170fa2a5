"""A STAND-IN for the Edge's frame handling, for the link's tests (not the Edge: that is edge/, a
Worker under workerd, with its own tests). It speaks docs/edge-protocol.md strictly on its side:

- `/link/connect` only with `Authorization: Device <id>.<secret>` (401 otherwise, before the
  upgrade); every request line is kept, so a test can show that the secret never is in one;
- the first frame must be a well-formed `hello` (else close 1008); `hello_ack` names the
  heartbeat and silence limit the test chose; the stand-in sends heartbeats itself;
- every frame is checked against the protocol's fields and the 256 KiB cap (a violation fails
  the test through `violations`), `tool_result_chunk` frames are joined and parsed;
- `control_request` is answered from a small table of consents and grants.

`PairingEdge` stands in for `POST /link/pair`.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from tests.support.link_harness import StandIn, read_request
from tests.support.waiting import wait_until

DEVICE_ID = "dev_standin1"
DEVICE_SECRET = "s" * 40 + "abc"
MAX_FRAME_BYTES = 262_144
LINK_FRAME_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    "hello": {"protocol": int, "device_id": str, "link_version": str, "runtime": dict},
    "heartbeat": {"seq": int, "runtime": dict},
    "tool_result": {"id": str, "result": dict},
    "tool_result_chunk": {"id": str, "index": int, "count": int, "data": str},
    "tool_error": {"id": str, "code": str, "message": str, "retryable": bool, "delivery_state": str},
    "cancel_ack": {"id": str, "delivery_state": str},
    "control_request": {"id": str, "method": str, "params": dict},
}
DELIVERY_STATES = {"not_delivered", "delivery_unknown", "delivered"}


@dataclass
class Received:
    """A frame from the link, on connection number `connection` (from 1)."""

    connection: int
    frame: dict[str, Any]


@dataclass
class EdgeStandIn:
    """Run with `with EdgeStandIn(...) as edge:`; `url` is its http:// origin on loopback."""

    heartbeat_s: float = 0.2
    silence_limit_s: float = 10.0
    #: False: the stand-in never sends a heartbeat (to test the link's silence limit).
    send_heartbeats: bool = True
    consents: dict[str, dict[str, Any]] = field(default_factory=dict)
    grants: dict[str, dict[str, Any]] = field(default_factory=dict)
    request_lines: list[str] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)
    frames: list[Received] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    connections: int = 0
    closed: list[tuple[int, int | None]] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    _loop: asyncio.AbstractEventLoop | None = None
    _server: Server | None = None
    _current: ServerConnection | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _chunks: dict[str, list[str]] = field(default_factory=dict)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- running ------------------------------------------------------------------------------

    def __enter__(self) -> EdgeStandIn:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self) -> None:
        started = threading.Event()

        def run() -> None:
            async def main() -> None:
                self._loop = asyncio.get_running_loop()
                async with serve(
                    self._handler,
                    "127.0.0.1",
                    self.port,
                    process_request=self._check_request,
                    max_size=MAX_FRAME_BYTES,
                    ping_interval=None,
                    compression=None,
                ) as server:
                    self._server = server
                    self.port = server.sockets[0].getsockname()[1]
                    started.set()
                    await server.serve_forever()

            with contextlib.suppress(asyncio.CancelledError):
                asyncio.run(main())

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert started.wait(10)

    def stop(self) -> None:
        """Close the server and its connections (as an Edge restart does); `start()` reuses the port."""
        loop, server = self._loop, self._server
        if loop is not None and server is not None:

            async def close() -> None:
                server.close()
                await server.wait_closed()

            asyncio.run_coroutine_threadsafe(close(), loop).result(10)  # serve_forever returns
        if self._thread is not None:
            self._thread.join(10)
        self._server = self._current = None

    # -- the protocol -------------------------------------------------------------------------

    def _check_request(self, connection: ServerConnection, request: Request) -> Response | None:
        self.request_lines.append(f"GET {request.path} HTTP/1.1")
        authorization = request.headers.get("Authorization")
        self.authorizations.append(authorization)
        if request.path != "/link/connect":
            return connection.respond(404, "not found\n")
        if authorization != f"Device {DEVICE_ID}.{DEVICE_SECRET}":
            body = json.dumps({"error": {"code": "device_unauthorized", "message": "wrong device secret"}})
            return Response(401, "Unauthorized", Headers({"Content-Type": "application/json"}), body.encode())
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        with self._lock:
            self.connections += 1
            number = self.connections
        self._current = ws
        first = self._parse(await ws.recv(), number)
        if first is None or first.get("type") != "hello" or first.get("protocol") != 1:
            await ws.close(1008, "the first frame must be hello")
            return
        await ws.send(
            json.dumps(
                {
                    "type": "hello_ack",
                    "protocol": 1,
                    "connection_id": f"conn-{number}",
                    "heartbeat_s": self.heartbeat_s,
                    "silence_limit_s": self.silence_limit_s,
                    "max_frame_bytes": MAX_FRAME_BYTES,
                }
            )
        )
        beating = asyncio.create_task(self._heartbeats(ws) if self.send_heartbeats else asyncio.sleep(0))
        try:
            async for text in ws:
                frame = self._parse(text, number)
                if frame is not None and frame.get("type") == "control_request":
                    await ws.send(
                        json.dumps({"type": "control_result", "id": frame["id"], **self._control(frame)})
                    )
        except Exception as exc:  # a dropped connection ends this handler, as on the Edge
            self.ended.append(repr(exc))
        finally:
            beating.cancel()
            self.closed.append((number, ws.close_code))

    async def _heartbeats(self, ws: ServerConnection) -> None:
        seq = 0
        with contextlib.suppress(Exception):
            while True:
                await asyncio.sleep(self.heartbeat_s)
                seq += 1
                await ws.send(json.dumps({"type": "heartbeat", "seq": seq}))

    def _parse(self, text: str | bytes, number: int) -> dict[str, Any] | None:
        if isinstance(text, bytes):
            self.violations.append("a binary frame")
            return None
        if len(text.encode()) > MAX_FRAME_BYTES:
            self.violations.append(f"a frame of {len(text.encode())} bytes")
        frame: dict[str, Any] = json.loads(text)
        fields = LINK_FRAME_FIELDS.get(str(frame.get("type")))
        if fields is None:
            self.violations.append(f"unknown frame type {frame.get('type')!r}")
            return None
        for name, kind in fields.items():
            value = frame.get(name)
            if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
                self.violations.append(f"{frame['type']}.{name} is {value!r}")
        if frame.get("delivery_state", "delivered") not in DELIVERY_STATES:
            self.violations.append(f"delivery_state {frame['delivery_state']!r}")
        if frame["type"] == "tool_result_chunk":
            parts = self._chunks.setdefault(frame["id"], [])
            if frame["index"] != len(parts):
                self.violations.append(f"chunk {frame['index']} out of order")
            parts.append(frame["data"])
            if len(parts) == frame["count"]:
                joined = {"type": "tool_result", "id": frame["id"], "result": json.loads("".join(parts))}
                self.frames.append(Received(number, {**joined, "chunks": frame["count"]}))
        self.frames.append(Received(number, frame))
        return frame

    def _control(self, frame: dict[str, Any]) -> dict[str, Any]:
        method, params = frame["method"], frame["params"]
        if method == "consent.list":
            return {"result": {"pending": list(self.consents.values())}}
        if method in ("consent.approve", "consent.deny"):
            consent = self.consents.pop(str(params.get("request_id")), None)
            if consent is None:
                return {"error": {"code": "consent_not_found", "message": "no such consent request"}}
            if method == "consent.deny":
                return {"result": {"request_id": consent["request_id"]}}
            grant = {"grant_id": f"grant-{len(self.grants) + 1}", "client_name": consent["client_name"]}
            self.grants[grant["grant_id"]] = {**grant, "created_at": "now", "last_used_at": None}
            return {"result": {"request_id": consent["request_id"], "code": consent["code"], **grant}}
        if method == "grant.list":
            return {"result": {"grants": list(self.grants.values())}}
        if method == "grant.revoke":
            if self.grants.pop(str(params.get("grant_id")), None) is None:
                return {"error": {"code": "grant_not_found", "message": "no such grant"}}
            return {"result": {"grant_id": params["grant_id"], "revoked": True}}
        return {"error": {"code": "method_not_found", "message": method}}

    # -- for tests ----------------------------------------------------------------------------

    def send(self, frame: dict[str, Any]) -> None:
        """Send `frame` on the current connection."""
        self.send_text(json.dumps(frame))

    def send_text(self, text: str) -> None:
        """Send `text` as one text message on the current connection, as it is."""
        ws, loop = self._current, self._loop
        assert ws is not None and loop is not None
        asyncio.run_coroutine_threadsafe(ws.send(text), loop).result(10)

    def send_together(self, *frames: dict[str, Any]) -> None:
        """Send `frames` back to back in one turn of the stand-in's loop (a cancel right behind its
        request may then reach the link in the same read)."""
        ws, loop = self._current, self._loop
        assert ws is not None and loop is not None

        async def send_all() -> None:
            for frame in frames:
                await ws.send(json.dumps(frame))

        asyncio.run_coroutine_threadsafe(send_all(), loop).result(10)

    def close_current(self, code: int = 1001) -> None:
        ws, loop = self._current, self._loop
        assert ws is not None and loop is not None
        asyncio.run_coroutine_threadsafe(ws.close(code), loop).result(10)

    def wait_frame(self, match: Callable[[dict[str, Any]], bool], what: str, timeout: float = 30) -> Received:
        def found() -> Received | None:
            return next((item for item in list(self.frames) if match(item.frame)), None)

        return wait_until(found, what, timeout)

    def of_type(self, kind: str, request_id: str | None = None) -> list[Received]:
        return [
            item
            for item in list(self.frames)
            if item.frame["type"] == kind and (request_id is None or item.frame.get("id") == request_id)
        ]


class _PairingHandler(http.server.BaseHTTPRequestHandler):
    server: PairingEdge

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        self.server.received.append((self.path, json.loads(body)))
        status, answer = self.server.answer
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        return


class PairingEdge(http.server.ThreadingHTTPServer):
    """`POST /link/pair` answering `answer` (status, JSON), keeping what it received."""

    def __init__(self, answer: tuple[int, dict[str, Any]]) -> None:
        super().__init__(("127.0.0.1", 0), _PairingHandler)
        self.answer = answer
        self.received: list[tuple[str, dict[str, Any]]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextlib.contextmanager
def pairing_edge(answer: tuple[int, dict[str, Any]]) -> Iterator[PairingEdge]:
    server = PairingEdge(answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class ToolGeneration(StandIn):
    """A stand-in generation answering 2026-07-28 `tools/call` POSTs by tool name:
    `echo` (its arguments back), `big` (a text of `size` times `char`), `hold` (no answer
    until the link closes the connection: `abandoned` counts those), `gate` (its arguments back once
    `release` is set). `calls` lists every call's
    tool and arguments, as received."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.headers: list[bytes] = []
        self.abandoned = 0
        #: `gate` calls answer once this is set.
        self.release = threading.Event()
        super().__init__()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = self._sock.accept()
                threading.Thread(target=self._exchange, args=(connection,), daemon=True).start()

    def _exchange(self, connection: socket.socket) -> None:
        with connection, contextlib.suppress(OSError):
            buffer = bytearray()
            while (request := read_request(connection, buffer)) is not None:
                head, body = request
                message = json.loads(body)
                params = message["params"]
                self.calls.append((params["name"], params["arguments"]))
                self.headers.append(head)
                if params["name"] == "hold":
                    if connection.recv(1) == b"":
                        self.abandoned += 1
                    return
                if params["name"] == "gate":
                    self.release.wait(60)
                if params["name"] == "big":
                    text = str(params["arguments"].get("char", "x")) * int(params["arguments"]["size"])
                    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
                else:
                    result = {"content": [], "structuredContent": params["arguments"], "isError": False}
                answer = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(answer), answer)
                )
