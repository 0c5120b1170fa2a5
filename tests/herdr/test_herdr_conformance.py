"""Every line between herdr-mcp and the simulator is what real Herdr sends or accepts.

The runtime (in process) talks to the simulator through a recording proxy (tests/support/herdr_wire.py)
for a realistic session: herdr_inspect, herdr_since, herdr_prompt with wait, herdr_since again,
with the runtime's event feed subscribed all along; then a second runtime on the same state (its
feed subscribes again: at protocol 20 Herdr replays retained lifecycle events, counted as replayed)
driving the long tail through herdr_call (workspace.create ... workspace.close); then HerdrClient
calls, through the same proxy,
the methods the runtime does not make itself. Every recorded request line, answer and pushed event
is checked against herdr_mcp.herdr.reference for the simulator's protocol (strict: no undeclared
property, no null optional). A failure names the line and the problem: it is the simulator (or the
runtime) that must change, never the reference.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.herdr import HerdrClient, HerdrRemoteError
from herdr_mcp.herdr.reference import load
from herdr_mcp.sim import Simulator
from tests.support.herdr_wire import RecordingProxy
from tests.support.runtime_harness import call_tool, in_process_runtime
from tests.support.sim_helpers import fast_script, run, short_tmp_dir, two_project_config


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


async def _runtime_session(proxy: RecordingProxy, config_dir: Path) -> None:
    async with in_process_runtime(proxy.socket_path, config_dir) as runtime, runtime.client() as client:

        async def ok(name: str, args: dict[str, Any]) -> dict[str, Any]:
            result = await call_tool(client, name, args)
            assert "error" not in result, (name, result)
            return result

        inspect = await ok("herdr_inspect", {})
        workspace = inspect["workspaces"][0]["workspace_id"]
        since = await ok("herdr_since", {"cursor": inspect["cursor"]})
        prompt = await ok(
            "herdr_prompt",
            {"target": workspace, "text": "add a test", "wait": {"until": ["done"], "timeout_ms": 10000}},
        )
        assert prompt["wait"]["reached"] is True, prompt
        await ok("herdr_since", {"cursor": since["next_cursor"]})


async def _long_tail(proxy: RecordingProxy, config_dir: Path, base: Path) -> None:
    """A second runtime on the same state (its event feed subscribes again: at protocol 20 Herdr
    replays its retained lifecycle history on the wire), then the long tail through herdr_call."""
    async with in_process_runtime(proxy.socket_path, config_dir) as runtime, runtime.client() as client:

        async def native(method: str, params: dict[str, Any]) -> dict[str, Any]:
            answer = await call_tool(client, "herdr_call", {"method": method, "params": params})
            assert "result" in answer, (method, answer)
            result: dict[str, Any] = answer["result"]
            return result

        await call_tool(client, "herdr_inspect", {})
        made = await native("workspace.create", {"cwd": str(base / "api"), "label": "tail"})
        workspace = made["workspace"]["workspace_id"]
        root = made["root_pane"]["pane_id"]
        await native("tab.create", {"workspace_id": workspace, "label": "second"})
        shell = (await native("pane.split", {"target_pane_id": root, "direction": "right"}))["pane"][
            "pane_id"
        ]
        await native("pane.send_text", {"pane_id": shell, "text": "echo tail-$((40+2))"})
        await native("pane.send_keys", {"pane_id": shell, "keys": ["Enter"]})
        await native(
            "pane.wait_for_output",
            {
                "pane_id": shell,
                "source": "recent",
                "match": {"type": "substring", "value": "tail-42"},
                "timeout_ms": 10000,
            },
        )
        await native("pane.read", {"pane_id": shell, "source": "recent", "lines": 20})
        await native("agent.start", {"pane_id": root, "kind": "claude", "name": "tail-agent"})
        await native("agent.list", {})
        await native("layout.export", {"pane_id": shell})
        await native("pane.zoom", {"pane_id": shell, "mode": "toggle"})
        await native("worktree.list", {"workspace_id": "w1"})
        waited = await call_tool(
            client,
            "herdr_call",
            {
                "method": "events.wait",
                "params": {
                    "match_event": {
                        "event": "pane_agent_status_changed",
                        "pane_id": "w1:p2",
                        "agent_status": "blocked",
                    },
                    "timeout_ms": 200,
                },
            },
        )
        assert "error" in json.dumps(waited), waited  # Herdr's timeout, answered as an error
        await native("pane.close", {"pane_id": shell})
        await native("workspace.close", {"workspace_id": workspace})


def _replayed(proxy: RecordingProxy) -> int:
    """Lifecycle events a later events.subscribe connection got that an earlier one had got."""
    seen: set[str] = set()
    replayed = 0
    for connection in proxy.connections:
        if connection.method != "events.subscribe":
            continue
        lines = [json.dumps(e, sort_keys=True) for e in connection.events if "." not in e["event"]]
        replayed += sum(1 for line in lines if line in seen)
        seen.update(lines)
    return replayed


async def _direct_calls(proxy: RecordingProxy) -> None:
    """The methods herdr-mcp's table offers that the session above may not have sent."""
    client = HerdrClient(proxy.socket_path, timeout=5.0)
    snapshot = (await client.call("session.snapshot"))["snapshot"]
    workspace = snapshot["workspaces"][0]["workspace_id"]
    tab = snapshot["tabs"][0]["tab_id"]
    pane = snapshot["panes"][0]["pane_id"]
    agent = snapshot["agents"][0]["pane_id"]
    await client.call("ping")
    await client.call("workspace.list")
    await client.call("workspace.get", {"workspace_id": workspace})
    await client.call("tab.list", {"workspace_id": workspace})
    await client.call("tab.get", {"tab_id": tab})
    await client.call("pane.list", {"workspace_id": workspace})
    await client.call("pane.get", {"pane_id": pane})
    await client.call("pane.read", {"pane_id": pane, "source": "recent", "lines": 20})
    await client.call("pane.read", {"pane_id": pane, "source": "visible"})
    await client.call("agent.list")
    await client.call("agent.get", {"target": agent})
    await client.call("agent.read", {"target": agent, "source": "recent"})
    await client.call("agent.wait", {"target": agent, "until": ["idle", "done"], "timeout_ms": 3000})
    await client.call("pane.send_input", {"pane_id": pane, "text": "echo hi", "keys": ["Enter"]})
    # Errors are answers too.
    for method, params in (
        ("pane.get", {"pane_id": "w9:p9"}),
        ("agent.get", {"target": "nobody"}),
        ("agent.prompt", {"target": agent, "text": ""}),
    ):
        with pytest.raises(HerdrRemoteError):
            await client.call(method, params)
    async with client.subscribe(
        [{"type": "pane.agent_status_changed", "pane_id": agent}, {"type": "pane.created"}]
    ) as events:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                async for _ in events:
                    break


