"""The native messaging host: frames from the browser in, forwarded over the runtime's Unix socket,
replies and stream events out (docs/browser-protocol.md section 4).

One asyncio loop, one reader and one writer:

1. The reader takes one frame at a time from stdin. A header announcing more than 1 MiB is
   answered `frame_too_large` and ends the host (exit 2): the stream cannot be resynchronised,
   and the announced body is never read nor allocated. EOF ends the host (exit 0): the browser
   closed the port.
2. Each request or stream runs in its own task, so a slow tool call or an open event stream
   never holds up the others. The runtime's socket and token file are resolved again for each
   (an A/B switch is picked up), and the bearer goes into the request's header and nowhere else:
   not into a frame, not into the log.
3. Every frame to the browser goes through one queue to one writer task, so frames never
   interleave; a message of 1 MiB or more leaves as its chunk frames, one after another.
4. With nothing in flight and no frame for `idle_timeout_s` (10 minutes), the host exits
   (exit 0): Chrome keeps a host alive as long as the port is open, and an extension that forgot
   it must not leave a process behind for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import stat
import sys
import time
from collections.abc import Callable
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

import httpx2

from herdr_mcp.errors import EXIT_OK, EXIT_USAGE, HerdrMcpError, UsageFault
from herdr_mcp.layout import DEFAULT_PORT, Layout
from herdr_mcp.native_host import framing
from herdr_mcp.native_host.protocol import Cancel, Forward, Refused, parse
from herdr_mcp.native_host.target import RuntimeTarget, active_target
from herdr_mcp.strict_json import MESSAGE_LIMITS, JsonLimits, loads_bounded
from herdr_mcp.terminal import error_line
from herdr_mcp.text import clean_json, decode
from herdr_mcp.tokens import TokenFileError, read_token

#: Section 4: the host exits after 10 minutes with no request and no open stream.
IDLE_TIMEOUT_S = 600.0
#: A runtime body is at most 1 MiB (section 2); a reply this large is not the runtime's. The cap
#: bounds the memory one reply can take while it is read, before it is chunked.
MAX_REPLY_BYTES = 32 * 1024 * 1024
#: What of a reply is read as JSON (docs/runtime.md "Parse boundaries"); a reply past these
#: bounds goes to the browser as its text, as any reply that is not JSON.
REPLY_LIMITS = JsonLimits(max_bytes=MAX_REPLY_BYTES, max_items=MESSAGE_LIMITS.max_items)
#: An error body of a stream that did not open is read only this far.
MAX_ERROR_BYTES = 64 * 1024
#: Requests and streams in flight at once; one more is refused rather than queued without bound.
MAX_IN_FLIGHT = 64
#: Frames waiting for the writer (each item is one message's frames): a browser that stops
#: reading slows the forwarding down instead of growing the queue.
WRITE_QUEUE_ITEMS = 32
#: A tool call through /mcp may run for minutes; the runtime bounds its own tools.
REQUEST_TIMEOUT = httpx2.Timeout(connect=5.0, read=300.0, write=30.0, pool=30.0)
#: The runtime sends `: keepalive` every 15 s (section 3): four missed ones and the stream is dead.
STREAM_TIMEOUT = httpx2.Timeout(connect=5.0, read=60.0, write=30.0, pool=30.0)
#: Over the Unix socket the URL's address is not dialled; the MCP SDK's DNS-rebinding guard on
#: /mcp still wants a loopback Host header with a port.
BASE_URL = f"http://127.0.0.1:{DEFAULT_PORT}"


class RuntimeUnavailable(Exception):
    """The runtime cannot be reached (no socket, no token, nothing answers): `runtime_unavailable`."""


class NativeHost:
    """One browser connection: `run()` until EOF, a too-large frame, a closed stdout or idleness."""

    def __init__(
        self,
        *,
        resolve: Callable[[], RuntimeTarget],
        stdin_fd: int,
        stdout_fd: int,
        log: logging.Logger,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ) -> None:
        self._resolve = resolve
        self._stdin_fd = stdin_fd
        self._stdout_fd = stdout_fd
        self._log = log
        self._idle_timeout_s = idle_timeout_s
        self._queue: asyncio.Queue[list[bytes] | None] = asyncio.Queue(WRITE_QUEUE_ITEMS)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._streams: set[str] = set()
        self._ended: set[str] = set()
        self._quiet = asyncio.Event()
        self._quiet.set()
        self._last_frame = 0.0
        self._clients: dict[Path, httpx2.AsyncClient] = {}
        #: The `(code, message)` the host ended with when the browser's input was at fault.
        self.failure: tuple[str, str] | None = None

    async def run(self) -> int:
        """Serve until the browser goes or the host has been idle; the exit status."""
        loop = asyncio.get_running_loop()
        self._last_frame = loop.time()
        reader = asyncio.StreamReader(limit=framing.MAX_INCOMING_BYTES)
        stdin = os.fdopen(self._stdin_fd, "rb", buffering=0, closefd=False)
        stdout = os.fdopen(self._stdout_fd, "wb", buffering=0, closefd=False)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, stdout)
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        writing = asyncio.create_task(self._write(writer), name="writer")
        reading = asyncio.create_task(self._read(reader), name="reader")
        idling = asyncio.create_task(self._idle(), name="idle")
        try:
            await asyncio.wait({writing, reading, idling}, return_when=asyncio.FIRST_COMPLETED)
            status = EXIT_OK
            if reading.done():
                status = reading.result()
            elif idling.done():
                self._log.info("idle for %.0f s with nothing open: exiting", self._idle_timeout_s)
            else:
                self._log.info("stdout closed: the browser went away")
            await self._shutdown(writing)
            return status
        finally:
            for task in (reading, idling, writing):
                task.cancel()
            await asyncio.gather(reading, idling, writing, return_exceptions=True)
            for client in self._clients.values():
                await client.aclose()
            transport.close()

    # -- reading -----------------------------------------------------------------------------

    async def _read(self, reader: asyncio.StreamReader) -> int:
        loop = asyncio.get_running_loop()
        while True:
            try:
                header = await reader.readexactly(framing.LENGTH.size)
            except asyncio.IncompleteReadError:
                self._log.info("stdin closed: the browser went away")
                return EXIT_OK
            self._last_frame = loop.time()
            try:
                length = framing.announced_length(header)
            except framing.FrameTooLarge as exc:
                self._log.warning("frame_too_large: %s; exiting", exc)
                self.failure = ("frame_too_large", str(exc))
                await self._emit({"id": None, "error": {"code": "frame_too_large", "message": str(exc)}})
                return EXIT_USAGE
            try:
                payload = await reader.readexactly(length)
            except asyncio.IncompleteReadError:
                self._log.info("stdin closed inside a frame: the browser went away")
                return EXIT_OK
            try:
                await self._dispatch(payload)
            except Exception:
                # A bug in reading one frame must not end every open request and stream with it.
                self._log.exception("a frame could not be dispatched")
                message = "the native host failed on this frame; see its log"
                await self._emit({"id": None, "error": {"code": "internal_error", "message": message}})

    async def _dispatch(self, payload: bytes) -> None:
        try:
            request = parse(payload)
        except Refused as refused:
            self._log.warning("%s refused: %s", refused.request_id, refused.code)
            await self._emit(refused.reply())
            return
        if isinstance(request, Cancel):
            await self._cancel(request.id)
            return
        if request.id in self._tasks:
            await self._refuse(request.id, "invalid_request", f"request {request.id} is still in flight")
            return
        if len(self._tasks) >= MAX_IN_FLIGHT:
            await self._refuse(request.id, "invalid_request", f"{MAX_IN_FLIGHT} requests are in flight")
            return
        task = asyncio.create_task(self._serve(request), name=request.id)
        self._tasks[request.id] = task
        self._quiet.clear()
        task.add_done_callback(functools.partial(self._done, request.id))

    def _done(self, request_id: str, _: asyncio.Task[None]) -> None:
        self._tasks.pop(request_id, None)
        self._streams.discard(request_id)
        self._ended.discard(request_id)
        if not self._tasks:
            self._last_frame = asyncio.get_running_loop().time()
            self._quiet.set()

    async def _cancel(self, request_id: str) -> None:
        task = self._tasks.get(request_id)
        if task is None or request_id not in self._streams or request_id in self._ended:
            return
        task.cancel()
        self._log.info("%s cancelled", request_id)
        await self._end_stream(request_id, None)

    async def _refuse(self, request_id: str, code: str, message: str) -> None:
        self._log.warning("%s refused: %s", request_id, code)
        await self._emit({"id": request_id, "error": {"code": code, "message": message}})

    # -- forwarding --------------------------------------------------------------------------

    async def _serve(self, request: Forward) -> None:
        """One request or stream; a bug in it still answers the browser (and is logged with its
        traceback), so the extension never waits for a reply that cannot come."""
        try:
            await (self._stream(request) if request.stream else self._forward(request))
        except Exception:
            self._log.exception("%s %s %s failed", request.id, request.method, request.path)
            error = {
                "code": "internal_error",
                "message": "the native host failed on this request; see its log",
            }
            if request.stream:
                await self._end_stream(request.id, error)
            else:
                await self._emit({"id": request.id, "error": error})

    def _client(self) -> tuple[httpx2.AsyncClient, dict[str, str]]:
        """A client on the active runtime's socket and the bearer header; `RuntimeUnavailable`."""
        try:
            target = self._resolve()
        except HerdrMcpError as exc:
            raise RuntimeUnavailable(
                f"which runtime is active cannot be read: {exc.code}: {exc.message}"
            ) from None
        if not target.socket.exists():
            raise RuntimeUnavailable(
                f"no runtime socket at {target.socket}; start the runtime (herdr-mcp serve)"
            )
        try:
            token = read_token(target.token_file)
        except TokenFileError as exc:
            raise RuntimeUnavailable(f"the runtime's token cannot be read: {exc.message}") from None
        client = self._clients.get(target.socket)
        if client is None:
            client = httpx2.AsyncClient(
                transport=httpx2.AsyncHTTPTransport(uds=str(target.socket), trust_env=False),
                base_url=BASE_URL,
                trust_env=False,
                follow_redirects=False,
            )
            self._clients[target.socket] = client
        return client, {"Authorization": f"Bearer {token}"}

    async def _forward(self, request: Forward) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        reply: dict[str, Any]
        try:
            client, headers = self._client()
            headers.update(request.headers)
            if request.body is not None:
                headers["Content-Type"] = "application/json"
            headers["Accept"] = "application/json, text/event-stream"
            async with client.stream(
                request.method,
                request.path,
                params=request.query,
                content=request.body,
                headers=headers,
                timeout=REQUEST_TIMEOUT,
            ) as response:
                data = await _read_capped(response, MAX_REPLY_BYTES)
            reply = {"id": request.id, "status": response.status_code, "body": _body(data)}
            outcome = str(response.status_code)
        except _ReplyTooLarge:
            too_large = f"the runtime's reply exceeds {MAX_REPLY_BYTES} bytes"
            reply = _error(request.id, "reply_too_large", too_large)
            outcome = "reply_too_large"
        except (RuntimeUnavailable, httpx2.TransportError) as exc:
            reply = _error(request.id, "runtime_unavailable", _unavailable(exc))
            outcome = "runtime_unavailable"
        self._log.info(
            "%s %s %s -> %s in %.1f ms", request.id, request.method, request.path, outcome,
            (loop.time() - started) * 1000,
        )  # fmt: skip
        await self._emit(reply)

    async def _stream(self, request: Forward) -> None:
        self._streams.add(request.id)
        error: dict[str, Any] | None = None
        events = 0
        try:
            client, headers = self._client()
            headers["Accept"] = "text/event-stream"
            async with client.stream(
                "GET", request.path, params=request.query, headers=headers, timeout=STREAM_TIMEOUT
            ) as response:
                if response.status_code != 200:
                    refusal = await _read_capped(response, MAX_ERROR_BYTES)
                    error = _runtime_error(response.status_code, refusal)
                else:
                    self._log.info("%s stream %s opened", request.id, request.path)
                    source = httpx2.EventSource(response, max_event_size=framing.MAX_INCOMING_BYTES)
                    async for event in source:
                        events += 1
                        arrived = time.monotonic()
                        data = _body(event.data)
                        await self._emit({"id": request.id, "event": event.event, "data": data})
                        self._relayed(request.id, event.event, data, arrived)
        except _ReplyTooLarge:
            error = {"code": "runtime_unavailable", "message": "the runtime's error body is too large"}
        except (RuntimeUnavailable, httpx2.TransportError) as exc:
            error = {"code": "runtime_unavailable", "message": _unavailable(exc)}
        ending = f": {error['code']}" if error else ""
        self._log.info("%s stream ended after %d events%s", request.id, events, ending)
        await self._end_stream(request.id, error)

    def _relayed(self, request_id: str, name: str, data: Any, arrived: float) -> None:
        """One line per durable event relayed (`agent_output` is not logged: it is frequent and not
        kept), with the CLOCK_MONOTONIC time it arrived from the runtime, so a wake's path can be
        read from the log (benchmarks/wake_bench.py). Written after the writer has had its turn:
        the log is never between an event and the browser."""
        seq = data.get("seq") if isinstance(data, dict) else None
        if name == "agent_output" or not isinstance(seq, int):
            return
        asyncio.get_running_loop().call_soon(
            self._log.info,
            "%s event %s seq %d relayed, arrived at monotonic %.6f",
            request_id,
            name,
            seq,
            arrived,
        )

    async def _end_stream(self, request_id: str, error: dict[str, Any] | None) -> None:
        """The one `{id, end}` of a stream, whether the runtime ended it or the browser did."""
        if request_id in self._ended:
            return
        self._ended.add(request_id)
        end: dict[str, Any] = {"id": request_id, "end": True}
        if error is not None:
            end["error"] = error
        await self._emit(end)

    # -- writing and idling ------------------------------------------------------------------

    async def _emit(self, message: dict[str, Any]) -> None:
        """Queue `message` (its frames together) for the one writer."""
        await self._queue.put(framing.encode(message))

    async def _write(self, writer: asyncio.StreamWriter) -> None:
        """The one writer: frames in queue order, each written whole. Ends when stdout is gone."""
        with contextlib.suppress(ConnectionError):
            while (frames := await self._queue.get()) is not None:
                for frame in frames:
                    writer.write(frame)
                await writer.drain()

    async def _shutdown(self, writing: asyncio.Task[None]) -> None:
        """Stop every request and stream, then let the writer flush what is queued (the
        `frame_too_large` answer) for a moment."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if not writing.done():
            with contextlib.suppress(asyncio.QueueFull):
                self._queue.put_nowait(None)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(writing), timeout=5.0)

    async def _idle(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._quiet.wait()
            remaining = self._last_frame + self._idle_timeout_s - loop.time()
            if remaining <= 0 and not self._tasks:
                return
            # Until the earliest moment the host could be idle long enough; a frame or a task
            # meanwhile moves that moment, so it is checked again then.
            await asyncio.sleep(max(remaining, 0.001))


class _ReplyTooLarge(Exception):
    pass


async def _read_capped(response: httpx2.Response, cap: int) -> bytes:
    data = bytearray()
    async for piece in response.aiter_bytes():
        data += piece
        if len(data) > cap:
            raise _ReplyTooLarge
    return bytes(data)


def _body(data: bytes | str) -> Any:
    """A runtime body as JSON when it is JSON (the protocol's bodies are), else its text; with the
    frames' text rule (bytes not UTF-8 and lone surrogates read as U+FFFD, section 4 "Text")."""
    text = decode(data) if isinstance(data, bytes) else data
    if not text:
        return None
    try:
        return clean_json(loads_bounded(text, REPLY_LIMITS))
    except ValueError:
        return clean_json(text)


def _runtime_error(status: int, data: bytes) -> dict[str, Any]:
    """A stream the runtime refused: its `{"error": {"code", "message"}}` and the HTTP status."""
    body = _body(data)
    found = body.get("error") if isinstance(body, dict) else None
    if isinstance(found, dict) and isinstance(found.get("code"), str):
        return {"code": found["code"], "message": str(found.get("message", "")), "status": status}
    return {"code": "runtime_error", "message": f"the runtime answered HTTP {status}", "status": status}


def _error(request_id: str, code: str, message: str) -> dict[str, Any]:
    return {"id": request_id, "error": {"code": code, "message": message}}


def _unavailable(exc: Exception) -> str:
    if isinstance(exc, RuntimeUnavailable):
        return str(exc)
    if isinstance(exc, httpx2.TimeoutException):
        return f"the runtime did not answer in time ({type(exc).__name__})"
    return f"the runtime did not answer on its socket ({type(exc).__name__}: {exc})"


# -- the process --------------------------------------------------------------------------------

LOG_FILE = "host.log"
#: The log keeps the last ~2 MiB (a line per request): enough to see what happened, bounded.
LOG_BYTES = 1024 * 1024


def open_log(path: Path) -> logging.Logger:
    """The host's logger, writing to `path` (0600, rotated once at `LOG_BYTES`). Chrome shows a
    host's stderr in its own log, so only a log that cannot be opened falls back to stderr, and
    then for warnings only."""
    log = logging.getLogger("herdr_mcp.native_host")
    log.propagate = False
    log.setLevel(logging.INFO)
    for handler in list(log.handlers):
        log.removeHandler(handler)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600))
        handler = RotatingFileHandler(path, maxBytes=LOG_BYTES, backupCount=1, encoding="utf-8")
    except OSError as exc:
        fallback = logging.StreamHandler(sys.stderr)
        fallback.setLevel(logging.WARNING)
        log.addHandler(fallback)
        log.warning("herdr-mcp native-host: cannot open the log %s (%s); warnings go here", path, exc)
        return log
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(message)s"))
    log.addHandler(handler)
    return log


