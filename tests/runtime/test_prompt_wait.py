"""herdr_prompt against a simulator that behaves like Herdr: Enter pressed about 300 ms after
agent.prompt answers, so the agent's state at that answer is still the previous turn's.

- `wait` waits for this prompt's turn, not the state the agent was in before it;
- an agent that never starts is reported stalled after the prompt-effect window;
- a wait that is cut off leaves the prompt submitted (never uncertain);
- a workspace-id target is resolved by the runtime to that workspace's one agent pane (Herdr
  itself resolves only pane ids and agent names).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.herdr import HerdrClient
from herdr_mcp.runtime.tasks import TaskTracker
from herdr_mcp.sim import (
    AgentConfig,
    AgentScript,
    PaneConfig,
    ScriptStep,
    SimConfig,
    WorkspaceConfig,
)
from herdr_mcp.state.store import StateStore
from herdr_mcp.state.tasks import TaskStore
from tests.support.runtime_harness import call_tool, in_process_runtime
from tests.support.sim_helpers import one_workspace_config, run, running_sim, short_tmp_dir


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


def _late_starter(start_ms: int, work_ms: int) -> AgentScript:
    """Starts working `start_ms` after Enter, then is done `work_ms` later."""
    return AgentScript(
        (ScriptStep(after_ms=start_ms, state="working"), ScriptStep(after_ms=work_ms, state="done"))
    )


def _config(base: Path, *agents: tuple[str, AgentScript], extra_pane: bool = False) -> SimConfig:
    panes = tuple(PaneConfig(agent=AgentConfig(name, "claude", script=script)) for name, script in agents)
    return one_workspace_config(base, *((PaneConfig(label="shell"),) if extra_pane else ()), *panes)


def _tracker(base: Path, sim_socket: Path, **options: Any) -> tuple[TaskTracker, StateStore]:
    state = StateStore.open(base / "state.db")
    return TaskTracker(HerdrClient(sim_socket), TaskStore(state), **options), state


def test_wait_answers_when_this_prompts_turn_ends(tmp_short: Path) -> None:
    """The agent starts 300 ms after Enter (which Herdr presses ~300 ms after answering): the
    wait must answer after the turn, with its final status (before: reached at once, idle, 0 ms)."""

    async def body() -> None:
        config = _config(tmp_short, ("coder", _late_starter(300, 200)))
        async with running_sim(tmp_short, config) as (sim, _client):
            tracker, state = _tracker(tmp_short, sim.socket_path)
            started = time.monotonic()
            answer = await tracker.submit(
                "coder", "go", browser_session_ref=None, wait={"until": ["done", "idle"], "timeout_ms": 10000}
            )
            elapsed = time.monotonic() - started
            state.close()
        wait = answer["wait"]
        assert wait["reached"] is True, wait
        assert wait["status"] == "done", wait
        assert wait["task_state"] == "completed", wait
        assert wait["waited_ms"] >= 450, wait  # the Enter delay and the agent's 300 + 200 ms
        assert elapsed >= 0.45

    run(body())


def test_wait_until_working_sees_this_turn_start(tmp_short: Path) -> None:
    async def body() -> None:
        config = _config(tmp_short, ("coder", _late_starter(100, 2000)))
        async with running_sim(tmp_short, config) as (sim, _client):
            tracker, state = _tracker(tmp_short, sim.socket_path)
            answer = await tracker.submit(
                "coder", "go", browser_session_ref=None, wait={"until": ["working"], "timeout_ms": 10000}
            )
            state.close()
        assert answer["wait"]["reached"] is True, answer["wait"]
        assert answer["wait"]["waited_ms"] >= 100, answer["wait"]

    run(body())


def test_an_agent_that_never_starts_is_reported_stalled(tmp_short: Path) -> None:
    """No state change within the prompt-effect window: `stalled`, not `reached` (before: reached
    at once with the idle state it never left)."""

    async def body() -> None:
        config = _config(tmp_short, ("sleeper", AgentScript(())))
        async with running_sim(tmp_short, config) as (sim, _client):
            tracker, state = _tracker(tmp_short, sim.socket_path, prompt_effect_window=1.0)
            answer = await tracker.submit(
                "sleeper",
                "go",
                browser_session_ref=None,
                wait={"until": ["done", "idle"], "timeout_ms": 10000},
            )
            task = tracker.tasks.get(answer["task_id"])
            state.close()
        wait = answer["wait"]
        assert wait["reached"] is False and wait["stalled"] is True and wait["timed_out"] is False, wait
        assert 900 <= wait["waited_ms"] < 5000, wait
        assert task is not None and task.state == "submitted"  # still submitted: never uncertain

    run(body())


def test_a_wait_cut_off_leaves_the_prompt_submitted(tmp_short: Path) -> None:
    async def body() -> None:
        config = _config(tmp_short, ("coder", _late_starter(50, 3000)))
        async with running_sim(tmp_short, config) as (sim, _client):
            tracker, state = _tracker(tmp_short, sim.socket_path)
            answer = await tracker.submit(
                "coder", "go", browser_session_ref=None, wait={"until": ["done"], "timeout_ms": 1200}
            )
            task = tracker.tasks.get(answer["task_id"])
            state.close()
        wait = answer["wait"]
        assert wait["reached"] is False and wait["timed_out"] is True and wait["stalled"] is False, wait
        assert answer["state"] == "submitted"
        assert task is not None and task.state == "working"  # the turn goes on; the inbox will get it

    run(body())


def test_workspace_target_is_resolved_to_its_one_agent(tmp_short: Path) -> None:
    """Through MCP: `target: "w1"` prompts w1's only agent (a shell pane beside it is no agent)."""

    async def body() -> None:
        config = _config(tmp_short, ("coder", _late_starter(20, 50)), extra_pane=True)
        async with (
            running_sim(tmp_short, config) as (sim, _client),
            in_process_runtime(sim.socket_path, tmp_short / "config") as runtime,
            runtime.client() as client,
        ):
            answer = await call_tool(
                client,
                "herdr_prompt",
                {"target": "w1", "text": "go", "wait": {"until": ["done"], "timeout_ms": 10000}},
            )
        assert answer["target"] == "w1"
        assert answer["pane_id"] == "w1:p2" and answer["agent"]["pane_id"] == "w1:p2", answer
        assert answer["wait"]["reached"] is True, answer

    run(body())


def test_workspace_target_with_several_or_no_agents_is_refused_before_anything_is_sent(
    tmp_short: Path,
) -> None:
    async def body() -> None:
        config = _config(tmp_short, ("one", _late_starter(20, 50)), ("two", _late_starter(20, 50)))
        async with running_sim(tmp_short, config) as (sim, _client):
            sim.add_workspace(WorkspaceConfig(cwd=tmp_short / "repo"))  # w2: a shell pane only
            async with (
                in_process_runtime(sim.socket_path, tmp_short / "config") as runtime,
                runtime.client() as client,
            ):
                several = await call_tool(client, "herdr_prompt", {"target": "w1", "text": "go"})
                none = await call_tool(client, "herdr_prompt", {"target": "w2", "text": "go"})
            typed = [sim.snapshot()]
        assert several["error"]["code"] == "agent_target_ambiguous", several
        assert several["error"]["acted"] is False
        assert sorted(several["error"]["candidates"]) == ["w1:p1", "w1:p2"]
        assert none["error"]["code"] == "agent_not_found", none
        assert none["error"]["acted"] is False
        agents = [p for p in typed[0]["panes"] if p.get("agent")]
        assert all(p["agent_status"] != "working" for p in agents)  # nobody was prompted

    run(body())
