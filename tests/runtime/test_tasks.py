"""Agent tasks and the parent inbox: attribution rules, exactly-once delivery, restarts."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from herdr_mcp.sim import AgentScript, ScriptStep, SimConfig, SimulatorThread
from herdr_mcp.state.store import StateStore
from herdr_mcp.state.tasks import TaskStore
from tests.support.runtime_harness import (
    RunningRuntime,
    call_tool,
    in_process_runtime,
    make_repo,
    running_runtime,
)
from tests.support.sim_helpers import short_tmp_dir
from tests.support.waiting import poll_until, wait_until


@pytest.fixture
def tasks(tmp_path: Path) -> TaskStore:
    return TaskStore(StateStore.open(tmp_path / "state.db"))


def _task(tasks: TaskStore, task_id: str, status: str = "idle", scope: str | None = None) -> None:
    agent = {"pane_id": "w1:p2", "workspace_id": "w1", "name": "coder", "agent_status": status}
    tasks.create(
        task_id=task_id, turn_id=f"turn-{task_id}", target="coder", agent=agent, browser_session_ref=scope
    )
    tasks.mark_submitted(task_id)


def _outcomes(tasks: TaskStore, scope: str | None = None) -> list[tuple[str, str]]:
    return [(item["task_id"], item["outcome"]) for item in tasks.inbox(scope)["items"]]


def test_working_then_done_completes_once(tasks: TaskStore) -> None:
    _task(tasks, "t1")
    assert tasks.observe("w1:p2", "done") == []  # a settle without new activity is not ours
    tasks.observe("w1:p2", "working")
    settled = tasks.observe("w1:p2", "done")
    assert [(s.task.task_id, s.outcome) for s in settled] == [("t1", "completed")]
    tasks.observe("w1:p2", "done")
    assert tasks.settle("t1", "completed", {}) is None
    assert _outcomes(tasks) == [("t1", "completed")]


def test_prior_turn_settle_is_consumed_first(tasks: TaskStore) -> None:
    _task(tasks, "t1", status="working")
    tasks.observe("w1:p2", "idle")  # the previous turn ends
    assert _outcomes(tasks) == []
    tasks.observe("w1:p2", "working")
    tasks.observe("w1:p2", "idle")
    assert _outcomes(tasks) == [("t1", "completed")]


def test_prior_turn_working_events_are_not_new_activity(tasks: TaskStore) -> None:
    _task(tasks, "t1", status="working")
    tasks.observe("w1:p2", "working")
    tasks.observe("w1:p2", "done")
    assert _outcomes(tasks) == []


def test_blocked_then_completed_are_two_entries(tasks: TaskStore) -> None:
    _task(tasks, "t1")
    tasks.observe("w1:p2", "working")
    tasks.observe("w1:p2", "blocked")
    tasks.observe("w1:p2", "working")
    tasks.observe("w1:p2", "done")
    assert _outcomes(tasks) == [("t1", "blocked"), ("t1", "completed")]


def test_closed_pane_fails_open_tasks(tasks: TaskStore) -> None:
    _task(tasks, "t1")
    assert [s.outcome for s in tasks.fail_pane("w1:p2", "pane_closed")] == ["failed"]
    assert _outcomes(tasks) == [("t1", "failed")]


def test_inbox_is_scoped_and_ack_removes(tasks: TaskStore) -> None:
    _task(tasks, "a", scope="browser-A")
    _task(tasks, "b", scope="browser-B")
    tasks.observe("w1:p2", "working")
    tasks.observe("w1:p2", "done")
    a_items = tasks.inbox("browser-A")["items"]
    assert [item["task_id"] for item in a_items] == ["a"]
    assert tasks.inbox(None)["items"] == []
    b_id = tasks.inbox("browser-B")["items"][0]["inbox_id"]
    assert tasks.ack("browser-A", [a_items[0]["inbox_id"], b_id]) == {
        "acked": [a_items[0]["inbox_id"]],
        "not_acked": [b_id],
    }
    assert tasks.inbox("browser-A")["items"] == []
    assert len(tasks.inbox("browser-B")["items"]) == 1


# --- through a real runtime ---------------------------------------------------------------------


def _slow_script(working_ms: int) -> AgentScript:
    return AgentScript(
        (
            ScriptStep(after_ms=20, state="working"),
            ScriptStep(after_ms=working_ms, output="done\n"),
            ScriptStep(after_ms=10, state="done"),
        )
    )


@pytest.fixture
def repo_and_sim() -> Iterator[tuple[Path, SimulatorThread]]:
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", {"a.txt": b"a\n"})
        with SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock") as sim:
            yield tmp, sim


def _run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 60))


async def _inbox(client: Client, scope: str | None = None) -> list[dict[str, Any]]:
    params = {} if scope is None else {"browser_session_ref": scope}
    answer = await call_tool(client, "herdr_call", {"method": "herdr_mcp.agent.task.inbox", "params": params})
    items: list[dict[str, Any]] = answer["result"]["items"]
    return items


async def _inbox_until(client: Client, count: int) -> list[dict[str, Any]]:
    async def inbox() -> list[dict[str, Any]] | None:
        items = await _inbox(client)
        return items if len(items) >= count else None

    return await poll_until(inbox, f"{count} inbox items")


def _agent_status(sim: SimulatorThread) -> str:
    status: str = sim.snapshot()["agents"][0]["agent_status"]
    return status


def test_prompt_lands_in_the_inbox_and_ack_clears_it(repo_and_sim: tuple[Path, SimulatorThread]) -> None:
    tmp, sim = repo_and_sim
    sim.set_script("repo-agent", _slow_script(100))

    async def body() -> None:
        async with (
            in_process_runtime(tmp / "herdr.sock", tmp / "config") as runtime,
            runtime.client() as client,
        ):
            submitted = await call_tool(client, "herdr_prompt", {"target": "repo-agent", "text": "go"})
            items = await _inbox_until(client, 1)
            assert [(i["task_id"], i["outcome"]) for i in items] == [(submitted["task_id"], "completed")]
            assert items[0]["summary"]["turn_id"] == submitted["turn_id"]
            acked = await call_tool(
                client,
                "herdr_call",
                {"method": "herdr_mcp.agent.task.ack", "params": {"inbox_ids": [items[0]["inbox_id"]]}},
            )
            assert acked["result"]["acked"] == [items[0]["inbox_id"]]
            assert await _inbox(client) == []

    _run(body())


@pytest.mark.slow
@pytest.mark.parametrize(
    "settle_while_down", [True, False], ids=["settles-while-down", "settles-after-restart"]
)
def test_sigkill_after_submit_still_delivers_exactly_once(
    repo_and_sim: tuple[Path, SimulatorThread], settle_while_down: bool
) -> None:
    tmp, sim = repo_and_sim
    sim.set_script("repo-agent", _slow_script(300 if settle_while_down else 2500))
    with running_runtime(tmp / "herdr.sock", tmp / "config") as first:
        submitted = _run(first.call("herdr_prompt", {"target": "repo-agent", "text": "long job"}))
        wait_until(lambda: _agent_status(sim) in ("working", "done"), "the agent to take the prompt")
        os.kill(first.process.pid, signal.SIGKILL)
        first.process.wait(timeout=10)
    if settle_while_down:
        wait_until(lambda: _agent_status(sim) == "done", "the agent to finish while the runtime is down")

    async def settled(runtime: RunningRuntime) -> list[dict[str, Any]]:
        async with runtime.client() as client:
            await _inbox_until(client, 1)
            await asyncio.sleep(0.5)  # the subject: a window in which a second delivery would show
            return await _inbox(client)

    with running_runtime(tmp / "herdr.sock", tmp / "config") as second:
        items = _run(settled(second))
    assert [(i["task_id"], i["outcome"]) for i in items] == [(submitted["task_id"], "completed")]
