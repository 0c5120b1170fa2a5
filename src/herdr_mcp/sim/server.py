"""The simulator's socket server: Herdr's wire protocol in front of a `World`.

One request per connection (src/api/server.rs): newline-delimited JSON, a 1 MiB line limit (a
longer line closes the connection unanswered), a 5 s wait for that line, then one answer — or,
for `events.subscribe`, an ack and event lines. Requests are checked as Herdr's serde would
(`sim.wire`, `sim.params`); the handlers live in `sim.methods`, by area.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from herdr_mcp.sim import methods
from herdr_mcp.sim.agents import AgentRunner
from herdr_mcp.sim.clock import Clock
from herdr_mcp.sim.config import (
    SCRIPT_STATES,
    AgentConfig,
    AgentScript,
    PaneConfig,
    SimConfig,
    SimulatorError,
    TabConfig,
    WorkspaceConfig,
)
from herdr_mcp.sim.hub import EventHub
from herdr_mcp.sim.model import Agent, HerdrFailure, Pane, Tab, Workspace
from herdr_mcp.sim.params import methods_of, validator_for
from herdr_mcp.sim.subscriptions import ProbeFailed, activate
from herdr_mcp.sim.waits import Disconnected, Waits
from herdr_mcp.sim.wire import BadRequest, encode, error_answer, parse_request, send
from herdr_mcp.sim.world import World

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 1 << 20
"""Herdr: src/api/server.rs MAX_INITIAL_REQUEST_BYTES."""
READ_TIMEOUT_S = 5.0
"""Herdr: src/api/server.rs INITIAL_REQUEST_TIMEOUT (not scaled: a client's deadline)."""
MAX_UNIX_PATH_BYTES = 107
LATE_CONNECTION_TURNS = 5

T = TypeVar("T")


@dataclass(frozen=True)
class Fault:
    code: str | None
    message: str


class Connection:
    """One client connection after its request line: knows when the client hung up."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._closed = False
        self._watch = asyncio.get_running_loop().create_task(self._watch_eof(reader))

    async def _watch_eof(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(Exception):
            while await reader.read(4096):
                pass
        self._closed = True

    def closed(self) -> bool:
        return self._closed

    def end(self) -> None:
        self._watch.cancel()


class Simulator:
    """A Herdr server on a Unix socket, with real directories, real shells and scripted agents.

    Build it from a `SimConfig`, then `await start()` / `await stop()` (or `async with`). The test
    API (`add_workspace`, `set_agent_status`, `inject_fault`, ...) runs on the simulator's loop;
    from another thread use `SimulatorThread`.
    """

    def __init__(self, config: SimConfig, socket_path: Path | str) -> None:
        self.config = config
        self._socket_path = Path(socket_path)
        self.clock = Clock(config.time_scale)
        self.hub = EventHub()
        self.world = World(config.version, config.protocol, self.hub)
        self.world.socket_path = str(self._socket_path)
        self.runners: dict[str, AgentRunner] = {}
        self._faults: dict[str, Fault] = {}
        self._server: asyncio.Server | None = None
        self._socket_identity: tuple[int, int] | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._check = validator_for(config.protocol)
        self._methods = methods_of(config.protocol)
        self._handlers = methods.registry()
        self.timers: set[asyncio.TimerHandle] = set()
        for workspace in config.workspaces:
            self.build_workspace(workspace)

    @property
    def socket_path(self) -> Path:
        return self._socket_path

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def replays_lifecycle(self) -> bool:
        """Protocol 20 replays the retained lifecycle events to a new subscriber; 22 does not."""
        return self.config.protocol < 22

    def supported_methods(self) -> frozenset[str]:
        """Every wire method of the simulator's protocol (its reference's methods; some answered
        with a refusal). Any other method is an unknown method (invalid_request)."""
        return self._methods

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Listen on the socket (0600), start the panes' shells and the agents."""
        if self._server is not None:
            raise SimulatorError("the simulator is already running")
        sock = self._bind()
        try:
            self._server = await asyncio.start_unix_server(
                self._on_connection, sock=sock, limit=MAX_LINE_BYTES
            )
        except BaseException:
            sock.close()
            self._remove_socket_file()
            raise
        self.world.live = True
        for pane in self.world.ordered_panes():
            self.world.start_process(pane)
            if pane.agent is not None:
                self.runner(pane).start()

    async def stop(self) -> None:
        """Stop listening, drop connections, stop agents, reap every pane's process."""
        server, self._server = self._server, None
        if server is not None:
            loop = asyncio.get_running_loop()
            for listening in server.sockets:
                loop.remove_reader(listening.fileno())
            await asyncio.sleep(0)
            server.close()
        for _ in range(LATE_CONNECTION_TURNS + 1):
            late = list(self._connections)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
            await asyncio.sleep(0)
        if server is not None:
            await server.wait_closed()
        for timer in self.timers:
            timer.cancel()
        self.timers.clear()
        for runner in self.runners.values():
            await runner.stop()
        self.world.stop_processes()
        self._remove_socket_file()

    async def __aenter__(self) -> Simulator:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- test and embedding API ---------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return self.world.snapshot()

    def add_workspace(self, config: WorkspaceConfig) -> str:
        workspace = self.build_workspace(config)
        self.world.announce_workspace(workspace)
        return workspace.workspace_id

    def add_tab(self, workspace_id: str, config: TabConfig | None = None) -> str:
        workspace = self._lookup(lambda: self.world.workspace(workspace_id))
        tab = self.build_tab(workspace, config or TabConfig())
        self.world.announce_tab(tab)
        return tab.tab_id

    def add_pane(self, tab_or_workspace_id: str, config: PaneConfig | None = None) -> str:
        """Split a new pane into a tab (or a workspace's active tab); returns its id."""
        world = self.world
        if tab_or_workspace_id in world.workspaces:
            workspace = world.workspaces[tab_or_workspace_id]
            tab = workspace.tabs[workspace.active_tab]
        else:
            tab = self._lookup(lambda: world.tab(tab_or_workspace_id))
        pane = self.split_pane(tab, tab.focused_pane_id, config or PaneConfig(), "right", None)
        world.emit("pane_created", {"pane": world.pane_info(pane)})
        world.emit_layout(tab)
        return pane.pane_id

    def add_agent(self, pane_id: str, config: AgentConfig) -> None:
        """A fake agent appears in a shell pane (Herdr's pane_agent_detected)."""
        pane = self._lookup(lambda: self.world.pane(pane_id))
        if pane.agent is not None:
            raise SimulatorError(f"pane {pane_id} already runs an agent")
        self.world.check_agent_name(config.name)
        pane.agent = Agent(config.kind, config.script, config.status, name=config.name)
        self.world.emit(
            "pane_agent_detected",
            {"pane_id": pane.pane_id, "workspace_id": pane.workspace_id, "agent": config.kind},
        )
        self.start_runner(pane)

    def set_script(self, target: str, script: AgentScript) -> None:
        pane = self._lookup(lambda: self.world.resolve_agent(target))
        if pane.agent is not None:
            pane.agent.script = script

    def set_agent_status(self, target: str, status: str) -> None:
        """Force an agent's status: stops its running script and drops queued prompts."""
        if status not in SCRIPT_STATES:
            raise SimulatorError(f"status must be one of {', '.join(SCRIPT_STATES)}")
        pane = self._lookup(lambda: self.world.resolve_agent(target))
        self.runner(pane).interrupt(status)

    def prompts(self, target: str) -> list[str]:
        """The prompts an agent took so far (each line an Enter submitted to it), in order."""
        pane = self._lookup(lambda: self.world.resolve_agent(target))
        return list(pane.agent.prompts) if pane.agent is not None else []

    def append_output(self, pane_id: str, text: str) -> None:
        self.world.append_output(self._lookup(lambda: self.world.pane(pane_id)), text)

    def close_pane(self, pane_id: str) -> None:
        pane = self._lookup(lambda: self.world.pane(pane_id))
        runner = self.runners.pop(pane_id, None)
        if runner is not None:
            runner.cancel()
        self.world.close_pane(pane)

    def rekey_pane(self, pane: Pane, new_id: str) -> None:
        """A pane moved to another workspace gets a new id; its agent runner follows it."""
        runner = self.runners.pop(pane.pane_id, None)
        self.world.rekey_pane(pane, new_id)
        if runner is not None:
            self.runners[new_id] = runner

    def pane_pids(self) -> dict[str, int]:
        """The pid of each pane's shell (for tests checking that processes are reaped)."""
        return {p.pane_id: p.process.pid for p in self.world.ordered_panes() if p.process is not None}

    def inject_fault(
        self, method: str, *, code: str = "internal_error", message: str | None = None, hang: bool = False
    ) -> None:
        if method not in self.supported_methods():
            raise SimulatorError(f"unknown method {method!r}")
        self._faults[method] = Fault(None if hang else code, message or f"simulated failure of {method}")

    def clear_faults(self, method: str | None = None) -> None:
        if method is None:
            self._faults.clear()
        else:
            self._faults.pop(method, None)

    # -- building (also used by the handlers) -------------------------------------------

    def build_workspace(self, config: WorkspaceConfig) -> Workspace:
        workspace = self.world.new_workspace(config.cwd, config.label)
        for tab_config in config.tabs or (TabConfig(),):
            self.build_tab(workspace, tab_config)
        return workspace

    def build_tab(self, workspace: Workspace, config: TabConfig) -> Tab:
        panes = config.panes or (PaneConfig(),)
        first = panes[0]
        tab = self.world.new_tab(
            workspace, config.label, {"cwd": first.cwd, "label": first.label, "agent": first.agent}
        )
        self.start_runner(self.world.panes[tab.focused_pane_id])
        anchor = tab.focused_pane_id
        for pane_config in panes[1:]:
            anchor = self.split_pane(tab, anchor, pane_config, "right", None).pane_id
        return tab

    def split_pane(
        self, tab: Tab, target: str, config: PaneConfig, direction: str, ratio: float | None,
        env: dict[str, str] | None = None,
    ) -> Pane:  # fmt: skip
        from herdr_mcp.sim import layout

        workspace = self.world.workspaces[tab.workspace_id]
        pane = self.world.new_pane(workspace, tab.tab_id, config.cwd, config.label, config.agent, env)
        tab.root = layout.split_leaf(tab.root, target, pane.pane_id, direction, ratio or layout.DEFAULT_RATIO)
        tab.zoomed = False
        self.start_runner(pane)
        return pane

    def start_runner(self, pane: Pane) -> None:
        if pane.agent is not None and self._server is not None:
            self.runner(pane).start()

    def runner(self, pane: Pane) -> AgentRunner:
        runner = self.runners.get(pane.pane_id)
        if runner is None:
            runner = self.runners[pane.pane_id] = AgentRunner(self.world, pane)
        return runner

    def later(self, herdr_ms: float, action: Callable[[], None]) -> None:
        """Run `action` after a Herdr delay (scaled), unless the simulator stops first."""
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self.timers.discard(handle)
            action()

        handle = loop.call_later(self.clock.seconds(herdr_ms), fire)
        self.timers.add(handle)

    @staticmethod
    def _lookup(find: Callable[[], T]) -> T:
        try:
            return find()
        except HerdrFailure as exc:
            raise SimulatorError(exc.message) from None

    # -- socket -------------------------------------------------------------------------

    def _bind(self) -> socket.socket:
        path = self._socket_path
        if len(os.fsencode(path)) > MAX_UNIX_PATH_BYTES:
            raise SimulatorError(
                f"socket path {path} is longer than {MAX_UNIX_PATH_BYTES} bytes; "
                "use a shorter one (e.g. under /tmp)"
            )
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if path.is_symlink() or path.exists():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise SimulatorError(f"{path} exists and is not a socket; refusing to replace it")
            if _socket_is_live(path):
                raise SimulatorError(
                    f"{path} is already served by a running process; choose another socket path"
                )
            path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            os.chmod(path, 0o600)
            info = path.stat()
        except OSError as exc:
            sock.close()
            raise SimulatorError(f"cannot listen on {path}: {exc.strerror or exc}") from None
        self._socket_identity = (info.st_dev, info.st_ino)
        sock.setblocking(False)
        return sock

    def _remove_socket_file(self) -> None:
        identity, self._socket_identity = self._socket_identity, None
        with contextlib.suppress(FileNotFoundError):
            info = self._socket_path.lstat()
            if identity == (info.st_dev, info.st_ino):
                self._socket_path.unlink()

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, BrokenPipeError, asyncio.CancelledError, Disconnected):
            pass
        except Exception:
            log.exception("simulator connection failed")
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                line = await reader.readline()
        except (TimeoutError, ValueError):  # no line in time, or a line over 1 MiB: unanswered
            return
        if not line.strip():
            return
        try:
            request_id, method, params = parse_request(line.strip(), self._methods, self._check)
        except BadRequest as bad:
            await send(writer, error_answer("", "invalid_request", str(bad)))
            return
        fault = self._faults.get(method)
        if fault is not None:
            if fault.code is None:
                await asyncio.Event().wait()
            await send(writer, error_answer(request_id, fault.code or "internal_error", fault.message))
            return
        connection = Connection(reader)
        try:
            if method == "events.subscribe":
                await self._stream_events(request_id, params, writer, connection)
            else:
                await send(writer, await self._answer(request_id, method, params, connection))
        finally:
            connection.end()

    async def _answer(
        self, request_id: str, method: str, params: dict[str, Any], connection: Connection
    ) -> dict[str, Any]:
        waits = Waits(self.world, self.clock, lambda p: methods.agents.prompt_now(self, p), connection.closed)
        try:
            handler = self._handlers.get(method, methods.session.not_implemented)
            return {"id": request_id, "result": await handler(self, waits, request_id, params)}
        except HerdrFailure as failure:
            return error_answer(request_id, failure.code, failure.message)

    async def _stream_events(
        self, request_id: str, params: dict[str, Any], writer: asyncio.StreamWriter, connection: Connection
    ) -> None:
        """Herdr: src/api/server.rs stream_subscriptions."""
        try:
            active = activate(self.world, request_id, params["subscriptions"], self.replays_lifecycle)
        except ProbeFailed as failed:
            await send(writer, failed.answer)
            return
        await send(writer, {"id": request_id, "result": {"type": "subscription_started"}})
        while not connection.closed():
            for subscription in active:
                event = subscription.poll()
                if event is not None:
                    writer.write(encode(event))
            await writer.drain()
            await self.clock.poll()


def _socket_is_live(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True
