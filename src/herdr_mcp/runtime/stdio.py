"""The runtime over stdio: newline-delimited JSON-RPC on the process's stdin and stdout.

The same frozen catalog and `ToolDispatcher` (argument validation, audit log) as the HTTP app
answer tools/list and tools/call; only the framing is ours. The SDK's stdio server hands every
line read and every line written to a worker thread (`anyio.wrap_file`) and runs each message
through several memory streams and task groups: about 1 ms per call before any tool runs
(measured, docs/runtime.md). This loop reads and writes the pipes from the event loop itself
and serialises the tool list once.

Nothing of the `mcp` SDK (nor pydantic, nor the HTTP stack) is imported here: the protocol's
vocabulary and checks are `runtime.protocol`, the server's identity `ServerIdentity`, each held
equal to the SDK's by tests/runtime/test_stdio_protocol.py. The session answers initialize,
server/discover and tools/list from those and the catalog alone; tools/call waits for the
dispatcher, which `herdr-mcp stdio` composes in a worker thread while the handshake is
answered (cli/stdio.py), so a client's first requests do not wait for the tool modules.

What it speaks, in both eras of the protocol (a dual-era server, MCP 2026-07-28
basic/versioning.mdx), request by request rather than locked by the first one (the revision
lets a server serve both eras on one process):
- the handshake revisions (2024-11-05 to 2025-11-25): `initialize`, `notifications/initialized`,
  `ping`, `tools/list`, `tools/call`;
- 2026-07-28, stateless: a request whose `params._meta` carries
  `io.modelcontextprotocol/protocolVersion` is checked as the SDK's own server checks it
  (`protocol.check_envelope`, the ladder of the SDK's `classify_inbound_request`: the envelope,
  then the revision; -32602, or -32022 naming every revision served, both eras) and answered
  `server/discover`, `tools/list` or `tools/call`, each result with `resultType` and the
  server's identity in `_meta`; `initialize` is always the handshake, and `ping`, gone from
  2026-07-28, is -32601 there;
- `notifications/cancelled` in both (the call's task is cancelled and, as the specification
  asks, not answered). Each call is a task, so calls run concurrently and answer in completion
  order. Anything else that expects an answer gets JSON-RPC's `-32601`.

Nothing but JSON-RPC reaches the wire: while serving, the wire moves to private descriptors and
fd 1 is pointed at stderr (stray prints, child processes), fd 0 at /dev/null (a child reading
its stdin would eat requests).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
import sys
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from herdr_mcp import __version__
from herdr_mcp.runtime.identity import INSTRUCTIONS, SERVER_NAME
from herdr_mcp.runtime.protocol import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LATEST_HANDSHAKE_VERSION,
    METHOD_NOT_FOUND,
    MODERN_PROTOCOL_VERSIONS,
    PARSE_ERROR,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
    EnvelopeRejection,
    check_envelope,
    handshake_version,
)
from herdr_mcp.strict_json import MESSAGE_LIMITS, JsonLimitExceeded, loads_bounded
from herdr_mcp.text import dumps

if TYPE_CHECKING:
    from herdr_mcp.runtime.dispatcher import ToolDispatcher

log = logging.getLogger(__name__)

#: One message (one line) at most this long, nested at most 64 deep, with at most this many array
#: elements and object members (`MESSAGE_LIMITS`, docs/runtime.md "Parse boundaries"): room
#: for JSON escaping of the largest tool argument the catalog allows.
MAX_MESSAGE_BYTES = MESSAGE_LIMITS.max_bytes
#: A regular file on stdin is read in slices of this size.
READ_CHUNK_BYTES = 64 * 1024
#: Calls still running when stdin closes or a stop is asked for get this long on their own; then
#: the commands and searches they wait on are stopped (the same grace as `serve`).
CALLS_GRACE_S = 2.0
#: After the commands were stopped, calls get this long to answer before they are cancelled.
CALLS_CANCEL_S = 1.0

RequestId = str | int

#: What an unsupported-revision error names: the stateless revisions, then the handshake ones.
SUPPORTED_VERSIONS = (*MODERN_PROTOCOL_VERSIONS, *reversed(HANDSHAKE_PROTOCOL_VERSIONS))


@dataclass(frozen=True)
class Wire:
    """The two ends of the transport: a reader of lines and a writer of bytes."""

    reader: asyncio.StreamReader
    write: Callable[[bytes], Any]
    drain: Callable[[], Any]


class StdioSession:
    """One MCP connection over a pair of byte streams: the tools of `catalog`, called through
    `dispatcher` once it is there (a future: tools/call waits for it, nothing else does)."""

    def __init__(
        self,
        catalog: list[dict[str, Any]],
        dispatcher: asyncio.Future[ToolDispatcher],
        wire: Wire,
        identity: ServerIdentity | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self._wire = wire
        self._write_lock = asyncio.Lock()
        self._calls: dict[RequestId, asyncio.Task[None]] = {}
        identity = identity if identity is not None else ServerIdentity()
        self._capabilities = identity.capabilities()
        self._server_info = identity.server_info()
        self._instructions = identity.instructions
        # The tool list never changes in a process: the frozen catalog serialised once per era,
        # in the members and values the HTTP app's SDK server answers (2026-07-28 results also
        # carry the server's identity, `_stamp`).
        self._stamp = {SERVER_INFO_META_KEY: identity.server_info()}
        self._tools_json = _compact(tools_list_result(catalog))
        self._modern_tools_json = _compact({**tools_list_result(catalog), "_meta": self._stamp})
        self._discover = {
            "supportedVersions": list(MODERN_PROTOCOL_VERSIONS),
            "capabilities": identity.capabilities(modern=True),
            **({"instructions": self._instructions} if self._instructions else {}),
            # The cache hints the HTTP runtime's discover carries: stale at once, this client only.
            "ttlMs": 0,
            "cacheScope": "private",
            "resultType": "complete",
            "_meta": self._stamp,
        }

    @property
    def calls_in_flight(self) -> int:
        return len(self._calls)

    async def serve(self) -> None:
        """Answer messages until the reader reaches end of file."""
        while True:
            line = await self._read_line()
            if line is None:
                return
            if line.strip():
                await self._handle(line)

    async def finish(self, stop_work: Callable[[], Any]) -> None:
        """Let calls in flight answer: `CALLS_GRACE_S` on their own, then `stop_work()` (which
        stops what they wait on), then `CALLS_CANCEL_S` before the rest are cancelled."""
        pending = set(self._calls.values())
        if pending:
            _, pending = await asyncio.wait(pending, timeout=CALLS_GRACE_S)
        if pending:
            await stop_work()
            _, pending = await asyncio.wait(pending, timeout=CALLS_CANCEL_S)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def _read_line(self) -> bytes | None:
        reader = self._wire.reader
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial or None
        except asyncio.LimitOverrunError:
            await self._discard_overlong()
            return b""
        return line

    async def _discard_overlong(self) -> None:
        """Skip a line longer than `MAX_MESSAGE_BYTES` and say so (its id is unknowable)."""
        reader = self._wire.reader
        while True:
            try:
                await reader.readuntil(b"\n")
            except asyncio.LimitOverrunError as exc:
                await reader.readexactly(exc.consumed)
                continue
            except asyncio.IncompleteReadError:
                pass
            break
        await self._send_error(
            None,
            INVALID_REQUEST,
            f"message longer than {MAX_MESSAGE_BYTES} bytes; send smaller requests",
            {"code": "json_too_large", "limit": MAX_MESSAGE_BYTES},
        )

    async def _handle(self, line: bytes) -> None:
        try:
            message = loads_bounded(line, MESSAGE_LIMITS, strict=False)
        except JsonLimitExceeded as exc:
            # Its id is unknowable without parsing it; the bound's code says what to change.
            await self._send_error(
                None, INVALID_REQUEST, f"{exc.message}; send smaller requests", exc.to_dict()
            )
            return
        except ValueError as exc:
            await self._send_error(None, PARSE_ERROR, f"not JSON: {exc}")
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            # Batches (JSON arrays) left MCP in revision 2025-06-18.
            await self._send_error(None, INVALID_REQUEST, "expected one JSON-RPC 2.0 message object per line")
            return
        method = message.get("method")
        if method is None:
            return  # a response: this server sends no requests, so there is nothing it answers
        if "id" not in message:
            self._notification(method, message.get("params"))
            return
        request_id = message["id"]
        if not _valid_id(request_id) or not isinstance(method, str):
            await self._send_error(
                None, INVALID_REQUEST, "a request needs a string method and a string or number id"
            )
            return
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            await self._send_error(request_id, INVALID_PARAMS, "params must be an object")
            return
        if method != "initialize" and _has_modern_envelope(params):
            await self._modern_request(request_id, method, params or {})
        else:
            await self._request(request_id, method, params or {})

    async def _request(self, request_id: RequestId, method: str, params: dict[str, Any]) -> None:
        if method == "tools/call":
            await self._start_call(request_id, params)
        elif method == "tools/list":
            await self._send_raw(
                f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},"result":{self._tools_json}}}'
            )
        elif method == "ping":
            await self._send_result(request_id, {})
        elif method == "initialize":
            await self._initialize(request_id, params)
        else:
            await self._send_error(request_id, METHOD_NOT_FOUND, f"method not found: {method}")

    async def _modern_request(self, request_id: RequestId, method: str, params: dict[str, Any]) -> None:
        """A 2026-07-28 request: its envelope checked, then answered (module docstring)."""
        route = check_envelope(params)
        if isinstance(route, EnvelopeRejection):
            data = route.data
            if route.code == UNSUPPORTED_PROTOCOL_VERSION and isinstance(data, dict):
                # Every revision served, both eras, newest first (as the Edge names them): a
                # client without 2026-07-28 learns that initialize is there for it.
                data = {**data, "supported": list(SUPPORTED_VERSIONS)}
            await self._send_error(request_id, route.code, route.message, data)
        elif method == "tools/call":
            await self._start_call(request_id, params, modern=True)
        elif method == "tools/list":
            await self._send_raw(
                f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},"result":{self._modern_tools_json}}}'
            )
        elif method == "server/discover":
            await self._send_result(request_id, self._discover)
        else:
            message = f"method not found at {route}: {method}"
            await self._send_error(request_id, METHOD_NOT_FOUND, message)

    async def _initialize(self, request_id: RequestId, params: dict[str, Any]) -> None:
        requested = handshake_version(params)
        if requested is None:  # not a shape plainly valid: the SDK's model decides, in its words
            try:
                requested = _sdk_handshake_version(params)
            except ValueError as exc:
                await self._send_error(request_id, INVALID_PARAMS, f"invalid initialize params: {exc}")
                return
        version = requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": self._capabilities,
            "serverInfo": self._server_info,
        }
        if self._instructions:
            result["instructions"] = self._instructions
        await self._send_result(request_id, result)

    def _notification(self, method: Any, params: Any) -> None:
        if method == "notifications/cancelled" and isinstance(params, dict):
            task = self._calls.get(params.get("requestId"))  # type: ignore[arg-type]
            if task is not None:
                task.cancel()
        # notifications/initialized and anything else need nothing from us.

    async def _start_call(self, request_id: RequestId, params: dict[str, Any], modern: bool = False) -> None:
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or not (arguments is None or isinstance(arguments, dict)):
            message = "tools/call needs a string name and an object of arguments"
            await self._send_error(request_id, INVALID_PARAMS, message)
            return
        if request_id in self._calls:
            message = f"request id {request_id!r} is already in use by a call in flight"
            await self._send_error(request_id, INVALID_REQUEST, message)
            return
        meta = params.get("_meta")
        task = asyncio.create_task(
            self._call(request_id, name, arguments, meta if isinstance(meta, dict) else None, modern)
        )
        self._calls[request_id] = task
        task.add_done_callback(lambda _: self._calls.pop(request_id, None))

    async def _call(
        self,
        request_id: RequestId,
        name: str,
        arguments: Mapping[str, Any] | None,
        meta: dict[str, Any] | None = None,
        modern: bool = False,
    ) -> None:
        try:
            # Shielded: a cancelled call must not cancel the dispatcher every call waits for.
            dispatcher = await asyncio.shield(self._dispatcher)
        except asyncio.CancelledError:
            return  # cancelled by the client (not answered) or at shutdown
        except Exception as exc:  # the runtime could not be composed: the process ends with it
            await self._send_error(request_id, INTERNAL_ERROR, f"the runtime did not start: {exc}")
            return
        try:
            result = await dispatcher.call(name, arguments, session=None, meta=meta)
        except asyncio.CancelledError:
            return  # cancelled by the client (not answered) or at shutdown
        answer = dict(result)
        if modern:
            answer["_meta"] = {**answer.get("_meta", {}), **self._stamp}
        await self._send_result(request_id, answer)

    async def _send_result(self, request_id: RequestId, result: dict[str, Any]) -> None:
        await self._send({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def _send_error(
        self, request_id: RequestId | None, code: int, message: str, data: Any = None
    ) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        await self._send({"jsonrpc": "2.0", "id": request_id, "error": error})

    async def _send(self, message: dict[str, Any]) -> None:
        await self._send_raw(dumps(message, ensure_ascii=False, separators=(",", ":")))

    async def _send_raw(self, text: str) -> None:
        async with self._write_lock:
            try:
                self._wire.write(text.encode("utf-8") + b"\n")
                await self._wire.drain()
            except (BrokenPipeError, ConnectionResetError):
                # The client is gone; stdin's end of file follows and ends the session.
                log.debug("client closed the wire before an answer could be written")


def _has_modern_envelope(params: Any) -> bool:
    """Whether a request is of the 2026-07-28 era: its `_meta` carries the reserved protocol
    version key, which no handshake-era request has (a bare `_meta` is not enough: those carry
    `progressToken` there). The key alone decides, so a half-built envelope is refused -32602."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _sdk_handshake_version(params: dict[str, Any]) -> str:
    """The SDK's reading of `initialize` params `handshake_version` left undecided (imported
    here, on the first such initialize only); raises ValueError (pydantic's) when invalid."""
    from mcp_types import InitializeRequestParams

    version: str = InitializeRequestParams.model_validate(params).protocol_version
    return version


