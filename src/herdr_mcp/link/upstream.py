"""The link's HTTP/1.1 client to the generations: persistent loopback connections, one exchange each.

A general HTTP client does much more per request than the link needs (URL and header models,
redirect and auth hooks, an h11 state machine, anyio streams); on a ~2 ms tool call that was most
of what the link added. This one writes the request head itself, parses only the answer's status
line and headers, and reads the body by Content-Length, chunked coding, or until the connection
closes, handing over each piece as it arrives (an SSE stream is relayed live).

Delivery, which the link's failure answers depend on:

- `NotDelivered`: no byte of the request was written. The connection was refused or timed out,
  no connection slot freed up in time, or a pooled connection was found closed BEFORE writing
  (then it is dropped and another one is taken: nothing was sent on it, so this is no retry).
- `DeliveryUnknown`: the request was (or may have been) written and no complete answer head came
  back. Never retried: the generation may have carried it out.
- `AnswerBroken`: the head came back but the body broke off.

A pooled (idle, keep-alive) connection is checked before a request is written on it: the
protocol has not seen EOF, the transport is not closing, nothing unread arrived, and a
non-blocking `MSG_PEEK` on the socket shows no FIN or stray bytes waiting. A close that is still
in flight when the request is written cannot be told from a failure after the generation read
it, so such a failure is `DeliveryUnknown`. To make that window practically unreachable, idle
connections are dropped after `KEEPALIVE_S`, well before uvicorn (the generations' server) closes
an idle connection (5 s).
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import Callable, Iterable
from typing import cast
from urllib.parse import urlsplit

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
#: Unrelayed answer bytes buffered per connection before reading from the generation pauses.
READ_HIGH_WATER = 1024 * 1024


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


# -- one connection ---------------------------------------------------------------------------


class _Connection(asyncio.Protocol):
    """A TCP connection to one generation; bytes received pile up in `buffer` until read."""

    def __init__(self, sock: socket.socket, on_lost: Callable[[_Connection], None]) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self.idle_since = 0.0
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is no asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > READ_HIGH_WATER and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self._wake()
        self._on_lost(self)

    # the exchange side

    @property
    def transport(self) -> asyncio.Transport:
        assert self._transport is not None
        return self._transport

    def reusable_now(self) -> bool:
        """Whether an idle connection may carry a new request: proven open, nothing pending."""
        if self.eof or self.buffer or self._transport is None or self._transport.is_closing():
            return False
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return True  # open, nothing waiting: the generation has not closed it
        except OSError:
            return False
        return False  # b"": its FIN is waiting; bytes: something it should not have sent

    def write(self, data: bytes) -> None:
        self.transport.write(data)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    async def more(self) -> bool:
        """Wait until more bytes arrived (True) or the connection ended (False)."""
        if self.eof:
            return False
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        waiter = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None
        return bool(self.buffer) or not self.eof

    def consumed(self) -> None:
        """Resume reading once the relayed bytes were taken out of the buffer."""
        if self._paused and len(self.buffer) <= READ_HIGH_WATER // 2 and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


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
    ) -> None:
        self.status = status
        #: (lower-case name, value) in the order received.
        self.headers = headers
        self.done = False
        self._pool = pool
        self._key = key
        self._connection: _Connection | None = connection
        self._framing = framing
        self._remaining = length  # body bytes left (_LENGTH) or in the current chunk (_CHUNKED)
        self._keep_alive = keep_alive
        if framing == _LENGTH and length == 0:
            self._finish()

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    async def read(self) -> bytes:
        """The next piece of the body (b"" only once `done`); `AnswerBroken` when it broke off."""
        if self.done:
            return b""
        connection = self._connection
        assert connection is not None
        if self._framing == _LENGTH:
            piece = await self._take(connection, self._remaining)
            self._remaining -= len(piece)
            if self._remaining == 0:
                self._finish()
            return piece
        if self._framing == _UNTIL_CLOSE:
            while not connection.buffer:
                if not await connection.more():
                    if connection.error is not None:
                        raise AnswerBroken("ReadError", str(connection.error))
                    self._finish()
                    return b""
            piece = bytes(connection.buffer)
            connection.buffer.clear()
            connection.consumed()
            return piece
        return await self._read_chunked(connection)

    async def _read_chunked(self, connection: _Connection) -> bytes:
        if self._remaining == 0:
            size = int(await self._line(connection, hexsize=True) or b"0", 16)
            if size == 0:
                while await self._line(connection):  # trailers, dropped, up to the empty line
                    continue
                self._finish()
                return b""
            self._remaining = size
        piece = await self._take(connection, self._remaining)
        self._remaining -= len(piece)
        if self._remaining == 0:
            if await self._line(connection):
                raise AnswerBroken("RemoteProtocolError", "chunk not followed by CRLF")
            if connection.buffer.startswith(b"0\r\n\r\n"):
                # The last chunk (no trailers) is already here: this piece ends the body.
                del connection.buffer[:5]
                self._finish()
        return piece

    async def _take(self, connection: _Connection, most: int) -> bytes:
        while not connection.buffer:
            if not await connection.more():
                raise AnswerBroken("RemoteProtocolError", "the connection closed mid-body")
        buffer = connection.buffer
        if len(buffer) <= most:
            piece = bytes(buffer)
            buffer.clear()
        else:
            piece = bytes(buffer[:most])
            del buffer[:most]
        connection.consumed()
        return piece

    async def _line(self, connection: _Connection, *, hexsize: bool = False) -> bytes:
        while True:
            end = connection.buffer.find(b"\r\n")
            if end >= 0:
                break
            if len(connection.buffer) > MAX_LINE_BYTES:
                raise AnswerBroken("RemoteProtocolError", "chunk line too long")
            if not await connection.more():
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


_BAD_FIELD_BYTES = re.compile(rb"[\r\n\x00]")


def _parse_head(head: bytes, method: bytes) -> tuple[int, list[tuple[bytes, bytes]], int, int, bool] | None:
    """(status, headers, framing, length, keep_alive); None when the head is not valid HTTP/1.x."""
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
        if not colon or not name or name != name.strip() or b" " in name or _BAD_FIELD_BYTES.search(line):
            return None  # a bare CR, LF or NUL would split the head the link relays to its client
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
    """Keep-alive connections per generation endpoint (`http://127.0.0.1:<port>`), for one loop."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        self._endpoints: dict[str, tuple[tuple[str, int], bytes]] = {}
        self._clock = clock
        self._closed = False

    def _endpoint(self, endpoint: str) -> tuple[tuple[str, int], bytes]:
        known = self._endpoints.get(endpoint)
        if known is None:
            parts = urlsplit(endpoint)
            if parts.scheme != "http" or parts.hostname is None or parts.port is None:
                raise NotDelivered("InvalidEndpoint", endpoint)
            known = ((parts.hostname, parts.port), parts.netloc.encode("ascii"))
            self._endpoints[endpoint] = known
        return known

    async def request(
        self,
        endpoint: str,
        method: bytes,
        target: bytes,
        headers: Iterable[tuple[bytes, bytes]],
        body: bytes,
    ) -> Response:
        """Send one request and read its answer's head; the caller reads the body, then `close()`s.

        Raises `NotDelivered` (nothing written), `DeliveryUnknown` (written, no answer head).
        Cancellation closes the connection.
        """
        key, host = self._endpoint(endpoint)
        head = bytearray(b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method, target, host))
        for name, value in headers:
            head += b"%s: %s\r\n" % (name, value)
        head += b"content-length: %d\r\n\r\n" % len(body)
        connection = await self._acquire(key)
        try:
            # From here on the generation may have the request: never `NotDelivered` again.
            if len(body) < 64 * 1024:
                head += body
                connection.write(bytes(head))
            else:
                connection.write(bytes(head))
                connection.write(body)
            while True:
                status, answer, framing, length, keep_alive = await self._read_head(connection, method)
                if status >= 200:
                    break
                if status == 101:
                    raise DeliveryUnknown("RemoteProtocolError", "an upgrade nobody asked for")
        except BaseException:
            self.release(key, connection, reuse=False)
            raise
        return Response(self, key, connection, status, answer, framing, length, keep_alive)

    async def _read_head(
        self, connection: _Connection, method: bytes
    ) -> tuple[int, list[tuple[bytes, bytes]], int, int, bool]:
        while True:
            end = connection.buffer.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(connection.buffer) > MAX_HEAD_BYTES:
                raise DeliveryUnknown("RemoteProtocolError", "answer head too large")
            if not await connection.more():
                cause = type(connection.error).__name__ if connection.error else "closed"
                raise DeliveryUnknown("RemoteProtocolError", f"the connection ended unanswered ({cause})")
        head = bytes(connection.buffer[:end])
        del connection.buffer[: end + 4]
        parsed = _parse_head(head, method)
        if parsed is None:
            raise DeliveryUnknown("RemoteProtocolError", "the answer is not HTTP/1.1")
        return parsed

    async def _acquire(self, key: tuple[str, int]) -> _Connection:
        if self._closed:
            raise NotDelivered("PoolClosed", "the link is shutting down")
        if self._slots.locked():
            try:
                await asyncio.wait_for(self._slots.acquire(), POOL_TIMEOUT_S)
            except TimeoutError:
                raise NotDelivered("PoolTimeout", "no upstream connection freed up") from None
        else:
            await self._slots.acquire()
        try:
            idle = self._idle.get(key)
            now = self._clock()
            while idle:
                connection = idle.pop()
                if now - connection.idle_since < KEEPALIVE_S and connection.reusable_now():
                    return connection
                connection.close()
            return await self._connect(key)
        except BaseException:
            self._slots.release()
            raise

    async def _connect(self, key: tuple[str, int]) -> _Connection:
        loop = asyncio.get_running_loop()
        host, port = key
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP: asyncio turns TCP_NODELAY on only for sockets that say so.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setblocking(False)
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    await loop.sock_connect(sock, (host, port))
            except TimeoutError:
                raise NotDelivered("ConnectTimeout", f"{host}:{port}") from None
            except OSError as exc:
                raise NotDelivered("ConnectError", f"{host}:{port}: {exc.strerror}") from None
            _, connection = await loop.create_connection(
                lambda: _Connection(sock, lambda lost: self._forget(key, lost)), sock=sock
            )
        except BaseException:
            sock.close()
            raise
        return connection

    def release(self, key: tuple[str, int], connection: _Connection, *, reuse: bool) -> None:
        """Give a connection back after an exchange: pooled when `reuse` and still sound."""
        self._slots.release()
        if reuse and not self._closed and not connection.eof:
            connection.idle_since = self._clock()
            idle = self._idle.setdefault(key, [])
            idle.append(connection)
            if len(idle) > MAX_CONNECTIONS:
                idle.pop(0).close()
        else:
            connection.close()

    def _forget(self, key: tuple[str, int], connection: _Connection) -> None:
        idle = self._idle.get(key)
        if idle and connection in idle:
            idle.remove(connection)

    def idle_count(self) -> int:
        return sum(len(idle) for idle in self._idle.values())

    async def aclose(self) -> None:
        """Close the idle connections; exchanges in flight close theirs when they end."""
        self._closed = True
        for idle in self._idle.values():
            while idle:
                idle.pop().close()
        await asyncio.sleep(0)
