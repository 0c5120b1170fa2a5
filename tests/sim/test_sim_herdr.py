"""The simulator behaves as Herdr's source says, on protocol 20 and 22 where they differ.

Each test names the Herdr behaviour it shows; the source file is named in the simulator's code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.herdr import HerdrRemoteError
from herdr_mcp.sim import (
    SimConfig,
    SimConfigError,
    WorkspaceConfig,
)
from tests.support.sim_helpers import run, running_sim, short_tmp_dir, two_project_config

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


async def raw(path: Path, request: dict[str, Any]) -> dict[str, Any]:
    reader, writer = await asyncio.open_unix_connection(str(path))
    try:
        writer.write((json.dumps(request) + "\n").encode())
        await writer.drain()
        answer: dict[str, Any] = json.loads(await reader.readline())
        return answer
    finally:
        writer.close()


async def subscribe_lines(
    path: Path, subscriptions: list[dict[str, Any]], count: int, wait: float = 1.0
) -> list[dict[str, Any]]:
    """The ack and up to `count` event lines that come within `wait` seconds."""
    reader, writer = await asyncio.open_unix_connection(str(path))
    lines: list[dict[str, Any]] = []
    try:
        writer.write(
            (
                json.dumps(
                    {"id": "s1", "method": "events.subscribe", "params": {"subscriptions": subscriptions}}
                )
                + "\n"
            ).encode()
        )
        await writer.drain()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                while len(lines) < count + 2:  # one more than wanted: none may follow
                    line = await reader.readline()
                    if not line:
                        break
                    lines.append(json.loads(line))
    finally:
        writer.close()
    return lines


@pytest.mark.parametrize(("protocol", "version"), [(20, "0.8.2"), (22, "0.9.2")])
def test_ping_reports_the_protocol_and_version(tmp_short: Path, protocol: int, version: str) -> None:
    async def body() -> None:
        async with running_sim(tmp_short, two_project_config(tmp_short, protocol=protocol)) as (_, client):
            pong = await client.call("ping")
            assert (pong["protocol"], pong["version"]) == (protocol, version)

    run(body())


def test_config_refuses_unknown_protocols_and_bad_time_scales() -> None:
    with pytest.raises(SimConfigError, match="protocol"):
        SimConfig(protocol=21)
    for scale in (0, -1.0, float("nan")):
        with pytest.raises(SimConfigError, match="time_scale"):
            SimConfig(time_scale=scale)


@pytest.mark.parametrize(("protocol", "replayed"), [(20, True), (22, False)])
def test_lifecycle_history_is_replayed_at_20_and_not_at_22(
    tmp_short: Path, protocol: int, replayed: bool
) -> None:
    async def body() -> None:
        async with running_sim(tmp_short, two_project_config(tmp_short, protocol=protocol)) as (simulator, _):
            simulator.add_workspace(WorkspaceConfig(cwd=tmp_short / "web", label="docs"))
            lines = await subscribe_lines(
                simulator.socket_path, [{"type": "workspace.created"}], 1 if replayed else 0, 0.5
            )
            assert lines[0] == {"id": "s1", "result": {"type": "subscription_started"}}
            events = lines[1:]
            assert [e["data"]["workspace"]["label"] for e in events] == (["docs"] if replayed else [])

    run(body())


def test_only_the_last_512_events_are_replayed(tmp_short: Path) -> None:
    async def body() -> None:
        config = two_project_config(tmp_short, protocol=20, time_scale=0.01)
        async with running_sim(tmp_short, config) as (simulator, _):
            for _ in range(600):
                simulator.append_output("w1:p1", "x")
                simulator.set_agent_status("coder", "working")
                simulator.set_agent_status("coder", "idle")
            assert len(simulator.hub.events_after(0)) == 512
            lines = await subscribe_lines(simulator.socket_path, [{"type": "workspace.created"}], 0, 0.3)
            assert lines[1:] == []  # the creation events fell out of the hub

    run(body())


def test_prompt_presses_enter_300_ms_later_and_answers_the_agent_as_it_was(tmp_short: Path) -> None:
    async def body() -> None:
        config = two_project_config(tmp_short, time_scale=1.0)
        async with running_sim(tmp_short, config) as (_simulator, client):
            started = time.monotonic()
            prompted = await client.call("agent.prompt", {"target": "coder", "text": "refactor"})
            assert prompted["agent"]["agent_status"] == "idle"  # the pre-prompt AgentInfo
            await asyncio.sleep(0.2)  # the subject: still idle inside the 300 ms Enter delay
            assert (await client.call("agent.get", {"target": "coder"}))["agent"]["agent_status"] == "idle"
            waited = await client.call(
                "agent.wait", {"target": "coder", "until": ["working", "done"], "timeout_ms": 3000}
            )
            assert waited["agent"]["agent_status"] in ("working", "done")
            assert time.monotonic() - started >= 0.3

    run(body())


def test_time_scale_shortens_the_enter_delay(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short, two_project_config(tmp_short, time_scale=0.1)) as (_, client):
            started = time.monotonic()
            await client.call("agent.prompt", {"target": "coder", "text": "go", "wait": {"until": ["done"]}})
            assert time.monotonic() - started < 0.3 + 0.2

    run(body())


def test_prompt_errors(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, client):
            cases = [
                ({"target": "coder", "text": ""}, "empty_agent_prompt"),
                ({"target": "w1", "text": "x"}, "agent_not_found"),
            ]
            simulator.set_agent_status("reviewer", "blocked")
            cases.append(({"target": "reviewer", "text": "x"}, "agent_blocked"))
            for params, code in cases:
                with pytest.raises(HerdrRemoteError) as caught:
                    await client.call("agent.prompt", params)
                assert caught.value.code == code

    run(body())


def test_prompt_wait_stalls_when_the_prompt_changes_nothing(tmp_short: Path) -> None:
    from herdr_mcp.sim import AgentScript

    async def body() -> None:
        config = two_project_config(tmp_short, AgentScript(()), time_scale=0.05)  # a 250 ms window
        async with running_sim(tmp_short, config) as (_, client):
            for timeout_ms, code in [
                (None, "agent_prompt_stalled"),
                (100, "timeout"),
                (5000, "agent_prompt_stalled"),
            ]:
                wait: dict[str, Any] = {} if timeout_ms is None else {"timeout_ms": timeout_ms}
                with pytest.raises(HerdrRemoteError) as caught:
                    await client.call(
                        "agent.prompt", {"target": "coder", "text": "x", "wait": wait}, timeout=10
                    )
                assert caught.value.code == code

    run(body())


def test_agent_wait_returns_at_once_when_already_in_until(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (_, client):
            started = time.monotonic()
            waited = await client.call("agent.wait", {"target": "coder"})
            assert waited["agent"]["agent_status"] == "idle"
            assert time.monotonic() - started < 0.2

    run(body())


def test_same_name_twice_is_ambiguous(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, client):
            simulator.world.panes["w2:p1"].agent.name = "coder"  # type: ignore[union-attr]
            with pytest.raises(HerdrRemoteError) as caught:
                await client.call("agent.get", {"target": "coder"})
            assert caught.value.code == "agent_target_ambiguous"

    run(body())


def test_agent_info_has_no_kind_or_label_and_no_nulls(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (_, client):
            snapshot = (await client.call("session.snapshot"))["snapshot"]
            for agent in snapshot["agents"]:
                assert not {"kind", "label"} & set(agent)

            def nulls(value: Any) -> bool:
                if isinstance(value, dict):
                    return any(v is None or nulls(v) for v in value.values())
                return isinstance(value, list) and any(nulls(v) for v in value)

            assert not nulls(snapshot)

    run(body())


def test_status_subscription_sends_the_current_status_when_the_filter_equals_it(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, _):
            subscription = [{"type": "pane.agent_status_changed", "pane_id": "w1:p2", "agent_status": "idle"}]
            lines = await subscribe_lines(simulator.socket_path, subscription, 1, 1.0)
            assert lines[1] == {
                "event": "pane.agent_status_changed",
                "data": {"pane_id": "w1:p2", "workspace_id": "w1", "agent_status": "idle", "agent": "claude"},
            }

    run(body())


def test_a_subscription_to_a_missing_pane_fails_with_the_probe_id(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, _):
            subscriptions = [
                {"type": "pane.created"},
                {"type": "pane.agent_status_changed", "pane_id": "w9:p9"},
            ]
            answer = await raw(
                simulator.socket_path,
                {"id": "r7", "method": "events.subscribe", "params": {"subscriptions": subscriptions}},
            )
            assert answer["id"] == "r7:sub:1:probe"
            assert answer["error"]["code"] == "pane_not_found"

    run(body())


def test_pane_read_caps_lines_at_1000_and_defaults_recent_to_80(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, client):
            simulator.append_output("w1:p1", "".join(f"{i}\n" for i in range(1500)))
            default = (await client.call("pane.read", {"pane_id": "w1:p1", "source": "recent"}))["read"]
            capped = (
                await client.call("pane.read", {"pane_id": "w1:p1", "source": "recent", "lines": 5000})
            )["read"]
            assert len(default["text"].split("\n")) == 80
            assert len(capped["text"].split("\n")) == 1000
            assert default["revision"] == 0

    run(body())


def test_shell_pane_runs_commands_in_its_cwd(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (_, client):
            await client.call("pane.send_text", {"pane_id": "w1:p1", "text": "pwd; echo hi"})
            await client.call("pane.send_keys", {"pane_id": "w1:p1", "keys": ["Enter"]})
            matched = await client.call(
                "pane.wait_for_output",
                {
                    "pane_id": "w1:p1",
                    "source": "recent",
                    "match": {"type": "regex", "value": "^hi$"},
                    "timeout_ms": 5000,
                },
            )
            assert matched["matched_line"] == "hi"
            assert str((tmp_short / "api").resolve()) in matched["read"]["text"]
            with pytest.raises(HerdrRemoteError) as caught:
                await client.call("pane.send_keys", {"pane_id": "w1:p1", "keys": ["NoSuchKey"]})
            assert caught.value.code == "invalid_key"

    run(body())


def test_process_info_reports_real_pids_and_processes_are_reaped(tmp_short: Path) -> None:
    async def body() -> list[int]:
        async with running_sim(tmp_short) as (simulator, client):
            info = (await client.call("pane.process_info", {"pane_id": "w1:p1"}))["process_info"]
            assert os.path.exists(f"/proc/{info['shell_pid']}")
            created = await client.call("pane.split", {"target_pane_id": "w1:p1", "direction": "down"})
            new_pid = simulator.pane_pids()[created["pane"]["pane_id"]]
            await client.call("pane.close", {"pane_id": created["pane"]["pane_id"]})
            assert not os.path.exists(f"/proc/{new_pid}")
            return list(simulator.pane_pids().values())

    pids = run(body())
    assert pids and not [pid for pid in pids if os.path.exists(f"/proc/{pid}")]


def test_split_zoom_and_layout_round_trip(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (_, client):
            before = (await client.call("pane.layout", {"pane_id": "w1:p1"}))["layout"]
            await client.call("pane.split", {"target_pane_id": "w1:p1", "direction": "down"})
            after = (await client.call("pane.layout", {"pane_id": "w1:p1"}))["layout"]
            assert len(after["panes"]) == len(before["panes"]) + 1
            zoom = (await client.call("pane.zoom", {"pane_id": "w1:p1"}))["zoom"]
            unzoom = (await client.call("pane.zoom", {"pane_id": "w1:p1"}))["zoom"]
            assert (zoom["zoomed"], unzoom["zoomed"]) == (True, False)
            exported = (await client.call("layout.export", {"pane_id": "w1:p1"}))["layout"]
            applied = (await client.call("layout.apply", {"workspace_id": "w1", "root": exported["root"]}))[
                "layout"
            ]

            def shape(node: dict[str, Any]) -> Any:
                return (
                    node["type"]
                    if node["type"] == "pane"
                    else (node["direction"], shape(node["first"]), shape(node["second"]))
                )

            assert shape(applied["root"]) == shape(exported["root"])

    run(body())


def test_workspace_and_tab_lifecycle_events(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, client):
            created = await client.call("workspace.create", {"cwd": str(tmp_short / "web"), "label": "docs"})
            workspace_id = created["workspace"]["workspace_id"]
            assert workspace_id == "w3" and created["root_pane"]["pane_id"] == "w3:p1"
            await client.call("workspace.rename", {"workspace_id": workspace_id, "label": "notes"})
            await client.call("workspace.close", {"workspace_id": workspace_id})
            seen = [e.event for e in simulator.hub.events_after(0)]
            for kind in (
                "workspace_created",
                "tab_created",
                "pane_created",
                "layout_updated",
                "workspace_renamed",
                "workspace_closed",
            ):
                assert kind in seen

    run(body())


def test_worktrees_are_real_git_worktrees(tmp_short: Path) -> None:
    repo = tmp_short / "api"
    repo.mkdir()
    for args in (
        ["init", "-q", "-b", "main"],
        ["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "x"],
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True)

    async def body() -> None:
        async with running_sim(tmp_short) as (_, client):
            created = await client.call("worktree.create", {"workspace_id": "w1", "branch": "feature"})
            path = Path(created["worktree"]["path"])
            assert path.is_dir() and created["worktree"]["branch"] == "feature"
            listed = await client.call("worktree.list", {"workspace_id": "w1"})
            assert any(w["path"] == str(path) for w in listed["worktrees"])
            removed = await client.call(
                "worktree.remove", {"workspace_id": created["workspace"]["workspace_id"]}
            )
            assert removed["path"] == str(path) and not path.exists()

    run(body())
