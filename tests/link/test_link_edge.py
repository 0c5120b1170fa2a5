"""The link's outbound side to the Edge (link/edge.py), in this process, against a STAND-IN for the
Edge's frame handling (tests/support/edge_standin.py, docs/edge-protocol.md) and stand-in generations
behind the real router; pairing against a loopback HTTP server; the connector commands through
the link's real `/edge/control` endpoint. The same against real runtimes: test_link_edge_runtime.py.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import socket
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.cli import main as cli_main
from herdr_mcp.contract import contract_identity
from herdr_mcp.errors import EXIT_LOCAL, EXIT_REFUSED, EXIT_USAGE
from herdr_mcp.generations import Generation, GenerationStatus, StatusFile, Validation
from herdr_mcp.layout import Layout
from herdr_mcp.link import edge as edge_module
from herdr_mcp.link.drain import DRAIN_ACK_FILE, DRAIN_FILE
from herdr_mcp.link.edge import EdgeLink, Reconnect
from herdr_mcp.link.edge_device import EdgeDevice, check_edge_url, read_device, write_device
from herdr_mcp.records import atomic_write
from tests.support.edge_standin import (
    DEVICE_ID,
    DEVICE_SECRET,
    EdgeStandIn,
    ToolGeneration,
    pairing_edge,
)
from tests.support.link_edge_harness import connected, linked
from tests.support.link_harness import running_link
from tests.support.logging_proxy import LoggingProxy, proxy_env
from tests.support.waiting import wait_until


@pytest.fixture
def generation() -> Iterator[ToolGeneration]:
    stand_in = ToolGeneration()
    yield stand_in
    stand_in.close()


def request(
    request_id: str, tool: str, arguments: dict[str, Any], deadline_ms: int = 30_000
) -> dict[str, Any]:
    return {
        "type": "tool_request",
        "id": request_id,
        "tool": tool,
        "arguments": arguments,
        "deadline_ms": deadline_ms,
    }


def answer_to(edge: EdgeStandIn, request_id: str) -> dict[str, Any]:
    kinds = ("tool_result", "tool_error", "cancel_ack")
    return edge.wait_frame(
        lambda frame: frame["type"] in kinds and frame["id"] == request_id and "index" not in frame,
        f"the answer to {request_id}",
    ).frame


# -- connecting ---------------------------------------------------------------------------------


def test_hello_carries_the_identity_and_the_secret_only_in_a_header(
    tmp_path: Path, generation: ToolGeneration
) -> None:
    with EdgeStandIn() as edge, linked(tmp_path, edge, generation) as world:
        status = connected(world.link)
        hello = edge.wait_frame(lambda frame: frame["type"] == "hello", "hello").frame
        assert (hello["protocol"], hello["device_id"]) == (1, DEVICE_ID)
        # G was never validated by the gate: the link's own identity stands in, named as G.
        assert hello["runtime"] == {
            "generation": "G",
            "version": hello["link_version"],
            "contract": contract_identity().to_dict(),
        }
        assert edge.authorizations == [f"Device {DEVICE_ID}.{DEVICE_SECRET}"]
        assert edge.request_lines == ["GET /link/connect HTTP/1.1"]
        assert all(DEVICE_SECRET not in line for line in edge.request_lines)
        assert status["connection_id"] == "conn-1" and status["last_hello_ack"]
        assert DEVICE_SECRET not in json.dumps(status)
        health = world.handler.health()["edge"]
        assert health["state"] == "connected" and DEVICE_SECRET not in json.dumps(health)
        assert not edge.violations


def test_a_wrong_device_secret_is_refused_and_reported(tmp_path: Path) -> None:
    with EdgeStandIn() as edge, linked(tmp_path, edge, None, secret="w" * 43) as world:
        status = wait_until(
            lambda: (now := world.link.status())["reconnects"] >= 2 and now, "two refused attempts"
        )
        assert status["state"] == "refused"
        assert "HTTP 401" in status["last_error"]
        # Asked again only after the refused wait (0.2 s here, 5 min by default), plus the jitter.
        assert status["last_backoff_s"] == pytest.approx(0.2 * (1 + 0.5 * 0.5))
        assert edge.connections == 0


def test_heartbeats_carry_the_active_generation_after_a_switch_without_reconnecting(
    tmp_path: Path, generation: ToolGeneration
) -> None:
    other = ToolGeneration()
    with EdgeStandIn() as edge, linked(tmp_path, edge, generation) as world, contextlib.closing(other):
        connected(world.link)
        edge.wait_frame(
            lambda frame: frame["type"] == "heartbeat" and frame["runtime"]["generation"] == "G", "a beat"
        )
        # An A/B switch as the gate writes it: B active, validated with the epoch-5 catalog.
        frozen = contract_identity(5)
        control = world.store.read_control()
        world.store.write_control(
            type(control)(generations=(*control.generations, Generation("B", other.endpoint))),
            expected_revision=control.revision,
        )
        validated = Validation(ok=True, runtime_version="9.9.9", contract_hash=frozen.hash, tool_count=18)
        with world.store.locked():
            world.store.write_status_locked(
                StatusFile(
                    active="B", previous="G", generations=(GenerationStatus("B", "active", validated),)
                )
            )
        beat = edge.wait_frame(
            lambda frame: frame["type"] == "heartbeat" and frame["runtime"]["generation"] == "B",
            "B in a beat",
        )
        assert beat.frame["runtime"] == {"generation": "B", "version": "9.9.9", "contract": frozen.to_dict()}
        assert beat.connection == 1 and edge.connections == 1
        assert world.link.status()["reconnects"] == 0
        assert not edge.violations


def test_silence_closes_1001_and_the_link_reconnects(tmp_path: Path) -> None:
    with (
        EdgeStandIn(heartbeat_s=0.1, silence_limit_s=0.6, send_heartbeats=False) as edge,
        linked(tmp_path, edge, None) as world,
    ):
        wait_until(lambda: edge.connections >= 2, "a second connection after the silence")
        assert edge.closed[0] == (1, 1001)
        assert "no frame from the Edge" in (world.link.status()["last_error"] or "")


@dataclass(frozen=True)
class RecordedReconnect(Reconnect):
    """The protocol's schedule, keeping every delay the link asked it for."""

    delays: list[float] = field(default_factory=list)

    def delay(self, failures: int, draw: float) -> float:
        chosen = super().delay(failures, draw)
        self.delays.append(round(chosen, 6))
        return chosen


