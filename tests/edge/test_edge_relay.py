"""The relay on the Edge under the real workerd (`wrangler dev --local`): the Durable Object per
device holding a link (played frame by frame by `ScriptedLink`) and /mcp reached with a real OAuth
token (docs/edge-protocol.md; issue 11 items 4 and 5).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from herdr_mcp.contract import identity_of
from tests.support.edge_harness import Edge, running_edge
from tests.support.edge_relay_harness import (
    WAIT_S,
    Connector,
    ScriptedLink,
    connect_connector,
    device_headers,
    open_link,
    runtime_identity,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: docs/edge-protocol.md: at most 256 KiB per frame; chunk data at most 192 KiB.
MAX_FRAME_BYTES = 262_144
CHUNK_BYTES = 192 * 1024
EDGE_EPOCH_8 = Path(__file__).resolve().parents[2] / "manifests" / "contracts" / "edge-epoch-8.json"


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    with running_edge(tmp_path_factory.mktemp("edge-relay")) as running:
        yield running


@pytest.fixture(scope="module")
def device(edge: Edge) -> dict[str, Any]:
    return edge.pair_device("relay-workstation")


@pytest.fixture(scope="module")
def connector(edge: Edge, device: dict[str, Any]) -> Connector:
    link = open_link(edge, device)
    link.hello()
    try:
        return connect_connector(edge, link)
    finally:
        link.close()


@pytest.fixture
def link(edge: Edge, device: dict[str, Any]) -> Iterator[ScriptedLink]:
    """A fresh link that said hello (it replaces any link of the device a test left open)."""
    opened = open_link(edge, device)
    opened.hello()
    yield opened
    opened.close()


@pytest.fixture
def calls() -> Iterator[ThreadPoolExecutor]:
    """MCP calls block until the link answers: they run beside the test, which plays the link."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield pool


def _error(result: dict[str, Any]) -> dict[str, Any]:
    assert result["isError"] is True, result
    error: dict[str, Any] = result["structuredContent"]["error"]
    assert json.loads(result["content"][0]["text"]) == {"error": error}
    return error


def test_a_first_frame_that_is_not_hello_is_closed_1008(edge: Edge, device: dict[str, Any]) -> None:
    link = open_link(edge, device)
    link.send({"type": "heartbeat", "seq": 1, "runtime": runtime_identity()})
    assert link.close_code() == 1008


def test_a_hello_with_missing_fields_is_closed_1008(edge: Edge, device: dict[str, Any]) -> None:
    link = open_link(edge, device)
    link.send({"type": "hello", "protocol": 1, "device_id": device["device_id"]})
    assert link.close_code() == 1008


@pytest.mark.parametrize(
    "change",
    [
        {"device_id": "dev_someone_else"},
        {"link_version": "x" * 129},
        {"protocol": 2},
        {"runtime": {"generation": None, "version": "0.1.0", "contract": {"epoch": "5"}}},
    ],
)
def test_a_hello_naming_another_device_or_malformed_is_closed_1008(
    edge: Edge, device: dict[str, Any], change: dict[str, Any]
) -> None:
    link = open_link(edge, device)
    hello = {
        "type": "hello",
        "protocol": 1,
        "device_id": device["device_id"],
        "link_version": "0.1.0",
        "runtime": runtime_identity(),
    }
    link.send({**hello, **change})
    assert link.close_code() == 1008


def test_a_binary_frame_is_closed_1003(link: ScriptedLink) -> None:
    link.socket.send(b"{}")
    assert link.close_code() == 1003


def test_a_300_kib_frame_is_closed_1009(link: ScriptedLink) -> None:
    link.send({"type": "padding", "data": "a" * (300 * 1024)})
    assert link.close_code() == 1009


def test_a_frame_of_exactly_the_cap_is_taken(link: ScriptedLink) -> None:
    head = json.dumps({"type": "padding", "data": ""})
    link.send_text(head[:-2] + "a" * (MAX_FRAME_BYTES - len(head)) + '"}')
    link.send({"type": "heartbeat", "seq": 1, "runtime": runtime_identity()})
    assert link.recv_type("heartbeat")["seq"] >= 1


