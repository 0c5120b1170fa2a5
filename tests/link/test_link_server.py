"""The link's HTTP/1.1 server (link/server.py) over real loopback sockets.

Byte-level behaviour (keep-alive, pipelining, split heads, 100-continue, refusals, closing) is
driven with raw `socket` clients against a tiny recording handler; the link's own answers
(`/health`, oversized `/mcp`, a client leaving mid-exchange) go through `LinkHandler`.
Every socket has a timeout and every thread is joined with one, so a failure never hangs.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from herdr_mcp.generations import Generation, GenerationStore
from herdr_mcp.link import LinkConfig, LinkHandler, LinkServer, server
from herdr_mcp.link.server import ClientConnection, Request
from herdr_mcp.link.upstream import WATCH_EVERY_S
from herdr_mcp.loopback import bind_loopback
from tests.support.link_harness import (
    LINK_TOKEN,
    KeepAliveGeneration,
    StandIn,
    in_process_link,
    read_request,
    store_active,
)
from tests.support.waiting import wait_until

TIMEOUT_S = 5.0
AUTH = f"Bearer {LINK_TOKEN}".encode()


# -- helpers ----------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class RawClient:
    """A raw loopback TCP client that reads Content-Length framed answers off the wire."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError(f"closed with {bytes(self.buffer)!r} unread")
        self.buffer += data

    def raw_head(self) -> bytes:
        """The next head (status line and headers, without the blank line)."""
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, _, rest = bytes(self.buffer).partition(b"\r\n\r\n")
        self.buffer = bytearray(rest)
        return head

    def answer(self) -> Answer:
        lines = self.raw_head().decode("latin-1").split("\r\n")
        version, status, _ = lines[0].split(" ", 2)
        assert version == "HTTP/1.1", lines[0]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            assert name.lower() not in headers, f"{name} sent twice"
            headers[name.lower()] = value.strip()
        length = int(headers["content-length"])
        while len(self.buffer) < length:
            self._fill()
        body = bytes(self.buffer[:length])
        del self.buffer[:length]
        return Answer(int(status), headers, body)

    def closed_by_server(self) -> bool:
        """Nothing more was sent and the server closed (EOF, or a reset)."""
        if self.buffer:
            return False
        try:
            return self.sock.recv(65536) == b""
        except ConnectionResetError:
            return True

    def still_open(self) -> bool:
        """The server has not closed the connection (no EOF waiting), checked without blocking."""
        if self.buffer:
            return True
        readable, _, _ = select.select([self.sock], [], [], 0)
        return not readable  # an open, quiet connection has nothing to read (no EOF, no reset)

    def close(self) -> None:
        self.sock.close()


