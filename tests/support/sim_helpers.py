"""Shared helpers for tests that need a Herdr: short socket dirs, a running simulator, a client.

Use from any test file:

    @pytest.fixture
    def tmp_short() -> Iterator[Path]:
        with short_tmp_dir() as path:
            yield path

    def test_x(tmp_short: Path) -> None:
        async def body() -> None:
            async with running_sim(tmp_short) as (sim, client):
                ...
        run(body())
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

from herdr_mcp.herdr import HerdrClient
from herdr_mcp.sim import (
    AgentConfig,
    AgentScript,
    PaneConfig,
    ScriptStep,
    SimConfig,
    Simulator,
    SimulatorThread,
    TabConfig,
    WorkspaceConfig,
)

T = TypeVar("T")

TEST_TIMEOUT_S = 60.0

FAST_TIME_SCALE = float(os.environ.get("HERDR_SIM_TEST_TIME_SCALE", "0.1"))
"""Herdr's own delays at a tenth (Enter 30 ms after agent.prompt, a 500 ms prompt-effect window,
10 ms polls), for tests that do not measure Herdr's timing; `time_scale=1.0` gives real timing.
HERDR_SIM_TEST_TIME_SCALE=1 runs these tests at real timing (to measure what the scale saves)."""


@contextlib.contextmanager
def short_tmp_dir() -> Iterator[Path]:
    """A private dir under /tmp: AF_UNIX socket paths must stay under ~100 bytes."""
    path = Path(tempfile.mkdtemp(prefix="hm-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def prompts_through(sim: SimulatorThread, agent: str, last: str) -> list[str] | None:
    """The prompts the fake agent `agent` took, in order, once one of them holds `last` (else None):
    for `wait_until` on a later prompt. Exactly-once is checked on these, never on the pane text:
    a delivered prompt shows there twice (typed, then echoed by the agent once Enter submits it)."""
    prompts = sim.prompts(agent)
    return prompts if any(last in prompt for prompt in prompts) else None


def run(coroutine: Coroutine[Any, Any, T], timeout: float = TEST_TIMEOUT_S) -> T:
    """Run a test body on a fresh event loop, failing it if it takes longer than `timeout`."""

    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await coroutine

    return asyncio.run(bounded())


def fast_script(*, final: str = "done", output: str = "working on it\n") -> AgentScript:
    """working at once, some output, then `final`: a short, predictable turn."""
    return AgentScript(
        (
            ScriptStep(after_ms=10, state="working", echo_prompt=True),
            ScriptStep(after_ms=30, output=output),
            ScriptStep(after_ms=30, state=final),
        )
    )


def two_project_config(
    base: Path, script: AgentScript | None = None, *, protocol: int = 22, time_scale: float = FAST_TIME_SCALE
) -> SimConfig:
    """Workspace w1 (`api`: shell + agent `coder`) and w2 (`web`: agent `reviewer`), real dirs."""
    api, web = base / "api", base / "web"
    (api / "src").mkdir(parents=True, exist_ok=True)
    web.mkdir(parents=True, exist_ok=True)
    agent_script = script or fast_script()
    return SimConfig(
        (
            WorkspaceConfig(
                cwd=api,
                label="api",
                tabs=(
                    TabConfig(
                        label="main",
                        panes=(
                            PaneConfig(label="shell"),
                            PaneConfig(
                                cwd=api / "src",
                                label="coder",
                                agent=AgentConfig("coder", "claude", script=agent_script),
                            ),
                        ),
                    ),
                ),
            ),
            WorkspaceConfig(
                cwd=web,
                label="web",
                tabs=(
                    TabConfig(
                        panes=(PaneConfig(agent=AgentConfig("reviewer", "codex", script=agent_script)),)
                    ),
                ),
            ),
        ),
        protocol=protocol,
        time_scale=time_scale,
    )


def one_workspace_config(
    base: Path, *panes: PaneConfig, protocol: int = 22, time_scale: float = 1.0
) -> SimConfig:
    """Workspace w1 in `base/repo` with `panes` (default: a shell w1:p1 and agent `coder` w1:p2)
    in one tab, at real timing unless `time_scale` says otherwise."""
    (base / "repo").mkdir(parents=True, exist_ok=True)
    panes = panes or (PaneConfig(label="shell"), PaneConfig(agent=AgentConfig("coder", "claude")))
    return SimConfig(
        (WorkspaceConfig(cwd=base / "repo", tabs=(TabConfig(panes=panes),)),),
        protocol=protocol,
        time_scale=time_scale,
    )


@contextlib.asynccontextmanager
async def running_sim(
    base: Path, config: SimConfig | None = None, *, timeout: float = 5.0
) -> AsyncIterator[tuple[Simulator, HerdrClient]]:
    """A started simulator on `base/herdr.sock` and a client for it; stopped on exit."""
    simulator = Simulator(config or two_project_config(base), base / "herdr.sock")
    await simulator.start()
    try:
        yield simulator, HerdrClient(simulator.socket_path, timeout=timeout)
    finally:
        await simulator.stop()
