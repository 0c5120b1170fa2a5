"""The `mcp` SDK's client held to one MCP protocol revision, with what it sent and received kept.

`session_at(transport, revision, wire)` connects a `ClientSession` over any SDK transport
(`streamable_http_client(...)`, `stdio_client(...)`) so that it speaks exactly `revision`:
- `"2026-07-28"`: the SDK client pinned to the stateless revision (`Client(mode="2026-07-28")`):
  no `server/discover`, no `initialize`, `_meta` and the routing headers on every request;
- `"auto"`: the SDK's default, which probes `server/discover` at 2026-07-28 and falls back to
  `initialize` on anything but a DiscoverResult or a modern error;
- `"2025-11-25"`: `Client(mode="legacy")`, whose `initialize` offers the newest handshake revision;
- an older handshake revision (`"2025-06-18"`, ...): the SDK's `ClientSession` whose `initialize`
  offers that one (the SDK's own `initialize` always offers 2025-11-25), then
  `notifications/initialized`, as the SDK's handshake does.

`Wire` is every JSON-RPC message the client wrote and every one it read, as JSON, so a test can
show which methods went out and that no fallback happened.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import mcp_types as types
from mcp import Client
from mcp.client.session import ClientSession
from mcp.shared.message import SessionMessage
from mcp_types.version import LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS

#: The revisions the tests hold a client to: stateless pinned, the SDK's default probe, the newest
#: handshake revision and an older one.
REVISIONS = ("2026-07-28", "auto", "2025-11-25", "2025-06-18")


@dataclass
class Wire:
    """The JSON-RPC messages one client wrote (`sent`) and read (`received`)."""

    sent: list[dict[str, Any]] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)

    def methods(self) -> list[str]:
        """The method of every request and notification sent, in order."""
        return [message["method"] for message in self.sent if "method" in message]

    def errors(self) -> list[dict[str, Any]]:
        """Every JSON-RPC error the client read."""
        return [message["error"] for message in self.received if "error" in message]


def _json(item: SessionMessage) -> dict[str, Any]:
    dumped: dict[str, Any] = item.message.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


class _Recorded:
    """A stream of the SDK's transport, passed through, its messages noted in a `Wire`."""

    def __init__(self, stream: Any, wire: Wire) -> None:
        self._stream = stream
        self._wire = wire

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> Self:
        await self._stream.__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool | None:
        result: bool | None = await self._stream.__aexit__(kind, error, trace)
        return result


class _RecordedWrite(_Recorded):
    async def send(self, item: SessionMessage) -> None:
        self._wire.sent.append(_json(item))
        await self._stream.send(item)


class _RecordedRead(_Recorded):
    @property
    def last_context(self) -> Any:
        return getattr(self._stream, "last_context", None)

    def _seen(self, item: Any) -> Any:
        if isinstance(item, SessionMessage):
            self._wire.received.append(_json(item))
        return item

    async def receive(self) -> Any:
        return self._seen(await self._stream.receive())

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        return self._seen(await self._stream.__anext__())


@contextlib.asynccontextmanager
async def recorded(transport: Any, wire: Wire) -> AsyncIterator[tuple[Any, Any]]:
    """`transport`'s streams, every message through them kept in `wire`."""
    async with transport as (read, write):
        yield _RecordedRead(read, wire), _RecordedWrite(write, wire)


@contextlib.asynccontextmanager
async def session_at(transport: Any, revision: str, wire: Wire) -> AsyncIterator[ClientSession]:
    """A connected SDK `ClientSession` over `transport` speaking `revision` (module docstring)."""
    if revision in (*MODERN_PROTOCOL_VERSIONS, "auto", LATEST_HANDSHAKE_VERSION):
        mode = "legacy" if revision == LATEST_HANDSHAKE_VERSION else revision
        async with Client(recorded(transport, wire), mode=mode) as client:
            yield client.session
        return
    async with recorded(transport, wire) as (read, write), ClientSession(read, write) as session:
        offer = types.InitializeRequestParams(
            protocol_version=revision,
            capabilities=types.ClientCapabilities(),
            client_info=types.Implementation(name="revision-pinned", version="1"),
        )
        result = await session.send_request(types.InitializeRequest(params=offer), types.InitializeResult)
        assert result.protocol_version == revision, result
        session.adopt(result)
        await session.send_notification(types.InitializedNotification())
        yield session


def check_list_and_call(wire: Wire, revision: str) -> None:
    """What a client held to `revision` sent for one tools/list and one tools/call, with no
    fallback: pinned at 2026-07-28 neither probe nor handshake, `auto` the probe and no
    handshake, a handshake revision `initialize` offering exactly it; and no error read."""
    methods = wire.methods()
    if revision in MODERN_PROTOCOL_VERSIONS:
        assert methods == ["tools/list", "tools/call"], methods
    elif revision == "auto":
        assert methods == ["server/discover", "tools/list", "tools/call"], methods
    else:
        assert methods == ["initialize", "notifications/initialized", "tools/list", "tools/call"], methods
        assert wire.sent[0]["params"]["protocolVersion"] == revision, wire.sent[0]
        assert wire.received[0]["result"]["protocolVersion"] == revision, wire.received[0]
    assert wire.errors() == []


def negotiated(revision: str) -> str:
    """The revision a session held to `revision` ends up speaking with a server of both eras."""
    return "2026-07-28" if revision == "auto" else revision