def get(path: str, *headers: str, version: str = "HTTP/1.1") -> bytes:
    lines = [f"GET {path} {version}", "Host: 127.0.0.1", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def post(path: str, body: bytes, *headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Recorder:
    """A handler answering 200 with what it saw; `/slow` waits for `gate` first."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.entered = threading.Event()
        self.gate = threading.Event()

    def __call__(self, request: Request, client: ClientConnection) -> None:
        self.requests.append(request)
        if request.path == b"/slow":
            self.entered.set()
            assert self.gate.wait(TIMEOUT_S)
        seen = {
            "method": request.method.decode(),
            "path": request.path.decode(),
            "body": request.body.decode("latin-1") if len(request.body) < 1024 else None,
            "body_length": len(request.body),
            "oversized": request.oversized,
        }
        client.answer(200, json.dumps(seen).encode())


@contextlib.contextmanager
def serving(handler: server.Handler) -> Iterator[LinkServer]:
    link = LinkServer(bind_loopback("127.0.0.1", 0), handler).start()
    try:
        yield link
    finally:
        link.close()


@pytest.fixture
def recorded() -> Iterator[tuple[LinkServer, Recorder]]:
    recorder = Recorder()
    with serving(recorder) as link:
        yield link, recorder
    recorder.gate.set()


@contextlib.contextmanager
def link_with_handler(store: GenerationStore) -> Iterator[tuple[LinkServer, LinkHandler]]:
    """`in_process_link`, also handing over the server and the handler (its leases)."""
    handler = LinkHandler(
        LinkConfig(store, LINK_TOKEN, store.state_dir / "t", token_reader=lambda _: "y" * 32)
    )
    link = LinkServer(bind_loopback("127.0.0.1", 0), handler).start()
    try:
        yield link, handler
    finally:
        link.close()
        handler.close()


# -- connection handling ----------------------------------------------------------------------


def test_keep_alive_serves_many_requests_then_connection_close_closes(
    recorded: tuple[LinkServer, Recorder],
) -> None:
    """Requests on one connection are each answered and it stays open; `Connection: close` is
    answered with `connection: close` and the server closes the socket."""
    link, recorder = recorded
    client = RawClient(link.port)
    try:
        for path in ("/one", "/two", "/three"):
            client.send(get(path))
            answer = client.answer()
            assert (answer.status, answer.json()["path"]) == (200, path)
            assert "connection" not in answer.headers
            assert client.still_open()
        assert link.connections() == 1
        client.send(get("/last", "Connection: close"))
        answer = client.answer()
        assert (answer.status, answer.json()["path"], answer.headers["connection"]) == (200, "/last", "close")
        assert client.closed_by_server()
    finally:
        client.close()
    assert [request.path for request in recorder.requests] == [b"/one", b"/two", b"/three", b"/last"]
    wait_until(lambda: link.connections() == 0, "0 open connections")


def test_pipelined_requests_are_answered_in_order(recorded: tuple[LinkServer, Recorder]) -> None:
    """Two complete requests in one write: both answered, in the order sent."""
    link, _ = recorded
    client = RawClient(link.port)
    try:
        client.send(post("/first", b"1") + get("/second"))
        first, second = client.answer(), client.answer()
        assert (first.status, first.json()["path"], first.json()["body"]) == (200, "/first", "1")
        assert (second.status, second.json()["path"]) == (200, "/second")
        assert client.still_open()
    finally:
        client.close()


def test_split_head_and_chunked_body_arrive_whole(recorded: tuple[LinkServer, Recorder]) -> None:
    """A head sent byte by byte, then a chunked body in pieces: the handler sees one request with
    the decoded body."""
    link, recorder = recorded
    head = (
        b"POST /pieces?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    chunks = [b"5\r\nhello\r\n", b"1;ext=1\r\n \r\n", b"5\r\nworld\r\n", b"0\r\n\r\n"]
    client = RawClient(link.port)
    try:
        for index in range(50):
            client.send(head[index : index + 1])
            time.sleep(0.001)  # the subject: the head arrives in separate reads
        client.send(head[50:])
        for chunk in chunks:
            time.sleep(0.01)  # the subject: each chunk in a read of its own
            assert recorder.requests == []  # not handed over before the body is complete
            client.send(chunk)
        answer = client.answer()
    finally:
        client.close()
    assert (answer.status, answer.json()["body"]) == (200, "hello world")
    [request] = recorder.requests
    assert (request.method, request.path, request.query, request.body) == (
        b"POST", b"/pieces", b"x=1", b"hello world",
    )  # fmt: skip
    assert request.header(b"content-type") == b"application/json"  # header names lower-cased
    assert request.header(b"transfer-encoding") == b"chunked"


def test_expect_100_continue_is_answered_before_the_body(recorded: tuple[LinkServer, Recorder]) -> None:
    """`Expect: 100-continue`: `100 Continue` comes before any body byte is sent, then the answer."""
    link, recorder = recorded
    client = RawClient(link.port)
    try:
        client.send(
            b"POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 7\r\nExpect: 100-continue\r\n\r\n"
        )
        assert client.raw_head() == b"HTTP/1.1 100 Continue"
        assert recorder.requests == []
        client.send(b"payload")
        answer = client.answer()
        assert (answer.status, answer.json()["body"]) == (200, "payload")
        # A request sending its body at once gets no 100 (the answer would come after it anyway).
        client.send(post("/upload", b"again", "Expect: 100-continue"))
        answer = client.answer()
        assert (answer.status, answer.json()["body"]) == (200, "again")
    finally:
        client.close()


def test_garbage_is_refused_400_and_closed(recorded: tuple[LinkServer, Recorder]) -> None:
    """Not HTTP: 400 `bad_request` (JSON), `connection: close`, socket closed; no handler call."""
    link, recorder = recorded
    client = RawClient(link.port)
    try:
        client.send(b"NOT HTTP\r\n\r\n")
        answer = client.answer()
        assert (answer.status, answer.json()["error"], answer.headers["connection"]) == (
            400, "bad_request", "close",
        )  # fmt: skip
        assert answer.headers["content-type"] == "application/json"
        assert answer.json()["error_description"]
        assert client.closed_by_server()
    finally:
        client.close()
    assert recorder.requests == []


BIG_HEADER = get("/big").removesuffix(b"\r\n\r\n") + b"\r\nX-Big: "
HEADS_PAST_THE_LIMIT = {
    # One header value past the limit, the head then complete.
    "long-header": BIG_HEADER + b"a" * server.MAX_HEAD_BYTES + b"\r\n\r\n",
    # Many small headers, the head never finished.
    "many-headers": b"GET / HTTP/1.1\r\n" + b"X-A: b\r\n" * (server.MAX_HEAD_BYTES // 8 + 1),
    # A request target past the limit, never finished.
    "long-target": b"GET /" + b"a" * (server.MAX_HEAD_BYTES + 1),
}


@pytest.mark.parametrize("head", HEADS_PAST_THE_LIMIT.values(), ids=HEADS_PAST_THE_LIMIT.keys())
def test_head_larger_than_the_limit_is_refused_431_and_closed(
    recorded: tuple[LinkServer, Recorder], head: bytes
) -> None:
    """A head past `MAX_HEAD_BYTES`: 431 `head_too_large` (JSON), socket closed, no handler call."""
    link, recorder = recorded
    client = RawClient(link.port)
    try:
        client.send(head)
        answer = client.answer()
        assert (answer.status, answer.json()["error"], answer.headers["connection"]) == (
            431, "head_too_large", "close",
        )  # fmt: skip
        assert client.closed_by_server()
    finally:
        client.close()
    assert recorder.requests == []


def test_unfinished_header_value_past_the_limit_is_refused_431(recorded: tuple[LinkServer, Recorder]) -> None:
    """One header value that keeps coming past `MAX_HEAD_BYTES` is refused 431, not buffered."""
    link, _ = recorded
    client = RawClient(link.port)
    client.sock.settimeout(1.0)
    try:
        client.send(BIG_HEADER + b"a" * (2 * server.MAX_HEAD_BYTES))
        answer = client.answer()
    finally:
        client.close()
    assert (answer.status, answer.json()["error"]) == (431, "head_too_large")


def test_head_just_within_the_limit_is_served(recorded: tuple[LinkServer, Recorder]) -> None:
    """The limit is not hit early: a head of almost `MAX_HEAD_BYTES`, sent in pieces, is served."""
    link, _ = recorded
    head = BIG_HEADER + b"a" * (server.MAX_HEAD_BYTES - 4 - len(BIG_HEADER)) + b"\r\n\r\n"
    assert len(head) == server.MAX_HEAD_BYTES
    client = RawClient(link.port)
    try:
        for offset in range(0, len(head), 8192):
            client.send(head[offset : offset + 8192])
            time.sleep(0.002)  # the subject: the head arrives in separate reads
        answer = client.answer()
        assert (answer.status, answer.json()["path"]) == (200, "/big")
    finally:
        client.close()


def test_oversized_body_reaches_the_handler_marked(recorded: tuple[LinkServer, Recorder]) -> None:
    """A body past `MAX_BODY_BYTES` is read to its end and handed over with `oversized=True`, its
    kept beginning within the limit."""
    link, recorder = recorded
    body = b"x" * (server.MAX_BODY_BYTES + 1)
    answer = httpx2.post(f"http://127.0.0.1:{link.port}/big", content=body, timeout=TIMEOUT_S)
    assert answer.status_code == 200
    assert answer.json()["oversized"] is True
    [request] = recorder.requests
    assert request.oversized and 0 < len(request.body) <= server.MAX_BODY_BYTES
    # A body of exactly the limit is not oversized.
    exact = httpx2.post(f"http://127.0.0.1:{link.port}/exact", content=body[:-1], timeout=TIMEOUT_S).json()
    assert (exact["oversized"], exact["body_length"]) == (False, server.MAX_BODY_BYTES)


def test_oversized_mcp_request_is_413_not_delivered(tmp_path: Path) -> None:
    """Through `LinkHandler`: 413 with JSON-RPC `data.code` `not_delivered`; nothing reaches the
    active generation."""
    upstream = KeepAliveGeneration(5.0)
    try:
        store = store_active(tmp_path, Generation("big", upstream.endpoint), active="big")
        body = b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"pad": "'
        body += b"x" * server.MAX_BODY_BYTES + b'"}}'
        with in_process_link(store) as url:
            answer = httpx2.post(
                url, content=body, headers={"Authorization": AUTH.decode()}, timeout=TIMEOUT_S
            )
    finally:
        upstream.close()
    assert answer.status_code == 413
    document = answer.json()
    assert document["jsonrpc"] == "2.0"
    assert document["error"]["data"]["code"] == "not_delivered"
    assert "larger than" in document["error"]["message"]
    assert (upstream.requests, upstream.connections) == (0, 0)


@pytest.mark.parametrize("keep_alive", [False, True], ids=["plain", "asking-keep-alive"])
def test_http10_request_is_answered_then_closed(
    recorded: tuple[LinkServer, Recorder], keep_alive: bool
) -> None:
    """An HTTP/1.0 request (even one asking for keep-alive) is answered with `connection: close`,
    then the server closes the socket."""
    link, _ = recorded
    client = RawClient(link.port)
    try:
        client.send(get("/old", *(["Connection: keep-alive"] if keep_alive else []), version="HTTP/1.0"))
        answer = client.answer()
        assert (answer.status, answer.json()["path"], answer.headers["connection"]) == (200, "/old", "close")
        assert client.closed_by_server()
    finally:
        client.close()


def test_connection_cap_refuses_503_link_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `MAX_CONNECTIONS` a connection is answered 503 `link_busy` and closed; once one of the
    held connections closes, a new one is served."""
    monkeypatch.setattr(server, "MAX_CONNECTIONS", 2)
    recorder = Recorder()
    with serving(recorder) as link:
        held = [RawClient(link.port), RawClient(link.port)]
        extra: list[RawClient] = []
        try:
            wait_until(lambda: link.connections() == 2, "2 open connections")
            refused = RawClient(link.port)
            extra.append(refused)
            answer = refused.answer()
            assert (answer.status, answer.json()["error"], answer.headers["connection"]) == (
                503, "link_busy", "close",
            )  # fmt: skip
            assert refused.closed_by_server()
            assert link.connections() == 2

            held.pop().close()
            wait_until(lambda: link.connections() == 1, "1 open connections")
            admitted = RawClient(link.port)
            extra.append(admitted)
            admitted.send(get("/after"))
            assert admitted.answer().status == 200
            held[0].send(get("/held"))
            assert held[0].answer().status == 200
        finally:
            for client in held + extra:
                client.close()
    assert [request.path for request in recorder.requests] == [b"/after", b"/held"]


# -- the link's own answers -------------------------------------------------------------------


def test_link_health_and_unknown_paths(tmp_path: Path) -> None:
    """GET /health: 200 about the link; POST /health: 405 with `allow: GET`; other paths: 404."""
    store = store_active(tmp_path, Generation("g", "http://127.0.0.1:9"), active=None)
    with in_process_link(store) as url, httpx2.Client(timeout=TIMEOUT_S) as http:
        base = url.removesuffix("/mcp")
        health = http.get(f"{base}/health")
        assert (health.status_code, health.headers["content-type"]) == (200, "application/json")
        document = health.json()
        assert (document["status"], document["product"], document["active"]) == ("ok", "herdr-mcp-link", None)
        assert (document["in_flight"], document["pinned_sessions"]) == ({}, 0)

        wrong_method = http.post(f"{base}/health", content=b"{}")
        assert (wrong_method.status_code, wrong_method.headers["allow"]) == (405, "GET")
        assert wrong_method.json()["error"] == "method_not_allowed"

        elsewhere = http.get(f"{base}/other")
        assert (elsewhere.status_code, elsewhere.json()["error"]) == (404, "not_found")


def test_head_request_answer_carries_no_body(tmp_path: Path) -> None:
    """HEAD /health on a kept-alive connection: the head only, so the next answer parses."""
    store = store_active(tmp_path, Generation("g", "http://127.0.0.1:9"), active=None)
    with in_process_link(store) as url:
        client = RawClient(int(url.rsplit(":", 1)[1].removesuffix("/mcp")))
        try:
            client.send(b"HEAD /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert client.raw_head().startswith(b"HTTP/1.1 ")
            client.send(get("/health"))
            head = client.raw_head()
        finally:
            client.close()
    assert head.startswith(b"HTTP/1.1 200 OK\r\n"), head[:80]


# -- closing ----------------------------------------------------------------------------------


def test_close_lets_busy_exchanges_finish_and_drops_idle_ones() -> None:
    """`close(grace)`: the idle keep-alive connection is closed at once and new connects are
    refused, while the busy exchange still gets its whole answer; close returns within the grace."""
    recorder = Recorder()
    link = LinkServer(bind_loopback("127.0.0.1", 0), recorder).start()
    port = link.port
    idle, busy = RawClient(port), RawClient(port)
    closer = threading.Thread(target=lambda: link.close(3.0), daemon=True)
    release = threading.Timer(0.4, recorder.gate.set)
    try:
        idle.send(get("/before"))
        assert idle.answer().status == 200
        busy.send(get("/slow"))
        assert recorder.entered.wait(TIMEOUT_S)

        started = time.monotonic()
        release.start()
        closer.start()
        assert idle.closed_by_server()
        assert not recorder.gate.is_set(), "the idle connection was closed only after the busy one finished"
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S).close()
        assert not recorder.gate.is_set()

        answer = busy.answer()
        assert (answer.status, answer.json()["path"]) == (200, "/slow")
        assert busy.closed_by_server()
        closer.join(TIMEOUT_S)
        took = time.monotonic() - started
        assert not closer.is_alive()
        assert 0.35 < took < 3.0, took
        assert link.connections() == 0
    finally:
        recorder.gate.set()
        release.cancel()
        idle.close()
        busy.close()
        link.close()


def test_close_with_nothing_connected_is_quick() -> None:
    """`close(0)` on an idle server returns at once and frees the port."""
    link = LinkServer(bind_loopback("127.0.0.1", 0), Recorder()).start()
    port = link.port
    started = time.monotonic()
    link.close(0)
    assert time.monotonic() - started < 0.5
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S).close()


def test_idle_connection_is_closed_after_the_idle_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept-alive connection sending nothing for `IDLE_TIMEOUT_S` is closed by the server."""
    monkeypatch.setattr(server, "IDLE_TIMEOUT_S", 0.3)
    with serving(Recorder()) as link:
        client = RawClient(link.port)
        try:
            client.send(get("/once"))
            assert client.answer().status == 200
            answered = time.monotonic()
            assert client.closed_by_server()
            idle = time.monotonic() - answered
        finally:
            client.close()
        assert 0.25 < idle < 2.0, idle
        wait_until(lambda: link.connections() == 0, "0 open connections")


# -- the upstream exchange --------------------------------------------------------------------


class SilentGeneration(StandIn):
    """A stand-in generation that reads one request, never answers, and notes when the link closes
    the connection."""

    def __init__(self) -> None:
        self.received = threading.Event()
        self.hung_up = threading.Event()
        self.request = b""
        super().__init__()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            connection, _ = self._sock.accept()
            with connection:
                connection.settimeout(TIMEOUT_S)
                request = read_request(connection, bytearray())
                if request is None:
                    return
                self.request = b"".join(request)
                self.received.set()
                if connection.recv(1) == b"":
                    self.hung_up.set()


def test_client_leaving_before_the_answer_head_ends_the_upstream_exchange(tmp_path: Path) -> None:
    """A client closing its connection while the generation has not answered yet: the link closes
    its upstream connection (seen within a few `WATCH_EVERY_S`) and gives the lease back."""
    upstream = SilentGeneration()
    try:
        store = store_active(tmp_path, Generation("mute", upstream.endpoint), active="mute")
        with link_with_handler(store) as (link, handler):
            client = RawClient(link.port)
            try:
                call = b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call"}'
                client.send(post("/mcp", call, f"Authorization: {AUTH.decode()}"))
                assert upstream.received.wait(TIMEOUT_S)
                assert upstream.request.endswith(call)
                assert handler.forwarder.leases.in_flight() == {"mute": 1}
                assert not upstream.hung_up.is_set()
            finally:
                client.close()
            left = time.monotonic()
            assert upstream.hung_up.wait(TIMEOUT_S)
            assert time.monotonic() - left < 4 * WATCH_EVERY_S
            wait_until(lambda: handler.forwarder.leases.in_flight() == {"mute": 0}, "the lease to end")
            wait_until(lambda: link.connections() == 0, "0 open connections")
    finally:
        upstream.close()
