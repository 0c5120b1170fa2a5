"""The link's HTTP/1.1 client to the generations (link/upstream.py), byte by byte: blocking, as
the link's connection threads use it, and on an asyncio loop, as its Edge side does (the last
section).

A scripted loopback upstream reads each request (head and Content-Length body), then answers it
with a list of byte pieces sent with short pauses between them, so the answer's framing (the head,
Content-Length, chunked coding, until-close) arrives split at awkward places. The tests check the
bodies, the delivery errors (`NotDelivered`, `DeliveryUnknown`, `AnswerBroken`, `ClientGone`) and
which connections the pool keeps. Every socket has a timeout and every thread is joined with one.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from herdr_mcp.link import upstream
from herdr_mcp.link.upstream import (
    AnswerBroken,
    ClientGone,
    ClientWatch,
    DeliveryUnknown,
    NotDelivered,
    Response,
    UpstreamError,
    UpstreamPool,
)
from tests.support.link_harness import read_request, saw_fin_from
from tests.support.waiting import wait_until, wait_until_async

TIMEOUT_S = 5.0
#: Pause between two scripted pieces: long enough for each to arrive as its own `recv`.
GAP_S = 0.01


class _Hold:
    """A script step: wait until the test sets `ScriptedUpstream.release` (or the server stops)."""


HOLD = _Hold()
Piece = bytes | float | _Hold


@dataclass(frozen=True)
class Script:
    """One scripted answer: bytes are sent (with `gap` between them), a float is a pause."""

    pieces: tuple[Piece, ...]
    close: bool = False  # close the connection after the answer
    gap: float = GAP_S


DEFAULT = Script((b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",))


@dataclass
class Seen:
    head: bytes
    body: bytes


@dataclass
class ScriptedUpstream:
    """A loopback HTTP/1.1 "generation": one thread per connection, answers taken from `scripts`."""

    scripts: deque[Script]
    requests: list[Seen] = field(default_factory=list)
    connections: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    #: Set whenever a connection ended (the upstream closed it, or saw the link close it).
    ended: threading.Event = field(default_factory=threading.Event)
    #: Set when the link closed a connection (EOF or a reset seen by the upstream).
    link_closed: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.02)
        self.port: int = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(TIMEOUT_S)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            with self._lock:
                self.connections += 1
                self._conns.append(conn)
                self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            buffer = bytearray()
            while True:
                seen = self._read_request(conn, buffer)
                if seen is None:
                    self.link_closed.set()
                    return
                with self._lock:
                    self.requests.append(seen)
                    script = self.scripts.popleft() if self.scripts else DEFAULT
                first = True
                for piece in script.pieces:
                    if isinstance(piece, _Hold):
                        self.release.wait(TIMEOUT_S)
                    elif isinstance(piece, float):
                        time.sleep(piece)  # the subject: an upstream that pauses mid-answer
                    else:
                        if not first:
                            time.sleep(script.gap)  # the subject: the answer arrives in pieces
                        first = False
                        conn.sendall(piece)
                if script.close:
                    return
        except TimeoutError:
            return
        except OSError:
            self.link_closed.set()
            return
        finally:
            conn.close()
            self.ended.set()

    @staticmethod
    def _read_request(conn: socket.socket, buffer: bytearray) -> Seen | None:
        request = read_request(conn, buffer)
        return None if request is None else Seen(*request)

    def stop(self) -> None:
        self._stop.set()
        self.release.set()
        self._accepter.join(TIMEOUT_S)
        self.listener.close()
        with self._lock:
            conns, threads = list(self._conns), list(self._threads)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join(TIMEOUT_S)
            assert not thread.is_alive()


Serve = Callable[..., ScriptedUpstream]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start scripted upstreams: `serve(script, script, ...)`; all are stopped after the test."""
    started: list[ScriptedUpstream] = []

    def start(*scripts: Script) -> ScriptedUpstream:
        server = ScriptedUpstream(deque(scripts))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def pool() -> Iterator[UpstreamPool]:
    pool = UpstreamPool()
    yield pool
    pool.close()


def post(pool: UpstreamPool, url: str, watch: ClientWatch | None = None) -> Response:
    if watch is None:
        return pool.request(url, b"POST", b"/mcp", [], b"{}")
    return pool.request(url, b"POST", b"/mcp", [], b"{}", watch)


def read_all(response: Response) -> list[bytes]:
    """Every piece `read()` hands over until `done` (the connection is released, not closed)."""
    pieces: list[bytes] = []
    while not response.done:
        pieces.append(response.read())
    assert response.read() == b""
    return pieces


def exchange(pool: UpstreamPool, url: str) -> bytes:
    response = post(pool, url)
    try:
        return b"".join(read_all(response))
    finally:
        response.close()


def read_until_broken(response: Response) -> tuple[bytes, AnswerBroken]:
    got = bytearray()

    def drain() -> None:
        while not response.done:
            got.extend(response.read())

    with pytest.raises(AnswerBroken) as caught:
        drain()
    return bytes(got), caught.value


