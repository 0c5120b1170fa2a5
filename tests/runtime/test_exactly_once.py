"""Exactly-once mutations over MCP: concurrent duplicates, conflicts, replays after a restart.

The runtime is served in process (tests/runtime_harness.in_process_runtime) except across the
restart, which is a process's: two `herdr-mcp serve` one after the other on one config dir.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.runtime_harness import (
    InProcessRuntime,
    call_tool,
    in_process_runtime,
    make_repo,
    running_runtime,
)
from tests.support.sim_helpers import prompts_through, short_tmp_dir
from tests.support.waiting import wait_until_async

KEY = "key-0001-exactly-once"


@pytest.fixture
def world() -> Iterator[tuple[Path, SimulatorThread, Path]]:
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", {"a.txt": b"a\n"})
        with SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock") as sim:
            yield tmp, sim, repo


def _run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 90))


async def _concurrently(
    runtime: InProcessRuntime, tool: str, arguments: dict[str, Any], count: int = 20
) -> list[Any]:
    """`count` identical calls at once, each from a client (an MCP session) of its own."""
    return list(await asyncio.gather(*(runtime.call(tool, arguments) for _ in range(count))))


def _append(repo: Path, key: str = KEY, line: str = "side effect") -> dict[str, Any]:
    return {
        "workspace": "w1",
        "command": f"sleep 0.3; echo '{line}' >> effects.log; echo appended",
        "intent": "non_idempotent_write",
        "idempotency_key": key,
    }


def _lines(repo: Path) -> list[str]:
    path = repo / "effects.log"
    return path.read_text().splitlines() if path.exists() else []


def _strip(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k != "idempotent_replay"}


def test_twenty_concurrent_identical_execs_run_once(world: tuple[Path, SimulatorThread, Path]) -> None:
    tmp, _, repo = world

    async def body() -> list[Any]:
        async with in_process_runtime(tmp / "herdr.sock", tmp / "config") as runtime:
            return await _concurrently(runtime, "herdr_exec", _append(repo))

    answers = _run(body())
    assert _lines(repo) == ["side effect"]
    assert all("error" not in answer for answer in answers), answers
    assert sorted(answer["idempotent_replay"] for answer in answers) == [False] + [True] * 19
    first = _strip(answers[0])
    assert all(_strip(answer) == first for answer in answers)
    assert first["stdout"] == "appended\n"


def test_twenty_concurrent_identical_prompts_reach_the_agent_once(
    world: tuple[Path, SimulatorThread, Path],
) -> None:
    tmp, sim, _ = world
    request = {"target": "repo-agent", "text": "the one prompt", "idempotency_key": KEY}

    async def body() -> tuple[list[Any], list[str]]:
        async with in_process_runtime(tmp / "herdr.sock", tmp / "config") as runtime:
            answers = await _concurrently(runtime, "herdr_prompt", request)
            # All twenty were answered, so any copy the runtime sent went out before this later
            # prompt, and the agent takes prompts in the order they were sent.
            later = {"target": "repo-agent", "text": "a later prompt", "idempotency_key": KEY + "-later"}
            assert "error" not in await runtime.call("herdr_prompt", later)
            taken = await wait_until_async(
                lambda: prompts_through(sim, "repo-agent", "a later prompt"),
                "the agent taking the later prompt",
            )
            return answers, taken

    answers, taken = _run(body())
    assert all("error" not in answer for answer in answers), answers
    assert len({answer["task_id"] for answer in answers}) == 1
    assert sorted(answer["idempotent_replay"] for answer in answers) == [False] + [True] * 19
    assert taken == ["the one prompt", "a later prompt"]


def test_prompts_sent_together_reach_the_agent_one_by_one(world: tuple[Path, SimulatorThread, Path]) -> None:
    """Herdr types a prompt at once and presses Enter 300 ms later (src/app/api/agents.rs): a second
    prompt typed into the pane before that Enter would join the first, and the agent would take
    both as one prompt. The simulator runs at Herdr's own timing here."""
    tmp, sim, _ = world
    texts = ["first of three", "second of three", "third of three"]

    async def body() -> tuple[list[Any], list[str]]:
        async with in_process_runtime(tmp / "herdr.sock", tmp / "config") as runtime:
            answers = await asyncio.gather(
                *(
                    runtime.call(
                        "herdr_prompt",
                        {"target": "repo-agent", "text": text, "idempotency_key": f"{KEY}-{n}"},
                    )
                    for n, text in enumerate(texts)
                )
            )

            def all_taken() -> list[str] | None:
                taken = sim.prompts("repo-agent")
                return taken if sum(len(prompt) for prompt in taken) >= sum(map(len, texts)) else None

            return list(answers), await wait_until_async(all_taken, "the agent taking every prompt's text")

    answers, taken = _run(body())
    assert all("error" not in answer for answer in answers), answers
    assert sorted(taken) == sorted(texts), taken


def test_same_key_other_request_is_a_conflict_and_runs_nothing(
    world: tuple[Path, SimulatorThread, Path],
) -> None:
    tmp, _, repo = world

    async def body() -> tuple[dict[str, Any], dict[str, Any]]:
        async with (
            in_process_runtime(tmp / "herdr.sock", tmp / "config") as runtime,
            runtime.client() as client,
        ):
            first = await call_tool(client, "herdr_exec", _append(repo))
            return first, await call_tool(client, "herdr_exec", _append(repo, line="another"))

    first, second = _run(body())
    assert "error" not in first
    assert second["error"]["code"] == "idempotency_key_conflict"
    assert _lines(repo) == ["side effect"]


def test_intent_rules(world: tuple[Path, SimulatorThread, Path]) -> None:
    tmp, _, repo = world
    without_key = {"workspace": "w1", "command": "echo x >> effects.log", "intent": "non_idempotent_write"}
    read_only = {
        "workspace": "w1",
        "command": "echo r >> reads.log",
        "intent": "read_only",
        "idempotency_key": KEY,
    }

    async def body() -> list[dict[str, Any]]:
        async with (
            in_process_runtime(tmp / "herdr.sock", tmp / "config") as runtime,
            runtime.client() as client,
        ):
            return [
                await call_tool(client, "herdr_exec", arguments)
                for arguments in (without_key, read_only, read_only)
            ]

    refused, first, again = _run(body())
    assert refused["error"]["code"] == "idempotency_key_required"
    assert not (repo / "effects.log").exists()
    assert "idempotent_replay" not in first and "idempotent_replay" not in again
    assert (repo / "reads.log").read_text() == "r\nr\n", "read_only intent never records"


@pytest.mark.slow
def test_replay_after_restart_returns_the_stored_answer(world: tuple[Path, SimulatorThread, Path]) -> None:
    tmp, _, repo = world
    with running_runtime(tmp / "herdr.sock", tmp / "config") as runtime:
        first = _run(runtime.call("herdr_exec", _append(repo)))
    with running_runtime(tmp / "herdr.sock", tmp / "config") as restarted:
        replay = _run(restarted.call("herdr_exec", _append(repo)))
        session = _run(restarted.call("herdr_exec_read", {"session_id": first["session_id"]}))
    assert replay["idempotent_replay"] is True
    assert _strip(replay) == _strip(first)
    assert _lines(repo) == ["side effect"]
    assert session["stdout"]["text"] == "appended\n" and session["running"] is False
