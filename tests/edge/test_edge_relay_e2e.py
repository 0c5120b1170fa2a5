"""End to end on loopback, issue 11's first acceptance item in one session: a connector of the
`mcp` SDK (its own OAuth client) -> /mcp on the real Worker (workerd, `wrangler dev --local`) ->
the device's Durable Object -> `herdr-mcp link` (a subprocess, paired with `herdr-mcp link pair`)
-> two real runtimes A and B on a simulated Herdr. The owner approves the connector with
`herdr-mcp connector approve` and switches generations with `herdr-mcp generation activate`, each
its own process. Which generation ran a command shows in its output, and every command appends to
a file of its own, so a call that ran twice would show (tests/support/workstation_harness.py).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
import secrets
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from herdr_mcp import __version__
from herdr_mcp.contract import contract_identity
from tests.support.connector_harness import Consent, SdkOAuth
from tests.support.edge_harness import REDIRECT_URI, Edge, running_edge
from tests.support.edge_relay_harness import (
    WAIT_S,
    Connector,
    PairedLink,
    approve_with_cli,
    edge_status,
    paired_link,
)
from tests.support.sim_helpers import short_tmp_dir
from tests.support.waiting import poll_until, wait_until
from tests.support.workstation_harness import Generations, ab_generations, cli_json, cli_text, marked_command

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: The link takes its heartbeat interval from hello_ack: short here, so an A/B switch shows soon.
HEARTBEAT_S = 1
#: The whole SDK session (OAuth round, calls, the activation) on a loaded 2-core machine.
SESSION_S = 420.0
#: What the runtimes' runtime identity is, but for the generation (docs/edge-protocol.md).
CONTRACT = contract_identity(5).to_dict()


@dataclass
class World:
    edge: Edge
    paired: PairedLink
    generations: Generations


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with (
        short_tmp_dir() as tmp,
        running_edge(tmp / "edge", {"RELAY_HEARTBEAT_S": str(HEARTBEAT_S)}) as edge,
        ab_generations(tmp) as generations,
        paired_link(edge, generations, "e2e") as paired,
    ):
        yield World(edge, paired, generations)


@pytest.fixture
def connector(world: World) -> Connector:
    """A connector whose token came from requests this harness made (the owner's approval is
    still `herdr-mcp connector approve`)."""
    return approve_with_cli(world.edge, world.paired)


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


class OwnerAtTheWorkstation:
    """The owner's part of the consent: `herdr-mcp connector list` shows the waiting request with
    its code, `herdr-mcp connector approve <request-id> --code <the page's code>` approves it; both
    real processes talking to the running link. Keeps what the CLI printed."""

    def __init__(self, paired: PairedLink) -> None:
        self.paired = paired
        self.listed = ""
        self.approved = ""

    def __call__(self, consent: Consent) -> None:
        self.listed = cli_text("connector", "list", *self.paired.where)
        self.approved = cli_text(
            "connector", "approve", consent.request_id, "--code", consent.code, *self.paired.where
        )

    def grant_id(self) -> str:
        found = re.search(r"^approved: (\S+)  SDK Connector  (\S+)$", self.approved, re.MULTILINE)
        assert found, self.approved
        return found.group(2)


def _s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def _structured(result: Any) -> dict[str, Any]:
    """A CallToolResult's structured content; the call must have succeeded."""
    assert not result.is_error, result
    structured: dict[str, Any] = result.structured_content
    return structured


def _mine(devices: Any, device_id: str) -> dict[str, Any]:
    (entry,) = [item for item in _structured(devices)["devices"] if item["device_id"] == device_id]
    mine: dict[str, Any] = entry
    return mine


