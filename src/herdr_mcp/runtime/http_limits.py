"""Bounds on what one HTTP/1.1 connection may make the runtime hold: the request head's size and
how long a client may take to send it, and how long a body may stall.

uvicorn (0.54, as installed) serves the runtime with httptools (llhttp) when it is importable,
which it is, and neither that protocol nor h11's sets a head timeout, nor does httptools limit the
head's size: found 2026-12-02 (issue 23), a 64 MiB header on an unauthenticated `GET /health` was
buffered whole (RSS 73 -> 175 MB) and answered 200, and 50 connections that sent nothing, or half
a head, or one byte every half second, stayed open as long as the client liked. uvicorn's own
`timeout_keep_alive` only starts after a response. h11 would cap the head
(`h11_max_incomplete_event_size`), but it is pure Python: every request of the runtime, and of the
echo peer `benchmarks/runtime_bench.py` compares it with, goes through httptools, so the bounds
are added to uvicorn's httptools protocol instead (`LimitedHttpToolsProtocol`, passed as
`uvicorn.Config(http=...)`; serve.py), and the serve loop's keep-alive is set explicitly:

- A request head (request line and headers) larger than `MAX_HEAD_BYTES` is answered 431
  `head_too_large` and the connection closed. While a head is incomplete the bytes received for
  it are counted (llhttp reports a header only once it is whole, and uvicorn and httptools keep
  what it has so far); a complete head is measured as parsed. At most one read (256 KiB, asyncio's)
  more than the limit is ever held.
- The first head must be complete within `HEAD_TIMEOUT_S` of the connection opening, each later
  one within `HEAD_TIMEOUT_S` of its first byte: past that, 408 `head_timeout` and closed (a
  connection that never sent a byte is closed without an answer). A slow head behind a response
  still being written is given more time, not cut mid-answer.
- A request body that stops arriving for `BODY_IDLE_TIMEOUT_S` (while the runtime is reading,
  not while uvicorn's flow control has paused reading) ends the connection; the handler sees the
  client gone.
- A kept-alive connection that sends nothing for `KEEP_ALIVE_S` after an answer is closed
  (uvicorn's `timeout_keep_alive`, its default, now said).

Answers are `{"error": <code>, "error_description": ...}` (the OAuth-style shape `/mcp`'s 401 has,
the link's). The same protocol serves the runtime's Unix socket for the native host. Streams
(`/push/events`) are unaffected: the bounds apply while a request arrives, not while it is
answered.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = [
    "BODY_IDLE_TIMEOUT_S",
    "HEAD_TIMEOUT_S",
    "KEEP_ALIVE_S",
    "MAX_HEAD_BYTES",
    "LimitedHttpToolsProtocol",
]

#: The largest request head (request line and headers) accepted; the link's bound too.
MAX_HEAD_BYTES = 64 * 1024
#: The first head within this long of the connection opening, a later one of its first byte.
HEAD_TIMEOUT_S = 10.0
#: A body that stops arriving for this long ends the connection.
BODY_IDLE_TIMEOUT_S = 10.0
#: A kept-alive connection idle this long after an answer is closed (uvicorn's default).
KEEP_ALIVE_S = 5

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds of the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._in_head = False
        self._in_body = False
        self._head_bytes = 0
        self._completed = 0
        self._received_any = False
        #: This protocol answered a refusal: the parser's further callbacks are ignored.
        self._refused = False

    # -- the connection ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._received_any = True
        in_head, completed = self._in_head, self._completed
        super().data_received(data)
        if self._refused or self.transport.is_closing():
            return
        # Counted when the piece lay wholly inside the head still open: it continued that head,
        # or the head began at the piece's start (no message ended in it).
        if self._in_head and (in_head or self._completed == completed):
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse_large_head()
                return
        if self._in_body:
            if self._body_timer is not None:
                self._body_timer.cancel()
            self._body_timer = self.loop.call_later(BODY_IDLE_TIMEOUT_S, self._body_stalled)

    # -- parser callbacks --------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._refused:
            return
        super().on_message_begin()
        self._in_head, self._head_bytes = True, 0
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._in_head = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > MAX_HEAD_BYTES:
            self._refuse_large_head()
            return
        self._in_body = True
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._completed += 1
        self._in_body = False
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._in_head:  # a pipelined head has begun: its own bound applies, not keep-alive's
            self._unset_keepalive_if_required()

    # -- bounds ------------------------------------------------------------------------------

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined head behind an answer still being written: wait for that answer.
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timed_out)
            return
        if not self._received_any:
            self.transport.close()  # nothing was asked: nothing to answer
            return
        self._refuse(408, "head_timeout", f"a request head must arrive within {HEAD_TIMEOUT_S:g} s")

    def _body_stalled(self) -> None:
        self._body_timer = None
        if self.transport.is_closing() or not self._in_body:
            return
        if self.flow.read_paused:  # we stopped reading, not the client sending
            self._body_timer = self.loop.call_later(BODY_IDLE_TIMEOUT_S, self._body_stalled)
            return
        self.transport.close()

    def _refuse_large_head(self) -> None:
        self._refuse(431, "head_too_large", f"request heads are limited to {MAX_HEAD_BYTES} bytes")

    def _refuse(self, status: int, code: str, description: str) -> None:
        self._refused = True
        self._cancel_timers()
        body = json.dumps({"error": code, "error_description": description}).encode()
        head = (
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n" % (status, _REASONS[status], len(body))
        )
        self.transport.write(head + body)
        self.transport.close()

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None