def test_reconnects_back_off_with_jitter_and_the_edge_coming_back(tmp_path: Path) -> None:
    schedule = Reconnect()
    # 1 s doubling to 6 s, 0-50 % added: never more than 9 s, however long the Edge is away.
    assert [schedule.delay(n, 0.0) for n in range(6)] == [1, 2, 4, 6, 6, 6]
    assert schedule.delay(0, 0.999) == pytest.approx(1.4995) and schedule.delay(9, 0.5) == 7.5
    assert schedule.delay(10_000, 0.0) == 6
    assert max(schedule.delay(n, 0.999_999) for n in range(64)) < 9
    assert schedule.refused_s == 300

    draws = iter([0.0, 0.5, 0.25] + [0.0] * 1000)
    timing = RecordedReconnect(first_s=0.1, max_s=0.5, stable_after_s=3600)
    with (
        EdgeStandIn() as edge,
        linked(tmp_path, edge, None, reconnect=timing, draw=lambda: next(draws)) as world,
    ):
        connected(world.link)
        edge.stop()  # the Edge goes away: every attempt fails, each waits longer
        wait_until(lambda: world.link.status()["reconnects"] >= 4, "four attempts")
        # 0.1 * (1 + 0), 0.2 * (1 + 0.5 * 0.5), 0.4 * (1 + 0.5 * 0.25), then the 0.5 cap
        assert timing.delays[:4] == [0.1, 0.25, 0.45, 0.5]
        edge.start()  # the Edge is back (a restart): the link connects again
        wait_until(lambda: edge.connections >= 2, "the link to come back")
        assert connected(world.link)["last_error"].startswith("ConnectionRefusedError")


def connected_times(edge: EdgeStandIn, link: EdgeLink, count: int) -> bool:
    return edge.connections >= count and link.status()["state"] == "connected"


def reconnected_times(link: EdgeLink, count: int) -> bool:
    return bool(link.status()["reconnects"] >= count)


def test_a_connection_that_lived_long_enough_resets_the_backoff(tmp_path: Path) -> None:
    timing = RecordedReconnect(first_s=0.1, max_s=5, stable_after_s=0.3)
    with EdgeStandIn() as edge, linked(tmp_path, edge, None, reconnect=timing, draw=lambda: 0.0) as world:
        for number in (1, 2, 3):
            wait_until(functools.partial(connected_times, edge, world.link, number), f"connection {number}")
            # Two heartbeats of the link (every 0.2 s) on this connection: it lived over 0.3 s.
            wait_until(functools.partial(beats_on, edge, number, 2), f"two heartbeats on connection {number}")
            edge.close_current()
            wait_until(functools.partial(reconnected_times, world.link, number), f"reconnect {number}")
        assert timing.delays[:3] == [0.1, 0.1, 0.1]  # never 0.2, 0.4: each connection lived long enough
        # Attempts that fail do not reset it: they double.
        edge.stop()
        wait_until(functools.partial(reconnected_times, world.link, 5), "two more attempts")
        assert timing.delays[4] == 2 * timing.delays[3]