def _oauth_round_as_a_connector_runs_it(world: World, oauth: SdkOAuth, owner: OwnerAtTheWorkstation) -> int:
    """What the SDK's client did before it first sent a bearer: a 401 from /mcp pointing at the
    protected resource metadata, the RFC 9728 and RFC 8414 documents, registration, the code
    exchange with the PKCE verifier of the S256 challenge it sent; the owner saw and approved the
    page's code. Returns how many exchanges the round took."""
    base = world.edge.base
    round_length = next(n for n, exchange in enumerate(oauth.exchanges) if exchange.bearer is not None)
    steps = [(exchange.method, exchange.path, exchange.status) for exchange in oauth.exchanges]
    assert steps[:round_length] == [
        ("POST", "/mcp", 401),
        ("GET", "/.well-known/oauth-protected-resource/mcp", 200),
        ("GET", "/.well-known/oauth-authorization-server", 200),
        ("POST", "/register", 201),
        ("POST", "/token", 200),
    ], oauth.exchanges
    challenge = oauth.exchanges[0].www_authenticate or ""
    assert f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"' in challenge, challenge

    # One trip to the consent page, one approval, one redirect back: authorization code + S256.
    assert oauth.storage.client_info is not None and oauth.storage.tokens is not None
    client_id = oauth.storage.client_info.client_id
    (url,) = oauth.authorization_urls
    query = {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}
    assert (query["response_type"], query["client_id"], query["redirect_uri"]) == (
        "code",
        client_id,
        REDIRECT_URI,
    )
    assert (query["code_challenge_method"], query["resource"]) == ("S256", f"{base}/mcp")
    token_form = oauth.exchanges[round_length - 1].form
    assert token_form["grant_type"] == "authorization_code" and token_form["client_id"] == client_id
    assert _s256(token_form["code_verifier"]) == query["code_challenge"]
    (redirect,) = oauth.redirects
    assert parse_qs(urlsplit(redirect).query)["code"] == [token_form["code"]]
    assert oauth.storage.tokens.access_token and oauth.storage.tokens.refresh_token

    # The code on the page is the code the CLI showed the owner, for that request.
    (consent,) = oauth.consents
    assert f"{consent.request_id}  {consent.code}  SDK Connector  {REDIRECT_URI}" in owner.listed, (
        owner.listed
    )
    assert f"approved: {consent.request_id}  SDK Connector  " in owner.approved, owner.approved
    assert f"  code {consent.code}, as the consent page shows and you gave" in owner.approved
    return round_length


