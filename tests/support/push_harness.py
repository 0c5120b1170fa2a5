"""The runtime app served by a real uvicorn on loopback TCP and on a real Unix socket, in the test's
event loop, with a Herdr simulator thread behind it; and an SSE reader for `/push/events`.

`push_runtime(...)` composes the runtime exactly as `herdr-mcp serve` does (`Services.create`,
`build_app`, `bind_loopback`, `bind_ipc_socket`) but with `PushSettings` of the test's choosing
(short poll and keepalive intervals, a small stream queue), which `serve` does not expose.
`EventReader` reads one stream line by line and parses its events; it never sleeps, it waits on
the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import uvicorn

from herdr_mcp.loopback import bind_loopback
from herdr_mcp.runtime.app import build_app
from herdr_mcp.runtime.config import RuntimeConfig
from herdr_mcp.runtime.dispatcher import ToolDispatcher
from herdr_mcp.runtime.ipc import bind_ipc_socket
from herdr_mcp.runtime.push import PushSettings
from herdr_mcp.runtime.services import Services
from herdr_mcp.sim import (
    AgentConfig,
    AgentScript,
    PaneConfig,
    SimConfig,
    SimulatorThread,
    TabConfig,
    WorkspaceConfig,
)
from tests.support.waiting import DEADLINE_S, wait_until_async

TOKEN = "push-test-" + "t" * 32
#: Fast enough that a test sees transitions and output within a second or two.
FAST = PushSettings(poll_interval=0.1, lease_ttl=2.0, tail_interval=0.05, keepalive=30.0)


@dataclass
class ServedRuntime:
    services: Services
    tcp_base: str
    socket_path: Path
    token: str = TOKEN

    def tcp(self, **headers: str) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            base_url=self.tcp_base,
            headers={"Authorization": f"Bearer {self.token}", **headers},
            timeout=DEADLINE_S,
            trust_env=False,
        )

    def unix(self, **headers: str) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            transport=httpx2.AsyncHTTPTransport(uds=str(self.socket_path)),
            base_url="http://localhost",
            headers={"Authorization": f"Bearer {self.token}", **headers},
            timeout=DEADLINE_S,
            trust_env=False,
        )

    def client(self, via: str, **headers: str) -> httpx2.AsyncClient:
        return self.unix(**headers) if via == "unix" else self.tcp(**headers)


class _QuietServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Any:  # the test process keeps its own signal handling
        yield


@contextlib.asynccontextmanager
async def push_runtime(
    herdr_socket: Path, config_dir: Path, socket_path: Path, settings: PushSettings = FAST
) -> AsyncIterator[ServedRuntime]:
    """The runtime on 127.0.0.1:<free port> and on `socket_path`, until the block ends."""
    config = RuntimeConfig(config_dir=config_dir, herdr_socket=herdr_socket, port=0, push=settings)
    services = Services.create(config)
    dispatcher = ToolDispatcher(services)
    app = build_app(services, TOKEN, dispatcher)
    tcp = bind_loopback("127.0.0.1", 0)
    ipc = bind_ipc_socket(socket_path)
    server = _QuietServer(
        uvicorn.Config(app, lifespan="on", log_level="warning", timeout_graceful_shutdown=2)
    )
    task = asyncio.create_task(server.serve(sockets=[tcp, ipc.sock]))
    try:
        await wait_until_async(lambda: server.started or task.done(), "uvicorn to start")
        if task.done():
            task.result()
            raise RuntimeError("uvicorn stopped before it started")
        port = tcp.getsockname()[1]
        yield ServedRuntime(services, f"http://127.0.0.1:{port}", socket_path)
    finally:
        services.push.hub.close()
        server.should_exit = True
        await task
        ipc.close()
        dispatcher.audit.close()
        services.state.close()


@dataclass
class Event:
    name: str
    data: dict[str, Any]
    id: str | None


@dataclass
class EventReader:
    """Events of one `/push/events` response, read as they arrive."""

    response: httpx2.Response
    comments: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lines = self.response.aiter_lines()

    async def next(self, timeout: float = DEADLINE_S) -> Event:
        async with asyncio.timeout(timeout):
            name, data, ident = None, None, None
            async for line in self._lines:
                if line.startswith(":"):
                    self.comments.append(line[1:].strip())
                elif line.startswith("event: "):
                    name = line[len("event: ") :]
                elif line.startswith("id: "):
                    ident = line[len("id: ") :]
                elif line.startswith("data: "):
                    data = json.loads(line[len("data: ") :])
                elif line == "" and name is not None and data is not None:
                    return Event(name, data, ident)
            raise EOFError("the stream ended")

    async def until(self, predicate: Any, what: str, timeout: float = DEADLINE_S) -> Event:
        """The next event for which `predicate(event)` holds (others are skipped)."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    event = await self.next()
                    if predicate(event):
                        return event
        except TimeoutError:
            raise AssertionError(f"no event within {timeout} s: {what}") from None

    async def collect_until(self, predicate: Any, timeout: float = DEADLINE_S) -> list[Event]:
        """Every event up to and including the first for which `predicate` holds."""
        seen: list[Event] = []
        async with asyncio.timeout(timeout):
            while True:
                event = await self.next()
                seen.append(event)
                if predicate(event):
                    return seen


