"""The link's HTTP/1.1 client to the generations: persistent loopback connections, one exchange each.

Blocking sockets, used from the link's connection threads (link/server.py): a request is written
with one `sendall`, its answer read with plain `recv` calls, nothing in between. A general HTTP
client does much more per request than the link needs (URL and header models, redirect and auth
hooks, a protocol state machine); on a ~1.5 ms tool call that was most of what the link added.
This one writes the request head itself, parses only the answer's status line and headers, and
reads the body by Content-Length, chunked coding, or until the connection closes, handing over
each piece as it arrives (an SSE stream is relayed live).

Delivery, which the link's failure answers depend on:

- `NotDelivered`: no byte of the request was written. The connection was refused or timed out,
  no connection slot freed up in time, or a pooled connection was found closed BEFORE writing
  (then it is dropped and another one is taken: nothing was sent on it, so this is no retry).
- `DeliveryUnknown`: the request was (or may have been) written and no complete answer head came
  back. Never retried: the generation may have carried it out.
- `AnswerBroken`: the head came back but the body broke off.
- `ClientGone`: the client the answer was for went away (seen through its `ClientWatch` while
  waiting for the generation); the exchange is abandoned and its connection closed.

A pooled (idle, keep-alive) connection is checked before a request is written on it: nothing
unread arrived, and a non-blocking `MSG_PEEK` on the socket shows no FIN or stray bytes waiting. A
close that is still in flight when the request is written cannot be told from a failure after the
generation read it, so such a failure is `DeliveryUnknown`. To make that window practically
unreachable, idle connections are dropped after `KEEPALIVE_S`, well before uvicorn (the
generations' server) closes an idle connection (5 s).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from herdr_mcp.loopback import kernel_timeouts

#: A loopback connect either succeeds at once or the generation is not listening.
CONNECT_TIMEOUT_S = 2.0
#: Waiting for a free upstream connection; nothing was sent yet, so this is `NotDelivered`.
POOL_TIMEOUT_S = 10.0
#: Idle connections are dropped before uvicorn's 5 s keep-alive closes them from the other side.
KEEPALIVE_S = 2.0
#: Exchanges in flight at once, over all generations (as the httpx limit was).
MAX_CONNECTIONS = 256
#: An answer head (status line and headers) larger than this is not a generation's.
MAX_HEAD_BYTES = 64 * 1024
#: A chunk-size line or trailer line longer than this is malformed.
MAX_LINE_BYTES = 8 * 1024
_PEEK_NOW = int(socket.MSG_PEEK | socket.MSG_DONTWAIT)
#: How often a wait on a generation checks whether the client it answers is still there.
WATCH_EVERY_S = 0.25
#: One read from a generation; the piece is relayed before the next read (back-pressure).
RECV_BYTES = 64 * 1024


class UpstreamError(Exception):
    """An exchange with a generation failed; `reason` is a short stable name for the cause."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class NotDelivered(UpstreamError):
    """Nothing of the request was written."""


class DeliveryUnknown(UpstreamError):
    """The request was, or may have been, written; no complete answer head came back."""


class AnswerBroken(UpstreamError):
    """The answer's head came back, its body broke off."""


class ClientGone(Exception):
    """The client an exchange was for closed its connection while the link waited on the generation."""


class ClientWatch:
    """The client connection an exchange answers: when it closes, the exchange is abandoned.

    Checked every `WATCH_EVERY_S` while the link waits on the generation. A client that sent
    more bytes (a pipelined request) is not watched any further: its next request waits in the
    socket, and whether it went away is seen when its answer is written.
    """

    def __init__(self, sock: socket.socket | None) -> None:
        self.sock = sock

    def gone(self) -> bool:
        """True when the client closed its connection (EOF waiting) or the socket failed."""
        sock = self.sock
        if sock is None:
            return False
        try:
            data = sock.recv(1, _PEEK_NOW)
        except BlockingIOError:
            return False
        except OSError:
            return True
        if data:
            self.sock = None
            return False
        return True


_NOT_WATCHED = ClientWatch(None)


# -- one connection ---------------------------------------------------------------------------