def run_host(*, layout: Layout, origin: str | None, idle_timeout_s: float = IDLE_TIMEOUT_S) -> int:
    """Serve the browser on this process's stdin/stdout until it goes; the exit status.

    The frames leave on a duplicate of stdout, and fd 1 itself is pointed at stderr, so a stray
    print (ours or a library's) can never put bytes into the frame stream. Raises
    `UsageFault("native_host_needs_browser")` when stdin or stdout is not a pipe (or socket), as
    Chrome gives them: a terminal or a file is someone starting the host by hand.
    """
    for stream in (sys.stdin, sys.stdout):
        mode = os.fstat(stream.fileno()).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            raise UsageFault(
                "native_host_needs_browser",
                "Chrome starts the host with pipes on stdin and stdout and talks to it in frames; "
                "to set it up run `herdr-mcp native-host install`",
            )
    frames_out = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    log = open_log(layout.native_host_dir / LOG_FILE)
    log.info("started for %s (config dir %s)", origin or "no origin", layout.config_dir)
    host = NativeHost(
        resolve=lambda: active_target(layout),
        stdin_fd=sys.stdin.fileno(),
        stdout_fd=frames_out,
        log=log,
        idle_timeout_s=idle_timeout_s,
    )
    try:
        status = asyncio.run(host.run())
    finally:
        os.close(frames_out)
    log.info("exiting with status %d", status)
    if host.failure is not None:
        # One line for Chrome's own log (it shows a host's stderr); nothing else goes there.
        print(error_line(*host.failure), file=sys.stderr)
    return status
