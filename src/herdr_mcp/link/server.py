"""The link's HTTP/1.1 server: one thread per client connection, blocking sockets throughout.

Why not uvicorn, as the runtime uses: the link does almost nothing per request (check a bearer,
pick a generation, relay bytes), so the server around it was most of its cost. An event loop
adds a selector round and several layers of callbacks to every hop; a thread blocked in `recv`
is woken by the kernel straight into the code that forwards the bytes. On the development
machine (benchmarks/link_bench.py, docs/updater.md) the link on uvicorn added 22-29 % to a
~1.5 ms tool call, on this server 12-18 %. The link serves one workstation's MCP clients, so
a thread per connection (capped at `MAX_CONNECTIONS`) is cheap.

Request heads and bodies are parsed by httptools (llhttp, the parser uvicorn uses too). A
request is handed to the handler only when its body is complete; what the handler writes goes
straight to the socket. Keep-alive and pipelining follow HTTP/1.1; `Expect: 100-continue` is
answered at once (the link wants the whole body anyway).

Refusals of the server itself (before the handler sees a request), always followed by closing
the connection: 400 `bad_request` (not HTTP/1.x), 431 `head_too_large`, 408 `head_timeout` (a
head not complete `HEAD_TIMEOUT_S` after the connection opened, for the first, or after its first
byte was read, for a later one; a new connection that sent nothing is closed without an answer),
503 `link_busy` (more than `MAX_CONNECTIONS` connections). A connection idle for `IDLE_TIMEOUT_S`
(between requests, or mid-body) is closed. Found 2026-12-02 (issue 23): a client sending a head
one byte every half second kept its connection (and thread) as long as it liked, since each byte
restarted the idle timeout.

Shutdown (`close(grace_s)`): stop accepting, close idle connections at once, let exchanges in
progress finish (up to `grace_s`), then close what is left.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import httptools

from herdr_mcp.loopback import kernel_timeouts

log = logging.getLogger("herdr_mcp.link")

#: Client connections served at once; past this a new one is answered 503 and closed.
MAX_CONNECTIONS = 512
#: A kept-alive client connection that sends no request for this long is closed.
IDLE_TIMEOUT_S = 75.0
#: The first request head within this long of the connection opening, a later one of its first byte.
HEAD_TIMEOUT_S = 10.0
#: A request head (request line and headers) larger than this is refused (431).
MAX_HEAD_BYTES = 64 * 1024
#: Request bodies are collected up to this size; past it the request is marked `oversized`.
MAX_BODY_BYTES = 4 * 1024 * 1024
RECV_BYTES = 64 * 1024

#: Reason phrases for the statuses the link and the generations answer with.
_REASONS = {
    100: b"Continue", 200: b"OK", 202: b"Accepted", 204: b"No Content", 400: b"Bad Request",
    401: b"Unauthorized", 404: b"Not Found", 405: b"Method Not Allowed", 408: b"Request Timeout",
    413: b"Content Too Large",
    431: b"Request Header Fields Too Large", 502: b"Bad Gateway", 503: b"Service Unavailable",
}  # fmt: skip


@dataclass
class Request:
    """One complete request: header names lower-cased, in the order received."""

    method: bytes
    path: bytes
    query: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    #: The body was larger than `MAX_BODY_BYTES`; `body` holds only its beginning.
    oversized: bool = False
    keep_alive: bool = True
    http11: bool = True

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


class ClientClosed(Exception):
    """Writing to the client failed: it went away (or stopped reading for `IDLE_TIMEOUT_S`)."""


@dataclass
class ClientConnection:
    """The client side of an exchange, as the handler sees it."""

    sock: socket.socket
    #: HTTP/1.0 clients get their answers without chunked coding, delimited by closing.
    http11: bool = True
    #: Set by the handler when the connection must not carry another request.
    must_close: bool = False
    #: The request was HEAD: answers carry their head only (RFC 9110 9.3.2).
    head_only: bool = False

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise ClientClosed(str(exc)) from None

    def head(
        self, status: int, headers: Iterable[tuple[bytes, bytes]], length: int | None
    ) -> tuple[bytearray, bool]:
        """An answer's head and whether its body must be sent chunked.

        The body is framed by `length` when known, else chunked for HTTP/1.1, else (HTTP/1.0) by
        closing the connection; `connection: close` is said whenever the connection ends after it.
        """
        out = bytearray(b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"")))
        for name, value in headers:
            out += b"%s: %s\r\n" % (name, value)
        chunked = False
        if length is not None:
            out += b"content-length: %d\r\n" % length
        elif self.http11:
            out += b"transfer-encoding: chunked\r\n"
            chunked = True
        else:
            self.must_close = True
        if self.must_close:
            out += b"connection: close\r\n"
        out += b"\r\n"
        return out, chunked

    def answer(self, status: int, body: bytes, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        """A complete JSON answer with a Content-Length, in one write."""
        head, _ = self.head(status, ((b"content-type", b"application/json"), *extra), len(body))
        self.send(bytes(head) if self.head_only else bytes(head + body))


Handler = Callable[[Request, ClientConnection], None]


def error_body(code: str, description: str) -> bytes:
    return json.dumps({"error": code, "error_description": description}).encode()


class _Parsing:
    """httptools callbacks for one client connection; complete requests queue up in `ready`."""

    def __init__(self) -> None:
        self.ready: deque[Request] = deque()
        #: Head bytes counted from completed request targets and header fields.
        self.head_bytes = 0
        #: Head bytes counted from whole received pieces that an unfinished head took (llhttp
        #: reports a header field only once it is complete, so a never-ending one needs this).
        self.raw_head_bytes = 0
        self.completed = 0
        self.in_head = False
        self.expect_continue = False
        self._url = bytearray()
        self._headers: list[tuple[bytes, bytes]] = []
        self._body = bytearray()
        self._oversized = False
        self.parser = httptools.HttpRequestParser(self)

    def on_message_begin(self) -> None:
        self.head_bytes = self.raw_head_bytes = 0
        self.in_head = True
        self._url.clear()
        self._headers = []
        self._body = bytearray()
        self._oversized = False

    def on_url(self, url: bytes) -> None:
        self.head_bytes += len(url)
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_bytes += len(name) + len(value) + 4
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.in_head = False
        for name, value in self._headers:
            if name == b"expect" and value.lower() == b"100-continue":
                self.expect_continue = True

    def on_body(self, body: bytes) -> None:
        if len(self._body) + len(body) > MAX_BODY_BYTES:
            self._oversized = True
        elif not self._oversized:
            self._body += body

    def on_message_complete(self) -> None:
        self.completed += 1
        url = httptools.parse_url(bytes(self._url))
        self.ready.append(
            Request(
                method=self.parser.get_method(),
                path=url.path or b"/",
                query=url.query or b"",
                headers=self._headers,
                body=bytes(self._body),
                oversized=self._oversized,
                keep_alive=self.parser.should_keep_alive(),
                http11=self.parser.get_http_version() == "1.1",
            )
        )


@dataclass(eq=False)  # hashed by identity: kept in a set
class _Served:
    """A client connection and whether an exchange is in progress on it."""

    sock: socket.socket
    busy: bool = False
    closing: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class LinkServer:
    """Serves `handler` on a bound, listening loopback socket until `close()`."""

    def __init__(self, listener: socket.socket, handler: Handler) -> None:
        self._listener = listener
        self._handler = handler
        self._served: set[_Served] = set()
        self._lock = threading.Lock()
        self._closing = False
        self._accepting = threading.Thread(target=self._accept_loop, name="link-accept", daemon=True)

    @property
    def port(self) -> int:
        port: int = self._listener.getsockname()[1]
        return port

    def start(self) -> LinkServer:
        self._listener.listen(128)
        self._accepting.start()
        return self

    def connections(self) -> int:
        with self._lock:
            return len(self._served)

    def close(self, grace_s: float = 0.0, cut_short: Callable[[], bool] = lambda: False) -> None:
        """Stop accepting, close idle connections, wait up to `grace_s` for busy ones (less once
        `cut_short()` is true), close all."""
        with self._lock:
            self._closing = True
            served = list(self._served)
        if self._accepting.is_alive():
            # Wake the accepting thread with a connection of our own: it sees `_closing` and
            # ends. (Shutting a listening socket down wakes `accept` on Linux, not on macOS.)
            with contextlib.suppress(OSError):
                socket.create_connection(self._listener.getsockname()[:2], timeout=1).close()
            self._accepting.join(5)
        self._listener.close()
        for connection in served:
            with connection.lock:
                connection.closing = True
                if not connection.busy:
                    _shut(connection.sock)
        deadline = time.monotonic() + grace_s
        while self.connections() and time.monotonic() < deadline and not cut_short():
            time.sleep(0.02)
        with self._lock:
            served = list(self._served)
        for connection in served:
            _shut(connection.sock)

    # -- accepting ----------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return  # the listener was closed
            connection = _Served(sock)
            with self._lock:
                if self._closing:
                    sock.close()
                    return
                full = len(self._served) >= MAX_CONNECTIONS
                if not full:
                    self._served.add(connection)
            if full:
                _refuse_busy(sock)
                continue
            threading.Thread(target=self._serve, args=(connection,), name="link-conn", daemon=True).start()

    # -- one connection -----------------------------------------------------------------------

    def _serve(self, connection: _Served) -> None:
        sock = connection.sock
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            kernel_timeouts(sock, receive_s=HEAD_TIMEOUT_S, send_s=IDLE_TIMEOUT_S)
            self._exchanges(connection)
        except (OSError, ClientClosed):
            pass  # the client went away or stopped reading: nothing to answer
        except Exception:  # a bug in the handler must not take the link down
            log.exception("closing a client connection after an unexpected error")
        finally:
            with self._lock:
                self._served.discard(connection)
            _shut(sock)
            sock.close()

    def _exchanges(self, connection: _Served) -> None:
        sock = connection.sock
        parsing = _Parsing()
        client = ClientConnection(sock)
        # While a head is awaited (the first, or one begun), when it must be complete; the
        # socket's receive timeout is then what is left of it, else IDLE_TIMEOUT_S.
        head_deadline: float | None = time.monotonic() + HEAD_TIMEOUT_S
        while True:
            try:
                data = sock.recv(RECV_BYTES)
            except BlockingIOError:  # the receive timeout passed
                if head_deadline is not None and parsing.in_head:
                    _head_timeout(client)
                return
            if not data:
                return
            with connection.lock:
                if connection.closing:
                    return
                connection.busy = True
            # A piece wholly inside one head: it continued a head, or a new one began at its start
            # (nothing completed in it). Otherwise the head's first bytes are not counted: at most
            # one piece (RECV_BYTES) more than the limit is ever held.
            piece_in_head, completed = parsing.in_head, parsing.completed
            try:
                parsing.parser.feed_data(data)
            except httptools.HttpParserUpgrade:
                client.must_close = True
                client.answer(400, error_body("bad_request", "the link does not upgrade connections"))
                return
            except httptools.HttpParserError as exc:
                client.must_close = True
                client.answer(400, error_body("bad_request", f"not an HTTP/1.1 request: {exc}"))
                return
            if parsing.in_head and (piece_in_head or parsing.completed == completed):
                parsing.raw_head_bytes += len(data)
            if max(parsing.head_bytes, parsing.raw_head_bytes) > MAX_HEAD_BYTES:
                client.must_close = True
                too_large = f"request heads are limited to {MAX_HEAD_BYTES} bytes"
                client.answer(431, error_body("head_too_large", too_large))
                return
            if parsing.expect_continue:
                parsing.expect_continue = False
                if not parsing.ready:
                    client.send(b"HTTP/1.1 100 Continue\r\n\r\n")
            while parsing.ready:
                request = parsing.ready.popleft()
                client.http11 = request.http11
                client.head_only = request.method == b"HEAD"
                client.must_close = not request.keep_alive or not request.http11
                self._handler(request, client)
                if client.must_close:
                    return
            with connection.lock:
                connection.busy = False
                if connection.closing:
                    return
            head_deadline = _await_head(sock, parsing.in_head, head_deadline, client)


def _await_head(
    sock: socket.socket, in_head: bool, deadline: float | None, client: ClientConnection
) -> float | None:
    """The head deadline after a piece was handled: set when a head is open, cleared (the idle
    timeout back) once none is. Raises `ClientClosed` after answering 408 when it has passed."""
    if not in_head:
        if deadline is not None:
            kernel_timeouts(sock, receive_s=IDLE_TIMEOUT_S)
        return None
    now = time.monotonic()
    if deadline is None:
        deadline = now + HEAD_TIMEOUT_S
    elif now >= deadline:
        _head_timeout(client)
        raise ClientClosed("the request head took too long")
    kernel_timeouts(sock, receive_s=max(deadline - now, 0.001))  # 0 would mean none at all
    return deadline


def _head_timeout(client: ClientConnection) -> None:
    client.must_close = True
    slow = f"a request head must arrive within {HEAD_TIMEOUT_S:g} s"
    client.answer(408, error_body("head_timeout", slow))


def _refuse_busy(sock: socket.socket) -> None:
    """503 `link_busy` without blocking the accepting thread (a short answer fits the socket buffer)."""
    with contextlib.suppress(OSError, ClientClosed):
        sock.setblocking(False)
        busy = f"the link serves at most {MAX_CONNECTIONS} connections; retry shortly"
        ClientConnection(sock, must_close=True).answer(503, error_body("link_busy", busy))
    _shut(sock)
    sock.close()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