def chunked_head(extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n" + extra + b"\r\n"


def assert_fresh_connection_next(pool: UpstreamPool, server: ScriptedUpstream, before: int) -> None:
    """Nothing was pooled: the next exchange works, on a new connection."""
    assert pool.idle_count() == 0
    assert exchange(pool, server.url) == b"ok"
    assert server.connections == before + 1


# -- the request on the wire -----------------------------------------------------------------------


@pytest.mark.parametrize("size", [2, 100 * 1024], ids=["small", "large-two-writes"])
def test_request_is_written_as_one_http11_request(serve: Serve, pool: UpstreamPool, size: int) -> None:
    """The request head carries host, the given headers and Content-Length; the body arrives whole."""
    server = serve()
    body = bytes(range(256)) * (size // 256) if size > 2 else b"{}"
    response = pool.request(server.url, b"POST", b"/mcp?x=1", [(b"x-a", b"1")], body)
    assert b"".join(read_all(response)) == b"ok"
    response.close()
    assert server.requests[0].head == (
        b"POST /mcp?x=1 HTTP/1.1\r\nhost: 127.0.0.1:%d\r\nx-a: 1\r\ncontent-length: %d\r\n\r\n"
        % (server.port, len(body))
    )
    assert server.requests[0].body == body


# -- 1. Content-Length -----------------------------------------------------------------------------


CL_HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n"


@pytest.mark.parametrize(
    "pieces",
    [
        pytest.param((CL_HEAD + b"hel", b"lo w", b"orld"), id="three-pieces"),
        pytest.param((CL_HEAD, b"hello world"), id="head-then-body"),
        pytest.param(
            (b"HTTP/1.1 200 OK\r\ncontent-le", b"ngth: 11\r\n\r", b"\nhello world"), id="split-head"
        ),
        pytest.param(tuple(bytes([b]) for b in CL_HEAD + b"hello world"), id="byte-by-byte"),
    ],
)
def test_content_length_body_in_pieces(serve: Serve, pool: UpstreamPool, pieces: tuple[bytes, ...]) -> None:
    """A Content-Length body split anywhere reads whole; its connection is pooled and reused."""
    server = serve(Script(pieces, gap=0.002 if len(pieces) > 10 else GAP_S))
    response = post(pool, server.url)
    assert response.status == 200
    assert response.length == 11
    assert b"".join(read_all(response)) == b"hello world"
    response.close()
    assert pool.idle_count() == 1
    assert exchange(pool, server.url) == b"ok"
    assert (server.connections, len(server.requests)) == (1, 2)


def test_content_length_body_is_relayed_as_it_arrives(serve: Serve, pool: UpstreamPool) -> None:
    """The head and each piece are handed over before the rest of the body was sent."""
    server = serve(Script((CL_HEAD + b"hel", HOLD, b"lo world")))
    response = post(pool, server.url)
    assert response.read() == b"hel"
    assert not response.done
    server.release.set()
    assert response.read() == b"lo world"
    assert response.done
    response.close()


@pytest.mark.parametrize(
    ("method", "answer"),
    [
        pytest.param(b"POST", b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", id="length-0"),
        pytest.param(b"HEAD", b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", id="head-request"),
        pytest.param(
            b"HEAD", b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n", id="head-request-chunked"
        ),
        pytest.param(b"POST", b"HTTP/1.1 204 No Content\r\n\r\n", id="204"),
        pytest.param(b"POST", b"HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n", id="304"),
    ],
)
def test_answer_without_body_is_done_at_once(
    serve: Serve, pool: UpstreamPool, method: bytes, answer: bytes
) -> None:
    """No body is due: the answer is done with its head and the connection pooled and reused."""
    server = serve(Script((answer,)))
    response = pool.request(server.url, method, b"/mcp", [], b"")
    assert response.done
    assert response.read() == b""
    response.close()
    assert pool.idle_count() == 1
    assert exchange(pool, server.url) == b"ok"
    assert (server.connections, len(server.requests)) == (1, 2)


# -- 2. chunked ------------------------------------------------------------------------------------


H = chunked_head()


@pytest.mark.parametrize(
    ("pieces", "body"),
    [
        pytest.param((H + b"1", b"0\r\n" + b"x" * 16 + b"\r\n0\r\n\r\n"), b"x" * 16, id="in-size-line"),
        pytest.param((H + b"5\r", b"\nhello\r\n0\r\n\r\n"), b"hello", id="in-size-line-crlf"),
        pytest.param((H + b"5\r\n", b"hello\r\n0\r\n\r\n"), b"hello", id="size-line|data"),
        pytest.param((H + b"5\r\nhe", b"llo\r\n0\r\n\r\n"), b"hello", id="in-data"),
        pytest.param((H + b"5\r\nhello", b"\r\n0\r\n\r\n"), b"hello", id="data|crlf"),
        pytest.param((H + b"5\r\nhello\r", b"\n0\r\n\r\n"), b"hello", id="in-data-crlf"),
        pytest.param((H + b"5\r\nhello\r\n", b"0\r\n\r\n"), b"hello", id="before-last-chunk"),
        pytest.param((H + b"5\r\nhello\r\n0\r\n", b"\r\n"), b"hello", id="in-last-chunk"),
        pytest.param((H + b"5\r\nhello\r\n0\r\n\r", b"\n"), b"hello", id="in-last-crlf"),
        pytest.param((H, b"5\r\nhello\r\n", b"6\r\n world\r\n", b"0\r\n\r\n"), b"hello world", id="chunks"),
        pytest.param((H + b"5\r\nhello\r\n0\r\nx-trailer: 1\r\n\r\n",), b"hello", id="trailer"),
        pytest.param(
            (H + b"5\r\nhello\r\n", b"0\r\nx-tra", b"iler: 1\r", b"\n\r\n"), b"hello", id="trailer-split"
        ),
        pytest.param(
            (H + b"5;ext=1\r\nhello\r\n", b"6;a=b;c\r\n world\r\n0;last=1\r\n\r\n"),
            b"hello world",
            id="extensions",
        ),
        pytest.param((H + b"A\r\n0123456789\r\n00\r\n\r\n",), b"0123456789", id="hex-and-zeros"),
        pytest.param(
            (b"HTTP/1.1 200 OK\r\ntransfer-enc", b"oding: chunked\r\n\r", b"\n5\r\nhello\r\n0\r\n\r\n"),
            b"hello",
            id="split-head",
        ),
        pytest.param(
            tuple(bytes([b]) for b in H + b"5\r\nhello\r\n1;e\r\n!\r\n0\r\nt: 1\r\n\r\n"),
            b"hello!",
            id="byte-by-byte",
        ),
    ],
)
def test_chunked_body_in_pieces(
    serve: Serve, pool: UpstreamPool, pieces: tuple[bytes, ...], body: bytes
) -> None:
    """A chunked body split anywhere reads whole; its connection is pooled and reused."""
    server = serve(Script(pieces, gap=0.002 if len(pieces) > 10 else GAP_S))
    response = post(pool, server.url)
    assert response.status == 200
    assert response.length is None
    assert b"".join(read_all(response)) == body
    response.close()
    assert pool.idle_count() == 1
    assert exchange(pool, server.url) == b"ok"
    assert (server.connections, len(server.requests)) == (1, 2)


def test_chunked_body_is_relayed_as_it_arrives(serve: Serve, pool: UpstreamPool) -> None:
    """A piece of a chunk is handed over before the rest of the chunk was sent."""
    server = serve(Script((H + b"5\r\nhel", HOLD, b"lo\r\n0\r\n\r\n")))
    response = post(pool, server.url)
    assert response.read() == b"hel"
    assert not response.done
    server.release.set()
    assert response.read() == b"lo"
    assert response.done
    response.close()
    assert pool.idle_count() == 1


# -- 3. a broken body ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "detail"),
    [
        pytest.param(Script((H + b"zz\r\n", HOLD)), "Invalid character in chunk size", id="zz"),
        pytest.param(Script((H + b"\r\n", HOLD)), "Invalid character in chunk size", id="empty-size"),
        pytest.param(Script((H + b"-5\r\n", HOLD)), "Invalid character in chunk size", id="negative"),
        pytest.param(Script((H + b"0x5\r\n", HOLD)), "Invalid character in chunk size", id="0x"),
        pytest.param(Script((H + b"1" * 17 + b"\r\n", HOLD)), "Chunk size overflow", id="17-digits"),
        pytest.param(
            Script((H + b"5\r\nhelloXY\r\n0\r\n\r\n",)), "Expected LF after chunk data", id="no-crlf"
        ),
        pytest.param(
            Script((H + b"5\r\nhello", b"\n0\r\n\r\n")), "Missing expected CR after chunk data", id="bare-lf"
        ),
        pytest.param(
            Script((H + b"1" * (upstream.MAX_LINE_BYTES + 1), HOLD)),
            "Chunk size overflow",
            id="long-size-line",
        ),
        pytest.param(
            Script((H + b"5;x=" + b"a" * upstream.MAX_LINE_BYTES, HOLD)), "too long", id="long-extension"
        ),
        pytest.param(
            Script((H + b"5\r\nhello\r\n0\r\nx: " + b"a" * upstream.MAX_LINE_BYTES, HOLD)),
            "too long",
            id="long-trailer",
        ),
        pytest.param(Script((H + b"5\r\nhel",), close=True), "closed mid-body", id="closed-in-data"),
        pytest.param(Script((H + b"5",), close=True), "closed mid-body", id="closed-in-size"),
        pytest.param(Script((H + b"5\r\nhello",), close=True), "closed mid-body", id="closed-before-crlf"),
        pytest.param(
            Script((H + b"5\r\nhello\r\n",), close=True), "closed mid-body", id="closed-before-last"
        ),
        pytest.param(
            Script((H + b"5\r\nhello\r\n0\r\nx: 1",), close=True), "closed mid-body", id="in-trailer"
        ),
        pytest.param(Script((CL_HEAD + b"hello",), close=True), "closed mid-body", id="length-short"),
    ],
)
def test_broken_body_is_answer_broken(serve: Serve, pool: UpstreamPool, script: Script, detail: str) -> None:
    """A malformed or cut-off body raises AnswerBroken(RemoteProtocolError); nothing is pooled."""
    server = serve(script)
    response = post(pool, server.url)
    assert response.status == 200
    got, error = read_until_broken(response)
    assert error.reason == "RemoteProtocolError"
    assert detail in str(error)
    assert b"hello".startswith(got)
    response.close()
    assert_fresh_connection_next(pool, server, 1)


# -- 4. until the connection closes ----------------------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\n\r\n", id="no-framing"),
        pytest.param(b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n", id="gzip"),
        pytest.param(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n", id="chunked-gzip"),
    ],
)
def test_until_close_body_is_relayed_until_eof(serve: Serve, pool: UpstreamPool, head: bytes) -> None:
    """Without Content-Length or chunked coding the body runs until EOF; the connection is not pooled."""
    server = serve(Script((head + b"5\r\nhel", b"lo", b"\r\n0\r\n\r\n", b"tail"), close=True))
    response = post(pool, server.url)
    assert response.length is None
    assert b"".join(read_all(response)) == b"5\r\nhello\r\n0\r\n\r\ntail"
    response.close()
    assert_fresh_connection_next(pool, server, 1)


def test_until_close_body_is_relayed_as_it_arrives(serve: Serve, pool: UpstreamPool) -> None:
    """An until-close body's pieces are handed over before the connection ends."""
    server = serve(Script((b"HTTP/1.1 200 OK\r\n\r\nfirst", HOLD, b"second"), close=True))
    response = post(pool, server.url)
    assert response.read() == b"first"
    assert not response.done
    server.release.set()
    assert b"".join(read_all(response)) == b"second"
    response.close()


# -- 5. no usable answer head ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "detail"),
    [
        pytest.param(Script((), close=True), "ended unanswered", id="closed-at-once"),
        pytest.param(
            Script((b"HTTP/1.1 200 OK\r\ncontent-le",), close=True), "ended unanswered", id="mid-head"
        ),
        pytest.param(
            Script((b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * upstream.MAX_HEAD_BYTES, HOLD)),
            "too large",
            id="head-too-large",
        ),
        pytest.param(Script((b"FOO 200 OK\r\ncontent-length: 0\r\n\r\n",)), "not HTTP", id="not-http"),
        pytest.param(Script((b"HTTP/2 200 OK\r\ncontent-length: 0\r\n\r\n",)), "not HTTP", id="http2"),
        pytest.param(Script((b"HTTP/1.1 20 OK\r\ncontent-length: 0\r\n\r\n",)), "not HTTP", id="2-digits"),
        pytest.param(Script((b"HTTP/1.1 2000 OK\r\ncontent-length: 0\r\n\r\n",)), "not HTTP", id="4-digits"),
        pytest.param(Script((b"HTTP/1.1 2x0 OK\r\ncontent-length: 0\r\n\r\n",)), "not HTTP", id="not-digits"),
        pytest.param(
            Script((b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok",)),
            "not HTTP",
            id="two-lengths",
        ),
        pytest.param(
            Script((b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\nok",)),
            "not HTTP",
            id="same-length-twice",
        ),
        pytest.param(
            Script((b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ncontent-length: 3\r\n\r\nabc",)),
            "not HTTP",
            id="coding-and-length",
        ),
        pytest.param(
            Script((b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",)), "not HTTP", id="bad-length"
        ),
        pytest.param(
            Script((b"HTTP/1.1 200 OK\r\nx: a\nb\r\ncontent-length: 0\r\n\r\n",)), "not HTTP", id="bare-lf"
        ),
        pytest.param(
            Script((b"HTTP/1.1 200 OK\r\nno-colon\r\ncontent-length: 0\r\n\r\n",)), "not HTTP", id="no-colon"
        ),
        pytest.param(
            Script((b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\n\r\n",)), "upgrade", id="101"
        ),
    ],
)
def test_head_problems_are_delivery_unknown(
    serve: Serve, pool: UpstreamPool, script: Script, detail: str
) -> None:
    """No valid answer head after the request was written: DeliveryUnknown, nothing pooled."""
    server = serve(script)
    with pytest.raises(DeliveryUnknown) as caught:
        post(pool, server.url)
    assert caught.value.reason == "RemoteProtocolError"
    assert detail in str(caught.value)
    assert len(server.requests) == 1
    assert_fresh_connection_next(pool, server, 1)


def test_interim_100_continue_is_read_through(serve: Serve, pool: UpstreamPool) -> None:
    """An interim 100 head (split from the final one) is skipped; the 200 and its body count."""
    server = serve(
        Script((b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi"))
    )
    response = post(pool, server.url)
    assert response.status == 200
    assert b"".join(read_all(response)) == b"hi"
    response.close()
    assert pool.idle_count() == 1


# -- 6. Connection: close --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 5\r\n\r\n", id="close"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, CLOSE\r\ncontent-length: 5\r\n\r\n", id="tokens"
        ),
        pytest.param(b"HTTP/1.0 200 OK\r\ncontent-length: 5\r\n\r\n", id="http10"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n5\r\n", id="chunked"
        ),
    ],
)
def test_connection_close_answer_is_not_pooled(serve: Serve, pool: UpstreamPool, head: bytes) -> None:
    """An answer that ends its connection is read whole, but the (still open) connection is dropped."""
    tail = b"hello\r\n0\r\n\r\n" if head.endswith(b"5\r\n") else b"hello"
    server = serve(Script((head, tail)))
    assert exchange(pool, server.url) == b"hello"
    assert_fresh_connection_next(pool, server, 1)


def test_extra_bytes_after_the_body_are_not_pooled(serve: Serve, pool: UpstreamPool) -> None:
    """Bytes past the end of the body (nothing asked for them) make the connection unusable."""
    server = serve(Script((CL_HEAD + b"hello worldHTTP/1.1 200 OK\r\n",)))
    assert exchange(pool, server.url) == b"hello world"
    assert_fresh_connection_next(pool, server, 1)


def test_pooled_connection_closed_by_upstream_is_replaced(serve: Serve, pool: UpstreamPool) -> None:
    """A pooled connection whose FIN is waiting is dropped before writing: a new one carries the request."""
    server = serve(Script((CL_HEAD + b"hello world",), close=True))
    assert exchange(pool, server.url) == b"hello world"
    assert pool.idle_count() == 1
    assert server.ended.wait(TIMEOUT_S)
    wait_until(lambda: saw_fin_from(server.port), "the FIN to cross loopback")
    assert exchange(pool, server.url) == b"ok"
    assert (server.connections, len(server.requests)) == (2, 2)


# -- 7. NotDelivered -------------------------------------------------------------------------------


def test_connect_refused_is_not_delivered(pool: UpstreamPool) -> None:
    """Nothing listens on the port: NotDelivered(ConnectError)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound:
        bound.bind(("127.0.0.1", 0))  # holds the port; not listening, so a connect is refused
        with pytest.raises(NotDelivered) as caught:
            post(pool, f"http://127.0.0.1:{bound.getsockname()[1]}")
    assert caught.value.reason == "ConnectError"


@pytest.mark.parametrize(
    "endpoint", ["http://127.0.0.1", "https://127.0.0.1:1", "127.0.0.1:8080", "http://:80", ""]
)
def test_invalid_endpoint_is_not_delivered(pool: UpstreamPool, endpoint: str) -> None:
    """An endpoint that is not http://host:port: NotDelivered(InvalidEndpoint)."""
    with pytest.raises(NotDelivered) as caught:
        post(pool, endpoint)
    assert caught.value.reason == "InvalidEndpoint"


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:x", "http://127.0.0.1:99999"])
def test_unparsable_port_is_not_delivered(pool: UpstreamPool, endpoint: str) -> None:
    """A port that is not a port is an invalid endpoint too."""
    with pytest.raises(NotDelivered) as caught:
        post(pool, endpoint)
    assert caught.value.reason == "InvalidEndpoint"


def test_closed_pool_is_not_delivered(serve: Serve, pool: UpstreamPool) -> None:
    """After close() the pool sends nothing: NotDelivered(PoolClosed); its idle connections are closed."""
    server = serve()
    assert exchange(pool, server.url) == b"ok"
    pool.close()
    assert pool.idle_count() == 0
    assert server.link_closed.wait(TIMEOUT_S)
    with pytest.raises(NotDelivered) as caught:
        post(pool, server.url)
    assert caught.value.reason == "PoolClosed"
    assert len(server.requests) == 1


# -- 8. no free connection slot --------------------------------------------------------------------


def test_pool_timeout_is_not_delivered(
    serve: Serve, pool: UpstreamPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All slots are held by an unfinished answer: NotDelivered(PoolTimeout) after POOL_TIMEOUT_S."""
    monkeypatch.setattr(upstream, "MAX_CONNECTIONS", 1)
    monkeypatch.setattr(upstream, "POOL_TIMEOUT_S", 0.2)
    server = serve(Script((H + b"5\r\nhel", HOLD)))
    held = post(pool, server.url)
    assert held.read() == b"hel"
    started = time.monotonic()
    with pytest.raises(NotDelivered) as caught:
        post(pool, server.url)
    waited = time.monotonic() - started
    assert caught.value.reason == "PoolTimeout"
    assert 0.15 <= waited < 2.0
    assert len(server.requests) == 1
    held.close()
    assert exchange(pool, server.url) == b"ok"
    assert server.connections == 2


def test_pool_waiter_gets_the_freed_slot(
    serve: Serve, pool: UpstreamPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request waiting for a slot goes out as soon as the exchange holding it ends (pooled reuse)."""
    monkeypatch.setattr(upstream, "MAX_CONNECTIONS", 1)
    server = serve(Script((CL_HEAD + b"hel", HOLD, b"lo world")))
    held = post(pool, server.url)
    result: list[bytes] = []
    waiter = threading.Thread(target=lambda: result.append(exchange(pool, server.url)), daemon=True)
    waiter.start()
    time.sleep(0.1)  # the subject: a window in which the waiter must not go out while the slot is held
    assert not result
    server.release.set()
    assert b"".join([held.read(), *read_all(held)]) == b"hello world"
    held.close()
    waiter.join(TIMEOUT_S)
    assert result == [b"ok"]
    assert (server.connections, len(server.requests)) == (1, 2)


# -- 9. ClientWatch --------------------------------------------------------------------------------


@pytest.fixture
def client_pair(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[socket.socket, socket.socket]]:
    """(the link's end of a client connection, the client's end); the watch checks every 50 ms."""
    monkeypatch.setattr(upstream, "WATCH_EVERY_S", 0.05)
    ours, theirs = socket.socketpair()
    ours.settimeout(TIMEOUT_S)
    theirs.settimeout(TIMEOUT_S)
    yield ours, theirs
    ours.close()
    theirs.close()


def test_client_gone_while_waiting_for_the_head(
    serve: Serve, pool: UpstreamPool, client_pair: tuple[socket.socket, socket.socket]
) -> None:
    """The client closes while the generation has not answered: ClientGone, the connection closed."""
    ours, theirs = client_pair
    server = serve(Script((HOLD, b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")))
    closer = threading.Timer(0.1, theirs.close)
    closer.start()
    started = time.monotonic()
    with pytest.raises(ClientGone):
        post(pool, server.url, ClientWatch(ours))
    assert time.monotonic() - started < 1.0
    closer.join(TIMEOUT_S)
    assert pool.idle_count() == 0
    server.release.set()
    assert server.link_closed.wait(1.0)  # the link closed the exchange's connection
    assert exchange(pool, server.url) == b"ok"


def test_client_gone_while_waiting_for_the_body(
    serve: Serve, pool: UpstreamPool, client_pair: tuple[socket.socket, socket.socket]
) -> None:
    """The client closes while a body piece is awaited: read() raises ClientGone."""
    ours, theirs = client_pair
    server = serve(Script((H + b"5\r\nhel", HOLD, b"lo\r\n0\r\n\r\n")))
    response = post(pool, server.url, ClientWatch(ours))
    assert response.read() == b"hel"
    theirs.close()
    with pytest.raises(ClientGone):
        response.read()
    response.close()
    assert pool.idle_count() == 0
    server.release.set()
    assert server.link_closed.wait(1.0)


def test_pipelining_client_is_no_longer_watched(
    serve: Serve, pool: UpstreamPool, client_pair: tuple[socket.socket, socket.socket]
) -> None:
    """A client that sent more bytes is not watched: its close does not abandon the exchange."""
    ours, theirs = client_pair
    server = serve(Script((0.3, b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi")))
    theirs.sendall(b"POST /mcp HTTP/1.1\r\n")
    theirs.close()
    response = post(pool, server.url, ClientWatch(ours))
    assert response.status == 200
    assert b"".join(read_all(response)) == b"hi"
    response.close()


def test_unwatched_request_waits_for_a_slow_answer(
    serve: Serve, pool: UpstreamPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a watch, a receive timeout (WATCH_EVERY_S) is only a pause: the answer still comes."""
    monkeypatch.setattr(upstream, "WATCH_EVERY_S", 0.05)
    server = serve(
        Script((upstream.WATCH_EVERY_S * 1.5, CL_HEAD, upstream.WATCH_EVERY_S * 1.5, b"hello world"))
    )
    assert exchange(pool, server.url) == b"hello world"


# -- 10. idle expiry -------------------------------------------------------------------------------


@pytest.mark.parametrize(("idle_s", "connections"), [(0.05, 1), (0.2, 2)])
def test_idle_connection_expires_after_keepalive(
    serve: Serve, monkeypatch: pytest.MonkeyPatch, idle_s: float, connections: int
) -> None:
    """A pooled connection idle for KEEPALIVE_S or longer is closed, not reused; a younger one is reused."""
    monkeypatch.setattr(upstream, "KEEPALIVE_S", 0.1)
    now = [100.0]
    pool = UpstreamPool(clock=lambda: now[0])
    try:
        server = serve()
        assert exchange(pool, server.url) == b"ok"
        assert pool.idle_count() == 1
        now[0] += idle_s
        assert exchange(pool, server.url) == b"ok"
        assert (server.connections, len(server.requests)) == (connections, 2)
        if connections == 2:
            assert server.link_closed.wait(1.0)  # the expired connection was closed
        else:
            assert not server.link_closed.is_set()
    finally:
        pool.close()


def test_idle_connection_expires_in_real_time(
    serve: Serve, pool: UpstreamPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the real clock, a connection idle past a small KEEPALIVE_S is replaced."""
    monkeypatch.setattr(upstream, "KEEPALIVE_S", 0.1)
    server = serve()
    assert exchange(pool, server.url) == b"ok"
    time.sleep(0.15)  # the subject: real time passing KEEPALIVE_S
    assert exchange(pool, server.url) == b"ok"
    assert (server.connections, len(server.requests)) == (2, 2)


# -- limits enforced however the bytes happen to break ---------------------------------------


@pytest.mark.parametrize(
    "pieces",
    [
        pytest.param(
            (
                b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * (upstream.MAX_HEAD_BYTES - 30),
                b"a" * 100 + b"\r\ncontent-length: 2\r\n\r\nok",
            ),
            id="head",
        ),
        pytest.param(
            (H + b"2\r\nok\r\n", b"0\r\nx: " + b"a" * (upstream.MAX_LINE_BYTES + 100) + b"\r\n\r\n"),
            id="trailer-line",
        ),
    ],
)
def test_over_limit_is_refused_however_it_arrives(
    serve: Serve, pool: UpstreamPool, pieces: tuple[bytes, ...]
) -> None:
    """A head over MAX_HEAD_BYTES, or a trailer line over MAX_LINE_BYTES, is refused even when complete."""
    server = serve(Script(pieces))
    with pytest.raises(UpstreamError):
        exchange(pool, server.url)


# -- what httptools' parser (llhttp) takes apart ---------------------------------------------------


SPLIT_ANSWERS = {
    "chunked-extensions-trailers": (
        H + b'5;name=value;flag\r\nhello\r\n1;e="q s"\r\n!\r\n0;last\r\nx-trailer: 1\r\nx-other: two\r\n\r\n',
        b"hello!",
    ),
    "content-length": (CL_HEAD + b"hello world", b"hello world"),
    "interim-100": (b"HTTP/1.1 100 Continue\r\n\r\n" + CL_HEAD + b"hello world", b"hello world"),
}


@pytest.mark.slow
@pytest.mark.parametrize("answer", SPLIT_ANSWERS.values(), ids=SPLIT_ANSWERS.keys())
def test_answer_split_at_every_byte_reads_whole(
    serve: Serve, pool: UpstreamPool, answer: tuple[bytes, bytes]
) -> None:
    """The same answer cut into two reads at each byte boundary reads whole every time, on one
    pooled connection: the head, chunk-size lines, extensions and trailers can break anywhere."""
    data, body = answer
    cuts = range(1, len(data))
    server = serve(*(Script((data[:cut], data[cut:]), gap=0.003) for cut in cuts))
    for cut in cuts:
        response = post(pool, server.url)
        assert response.status == 200, cut
        assert b"".join(read_all(response)) == body, cut
        assert response.header(b"x-trailer") is None  # trailers are dropped, never headers
        response.close()
    assert (server.connections, len(server.requests)) == (1, len(cuts))


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nx: a\x01b\r\ncontent-length: 2\r\n\r\n", id="control-in-value"),
        pytest.param(b"HTTP/1.1 200 OK\r\nx: 1\r\n folded\r\ncontent-length: 2\r\n\r\n", id="obs-fold"),
        pytest.param(b"HTTP/1.1 200 OK\r\nx(y): 1\r\ncontent-length: 2\r\n\r\n", id="bad-name"),
        pytest.param(b"HTTP/1.1 200 OK\r\ncontent-length: 2 2\r\n\r\n", id="length-two-numbers"),
    ],
)
def test_malformed_head_is_refused_as_not_http(serve: Serve, pool: UpstreamPool, head: bytes) -> None:
    """Heads the parser refuses are DeliveryUnknown(RemoteProtocolError), as every bad head is;
    the hand parser took a control character in a value and a separator in a name."""
    server = serve(Script((head + b"ok",)))
    with pytest.raises(DeliveryUnknown) as caught:
        post(pool, server.url)
    assert caught.value.reason == "RemoteProtocolError"
    assert "not HTTP" in str(caught.value)
    assert_fresh_connection_next(pool, server, 1)


def test_malformed_trailer_is_answer_broken(serve: Serve, pool: UpstreamPool) -> None:
    """A trailer that is no header field breaks the answer (the hand parser dropped trailers unread)."""
    server = serve(Script((H + b"5\r\nhello\r\n0\r\nno colon here\r\n\r\n",)))
    response = post(pool, server.url)
    got, error = read_until_broken(response)
    assert (got, error.reason) == (b"hello", "RemoteProtocolError")
    assert "malformed body" in str(error)
    response.close()
    assert_fresh_connection_next(pool, server, 1)


def test_many_short_trailers_over_the_cap_are_refused(serve: Serve, pool: UpstreamPool) -> None:
    """Trailers are capped as a whole (MAX_LINE_BYTES), not per line: 12 KB of 6-byte trailer lines
    is refused, complete or not (the hand parser capped each line and read these to the end)."""
    trailers = b"x: 1\r\n" * (upstream.MAX_LINE_BYTES // 6 + 1000)
    server = serve(Script((H + b"2\r\nok\r\n", b"0\r\n" + trailers + b"\r\n")))
    response = post(pool, server.url)
    got, error = read_until_broken(response)
    assert (got, error.reason) == (b"ok", "RemoteProtocolError")
    assert "too long" in str(error)
    response.close()
    assert_fresh_connection_next(pool, server, 1)


def test_answer_within_the_caps_is_read(serve: Serve, pool: UpstreamPool) -> None:
    """A head just under MAX_HEAD_BYTES and a trailer of MAX_LINE_BYTES - FEED_BYTES are read whole."""
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-big: "
    head += b"a" * (upstream.MAX_HEAD_BYTES - len(head) - 4) + b"\r\n\r\n"
    trailer = b"x: " + b"b" * (upstream.MAX_LINE_BYTES - upstream.FEED_BYTES - 10) + b"\r\n"
    server = serve(Script((head, b"2\r\nok\r\n", b"0\r\n" + trailer + b"\r\n")))
    assert exchange(pool, server.url) == b"ok"
    assert pool.idle_count() == 1


# -- the asyncio path (the link's Edge side: request_async, read_async) ----------------------------


async def exchange_on_loop(pool: UpstreamPool, url: str) -> tuple[int, bytes]:
    """One POST made on the running loop, its body read whole (the connection released)."""
    response = await pool.request_async(url, b"POST", b"/mcp", [], b"{}")
    try:
        pieces = []
        while not response.done:
            pieces.append(await response.read_async())
        return response.status, b"".join(pieces)
    finally:
        response.close()


LOOP_ANSWERS = {
    **SPLIT_ANSWERS,
    "content-length-byte-by-byte": (tuple(bytes([b]) for b in CL_HEAD + b"hello world"), b"hello world"),
    "chunked-in-pieces": ((H + b"5\r\nhel", b"lo\r\n1\r\n!", b"\r\n0\r\n\r\n"), b"hello!"),
}


@pytest.mark.parametrize("answer", LOOP_ANSWERS.values(), ids=LOOP_ANSWERS.keys())
def test_the_loop_reads_what_the_threads_read(
    serve: Serve, pool: UpstreamPool, answer: tuple[bytes | tuple[bytes, ...], bytes]
) -> None:
    """An answer in pieces reads whole on the loop, and its connection is pooled for the next
    exchange, made on the loop or in a thread alike."""
    data, body = answer
    pieces = data if isinstance(data, tuple) else (data[:7], data[7:])
    server = serve(Script(pieces, gap=0.002))
    assert asyncio.run(exchange_on_loop(pool, server.url)) == (200, body)
    assert pool.idle_count() == 1
    assert exchange(pool, server.url) == b"ok"
    assert asyncio.run(exchange_on_loop(pool, server.url)) == (200, b"ok")
    assert (server.connections, len(server.requests)) == (1, 3)


class CountingWatch(ClientWatch):
    """A watch of no client that counts how often a blocking wait asked it."""

    def __init__(self) -> None:
        super().__init__(None)
        self.asked = 0

    def gone(self) -> bool:
        self.asked += 1
        return False


def test_a_connection_the_loop_used_blocks_again_in_a_thread(
    serve: Serve, pool: UpstreamPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop leaves its connection non-blocking; a thread taking it from the pool waits in a
    blocking recv again (asked its watch once per WATCH_EVERY_S, not in a busy loop)."""
    monkeypatch.setattr(upstream, "WATCH_EVERY_S", 0.05)
    server = serve(DEFAULT, Script((CL_HEAD, HOLD, b"hello world")))
    assert asyncio.run(exchange_on_loop(pool, server.url)) == (200, b"ok")
    watch = CountingWatch()
    response = post(pool, server.url, watch)
    assert response.status == 200
    releaser = threading.Timer(0.3, server.release.set)
    releaser.start()
    assert b"".join(read_all(response)) == b"hello world"
    response.close()
    releaser.join(TIMEOUT_S)
    assert server.connections == 1
    assert watch.asked < 100  # a non-blocking socket would have asked it thousands of times


@pytest.mark.parametrize(
    ("script", "detail"),
    [
        pytest.param(Script((b"",), close=True), "ended unanswered", id="closed-unanswered"),
        pytest.param(Script((b"HTTP/1.1 200 OK\r\nx(y): 1\r\n\r\n",)), "not HTTP", id="bad-head"),
    ],
)
def test_head_problems_on_the_loop_are_delivery_unknown(
    serve: Serve, pool: UpstreamPool, script: Script, detail: str
) -> None:
    server = serve(script)
    with pytest.raises(DeliveryUnknown) as caught:
        asyncio.run(exchange_on_loop(pool, server.url))
    assert caught.value.reason == "RemoteProtocolError"
    assert detail in str(caught.value)
    assert_fresh_connection_next(pool, server, 1)


def test_a_body_cut_off_on_the_loop_is_answer_broken(serve: Serve, pool: UpstreamPool) -> None:
    server = serve(Script((CL_HEAD + b"hello",), close=True))
    with pytest.raises(AnswerBroken) as caught:
        asyncio.run(exchange_on_loop(pool, server.url))
    assert "closed mid-body" in str(caught.value)
    assert_fresh_connection_next(pool, server, 1)


def test_connect_refused_on_the_loop_is_not_delivered(pool: UpstreamPool) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound:
        bound.bind(("127.0.0.1", 0))  # holds the port; not listening, so a connect is refused
        with pytest.raises(NotDelivered) as caught:
            asyncio.run(exchange_on_loop(pool, f"http://127.0.0.1:{bound.getsockname()[1]}"))
    assert caught.value.reason == "ConnectError"
    assert "refused" in str(caught.value)


def test_giving_up_on_the_loop_closes_the_connection(serve: Serve, pool: UpstreamPool) -> None:
    """Cancelling the task that awaits the answer abandons the exchange: its connection closes
    (the generation sees the client go), nothing is pooled and the slot is free again."""
    server = serve(Script((HOLD, b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")))

    async def give_up() -> None:
        waiting = asyncio.create_task(exchange_on_loop(pool, server.url))
        await wait_until_async(lambda: server.requests, "the request to reach the generation")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(give_up())
    assert server.link_closed.wait(TIMEOUT_S)
    assert pool.idle_count() == 0
    assert exchange(pool, server.url) == b"ok"


def test_a_loop_waiting_for_a_slot_gets_the_one_a_thread_frees(
    serve: Serve, pool: UpstreamPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All slots held by a thread's unfinished answer: an exchange on the loop waits (without a
    thread) and goes out when that thread's exchange ends, on the same pooled connection."""
    monkeypatch.setattr(upstream, "MAX_CONNECTIONS", 1)
    server = serve(Script((CL_HEAD + b"hel", HOLD, b"lo world")))
    held = post(pool, server.url)

    def finish_held() -> None:
        server.release.set()
        assert b"".join([held.read(), *read_all(held)]) == b"hello world"
        held.close()

    async def wait_for_the_slot() -> tuple[int, bytes]:
        waiting = asyncio.create_task(exchange_on_loop(pool, server.url))
        await wait_until_async(lambda: pool._slot_waiters, "the exchange to wait for a slot")
        assert not waiting.done() and len(server.requests) == 1
        finisher = threading.Thread(target=finish_held)
        finisher.start()
        answer = await waiting
        finisher.join(TIMEOUT_S)
        return answer

    assert asyncio.run(wait_for_the_slot()) == (200, b"ok")
    assert (server.connections, len(server.requests)) == (1, 2)


def test_a_loop_waiting_too_long_for_a_slot_is_not_delivered(
    serve: Serve, pool: UpstreamPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upstream, "MAX_CONNECTIONS", 1)
    monkeypatch.setattr(upstream, "POOL_TIMEOUT_S", 0.2)
    server = serve(Script((H + b"5\r\nhel", HOLD)))
    held = post(pool, server.url)
    with pytest.raises(NotDelivered) as caught:
        asyncio.run(exchange_on_loop(pool, server.url))
    assert caught.value.reason == "PoolTimeout"
    assert len(server.requests) == 1 and not pool._slot_waiters
    held.close()
    assert asyncio.run(exchange_on_loop(pool, server.url)) == (200, b"ok")
