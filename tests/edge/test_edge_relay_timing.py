"""The relay's clocks under the real workerd, shortened by the Worker's variables (the defaults are
30 s heartbeats, a 90 s silence limit and a 120 s call deadline): the Edge's own heartbeats come
from the Durable Object's alarm, a silent link is closed 1001, and a call past its deadline is
cancelled at the link and answered delivery_unknown.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.support.edge_harness import Edge, running_edge
from tests.support.edge_relay_harness import (
    WAIT_S,
    Connector,
    connect_connector,
    device_headers,
    open_link,
    runtime_identity,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

HEARTBEAT_S = 1
SILENCE_LIMIT_S = 4
DEADLINE_MS = 1500


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    variables = {
        "RELAY_HEARTBEAT_S": str(HEARTBEAT_S),
        "RELAY_SILENCE_LIMIT_S": str(SILENCE_LIMIT_S),
        "RELAY_DEADLINE_MS": str(DEADLINE_MS),
    }
    with running_edge(tmp_path_factory.mktemp("edge-relay-timing"), variables) as running:
        yield running


@pytest.fixture(scope="module")
def device(edge: Edge) -> dict[str, Any]:
    return edge.pair_device("timing-workstation")


def test_a_silent_link_hears_heartbeats_and_is_closed_1001_at_the_silence_limit(
    edge: Edge, device: dict[str, Any]
) -> None:
    link = open_link(edge, device)
    ack = link.hello()
    assert (ack["heartbeat_s"], ack["silence_limit_s"]) == (HEARTBEAT_S, SILENCE_LIMIT_S)
    opened = time.monotonic()
    first = link.recv()
    assert first["type"] == "heartbeat" and first["seq"] == 1
    assert link.close_code() == 1001
    assert time.monotonic() - opened >= SILENCE_LIMIT_S / 2  # not at once: after heartbeats went unanswered
    status = edge.get(f"/status/{device['device_id']}", headers=device_headers(device)).json()
    assert status["online"] is False and status["disconnected_at"] is not None


def test_a_call_past_its_deadline_is_cancelled_and_answered_delivery_unknown(
    edge: Edge, device: dict[str, Any]
) -> None:
    link = open_link(edge, device)
    link.hello()
    connector: Connector = connect_connector(edge, link)
    with ThreadPoolExecutor(max_workers=1) as calls:
        answer = calls.submit(connector.call, "herdr_exec", {"command": "sleep 100"})
        request = link.recv_type("tool_request")
        assert request["deadline_ms"] == DEADLINE_MS
        seq = 0
        while True:  # stay heard (the silence limit is short here) until the Edge cancels
            frame = link.recv(timeout=WAIT_S)
            if frame["type"] == "cancel":
                break
            seq += 1
            link.send({"type": "heartbeat", "seq": seq, "runtime": runtime_identity()})
        assert frame == {"type": "cancel", "id": request["id"]}
        result = answer.result(timeout=WAIT_S)
    error = result["structuredContent"]["error"]
    assert result["isError"] is True
    assert (error["code"], error["delivery_state"], error["retryable"]) == (
        "deadline_exceeded",
        "delivery_unknown",
        False,
    )
    link.close()
