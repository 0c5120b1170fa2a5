"""Which browser scope a herdr_prompt's outcome wakes (docs/browser-protocol.md, section 2):
`params._meta["herdr-mcp/scope"]` of the tools/call (over Streamable HTTP and over stdio), else
the one scope bound to the target's workspace, else none. A real MCP client, a real runtime, the
simulator's agents settling for real, the inbox read back through the runtime."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from herdr_mcp.sim import SimulatorThread
from tests.support.push_harness import push_runtime, two_agent_config
from tests.support.runtime_harness import call_tool, mcp_client
from tests.support.sim_helpers import fast_script, run, short_tmp_dir
from tests.support.waiting import poll_until

BODY_TIMEOUT_S = 90.0
SCOPE_A, SCOPE_B = "chatgpt:conv:aaa-1", "zai:conv:bbb-2"


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


async def prompt(client: Client, target: str, scope: object | None) -> dict[str, Any]:
    meta = None if scope is None else {"herdr-mcp/scope": scope}
    result = await client.call_tool("herdr_prompt", {"target": target, "text": "go"}, meta=meta)  # type: ignore[arg-type]
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


async def inbox(client: Client, scope: str | None) -> list[dict[str, Any]]:
    params: dict[str, Any] = {} if scope is None else {"browser_session_ref": scope}
    answer = await call_tool(client, "herdr_call", {"method": "herdr_mcp.agent.task.inbox", "params": params})
    items: list[dict[str, Any]] = answer["result"]["items"]
    return items


async def settled_agents(client: Client, scope: str | None, count: int) -> list[str]:
    async def probe() -> list[str] | None:
        items = await inbox(client, scope)
        return sorted(item["summary"]["agent"] for item in items) if len(items) >= count else None

    return await poll_until(probe, f"{count} outcome(s) in the inbox of {scope}")


def test_each_task_settles_into_the_inbox_of_the_scope_that_dispatched_it(tmp_short: Path) -> None:
    async def body() -> None:
        with SimulatorThread(two_agent_config(tmp_short, fast_script()), tmp_short / "herdr.sock"):
            async with (
                push_runtime(
                    tmp_short / "herdr.sock", tmp_short / "config", tmp_short / "ipc" / "r.sock"
                ) as rt,
                mcp_client(rt.tcp_base + "/mcp", rt.token) as client,
            ):
                first = await prompt(client, "coder", SCOPE_A)
                second = await prompt(client, "reviewer", SCOPE_B)
                assert (first["browser_session_ref"], second["browser_session_ref"]) == (SCOPE_A, SCOPE_B)
                assert await settled_agents(client, SCOPE_A, 1) == ["coder"]
                assert await settled_agents(client, SCOPE_B, 1) == ["reviewer"]
                assert await inbox(client, None) == []
                # And the browser's own read of the scope sees the same.
                async with rt.unix() as http:
                    mine = (await http.post("/browser/inbox.read", json={"scope": SCOPE_A})).json()
                assert [item["task_id"] for item in mine["items"]] == [first["task_id"]]

    run(body(), BODY_TIMEOUT_S)


def test_without_meta_the_single_bound_scope_of_the_workspace_else_none(tmp_short: Path) -> None:
    async def body() -> None:
        with SimulatorThread(two_agent_config(tmp_short, fast_script()), tmp_short / "herdr.sock"):
            async with (
                push_runtime(
                    tmp_short / "herdr.sock", tmp_short / "config", tmp_short / "ipc" / "r.sock"
                ) as rt,
                rt.unix() as http,
                mcp_client(rt.tcp_base + "/mcp", rt.token) as client,
            ):
                await http.post("/browser/binding.set", json={"scope": SCOPE_A, "workspace_id": "w1"})
                bound = await prompt(client, "coder", None)  # w1: bound to SCOPE_A alone
                assert bound["browser_session_ref"] == SCOPE_A
                assert await settled_agents(client, SCOPE_A, 1) == ["coder"]
                unbound = await prompt(client, "reviewer", None)  # w2: bound to nothing
                assert "browser_session_ref" not in unbound
                await http.post("/browser/binding.set", json={"scope": SCOPE_B, "workspace_id": "w1"})
                ambiguous = await prompt(client, "tester", None)  # w1: bound to two scopes
                assert "browser_session_ref" not in ambiguous
                assert await settled_agents(client, None, 2) == ["reviewer", "tester"]
                assert [i["summary"]["agent"] for i in await inbox(client, SCOPE_B)] == []
                # A scope named in _meta wins over the binding.
                named = await prompt(client, "coder", SCOPE_B)
                assert named["browser_session_ref"] == SCOPE_B

    run(body(), BODY_TIMEOUT_S)


@pytest.mark.parametrize("scope", ["chatgpt:bad", "", 7, "chatgpt:conv:" + "x" * 300])
def test_a_malformed_scope_in_meta_is_refused_before_anything_is_sent(tmp_short: Path, scope: object) -> None:
    async def body() -> None:
        with SimulatorThread(two_agent_config(tmp_short, fast_script()), tmp_short / "herdr.sock") as sim:
            async with (
                push_runtime(
                    tmp_short / "herdr.sock", tmp_short / "config", tmp_short / "ipc" / "r.sock"
                ) as rt,
                mcp_client(rt.tcp_base + "/mcp", rt.token) as client,
            ):
                answer = await prompt(client, "coder", scope)
                assert answer["error"]["code"] == "invalid_arguments"
                assert "herdr-mcp/scope" in answer["error"]["message"]
                assert [a["agent_status"] for a in sim.snapshot()["agents"]] == ["idle"] * 3
                assert rt.services.tasks.tasks.open_tasks() == []

    run(body(), BODY_TIMEOUT_S)


def test_the_scope_in_meta_travels_over_stdio_too(tmp_short: Path) -> None:
    async def body() -> None:
        with SimulatorThread(two_agent_config(tmp_short, fast_script()), tmp_short / "herdr.sock"):
            command = Path(sys.executable).with_name("herdr-mcp")
            params = StdioServerParameters(
                command=str(command),
                args=["stdio", "--no-sim", "--herdr-socket", str(tmp_short / "herdr.sock"),
                      "--config-dir", str(tmp_short / "config")],
            )  # fmt: skip
            async with Client(params) as client:
                answer = await prompt(client, "reviewer", SCOPE_B)
                assert answer["browser_session_ref"] == SCOPE_B
                assert await settled_agents(client, SCOPE_B, 1) == ["reviewer"]
                assert await inbox(client, None) == []

    run(body(), BODY_TIMEOUT_S)