def beats_on(edge: EdgeStandIn, connection: int, count: int) -> bool:
    return len([item for item in edge.of_type("heartbeat") if item.connection == connection]) >= count


def test_an_oversized_frame_from_the_edge_closes_1009(tmp_path: Path) -> None:
    with EdgeStandIn() as edge, linked(tmp_path, edge, None) as world:
        connected(world.link)
        edge.send({"type": "heartbeat", "seq": 1, "padding": "p" * 300 * 1024})
        wait_until(lambda: edge.closed, "the link to close")
        assert edge.closed[0] == (1, 1009)


def test_a_malformed_known_frame_closes_1008(tmp_path: Path) -> None:
    with EdgeStandIn() as edge, linked(tmp_path, edge, None) as world:
        connected(world.link)
        edge.send({"type": "tool_request", "id": "r1", "tool": "echo"})  # no arguments, no deadline
        wait_until(lambda: edge.closed, "the link to close")
        assert edge.closed[0] == (1, 1008)
        edge.wait_frame(lambda frame: frame["type"] == "hello" and edge.connections == 2, "a new hello")


# -- tool calls ---------------------------------------------------------------------------------


def test_a_tool_request_is_served_once_through_the_router(tmp_path: Path, generation: ToolGeneration) -> None:
    with EdgeStandIn() as edge, linked(tmp_path, edge, generation) as world:
        connected(world.link)
        edge.send({"type": "unknown_later_frame", "x": 1})  # ignored
        edge.send(request("r1", "echo", {"path": "README.md", "n": 3}))
        answer = answer_to(edge, "r1")
        assert answer == {
            "type": "tool_result",
            "id": "r1",
            "result": {"content": [], "structuredContent": {"path": "README.md", "n": 3}, "isError": False},
        }
        assert generation.calls == [("echo", {"path": "README.md", "n": 3})]
        head = generation.headers[0].lower()
        assert b"mcp-protocol-version: 2026-07-28" in head and b"mcp-name: echo" in head
        assert b"authorization: bearer " + b"y" * 32 in head
        assert world.handler.forwarder.leases.in_flight() == {"G": 0}
        assert not edge.violations