def test_hello_ack_and_heartbeats_answered(edge: Edge, device: dict[str, Any]) -> None:
    link = open_link(edge, device)
    ack = link.hello()
    assert ack["protocol"] == 1
    assert (ack["heartbeat_s"], ack["silence_limit_s"], ack["max_frame_bytes"]) == (30, 90, MAX_FRAME_BYTES)
    assert isinstance(ack["connection_id"], str) and ack["connection_id"]
    link.send({"type": "heartbeat", "seq": 1, "runtime": runtime_identity()})
    first = link.recv_type("heartbeat")
    link.send({"type": "heartbeat", "seq": 2, "runtime": runtime_identity()})
    second = link.recv_type("heartbeat")
    assert second["seq"] == first["seq"] + 1
    link.close()


def test_a_new_connection_replaces_the_old_one_1012(edge: Edge, device: dict[str, Any]) -> None:
    old = open_link(edge, device)
    old.hello()
    new = open_link(edge, device)
    new.hello()
    assert old.close_code() == 1012
    new.close()


def test_a_tool_call_is_relayed_to_the_link_and_back(
    connector: Connector, link: ScriptedLink, calls: ThreadPoolExecutor
) -> None:
    answer: Future[dict[str, Any]] = calls.submit(connector.call, "herdr_fs_read", {"path": "/tmp/x"})
    request = link.recv_type("tool_request")
    assert request["tool"] == "herdr_fs_read" and request["arguments"] == {"path": "/tmp/x"}
    assert isinstance(request["deadline_ms"], int) and request["deadline_ms"] > 0
    result = {"content": [{"type": "text", "text": "hello"}], "isError": False}
    link.send({"type": "tool_result", "id": request["id"], "result": result})
    assert answer.result(timeout=WAIT_S) == result


def test_concurrent_calls_are_each_answered_with_their_own_result(
    connector: Connector, link: ScriptedLink
) -> None:
    count = 100
    with ThreadPoolExecutor(max_workers=count) as pool:
        answers = [pool.submit(connector.call, "herdr_fs_read", {"path": f"/f{n}"}) for n in range(count)]
        requests = [link.recv_type("tool_request") for _ in range(count)]
        for request in reversed(requests):  # answered out of order
            text = request["arguments"]["path"]
            link.send(
                {
                    "type": "tool_result",
                    "id": request["id"],
                    "result": {"content": [{"type": "text", "text": text}]},
                }
            )
        results = [answer.result(timeout=WAIT_S) for answer in answers]
    assert [result["content"][0]["text"] for result in results] == [f"/f{n}" for n in range(count)]
    assert len({request["id"] for request in requests}) == count


#: The runtime's former name of "sent, answer lost" (issue 23): a link may still send it for a
#: transition (docs/edge-protocol.md, "Frames"); the Edge answers only the one name.
FORMER_NAME = "delivery_uncertain"


@pytest.mark.parametrize(
    ("sent", "answered"),
    [
        (("no_active_generation", True, "not_delivered"), ("no_active_generation", True, "not_delivered")),
        ((FORMER_NAME, False, FORMER_NAME), ("delivery_unknown", False, "delivery_unknown")),
    ],
    ids=["as-sent", "former-name"],
)
def test_a_tool_error_from_the_link_reaches_the_client(
    connector: Connector,
    link: ScriptedLink,
    calls: ThreadPoolExecutor,
    sent: tuple[str, bool, str],
    answered: tuple[str, bool, str],
) -> None:
    answer = calls.submit(connector.call, "herdr_inspect", {})
    request = link.recv_type("tool_request")
    code, retryable, state = sent
    link.send(
        {
            "type": "tool_error",
            "id": request["id"],
            "code": code,
            "message": "it failed there",
            "retryable": retryable,
            "delivery_state": state,
        }
    )
    error = _error(answer.result(timeout=WAIT_S))
    code, retryable, state = answered
    assert error == {
        "code": code,
        "message": "it failed there",
        "retryable": retryable,
        "delivery_state": state,
    }


