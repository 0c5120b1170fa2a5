"""Client for Herdr's local socket protocol.

The protocol (Herdr 0.9, protocol 22): newline-delimited JSON over a Unix socket, one request
per connection. A request is `{"id", "method", "params"}`; the answer is `{"id", "result"}`
with `result.type` naming its shape, or `{"id", "error": {"code", "message"}}`.
`events.subscribe` answers `{"id", "result": {"type": "subscription_started"}}` and then keeps
the connection open, pushing `{"event", "data"}` lines without an id.

Limits are enforced while reading: a line longer than `max_response_bytes` is refused as soon as
that many bytes have arrived without a newline, so a hostile or broken peer can never make us
buffer more than the cap plus one read chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herdr_mcp.herdr.errors import (
    HerdrProtocolError,
    HerdrRemoteError,
    HerdrRequestTooLarge,
    HerdrTimeout,
    HerdrUnavailable,
)
from herdr_mcp.strict_json import JsonLimitExceeded, JsonLimits, loads_bounded

MAX_LINE_BYTES = 1 << 20
"""Herdr's own per-line limit (1 MiB) on requests; also our default cap on response lines."""
#: Array elements and object members in one response line (a line of 1 MiB could hold 500,000):
#: over ten times what a list of a thousand panes holds.
MAX_RESPONSE_ITEMS = 100_000

DEFAULT_TIMEOUT_S = 5.0
"""Budget for ordinary calls; matches Herdr's own 5 s read timeout."""

DEFAULT_LONG_CALL_TIMEOUT_S = 300.0
"""Budget for a long-lived call (agent.wait, agent.prompt with wait) that gives no timeout_ms."""

_READ_CHUNK = 64 * 1024

_WAITING_METHODS = frozenset({"agent.wait", "pane.wait_for_output", "events.wait"})


def default_socket_path(env: Mapping[str, str] | None = None) -> Path:
    """Where Herdr's socket is, resolved the way Herdr itself resolves it.

    `HERDR_SOCKET_PATH`, else the named session `HERDR_SESSION` under the config dir, else the
    default session `$XDG_CONFIG_HOME/herdr/herdr.sock` (`~/.config/herdr/herdr.sock`).
    """
    environ = os.environ if env is None else env
    explicit = environ.get("HERDR_SOCKET_PATH", "")
    if explicit:
        return Path(explicit).expanduser()
    xdg = environ.get("XDG_CONFIG_HOME", "")
    if xdg and Path(xdg).is_absolute():
        config_root = Path(xdg)
    else:
        home = environ.get("HOME", "")
        config_root = (Path(home) if home else Path.home()) / ".config"
    herdr_dir = config_root / "herdr"
    session = environ.get("HERDR_SESSION", "")
    if session and "/" not in session and session not in (".", ".."):
        return herdr_dir / "sessions" / session / "herdr.sock"
    return herdr_dir / "herdr.sock"


@dataclass(frozen=True)
class HerdrEvent:
    """One pushed event: `name` is Herdr's event name (`pane_created`, `pane.agent_status_changed`)."""

    name: str
    data: dict[str, Any]


class _LineTooLong(Exception):
    pass


