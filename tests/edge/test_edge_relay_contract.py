"""The public Edge contract, epoch 8: frozen in manifests/contracts/edge-epoch-8.json, identified by
the same rule as the runtime catalogs (`identity_of`), and made of the runtime epoch-5 tools plus
the edge-local herdr_devices.

The contract rule, against the real Worker under workerd (docs/edge-protocol.md, "The runtime
identity and the public contract"): /mcp tools/list is always exactly this file, whatever the
device announces and whether it is online; a runtime tool is relayed only to a device announcing
runtime epoch 5's identity, any other (epoch 4, the rollback baseline, included) is refused
`contract_mismatch` before anything reaches the link; herdr_devices says which devices are
`contract_compatible`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from herdr_mcp.contract import contract_identity, identity_of, load_catalog
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

#: The pin: editing the frozen catalog fails here until the change is a new epoch with a new file.
EDGE_EPOCH_8_HASH = "sha256:7dea4bde22090eda17fd93c0e842b7de7579a9f354d8cf6558d8ad9e8429cb45"
EDGE_EPOCH_8 = Path(__file__).resolve().parents[2] / "manifests" / "contracts" / "edge-epoch-8.json"


def _document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(EDGE_EPOCH_8.read_text(encoding="utf-8"))
    return document


def test_the_edge_epoch_8_hash_is_pinned() -> None:
    document = _document()
    identity = identity_of(document["tools"], document["epoch"])
    assert (identity.epoch, identity.hash, identity.tool_count) == (8, EDGE_EPOCH_8_HASH, 19)


def test_edge_epoch_8_is_the_runtime_epoch_5_tools_plus_herdr_devices() -> None:
    document = _document()
    assert (document["name"], document["runtime_epoch"]) == ("edge", 5)
    tools = {tool["name"]: tool for tool in document["tools"]}
    runtime = {tool["name"]: tool for tool in load_catalog(5)}
    devices = tools.pop("herdr_devices")
    assert tools == runtime
    Draft202012Validator.check_schema(devices["inputSchema"])
    assert devices["inputSchema"] == {"type": "object", "properties": {}, "additionalProperties": False}
    assert devices["annotations"]["readOnlyHint"] is True and devices["annotations"]["openWorldHint"] is False


def test_an_edit_of_the_edge_catalog_changes_its_identity() -> None:
    tools = _document()["tools"]
    tools[-1]["description"] += " "
    assert identity_of(tools, 8).hash != EDGE_EPOCH_8_HASH


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    with running_edge(tmp_path_factory.mktemp("edge-contract")) as running:
        yield running


@pytest.fixture(scope="module")
def device(edge: Edge) -> dict[str, Any]:
    return edge.pair_device("contract-workstation")


@pytest.fixture(scope="module")
def connector(edge: Edge, device: dict[str, Any]) -> Connector:
    link = open_link(edge, device)
    link.hello()
    try:
        return connect_connector(edge, link)
    finally:
        link.close()


def _linked(edge: Edge, device: dict[str, Any], runtime: dict[str, Any]) -> ScriptedLink:
    link = open_link(edge, device)
    link.hello(runtime)
    return link


def _unknown_runtime(epoch: int | None) -> dict[str, Any]:
    runtime = runtime_identity()
    runtime["contract"] = {
        "epoch": epoch,
        "hash": "sha256:" + "6" * 64,
        "tool_count": None if epoch is None else 18,
    }
    return runtime


def _served_identity(connector: Connector) -> tuple[int, str, int]:
    tools = connector.rpc("tools/list")["result"]["tools"]
    identity = identity_of(tools, 8)
    return identity.epoch, identity.hash, identity.tool_count


def _error(result: dict[str, Any]) -> dict[str, Any]:
    assert result["isError"] is True, result
    error: dict[str, Any] = result["structuredContent"]["error"]
    return error


@pytest.mark.slow
@pytest.mark.parametrize("announced", ["epoch-5", "epoch-4", "unknown-hash", "unknown-epoch", "offline"])
def test_tools_list_is_always_the_frozen_edge_epoch_8(
    edge: Edge, device: dict[str, Any], connector: Connector, announced: str
) -> None:
    runtimes = {
        "epoch-5": runtime_identity(5),
        "epoch-4": runtime_identity(4),
        "unknown-hash": _unknown_runtime(6),
        "unknown-epoch": _unknown_runtime(None),
    }
    link = _linked(edge, device, runtimes[announced]) if announced in runtimes else None
    try:
        assert _served_identity(connector) == (8, EDGE_EPOCH_8_HASH, 19)
    finally:
        if link is not None:
            link.close()


@pytest.mark.slow
def test_a_device_that_never_connected_is_served_edge_epoch_8(edge: Edge) -> None:
    fresh = edge.pair_device("never-connected")
    link = _linked(edge, fresh, runtime_identity(5))
    try:
        connector = connect_connector(edge, link)
    finally:
        link.close()
    assert _served_identity(connector) == (8, EDGE_EPOCH_8_HASH, 19)
    error = _error(connector.call("herdr_inspect", {}))
    assert (error["code"], error["delivery_state"]) == ("device_offline", "not_delivered")


@pytest.mark.slow
@pytest.mark.parametrize("announced", ["epoch-4", "unknown-hash", "unknown-epoch"])
def test_a_runtime_other_than_epoch_5_is_refused_contract_mismatch_and_nothing_reaches_the_link(
    edge: Edge, device: dict[str, Any], connector: Connector, announced: str
) -> None:
    runtime = {
        "epoch-4": runtime_identity(4),
        "unknown-hash": _unknown_runtime(6),
        "unknown-epoch": _unknown_runtime(None),
    }[announced]
    expected = contract_identity(5)
    link = _linked(edge, device, runtime)
    try:
        error = _error(connector.call("herdr_inspect", {}))
        assert (error["code"], error["retryable"], error["delivery_state"]) == (
            "contract_mismatch",
            False,
            "not_delivered",
        )
        # The message names what the device announced, what the Edge relays to, and what to do.
        message = error["message"]
        announced_epoch = runtime["contract"]["epoch"]
        assert (
            f"runtime contract epoch {'unknown' if announced_epoch is None else announced_epoch}" in message
        )
        assert runtime["contract"]["hash"] in message
        assert f"runtime contract epoch {expected.epoch} ({expected.hash}, 18 tools)" in message
        assert "activate a generation with runtime contract epoch 5" in message
        # An A/B switch to epoch 5 shows in the next heartbeat; the refused call was never sent:
        # the first tool_request the link hears is the next call's.
        link.send({"type": "heartbeat", "seq": 1, "runtime": runtime_identity(5, generation="gen-b")})
        link.recv_type("heartbeat")
        with ThreadPoolExecutor(max_workers=1) as pool:
            answer = pool.submit(connector.call, "herdr_fs_read", {"path": "/after-switch"})
            request = link.recv_type("tool_request")
            assert (request["tool"], request["arguments"]) == ("herdr_fs_read", {"path": "/after-switch"})
            link.send(
                {"type": "tool_result", "id": request["id"], "result": {"content": [], "isError": False}}
            )
            assert answer.result(timeout=WAIT_S) == {"content": [], "isError": False}
    finally:
        link.close()


@pytest.mark.slow
def test_herdr_devices_shows_each_announced_identity_and_whether_it_is_compatible(
    edge: Edge, device: dict[str, Any], connector: Connector
) -> None:
    link = _linked(edge, device, runtime_identity(4, generation="gen-old"))
    try:
        mine = _device_entry(connector, device)
        assert mine["runtime"] == runtime_identity(4, generation="gen-old")
        assert mine["contract_compatible"] is False
        link.send({"type": "heartbeat", "seq": 1, "runtime": runtime_identity(5, generation="gen-new")})
        link.recv_type("heartbeat")
        mine = _device_entry(connector, device)
        assert mine["runtime"] == runtime_identity(5, generation="gen-new")
        assert mine["contract_compatible"] is True
    finally:
        link.close()
    status = edge.get(f"/status/{device['device_id']}", headers=device_headers(device)).json()
    assert (status["online"], status["contract_compatible"]) == (False, True)


def _device_entry(connector: Connector, device: dict[str, Any]) -> dict[str, Any]:
    result = connector.call("herdr_devices", {})
    assert result.get("isError") is not True, result
    [entry] = [
        entry for entry in result["structuredContent"]["devices"] if entry["device_id"] == device["device_id"]
    ]
    assert isinstance(entry, dict)
    return entry


@pytest.mark.slow
def test_a_tool_outside_edge_epoch_8_is_unknown_tool_even_on_a_compatible_link(
    edge: Edge, device: dict[str, Any], connector: Connector
) -> None:
    link = _linked(edge, device, runtime_identity(5))
    try:
        error = _error(connector.call("herdr_not_a_tool", {}))
        assert (error["code"], error["retryable"], error["delivery_state"]) == (
            "unknown_tool",
            False,
            "not_delivered",
        )
    finally:
        link.close()
