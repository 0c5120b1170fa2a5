"""The simulator's socket server: Herdr's wire protocol in front of a `World`.

One request per connection, newline-delimited JSON, 1 MiB line limit and a 5 s read timeout,
exactly as Herdr. Params are validated against `herdr_mcp.herdr.methods.NATIVE_METHODS`, so the
table and the simulator cannot drift apart. The lines themselves (requests, answers, event
subscribers) are `sim.wire`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from jsonschema import Draft202012Validator

from herdr_mcp.herdr.methods import NATIVE_METHODS
from herdr_mcp.sim.agents import INTERRUPT_KEYS, AgentRunner
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
from herdr_mcp.sim.wire import BadRequest, Subscriber, encode, error_answer, parse_request, send
from herdr_mcp.sim.world import Agent, HerdrFailure, Pane, Tab, Workspace, World

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 1 << 20
"""Herdr's request line limit (1 MiB)."""

READ_TIMEOUT_S = 5.0
"""Herdr drops a connection that has not sent its request line within 5 s."""

MAX_UNIX_PATH_BYTES = 107
"""sun_path is 108 bytes on Linux including the terminating NUL."""

DEFAULT_UNTIL: tuple[str, ...] = ("idle", "done", "blocked")

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
T = TypeVar("T")


@dataclass(frozen=True)
class Fault:
    """An injected failure: answer `code`/`message`, or never answer when `code` is None."""

    code: str | None
    message: str


#: Loop turns `stop()` gives connections accepted during the close to start, so they are closed.
LATE_CONNECTION_TURNS = 5