def test_a_chunked_result_is_reassembled(
    connector: Connector, link: ScriptedLink, calls: ThreadPoolExecutor
) -> None:
    result = {"content": [{"type": "text", "text": "é" * 300_000}], "isError": False}
    text = json.dumps(result, ensure_ascii=False)
    slices = [text[start : start + CHUNK_BYTES // 2] for start in range(0, len(text), CHUNK_BYTES // 2)]
    answer = calls.submit(connector.call, "herdr_fs_read", {"path": "/big"})
    request = link.recv_type("tool_request")
    for index, data in enumerate(slices):
        link.send(
            {
                "type": "tool_result_chunk",
                "id": request["id"],
                "index": index,
                "count": len(slices),
                "data": data,
            }
        )
    assert answer.result(timeout=WAIT_S) == result
    assert len(slices) > 1


def test_a_chunked_result_above_16_mib_is_refused_result_too_large(
    connector: Connector, link: ScriptedLink, calls: ThreadPoolExecutor
) -> None:
    answer = calls.submit(connector.call, "herdr_fs_read", {"path": "/huge"})
    request = link.recv_type("tool_request")
    data = "a" * CHUNK_BYTES
    count = 16 * 1024 * 1024 // CHUNK_BYTES + 1
    for index in range(count):
        link.send(
            {"type": "tool_result_chunk", "id": request["id"], "index": index, "count": count, "data": data}
        )
    error = _error(answer.result(timeout=WAIT_S))
    assert (error["code"], error["delivery_state"], error["retryable"]) == (
        "result_too_large",
        "delivered",
        False,
    )


def test_a_call_in_flight_when_the_link_drops_is_delivery_unknown_and_never_resent(
    edge: Edge, device: dict[str, Any], connector: Connector, link: ScriptedLink, calls: ThreadPoolExecutor
) -> None:
    answer = calls.submit(connector.call, "herdr_exec", {"command": "echo once"})
    assert link.recv_type("tool_request")["arguments"] == {"command": "echo once"}
    link.socket.close()
    error = _error(answer.result(timeout=WAIT_S))
    assert (error["code"], error["delivery_state"], error["retryable"]) == (
        "link_lost",
        "delivery_unknown",
        False,
    )
    # The next link of the device hears the next call first: the dropped one is not re-sent.
    again = open_link(edge, device)
    again.hello()
    second = calls.submit(connector.call, "herdr_inspect", {})
    request = again.recv_type("tool_request")
    assert (request["tool"], request["arguments"]) == ("herdr_inspect", {})
    again.send({"type": "tool_result", "id": request["id"], "result": {"content": [], "isError": False}})
    assert second.result(timeout=WAIT_S) == {"content": [], "isError": False}
    again.close()


def test_a_cancelled_call_is_cancelled_at_the_link(
    connector: Connector, link: ScriptedLink, calls: ThreadPoolExecutor
) -> None:
    answer = calls.submit(connector.call, "herdr_exec", {"command": "sleep 100"}, 7001)
    request = link.recv_type("tool_request")
    notification = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7001}}
    assert connector.post(notification).status_code == 202
    assert link.recv_type("cancel") == {"type": "cancel", "id": request["id"]}
    link.send({"type": "cancel_ack", "id": request["id"], "delivery_state": "delivered"})
    error = _error(answer.result(timeout=WAIT_S))
    assert (error["code"], error["delivery_state"]) == ("cancelled", "delivered")


def test_a_cancel_ack_in_the_former_name_is_answered_delivery_unknown(
    connector: Connector, link: ScriptedLink, calls: ThreadPoolExecutor
) -> None:
    answer = calls.submit(connector.call, "herdr_exec", {"command": "sleep 100"}, 7002)
    request = link.recv_type("tool_request")
    notification = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7002}}
    assert connector.post(notification).status_code == 202
    assert link.recv_type("cancel") == {"type": "cancel", "id": request["id"]}
    link.send({"type": "cancel_ack", "id": request["id"], "delivery_state": FORMER_NAME})
    error = _error(answer.result(timeout=WAIT_S))
    assert (error["code"], error["delivery_state"]) == ("cancelled", "delivery_unknown")