@dataclass(frozen=True)
class ServerIdentity:
    """Who answers: what the HTTP app's SDK server (`runtime.server.build_mcp_server`) says of
    itself, written down (tests/runtime/test_stdio_protocol.py holds them equal)."""

    name: str = SERVER_NAME
    version: str = __version__
    instructions: str | None = INSTRUCTIONS

    def server_info(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version}

    def capabilities(self, modern: bool = False) -> dict[str, Any]:
        """The tools capability only (its list never changes); the handshake era's also names
        no extensions."""
        tools = {"tools": {"listChanged": False}}
        return tools if modern else {**tools, "extensions": {}}


def tools_list_result(catalog: list[dict[str, Any]]) -> dict[str, Any]:
    """tools/list's result: the frozen catalog's tools as they are, with the members the SDK's
    `ListToolsResult` adds (no caching, every tool in one page)."""
    return {"ttlMs": 0, "cacheScope": "private", "tools": catalog, "resultType": "complete"}


@contextlib.asynccontextmanager
async def claimed_stdio() -> AsyncIterator[Wire]:
    """The process's stdin and stdout as the wire, kept to ourselves.

    fd 0 and fd 1 are duplicated onto private descriptors; then, until the context ends, fd 0 is
    pointed at /dev/null and fd 1 at stderr, so nothing else in the process (a print, a child
    process) can read from or write to the wire. Pipes are read and written by the event loop; a regular file
    (`herdr-mcp stdio < requests.jsonl > answers.jsonl`) is read and written directly.
    """
    sys.stdout.flush()
    wire_in = _private_duplicate(0)
    wire_out = _private_duplicate(1)
    # Our own copies to give back at the end: the transports close the wire's when they end.
    saved_in = _private_duplicate(0)
    saved_out = _private_duplicate(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_MESSAGE_BYTES)
    in_file = os.fdopen(wire_in, "rb", buffering=0)
    out_file = os.fdopen(wire_out, "wb", buffering=0)
    transports: list[asyncio.BaseTransport] = []
    try:
        if _pollable(wire_in):
            read_transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), in_file
            )
            transports.append(read_transport)
        else:  # a regular file or /dev/null: epoll refuses them, so a thread reads
            threading.Thread(
                target=_feed, args=(in_file, reader, loop), name="stdio-file-reader", daemon=True
            ).start()
        wire: Wire
        if not _pollable(wire_out):  # written directly: a file never blocks for long
            wire = Wire(reader=reader, write=out_file.write, drain=_nothing)
        else:
            write_transport, protocol = await loop.connect_write_pipe(
                asyncio.streams.FlowControlMixin, out_file
            )
            transports.append(write_transport)
            writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
            wire = Wire(reader=reader, write=writer.write, drain=writer.drain)
        yield wire
    finally:
        # Given back, so what is said after serving (a start failure's one line or, under
        # --json, its JSON error) reaches the real stdout.
        sys.stdout.flush()
        for saved, standard in ((saved_in, 0), (saved_out, 1)):
            os.dup2(saved, standard)
            os.close(saved)
        for transport in transports:
            transport.close()
        in_file.close()
        out_file.close()


async def _nothing() -> None:
    return None


def _pollable(fd: int) -> bool:
    """Whether the event loop can watch `fd` (a pipe, a socket or a terminal)."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


def _feed(source: Any, reader: asyncio.StreamReader, loop: asyncio.AbstractEventLoop) -> None:
    """Hand what `source` holds to `reader`, in the loop's thread, then its end."""
    try:
        while chunk := source.read(READ_CHUNK_BYTES):
            loop.call_soon_threadsafe(reader.feed_data, chunk)
    except (OSError, ValueError):
        pass  # closed under us at shutdown
    with contextlib.suppress(RuntimeError):  # the loop is already closed
        loop.call_soon_threadsafe(reader.feed_eof)


def _private_duplicate(fd: int) -> int:
    """A close-on-exec duplicate of `fd` above the standard descriptors."""
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
