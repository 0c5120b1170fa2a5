"""One exchange's bytes with a generation, for the link's HTTP/1.1 client (link/upstream.py, which
keeps the pool and says what each delivery error means): the connection and the bytes received
on it, httptools' parse of the answer's head and body, the errors. The same code reads an answer
for a blocking thread (`Connection.more`, `Response.read`) and on an asyncio loop
(`Connection.more_async`, `Response.read_async`): only the wait for more bytes differs.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable
from typing import Protocol

import httptools

#: An answer head (status line and headers) larger than this is not a generation's.
MAX_HEAD_BYTES = 64 * 1024
#: Framing between two pieces of a chunked body (a chunk-size line with its extensions, or the
#: trailers) longer than this is malformed: uvicorn writes ~10 bytes there. llhttp has no such
#: limit and httptools keeps a trailer whole in memory, so the link counts.
MAX_LINE_BYTES = 8 * 1024
#: A chunked body is fed to the parser in slices of at most this: the parser reports no byte
#: positions, but a slice that yields no body byte is framing through and through, so framing is
#: counted to within one slice (refused once it may exceed MAX_LINE_BYTES, at the earliest after
#: MAX_LINE_BYTES - FEED_BYTES bytes of certain framing).
FEED_BYTES = 4 * 1024
_PEEK_NOW = int(socket.MSG_PEEK | socket.MSG_DONTWAIT)
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

    Checked every `WATCH_EVERY_S` (link/upstream.py: the sockets' receive timeout) while the link
    waits on the generation. A client that sent more bytes (a pipelined request) is not watched any
    further: its next request waits in the socket, and whether it went away is seen when its
    answer is written.
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


NOT_WATCHED = ClientWatch(None)


# -- one connection ---------------------------------------------------------------------------


class Connection:
    """A blocking TCP connection to one generation; bytes received pile up in `buffer` until read."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.eof = False
        self.error: OSError | None = None
        self.idle_since = 0.0
        #: The parser of the last answer, reused for the next (llhttp starts over after a complete
        #: answer; making one costs about as much as parsing a head); None after a HEAD answer,
        #: whose parser still waits for the body the head announced.
        self.answer: Answer | None = None
        #: Whether the socket blocks (the threads' exchanges) or not (the asyncio loop's).
        self.blocking = sock.getblocking()

    def set_blocking(self, blocking: bool) -> None:
        """Put the socket in the mode of the path about to use it (a syscall only on a change)."""
        if blocking != self.blocking:
            self.sock.setblocking(blocking)
            self.blocking = blocking

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
                return self._ended(exc)
            return self._took(data)
        return False

    async def more_async(self) -> bool:
        """`more` on the asyncio loop (the socket non-blocking): the wait is the loop's; the caller
        gives up by cancelling the task awaiting it."""
        if self.eof:
            return False
        try:
            data = await asyncio.get_running_loop().sock_recv(self.sock, RECV_BYTES)
        except OSError as exc:
            return self._ended(exc)
        return self._took(data)

    def _took(self, data: bytes) -> bool:
        """What `more` answers for the bytes one receive gave (none: the connection ended)."""
        if not data:
            return self._ended(None)
        self.buffer += data
        return True

    def _ended(self, error: OSError | None) -> bool:
        self.eof = True
        if error is not None:
            self.error = error
        return False


# -- the answer -------------------------------------------------------------------------------


class _AfterTheAnswer(Exception):
    """Bytes followed the end of the answer; raised in the parser's callback to stop it there."""