class _Connection:
    """A blocking TCP connection to one generation; bytes received pile up in `buffer` until read."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.eof = False
        self.error: OSError | None = None
        self.idle_since = 0.0

    def reusable_now(self) -> bool:
        """Whether an idle connection may carry a new request: proven open, nothing pending."""
        if self.eof or self.buffer:
            return False
        try:
            self.sock.recv(1, _PEEK_NOW)
        except BlockingIOError:
            return True  # open, nothing waiting: the generation has not closed it
        except OSError:
            return False
        return False  # b"": its FIN is waiting; bytes: something it should not have sent

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self.eof = True
        self.sock.close()

    def more(self, watch: ClientWatch) -> bool:
        """Wait until more bytes arrived (True) or the connection ended (False).

        The wait is a plain blocking `recv` (nothing else in the way of a quick answer); every
        `WATCH_EVERY_S` without bytes the watched client is checked, and `ClientGone` raised
        when it closed.
        """
        while not self.eof:
            try:
                data = self.sock.recv(RECV_BYTES)
            except BlockingIOError:  # SO_RCVTIMEO ran out: nothing yet
                if watch.gone():
                    raise ClientGone from None
                continue
            except OSError as exc:
                self.eof = True
                self.error = exc
                return False
            if not data:
                self.eof = True
                return False
            self.buffer += data
            return True
        return False


# -- the answer -------------------------------------------------------------------------------

_CHUNKED, _LENGTH, _UNTIL_CLOSE = 0, 1, 2


class Response:
    """An answer whose head was read; `read()` hands over the body as it arrives."""

    def __init__(
        self,
        pool: UpstreamPool,
        key: tuple[str, int],
        connection: _Connection,
        status: int,
        headers: list[tuple[bytes, bytes]],
        framing: int,
        length: int,
        keep_alive: bool,
        watch: ClientWatch,
    ) -> None:
        self.status = status
        #: (lower-case name, value) in the order received.
        self.headers = headers
        self.done = False
        self._pool = pool
        self._key = key
        self._connection: _Connection | None = connection
        self._framing = framing
        self._length = length if framing == _LENGTH else None
        self._remaining = length  # body bytes left (_LENGTH) or in the current chunk (_CHUNKED)
        self._keep_alive = keep_alive
        self._watch = watch
        if framing == _LENGTH and length == 0:
            self._finish()

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    @property
    def length(self) -> int | None:
        """The body's Content-Length, or None when it is chunked or runs until the connection closes."""
        return self._length

    def ready(self) -> bool:
        """Whether `read()` answers without waiting on the generation (body bytes here, or none due)."""
        return self.done or bool(self._connection is not None and self._connection.buffer)

    def read(self) -> bytes:
        """The next piece of the body (b"" only once `done`); `AnswerBroken` when it broke off."""
        if self.done:
            return b""
        connection = self._connection
        assert connection is not None
        if self._framing == _LENGTH:
            piece = self._take(connection, self._remaining)
            self._remaining -= len(piece)
            if self._remaining == 0:
                self._finish()
            return piece
        if self._framing == _UNTIL_CLOSE:
            while not connection.buffer:
                if not connection.more(self._watch):
                    if connection.error is not None:
                        raise AnswerBroken("ReadError", str(connection.error))
                    self._finish()
                    return b""
            piece = bytes(connection.buffer)
            connection.buffer.clear()
            return piece
        return self._read_chunked(connection)

    def _read_chunked(self, connection: _Connection) -> bytes:
        if self._remaining == 0:
            size = int(self._line(connection, hexsize=True) or b"0", 16)
            if size == 0:
                while self._line(connection):  # trailers, dropped, up to the empty line
                    continue
                self._finish()
                return b""
            self._remaining = size
        piece = self._take(connection, self._remaining)
        self._remaining -= len(piece)
        if self._remaining == 0:
            if self._line(connection):
                raise AnswerBroken("RemoteProtocolError", "chunk not followed by CRLF")
            if connection.buffer.startswith(b"0\r\n\r\n"):
                # The last chunk (no trailers) is already here: this piece ends the body.
                del connection.buffer[:5]
                self._finish()
        return piece

    def _take(self, connection: _Connection, most: int) -> bytes:
        while not connection.buffer:
            if not connection.more(self._watch):
                raise AnswerBroken("RemoteProtocolError", "the connection closed mid-body")
        buffer = connection.buffer
        if len(buffer) <= most:
            piece = bytes(buffer)
            buffer.clear()
        else:
            piece = bytes(buffer[:most])
            del buffer[:most]
        return piece

    def _line(self, connection: _Connection, *, hexsize: bool = False) -> bytes:
        while True:
            end = connection.buffer.find(b"\r\n")
            if end > MAX_LINE_BYTES or (end < 0 and len(connection.buffer) > MAX_LINE_BYTES):
                raise AnswerBroken("RemoteProtocolError", "chunk line too long")
            if end >= 0:
                break
            if not connection.more(self._watch):
                raise AnswerBroken("RemoteProtocolError", "the connection closed mid-body")
        line = bytes(connection.buffer[:end])
        del connection.buffer[: end + 2]
        if hexsize:
            line = line.split(b";", 1)[0].strip()
            if not line or len(line) > 16 or line.strip(b"0123456789abcdefABCDEF"):
                raise AnswerBroken("RemoteProtocolError", "malformed chunk size")
        return line

    def _finish(self) -> None:
        self.done = True
        connection, self._connection = self._connection, None
        if connection is not None:
            self._pool.release(self._key, connection, reuse=self._keep_alive and not connection.buffer)

    def close(self) -> None:
        """End the exchange: a fully read answer leaves its connection pooled, else it closes."""
        connection, self._connection = self._connection, None
        if connection is not None:
            self._pool.release(self._key, connection, reuse=False)