def test_a_delivery_state_of_neither_name_is_closed_1008(
    connector: Connector, link: ScriptedLink, calls: ThreadPoolExecutor
) -> None:
    answer = calls.submit(connector.call, "herdr_inspect", {})
    request = link.recv_type("tool_request")
    link.send({"type": "cancel_ack", "id": request["id"], "delivery_state": "delivery_maybe"})
    assert link.close_code() == 1008
    error = _error(answer.result(timeout=WAIT_S))
    assert (error["code"], error["delivery_state"]) == ("link_lost", "delivery_unknown")


def test_an_unknown_contract_is_refused_contract_mismatch_until_a_heartbeat_names_a_known_one(
    edge: Edge, device: dict[str, Any], connector: Connector, calls: ThreadPoolExecutor
) -> None:
    unknown = runtime_identity()
    unknown["contract"] = {"epoch": 6, "hash": "sha256:" + "6" * 64, "tool_count": 19}
    link = open_link(edge, device)
    link.hello(unknown)
    error = _error(connector.call("herdr_inspect", {}))
    assert (error["code"], error["delivery_state"]) == ("contract_mismatch", "not_delivered")
    # tools/list stays the frozen public contract (test_edge_relay_contract.py).
    assert len(connector.rpc("tools/list")["result"]["tools"]) == 19
    # An A/B switch shows up in the next heartbeat, without reconnecting.
    link.send({"type": "heartbeat", "seq": 1, "runtime": runtime_identity(generation="gen-b")})
    link.recv_type("heartbeat")
    answer = calls.submit(connector.call, "herdr_inspect", {})
    request = link.recv_type("tool_request")
    link.send({"type": "tool_result", "id": request["id"], "result": {"content": [], "isError": False}})
    assert answer.result(timeout=WAIT_S) == {"content": [], "isError": False}
    link.close()


def test_a_contract_whose_epoch_the_link_does_not_know_is_taken_and_refused_contract_mismatch(
    edge: Edge, device: dict[str, Any], connector: Connector
) -> None:
    """src/herdr_mcp/link/edge.py announces epoch null for a hash matching no catalog it knows."""
    unknown = runtime_identity()
    unknown["contract"] = {"epoch": None, "hash": "sha256:" + "7" * 64, "tool_count": None}
    link = open_link(edge, device)
    assert link.hello(unknown)["type"] == "hello_ack"
    error = _error(connector.call("herdr_inspect", {}))
    assert (error["code"], error["delivery_state"]) == ("contract_mismatch", "not_delivered")
    link.close()


def test_tools_list_is_the_frozen_edge_epoch_8_catalog(connector: Connector, link: ScriptedLink) -> None:
    tools = connector.rpc("tools/list")["result"]["tools"]
    frozen = json.loads(EDGE_EPOCH_8.read_text(encoding="utf-8"))["tools"]
    # The file's identity is pinned in test_edge_relay_contract.py.
    assert identity_of(tools, 8) == identity_of(frozen, 8)
    assert identity_of(tools, 8).tool_count == 19


def test_herdr_devices_and_status_show_online_state_and_identity_without_secrets(
    edge: Edge, device: dict[str, Any], connector: Connector, link: ScriptedLink
) -> None:
    other = edge.pair_device("other-workstation")
    link.send({"type": "heartbeat", "seq": 1, "runtime": runtime_identity(generation="gen-c")})
    link.recv_type("heartbeat")
    result = connector.call("herdr_devices", {})
    assert result.get("isError") is not True, result
    devices = {entry["device_id"]: entry for entry in result["structuredContent"]["devices"]}
    mine, theirs = devices[device["device_id"]], devices[other["device_id"]]
    assert (mine["online"], mine["current"], mine["name"]) == (True, True, "relay-workstation")
    assert mine["runtime"] == runtime_identity(generation="gen-c") and mine["contract_compatible"] is True
    assert mine["last_heartbeat_at"] is not None
    assert (theirs["online"], theirs["current"], theirs["runtime"]) == (False, False, None)
    status = edge.get(f"/status/{device['device_id']}", headers=device_headers(device))
    assert status.status_code == 200 and status.json()["online"] is True
    assert status.json()["runtime"]["generation"] == "gen-c"
    for secret in (device["device_secret"], other["device_secret"], connector.token):
        assert secret not in status.text and secret not in json.dumps(result)
    missing = edge.get("/status/dev_unknown", headers=edge.admin_headers())
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "device_not_found"
    assert _error(connector.call("herdr_devices", {"x": 1}))["code"] == "invalid_argument"


