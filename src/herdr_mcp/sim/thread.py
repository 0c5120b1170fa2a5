"""Run a `Simulator` on its own event loop in a background thread.

For synchronous tests and for embedding (e.g. `herdr-mcp serve --sim`): the simulator's loop
owns all its state, and every call from another thread is marshalled onto that loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from herdr_mcp.sim.config import (
    AgentConfig,
    AgentScript,
    PaneConfig,
    SimConfig,
    SimulatorError,
    WorkspaceConfig,
)
from herdr_mcp.sim.server import Simulator

T = TypeVar("T")

STARTUP_TIMEOUT_S = 10.0
CALL_TIMEOUT_S = 10.0


class SimulatorThread:
    """A `Simulator` in a daemon thread: `start()`/`stop()` or `with SimulatorThread(...) as sim:`.

    The mutation methods mirror `Simulator`'s and are safe to call from any thread.
    """

    def __init__(self, config: SimConfig, socket_path: Path | str) -> None:
        self._config = config
        self._socket_path = Path(socket_path)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._simulator: Simulator | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None

    @property
    def socket_path(self) -> Path:
        return self._socket_path

    def start(self) -> None:
        """Start the thread and return once the socket is listening; raises SimulatorError."""
        if self._thread is not None:
            raise SimulatorError("the simulator thread is already started")
        self._thread = threading.Thread(target=self._main, name="herdr-sim", daemon=True)
        self._thread.start()
        if not self._ready.wait(STARTUP_TIMEOUT_S):
            raise SimulatorError(f"the simulator did not start within {STARTUP_TIMEOUT_S:g} s")
        if self._startup_error is not None:
            self._thread.join()
            self._thread = None
            raise self._startup_error

    def stop(self) -> None:
        """Stop the simulator (removing its socket) and join the thread. Idempotent."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        thread.join(STARTUP_TIMEOUT_S)

    def __enter__(self) -> SimulatorThread:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def call(self, action: Callable[[Simulator], T], *, timeout: float = CALL_TIMEOUT_S) -> T:
        """Run `action(simulator)` on the simulator's loop and return its result (or raise)."""
        loop, simulator = self._loop, self._simulator
        if loop is None or simulator is None or self._thread is None:
            raise SimulatorError("the simulator thread is not running")

        async def run() -> T:
            return action(simulator)

        future: Future[T] = asyncio.run_coroutine_threadsafe(run(), loop)
        return future.result(timeout)

    def snapshot(self) -> dict[str, Any]:
        return self.call(lambda sim: sim.snapshot())

    def add_workspace(self, config: WorkspaceConfig) -> str:
        return self.call(lambda sim: sim.add_workspace(config))

    def add_pane(self, tab_or_workspace_id: str, config: PaneConfig | None = None) -> str:
        return self.call(lambda sim: sim.add_pane(tab_or_workspace_id, config))

    def add_agent(self, pane_id: str, config: AgentConfig) -> None:
        self.call(lambda sim: sim.add_agent(pane_id, config))

    def set_script(self, target: str, script: AgentScript) -> None:
        self.call(lambda sim: sim.set_script(target, script))

    def set_agent_status(self, target: str, status: str) -> None:
        self.call(lambda sim: sim.set_agent_status(target, status))

    def prompts(self, target: str) -> list[str]:
        return self.call(lambda sim: sim.prompts(target))

    def append_output(self, pane_id: str, text: str) -> None:
        self.call(lambda sim: sim.append_output(pane_id, text))

    def close_pane(self, pane_id: str) -> None:
        self.call(lambda sim: sim.close_pane(pane_id))

    def inject_fault(
        self, method: str, *, code: str = "internal_error", message: str | None = None, hang: bool = False
    ) -> None:
        self.call(lambda sim: sim.inject_fault(method, code=code, message=message, hang=hang))

    def clear_faults(self, method: str | None = None) -> None:
        self.call(lambda sim: sim.clear_faults(method))

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
            self._simulator = Simulator(self._config, self._socket_path)
            await self._simulator.start()
        except BaseException as exc:  # reported to the thread that called start()
            self._startup_error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stopping.wait()
        finally:
            await self._simulator.stop()