class Simulator:
    """A Herdr server on a Unix socket, with real directories and scripted fake agents.

    Build it from a `SimConfig`, then `await start()` / `await stop()` (or `async with`). The
    mutation methods (`add_workspace`, `set_agent_status`, `inject_fault`, ...) must be called
    on the simulator's event loop; from another thread use `SimulatorThread`.
    """

    def __init__(self, config: SimConfig, socket_path: Path | str) -> None:
        self._config = config
        self._socket_path = Path(socket_path)
        self._world = World(config.version, config.protocol, self._publish)
        self._runners: dict[str, AgentRunner] = {}
        self._subscribers: set[Subscriber] = set()
        self._faults: dict[str, Fault] = {}
        self._server: asyncio.Server | None = None
        self._socket_identity: tuple[int, int] | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._validators = {name: Draft202012Validator(m.params_schema) for name, m in NATIVE_METHODS.items()}
        self._handlers: dict[str, Handler] = {
            "ping": self._ping,
            "session.snapshot": self._session_snapshot,
            "workspace.list": self._workspace_list,
            "workspace.get": self._workspace_get,
            "tab.list": self._tab_list,
            "tab.get": self._tab_get,
            "pane.list": self._pane_list,
            "pane.get": self._pane_get,
            "pane.read": self._pane_read,
            "pane.send_input": self._pane_send_input,
            "agent.list": self._agent_list,
            "agent.get": self._agent_get,
            "agent.read": self._agent_read,
            "agent.prompt": self._agent_prompt,
            "agent.wait": self._agent_wait,
        }
        for workspace in config.workspaces:
            self._build_workspace(workspace)

    @property
    def socket_path(self) -> Path:
        return self._socket_path

    @property
    def running(self) -> bool:
        return self._server is not None

    def supported_methods(self) -> frozenset[str]:
        """Every method this simulator answers (events.subscribe included)."""
        return frozenset(self._handlers) | {"events.subscribe"}

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen on the socket (mode 0600) and start the fake agents. Raises SimulatorError."""
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
        for pane in self._world.agent_panes():
            self._runner(pane).start()

    async def stop(self) -> None:
        """Stop listening, drop every connection, stop the agents and remove the socket file."""
        server, self._server = self._server, None
        if server is not None:
            # A connection accepted in this loop turn is attached to the server one turn later,
            # and one attached after close() is dropped with its socket never closed (Python
            # 3.11's Server._attach asserts): stop accepting first, let those attach, then close.
            loop = asyncio.get_running_loop()
            for listening in server.sockets:
                loop.remove_reader(listening.fileno())
            await asyncio.sleep(0)
            server.close()
        connections = list(self._connections)
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        if server is not None:
            await server.wait_closed()
        # A connection accepted just before the close may not have started its handler yet
        # (asyncio starts it a few loop turns later), so it is in no list above: give it those
        # turns and end it too.
        for _ in range(LATE_CONNECTION_TURNS):
            await asyncio.sleep(0)
            late = list(self._connections)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        for runner in self._runners.values():
            await runner.stop()
        self._subscribers.clear()
        self._remove_socket_file()

    async def __aenter__(self) -> Simulator:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- test and embedding API (call on the simulator's loop) ----------------------------

    def snapshot(self) -> dict[str, Any]:
        """The same object `session.snapshot` returns (without faults)."""
        return self._world.snapshot()

    def add_workspace(self, config: WorkspaceConfig) -> str:
        """Create a workspace with its tabs and panes; returns its id. Emits lifecycle events."""
        workspace = self._build_workspace(config)
        self._world.announce_workspace(workspace)
        return workspace.workspace_id

    def add_tab(self, workspace_id: str, config: TabConfig | None = None) -> str:
        """Add a tab (with its panes) to a workspace; returns the tab id."""
        workspace = self._lookup(lambda: self._world.workspace(workspace_id))
        tab = self._world.new_tab(workspace, (config or TabConfig()).label)
        for pane_config in (config or TabConfig()).panes or (PaneConfig(),):
            self._new_pane(tab, pane_config)
        self._world.announce_tab(tab)
        self._world.refresh_rollups(workspace.workspace_id)
        return tab.tab_id

    def add_pane(self, tab_or_workspace_id: str, config: PaneConfig | None = None) -> str:
        """Add a pane to a tab (or to a workspace's active tab); returns the pane id."""
        world = self._world
        if tab_or_workspace_id in world.workspaces:
            active = world.workspaces[tab_or_workspace_id].active_tab_id
            tab = world.tabs[active] if active else world.new_tab(world.workspaces[tab_or_workspace_id], None)
        else:
            tab = self._lookup(lambda: world.tab(tab_or_workspace_id))
        pane = self._new_pane(tab, config or PaneConfig())
        world.announce_pane(pane)
        world.refresh_rollups(pane.workspace_id)
        return pane.pane_id

    def add_agent(self, pane_id: str, config: AgentConfig) -> None:
        """Start a fake agent in an existing shell pane (Herdr's pane_agent_detected)."""
        pane = self._lookup(lambda: self._world.pane(pane_id))
        self._world.attach_agent(pane, config)
        self._start_runner_if_running(pane)

    def set_script(self, target: str, script: AgentScript) -> None:
        """Replace an agent's script; it applies from the next prompt on."""
        pane = self._lookup(lambda: self._world.resolve_agent(target))
        if pane.agent is not None:
            pane.agent.script = script

    def set_agent_status(self, target: str, status: str) -> None:
        """Force an agent's status: stops its running script and drops queued prompts."""
        if status not in SCRIPT_STATES:
            raise SimulatorError(f"status must be one of {', '.join(SCRIPT_STATES)}")
        pane = self._lookup(lambda: self._world.resolve_agent(target))
        self._runner(pane).interrupt(status)

    def append_output(self, pane_id: str, text: str) -> None:
        """Write text to a pane as if its program printed it."""
        self._world.append_output(self._lookup(lambda: self._world.pane(pane_id)), text)

    def close_pane(self, pane_id: str) -> None:
        """Close a pane (and its tab or workspace when it was the last one)."""
        pane = self._lookup(lambda: self._world.pane(pane_id))
        runner = self._runners.get(pane_id)
        if runner is not None:
            runner.cancel()
        self._world.close_pane(pane)

    def inject_fault(
        self, method: str, *, code: str = "internal_error", message: str | None = None, hang: bool = False
    ) -> None:
        """Make `method` fail with Herdr error `code` (or never answer, with `hang=True`).

        `inject_fault("session.snapshot")` is the switch for testing the runtime's degraded path.
        """
        if method not in self.supported_methods():
            raise SimulatorError(f"unknown method {method!r}")
        text = message or f"simulated failure of {method}"
        self._faults[method] = Fault(None if hang else code, text)

    def clear_faults(self, method: str | None = None) -> None:
        """Remove the fault of one method, or all faults."""
        if method is None:
            self._faults.clear()
        else:
            self._faults.pop(method, None)

    # -- building ---------------------------------------------------------------------------

    def _build_workspace(self, config: WorkspaceConfig) -> Workspace:
        world = self._world
        workspace = world.new_workspace(config.cwd, config.label)
        for tab_config in config.tabs or (TabConfig(),):
            tab = world.new_tab(workspace, tab_config.label)
            for pane_config in tab_config.panes or (PaneConfig(),):
                self._new_pane(tab, pane_config)
        return workspace

    def _new_pane(self, tab: Tab, config: PaneConfig) -> Pane:
        pane = self._world.new_pane(tab, config.cwd, config.label, config.agent)
        self._start_runner_if_running(pane)
        return pane

    def _start_runner_if_running(self, pane: Pane) -> None:
        if pane.agent is not None and self._server is not None:
            self._runner(pane).start()

    def _runner(self, pane: Pane) -> AgentRunner:
        runner = self._runners.get(pane.pane_id)
        if runner is None:
            runner = self._runners[pane.pane_id] = AgentRunner(self._world, pane)
        return runner

    @staticmethod
    def _lookup(find: Callable[[], T]) -> T:
        try:
            return find()
        except HerdrFailure as exc:
            raise SimulatorError(exc.message) from None

    # -- socket -------------------------------------------------------------------------------

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
            # Nobody can connect before listen(), so tightening the mode here leaves no window.
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
        except (ConnectionError, BrokenPipeError):
            pass
        except asyncio.CancelledError:
            # stop() cancels open connections; end quietly, as asyncio's stream callback (3.11)
            # reports a cancelled connection task as an error.
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
        except TimeoutError:
            return
        except ValueError:  # the line is over the limit
            await send(
                writer, error_answer("", "invalid_request", f"request line exceeds {MAX_LINE_BYTES} bytes")
            )
            return
        if not line.strip():
            return
        try:
            request_id, method, params = parse_request(line, self._validators, self.supported_methods())
        except BadRequest as bad:
            await send(writer, error_answer(bad.request_id, bad.code, bad.message))
            return
        fault = self._faults.get(method)
        if fault is not None and fault.code is None:
            await asyncio.Event().wait()  # a hung Herdr: the connection stays open, unanswered
        elif fault is not None and fault.code is not None:
            await send(writer, error_answer(request_id, fault.code, fault.message))
        elif method == "events.subscribe":
            await self._stream_events(request_id, params, writer)
        else:
            await send(writer, await self._answer(request_id, method, params))

    async def _answer(self, request_id: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            return {"id": request_id, "result": await self._handlers[method](params)}
        except HerdrFailure as failure:
            return error_answer(request_id, failure.code, failure.message)

    async def _stream_events(
        self, request_id: str, params: dict[str, Any], writer: asyncio.StreamWriter
    ) -> None:
        subscriber = Subscriber(params["subscriptions"], writer)
        self._subscribers.add(subscriber)
        try:
            await send(writer, {"id": request_id, "result": {"type": "subscription_started"}})
            while not subscriber.overflowed:
                line = await subscriber.queue.get()
                writer.write(line)
                await writer.drain()
        finally:
            self._subscribers.discard(subscriber)

    def _publish(self, event: str, data: dict[str, Any]) -> None:
        line: bytes | None = None
        for subscriber in list(self._subscribers):
            if subscriber.overflowed or not subscriber.wants(event, data):
                continue
            line = line or encode({"event": event, "data": data})
            try:
                subscriber.queue.put_nowait(line)
            except asyncio.QueueFull:
                subscriber.overflowed = True
                subscriber.writer.close()

    # -- methods ------------------------------------------------------------------------------

    async def _ping(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "pong",
            "version": self._world.version,
            "protocol": self._world.protocol,
            "capabilities": {"live_handoff": False, "detached_server_daemon": False},
        }

    async def _session_snapshot(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"type": "session_snapshot", "snapshot": self._world.snapshot()}

    async def _workspace_list(self, params: dict[str, Any]) -> dict[str, Any]:
        world = self._world
        return {
            "type": "workspace_list",
            "workspaces": [world.workspace_info(w) for w in world.workspaces.values()],
        }

    async def _workspace_get(self, params: dict[str, Any]) -> dict[str, Any]:
        world = self._world
        return {
            "type": "workspace_info",
            "workspace": world.workspace_info(world.workspace(params["workspace_id"])),
        }

    async def _tab_list(self, params: dict[str, Any]) -> dict[str, Any]:
        world = self._world
        workspace_id = params.get("workspace_id")
        if workspace_id is not None:
            world.workspace(workspace_id)
        tabs = [t for t in world.tabs.values() if workspace_id in (None, t.workspace_id)]
        return {"type": "tab_list", "tabs": [world.tab_info(t) for t in tabs]}

    async def _tab_get(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"type": "tab_info", "tab": self._world.tab_info(self._world.tab(params["tab_id"]))}

    async def _pane_list(self, params: dict[str, Any]) -> dict[str, Any]:
        world = self._world
        workspace_id = params.get("workspace_id")
        if workspace_id is not None:
            world.workspace(workspace_id)
        panes = [p for p in world.panes.values() if workspace_id in (None, p.workspace_id)]
        return {"type": "pane_list", "panes": [world.pane_info(p) for p in panes]}

    async def _pane_get(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"type": "pane_info", "pane": self._world.pane_info(self._world.pane(params["pane_id"]))}

    async def _pane_read(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"type": "pane_read", "read": self._read(self._world.pane(params["pane_id"]), params)}

    async def _pane_send_input(self, params: dict[str, Any]) -> dict[str, Any]:
        self._type_into(self._world.pane(params["pane_id"]), params.get("text", ""), params.get("keys", []))
        return {"type": "ok"}

    async def _agent_list(self, params: dict[str, Any]) -> dict[str, Any]:
        world = self._world
        return {"type": "agent_list", "agents": [world.agent_info(p) for p in world.agent_panes()]}

    async def _agent_get(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "agent_info",
            "agent": self._world.agent_info(self._world.resolve_agent(params["target"])),
        }

    async def _agent_read(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"type": "pane_read", "read": self._read(self._world.resolve_agent(params["target"]), params)}

    async def _agent_prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        pane = self._world.resolve_agent(params["target"])
        agent = _agent_of(pane)
        if agent.status == "blocked":
            raise HerdrFailure(
                "agent_blocked",
                f"agent {agent.name} is blocked waiting for input; "
                "answer it with pane.send_input, then prompt",
            )
        wait = params.get("wait")
        turn = self._runner(pane).submit(params["text"])
        if wait is not None:
            until = tuple(wait.get("until") or DEFAULT_UNTIL)
            await self._wait_for(
                pane,
                lambda: agent.turn == turn and agent.status in until,
                wait.get("timeout_ms"),
                f"the prompt was delivered, but agent {agent.name} did not reach {'/'.join(until)}",
            )
        return {"type": "agent_prompted", "agent": self._world.agent_info(pane)}

    async def _agent_wait(self, params: dict[str, Any]) -> dict[str, Any]:
        pane = self._world.resolve_agent(params["target"])
        agent = _agent_of(pane)
        until = tuple(params.get("until") or DEFAULT_UNTIL)
        if agent.status not in until:
            await self._wait_for(
                pane,
                lambda: agent.status in until,
                params.get("timeout_ms"),
                f"agent {agent.name} did not reach {'/'.join(until)}",
            )
        return {"type": "agent_info", "agent": self._world.agent_info(pane)}

    # -- method helpers -------------------------------------------------------------------------

    def _read(self, pane: Pane, params: dict[str, Any]) -> dict[str, Any]:
        lines = params.get("lines")
        format_ = params.get("format", "text")
        keep_ansi = format_ == "ansi" or params.get("strip_ansi", True) is False
        return self._world.read(
            pane, params["source"], None if lines is None else int(lines), keep_ansi, format_
        )

    def _type_into(self, pane: Pane, text: str, keys: list[str]) -> None:
        """Echo typed input; for an agent, enter submits a prompt and any input answers `blocked`."""
        echo, typed, submitted, interrupted = text, pane.typed, [], False
        *lines, typed = (typed + text).replace("\r", "\n").split("\n")
        submitted.extend(lines)
        for key in keys:
            name = key.lower()
            if name in ("enter", "return"):
                submitted.append(typed)
                typed, echo = "", echo + "\n"
            elif name in INTERRUPT_KEYS:
                interrupted = True
            elif len(key) == 1 or name in ("space", "tab"):
                char = {"space": " ", "tab": "\t"}.get(name, key)
                typed, echo = typed + char, echo + char
        pane.typed = typed
        self._world.append_output(pane, echo)
        agent = pane.agent
        if agent is None:
            return
        runner = self._runner(pane)
        if interrupted and agent.status in ("working", "blocked"):
            runner.interrupt("idle")
        elif agent.status == "blocked" and (text or keys):
            runner.receive_input()
        else:
            for prompt in submitted:
                if prompt.strip():
                    runner.submit(prompt)

    async def _wait_for(
        self, pane: Pane, reached: Callable[[], bool], timeout_ms: int | None, missed: str
    ) -> None:
        """Wait until `reached()` holds after a status change; Herdr's `timeout` error otherwise."""
        agent = _agent_of(pane)
        outcome: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def on_change(changed: Pane) -> None:
            if outcome.done():
                return
            if changed.pane_id not in self._world.panes:
                outcome.set_exception(
                    HerdrFailure("agent_not_found", f"agent {agent.name} is gone (pane closed)")
                )
            elif reached():
                outcome.set_result(None)

        agent.listeners.append(on_change)
        try:
            async with asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000):
                await outcome
        except TimeoutError:
            raise HerdrFailure("timeout", f"{missed} within {timeout_ms} ms (it is {agent.status})") from None
        finally:
            agent.listeners.remove(on_change)


def _agent_of(pane: Pane) -> Agent:
    if pane.agent is None:
        raise HerdrFailure("agent_not_found", f"pane {pane.pane_id} has no agent")
    return pane.agent


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
