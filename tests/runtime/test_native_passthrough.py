"""Herdr's whole native surface through herdr_methods and herdr_call, with the MCP SDK client.

- herdr_methods lists every method of the connected Herdr's protocol (the built-in reference of
  real Herdr's schema, or `herdr api schema --json` when the CLI on PATH speaks the same protocol
  as `ping`), each with its class and params schema;
- herdr_call acts on the simulator for the long tail (workspace.create, pane.split,
  pane.send_text + send_keys into a real shell, pane.wait_for_output, agent.start);
- server control is refused by default (and runs with --allow-herdr-class), changing methods are
  refused in read-only mode, streaming methods are bounded or refused, unknown params refused;
- every call is in the audit log;
- /health names Herdr's version and protocol and warns for a protocol with no reference.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.herdr.reference import load
from herdr_mcp.layout import Layout
from herdr_mcp.runtime.audit import read_records
from herdr_mcp.runtime.tools import passthrough
from herdr_mcp.sim import (
    AgentConfig,
    AgentScript,
    PaneConfig,
    ScriptStep,
)
from tests.support.runtime_harness import call_tool, in_process_runtime
from tests.support.sim_helpers import one_workspace_config, run, running_sim, short_tmp_dir


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


async def _call(client: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return await call_tool(client, "herdr_call", {"method": method, "params": params or {}})


@pytest.mark.parametrize("protocol", [20, 22])
def test_herdr_methods_lists_the_whole_surface_with_classes(tmp_short: Path, protocol: int) -> None:
    async def body() -> dict[str, Any]:
        async with (
            running_sim(tmp_short, one_workspace_config(tmp_short, protocol=protocol)) as (sim, _client),
            in_process_runtime(sim.socket_path, tmp_short / "config") as runtime,
            runtime.client() as client,
        ):
            return await call_tool(client, "herdr_methods", {})

    answer = run(body())
    native = {e["method"]: e for e in answer["methods"] if e["kind"] == "native"}
    reference = load(protocol)
    assert set(native) == set(reference.methods)
    assert len(native) == {20: 92, 22: 103}[protocol]
    assert answer["herdr"]["protocol"] == protocol and answer["herdr"]["supported"] is True
    assert answer["herdr"]["schema_source"].startswith("built-in reference")
    for name, entry in native.items():
        assert entry["class"] == reference.methods[name].method_class
        assert entry["params_schema"]["type"] == "object", name
    assert native["server.stop"]["refused"]["code"] == "native_method_refused"
    assert native["events.subscribe"]["refused"]["code"] == "streaming_method_refused"
    assert "refused" not in native["pane.split"] and native["pane.split"]["mutates"] is True
    assert native["events.wait"]["requires"].startswith("timeout_ms")
    assert any(e["method"] == "herdr_mcp.skill.load" for e in answer["methods"])


def test_herdr_methods_query_keeps_exactly_the_matching_entries(tmp_short: Path) -> None:
    """A query keeps the entries whose name or summary holds it, in any letter case, native and
    internal alike, each exactly as the whole list shows it (the query is applied before the
    entries are built, so this compares the two paths)."""
    queries = ["PANE.READ", "skill", "Terminal", "no-such-method", "e"]

    async def body() -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        async with (
            running_sim(tmp_short, one_workspace_config(tmp_short, protocol=22)) as (sim, _client),
            in_process_runtime(sim.socket_path, tmp_short / "config") as runtime,
            runtime.client() as client,
        ):
            whole = await call_tool(client, "herdr_methods", {})
            answers = {q: await call_tool(client, "herdr_methods", {"query": q}) for q in queries}
            again = await call_tool(client, "herdr_methods", {})
            assert again == whole
            return whole, answers

    whole, answers = run(body())
    for query, answer in answers.items():
        needle = query.casefold()
        expected = [
            e
            for e in whole["methods"]
            if needle in e["method"].casefold() or needle in e["summary"].casefold()
        ]
        assert answer["methods"] == expected, query
        assert answer["count"] == len(expected) and answer["herdr"] == whole["herdr"]
    assert answers["no-such-method"]["methods"] == []
    kinds = {e["kind"] for e in answers["e"]["methods"]}
    assert kinds == {"native", "internal"}
    assert any(e["method"] == "pane.read" for e in answers["PANE.READ"]["methods"])


def test_herdr_call_reaches_the_long_tail(tmp_short: Path) -> None:
    async def body() -> tuple[dict[str, Any], ...]:
        async with (
            running_sim(tmp_short, one_workspace_config(tmp_short)) as (sim, _client),
            in_process_runtime(sim.socket_path, tmp_short / "config") as runtime,
            runtime.client() as client,
        ):
            made = await _call(client, "workspace.create", {"cwd": str(tmp_short / "repo"), "label": "tail"})
            root = made["result"]["root_pane"]["pane_id"]
            split = await _call(client, "pane.split", {"target_pane_id": root, "direction": "right"})
            shell = split["result"]["pane"]["pane_id"]
            await _call(client, "pane.send_text", {"pane_id": shell, "text": "echo tail-$((40+2))"})
            await _call(client, "pane.send_keys", {"pane_id": shell, "keys": ["Enter"]})
            matched = await _call(
                client,
                "pane.wait_for_output",
                {
                    "pane_id": shell,
                    "source": "recent",
                    "match": {"type": "substring", "value": "tail-42"},
                    "timeout_ms": 10000,
                },
            )
            started = await _call(
                client, "agent.start", {"pane_id": root, "kind": "claude", "name": "tail-agent"}
            )
            agents = await _call(client, "agent.list")
            audit = Layout(tmp_short / "config").audit_file.parent
            return made, split, matched, started, agents, {"audit": str(audit)}

    made, split, matched, started, agents, where = run(body(), timeout=60)
    assert made["result"]["type"] == "workspace_created" and made["class"] == "mutating"
    assert split["result"]["type"] == "pane_info"
    assert matched["result"]["type"] == "output_matched" and "tail-42" in matched["result"]["matched_line"]
    assert started["result"]["type"] == "agent_started"
    assert any(a.get("name") == "tail-agent" for a in agents["result"]["agents"])
    records = [
        r for r in read_records(Path(where["audit"])) if isinstance(r, dict) and r.get("tool") == "herdr_call"
    ]
    methods = [r.get("method") for r in records]
    for method in ("workspace.create", "pane.split", "pane.send_text", "pane.wait_for_output", "agent.start"):
        assert method in methods, methods


def test_refusals_each_with_its_code(tmp_short: Path) -> None:
    async def body() -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        async with (
            running_sim(tmp_short, one_workspace_config(tmp_short)) as (sim, _client),
            in_process_runtime(sim.socket_path, tmp_short / "config", read_only=True) as runtime,
            runtime.client() as client,
        ):
            out["server"] = await _call(client, "server.stop")
            out["install"] = await _call(client, "plugin.link", {"path": "/tmp"})
            out["read_only"] = await _call(client, "pane.close", {"pane_id": "w1:p1"})
            out["ui_read_only"] = await _call(client, "notification.show", {"title": "hi"})
            out["stream"] = await _call(client, "events.subscribe", {"subscriptions": []})
            out["unbounded"] = await _call(
                client, "events.wait", {"match_event": {"event": "workspace_created"}}
            )
            out["typo"] = await _call(
                client, "pane.read", {"pane_id": "w1:p1", "source": "recent", "lnes": 3}
            )
            out["unknown"] = await _call(client, "pane.teleport", {})
            out["read"] = await _call(client, "pane.read", {"pane_id": "w1:p1", "source": "recent"})
            alive = "w1:p1" in {p["pane_id"] for p in sim.snapshot()["panes"]}
        out["alive"] = {"alive": alive}
        return out

    out = run(body(), timeout=60)
    assert out["server"]["error"]["code"] == "native_method_refused"
    assert out["server"]["error"]["method_class"] == "server_control"
    assert out["install"]["error"]["code"] == "native_method_refused"
    assert out["read_only"]["error"]["code"] == "read_only_mode"
    assert out["ui_read_only"]["error"]["code"] == "read_only_mode"
    assert out["stream"]["error"]["code"] == "streaming_method_refused"
    assert out["unbounded"]["error"]["code"] == "unbounded_wait"
    assert out["typo"]["error"]["code"] == "invalid_params" and "lnes" in out["typo"]["error"]["message"]
    assert out["unknown"]["error"]["code"] == "unknown_method"
    assert out["read"]["result"]["type"] == "pane_read"
    assert out["alive"]["alive"] is True


def test_events_wait_ends_at_its_bound(tmp_short: Path) -> None:
    async def body() -> tuple[dict[str, Any], float]:
        async with (
            running_sim(tmp_short, one_workspace_config(tmp_short)) as (sim, _client),
            in_process_runtime(sim.socket_path, tmp_short / "config") as runtime,
            runtime.client() as client,
        ):
            started = time.monotonic()
            answer = await _call(
                client,
                "events.wait",
                {
                    "match_event": {
                        "event": "pane_agent_status_changed",
                        "pane_id": "w1:p2",
                        "agent_status": "blocked",
                    },
                    "timeout_ms": 700,
                },
            )
            return answer, time.monotonic() - started

    answer, elapsed = run(body(), timeout=30)
    assert answer["error"]["code"] == "timeout", answer
    assert 0.6 <= elapsed < 10


def test_server_control_runs_when_allowed(tmp_short: Path) -> None:
    """--allow-herdr-class server_control: server.reload_config is passed through."""

    async def body() -> dict[str, Any]:
        allowed = frozenset({"server_control"})
        async with (
            running_sim(tmp_short, one_workspace_config(tmp_short)) as (sim, _client),
            in_process_runtime(sim.socket_path, tmp_short / "config", allow_herdr_classes=allowed) as runtime,
            runtime.client() as client,
        ):
            return await _call(client, "server.reload_config")

    answer = run(body())
    assert "error" not in answer or answer["error"]["code"] != "native_method_refused", answer


def _fake_herdr_cli(bin_dir: Path, protocol: int) -> Path:
    """A `herdr` program that prints real Herdr's published schema with `protocol` in it."""
    document = json.loads(json.dumps(load(20).document))
    document["protocol"] = protocol
    schema = bin_dir / "schema.json"
    schema.write_text(json.dumps(document))
    script = bin_dir / "herdr"
    script.write_text(f'#!/bin/sh\n[ "$1 $2 $3" = "api schema --json" ] || exit 2\ncat "{schema}"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.mark.parametrize("cli_protocol", [20, 22])
def test_a_herdr_cli_schema_is_used_only_when_its_protocol_matches_ping(
    tmp_short: Path, cli_protocol: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_short / "bin"
    bin_dir.mkdir()
    script = _fake_herdr_cli(bin_dir, cli_protocol)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    async def body() -> dict[str, Any]:
        async with (
            running_sim(tmp_short, one_workspace_config(tmp_short, protocol=20)) as (sim, _client),
            in_process_runtime(sim.socket_path, tmp_short / "config") as runtime,
            runtime.client() as client,
        ):
            return await call_tool(client, "herdr_methods", {"query": "pane.read"})

    herdr = run(body())["herdr"]
    if cli_protocol == 20:
        assert herdr["schema_source"] == f"{script} api schema --json (protocol 20)", herdr
        assert herdr["warnings"] == []
    else:
        assert herdr["schema_source"].startswith("built-in reference, protocol 20"), herdr
        assert any("prints the schema of protocol 22" in w for w in herdr["warnings"]), herdr


@contextlib.asynccontextmanager
async def _reporting_protocol(upstream: Path, listen: Path, protocol: int) -> AsyncIterator[Path]:
    """A relay in front of a Herdr socket whose `ping` answers name `protocol` instead: a Herdr
    of a protocol herdr-mcp has no reference for (no such Herdr is at hand)."""

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await reader.readline()
            up_reader, up_writer = await asyncio.open_unix_connection(str(upstream))
            up_writer.write(request)
            await up_writer.drain()
            while line := await up_reader.readline():
                message = json.loads(line)
                result = message.get("result") if isinstance(message, dict) else None
                if isinstance(result, dict) and result.get("type") == "pong":
                    result["protocol"] = protocol
                    line = (json.dumps(message) + "\n").encode()
                writer.write(line)
                await writer.drain()
            up_writer.close()
        except (OSError, ValueError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_unix_server(relay, str(listen))
    try:
        yield listen
    finally:
        server.close()
        await server.wait_closed()


def test_health_names_herdr_and_warns_for_an_unsupported_protocol(tmp_short: Path) -> None:
    async def body(protocol: int) -> tuple[dict[str, Any], dict[str, Any]]:
        base = tmp_short / str(protocol)
        base.mkdir()
        async with (
            running_sim(base, one_workspace_config(base)) as (sim, _client),
            _reporting_protocol(sim.socket_path, base / "relay.sock", protocol) as herdr_socket,
            in_process_runtime(herdr_socket, base / "config") as runtime,
        ):
            async with runtime.http() as http:
                health = (await http.get("/health")).json()
            async with runtime.client() as client:
                listed = await call_tool(client, "herdr_methods", {"query": "ping"})
        return health, listed

    health, _listed = run(body(22))
    assert health["herdr"]["version"] == "0.9.2" and health["herdr"]["protocol"] == 22
    assert health["herdr"]["supported"] is True and "warning" not in health["herdr"]
    health, listed = run(body(23))
    assert health["herdr"]["protocol"] == 23 and health["herdr"]["supported"] is False
    assert "protocol 23" in health["herdr"]["warning"] and "protocol 22" in health["herdr"]["warning"]
    assert listed["herdr"]["reference_protocol"] == 22
    assert any("protocol 23" in w for w in listed["herdr"]["warnings"])


def test_herdr_call_budget_follows_the_wait_inside_its_params(
    tmp_short: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agent.prompt` with `wait.timeout_ms` beyond herdr_call's own budget (shortened here to 1 s
    from 30 s): the call waits for Herdr's answer (before: it gave up at the budget and called
    the delivered prompt `delivery_uncertain`)."""
    monkeypatch.setattr(passthrough, "CALL_TIMEOUT_SECONDS", 1.0)
    turn = AgentScript((ScriptStep(after_ms=20, state="working"), ScriptStep(after_ms=1800, state="done")))

    async def body() -> dict[str, Any]:
        config = one_workspace_config(
            tmp_short, PaneConfig(agent=AgentConfig("coder", "claude", script=turn))
        )
        async with (
            running_sim(tmp_short, config) as (sim, _client),
            in_process_runtime(sim.socket_path, tmp_short / "config") as runtime,
            runtime.client() as client,
        ):
            return await _call(
                client,
                "agent.prompt",
                {"target": "coder", "text": "go", "wait": {"until": ["done"], "timeout_ms": 8000}},
            )

    answer = run(body(), timeout=60)
    assert "error" not in answer, answer
    assert answer["result"]["type"] == "agent_prompted"
    assert answer["result"]["agent"]["agent_status"] == "done"
