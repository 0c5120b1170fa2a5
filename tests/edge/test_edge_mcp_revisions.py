"""The MCP revisions /mcp serves, end to end on loopback: the `mcp` SDK's client held to 2026-07-28
(pinned, and its default `server/discover` probe), to 2025-11-25 and to 2025-06-18 lists the tools
and calls one on the real Worker (workerd, `wrangler dev --local`) -> the device's Durable Object
-> `herdr-mcp link` (paired with `herdr-mcp link pair`) -> a real runtime on a simulated Herdr.
Every HTTP exchange is recorded: each revision is served as itself, with no 400 and no fallback.

Then the 2026-07-28 checks of the specification (basic/transports/streamable-http.mdx, "Request
Metadata" and "Server Validation"; basic/versioning.mdx; basic/index.mdx, "Per-request protocol
fields"), each POST made by hand: the routing headers against the body (-32020), the envelope
(-32602), a revision not served (-32022 naming the served ones), an unknown method (404), and
that a call refused for a header never reaches the workstation.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp.client.streamable_http import streamable_http_client

from herdr_mcp import __version__
from tests.support.edge_harness import Edge, running_edge
from tests.support.edge_relay_harness import WAIT_S, Connector, PairedLink, approve_with_cli, paired_link
from tests.support.revision_clients import REVISIONS, Wire, check_list_and_call, negotiated, session_at
from tests.support.sim_helpers import short_tmp_dir
from tests.support.workstation_harness import Generations, ab_generations, marked_command

pytestmark = pytest.mark.timeout(600)

EDGE_EPOCH_8 = Path(__file__).resolve().parents[2] / "manifests" / "contracts" / "edge-epoch-8.json"
SERVER_INFO = {"name": "herdr-mcp-edge", "title": "herdr-mcp (Edge)", "version": "0.1.0"}
#: Every revision the Edge serves, newest first, as an UnsupportedProtocolVersionError names them.
SUPPORTED = ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "by-hand", "version": "1"},
}


@dataclass
class World:
    edge: Edge
    paired: PairedLink
    generations: Generations
    connector: Connector


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with (
        short_tmp_dir() as tmp,
        running_edge(tmp / "edge") as edge,
        ab_generations(tmp) as generations,
        paired_link(edge, generations, "revisions") as paired,
    ):
        yield World(edge, paired, generations, approve_with_cli(edge, paired))


@dataclass(frozen=True)
class Exchange:
    """One POST the SDK's client made to /mcp: the JSON-RPC method in its body, the MCP routing
    headers it carried, and the status it got."""

    method: str | None
    headers: dict[str, str]
    status: int

    def line(self) -> str:
        version = self.headers.get("mcp-protocol-version", "-")
        return f"{self.method or 'response'}[{version}]={self.status}"


class HttpLog:
    """An httpx response hook keeping every exchange as an `Exchange`."""

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []

    async def __call__(self, response: httpx2.Response) -> None:
        request = response.request
        body = json.loads(request.content) if request.content else {}
        headers = {name: value for name, value in request.headers.items() if name.startswith("mcp-")}
        self.exchanges.append(Exchange(body.get("method"), headers, response.status_code))


def _catalog_tools() -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = json.loads(EDGE_EPOCH_8.read_text())["tools"]
    return tools


@pytest.mark.parametrize("revision", REVISIONS)
def test_the_sdk_client_held_to_each_revision_lists_and_calls_through_the_edge(
    world: World, revision: str
) -> None:
    wire, log = Wire(), HttpLog()
    command = f"echo {revision}-on-$HERDR_LINK_TEST_GENERATION"

    async def session() -> tuple[str | None, Any, Any]:
        async with httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {world.connector.token}"},
            timeout=WAIT_S * 2,
            trust_env=False,
            event_hooks={"response": [log]},
        ) as http:
            transport = streamable_http_client(world.edge.base + "/mcp", http_client=http)
            async with session_at(transport, revision, wire) as client:
                listed = await client.list_tools()
                ran = await client.call_tool("herdr_exec", {"workspace": "w1", "command": command})
                return client.protocol_version, listed, ran

    version, listed, ran = asyncio.run(session())
    print(
        f"\nedge {revision}: protocol {version}; " + " ".join(exchange.line() for exchange in log.exchanges)
    )
    assert version == negotiated(revision)
    assert [exchange.status for exchange in log.exchanges if exchange.status >= 300] == [], log.exchanges
    assert [exchange.method for exchange in log.exchanges] == wire.methods()
    check_list_and_call(wire, revision)

    # The frozen catalog, exactly as the file holds it, in either era.
    (tools_answer,) = [answer for answer in wire.received if "tools" in answer.get("result", {})]
    assert tools_answer["result"]["tools"] == _catalog_tools()
    assert len(listed.tools) == 19
    # The call reached runtime A on the workstation.
    assert not ran.is_error, ran
    assert ran.structured_content["stdout"] == f"{revision}-on-A\n"

    for exchange in log.exchanges:
        if version == "2026-07-28":
            # Every request carried the revision and its method in headers, and the tool's name.
            assert exchange.headers["mcp-protocol-version"] == "2026-07-28", exchange
            assert exchange.headers["mcp-method"] == exchange.method, exchange
            assert exchange.headers.get("mcp-name") == (
                "herdr_exec" if exchange.method == "tools/call" else None
            )
        elif exchange.method != "initialize":
            assert exchange.headers["mcp-protocol-version"] == revision, exchange
    for answer in wire.received[:-1]:  # what the Edge answered itself
        result = answer["result"]
        if version == "2026-07-28":
            assert result["resultType"] == "complete"
            assert result["_meta"] == {"io.modelcontextprotocol/serverInfo": SERVER_INFO}
        else:
            assert "_meta" not in result and "resultType" not in result
    # The relayed call's result: at 2026-07-28 the Edge names itself as its server; before, it is
    # passed on as the link got it from the runtime (which speaks 2026-07-28 to the link).
    relayed = wire.received[-1]["result"]
    assert relayed["resultType"] == "complete"
    assert relayed["_meta"]["io.modelcontextprotocol/serverInfo"] == (
        SERVER_INFO if version == "2026-07-28" else {"name": "herdr-mcp", "version": __version__}
    )
    if revision == "auto":
        discovered = wire.received[0]["result"]
        assert discovered["supportedVersions"] == ["2026-07-28"]
        assert discovered["capabilities"] == {"tools": {"listChanged": False}}
        assert (discovered["ttlMs"], discovered["cacheScope"]) == (0, "private")


def _modern_post(
    connector: Connector,
    method: str,
    params: dict[str, Any] | None = None,
    headers: dict[str, str | None] | None = None,
    meta: dict[str, Any] | None = None,
) -> httpx2.Response:
    """A 2026-07-28 request by hand: `meta` (default: a complete envelope) in `params._meta`,
    the routing headers the SDK would send unless `headers` says otherwise (a None drops one)."""
    body_params = {**(params or {}), "_meta": ENVELOPE if meta is None else meta}
    routing: dict[str, str | None] = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
    if "name" in body_params:
        routing["Mcp-Name"] = body_params["name"]
    routing.update(headers or {})
    sent = {name: value for name, value in routing.items() if value is not None}
    message = {"jsonrpc": "2.0", "id": connector.next_id(), "method": method, "params": body_params}
    return connector.post(message, sent)


def _error(answer: httpx2.Response, status: int, code: int) -> dict[str, Any]:
    assert answer.status_code == status, (answer.status_code, answer.text)
    error: dict[str, Any] = answer.json()["error"]
    assert error["code"] == code, error
    return error


def test_2026_07_28_requests_are_checked_against_their_headers_and_envelope(world: World) -> None:
    connector, counters = world.connector, world.generations.counters
    discovered = _modern_post(connector, "server/discover")
    assert discovered.status_code == 200, discovered.text
    result = discovered.json()["result"]
    assert result["supportedVersions"] == ["2026-07-28"] and result["resultType"] == "complete"
    assert result["_meta"] == {"io.modelcontextprotocol/serverInfo": SERVER_INFO}
    assert "herdr_devices" in result["instructions"]

    # The routing headers must repeat the body: method, tool name, revision (-32020, 400).
    _error(_modern_post(connector, "tools/list", headers={"Mcp-Method": "tools/call"}), 400, -32020)
    refused = marked_command(counters, "never")
    call = {"name": "herdr_exec", "arguments": {"workspace": "w1", "command": refused}}
    mismatch = _error(
        _modern_post(connector, "tools/call", call, headers={"Mcp-Name": "herdr_inspect"}), 400, -32020
    )
    assert "Mcp-Name" in mismatch["message"]
    _error(_modern_post(connector, "tools/call", call, headers={"Mcp-Name": None}), 400, -32020)
    _error(_modern_post(connector, "tools/list", headers={"MCP-Protocol-Version": None}), 400, -32020)
    _error(_modern_post(connector, "tools/list", headers={"MCP-Protocol-Version": "2025-11-25"}), 400, -32020)
    # A name in the base64 sentinel form is decoded before the comparison.
    encoded = "=?base64?" + base64.b64encode(b"herdr_devices").decode() + "?="
    devices = _modern_post(
        connector, "tools/call", {"name": "herdr_devices", "arguments": {}}, headers={"Mcp-Name": encoded}
    )
    assert devices.status_code == 200, devices.text
    assert devices.json()["result"]["structuredContent"]["devices"], devices.text
    _error(
        _modern_post(
            connector,
            "tools/call",
            {"name": "herdr_devices", "arguments": {}},
            headers={"Mcp-Name": "=?base64?!?="},
        ),
        400,
        -32020,
    )

    # The envelope: its required pair (-32602), then the revision (-32022 naming the served ones).
    half = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    missing = _error(_modern_post(connector, "tools/list", meta=half), 400, -32602)
    assert "clientCapabilities" in missing["message"]
    _error(
        connector.post(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
        ),
        400,
        -32602,
    )
    future = {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    unsupported = _error(
        _modern_post(connector, "tools/list", meta=future, headers={"MCP-Protocol-Version": "2099-01-01"}),
        400,
        -32022,
    )
    assert unsupported["data"] == {"supported": SUPPORTED, "requested": "2099-01-01"}
    # A handshake-era request under an unknown revision's header is told the same.
    old_style = connector.post(
        {"jsonrpc": "2.0", "id": 2, "method": "ping"}, {"MCP-Protocol-Version": "1999-01-01"}
    )
    assert _error(old_style, 400, -32022)["data"] == {"supported": SUPPORTED, "requested": "1999-01-01"}

    # What 2026-07-28 does not have is 404 -32601: ping, the handshake, methods never served.
    for method in ("ping", "initialize", "resources/list"):
        _error(_modern_post(connector, method), 404, -32601)
    # Params that are not a call are 400 -32602 at this revision.
    _error(_modern_post(connector, "tools/call", {"name": "herdr_exec", "arguments": [1]}), 400, -32602)
    # A notification is accepted; under a revision not served it is refused, with no id.
    notification = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}}
    assert connector.post(notification, {"MCP-Protocol-Version": "2026-07-28"}).status_code == 202
    assert _error(connector.post(notification, {"MCP-Protocol-Version": "2099-01-01"}), 400, -32022)
    # None of the refused calls reached the workstation.
    assert not (counters / "never").exists()


def test_the_handshake_era_is_answered_as_before(world: World) -> None:
    """initialize offers handshake revisions only: one naming 2026-07-28 (which has no
    handshake) gets 2025-11-25; a 2026 envelope without its header contradicts itself."""
    connector = world.connector
    offer = {"capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    for asked, answered in (("2024-11-05", "2024-11-05"), ("2026-07-28", "2025-11-25")):
        result = connector.rpc("initialize", {**offer, "protocolVersion": asked})["result"]
        assert result["protocolVersion"] == answered
        assert result["serverInfo"] == SERVER_INFO and "_meta" not in result
    listed = connector.rpc("tools/list")["result"]
    assert listed == {"tools": _catalog_tools()}
    assert connector.rpc("server/discover")["error"]["code"] == -32601
    contradiction = connector.post(
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": ENVELOPE}}
    )
    assert _error(contradiction, 400, -32020)["message"].startswith(
        "the MCP-Protocol-Version header is missing"
    )


def test_a_body_over_1_mib_is_413_declared_or_chunked(world: World) -> None:
    """edge/src/relay/mcp.ts reads at most MAX_BODY_BYTES (1 MiB) of a body (http.ts
    readCappedText): a declared Content-Length over it is refused unread, a chunked one at the cap."""
    connector = world.connector
    message = {"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"pad": "x" * (1 << 20)}}
    body = json.dumps(message).encode()
    headers = {
        "Authorization": f"Bearer {connector.token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
    }
    url = world.edge.base + "/mcp"
    declared = httpx2.post(url, content=body, headers=headers, timeout=WAIT_S * 2)
    chunks = [body[start : start + 65536] for start in range(0, len(body), 65536)]
    chunked = httpx2.post(url, content=iter(chunks), headers=headers, timeout=WAIT_S * 2)
    for answer in (declared, chunked):
        assert answer.status_code == 413, answer.text[:300]
        assert answer.json()["error"]["code"] == -32600
    assert connector.rpc("tools/list")["result"] == {"tools": _catalog_tools()}
