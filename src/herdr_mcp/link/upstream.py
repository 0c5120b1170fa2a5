"""The link's HTTP/1.1 client to the generations: persistent loopback connections, one exchange each.

Blocking sockets, used from the link's connection threads (link/server.py): a request is written
with one `sendall`, its answer read with plain `recv` calls, nothing in between. The link's Edge
side (link/edge.py) makes the same exchange on its asyncio loop (`request_async`, `read_async`:
the socket non-blocking meanwhile, `loop.sock_sendall` and `loop.sock_recv`), on the same pool
with the same delivery rules: handing each relayed call to a thread cost the Edge path two more
thread wake-ups per call, which was more than the rest of the link's work on it. A general HTTP
client does much more per request than the link needs (URL and header models, redirect and auth
hooks, a protocol state machine); on a ~1.5 ms tool call that was most of what the link added.
This one writes the request head itself and hands the answer's bytes, as they arrive, to
httptools' response parser (llhttp): it validates the head and takes the body apart by
Content-Length, chunked coding (extensions and trailers dropped), or until the connection closes;
each piece of body is handed over as it arrives (an SSE stream is relayed live).

Delivery, which the link's failure answers depend on:

- `NotDelivered`: no byte of the request was written. The connection was refused or timed out,
  no connection slot freed up in time, or a pooled connection was found closed BEFORE writing
  (then it is dropped and another one is taken: nothing was sent on it, so this is no retry).
- `DeliveryUnknown`: the request was (or may have been) written and no complete answer head came
  back. Never retried: the generation may have carried it out.
- `AnswerBroken`: the head came back but the body broke off.
- `ClientGone`: the client the answer was for went away (seen through its `ClientWatch` while
  waiting for the generation); the exchange is abandoned and its connection closed. On the
  asyncio path the caller gives up by cancelling the task that awaits the exchange: its connection
  closes the same way.

A pooled (idle, keep-alive) connection is checked before a request is written on it: nothing
unread arrived, and a non-blocking `MSG_PEEK` on the socket shows no FIN or stray bytes waiting. A
close that is still in flight when the request is written cannot be told from a failure after the
generation read it, so such a failure is `DeliveryUnknown`. To make that window practically
unreachable, idle connections are dropped after `KEEPALIVE_S`, well before uvicorn (the
generations' server) closes an idle connection (5 s).
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from herdr_mcp.link.upstream_wire import (
    FEED_BYTES,
    MAX_HEAD_BYTES,
    MAX_LINE_BYTES,
    NOT_WATCHED,
    AnswerBroken,
    ClientGone,
    ClientWatch,
    Connection,
    DeliveryUnknown,
    NotDelivered,
    Response,
    UpstreamError,
    head_received,
    next_answer,
    request_bytes,
    unanswered,
)
from herdr_mcp.loopback import kernel_timeouts

__all__ = [
    "FEED_BYTES",
    "MAX_HEAD_BYTES",
    "MAX_LINE_BYTES",
    "WATCH_EVERY_S",
    "AnswerBroken",
    "ClientGone",
    "ClientWatch",
    "DeliveryUnknown",
    "NotDelivered",
    "Response",
    "UpstreamError",
    "UpstreamPool",
]

#: A loopback connect either succeeds at once or the generation is not listening.
CONNECT_TIMEOUT_S = 2.0
#: Waiting for a free upstream connection; nothing was sent yet, so this is `NotDelivered`.
POOL_TIMEOUT_S = 10.0
#: Idle connections are dropped before uvicorn's 5 s keep-alive closes them from the other side.
KEEPALIVE_S = 2.0
#: Exchanges in flight at once, over all generations (as the httpx limit was).
MAX_CONNECTIONS = 256
#: How often a wait on a generation checks whether the client it answers is still there.
WATCH_EVERY_S = 0.25
# -- the pool ---------------------------------------------------------------------------------


class UpstreamPool:
    """Keep-alive connections per generation endpoint (`http://127.0.0.1:<port>`), for all threads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._idle: dict[tuple[str, int], list[Connection]] = {}
        self._lock = threading.Lock()
        # Exchanges in flight; a Condition on `_lock` only for waiting when all slots are taken.
        self._in_use = 0
        self._slot_freed = threading.Condition(self._lock)
        #: Exchanges on asyncio loops waiting for a slot (`_take_slot_async`), woken one per slot freed.
        self._slot_waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()
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
        watch: ClientWatch = NOT_WATCHED,
    ) -> Response:
        """Send one request and read its answer's head; the caller reads the body, then `close()`s.

        Raises `NotDelivered` (nothing written), `DeliveryUnknown` (written, no answer head),
        `ClientGone` (the watched client closed while the generation had not answered yet).
        """
        key, host = self._endpoint(endpoint)
        data = request_bytes(method, target, host, headers, body)
        connection = self._acquire(key)
        try:
            # From here on the generation may have the request: never `NotDelivered` again.
            try:
                for piece in data:
                    connection.write(piece)
            except OSError as exc:
                raise DeliveryUnknown("WriteError", str(exc)) from None
            answer = next_answer(connection)
            while not head_received(connection, answer):
                if not connection.more(watch):
                    raise unanswered(connection)
        except BaseException:
            self.release(key, connection, reuse=False)
            raise
        return Response(self, key, connection, answer, method == b"HEAD", watch)

    async def request_async(
        self,
        endpoint: str,
        method: bytes,
        target: bytes,
        headers: Iterable[tuple[bytes, bytes]],
        body: bytes,
    ) -> Response:
        """`request` on the running asyncio loop; read the body with `Response.read_async`.

        The same outcomes as `request`, but `ClientGone`: to give up, cancel the task awaiting
        this (or the reads), and the connection is closed as a client's going away closes it.
        """
        key, host = self._endpoint(endpoint)
        data = request_bytes(method, target, host, headers, body)
        connection = await self._acquire_async(key)
        loop = asyncio.get_running_loop()
        try:
            try:
                for piece in data:
                    await loop.sock_sendall(connection.sock, piece)
            except OSError as exc:
                raise DeliveryUnknown("WriteError", str(exc)) from None
            answer = next_answer(connection)
            while not head_received(connection, answer):
                if not await connection.more_async():
                    raise unanswered(connection)
        except BaseException:
            self.release(key, connection, reuse=False)
            raise
        return Response(self, key, connection, answer, method == b"HEAD", NOT_WATCHED)

    def _acquire(self, key: tuple[str, int]) -> Connection:
        if self._closed:
            raise NotDelivered("PoolClosed", "the link is shutting down")
        with self._lock:
            if self._in_use >= MAX_CONNECTIONS and not self._slot_freed.wait_for(
                lambda: self._in_use < MAX_CONNECTIONS, POOL_TIMEOUT_S
            ):
                raise NotDelivered("PoolTimeout", "no upstream connection freed up")
            self._in_use += 1
        try:
            connection = self._idle_connection(key) or self._connect(key)
            connection.set_blocking(True)
            return connection
        except BaseException:
            self._free_slot()
            raise

    async def _acquire_async(self, key: tuple[str, int]) -> Connection:
        await self._take_slot_async()
        try:
            connection = self._idle_connection(key) or await self._connect_async(key)
            connection.set_blocking(False)
            return connection
        except BaseException:
            self._free_slot()
            raise

    async def _take_slot_async(self) -> None:
        """A slot for one exchange, waited for on the loop (the threads wait on `_slot_freed`)."""
        if self._closed:
            raise NotDelivered("PoolClosed", "the link is shutting down")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + POOL_TIMEOUT_S
        while True:
            with self._lock:
                if self._in_use < MAX_CONNECTIONS:
                    self._in_use += 1
                    return
                freed: asyncio.Future[None] = loop.create_future()
                self._slot_waiters.append((loop, freed))
            try:
                async with asyncio.timeout_at(deadline):
                    await freed
            except TimeoutError:
                raise NotDelivered("PoolTimeout", "no upstream connection freed up") from None
            finally:
                with self._lock:
                    if (loop, freed) in self._slot_waiters:
                        self._slot_waiters.remove((loop, freed))

    def _idle_connection(self, key: tuple[str, int]) -> Connection | None:
        """A pooled connection to `key` fit to carry a request now (idle less than KEEPALIVE_S,
        proven open), or None; the unfit ones met on the way are closed."""
        now = self._clock()
        while True:
            with self._lock:
                idle = self._idle.get(key)
                connection = idle.pop() if idle else None
            if connection is None:
                return None
            if now - connection.idle_since < KEEPALIVE_S and connection.reusable_now():
                return connection
            connection.close()

    @staticmethod
    def _connect(key: tuple[str, int]) -> Connection:
        host, port = key
        sock = _new_socket(host)
        try:
            sock.settimeout(CONNECT_TIMEOUT_S)
            try:
                sock.connect((host, port))
            except TimeoutError:
                raise NotDelivered("ConnectTimeout", f"{host}:{port}") from None
            except OSError as exc:
                raise NotDelivered("ConnectError", f"{host}:{port}: {exc.strerror}") from None
            sock.settimeout(None)
            _tune(sock)
        except BaseException:
            sock.close()
            raise
        return Connection(sock)

    @staticmethod
    async def _connect_async(key: tuple[str, int]) -> Connection:
        host, port = key
        sock = _new_socket(host)
        try:
            sock.setblocking(False)
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S):
                    await asyncio.get_running_loop().sock_connect(sock, (host, port))
            except TimeoutError:
                raise NotDelivered("ConnectTimeout", f"{host}:{port}") from None
            except OSError as exc:
                reason = os.strerror(exc.errno) if exc.errno else str(exc)
                raise NotDelivered("ConnectError", f"{host}:{port}: {reason}") from None
            _tune(sock)
        except BaseException:
            sock.close()
            raise
        return Connection(sock)

    def release(self, key: tuple[str, int], connection: Connection, *, reuse: bool) -> None:
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
        if self._slot_waiters:
            loop, freed = self._slot_waiters.popleft()
            loop.call_soon_threadsafe(_wake, freed)

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


def _wake(freed: asyncio.Future[None]) -> None:
    if not freed.done():
        freed.set_result(None)


def _new_socket(host: str) -> socket.socket:
    return socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # A blocking recv that gives up every WATCH_EVERY_S (`more` then checks the client).
    kernel_timeouts(sock, receive_s=WATCH_EVERY_S)