class Answer:
    """The httptools protocol of one exchange: what the parser reported of the answer so far."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        #: (lower-case name, value) of the head, in the order received; trailers are not kept.
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.keep_alive = False
        self.complete = False
        #: Bytes came after the end of the answer: nothing asked for them, the connection is unusable.
        self.after = False
        #: The last slice fed held a body byte or ended a chunk-size line (see FEED_BYTES).
        self.progress = False
        self.pieces: list[bytes] = []

    def next_exchange(self) -> None:
        """Forget the last answer (its parser has started over): the next one comes on the same connection."""
        self.headers = []
        self.head_done = self.keep_alive = self.complete = self.after = self.progress = False
        self.pieces = []

    def on_message_begin(self) -> None:
        if self.complete:
            raise _AfterTheAnswer
        self.headers = []  # the final head after an interim 1xx: the 1xx's headers go
        self.head_done = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.head_done:
            # llhttp strips the whitespace before a value, not after it.
            self.headers.append((name.lower(), value.rstrip(b" \t")))

    def on_headers_complete(self) -> None:
        self.head_done = True
        # Asked now: llhttp forgets the head's Connection header once the answer is complete.
        self.keep_alive = self.parser.should_keep_alive()

    def on_chunk_header(self) -> None:
        self.progress = True

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)
        self.progress = True

    def on_message_complete(self) -> None:
        self.complete = True


def _last_coding_is_chunked(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether the body is chunked: llhttp's rule, told here because its flags are not exposed.

    Without it the link could not tell an answer that runs until the connection closes (whose EOF
    is its end) from a chunked one cut off before its first chunk-size line was complete.
    """
    codings = b",".join(value for name, value in headers if name == b"transfer-encoding")
    return codings.rsplit(b",", 1)[-1].strip(b" \t").lower() == b"chunked"


class Releaser(Protocol):
    """What gets a connection back once its answer is read (the pool)."""

    def release(self, key: tuple[str, int], connection: Connection, *, reuse: bool) -> None: ...


class Response:
    """An answer whose head was read; `read()` hands over the body as it arrives."""

    def __init__(
        self,
        pool: Releaser,
        key: tuple[str, int],
        connection: Connection,
        answer: Answer,
        head_only: bool,
        watch: ClientWatch,
    ) -> None:
        self.status: int = answer.parser.get_status_code()
        #: (lower-case name, value) in the order received.
        self.headers = answer.headers
        self.done = False
        self._pool = pool
        self._key = key
        self._connection: Connection | None = connection
        self._answer = answer
        self._watch = watch
        self._chunked = False
        self._until_close = False
        self._framing = 0  # bytes of chunked framing since the last body byte, to within FEED_BYTES
        #: Raised once the body parsed before it was handed over.
        self._fault: AnswerBroken | None = None
        if head_only or answer.complete:  # HEAD, 204, 304, Content-Length: 0
            self._length: int | None = 0
            self._finish()
            return
        length = self.header(b"content-length")  # llhttp checked it: one value, digits
        self._length = None if length is None else int(length)
        if length is None:
            self._chunked = _last_coding_is_chunked(answer.headers)
            self._until_close = not self._chunked

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
        while True:
            piece = self._received()
            if piece is not None:
                return piece
            connection = self._connection
            assert connection is not None
            if not connection.more(self._watch):
                return self._ended(connection)

    async def read_async(self) -> bytes:
        """`read` for an exchange made with `request_async`."""
        while True:
            piece = self._received()
            if piece is not None:
                return piece
            connection = self._connection
            assert connection is not None
            if not await connection.more_async():
                return self._ended(connection)

    def _ended(self, connection: Connection) -> bytes:
        """The connection ended before the answer said it was complete."""
        if not self._until_close:
            raise AnswerBroken("RemoteProtocolError", "the connection closed mid-body")
        if connection.error is not None:
            raise AnswerBroken("ReadError", str(connection.error))
        self._finish()
        return b""

    def _received(self) -> bytes | None:
        """The next piece of the body from the bytes received so far (b"" once `done`), or None
        when more must be received first."""
        if self.done:
            return b""
        connection = self._connection
        assert connection is not None
        answer = self._answer
        while not answer.pieces and not answer.complete:
            if self._fault is not None:
                raise self._fault
            if not connection.buffer:
                return None
            self._feed(connection, answer)
        pieces = answer.pieces
        piece = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        pieces.clear()
        if answer.complete:
            self._finish()
        return piece

    def _feed(self, connection: Connection, answer: Answer) -> None:
        data, connection.buffer = connection.buffer, bytearray()
        try:
            if not self._chunked:
                answer.parser.feed_data(data)
                return
            view = memoryview(data)
            for start in range(0, len(view), FEED_BYTES):
                if answer.complete:
                    answer.after = True
                    return
                piece = view[start : start + FEED_BYTES]
                answer.progress = False
                answer.parser.feed_data(piece)
                self._framing = len(piece) if answer.progress else self._framing + len(piece)
                if self._framing > MAX_LINE_BYTES:
                    self._fault = AnswerBroken("RemoteProtocolError", "chunk framing or trailers too long")
                    answer.complete = False  # a complete answer over the cap is refused all the same
                    return
        except httptools.HttpParserError as exc:
            if not answer.complete:
                self._fault = AnswerBroken("RemoteProtocolError", f"malformed body: {exc}")
                return
            answer.after = True  # what followed the answer is no HTTP, or not allowed after it

    def _finish(self) -> None:
        self.done = True
        connection, self._connection = self._connection, None
        if connection is not None:
            answer = self._answer
            if not answer.complete:
                connection.answer = None  # a HEAD answer: its parser is not at a message's start
            reuse = answer.keep_alive and not answer.after and not connection.buffer
            self._pool.release(self._key, connection, reuse=reuse)

    def close(self) -> None:
        """End the exchange: a fully read answer leaves its connection pooled, else it closes."""
        connection, self._connection = self._connection, None
        if connection is not None:
            self._pool.release(self._key, connection, reuse=False)