def test_an_sdk_connector_approved_on_the_workstation_calls_across_an_activation(world: World) -> None:
    """Issue 11, first acceptance item: the SDK's OAuth client connects (the owner approves with
    `herdr-mcp connector approve`), herdr_inspect and herdr_fs_read go through Edge -> DO -> link ->
    runtime A, herdr_devices is answered by the Edge; `herdr-mcp generation activate B` during the
    same SDK session: the next call runs on B and herdr_devices shows B, over the same WSS
    connection, with the same token and client registration (no new OAuth round)."""
    edge, paired, counters = world.edge, world.paired, world.generations.counters
    device_id = paired.device_id
    secret = secrets.token_hex(16)
    note = world.generations.tmp / "repo" / "notes" / f"e2e-{secret[:8]}.txt"
    note.parent.mkdir()
    note.write_text(f"written by the test: {secret}\nsecond line\n")
    owner = OwnerAtTheWorkstation(paired)
    oauth = SdkOAuth(edge, owner)

    async def session() -> None:
        async with (
            oauth.http() as http,
            Client(streamable_http_client(f"{edge.base}/mcp", http_client=http)) as client,
        ):
            round_length = _oauth_round_as_a_connector_runs_it(world, oauth, owner)
            assert oauth.storage.tokens is not None and oauth.storage.client_info is not None
            token, client_id = oauth.storage.tokens.access_token, oauth.storage.client_info.client_id
            (grant,) = (await asyncio.to_thread(cli_json, "connector", "grants", *paired.where))["grants"]
            assert (grant["grant_id"], grant["client_name"]) == (owner.grant_id(), "SDK Connector")

            inspect = _structured(await client.call_tool("herdr_inspect", {}))
            assert inspect["herdr"]["reachable"] is True, inspect
            assert [workspace["workspace_id"] for workspace in inspect["workspaces"]] == ["w1"], inspect
            read = _structured(await client.call_tool("herdr_fs_read", {"path": str(note)}))
            assert read["content"] == note.read_text() and secret in read["content"], read
            first = _structured(await client.call_tool(*_exec(marked_command(counters, "r1"))))
            assert first["stdout"] == "A\n", first
            mine = _mine(await client.call_tool("herdr_devices", {}), device_id)
            assert mine["online"] is True and mine["contract_compatible"] is True, mine
            assert mine["runtime"] == {"generation": "A", "version": __version__, "contract": CONTRACT}
            link_before = (await asyncio.to_thread(paired.status))["edge"]
            assert (link_before["state"], link_before["reconnects"]) == ("connected", 0), link_before
            assert link_before["connection_id"], link_before
            edge_before = edge_status(edge, device_id)
            assert edge_before["connected_at"], edge_before

            # The A/B switch as the owner makes it, its own process, while this session is open.
            activated = await asyncio.to_thread(
                cli_json, "generation", "--state-dir", str(world.generations.store.state_dir), "activate", "B"
            )
            assert activated["outcome"] == "activated", activated

            async def shows_b() -> dict[str, Any] | None:
                entry = _mine(await client.call_tool("herdr_devices", {}), device_id)
                return entry if entry["runtime"]["generation"] == "B" else None

            mine = await poll_until(shows_b, "B in herdr_devices (the link's next heartbeat)", WAIT_S)
            assert mine["runtime"] == {"generation": "B", "version": __version__, "contract": CONTRACT}
            assert mine["online"] is True and mine["connected_at"] == edge_before["connected_at"], mine
            # The next call through the relay after the activation: B ran it, once.
            second = _structured(await client.call_tool(*_exec(marked_command(counters, "r2"))))
            assert second["stdout"] == "B\n", second
            assert [(counters / name).read_text() for name in ("r1", "r2")] == ["A\n", "B\n"]

            # No WSS reconnect: the link's connection and the Edge's view of it are the same.
            link_after = await asyncio.to_thread(paired.status)
            assert link_after["active"] == "B"
            assert link_after["edge"]["connection_id"] == link_before["connection_id"], link_after
            assert (link_after["edge"]["state"], link_after["edge"]["reconnects"]) == ("connected", 0)
            assert edge_status(edge, device_id)["connected_at"] == edge_before["connected_at"]
            # No change to the connector: the same grant, client and token; no OAuth step since.
            assert (await asyncio.to_thread(cli_json, "connector", "grants", *paired.where))["grants"] == [
                grant
            ]
            assert oauth.storage.client_info.client_id == client_id
            assert oauth.storage.tokens.access_token == token
            assert len(oauth.authorization_urls) == len(oauth.redirects) == 1
            since = oauth.exchanges[round_length:]
            assert len([exchange for exchange in since if exchange.method == "POST"]) >= 8, since
            assert {(exchange.path, exchange.bearer) for exchange in since} == {("/mcp", token)}, since
            assert not [exchange for exchange in since if exchange.status in (401, 403)], since

    asyncio.run(asyncio.wait_for(session(), SESSION_S))


def test_the_link_killed_mid_call_is_delivery_unknown_and_the_command_ran_once(
    world: World, connector: Connector
) -> None:
    """Last in this module: it kills the link."""
    counters = world.generations.counters
    with ThreadPoolExecutor(max_workers=1) as pool:
        answer = pool.submit(_sdk_calls, connector, [_exec(f"echo started >> {counters}/die; sleep 60")])
        wait_until(lambda: (counters / "die").exists(), "the command to start")
        os.kill(world.paired.link.process.pid, signal.SIGKILL)
        (result,) = answer.result(timeout=WAIT_S * 2)
    error = result["structuredContent"]["error"]
    assert result["isError"] is True
    assert (error["code"], error["delivery_state"], error["retryable"]) == (
        "link_lost",
        "delivery_unknown",
        False,
    )
    assert (counters / "die").read_text() == "started\n"
    wait_until(
        lambda: not edge_status(world.edge, world.paired.device_id)["online"], "the device to show offline"
    )
