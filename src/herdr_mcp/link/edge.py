"""The link's outbound side: one WebSocket to the Edge, kept open while the link runs.

When this workstation is paired (`link/edge_device.py`), `herdr-mcp link` dials
`<edge>/link/connect` with `Authorization: Device <id>.<secret>` (a header, never the URL) and
speaks protocol version 1 (docs/edge-protocol.md; the frames are `link/edge_frames.py`). It runs
in a thread of its own with its own asyncio loop, beside the link's threaded HTTP server: the
local path never waits on it.

1. `hello` with the runtime identity of the active generation; then `hello_ack` within the
   silence limit, else the connection is dropped. The link follows the `heartbeat_s`,
   `silence_limit_s` and `max_frame_bytes` that `hello_ack` names.
2. A `heartbeat` every `heartbeat_s`, each carrying the identity read again from the
   generations' status and control files (the router's `ActivePointer`): an A/B activation shows
   up in the next heartbeat, on the same connection.
3. No frame at all for `silence_limit_s`: close 1001 and reconnect.
4. `tool_request`: a 2026-07-28 MCP `tools/call` through the router (`McpForwarder.exchange`):
   the active generation, a lease held until its answer is read, sent exactly once, never
   retried. Its answer goes back as `tool_result` (or `tool_result_chunk` frames past the frame
   cap), a failure as `tool_error` with the delivery state the router knows. The exchange with the
   generation runs on this thread's loop too (`UpstreamPool.request_async`): a frame in, a request
   out, an answer in, a frame out, with no hand-over to another thread on the way.
5. `cancel`: the call in flight is abandoned by closing its connection to the generation, which
   is how the 2026-07-28 protocol cancels (it drops `notifications/cancelled` sent over
   HTTP); the answer is one `cancel_ack` (`not_delivered` when the call had not been handed to
   the router yet, `delivered` when its answer had gone out, else `delivery_unknown`) and no
   `tool_result` or `tool_error` for that id.
6. The connection drops: every call in flight is abandoned the same way (the Edge has answered
   it `delivery_unknown` and never resends). Reconnect after 1 s doubling to 6 s, plus a
   random 0-50 % (so at most 9 s: the link is back within 10 s of the Edge answering again,
   however long it was away); the doubling starts over once a connection lived 60 s. An Edge
   that refuses the device (401 or 403: unpaired on the Edge, a wrong secret) is asked again
   only every 5 minutes (plus the jitter), and `link status` says `refused`.
7. Stopping (SIGTERM): new `tool_request`s are answered `link_stopping` (`not_delivered`), the
   calls in flight get the link's grace, then the connection closes 1001.

The connection goes through the proxy the environment names for the Edge's host (`proxies.py`:
`HTTPS_PROXY`/`ALL_PROXY` for wss, `NO_PROXY`; never for a loopback Edge), as an HTTP CONNECT
tunnel (or SOCKS, when python-socks is installed) with TLS end to end to the Edge.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from herdr_mcp import __version__
from herdr_mcp.errors import DELIVERY_UNKNOWN
from herdr_mcp.link.edge_device import EdgeDevice
from herdr_mcp.link.edge_frames import (
    MAX_FRAME_BYTES,
    MAX_RESULT_BYTES,
    PROTOCOL,
    SILENCE_LIMIT_S,
    Cancel,
    ControlResult,
    FrameInvalid,
    HelloAck,
    Outcome,
    ToolRequest,
    answer_outcome,
    encode,
    error_outcome,
    parse_frame,
    tool_error_frame,
)
from herdr_mcp.link.pointer import runtime_identity
from herdr_mcp.link.router import LinkRefusal, McpForwarder, UpstreamBroken
from herdr_mcp.proxies import proxy_for

log = logging.getLogger("herdr_mcp.link.edge")

#: The MCP revision whose requests carry no session (one POST, one answer; cancel = close).
MCP_PROTOCOL = "2026-07-28"
#: Ids of answered calls kept per connection, to tell a late `cancel` it came after the answer.
FINISHED_IDS = 1024
#: A control request (connector consent and grants) the Edge does not answer within this fails.
CONTROL_TIMEOUT_S = 15.0
CONTROL_METHODS = ("consent.list", "consent.approve", "consent.deny", "grant.list", "grant.revoke")
_TOOL_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./")


@dataclass(frozen=True)
class Reconnect:
    """docs/edge-protocol.md: 1 s doubling to 6 s, a random 0-50 % added, reset after 60 s lived;
    every `refused_s` while the Edge refuses the device."""

    first_s: float = 1.0
    max_s: float = 6.0
    jitter: float = 0.5
    stable_after_s: float = 60.0
    refused_s: float = 300.0

    def delay(self, failures: int, draw: float) -> float:
        """The wait before reconnect number `failures` (from 0); `draw` is uniform in [0, 1)."""
        base: float = min(self.max_s, self.first_s * 2.0 ** min(failures, 32))
        return base * (1 + self.jitter * draw)


def _now() -> str:
    return _iso(time.time())


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _control_failed(code: str, message: str) -> LinkRefusal:
    """A control request the link could not carry (the Edge's own errors are answers, not this)."""
    return LinkRefusal(503, code, message)


@dataclass
class _Call:
    """A `tool_request` in flight (all of it lives on the link's loop)."""

    id: str
    deadline: float
    cancelled: bool = False
    #: The connection it came on is gone: nothing more is sent for it.
    orphaned: bool = False
    #: Handed to the router: from here on it may reach the generation.
    handed: bool = False
    #: The task serving it, cancelled to give the exchange up (a cancel, a dropped connection).
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    def give_up(self) -> None:
        """Abandon the exchange of a call handed to the router (its connection to the generation
        closes); one not handed yet sees `cancelled`/`orphaned` when its task first runs."""
        if self.handed and self.task is not None:
            self.task.cancel()


class _Finished:
    """The ids of the last `size` calls answered on a connection; `in` is a set lookup (a deque's
    is a scan of all of them, which every tool_request made)."""

    def __init__(self, size: int) -> None:
        self._order: deque[str] = deque()
        self._ids: set[str] = set()
        self._size = size

    def add(self, request_id: str) -> None:
        if request_id in self._ids:
            return
        self._order.append(request_id)
        self._ids.add(request_id)
        if len(self._order) > self._size:
            self._ids.discard(self._order.popleft())

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._ids


class EdgeLink:
    """The outbound connection (module docstring); `start()` runs it in its own thread."""

    def __init__(
        self,
        device: EdgeDevice,
        forwarder: McpForwarder,
        *,
        reconnect: Reconnect = Reconnect(),
        draw: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
        open_timeout_s: float = 10.0,
    ) -> None:
        self._device = device
        self._forwarder = forwarder
        self._reconnect = reconnect
        self._draw = draw
        self._clock = clock
        self._open_timeout_s = open_timeout_s
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {
            "state": "disconnected",
            "edge_url": device.edge_url,
            "device_id": device.device_id,
            "connection_id": None,
            "last_hello_ack": None,
            "last_heartbeat_sent": None,
            "last_frame_received": None,
            "reconnects": 0,
            "last_backoff_s": None,
            "last_error": None,
            "calls_in_flight": 0,
        }
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Bound to the link's loop on first use there (set from other threads through the loop).
        self._stopping = asyncio.Event()
        self._ws: ClientConnection | None = None
        self._calls: dict[str, _Call] = {}
        #: When the last frame came (time.time()): shown by `status()`, formatted only then.
        self._last_frame_at: float | None = None
        self._controls: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._control_seq = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._run, name="link-edge", daemon=True)
        self._ready = threading.Event()
        self._draining = threading.Event()
        self._opened_at: float | None = None

    # -- from other threads -------------------------------------------------------------------

    def start(self) -> EdgeLink:
        self._thread.start()
        self._ready.wait(10)
        return self

    def begin_stop(self) -> None:
        """Take no new `tool_request` (each is answered `link_stopping`, `not_delivered`)."""
        self._draining.set()

    def stop(self, grace_s: float = 0.0, cut_short: Callable[[], bool] = lambda: False) -> None:
        """Take no new calls, give those in flight up to `grace_s` (less once `cut_short()`), then
        close the connection (1001) and end the thread; calls still in flight are abandoned."""
        self._draining.set()
        deadline = time.monotonic() + grace_s
        while self._calls and time.monotonic() < deadline and not cut_short():
            time.sleep(0.02)
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(5)

    def status(self) -> dict[str, Any]:
        """The Edge state for `/health` and `herdr-mcp link status` (no secret)."""
        with self._lock:
            state = {**self._state, "calls_in_flight": len(self._calls)}
        heard = self._last_frame_at
        if heard is not None:
            state["last_frame_received"] = _iso(heard)
        return state

    def control(
        self, method: str, params: dict[str, Any], timeout_s: float = CONTROL_TIMEOUT_S
    ) -> dict[str, Any]:
        """Send a `control_request` and wait for its `control_result`: `{"result": ...}` or
        `{"error": {code, message}}` as the Edge answered. Raises `LinkRefusal` (503
        `edge_not_connected`, `edge_timeout`, `method_not_found`)."""
        if method not in CONTROL_METHODS:
            raise _control_failed(
                "method_not_found", f"{method!r} is not one of {', '.join(CONTROL_METHODS)}"
            )
        loop = self._loop
        if loop is None or self._ws is None:
            raise _control_failed("edge_not_connected", self._not_connected())
        future = asyncio.run_coroutine_threadsafe(self._control(method, params, timeout_s), loop)
        try:
            return future.result(timeout_s + 5)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise _control_failed("edge_timeout", f"the Edge did not answer {method} in time") from None

    def _not_connected(self) -> str:
        error = self.status()["last_error"]
        return "the link is not connected to the Edge" + (f" (last error: {error})" if error else "")

    # -- the loop -----------------------------------------------------------------------------

    def _set(self, **values: Any) -> None:
        with self._lock:
            self._state.update(values)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._ready.set()
        failures = 0
        while not self._stopping.is_set():
            self._set(state="connecting")
            self._opened_at = None
            refused = False
            try:
                await self._connection()
            except (OSError, TimeoutError, WebSocketException, FrameInvalid) as exc:
                refused = _refused_device(exc)
                self._set(last_error=_describe(exc))
                log.warning("Edge connection: %s", _describe(exc))
            except Exception as exc:  # a bug must not end the Edge side for good: log it, reconnect
                self._set(last_error=_describe(exc))
                log.exception("Edge connection failed unexpectedly")
            self._set(state="refused" if refused else "disconnected", connection_id=None)
            if self._stopping.is_set():
                break
            opened = self._opened_at
            if opened is not None and self._clock() - opened >= self._reconnect.stable_after_s:
                failures = 0
            if refused:
                delay = self._reconnect.refused_s * (1 + self._reconnect.jitter * self._draw())
            else:
                delay = self._reconnect.delay(failures, self._draw())
                failures += 1
            with self._lock:
                self._state["reconnects"] += 1
                self._state["last_backoff_s"] = round(delay, 3)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

    async def _connection(self) -> None:
        """One connection, from dialling to its end (`_opened_at`: when its `hello_ack` came)."""
        target = urlsplit(self._device.connect_url)
        async with connect(
            self._device.connect_url,
            additional_headers={"Authorization": self._device.authorization},
            user_agent_header=f"herdr-mcp-link/{__version__}",
            compression=None,
            proxy=proxy_for(target.scheme, target.hostname or ""),
            open_timeout=self._open_timeout_s,
            ping_interval=None,  # the protocol's heartbeats do this
            max_size=MAX_FRAME_BYTES,  # a larger frame closes 1009
            close_timeout=2,
        ) as ws:
            identity = await asyncio.to_thread(self._identity)
            hello = {"type": "hello", "protocol": PROTOCOL, "device_id": self._device.device_id}
            await ws.send(encode({**hello, "link_version": __version__, "runtime": identity}))
            ack = await self._hello_ack(ws)
            self._opened_at = self._clock()
            self._ws = ws
            self._set(state="connected", connection_id=ack.connection_id, last_hello_ack=_now())
            stop = asyncio.create_task(self._stopping.wait())
            tasks: list[asyncio.Task[Any]] = [
                stop,
                asyncio.create_task(self._heartbeats(ws, ack)),
                asyncio.create_task(self._read(ws, ack)),
            ]
            try:
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in tasks:
                    task.cancel()
                for task in done:
                    error = None if task.cancelled() else task.exception()
                    if error is not None:
                        raise error
                if stop in done:
                    await ws.close(1001, "link stopping")
            finally:
                self._ws = None
                self._orphan_all()

    async def _hello_ack(self, ws: ClientConnection) -> HelloAck:
        try:
            text = await asyncio.wait_for(ws.recv(), SILENCE_LIMIT_S)
        except TimeoutError:
            await ws.close(1001, "no hello_ack")
            raise
        frame = parse_frame(text)
        if not isinstance(frame, HelloAck):
            await ws.close(1008, "expected hello_ack")
            raise FrameInvalid("the Edge's first frame was not hello_ack")
        self._last_frame_at = time.time()
        return frame

    def _identity(self) -> dict[str, Any]:
        return runtime_identity(self._forwarder.pointer.current())

    async def _heartbeats(self, ws: ClientConnection, ack: HelloAck) -> None:
        seq = 0
        while True:
            await asyncio.sleep(ack.heartbeat_s)
            seq += 1
            identity = await asyncio.to_thread(self._identity)
            await ws.send(encode({"type": "heartbeat", "seq": seq, "runtime": identity}))
            self._set(last_heartbeat_sent=_now())

    async def _read(self, ws: ClientConnection, ack: HelloAck) -> None:
        finished = _Finished(FINISHED_IDS)
        while True:
            try:
                async with asyncio.timeout(ack.silence_limit_s):  # no task per frame, as wait_for makes
                    text = await ws.recv()
            except TimeoutError:
                await ws.close(1001, "silence")
                raise TimeoutError(f"no frame from the Edge for {ack.silence_limit_s:g} s") from None
            self._last_frame_at = time.time()  # a float: formatting it per frame cost 4 % of a call
            try:
                frame = parse_frame(text)
            except FrameInvalid as exc:
                await ws.close(1008, str(exc)[:120])
                raise
            if isinstance(frame, ToolRequest):
                self._start_call(ws, frame, finished, ack.max_frame_bytes)
            elif isinstance(frame, Cancel):
                await self._cancel(ws, frame, finished)
            elif isinstance(frame, ControlResult):
                waiting = self._controls.pop(frame.id, None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(
                        {"result": frame.result} if frame.error is None else {"error": frame.error}
                    )
            # heartbeat, hello_ack again, unknown types: hearing them is all (the silence clock)

    # -- tool calls ---------------------------------------------------------------------------

    def _start_call(self, ws: ClientConnection, frame: ToolRequest, finished: _Finished, cap: int) -> None:
        if frame.id in self._calls or frame.id in finished:
            error = tool_error_frame(
                frame.id, "request_id_in_use", "this id was already used on this connection", "not_delivered"
            )
            self._spawn(_send(ws, [error]))
            return
        if self._draining.is_set():
            error = tool_error_frame(
                frame.id, "link_stopping", "the link is stopping; send it again", "not_delivered"
            )
            self._spawn(_send(ws, [error]))
            return
        call = _Call(frame.id, self._clock() + max(0, frame.deadline_ms) / 1000)
        self._calls[frame.id] = call
        call.task = self._spawn(self._serve_call(ws, frame, call, finished, cap))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self._tasks.add(task)  # the loop keeps only a weak reference
        task.add_done_callback(self._tasks.discard)
        return task

    async def _serve_call(
        self, ws: ClientConnection, frame: ToolRequest, call: _Call, finished: _Finished, cap: int
    ) -> None:
        try:
            outcome = await self._call(frame, call, cap)
        except asyncio.CancelledError:
            if not call.cancelled:
                raise  # the connection dropped or the link stops: nothing is sent for it
            # The Edge's cancel gave the exchange up while the generation worked: acknowledged.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            outcome = Outcome([], DELIVERY_UNKNOWN)
        except Exception:  # a bug: the Edge still gets an answer, not a wait until the deadline
            log.exception("serving tool_request %s failed", frame.id)
            outcome = error_outcome(
                frame.id, "link_internal_error", "the link failed; it may have run", DELIVERY_UNKNOWN
            )
        finally:
            self._calls.pop(frame.id, None)
            finished.add(frame.id)
        if call.orphaned:
            return
        if call.cancelled:
            await _send(
                ws, [encode({"type": "cancel_ack", "id": frame.id, "delivery_state": outcome.delivery_state})]
            )
        else:
            await _send(ws, outcome.frames)

    async def _call(self, frame: ToolRequest, call: _Call, cap: int) -> Outcome:
        """The tool call through the router, once; raises CancelledError when given up."""
        if call.cancelled or call.orphaned:
            return Outcome([], "not_delivered")
        left_s = call.deadline - self._clock()
        if left_s < 0:
            return error_outcome(
                frame.id, "deadline_exceeded", "the deadline passed before the call was sent", "not_delivered"
            )
        if not frame.tool or not set(frame.tool) <= _TOOL_NAME_CHARS:
            return error_outcome(
                frame.id, "tool_unknown", f"no tool is named {frame.tool!r}", "not_delivered"
            )
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": frame.tool,
                "arguments": frame.arguments,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MCP_PROTOCOL,
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": {
                        "name": "herdr-mcp-link-edge",
                        "version": __version__,
                    },
                },
            },
        }
        headers = [
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
            (b"mcp-protocol-version", MCP_PROTOCOL.encode()),
            (b"mcp-method", b"tools/call"),
            (b"mcp-name", frame.tool.encode()),
        ]
        call.handed = True
        try:
            async with asyncio.timeout(left_s):
                _, status, data = await self._forwarder.exchange(
                    headers, json.dumps(body).encode(), frame.tool, MAX_RESULT_BYTES
                )
        except LinkRefusal as refusal:
            return _refused(frame.id, refusal)
        except UpstreamBroken as exc:
            return error_outcome(frame.id, DELIVERY_UNKNOWN, str(exc), DELIVERY_UNKNOWN)
        except TimeoutError:
            return error_outcome(
                frame.id,
                "deadline_exceeded",
                "the deadline passed while the runtime worked; it may have run",
                DELIVERY_UNKNOWN,
            )
        return answer_outcome(frame.id, status, data, cap)

    async def _cancel(self, ws: ClientConnection, frame: Cancel, finished: _Finished) -> None:
        call = self._calls.get(frame.id)
        if call is not None:
            call.cancelled = True  # its task answers cancel_ack once the exchange is given up
            call.give_up()
            return
        state = "delivered" if frame.id in finished else "not_delivered"
        await _send(ws, [encode({"type": "cancel_ack", "id": frame.id, "delivery_state": state})])

    def _orphan_all(self) -> None:
        for call in list(self._calls.values()):
            call.orphaned = True
            call.give_up()
        for waiting in self._controls.values():
            if not waiting.done():
                waiting.set_exception(
                    _control_failed("edge_not_connected", "the connection to the Edge dropped")
                )
        self._controls.clear()

    # -- control requests ---------------------------------------------------------------------

    async def _control(self, method: str, params: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        ws = self._ws
        if ws is None:
            raise _control_failed("edge_not_connected", self._not_connected())
        self._control_seq += 1
        request_id = f"ctl-{self._control_seq}"
        waiting: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._controls[request_id] = waiting
        try:
            await ws.send(
                encode({"type": "control_request", "id": request_id, "method": method, "params": params})
            )
            return await asyncio.wait_for(waiting, timeout_s)
        except TimeoutError:
            raise _control_failed(
                "edge_timeout", f"the Edge did not answer {method} within {timeout_s:g} s"
            ) from None
        except ConnectionClosed:
            raise _control_failed("edge_not_connected", "the connection to the Edge dropped") from None
        finally:
            self._controls.pop(request_id, None)


def _refused_device(exc: BaseException) -> bool:
    """The Edge turned this device down (401/403 before the upgrade): asking again soon is noise."""
    return isinstance(exc, InvalidStatus) and exc.response.status_code in (401, 403)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, InvalidStatus):
        return f"the Edge refused the connection: HTTP {exc.response.status_code}"
    return f"{type(exc).__name__}: {exc}"[:300]


async def _send(ws: ClientConnection, frames: list[str]) -> None:
    with contextlib.suppress(ConnectionClosed):  # the Edge answers the pending call itself
        for text in frames:
            await ws.send(text)


def _refused(request_id: str, refusal: LinkRefusal) -> Outcome:
    if refusal.code == "not_delivered":
        return error_outcome(request_id, refusal.reason or "not_delivered", refusal.message, "not_delivered")
    if refusal.code == "result_too_large":
        return error_outcome(request_id, "result_too_large", refusal.message, "delivered")
    return error_outcome(
        request_id, DELIVERY_UNKNOWN, f"{refusal.message} ({refusal.reason})", DELIVERY_UNKNOWN
    )