class _Connection:
    """One socket connection that reads capped lines and maps transport failures to our errors."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, method: str, max_line: int
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.method = method
        self._max_line = max_line
        # A line's length is capped as it is read (its newline included); its structure when
        # decoded (docs/runtime.md "Parse boundaries").
        self._limits = JsonLimits(max_bytes=max_line + 1, max_items=MAX_RESPONSE_ITEMS)
        self._buffer = bytearray()
        self._scanned = 0
        self.request_sent = False

    @classmethod
    async def open(cls, socket_path: Path, method: str, max_line: int) -> _Connection:
        try:
            reader, writer = await asyncio.open_unix_connection(str(socket_path))
        except FileNotFoundError:
            raise HerdrUnavailable(
                f"No Herdr socket at {socket_path}. Start Herdr (or `herdr-mcp sim`), or point "
                "HERDR_SOCKET_PATH at its socket.",
                method=method,
            ) from None
        except ConnectionRefusedError:
            raise HerdrUnavailable(
                f"Nothing is listening on {socket_path} (a stale socket?). Start Herdr, or point "
                "HERDR_SOCKET_PATH at the running session's socket.",
                method=method,
            ) from None
        except PermissionError:
            raise HerdrUnavailable(
                f"Permission denied opening {socket_path}. Run herdr-mcp as the user who runs Herdr.",
                method=method,
            ) from None
        except OSError as exc:
            raise HerdrUnavailable(
                f"Cannot connect to Herdr at {socket_path}: {exc.strerror or exc}. Check HERDR_SOCKET_PATH.",
                method=method,
            ) from None
        return cls(reader, writer, method, max_line)

    async def send(self, line: bytes) -> None:
        try:
            self._writer.write(line)
            await self._writer.drain()
        except OSError as exc:
            raise HerdrUnavailable(
                f"Herdr closed the connection while {self.method} was being sent ({exc}). "
                "Check that Herdr is still running, then retry.",
                method=self.method,
            ) from None
        self.request_sent = True

    async def read_message(self) -> dict[str, Any] | None:
        """The next non-blank line as a JSON object, or None at a clean end of stream."""
        while True:
            try:
                line = await self._read_line()
            except _LineTooLong:
                raise self.protocol_error(
                    f"Herdr sent a line longer than {self._max_line} bytes; refused without reading it all"
                ) from None
            if line is None:
                return None
            if line.strip():
                return self._decode(line)

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()

    async def _read_line(self) -> bytes | None:
        while True:
            newline = self._buffer.find(b"\n", self._scanned)
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                self._scanned = 0
                return line
            if len(self._buffer) > self._max_line:
                raise _LineTooLong
            self._scanned = len(self._buffer)
            try:
                chunk = await self._reader.read(_READ_CHUNK)
            except OSError as exc:
                raise self.protocol_error(f"the connection failed while reading ({exc})") from None
            if not chunk:
                if self._buffer:
                    raise self.protocol_error("the connection closed in the middle of a line")
                return None
            self._buffer += chunk

    def _decode(self, line: bytes) -> dict[str, Any]:
        try:
            message = loads_bounded(line, self._limits, strict=False)
        except JsonLimitExceeded as exc:
            detail = f"Herdr sent a line past the runtime's bounds ({exc.code}: {exc.message})"
            raise self.protocol_error(detail) from None
        except ValueError:
            raise self.protocol_error("Herdr sent a line that is not valid JSON") from None
        if not isinstance(message, dict):
            raise self.protocol_error("Herdr sent a JSON line that is not an object")
        return message

    def protocol_error(self, detail: str) -> HerdrProtocolError:
        return HerdrProtocolError(
            f"Invalid answer to {self.method}: {detail}. Check that the socket belongs to a "
            "compatible Herdr (protocol 22); re-inspect before retrying a mutation.",
            method=self.method,
            request_sent=self.request_sent,
        )


class HerdrClient:
    """Talks to one Herdr socket: one connection per call, always closed afterwards.

    `call()` raises `HerdrUnavailable`, `HerdrTimeout`, `HerdrProtocolError`,
    `HerdrRequestTooLarge` or `HerdrRemoteError` (all `HerdrError`).
    """

    def __init__(
        self,
        socket_path: Path,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_response_bytes: int = MAX_LINE_BYTES,
        long_call_timeout: float = DEFAULT_LONG_CALL_TIMEOUT_S,
    ) -> None:
        if timeout <= 0 or long_call_timeout <= 0:
            raise ValueError("timeouts must be positive")
        if max_response_bytes <= 0:
            raise ValueError("max_response_bytes must be positive")
        self._socket_path = Path(socket_path)
        self._timeout = timeout
        self._max_response_bytes = max_response_bytes
        self._long_call_timeout = long_call_timeout

    @property
    def socket_path(self) -> Path:
        return self._socket_path

    async def call(
        self, method: str, params: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Send one request and return its `result` object (which carries `type`).

        Without `timeout`, ordinary methods get the client's default budget and long-lived ones
        (agent.wait, agent.prompt with wait) get their own `timeout_ms` plus that default.
        """
        request_params = dict(params or {})
        request_id = _new_request_id()
        line = self._encode(request_id, method, request_params)
        budget = timeout if timeout is not None else self._budget(method, request_params)
        opened: list[_Connection] = []
        try:
            async with asyncio.timeout(budget):
                return await self._exchange(method, request_id, line, opened)
        except TimeoutError:
            sent = bool(opened) and opened[0].request_sent
            raise HerdrTimeout(
                f"Herdr did not answer {method} within {budget:g} s. Check that Herdr is responsive "
                "(`herdr status`); re-inspect before repeating a mutation.",
                method=method,
                request_sent=sent,
            ) from None

    def subscribe(
        self, subscriptions: list[dict[str, Any]]
    ) -> AbstractAsyncContextManager[AsyncIterator[HerdrEvent]]:
        """Open an `events.subscribe` stream; the context yields an async iterator of events.

        Entering raises like `call()` if the subscription is refused. Iterating raises
        `HerdrUnavailable` when Herdr closes the stream and `HerdrProtocolError` on a bad line;
        after either, subscribe again and re-read the snapshot.
        """
        return self._subscription([dict(s) for s in subscriptions])

    @contextlib.asynccontextmanager
    async def _subscription(
        self, subscriptions: list[dict[str, Any]]
    ) -> AsyncIterator[AsyncIterator[HerdrEvent]]:
        method = "events.subscribe"
        request_id = _new_request_id()
        line = self._encode(request_id, method, {"subscriptions": subscriptions})
        opened: list[_Connection] = []
        try:
            try:
                async with asyncio.timeout(self._timeout):
                    connection = await self._open(method, opened)
                    await connection.send(line)
                    result = _result_of(await connection.read_message(), connection, request_id)
            except TimeoutError:
                raise HerdrTimeout(
                    f"Herdr did not acknowledge {method} within {self._timeout:g} s. "
                    "Check that Herdr is responsive (`herdr status`).",
                    method=method,
                    request_sent=bool(opened) and opened[0].request_sent,
                ) from None
            if result["type"] != "subscription_started":
                raise connection.protocol_error(f"expected subscription_started, got {result['type']!r}")
            yield _EventStream(connection)
        finally:
            for connection in opened:
                await connection.close()

    async def _open(self, method: str, opened: list[_Connection]) -> _Connection:
        """Connect, and record the connection in `opened` so the caller can close it and know
        whether the request went out even when a timeout interrupts."""
        connection = await _Connection.open(self._socket_path, method, self._max_response_bytes)
        opened.append(connection)
        return connection

    async def _exchange(
        self, method: str, request_id: str, line: bytes, opened: list[_Connection]
    ) -> dict[str, Any]:
        connection = await self._open(method, opened)
        try:
            await connection.send(line)
            return _result_of(await connection.read_message(), connection, request_id)
        finally:
            await connection.close()

    def _encode(self, request_id: str, method: str, params: dict[str, Any]) -> bytes:
        request = {"id": request_id, "method": method, "params": params}
        line = json.dumps(request, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        if len(line) > MAX_LINE_BYTES:
            raise HerdrRequestTooLarge(
                f"The {method} request is {len(line)} bytes; Herdr accepts at most {MAX_LINE_BYTES} "
                "bytes per line. Send less text per call.",
                method=method,
            )
        return line + b"\n"

    def _budget(self, method: str, params: Mapping[str, Any]) -> float:
        wait_ms = wait_budget_ms(params)
        if wait_ms is not None:
            return max(self._timeout, wait_ms / 1000 + self._timeout)
        if method in _WAITING_METHODS or (
            method == "agent.prompt" and isinstance(params.get("wait"), Mapping)
        ):
            return self._long_call_timeout
        return self._timeout


class _EventStream:
    """The pushed events of one subscription, read one line at a time."""

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection

    def __aiter__(self) -> _EventStream:
        return self

    async def __anext__(self) -> HerdrEvent:
        message = await self._connection.read_message()
        if message is None:
            raise HerdrUnavailable(
                "Herdr closed the event stream. Subscribe again and re-read session.snapshot.",
                method="events.subscribe",
                request_sent=True,
            )
        if "error" in message:
            error = message["error"]
            if not isinstance(error, dict):
                raise self._connection.protocol_error("`error` is not an object")
            raise _remote_error(error, self._connection)
        name, data = message.get("event"), message.get("data")
        if not isinstance(name, str) or not isinstance(data, dict):
            raise self._connection.protocol_error("an event line lacks a string `event` or an object `data`")
        return HerdrEvent(name, data)


def _result_of(message: dict[str, Any] | None, connection: _Connection, request_id: str) -> dict[str, Any]:
    """Check one response against our request and return its result, or raise its error."""
    if message is None:
        raise connection.protocol_error("Herdr closed the connection without answering")
    has_result, has_error = "result" in message, "error" in message
    if has_result == has_error:
        raise connection.protocol_error("the response has neither or both of `result` and `error`")
    response_id = message.get("id")
    # Herdr answers a request it could not parse with id "" and an error; that is still its answer.
    unparsed_request = response_id == "" and has_error
    # A subscription whose probe failed (a pane that does not exist) is answered with the probe's
    # own id, `<request id>:sub:<n>:probe` (src/api/subscriptions.rs): the answer to our request.
    probe = _probe_index(response_id, request_id) if has_error else None
    if response_id != request_id and not unparsed_request and probe is None:
        raise connection.protocol_error(f"the response id {response_id!r} is not our request id")
    if has_error:
        if not isinstance(message["error"], dict):
            raise connection.protocol_error("`error` is not an object")
        error = _remote_error(message["error"], connection)
        error.subscription_index = probe
        raise error
    result = message["result"]
    if not isinstance(result, dict) or not isinstance(result.get("type"), str):
        raise connection.protocol_error("`result` is not an object with a string `type`")
    return result


def _remote_error(error: dict[str, Any], connection: _Connection) -> HerdrRemoteError:
    code, message = error.get("code"), error.get("message", "")
    if not isinstance(code, str) or not code or not isinstance(message, str):
        raise connection.protocol_error("`error` lacks a string `code` and `message`")
    return HerdrRemoteError(code, message, method=connection.method)


def _probe_index(response_id: object, request_id: str) -> int | None:
    """n when `response_id` is `<request_id>:sub:<n>:probe`, else None."""
    if not isinstance(response_id, str):
        return None
    prefix, suffix = f"{request_id}:sub:", ":probe"
    if not (response_id.startswith(prefix) and response_id.endswith(suffix)):
        return None
    number = response_id[len(prefix) : len(response_id) - len(suffix)]
    return int(number) if number.isdigit() and len(number) < 10 else None


def wait_budget_ms(params: Mapping[str, Any]) -> int | None:
    """The longest wait a request's params ask Herdr for, in ms: a top-level `timeout_ms`
    (agent.wait, events.wait, pane.wait_for_output, agent.start) or `wait.timeout_ms`
    (agent.prompt); None when they name none."""
    found: list[int] = []
    for holder in (params, params.get("wait")):
        if isinstance(holder, Mapping):
            value = holder.get("timeout_ms")
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                found.append(value)
    return max(found) if found else None


def _new_request_id() -> str:
    return f"herdr-mcp-{uuid.uuid4().hex}"
