"""End to end on loopback: an MCP client of the `mcp` SDK -> /mcp on the real Worker (workerd) ->
the device's Durable Object -> `herdr-mcp link` (a subprocess, paired with `herdr-mcp link pair`)
-> two real runtimes A and B on a simulated Herdr. The connector is approved with
`herdr-mcp connector approve` through the link. Which generation ran a command shows in its output
(`HERDR_LINK_TEST_GENERATION`), and every command appends to a file of its own, so a call that ran
twice would show.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from herdr_mcp.generations import ControlFile, GenerationStore, Observation, activate
from tests.edge_harness import Edge, running_edge
from tests.edge_relay_harness import WAIT_S, Connector, begin_authorization, finish_authorization
from tests.link_harness import Link, generation_for, running_link
from tests.runtime_harness import two_runtimes
from tests.sim_helpers import short_tmp_dir
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

MARK = "HERDR_LINK_TEST_GENERATION"
CLI = [sys.executable, "-m", "herdr_mcp"]
#: The link takes its heartbeat interval from hello_ack: short here, so an A/B switch shows soon.
HEARTBEAT_S = 1


@dataclass
class World:
    edge: Edge
    link: Link
    store: GenerationStore
    device_id: str
    connector: Connector
    tmp: Path


def _cli(*argv: str) -> dict[str, Any]:
    done = subprocess.run([*CLI, *argv, "--json"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def _status(world_edge: Edge, device_id: str) -> dict[str, Any]:
    status: dict[str, Any] = world_edge.get(f"/status/{device_id}").json()
    return status


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with short_tmp_dir() as tmp, running_edge(tmp / "edge", {"RELAY_HEARTBEAT_S": str(HEARTBEAT_S)}) as edge:
        (tmp / "counters").mkdir()
        with two_runtimes(tmp, env_a={MARK: "A"}, env_b={MARK: "B"}) as (a, b):
            store = GenerationStore.in_dir(tmp / "generations")
            store.write_control(
                ControlFile(
                    generations=(generation_for("A", a), generation_for("B", b)),
                    observation=Observation(2, 50),
                ),
                expected_revision=0,
            )
            assert activate(store, "A").outcome == "activated"
            code = edge.start_pairing()["code"]
            paired = _cli(
                "link", "pair", "--edge", edge.base, "--code", code, "--name", "e2e", "--config-dir", str(tmp)
            )
            device_id = paired["device_id"]
            with running_link(store.state_dir, tmp / "link-token") as link:
                port = link.base.rsplit(":", 1)[1]
                where = ("--config-dir", str(tmp), "--link-port", port)
                wait_until(lambda: _status(edge, device_id)["online"], "the Edge to see the link")
                wait_until(lambda: _cli("link", "status", *where)["edge"]["state"] == "connected", "the link")
                authorization = begin_authorization(edge)
                approved = _cli(
                    "connector",
                    "approve",
                    authorization.request_id,
                    "--config-dir",
                    str(tmp),
                    "--link-port",
                    port,
                )
                assert approved["request_id"] == authorization.request_id
                yield World(edge, link, store, device_id, finish_authorization(edge, authorization), tmp)


def _sdk_calls(connector: Connector, calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each call through the `mcp` SDK's Streamable HTTP client; their CallToolResults as JSON."""

    async def session() -> list[dict[str, Any]]:
        headers = {"Authorization": f"Bearer {connector.token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=WAIT_S * 2) as http,
            Client(streamable_http_client(connector.edge.base + "/mcp", http_client=http)) as client,
        ):
            return [
                (await client.call_tool(tool, arguments)).model_dump(by_alias=True, exclude_none=True)
                for tool, arguments in calls
            ]

    return asyncio.run(session())


def _exec(command: str) -> tuple[str, dict[str, Any]]:
    return "herdr_exec", {"workspace": "w1", "command": command}


def _generation_on_the_edge(world: World) -> str | None:
    (devices,) = _sdk_calls(world.connector, [("herdr_devices", {})])
    mine = [
        entry for entry in devices["structuredContent"]["devices"] if entry["device_id"] == world.device_id
    ]
    generation: str | None = mine[0]["runtime"]["generation"]
    return generation


def test_calls_through_edge_do_link_runtime_and_an_activation_without_reconnecting(world: World) -> None:
    counters = world.tmp / "counters"
    connected_at = _status(world.edge, world.device_id)["connected_at"]
    inspect, read, first, devices = _sdk_calls(
        world.connector,
        [
            ("herdr_inspect", {}),
            ("herdr_fs_read", {"path": str(world.tmp / "repo" / "README.md")}),
            _exec(f'echo "${MARK}" >> {counters}/r1; echo "${MARK}"'),
            ("herdr_devices", {}),
        ],
    )
    assert not inspect.get("isError") and inspect["structuredContent"]["workspaces"], inspect
    assert not read.get("isError") and "# demo" in json.dumps(read["structuredContent"]), read
    assert first["structuredContent"]["stdout"] == "A\n", first
    (mine,) = [
        entry for entry in devices["structuredContent"]["devices"] if entry["device_id"] == world.device_id
    ]
    assert mine["online"] is True and mine["runtime"]["generation"] == "A" and mine["contract_known"] is True

    # The A/B switch as the owner makes it: `herdr-mcp generation activate B`, its own process.
    _cli("generation", "--state-dir", str(world.store.state_dir), "activate", "B")
    wait_until(lambda: _generation_on_the_edge(world) == "B", "B in herdr_devices (the next heartbeat)")
    (second,) = _sdk_calls(world.connector, [_exec(f'echo "${MARK}" >> {counters}/r2; echo "${MARK}"')])
    assert second["structuredContent"]["stdout"] == "B\n", second
    assert [(counters / name).read_text() for name in ("r1", "r2")] == ["A\n", "B\n"]
    # No reconnect: the same connection since before the switch.
    assert _status(world.edge, world.device_id)["connected_at"] == connected_at


def test_the_link_killed_mid_call_is_delivery_unknown_and_the_command_ran_once(world: World) -> None:
    """Last in this module: it kills the link."""
    counters = world.tmp / "counters"
    with ThreadPoolExecutor(max_workers=1) as pool:
        answer = pool.submit(
            _sdk_calls, world.connector, [_exec(f"echo started >> {counters}/die; sleep 60")]
        )
        wait_until(lambda: (counters / "die").exists(), "the command to start")
        os.kill(world.link.process.pid, signal.SIGKILL)
        (result,) = answer.result(timeout=WAIT_S * 2)
    error = result["structuredContent"]["error"]
    assert result["isError"] is True
    assert (error["code"], error["delivery_state"], error["retryable"]) == (
        "link_lost",
        "delivery_unknown",
        False,
    )
    assert (counters / "die").read_text() == "started\n"
    wait_until(lambda: not _status(world.edge, world.device_id)["online"], "the device to show offline")
