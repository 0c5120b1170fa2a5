"""Fake agents: each plays its script, step by step, every time it is prompted.

Choices that mirror real coding agents:
- A prompt sent while the agent is working is queued (as Claude Code and Codex queue typed
  messages) and its script runs after the current one finishes.
- A `blocked` step holds the script until the pane receives input (`pane.send_input`), as an
  agent waiting for permission does; the agent then goes back to `working` and continues.
- `esc` or `ctrl+c` typed into the pane interrupts the running script (the agent goes idle) and
  drops queued prompts. Forcing a status from a test does the same, with the forced status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from herdr_mcp.sim.model import Pane
from herdr_mcp.sim.world import World

log = logging.getLogger(__name__)


class AgentRunner:
    """Runs one agent's scripts on the simulator's event loop."""

    def __init__(self, world: World, pane: Pane) -> None:
        if pane.agent is None:
            raise ValueError(f"pane {pane.pane_id} has no agent")
        self._world = world
        self._pane = pane
        self._agent = pane.agent
        self._queue: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
        self._input = asyncio.Event()
        self._submitted = 0
        self._task: asyncio.Task[None] | None = None
        self._retired: list[asyncio.Task[None]] = []

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._serve(), name=f"agent {self._agent.name or self._pane.pane_id}"
            )

    def cancel(self) -> None:
        """Stop playing at once; `stop()` later waits for the stopped work to unwind."""
        if self._task is not None:
            self._task.cancel()
            self._retired.append(self._task)
            self._task = None

    async def stop(self) -> None:
        self.cancel()
        retired, self._retired = self._retired, []
        for task in retired:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def submit(self, prompt: str) -> int:
        """Queue a prompt; returns its turn number (the value `agent.turn` takes when it runs)."""
        self._submitted += 1
        self._agent.prompts.append(prompt)
        self._queue.put_nowait((self._submitted, prompt))
        return self._submitted

    def receive_input(self) -> None:
        """The pane got input: a `blocked` step resumes."""
        self._input.set()

    def interrupt(self, status: str) -> None:
        """Stop the running script, drop queued prompts, and put the agent in `status`."""
        while not self._queue.empty():
            self._queue.get_nowait()
        if self._task is not None:
            self.cancel()
            self.start()
        self._world.set_status(self._pane, status)

    async def _serve(self) -> None:
        while True:
            turn, prompt = await self._queue.get()
            self._agent.turn = turn
            try:
                await self._play(prompt)
            except asyncio.CancelledError:
                raise
            except Exception:  # a broken step must not kill the agent for later prompts
                log.exception("simulated agent in %s failed while playing its script", self._pane.pane_id)

    async def _play(self, prompt: str) -> None:
        for step in self._agent.script.steps:
            if step.after_ms:
                await asyncio.sleep(step.after_ms / 1000)
            if step.echo_prompt:
                self._world.append_output(self._pane, prompt + "\n")
            if step.output:
                self._world.append_output(self._pane, step.output)
            if step.state is None:
                continue
            self._input.clear()
            self._world.set_status(self._pane, step.state)
            if step.state == "blocked":
                await self._input.wait()
                self._world.set_status(self._pane, "working")
