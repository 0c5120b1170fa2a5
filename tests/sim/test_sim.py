"""The Herdr simulator, over real Unix sockets: protocol fidelity, the session model, scripted
agents, fault injection, the background-thread wrapper and the CLI as a real subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.herdr import HerdrClient, HerdrEvent, HerdrRemoteError, HerdrTimeout
from herdr_mcp.runtime.native import RUNTIME_METHODS
from herdr_mcp.sim import (
    AgentConfig,
    AgentScript,
    PaneConfig,
    ScriptStep,
    SimConfig,
    SimConfigError,
    Simulator,
    SimulatorError,
    SimulatorThread,
    WorkspaceConfig,
)
from herdr_mcp.sim.ids import workspace_id_for
from tests.support.sim_helpers import fast_script, run, running_sim, short_tmp_dir, two_project_config

pytestmark = pytest.mark.timeout(30)

WORKSPACE_INFO_KEYS = {
    "workspace_id", "number", "label", "focused", "pane_count", "tab_count", "active_tab_id", "agent_status",
}  # fmt: skip
PANE_INFO_KEYS = {
    "pane_id", "terminal_id", "workspace_id", "tab_id", "focused", "agent_status", "revision", "cwd",
    "foreground_cwd", "label", "agent", "title", "scroll",
}  # fmt: skip
# `scroll`: Herdr fills PaneInfo.scroll from the pane's terminal runtime whenever it has one
# (src/app/creation.rs pane_info; src/api/schema/panes.rs, in the protocol-20 schema too).


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


async def raw_exchange(path: Path, payload: bytes) -> dict[str, Any]:
    """Send raw bytes as one request and parse the single line that comes back."""
    reader, writer = await asyncio.open_unix_connection(str(path))
    try:
        writer.write(payload)
        await writer.drain()
        response: dict[str, Any] = json.loads(await reader.readline())
        return response
    finally:
        writer.close()


async def next_events(events: Any, count: int) -> list[HerdrEvent]:
    return [await anext(events) for _ in range(count)]


# -- socket -------------------------------------------------------------------------------------


def test_socket_is_private_and_removed_on_stop(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, _):
            mode = simulator.socket_path.stat().st_mode
            assert stat.S_ISSOCK(mode)
            assert stat.S_IMODE(mode) == 0o600
        assert not simulator.socket_path.exists()

    run(body())


def test_socket_path_safety(tmp_short: Path) -> None:
    config = two_project_config(tmp_short)
    regular = tmp_short / "file.sock"
    regular.write_text("not a socket")

    async def body() -> None:
        with pytest.raises(SimulatorError, match="not a socket"):
            await Simulator(config, regular).start()
        async with running_sim(tmp_short, config) as (simulator, _):
            with pytest.raises(SimulatorError, match="already served"):
                await Simulator(config, simulator.socket_path).start()
        stale = tmp_short / "stale.sock"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as leftover:
            leftover.bind(str(stale))
        async with Simulator(config, stale):
            assert (await HerdrClient(stale).call("ping"))["type"] == "pong"
        with pytest.raises(SimulatorError, match="longer than"):
            await Simulator(config, tmp_short / ("x" * 120)).start()

    run(body())


# -- protocol fidelity --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "expected_id", "code"),
    [
        (b"{not json\n", "", "invalid_request"),
        (b"[1, 2]\n", "", "invalid_request"),
        (b'{"method": "ping", "params": {}}\n', "", "invalid_request"),
        # Herdr parses the whole line with serde (src/api/server.rs): any refusal has an empty id.
        (b'{"id": "r1", "method": "nope.nothing", "params": {}}\n', "", "invalid_request"),
        (b'{"id": "r2", "method": "ping"}\n', "", "invalid_request"),
        (b'{"id": "r3", "method": "pane.get", "params": []}\n', "", "invalid_request"),
        (b'{"id": "r4", "method": "pane.get", "params": {"pane_id": 7}}\n', "", "invalid_request"),
        (
            b'{"id": "r6", "method": "agent.wait", "params": {"target": "coder", "until": ["x"]}}\n',
            "",
            "invalid_request",
        ),
    ],
)
def test_bad_requests_get_herdr_error_codes(
    tmp_short: Path, payload: bytes, expected_id: str, code: str
) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, _):
            response = await raw_exchange(simulator.socket_path, payload)
            assert response["id"] == expected_id
            assert response["error"]["code"] == code
            assert response["error"]["message"]

    run(body())


def test_unknown_extra_params_are_ignored(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, _):
            payload = b'{"id": "r5", "method": "ping", "params": {"extra": true}}\n'
            response = await raw_exchange(simulator.socket_path, payload)
            assert (response["id"], response["result"]["type"]) == ("r5", "pong")

    run(body())


def test_line_over_one_mebibyte_closes_the_connection_unanswered(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, _):
            line = json.dumps({"id": "big", "method": "ping", "params": {"pad": "x" * (1 << 20)}}).encode()
            reader, writer = await asyncio.open_unix_connection(str(simulator.socket_path))
            writer.write(line + b"\n")
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            assert await reader.read() == b""
            writer.close()

    run(body())


def test_the_simulator_answers_every_method_the_runtime_sends(tmp_short: Path) -> None:
    simulator = Simulator(two_project_config(tmp_short), tmp_short / "unused.sock")
    assert simulator.supported_methods() >= RUNTIME_METHODS


def test_session_snapshot_shapes(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (_, client):
            snapshot = (await client.call("session.snapshot"))["snapshot"]
            assert (snapshot["version"], snapshot["protocol"]) == ("0.9.2", 22)
            assert [layout["tab_id"] for layout in snapshot["layouts"]] == ["w1:t1", "w2:t1"]
            assert snapshot["focused_workspace_id"] == "w1"
            workspace = snapshot["workspaces"][0]
            assert set(workspace) == WORKSPACE_INFO_KEYS
            assert (workspace["number"], workspace["pane_count"], workspace["active_tab_id"]) == (
                1,
                2,
                "w1:t1",
            )
            tab = snapshot["tabs"][0]
            assert {"tab_id", "workspace_id", "label", "focused", "pane_count", "agent_status"} <= set(tab)
            shell, coder = snapshot["panes"][:2]
            assert set(shell) == PANE_INFO_KEYS - {"agent", "title"}  # optional fields omitted, not null
            assert (shell["agent_status"], shell["focused"]) == ("unknown", True)
            assert (coder["agent"], coder["agent_status"], coder["label"]) == ("claude", "idle", "coder")
            agent = snapshot["agents"][0]
            assert {"name", "state_change_seq", "terminal_id"} <= set(agent)
            assert not {"kind", "label"} & set(agent)
            assert all(Path(p["cwd"]).is_dir() for p in snapshot["panes"])

    run(body())


def test_pane_read_sources_lines_and_ansi(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, client):
            simulator.append_output("w1:p1", "".join(f"line {i}\n" for i in range(30)))
            simulator.append_output("w1:p1", "\x1b[31mred\x1b[0m " + "y" * 150)

            async def read(**params: Any) -> dict[str, Any]:
                result = await client.call("pane.read", {"pane_id": "w1:p1", **params})
                return dict(result["read"])

            visible = await read(source="visible")
            assert len(visible["text"].split("\n")) == 24  # the screen's rows
            # Herdr: truncated only counts lines a `lines` limit left out (limit_snapshot_lines).
            assert not visible["truncated"]
            recent = await read(source="recent", lines=3)
            assert recent["text"].split("\n")[0] == "line 29"
            assert recent["text"].split("\n")[1] == "red " + "y" * 76  # wrapped at 80 columns
            unwrapped = await read(source="recent_unwrapped", lines=1)
            assert unwrapped["text"] == "red " + "y" * 150
            assert "\x1b[" in (await read(source="recent_unwrapped", lines=1, strip_ansi=False))["text"]
            assert "\x1b[" in (await read(source="recent_unwrapped", lines=1, format="ansi"))["text"]
            everything = await read(source="recent_unwrapped", lines=1000)
            assert not everything["truncated"]
            assert (everything["pane_id"], everything["tab_id"], everything["format"]) == (
                "w1:p1",
                "w1:t1",
                "text",
            )

    run(body())


# -- session model ------------------------------------------------------------------------------


def test_ids_follow_herdr_and_are_never_reused(tmp_short: Path) -> None:
    # Herdr: src/workspace.rs PUBLIC_ID_ALPHABET "123456789ABCDEFGHJKMNPQRSTVWXYZ0".
    assert [workspace_id_for(n) for n in (1, 9, 10, 32, 33, 1056)] == ["w1", "w9", "wA", "w0", "w11", "w00"]

    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, client):
            assert simulator.add_pane("w1:t1") == "w1:p3"
            simulator.close_pane("w1:p3")
            assert simulator.add_pane("w1") == "w1:p4"
            simulator.close_pane("w2:p1")  # last pane of w2: the workspace closes
            assert [w["workspace_id"] for w in (await client.call("workspace.list"))["workspaces"]] == ["w1"]
            assert simulator.add_workspace(WorkspaceConfig(cwd=tmp_short / "web")) == "w3"
            with pytest.raises(HerdrRemoteError) as caught:
                await client.call("pane.get", {"pane_id": "w1:p3"})
            assert caught.value.code == "pane_not_found"

    run(body())


def test_status_rolls_up_blocked_over_done_over_working_over_idle(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, client):
            simulator.add_pane("w1", PaneConfig(agent=AgentConfig("second")))

            async def rollup() -> tuple[str, str]:
                workspace = (await client.call("workspace.get", {"workspace_id": "w1"}))["workspace"]
                tab = (await client.call("tab.get", {"tab_id": "w1:t1"}))["tab"]
                return workspace["agent_status"], tab["agent_status"]

            assert await rollup() == ("idle", "idle")
            # Herdr: src/app/api_helpers.rs tab_attention_priority.
            for coder, second, expected in [
                ("done", "idle", "done"),
                ("done", "blocked", "blocked"),
                ("working", "blocked", "blocked"),
                ("working", "done", "done"),
                ("working", "idle", "working"),
            ]:
                simulator.set_agent_status("coder", coder)
                simulator.set_agent_status("second", second)
                assert await rollup() == (expected, expected)

    run(body())


def test_agent_targets_resolve_by_name_or_agent_pane_id_only(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, client):
            for target in ("coder", "w1:p2"):
                assert (await client.call("agent.get", {"target": target}))["agent"]["name"] == "coder"
            simulator.add_agent("w1:p1", AgentConfig("helper"))
            # Herdr: src/app/terminal_targets.rs resolve_agent_target has no workspace-id form.
            for target, code in [
                ("w1", "agent_not_found"),
                ("w2", "agent_not_found"),
                ("ghost", "agent_not_found"),
            ]:
                with pytest.raises(HerdrRemoteError) as caught:
                    await client.call("agent.get", {"target": target})
                assert caught.value.code == code
            with pytest.raises(SimulatorError, match="already runs"):
                simulator.add_agent("w2:p1", AgentConfig("other"))
            with pytest.raises(SimulatorError, match="unique"):
                simulator.add_pane("w2", PaneConfig(agent=AgentConfig("coder")))

    run(body())


# -- scripted agents ----------------------------------------------------------------------------


def test_prompt_emits_status_events_and_bumps_seq_and_revision(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (_, client):
            before = (await client.call("agent.get", {"target": "coder"}))["agent"]
            subscriptions = [
                {"type": "pane.agent_status_changed", "pane_id": "w1:p2"},
                {"type": "pane.agent_status_changed", "pane_id": "w2:p1"},  # stays quiet
            ]
            async with client.subscribe(subscriptions) as events:
                prompted = await client.call("agent.prompt", {"target": "coder", "text": "refactor auth"})
                assert prompted["type"] == "agent_prompted"
                assert prompted["agent"]["name"] == "coder"
                received = await next_events(events, 2)
            # Herdr emits only pane_agent_status_changed for a status change (src/app/api.rs).
            assert [(e.name, e.data["agent_status"]) for e in received] == [
                ("pane.agent_status_changed", "working"),
                ("pane.agent_status_changed", "done"),
            ]
            assert received[0].data == {
                "pane_id": "w1:p2",
                "workspace_id": "w1",
                "agent_status": "working",
                "agent": "claude",
            }
            after = (await client.call("agent.get", {"target": "coder"}))["agent"]
            assert after["state_change_seq"] >= before["state_change_seq"] + 2
            assert after["revision"] > before["revision"]
            text = (await client.call("agent.read", {"target": "coder", "source": "recent"}))["read"]["text"]
            assert "refactor auth" in text
            assert "working on it" in text

    run(body())


def test_status_subscription_filters_by_status(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (_, client):
            only_done = [{"type": "pane.agent_status_changed", "pane_id": "w1:p2", "agent_status": "done"}]
            async with client.subscribe(only_done) as events:
                await client.call("agent.prompt", {"target": "coder", "text": "go"})
                (event,) = await next_events(events, 1)
            assert event.data["agent_status"] == "done"

    run(body())


def test_agent_wait(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (_, client):
            waited = await client.call("agent.wait", {"target": "coder", "timeout_ms": 0})
            assert waited == {"type": "agent_info", "agent": waited["agent"]}
            assert waited["agent"]["agent_status"] == "idle"  # already in the default until
            await client.call("agent.prompt", {"target": "coder", "text": "work"})
            done = await client.call("agent.wait", {"target": "coder", "until": ["done"], "timeout_ms": 3000})
            assert done["agent"]["agent_status"] == "done"
            with pytest.raises(HerdrRemoteError) as caught:
                await client.call("agent.wait", {"target": "coder", "until": ["blocked"], "timeout_ms": 30})
            assert caught.value.code == "timeout"

    run(body())


def test_prompt_with_wait_ignores_the_previous_turns_state(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, client):
            simulator.set_agent_status("coder", "done")
            prompted = await client.call(
                "agent.prompt",
                {"target": "coder", "text": "next", "wait": {"until": ["done"], "timeout_ms": 3000}},
            )
            assert prompted["agent"]["agent_status"] == "done"
            text = (await client.call("agent.read", {"target": "coder", "source": "recent"}))["read"]["text"]
            assert "working on it" in text  # the wait ended after this prompt's own turn

    run(body())


def test_blocked_script_holds_until_input(tmp_short: Path) -> None:
    blocking = AgentScript(
        (
            ScriptStep(after_ms=10, state="working"),
            ScriptStep(after_ms=20, output="Allow edit to main.py? [y/n]\n", state="blocked"),
            ScriptStep(after_ms=20, output="edited\n", state="done"),
        )
    )

    async def body() -> None:
        async with running_sim(tmp_short, two_project_config(tmp_short, blocking)) as (_, client):
            blocked = await client.call(
                "agent.prompt",
                {"target": "coder", "text": "edit", "wait": {"until": ["blocked"], "timeout_ms": 3000}},
            )
            assert blocked["agent"]["agent_status"] == "blocked"
            with pytest.raises(HerdrRemoteError) as caught:
                await client.call("agent.prompt", {"target": "coder", "text": "more"})
            assert caught.value.code == "agent_blocked"
            await client.call("pane.send_input", {"pane_id": "w1:p2", "text": "y", "keys": ["enter"]})
            done = await client.call("agent.wait", {"target": "coder", "until": ["done"], "timeout_ms": 3000})
            assert done["agent"]["agent_status"] == "done"
            text = (await client.call("agent.read", {"target": "coder", "source": "recent"}))["read"]["text"]
            assert text.index("Allow edit") < text.index("edited")

    run(body())


def test_prompt_while_working_is_queued(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (_, client):
            await client.call("agent.prompt", {"target": "coder", "text": "first task"})
            await client.call("agent.wait", {"target": "coder", "until": ["working"], "timeout_ms": 3000})
            second = await client.call(
                "agent.prompt",
                {"target": "coder", "text": "second task", "wait": {"until": ["done"], "timeout_ms": 3000}},
            )
            # Herdr's wait (src/api/wait.rs) ends at the first `done` after the prompt's baseline:
            # here the first task's end; the queued second task runs after it.
            assert second["agent"]["agent_status"] == "done"
            for _ in range(100):
                text = (await client.call("agent.read", {"target": "coder", "source": "recent"}))["read"][
                    "text"
                ]
                if text.count("working on it") == 2:
                    break
                await asyncio.sleep(0.03)  # the subject: polling the read until the queued turn ran
            assert text.index("first task") < text.index("second task")
            assert text.count("working on it") == 2

    run(body())


def test_typing_into_an_agent_pane_prompts_and_esc_interrupts(tmp_short: Path) -> None:
    endless = AgentScript((ScriptStep(after_ms=10, state="working", echo_prompt=True),))

    async def body() -> None:
        async with running_sim(tmp_short, two_project_config(tmp_short, endless)) as (_, client):
            await client.call("pane.send_input", {"pane_id": "w2:p1", "text": "review PR 12\n"})
            await client.call("agent.wait", {"target": "reviewer", "until": ["working"], "timeout_ms": 3000})
            await client.call("pane.send_input", {"pane_id": "w2:p1", "keys": ["esc"]})
            agent = (await client.call("agent.get", {"target": "reviewer"}))["agent"]
            assert agent["agent_status"] == "idle"

    run(body())


def test_lifecycle_events_for_a_new_workspace(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, client):
            types = ["workspace.created", "tab.created", "pane.created", "pane.closed", "pane.agent_detected"]
            async with client.subscribe([{"type": t} for t in types]) as events:
                workspace_id = simulator.add_workspace(WorkspaceConfig(cwd=tmp_short / "web", label="docs"))
                simulator.add_agent(f"{workspace_id}:p1", AgentConfig("writer"))
                simulator.close_pane("w1:p1")
                received = await next_events(events, 5)
            # Herdr polls each subscription in turn, one event each per poll (src/api/server.rs
            # stream_subscriptions), so events of one poll come in subscription order.
            assert [e.name for e in received] == [
                "workspace_created",
                "tab_created",
                "pane_created",
                "pane_closed",
                "pane_agent_detected",
            ]
            assert received[0].data["workspace"]["label"] == "docs"
            assert received[2].data["pane"]["cwd"] == str((tmp_short / "web").resolve())

    run(body())


def test_snapshot_fault_injection_and_hang(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (simulator, client):
            simulator.inject_fault("session.snapshot")
            with pytest.raises(HerdrRemoteError) as caught:
                await client.call("session.snapshot")
            assert caught.value.code == "internal_error"
            assert (await client.call("workspace.list"))[
                "type"
            ] == "workspace_list"  # degraded path still works
            simulator.clear_faults()
            assert (await client.call("session.snapshot"))["type"] == "session_snapshot"
            simulator.inject_fault("ping", hang=True)
            with pytest.raises(HerdrTimeout):
                await client.call("ping", timeout=0.2)
            with pytest.raises(SimulatorError):
                simulator.inject_fault("no.such")

    run(body())


# -- config -------------------------------------------------------------------------------------


def test_json_config_loads_with_relative_dirs(tmp_short: Path) -> None:
    (tmp_short / "proj" / "sub").mkdir(parents=True)
    config_file = tmp_short / "session.json"
    config_file.write_text(
        json.dumps(
            {
                "workspaces": [
                    {
                        "cwd": "proj",
                        "tabs": [
                            {
                                "label": "main",
                                "panes": [
                                    {"label": "shell"},
                                    {
                                        "cwd": "proj/sub",
                                        "agent": {
                                            "name": "bot",
                                            "kind": "claude",
                                            "script": {"steps": [{"state": "working", "after_ms": 5}]},
                                        },
                                    },
                                ],
                            }
                        ],
                    }
                ]
            }
        )
    )
    config = SimConfig.from_json_file(config_file)
    (workspace,) = config.workspaces
    assert workspace.cwd == tmp_short.resolve() / "proj"
    agent_pane = workspace.tabs[0].panes[1]
    assert agent_pane.cwd == tmp_short.resolve() / "proj" / "sub"
    assert agent_pane.agent is not None
    assert agent_pane.agent.script == AgentScript((ScriptStep(after_ms=5, state="working"),))
    snapshot = Simulator(config, tmp_short / "x.sock").snapshot()
    assert snapshot["workspaces"][0]["label"] == "proj"
    assert snapshot["agents"][0]["cwd"] == str(tmp_short.resolve() / "proj" / "sub")


def _one_tab(*panes: dict[str, Any]) -> dict[str, Any]:
    return {"workspaces": [{"cwd": ".", "tabs": [{"panes": list(panes)}]}]}


def _agent_with_steps(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"agent": {"name": "a", "script": {"steps": list(steps)}}}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"workspaces": [{"cwd": "."}], "extra": 1}, "unknown keys"),
        ({"workspaces": [{"label": "no cwd"}]}, "needs a `cwd`"),
        (_one_tab(_agent_with_steps({"state": "sleeping"})), "state must be one of"),
        (_one_tab(_agent_with_steps({"after_ms": -1})), "after_ms"),
        (_one_tab(_agent_with_steps({"output": 3})), "must be a string"),
        (_one_tab({"agent": {"name": "w1:p1"}}), "looks like a Herdr"),
        (_one_tab({"agent": {"name": "a"}}, {"agent": {"name": "a"}}), "unique"),
        (_one_tab({"agent": {"name": "a", "mood": "happy"}}), "unknown keys"),
    ],
)
def test_invalid_configs_are_refused(tmp_short: Path, raw: dict[str, Any], message: str) -> None:
    with pytest.raises(SimConfigError, match=message):
        SimConfig.from_dict(raw, base_dir=tmp_short)


def test_workspaces_must_be_real_directories(tmp_short: Path) -> None:
    config = SimConfig((WorkspaceConfig(cwd=tmp_short / "missing"),))
    with pytest.raises(SimConfigError, match="not an existing directory"):
        Simulator(config, tmp_short / "x.sock")


def test_for_roots_builds_a_shell_and_an_agent_per_root(tmp_short: Path) -> None:
    (tmp_short / "a" / "repo").mkdir(parents=True)
    (tmp_short / "b" / "repo").mkdir(parents=True)
    config = SimConfig.for_roots([tmp_short / "a" / "repo", tmp_short / "b" / "repo"])
    assert config.agent_names() == ["repo-agent", "repo-agent-2"]
    assert [len(ws.tabs[0].panes) for ws in config.workspaces] == [2, 2]


# -- embedding ----------------------------------------------------------------------------------


def test_simulator_thread_serves_synchronous_callers(tmp_short: Path) -> None:
    config = two_project_config(tmp_short, fast_script())
    with SimulatorThread(config, tmp_short / "t.sock") as simulator:
        client = HerdrClient(simulator.socket_path)
        assert run(client.call("ping"))["protocol"] == 22
        workspace_id = simulator.add_workspace(WorkspaceConfig(cwd=tmp_short / "web", label="extra"))
        assert workspace_id == "w3"
        simulator.set_agent_status("coder", "blocked")
        assert run(client.call("agent.get", {"target": "coder"}))["agent"]["agent_status"] == "blocked"
        simulator.inject_fault("session.snapshot")
        with pytest.raises(HerdrRemoteError):
            run(client.call("session.snapshot"))
        simulator.clear_faults()
        assert len(simulator.snapshot()["workspaces"]) == 3
    assert not (tmp_short / "t.sock").exists()
    with pytest.raises(SimulatorError):
        simulator.snapshot()


def test_simulator_thread_reports_startup_failure(tmp_short: Path) -> None:
    blocker = tmp_short / "taken"
    blocker.write_text("not a socket")
    with pytest.raises(SimulatorError, match="not a socket"):
        SimulatorThread(two_project_config(tmp_short), blocker).start()


# -- CLI ----------------------------------------------------------------------------------------


def test_cli_serves_until_sigterm_and_removes_its_socket(tmp_short: Path) -> None:
    root = tmp_short / "project"
    root.mkdir()
    sock = tmp_short / "cli.sock"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "herdr_mcp", "sim", "--socket", str(sock), "--root", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == str(sock)
        pong = run(HerdrClient(sock).call("ping"))
        assert (pong["type"], pong["protocol"]) == ("pong", 22)
        agents = run(HerdrClient(sock).call("agent.list"))["agents"]
        assert [(a["name"], a["cwd"]) for a in agents] == [("project-agent", str(root.resolve()))]
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert not sock.exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def test_cli_rejects_bad_config_with_status_2(tmp_short: Path) -> None:
    bad = tmp_short / "bad.json"
    bad.write_text('{"workspaces": [{"cwd": "does-not-exist"}]}')
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "herdr_mcp",
            "sim",
            "--socket",
            str(tmp_short / "s.sock"),
            "--config",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "not an existing directory" in result.stderr


def test_the_old_module_entry_says_where_the_command_went() -> None:
    """The command line lives in cli/ only: `python -m herdr_mcp.sim` runs nothing and names the
    command that replaced it (exit 2, one error line)."""
    result = subprocess.run(
        [sys.executable, "-m", "herdr_mcp.sim", "--socket", "/nonexistent/s.sock"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("herdr-mcp: error: command_moved: ")
    assert "herdr-mcp sim" in result.stderr