def test_a_heartbeat_handled_while_a_control_request_runs_keeps_its_runtime(
    edge: Edge, device: dict[str, Any], link: ScriptedLink
) -> None:
    link.send({"type": "control_request", "id": "c-list", "method": "consent.list", "params": {}})
    link.send({"type": "heartbeat", "seq": 1, "runtime": runtime_identity(generation="gen-during-control")})
    seen = {link.recv()["type"], link.recv()["type"]}
    assert seen == {"control_result", "heartbeat"}
    status = edge.get(f"/status/{device['device_id']}", headers=device_headers(device)).json()
    assert status["runtime"]["generation"] == "gen-during-control"


def test_a_call_while_the_device_is_offline_is_device_offline_not_delivered(
    edge: Edge, device: dict[str, Any], connector: Connector
) -> None:
    link = open_link(edge, device)
    link.hello()
    link.close()  # returns once the Edge answered the close: the object has seen it
    error = _error(connector.call("herdr_inspect", {}))
    assert (error["code"], error["delivery_state"], error["retryable"]) == (
        "device_offline",
        "not_delivered",
        True,
    )


def test_mcp_initialize_ping_and_unknown_methods(connector: Connector) -> None:
    initialized = connector.rpc(
        "initialize",
        {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    )
    assert initialized["result"]["protocolVersion"] == "2025-06-18"
    assert initialized["result"]["capabilities"] == {"tools": {"listChanged": False}}
    newest = connector.rpc(
        "initialize",
        {"protocolVersion": "1999-01-01", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    )
    assert newest["result"]["protocolVersion"] == "2025-11-25"
    assert connector.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
    assert connector.rpc("ping") == {"jsonrpc": "2.0", "id": connector.ids[0], "result": {}}
    assert connector.rpc("resources/list")["error"]["code"] == -32601
    bad_version = connector.post(
        {"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"MCP-Protocol-Version": "1999-01-01"}
    )
    assert bad_version.status_code == 400


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_mcp_sdk_client_lists_and_calls_through_the_edge(
    connector: Connector, link: ScriptedLink, calls: ThreadPoolExecutor, mode: str
) -> None:
    """The Python SDK's own client (discovery answered, so 2026-07-28, or initialize directly;
    tests/edge/test_edge_mcp_revisions.py holds it to each revision against a real runtime)."""

    async def session() -> tuple[str, list[str], dict[str, Any], dict[str, Any]]:
        headers = {"Authorization": f"Bearer {connector.token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=WAIT_S) as http,
            Client(
                streamable_http_client(connector.edge.base + "/mcp", http_client=http), mode=mode
            ) as client,
        ):
            tools = [tool.name for tool in (await client.list_tools()).tools]
            devices = await client.call_tool("herdr_devices", {})
            relayed = await client.call_tool("herdr_inspect", {})
            return (
                client.protocol_version,
                tools,
                devices.model_dump(by_alias=True),
                relayed.model_dump(by_alias=True),
            )

    outcome = calls.submit(asyncio.run, session())
    request = link.recv_type("tool_request")
    link.send(
        {"type": "tool_result", "id": request["id"], "result": {"content": [{"type": "text", "text": "ok"}]}}
    )
    version, tools, devices, relayed = outcome.result(timeout=WAIT_S * 2)
    assert version == {"auto": "2026-07-28", "legacy": "2025-11-25"}[mode]
    assert len(tools) == 19 and "herdr_devices" in tools and "herdr_inspect" in tools
    assert devices["isError"] is False and devices["structuredContent"]["devices"]
    assert relayed["content"][0]["text"] == "ok"
