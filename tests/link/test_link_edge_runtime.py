"""The link's outbound side with REAL runtimes: two `herdr-mcp serve` generations (A and B, one
simulated Herdr), `herdr-mcp link` as a subprocess paired with a STAND-IN for the Edge's frame
handling (tests/support/edge_standin.py; the real Worker end to end: tests/edge/test_edge_relay_e2e.py). Which
generation ran a command shows in its output (`HERDR_LINK_TEST_GENERATION`), and every command
appends to a file of its own, so a call that ran twice would show."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from herdr_mcp import __version__
from herdr_mcp.contract import contract_identity
from herdr_mcp.layout import Layout
from herdr_mcp.link.edge_device import EdgeDevice, write_device
from tests.support.edge_standin import DEVICE_ID, DEVICE_SECRET, EdgeStandIn
from tests.support.link_harness import running_link
from tests.support.sim_helpers import short_tmp_dir
from tests.support.waiting import wait_until
from tests.support.workstation_harness import LinkedGenerations, ab_generations, cli_json, marked_command

pytestmark = pytest.mark.slow


@dataclass
class World(LinkedGenerations):
    edge: EdgeStandIn


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with short_tmp_dir() as tmp, EdgeStandIn() as edge, ab_generations(tmp) as generations:
        store = generations.store
        device = EdgeDevice(edge.url, DEVICE_ID, DEVICE_SECRET, "test-host", "2026-12-01T00:00:00Z")
        write_device(Layout(tmp).edge_device_file, device)
        with running_link(store.state_dir, tmp / "link-token") as link:
            yield World(generations.a, generations.b, store, tmp, link, edge)
        assert link.process.returncode == 0
        assert "Traceback" not in link.stderr, link.stderr
        assert not edge.violations


def exec_request(request_id: str, command: str) -> dict[str, Any]:
    arguments = {"workspace": "w1", "command": command}
    return {
        "type": "tool_request",
        "id": request_id,
        "tool": "herdr_exec",
        "arguments": arguments,
        "deadline_ms": 60_000,
    }


def answer_to(edge: EdgeStandIn, request_id: str) -> dict[str, Any]:
    kinds = ("tool_result", "tool_error")
    return edge.wait_frame(
        lambda frame: frame["type"] in kinds and frame["id"] == request_id, f"the answer to {request_id}"
    ).frame


def link_status(world: World) -> dict[str, Any]:
    port = world.link.base.rsplit(":", 1)[1]
    return cli_json("link", "status", "--config-dir", str(world.tmp), "--link-port", port)


def test_identity_calls_and_an_activation_without_reconnecting(world: World) -> None:
    edge, counters = world.edge, world.tmp / "counters"
    hello = edge.wait_frame(lambda frame: frame["type"] == "hello", "hello").frame
    assert hello["runtime"] == {
        "generation": "A",
        "version": __version__,
        "contract": contract_identity(5).to_dict(),
    }

    edge.send(exec_request("r1", marked_command(counters, "r1")))
    result = answer_to(edge, "r1")
    assert result["type"] == "tool_result", result
    assert result["result"]["structuredContent"]["stdout"] == "A\n"

    # The A/B switch as the owner makes it: `herdr-mcp generation activate B`, its own process.
    cli_json("generation", "--state-dir", str(world.store.state_dir), "activate", "B")
    beat = edge.wait_frame(
        lambda frame: frame["type"] == "heartbeat" and frame["runtime"]["generation"] == "B",
        "B in a heartbeat",
    )
    assert beat.connection == 1 and edge.connections == 1
    edge.send(exec_request("r2", marked_command(counters, "r2")))
    assert answer_to(edge, "r2")["result"]["structuredContent"]["stdout"] == "B\n"
    assert [(counters / name).read_text() for name in ("r1", "r2")] == ["A\n", "B\n"]

    report = link_status(world)
    assert report["paired"] is True and report["device"]["device_id"] == DEVICE_ID
    assert report["active"] == "B"
    assert report["edge"]["state"] == "connected" and report["edge"]["reconnects"] == 0
    assert DEVICE_SECRET not in json.dumps(report)


def test_a_runtime_dying_mid_call_is_delivery_unknown_and_never_resent(world: World) -> None:
    """Last in this module: it kills the active generation's runtime (B after the test above)."""
    edge, counters = world.edge, world.tmp / "counters"
    active = world.store.read_status().active
    victim = world.b if active == "B" else world.a
    edge.send(exec_request("die", f"echo started >> {counters}/die; sleep 60"))
    wait_until(lambda: (counters / "die").exists(), "the command to start")
    os.kill(victim.process.pid, signal.SIGKILL)
    answer = answer_to(edge, "die")
    assert (answer["type"], answer["code"], answer["delivery_state"], answer["retryable"]) == (
        "tool_error", "delivery_unknown", "delivery_unknown", False,
    )  # fmt: skip
    assert (counters / "die").read_text() == "started\n"  # it ran once and was never sent again
    assert len([item for item in edge.frames if item.frame.get("id") == "die"]) == 1
    # The link's lease on the dead generation was given back.
    health = world.link.health()
    assert set(health["in_flight"].values()) == {0}