def _parse_head(head: bytes, method: bytes) -> tuple[int, list[tuple[bytes, bytes]], int, int, bool] | None:
    """(status, headers, framing, length, keep_alive); None when the head is not valid HTTP/1.x."""
    if b"\x00" in head or not head.count(b"\r") == head.count(b"\n") == head.count(b"\r\n"):
        return None  # a bare CR, LF or NUL would split the head the link relays to its client
    lines = head.split(b"\r\n")
    status_line = lines[0].split(b" ", 2)
    if len(status_line) < 2 or status_line[0] not in (b"HTTP/1.1", b"HTTP/1.0"):
        return None
    code = status_line[1]
    if len(code) != 3 or not code.isdigit():
        return None
    status = int(code)
    headers: list[tuple[bytes, bytes]] = []
    length: int | None = None
    chunked = False
    transfer_coded = False
    keep_alive = status_line[0] == b"HTTP/1.1"
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip() or b" " in name:
            return None
        name = name.lower()
        value = value.strip(b" \t")
        headers.append((name, value))
        if name == b"content-length":
            if not value.isdigit() or (length is not None and length != int(value)):
                return None
            length = int(value)
        elif name == b"transfer-encoding":
            transfer_coded = True
            chunked = value.lower().rsplit(b",", 1)[-1].strip() == b"chunked"
        elif name == b"connection":
            tokens = {token.strip().lower() for token in value.split(b",")}
            if b"close" in tokens:
                keep_alive = False
    if method == b"HEAD" or status in (204, 304):
        return status, headers, _LENGTH, 0, keep_alive
    if transfer_coded:
        return status, headers, (_CHUNKED if chunked else _UNTIL_CLOSE), 0, keep_alive and chunked
    if length is not None:
        return status, headers, _LENGTH, length, keep_alive
    return status, headers, _UNTIL_CLOSE, 0, False


# -- the pool ---------------------------------------------------------------------------------