@pytest.mark.parametrize("protocol", [20, 22])
def test_every_line_of_a_session_is_what_real_herdr_speaks(tmp_short: Path, protocol: int) -> None:
    reference = load(protocol)
    repo = tmp_short / "api"
    repo.mkdir(parents=True)
    for args in (
        ["init", "-q", "-b", "main"],
        ["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "x"],
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True)

    async def body() -> RecordingProxy:
        simulator = Simulator(
            two_project_config(tmp_short, fast_script(), protocol=protocol), tmp_short / "herdr.sock"
        )
        await simulator.start()
        try:
            async with RecordingProxy(simulator.socket_path, tmp_short / "proxy.sock") as proxy:
                await _runtime_session(proxy, tmp_short / "config")
                await _long_tail(proxy, tmp_short / "config", tmp_short)
                await _direct_calls(proxy)
            return proxy
        finally:
            await simulator.stop()

    proxy = run(body(), timeout=60)
    problems: list[str] = []
    for connection in proxy.connections:
        if connection.undecodable:
            problems.append(
                f"{connection.method}: lines that are not JSON objects {connection.undecodable[:2]}"
            )
        if connection.request is not None:
            problems += [
                f"request {connection.request}: {p}" for p in reference.request_problems(connection.request)
            ]
        for answer in connection.answers:
            problems += [
                f"answer to {connection.method} {answer}: {p}"
                for p in reference.response_problems(connection.method, answer)
            ]
        for event in connection.events:
            problems += [f"event {event}: {p}" for p in reference.event_problems(event)]
    requests, answers, events = len(proxy.requests()), len(proxy.answers()), len(proxy.events())
    replayed = _replayed(proxy)
    print(
        f"protocol {protocol}: {requests} requests, {answers} answers, {events} events "
        f"({replayed} replayed lifecycle events), "
        + ("all valid" if not problems else f"{len(problems)} problems")
    )
    methods = sorted({c.method for c in proxy.connections})
    print(f"protocol {protocol}: methods seen {methods}")
    assert requests >= 40 and answers >= 40 and events >= 10, (requests, answers, events)
    assert (replayed > 0) == reference.lifecycle_replay, replayed
    for method in (
        "workspace.create",
        "tab.create",
        "pane.split",
        "agent.start",
        "events.wait",
        "worktree.list",
    ):
        assert method in methods, method
    assert not problems, "\n".join(problems[:40])
