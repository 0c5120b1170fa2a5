"""A recording proxy for Herdr's socket protocol, for conformance tests.

`RecordingProxy(upstream, listen)` listens on a Unix socket, and for every connection a Herdr
client opens there it opens one to `upstream` and relays bytes both ways, recording each line:
the request line the client sent (Herdr takes one request per connection), and every line the
server sent back, split into answers (lines with an `id`) and pushed event lines
(`{"event", "data"}`, no `id`). Each connection is kept with the method of its request, so a test
can check every line against `herdr_mcp.herdr.reference`:

    async with RecordingProxy(sim_socket, tmp / "proxy.sock") as proxy:
        client = HerdrClient(proxy.socket_path)
        ...
    for connection in proxy.connections: ...

The proxy relays unparsed bytes (graphics frames after a `pane.graphics.stream` request too);
lines that are not JSON are recorded in `undecodable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

_LIMIT = 4 * 1024 * 1024


@dataclass
class RecordedConnection:
    """One client connection: its request line, the answers and the events the server sent."""

    request: dict[str, Any] | None = None
    answers: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    undecodable: list[bytes] = field(default_factory=list)

    @property
    def method(self) -> str:
        method = (self.request or {}).get("method")
        return method if isinstance(method, str) else ""


class RecordingProxy:
    def __init__(self, upstream: Path, listen: Path) -> None:
        self.upstream = upstream
        self.socket_path = listen
        self.connections: list[RecordedConnection] = []
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> RecordingProxy:
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.socket_path), limit=_LIMIT)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    # -- counts ---------------------------------------------------------------------------------

    def requests(self) -> list[dict[str, Any]]:
        return [c.request for c in self.connections if c.request is not None]

    def answers(self) -> list[tuple[str, dict[str, Any]]]:
        return [(c.method, answer) for c in self.connections for answer in c.answers]

    def events(self) -> list[dict[str, Any]]:
        return [event for c in self.connections for event in c.events]

    # -- relaying -------------------------------------------------------------------------------

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        record = RecordedConnection()
        self.connections.append(record)
        try:
            upstream_reader, upstream_writer = await asyncio.open_unix_connection(
                str(self.upstream), limit=_LIMIT
            )
        except OSError:
            client_writer.close()
            self._tasks.discard(task)
            return
        try:
            await asyncio.gather(
                self._pump(client_reader, upstream_writer, record, from_client=True),
                self._pump(upstream_reader, client_writer, record, from_client=False),
            )
        finally:
            for writer in (upstream_writer, client_writer):
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
            self._tasks.discard(task)

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        record: RecordedConnection,
        *,
        from_client: bool,
    ) -> None:
        first = True
        try:
            while True:
                if from_client and not first:
                    # After the request line a client may only send raw frames (graphics): relay.
                    chunk = await reader.read(65536)
                    if not chunk:
                        break
                    writer.write(chunk)
                    await writer.drain()
                    continue
                line = await reader.readline()
                if not line:
                    break
                writer.write(line)
                await writer.drain()
                self._record(line, record, from_client=from_client and first)
                first = False
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            if from_client:
                with contextlib.suppress(Exception):
                    writer.write_eof()
            else:
                writer.close()

    @staticmethod
    def _record(line: bytes, record: RecordedConnection, *, from_client: bool) -> None:
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError:
            record.undecodable.append(line)
            return
        if not isinstance(message, dict):
            record.undecodable.append(line)
        elif from_client:
            record.request = message
        elif "id" not in message and "event" in message:
            record.events.append(message)
        else:
            record.answers.append(message)