class UpstreamPool:
    """Keep-alive connections per generation endpoint (`http://127.0.0.1:<port>`), for all threads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._lock = threading.Lock()
        # Exchanges in flight; a Condition on `_lock` only for waiting when all slots are taken.
        self._in_use = 0
        self._slot_freed = threading.Condition(self._lock)
        self._endpoints: dict[str, tuple[tuple[str, int], bytes]] = {}
        self._clock = clock
        self._closed = False

    def _endpoint(self, endpoint: str) -> tuple[tuple[str, int], bytes]:
        known = self._endpoints.get(endpoint)
        if known is None:
            parts = urlsplit(endpoint)
            try:
                port = parts.port  # ValueError for a port that is no number or out of range
            except ValueError:
                port = None
            if parts.scheme != "http" or parts.hostname is None or port is None:
                raise NotDelivered("InvalidEndpoint", endpoint)
            known = ((parts.hostname, port), parts.netloc.encode("ascii"))
            self._endpoints[endpoint] = known
        return known

    def request(
        self,
        endpoint: str,
        method: bytes,
        target: bytes,
        headers: Iterable[tuple[bytes, bytes]],
        body: bytes,
        watch: ClientWatch = _NOT_WATCHED,
    ) -> Response:
        """Send one request and read its answer's head; the caller reads the body, then `close()`s.

        Raises `NotDelivered` (nothing written), `DeliveryUnknown` (written, no answer head),
        `ClientGone` (the watched client closed while the generation had not answered yet).
        """
        key, host = self._endpoint(endpoint)
        head = bytearray(b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method, target, host))
        for name, value in headers:
            head += b"%s: %s\r\n" % (name, value)
        head += b"content-length: %d\r\n\r\n" % len(body)
        connection = self._acquire(key)
        try:
            # From here on the generation may have the request: never `NotDelivered` again.
            try:
                if len(body) < 64 * 1024:
                    head += body
                    connection.write(bytes(head))
                else:
                    connection.write(bytes(head))
                    connection.write(body)
            except OSError as exc:
                raise DeliveryUnknown("WriteError", str(exc)) from None
            while True:
                status, answer, framing, length, keep_alive = self._read_head(connection, method, watch)
                if status >= 200:
                    break
                if status == 101:
                    raise DeliveryUnknown("RemoteProtocolError", "an upgrade nobody asked for")
        except BaseException:
            self.release(key, connection, reuse=False)
            raise
        return Response(self, key, connection, status, answer, framing, length, keep_alive, watch)

    @staticmethod
    def _read_head(
        connection: _Connection, method: bytes, watch: ClientWatch
    ) -> tuple[int, list[tuple[bytes, bytes]], int, int, bool]:
        while True:
            end = connection.buffer.find(b"\r\n\r\n")
            if end > MAX_HEAD_BYTES or (end < 0 and len(connection.buffer) > MAX_HEAD_BYTES):
                raise DeliveryUnknown("RemoteProtocolError", "answer head too large")
            if end >= 0:
                break
            if not connection.more(watch):
                cause = type(connection.error).__name__ if connection.error else "closed"
                raise DeliveryUnknown("RemoteProtocolError", f"the connection ended unanswered ({cause})")
        head = bytes(connection.buffer[:end])
        del connection.buffer[: end + 4]
        parsed = _parse_head(head, method)
        if parsed is None:
            raise DeliveryUnknown("RemoteProtocolError", "the answer is not HTTP/1.1")
        return parsed

    def _acquire(self, key: tuple[str, int]) -> _Connection:
        if self._closed:
            raise NotDelivered("PoolClosed", "the link is shutting down")
        with self._lock:
            if self._in_use >= MAX_CONNECTIONS and not self._slot_freed.wait_for(
                lambda: self._in_use < MAX_CONNECTIONS, POOL_TIMEOUT_S
            ):
                raise NotDelivered("PoolTimeout", "no upstream connection freed up")
            self._in_use += 1
        try:
            now = self._clock()
            while True:
                with self._lock:
                    idle = self._idle.get(key)
                    connection = idle.pop() if idle else None
                if connection is None:
                    return self._connect(key)
                if now - connection.idle_since < KEEPALIVE_S and connection.reusable_now():
                    return connection
                connection.close()
        except BaseException:
            self._free_slot()
            raise

    @staticmethod
    def _connect(key: tuple[str, int]) -> _Connection:
        host, port = key
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(CONNECT_TIMEOUT_S)
            try:
                sock.connect((host, port))
            except TimeoutError:
                raise NotDelivered("ConnectTimeout", f"{host}:{port}") from None
            except OSError as exc:
                raise NotDelivered("ConnectError", f"{host}:{port}: {exc.strerror}") from None
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # A blocking recv that gives up every WATCH_EVERY_S (`more` then checks the client).
            kernel_timeouts(sock, receive_s=WATCH_EVERY_S)
        except BaseException:
            sock.close()
            raise
        return _Connection(sock)

    def release(self, key: tuple[str, int], connection: _Connection, *, reuse: bool) -> None:
        """Give a connection back after an exchange: pooled when `reuse` and still sound."""
        if reuse and not connection.eof:
            connection.idle_since = self._clock()
            with self._lock:
                self._free_slot_locked()
                if not self._closed:
                    idle = self._idle.setdefault(key, [])
                    idle.append(connection)
                    if len(idle) <= MAX_CONNECTIONS:
                        return
                    connection = idle.pop(0)
        else:
            self._free_slot()
        connection.close()

    def _free_slot(self) -> None:
        with self._lock:
            self._free_slot_locked()

    def _free_slot_locked(self) -> None:
        self._in_use -= 1
        self._slot_freed.notify()

    def idle_count(self) -> int:
        with self._lock:
            return sum(len(idle) for idle in self._idle.values())

    def close(self) -> None:
        """Close the idle connections; exchanges in flight close theirs when they end."""
        with self._lock:
            self._closed = True
            idle = [connection for connections in self._idle.values() for connection in connections]
            self._idle.clear()
        for connection in idle:
            connection.close()