def test_an_id_answered_lately_is_not_run_again(
    tmp_path: Path, generation: ToolGeneration, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool_request reusing the id of one answered on this connection is refused
    `request_id_in_use` (not_delivered), as long as the id is among the last FINISHED_IDS answered."""
    monkeypatch.setattr(edge_module, "FINISHED_IDS", 3)
    with EdgeStandIn() as edge, linked(tmp_path, edge, generation) as world:
        connected(world.link)
        edge.send(request("e1", "echo", {"n": 1}))
        assert answer_to(edge, "e1")["type"] == "tool_result"
        edge.send(request("e1", "echo", {"n": 99}))
        again = edge.wait_frame(lambda frame: frame.get("code") == "request_id_in_use", "the refusal")
        assert (again.frame["id"], again.frame["delivery_state"]) == ("e1", "not_delivered")
        for number in (2, 3, 4):  # three more answered: e1 is no longer remembered
            edge.send(request(f"e{number}", "echo", {"n": number}))
            assert answer_to(edge, f"e{number}")["type"] == "tool_result"
        edge.send(request("e1", "echo", {"n": 5}))
        edge.wait_frame(
            lambda frame: frame["type"] == "tool_result" and frame["result"]["structuredContent"] == {"n": 5},
            "e1 served again",
        )
        assert [arguments["n"] for _, arguments in generation.calls] == [1, 2, 3, 4, 5]  # never 99


def test_200_concurrent_calls_are_each_answered_once(tmp_path: Path, generation: ToolGeneration) -> None:
    with EdgeStandIn() as edge, linked(tmp_path, edge, generation) as world:
        connected(world.link)
        for number in range(200):
            edge.send(request(f"c{number}", "echo", {"n": number}))
        wait_until(lambda: len(edge.of_type("tool_result")) >= 200, "200 answers")
        answers = {item.frame["id"]: item.frame for item in edge.of_type("tool_result")}
        assert len(edge.of_type("tool_result")) == 200
        assert all(answers[f"c{n}"]["result"]["structuredContent"] == {"n": n} for n in range(200))
        assert sorted(arguments["n"] for _, arguments in generation.calls) == list(range(200))
        assert not edge.of_type("tool_error") and not edge.violations


def test_nothing_active_is_not_delivered_and_retryable(tmp_path: Path) -> None:
    with EdgeStandIn() as edge, linked(tmp_path, edge, None) as world:
        connected(world.link)
        hello = edge.of_type("hello")[0].frame
        assert hello["runtime"]["generation"] is None
        edge.send(request("r1", "echo", {}))
        answer = answer_to(edge, "r1")
        assert (answer["type"], answer["code"], answer["delivery_state"], answer["retryable"]) == (
            "tool_error", "no_active_generation", "not_delivered", True,
        )  # fmt: skip


def test_a_generation_that_refuses_the_connection_is_not_delivered(tmp_path: Path) -> None:
    gone = ToolGeneration()
    gone.close()  # registered and active, but nothing listens there
    with EdgeStandIn() as edge, linked(tmp_path, edge, gone) as world:
        connected(world.link)
        edge.send(request("r1", "echo", {}))
        answer = answer_to(edge, "r1")
        assert (answer["code"], answer["delivery_state"], answer["retryable"]) == (
            "ConnectError", "not_delivered", True,
        )  # fmt: skip


@pytest.mark.parametrize("char", ["x", '"', "é"])
def test_a_result_over_the_frame_cap_is_chunked(
    tmp_path: Path, generation: ToolGeneration, char: str
) -> None:
    size = 300 * 1024
    with EdgeStandIn() as edge, linked(tmp_path, edge, generation) as world:
        connected(world.link)
        edge.send(request("big", "big", {"size": size, "char": char}))
        joined = edge.wait_frame(
            lambda frame: frame["type"] == "tool_result" and "chunks" in frame, "the chunks"
        )
        assert joined.frame["result"]["content"][0]["text"] == char * size
        assert joined.frame["chunks"] >= 2
        chunks = edge.of_type("tool_result_chunk", "big")
        assert [item.frame["index"] for item in chunks] == list(range(joined.frame["chunks"]))
        assert all(len(item.frame["data"].encode()) <= 192 * 1024 for item in chunks)
        assert not edge.violations  # every frame within 256 KiB
        assert len(generation.calls) == 1


def test_cancel_abandons_the_call_and_is_acknowledged(tmp_path: Path, generation: ToolGeneration) -> None:
    with EdgeStandIn() as edge, linked(tmp_path, edge, generation) as world:
        connected(world.link)
        edge.send(request("h1", "hold", {}))
        wait_until(lambda: generation.calls, "the call to reach the generation")
        edge.send({"type": "cancel", "id": "h1"})
        ack = answer_to(edge, "h1")
        assert ack == {"type": "cancel_ack", "id": "h1", "delivery_state": "delivery_unknown"}
        wait_until(lambda: generation.abandoned == 1, "the generation to see its connection closed")
        # A cancel for an id that was answered, and for one never seen.
        edge.send(request("e1", "echo", {}))
        assert answer_to(edge, "e1")["type"] == "tool_result"
        edge.send({"type": "cancel", "id": "e1"})
        edge.send({"type": "cancel", "id": "never"})
        late = edge.wait_frame(lambda frame: frame["type"] == "cancel_ack" and frame["id"] == "e1", "ack e1")
        never = edge.wait_frame(lambda frame: frame["type"] == "cancel_ack" and frame["id"] == "never", "ack")
        assert (late.frame["delivery_state"], never.frame["delivery_state"]) == ("delivered", "not_delivered")
        # Nothing but the ack answered h1, and it was sent once.
        assert [item.frame["type"] for item in edge.frames if item.frame.get("id") == "h1"] == ["cancel_ack"]
        assert [name for name, _ in generation.calls] == ["hold", "echo"]
        assert world.handler.forwarder.leases.in_flight() == {"G": 0}


def test_a_cancel_right_behind_its_request_is_acknowledged_once(
    tmp_path: Path, generation: ToolGeneration
) -> None:
    """A cancel that may reach the link in the same read as its request: one cancel_ack and no
    other answer; `not_delivered` only when the call never reached the generation (else
    `delivery_unknown`, its exchange given up); nothing left in flight."""
    with EdgeStandIn() as edge, linked(tmp_path, edge, generation) as world:
        connected(world.link)
        states = {}
        for number in range(20):
            call_id = f"h{number}"
            edge.send_together(request(call_id, "hold", {"n": number}), {"type": "cancel", "id": call_id})
            ack = answer_to(edge, call_id)
            assert ack["type"] == "cancel_ack"
            states[number] = ack["delivery_state"]
        assert set(states.values()) <= {"not_delivered", "delivery_unknown"}
        wait_until(lambda: world.link.status()["calls_in_flight"] == 0, "no call left in flight")
        wait_until(lambda: generation.abandoned == len(generation.calls), "every exchange given up")
        reached = {arguments["n"] for _, arguments in generation.calls}
        assert not {number for number, state in states.items() if state == "not_delivered"} & reached
        for number in range(20):
            answers = [item.frame["type"] for item in edge.frames if item.frame.get("id") == f"h{number}"]
            assert answers == ["cancel_ack"]
        assert world.handler.forwarder.leases.in_flight() in ({}, {"G": 0})
        edge.send(request("e1", "echo", {"after": True}))
        assert answer_to(edge, "e1")["result"]["structuredContent"] == {"after": True}


def test_a_drain_refuses_the_edges_mutations_and_waits_for_those_in_flight(
    tmp_path: Path, generation: ToolGeneration
) -> None:
    """The drain (link/drain.py) knows an Edge call's kind from its tool name: a mutation in flight
    holds the drain's acknowledgement back until it is answered, a new one is refused
    `generation_draining` before anything is sent, and a read still goes through."""
    with EdgeStandIn() as edge, linked(tmp_path, edge, generation) as world:
        connected(world.link)
        reads = world.handler.forwarder.drain.reads
        read_tool = sorted(reads)[0]
        assert "gate" not in reads and "echo" not in reads
        edge.send(request("g1", "gate", {"n": 1}))
        wait_until(lambda: generation.calls, "the mutation to reach the generation")
        drain_dir = world.store.state_dir
        atomic_write(drain_dir / DRAIN_FILE, b'{"generation": "G", "job": "job-1"}')
        # The link reads the record within DRAIN_POLL_S: mutations go out until it has.
        sent = 0

        def refused() -> dict[str, Any] | None:
            nonlocal sent
            sent += 1
            edge.send(request(f"m{sent}", "echo", {"m": sent}))
            answer = answer_to(edge, f"m{sent}")
            return answer if answer["type"] == "tool_error" else None

        refusal = wait_until(refused, "a new mutation to be refused")
        assert (refusal["code"], refusal["delivery_state"], refusal["retryable"]) == (
            "generation_draining", "not_delivered", True,
        )  # fmt: skip
        assert {"m": sent} not in [arguments for _, arguments in generation.calls]
        edge.send(request("r1", read_tool, {"x": 1}))
        assert answer_to(edge, "r1")["result"]["structuredContent"] == {"x": 1}
        assert not (drain_dir / DRAIN_ACK_FILE).exists()  # the mutation g1 is still in flight
        generation.release.set()
        assert answer_to(edge, "g1")["result"]["structuredContent"] == {"n": 1}
        wait_until(lambda: (drain_dir / DRAIN_ACK_FILE).exists(), "the drain's acknowledgement")
        document = json.loads((drain_dir / DRAIN_ACK_FILE).read_text())
        assert (document["generation"], document["job"]) == ("G", "job-1")
        names = [name for name, _ in generation.calls]
        assert names[0] == "gate" and names[-1] == read_tool and set(names[1:-1]) <= {"echo"}


def test_a_passed_deadline_is_delivery_unknown(tmp_path: Path, generation: ToolGeneration) -> None:
    with EdgeStandIn() as edge, linked(tmp_path, edge, generation) as world:
        connected(world.link)
        edge.send(request("d1", "hold", {}, deadline_ms=300))
        answer = answer_to(edge, "d1")
        assert (answer["type"], answer["code"], answer["delivery_state"], answer["retryable"]) == (
            "tool_error", "deadline_exceeded", "delivery_unknown", False,
        )  # fmt: skip
        wait_until(lambda: generation.abandoned == 1, "the exchange to be given up")


def test_a_deadline_gone_before_sending_is_not_delivered(tmp_path: Path, generation: ToolGeneration) -> None:
    with EdgeStandIn() as edge, linked(tmp_path, edge, generation) as world:
        connected(world.link)
        edge.send(request("d0", "echo", {}, deadline_ms=-1))
        answer = answer_to(edge, "d0")
        assert (answer["code"], answer["delivery_state"], answer["retryable"]) == (
            "deadline_exceeded", "not_delivered", True,
        )  # fmt: skip
        assert generation.calls == []


def test_a_bug_while_serving_a_call_is_answered_and_the_link_goes_on(
    tmp_path: Path,
    generation: ToolGeneration,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*_: object) -> tuple[str, int, bytes]:
        raise KeyError("a bug")

    with EdgeStandIn() as edge, linked(tmp_path, edge, generation) as world:
        connected(world.link)
        monkeypatch.setattr(world.handler.forwarder, "exchange", broken)
        edge.send(request("b1", "echo", {}))
        answer = answer_to(edge, "b1")
        assert (answer["code"], answer["delivery_state"]) == ("link_internal_error", "delivery_unknown")
        assert "serving tool_request b1 failed" in caplog.text
        monkeypatch.undo()
        edge.send(request("b2", "echo", {}))
        assert answer_to(edge, "b2")["type"] == "tool_result"


def test_a_call_in_flight_when_the_connection_drops_is_abandoned_not_resent(
    tmp_path: Path, generation: ToolGeneration
) -> None:
    with EdgeStandIn() as edge, linked(tmp_path, edge, generation) as world:
        connected(world.link)
        edge.send(request("h1", "hold", {}))
        wait_until(lambda: generation.calls, "the call to reach the generation")
        edge.close_current()
        wait_until(lambda: generation.abandoned == 1, "the exchange to be given up")
        wait_until(
            lambda: edge.connections == 2 and world.link.status()["state"] == "connected", "reconnected"
        )
        assert len(generation.calls) == 1
        assert not [
            item
            for item in edge.frames
            if item.frame.get("id") == "h1" and item.frame["type"] != "tool_request"
        ]


def test_stopping_lets_calls_in_flight_finish_and_refuses_new_ones(
    tmp_path: Path, generation: ToolGeneration
) -> None:
    with EdgeStandIn() as edge, linked(tmp_path, edge, generation) as world:
        connected(world.link)
        edge.send(request("g1", "gate", {"n": 1}))
        wait_until(lambda: generation.calls, "the call to reach the generation")
        world.link.begin_stop()  # SIGTERM: the link stops taking calls
        edge.send(request("g2", "echo", {}))
        refused = answer_to(edge, "g2")
        assert (refused["code"], refused["delivery_state"], refused["retryable"]) == (
            "link_stopping",
            "not_delivered",
            True,
        )
        stopping = threading.Thread(target=world.link.stop, args=(30.0,))
        stopping.start()
        generation.release.set()
        assert answer_to(edge, "g1")["result"]["structuredContent"] == {"n": 1}
        stopping.join(30)
        assert not stopping.is_alive()
        wait_until(lambda: edge.closed, "the connection to close")
        assert edge.closed == [(1, 1001)] and edge.connections == 1
        assert [name for name, _ in generation.calls] == ["gate"]


def test_stopping_without_grace_abandons_calls_in_flight(tmp_path: Path, generation: ToolGeneration) -> None:
    with EdgeStandIn() as edge, linked(tmp_path, edge, generation) as world:
        connected(world.link)
        edge.send(request("h1", "hold", {}))
        wait_until(lambda: generation.calls, "the call to reach the generation")
        world.link.stop(0.0)
        wait_until(lambda: generation.abandoned == 1, "the exchange to be given up")
        wait_until(lambda: edge.closed, "the connection to close")
        assert edge.closed == [(1, 1001)]
        assert not [
            item
            for item in edge.frames
            if item.frame.get("id") == "h1" and item.frame["type"] != "tool_request"
        ]


# -- the connector commands ---------------------------------------------------------------------


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli_main(list(argv))
    return status, out.getvalue(), err.getvalue()


def test_connector_commands_round_trip_through_the_link(tmp_path: Path) -> None:
    consent = {
        "request_id": "req-1",
        "code": "HX4K7C",
        "client_name": "ChatGPT",
        "redirect_uri": "https://chatgpt.com/cb",
        "created_at": "2026-12-01T05:00:00Z",
    }
    with EdgeStandIn(consents={"req-1": consent}) as edge, linked(tmp_path, edge, None) as world:
        connected(world.link)
        where = ("--config-dir", str(world.config_dir), "--link-port", str(world.port))
        status, out, _ = cli("connector", "list", *where, "--json")
        assert (status, json.loads(out)) == (0, {"pending": [consent]})
        status, out, _ = cli("connector", "approve", "req-1", "--code", "HX4K7D", *where, "--json")
        assert status == EXIT_REFUSED and json.loads(out)["error"]["code"] == "consent_code_mismatch"
        status, out, _ = cli("connector", "approve", "req-1", "--code", "hx4k7c", *where)
        assert status == 0 and "HX4K7C" in out and "consent page" in out
        status, out, err = cli("connector", "approve", "req-1", "--code", "HX4K7C", *where, "--json")
        assert status == EXIT_USAGE and json.loads(out)["error"]["code"] == "consent_not_found"
        assert err.startswith("herdr-mcp: error: consent_not_found: ") and len(err.splitlines()) == 1
        status, out, _ = cli("connector", "grants", *where, "--json")
        assert status == 0 and [grant["grant_id"] for grant in json.loads(out)["grants"]] == ["grant-1"]
        status, out, _ = cli("connector", "revoke", "grant-1", *where, "--json")
        assert (status, json.loads(out)) == (0, {"grant_id": "grant-1", "revoked": True})
        status, out, _ = cli("connector", "grants", *where)
        assert (status, out.strip()) == (0, "no connector holds a grant")
        methods = [item.frame["method"] for item in edge.of_type("control_request")]
        # The wrong code stopped after consent.list; the approval sent consent.approve once, and the
        # repeat found the request gone from the list.
        assert methods == [
            "consent.list",
            "consent.list",
            "consent.list",
            "consent.approve",
            "consent.list",
            "grant.list",
            "grant.revoke",
            "grant.list",
        ]

        status, out, _ = cli("link", "status", *where, "--json")
        report = json.loads(out)
        assert status == 0 and report["edge"]["state"] == "connected" and report["edge"]["reconnects"] == 0
        assert report["paired"] is False  # this config dir holds no record: the link was given one


def test_connector_without_a_link_or_with_a_wrong_token(tmp_path: Path) -> None:
    with EdgeStandIn() as edge, linked(tmp_path, edge, None) as world:
        connected(world.link)
        (tmp_path / "link-token").write_text("z" * 40)
        status, out, _ = cli(
            "connector", "list", "--config-dir", str(tmp_path), "--link-port", str(world.port), "--json"
        )
        assert status == EXIT_LOCAL and json.loads(out)["error"]["code"] == "link_unauthorized"
        port = world.port
    status, out, _ = cli(
        "connector", "list", "--config-dir", str(tmp_path), "--link-port", str(port), "--json"
    )
    assert status == EXIT_LOCAL and json.loads(out)["error"]["code"] == "link_unreachable"


# -- pairing ------------------------------------------------------------------------------------


GOOD_ANSWER = {"device_id": DEVICE_ID, "device_secret": DEVICE_SECRET}


def test_pair_stores_the_device_in_a_0600_record(tmp_path: Path) -> None:
    with pairing_edge((200, GOOD_ANSWER)) as edge:
        status, out, err = cli(
            "link", "pair", "--edge", edge.url, "--code", "123456", "--name", "box",
            "--config-dir", str(tmp_path), "--json",
        )  # fmt: skip
    assert status == 0, err
    assert edge.received == [("/link/pair", {"code": "123456", "name": "box"})]
    record = Layout(tmp_path).edge_device_file
    assert stat.S_IMODE(os.stat(record).st_mode) == 0o600
    device = read_device(record)
    assert device is not None and (device.device_id, device.device_secret, device.edge_url) == (
        DEVICE_ID, DEVICE_SECRET, edge.url,
    )  # fmt: skip
    assert DEVICE_SECRET not in out and DEVICE_SECRET not in repr(device)
    assert json.loads(out)["device_id"] == DEVICE_ID
    # Paired already: refused until unpaired.
    status, out, _ = cli(
        "link", "pair", "--edge", edge.url, "--code", "123456", "--config-dir", str(tmp_path), "--json"
    )
    assert status == EXIT_USAGE and json.loads(out)["error"]["code"] == "edge_already_paired"
    status, out, _ = cli("link", "unpair", "--config-dir", str(tmp_path), "--json")
    assert (status, json.loads(out)["unpaired"], record.exists()) == (0, True, False)


@pytest.mark.parametrize(
    ("answer", "code", "exit_status"),
    [
        (
            (403, {"error": {"code": "pairing_locked", "message": "five wrong codes"}}),
            "pairing_locked",
            EXIT_REFUSED,
        ),
        (
            (410, {"error": {"code": "pairing_expired", "message": "expired"}}),
            "pairing_expired",
            EXIT_REFUSED,
        ),
        ((200, {"device_id": DEVICE_ID, "device_secret": "short"}), "edge_answer_invalid", EXIT_REFUSED),
        (
            (200, {"device_id": "evil/../x", "device_secret": DEVICE_SECRET}),
            "edge_answer_invalid",
            EXIT_REFUSED,
        ),
        ((500, {"oops": 1}), "edge_answer_invalid", EXIT_REFUSED),
    ],
)
def test_pair_refusals_write_nothing(
    tmp_path: Path, answer: tuple[int, dict[str, Any]], code: str, exit_status: int
) -> None:
    with pairing_edge(answer) as edge:
        status, out, _ = cli(
            "link", "pair", "--edge", edge.url, "--code", "123456", "--config-dir", str(tmp_path), "--json"
        )
    assert (status, json.loads(out)["error"]["code"]) == (exit_status, code)
    assert not Layout(tmp_path).edge_device_file.exists()


@pytest.mark.parametrize(
    ("edge", "code", "message_code"),
    [
        ("http://edge.example.com", "123456", "edge_url_insecure"),
        ("http://10.0.0.8:8787", "123456", "edge_url_insecure"),
        ("https://edge.example.com/path", "123456", "edge_url_invalid"),
        ("ftp://edge.example.com", "123456", "edge_url_invalid"),
        ("https://edge.example.com", "12345", "pairing_code_invalid"),
        ("https://edge.example.com", "abcdef", "pairing_code_invalid"),
    ],
)
def test_pair_refuses_bad_input_before_any_request(
    tmp_path: Path, edge: str, code: str, message_code: str
) -> None:
    status, out, err = cli(
        "link", "pair", "--edge", edge, "--code", code, "--config-dir", str(tmp_path), "--json"
    )
    assert (status, json.loads(out)["error"]["code"]) == (EXIT_USAGE, message_code), err


def test_edge_urls() -> None:
    assert check_edge_url("https://edge.example.com/") == "https://edge.example.com"
    assert check_edge_url("http://127.0.0.1:8787") == "http://127.0.0.1:8787"
    assert check_edge_url("http://[::1]:8787") == "http://[::1]:8787"
    device = EdgeDevice("https://edge.example.com:8443", DEVICE_ID, DEVICE_SECRET, "n", "t")
    assert device.connect_url == "wss://edge.example.com:8443/link/connect"
    assert device.authorization == f"Device {DEVICE_ID}.{DEVICE_SECRET}"


@pytest.mark.parametrize(
    "content",
    [b"{not json", b'{"schema_version": 1}', b'{"schema_version": 2, "edge_url": "x"}', b"[]"],
)
def test_a_bad_device_record_fails_closed(tmp_path: Path, content: bytes) -> None:
    record = Layout(tmp_path).edge_device_file
    record.write_bytes(content)
    status, out, _ = cli(
        "link",
        "pair",
        "--edge",
        "https://e.example",
        "--code",
        "123456",
        "--config-dir",
        str(tmp_path),
        "--json",
    )
    assert (status, json.loads(out)["error"]["code"]) == (EXIT_LOCAL, "edge_device_invalid")
    assert record.read_bytes() == content  # nothing overwritten
    good = EdgeDevice("https://e.example", DEVICE_ID, DEVICE_SECRET, "n", "t")
    write_device(tmp_path / "other.json", good)
    assert read_device(tmp_path / "other.json") == good


@pytest.mark.parametrize("record", [None, b'{"schema_version": 1, "edge_url": "http://example.com"}'])
def test_a_link_unpaired_or_with_a_bad_record_serves_locally_and_says_why(
    tmp_path: Path, record: bytes | None
) -> None:
    if record is not None:
        Layout(tmp_path).edge_device_file.write_bytes(record)
    with running_link(tmp_path / "generations", tmp_path / "link-token") as link:
        edge = link.health()["edge"]
        port = link.base.rsplit(":", 1)[1]
        status, out, _ = cli(
            "connector", "list", "--config-dir", str(tmp_path), "--link-port", port, "--json"
        )
    expected = "edge_unpaired" if record is None else "edge_device_invalid"
    assert edge["state"] == "unpaired"
    assert (status, json.loads(out)["error"]["code"]) == (EXIT_LOCAL, expected)
    if record is not None:
        assert edge["last_error"].startswith("edge_device_invalid: ")
        assert "not connecting to the Edge: edge_device_invalid" in link.stderr


def test_the_edge_is_reached_through_the_environment_proxy_and_never_for_loopback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workstation behind a proxy reaches its Edge through a CONNECT tunnel (the device secret
    travels inside the tunnel, never in what the proxy reads); a loopback Edge goes direct."""
    with EdgeStandIn() as edge, LoggingProxy("forward", tunnel_to=("127.0.0.1", edge.port)) as proxy:
        for name, value in proxy_env(proxy.url).items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        for name in ("direct", "proxied", "exempt"):
            (tmp_path / name).mkdir()
        with linked(tmp_path / "direct", edge, None) as world:
            connected(world.link)
        assert proxy.requests() == []  # 127.0.0.1: never through the proxy

        remote = f"http://edge.invalid:{edge.port}"  # does not resolve: only the proxy can reach it
        with linked(tmp_path / "proxied", edge, None, edge_url=remote) as world:
            connected(world.link)
        lines = [seen.request_line for seen in proxy.requests()]
        assert lines and all(line.startswith(f"CONNECT edge.invalid:{edge.port} ") for line in lines)
        assert not any(DEVICE_SECRET in value for seen in proxy.requests() for _, value in seen.headers)

        monkeypatch.setenv("NO_PROXY", "edge.invalid")
        monkeypatch.setenv("no_proxy", "edge.invalid")
        # A direct attempt resolves the name itself. `.invalid` never resolves (RFC 6761 6.4), but
        # asking the machine's resolver would send the question off this machine: this process
        # answers it as such a resolver must, and records that it was asked.
        asked: list[str] = []
        real_getaddrinfo = socket.getaddrinfo

        def no_such_name(host: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(host, str) and host.rstrip(".").endswith(".invalid"):
                asked.append(host)
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            return real_getaddrinfo(host, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
        with linked(tmp_path / "exempt", edge, None, edge_url=remote) as world:
            wait_until(lambda: world.link.status()["reconnects"] >= 1, "an attempt without the proxy")
            assert world.link.status()["state"] != "connected"  # edge.invalid does not resolve
        assert "edge.invalid" in asked  # the link went direct: it resolved the name itself
        assert len(proxy.requests()) == len(lines)  # NO_PROXY: the proxy was not asked again