def request_bytes(
    method: bytes, target: bytes, host: bytes, headers: Iterable[tuple[bytes, bytes]], body: bytes
) -> list[bytes]:
    """The request as written: one piece, or the head and a large body apart (no copy of it)."""
    head = bytearray(b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method, target, host))
    for name, value in headers:
        head += b"%s: %s\r\n" % (name, value)
    head += b"content-length: %d\r\n\r\n" % len(body)
    if len(body) < 64 * 1024:
        head += body
        return [bytes(head)]
    return [bytes(head), body]


def next_answer(connection: Connection) -> Answer:
    """The parser state for the answer about to come on `connection` (its last one's, reset)."""
    answer = connection.answer
    if answer is None:
        answer = connection.answer = Answer()
    else:
        answer.next_exchange()
    return answer


def head_received(connection: Connection, answer: Answer) -> bool:
    """Parse the answer's head from the bytes received so far, past interim 1xx heads: True once
    the final head is parsed (the body stays in the buffer), False when more must be received.

    The head is cut at its empty line here (so its size is checked before any parse, and a HEAD
    answer's parser never sees the next bytes) and then parsed as a whole.
    """
    while True:
        end = connection.buffer.find(b"\r\n\r\n")
        if end > MAX_HEAD_BYTES or (end < 0 and len(connection.buffer) > MAX_HEAD_BYTES):
            raise DeliveryUnknown("RemoteProtocolError", "answer head too large")
        if end < 0:
            return False
        head = bytes(connection.buffer[: end + 4])
        del connection.buffer[: end + 4]
        try:
            answer.parser.feed_data(head)
        except httptools.HttpParserError as exc:
            if answer.head_done and answer.parser.get_status_code() == 101:
                raise DeliveryUnknown("RemoteProtocolError", "an upgrade nobody asked for") from None
            raise DeliveryUnknown("RemoteProtocolError", f"the answer is not HTTP/1.1 ({exc})") from None
        if not answer.head_done:
            raise DeliveryUnknown("RemoteProtocolError", "the answer is not HTTP/1.1 (head not ended)")
        status = answer.parser.get_status_code()
        if status == 101:
            raise DeliveryUnknown("RemoteProtocolError", "an upgrade nobody asked for")
        if status >= 200:
            return True
        answer.complete = False  # an interim 1xx head: the final one follows


def unanswered(connection: Connection) -> DeliveryUnknown:
    cause = type(connection.error).__name__ if connection.error else "closed"
    return DeliveryUnknown("RemoteProtocolError", f"the connection ended unanswered ({cause})")