@contextlib.asynccontextmanager
async def event_stream(client: httpx2.AsyncClient, query: str = "") -> AsyncIterator[EventReader]:
    async with client.stream("GET", "/push/events" + query) as response:
        assert response.status_code == 200, await response.aread()
        yield EventReader(response)


def two_agent_config(base: Path, script: AgentScript | None = None) -> SimConfig:
    """w1 (`api`): agents `coder` (w1:p1) and `tester` (w1:p2); w2 (`web`): agent `reviewer`;
    each plays `script` when prompted (the simulator's default when None)."""
    script = script or AgentScript.default()
    api, web = base / "api", base / "web"
    api.mkdir(exist_ok=True)
    web.mkdir(exist_ok=True)
    return SimConfig(
        (
            WorkspaceConfig(
                cwd=api,
                label="api",
                tabs=(
                    TabConfig(
                        panes=(
                            PaneConfig(label="coder", agent=AgentConfig("coder", "claude", script=script)),
                            PaneConfig(label="tester", agent=AgentConfig("tester", "codex", script=script)),
                        )
                    ),
                ),
            ),
            WorkspaceConfig(
                cwd=web,
                label="web",
                tabs=(TabConfig(panes=(PaneConfig(agent=AgentConfig("reviewer", "pi", script=script)),)),),
            ),
        )
    )


def pane_of(sim: SimulatorThread, agent: str) -> str:
    return str(next(a["pane_id"] for a in sim.snapshot()["agents"] if a["name"] == agent))


async def ready(runtime: ServedRuntime) -> None:
    """The watcher has listed the agents once (its first reads are baselines, not news)."""
    watcher = runtime.services.push.watcher
    await wait_until_async(lambda: watcher.polls >= 1 and watcher.leader, "the push watcher's first poll")


async def pushed(runtime: ServedRuntime, after: int, wanted: list[tuple[str, str]], what: str) -> int:
    """Wait until the hub has published, after seq `after`, the durable push events `wanted`
    ((event name, agent) pairs, in order, nothing else of the push log between them); the seq of
    the last. The hub's cursor alone says nothing of which events it reached: the log's seq
    numbers are shared with the Herdr events recorded beside them, which may arrive first."""

    def found() -> int | None:
        hub = runtime.services.push.hub
        if hub.cursor <= after:
            return None
        events = runtime.services.push.states.read(after, upto=hub.cursor).events
        if [(event.name, event.data.get("agent")) for event in events[: len(wanted)]] != wanted:
            return None
        return events[len(wanted) - 1].seq

    return await wait_until_async(found, what)


def is_durable(event: Event) -> bool:
    return event.name in ("agent_working", "agent_settled", "agent_gone")
