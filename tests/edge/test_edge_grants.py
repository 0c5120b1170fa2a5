"""Connector grants listed and revoked from the Edge's registry, never from a KV list, against the
real Worker under workerd (tests/support/edge_harness.py; docs/edge-protocol.md, "Control methods").

In production a KV list lags writes and deletes by up to a minute: a grant made a moment ago can
be missing and a revoked one can still be listed. Local KV is consistent, so the tests make the
lag themselves through the test route `/__test/kv`: they delete a new grant's KV entry (a list
that misses it) or write a revoked one back (a list that still shows it). Grants made by an Edge
from before the registry recorded grants are made with `/__test/legacy-grant`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import pytest

from tests.support.edge_harness import REDIRECT_URI, Edge, pkce_pair, register_client, running_edge

pytestmark = pytest.mark.slow

#: src/registry.ts: an approved grant lives 10 minutes until its code is exchanged.
CODE_TTL_S = 600
#: src/oauth.ts: thirty days without a refresh end a grant.
REFRESH_IDLE_TTL_S = 30 * 24 * 3600
#: src/registry.ts: a KV list read this long after the registry began recording grants holds
#: every grant made before.
LEGACY_LAG_S = 120


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    with running_edge(tmp_path_factory.mktemp("edge-grants")) as running:
        yield running


@pytest.fixture(scope="module")
def device(edge: Edge) -> dict[str, Any]:
    return edge.pair_device("grants-workstation")


@pytest.fixture
def clock(edge: Edge) -> Iterator[Edge]:
    """The registry clock back at real time after the test (the instance is shared)."""
    yield edge
    edge.shift_clock(0)


@dataclass
class Approved:
    """A consent the owner approved: its grant, and what the client needs to exchange the code."""

    client_id: str
    grant_id: str
    verifier: str
    request_id: str
    poll_token: str


def approve(edge: Edge, device: dict[str, Any], client_id: str | None = None) -> Approved:
    """Open the consent page for `client_id` (a new client when None) and approve it."""
    client_id = client_id or register_client(edge)["client_id"]
    verifier, challenge = pkce_pair()
    query = urlencode(
        {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT_URI,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "resource": f"{edge.base}/mcp",
            "state": "grants",
        }
    )
    page = edge.get(f"/authorize?{query}")
    assert page.status_code == 200, page.text
    boot = re.search(r"const boot = (\{.*?\});", page.text)
    assert boot is not None, page.text
    fields = json.loads(boot.group(1))
    approved = edge.control(device["device_id"], "consent.approve", {"request_id": fields["request_id"]})
    grant_id = approved["result"]["grant_id"]
    return Approved(client_id, grant_id, verifier, fields["request_id"], fields["poll_token"])


def exchange(edge: Edge, approved: Approved) -> str:
    """The page's poll, then the code for tokens; the access token."""
    answer = exchange_code(edge, approved)
    assert answer.status_code == 200, answer.text
    token: str = answer.json()["access_token"]
    return token


def exchange_code(edge: Edge, approved: Approved) -> httpx2.Response:
    """The page's poll, then the token endpoint's answer to the code."""
    status = edge.post(
        "/authorize/status", json={"request_id": approved.request_id, "poll_token": approved.poll_token}
    ).json()
    code = parse_qs(urlsplit(status["redirect_to"]).query)["code"][0]
    answer = edge.post(
        "/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT_URI,
            "client_id": approved.client_id,
            "code_verifier": approved.verifier,
            "resource": f"{edge.base}/mcp",
        },
    )
    return answer


def call_tool(edge: Edge, token: str, tool: str) -> httpx2.Response:
    return edge.post(
        "/mcp",
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": {}}},
    )


def mcp_status(edge: Edge, token: str) -> int:
    """The status of a ping on /mcp with `token` (401: the token does not work)."""
    answer = edge.post(
        "/mcp",
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
    )
    return answer.status_code


def grants(edge: Edge, device: dict[str, Any]) -> dict[str, dict[str, Any]]:
    listed = edge.control(device["device_id"], "grant.list")["result"]["grants"]
    return {grant["grant_id"]: grant for grant in listed}


def kv(edge: Edge, op: str, key: str, value: str | None = None) -> str | None:
    """The library's KV entry `key` after `op` (get, put, delete) through the test route."""
    answer = edge.post(
        "/__test/kv", headers=edge.admin_headers(), json={"op": op, "key": key, "value": value}
    )
    assert answer.status_code == 200, answer.text
    stored: str | None = answer.json()["value"]
    return stored


def kv_entries(edge: Edge, prefix: str) -> dict[str, str]:
    """Every KV entry under `prefix`, with its value."""
    answer = edge.post("/__test/kv", headers=edge.admin_headers(), json={"op": "list", "key": prefix})
    assert answer.status_code == 200, answer.text
    entries = {key: kv(edge, "get", key) for key in answer.json()["keys"]}
    return {key: value for key, value in entries.items() if value is not None}


def grant_key(device: dict[str, Any], grant_id: str) -> str:
    """Where the OAuth library keeps a grant in KV (`grant:<user id>:<grant id>`)."""
    return f"grant:{device['device_id']}:{grant_id}"


def test_an_approved_grant_is_listed_at_once_with_its_client_and_scope(
    edge: Edge, device: dict[str, Any]
) -> None:
    approved = approve(edge, device)
    grant = grants(edge, device)[approved.grant_id]
    assert grant["client_id"] == approved.client_id
    assert grant["client_name"] == "Test Connector"
    assert grant["scope"] == []
    assert isinstance(grant["created_at"], int) and grant["last_used_at"] is None


def test_a_grant_a_lagging_kv_list_misses_is_listed_and_works(edge: Edge, device: dict[str, Any]) -> None:
    approved = approve(edge, device)
    key = grant_key(device, approved.grant_id)
    stored = kv(edge, "get", key)
    assert stored is not None
    # A KV list a moment after the approval may not show the grant yet.
    assert kv(edge, "delete", key) is None
    assert approved.grant_id in grants(edge, device)
    kv(edge, "put", key, stored)
    assert mcp_status(edge, exchange(edge, approved)) == 200


def test_a_revoked_grant_stays_gone_while_a_lagging_kv_list_still_shows_it(
    edge: Edge, device: dict[str, Any]
) -> None:
    approved = approve(edge, device)
    token = exchange(edge, approved)
    key = grant_key(device, approved.grant_id)
    stored = kv(edge, "get", key)
    assert stored is not None
    revoked = edge.control(device["device_id"], "grant.revoke", {"grant_id": approved.grant_id})
    assert revoked == {"result": {"grant_id": approved.grant_id, "revoked": True}}
    assert mcp_status(edge, token) == 401
    # A KV list a moment after the revoke may still show the grant.
    kv(edge, "put", key, stored)
    assert approved.grant_id not in grants(edge, device)
    again = edge.control(device["device_id"], "grant.revoke", {"grant_id": approved.grant_id})
    assert again["error"]["code"] == "grant_not_found"
    assert mcp_status(edge, token) == 401


def test_reauthorizing_a_client_replaces_its_older_grant(edge: Edge, device: dict[str, Any]) -> None:
    first = approve(edge, device)
    first_token = exchange(edge, first)
    second = approve(edge, device, client_id=first.client_id)
    listed = grants(edge, device)
    assert second.grant_id in listed and first.grant_id not in listed
    assert mcp_status(edge, first_token) == 401
    assert mcp_status(edge, exchange(edge, second)) == 200


def test_a_grant_whose_code_is_never_exchanged_leaves_the_list_with_the_code(
    clock: Edge, device: dict[str, Any]
) -> None:
    unexchanged = approve(clock, device)
    exchanged = approve(clock, device)
    exchange(clock, exchanged)
    clock.shift_clock(CODE_TTL_S + 1)
    listed = grants(clock, device)
    assert unexchanged.grant_id not in listed
    assert exchanged.grant_id in listed
    clock.shift_clock(REFRESH_IDLE_TTL_S + 1)
    assert exchanged.grant_id not in grants(clock, device)


def test_a_grant_made_before_records_existed_is_listed_revocable_and_then_kv_is_read_no_more(
    clock: Edge, device: dict[str, Any]
) -> None:
    """A redeploy over an Edge whose grants live only in KV: each grant.list reads the KV list
    until one was read LEGACY_LAG_S after recording began; revoking one works as for any other."""
    legacy = approve(clock, device)
    token = exchange(clock, legacy)
    kept = approve(clock, device)
    exchange(clock, kept)
    for grant in (legacy, kept):
        answer = clock.post(
            "/__test/legacy-grant", headers=clock.admin_headers(), json={"grant_id": grant.grant_id}
        )
        assert answer.status_code == 200, answer.text
    listed = grants(clock, device)
    assert {legacy.grant_id, kept.grant_id} <= set(listed)
    assert listed[legacy.grant_id]["client_name"] == "Test Connector"
    assert mcp_status(clock, token) == 200
    assert clock.control(device["device_id"], "grant.revoke", {"grant_id": legacy.grant_id})["result"][
        "revoked"
    ]
    assert legacy.grant_id not in grants(clock, device)
    assert mcp_status(clock, token) == 401
    # Past the lag, one more list ends the fallback: a grant only KV has is not listed any more.
    clock.shift_clock(LEGACY_LAG_S + 1)
    assert kept.grant_id in grants(clock, device)
    stored = kv(clock, "get", grant_key(device, kept.grant_id))
    assert stored is not None
    ghost = {**json.loads(stored), "id": "ghostgrant000000"}
    kv(clock, "put", grant_key(device, ghost["id"]), json.dumps(ghost))
    assert set(grants(clock, device)) >= {kept.grant_id}
    assert ghost["id"] not in grants(clock, device)


def test_a_revoked_grants_tokens_are_refused_while_a_lagging_kv_read_still_shows_them(
    edge: Edge, device: dict[str, Any]
) -> None:
    """Elsewhere a KV read may show a deleted grant and its tokens for a minute: the Edge refuses
    them from its own records at once (the relay for access tokens, the registry at /token)."""
    approved = approve(edge, device)
    issued = exchange_code(edge, approved).json()
    access, refresh = issued["access_token"], issued["refresh_token"]
    assert call_tool(edge, access, "herdr_devices").status_code == 200
    saved = kv_entries(edge, f"grant:{device['device_id']}:{approved.grant_id}")
    saved |= kv_entries(edge, f"token:{device['device_id']}:{approved.grant_id}:")
    assert len(saved) >= 2
    edge.control(device["device_id"], "grant.revoke", {"grant_id": approved.grant_id})
    for key, value in saved.items():
        kv(edge, "put", key, value)
    for tool in ("herdr_devices", "herdr_inspect"):
        refused = call_tool(edge, access, tool)
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"] == "invalid_token"
        assert 'error="invalid_token"' in refused.headers["www-authenticate"]
    refreshed = edge.post(
        "/token",
        data={"grant_type": "refresh_token", "refresh_token": refresh, "client_id": approved.client_id},
    )
    assert refreshed.status_code == 400
    assert refreshed.json()["error"] == "invalid_grant"
    assert approved.grant_id not in grants(edge, device)


def test_the_code_of_a_grant_revoked_before_the_exchange_is_refused_even_if_kv_still_shows_it(
    edge: Edge, device: dict[str, Any]
) -> None:
    approved = approve(edge, device)
    key = grant_key(device, approved.grant_id)
    stored = kv(edge, "get", key)
    assert stored is not None
    edge.control(device["device_id"], "grant.revoke", {"grant_id": approved.grant_id})
    kv(edge, "put", key, stored)
    answer = exchange_code(edge, approved)
    assert answer.status_code == 400
    assert answer.json()["error"] == "invalid_grant"


def test_a_grant_revoked_for_a_replayed_code_leaves_the_list_even_while_kv_lags(
    edge: Edge, device: dict[str, Any]
) -> None:
    """A code presented a second time revokes its grant (OAuth 2.1 section 4.1.3; the library does
    it in its KV): the registry revokes it everywhere, so grant.list stops showing it at once,
    also while a lagging KV read still shows the library's grant."""
    approved = approve(edge, device)
    first = exchange_code(edge, approved)
    assert first.status_code == 200, first.text
    access = first.json()["access_token"]
    assert approved.grant_id in grants(edge, device)
    saved = kv_entries(edge, grant_key(device, approved.grant_id))
    replayed = exchange_code(edge, approved)
    assert replayed.status_code == 400, replayed.text
    assert replayed.json()["error"] == "invalid_grant"
    assert "already used" in replayed.json()["error_description"]
    for key, value in saved.items():
        kv(edge, "put", key, value)
    assert approved.grant_id not in grants(edge, device)
    assert mcp_status(edge, access) == 401


def test_a_grant_whose_refresh_token_the_client_revoked_leaves_the_list(
    edge: Edge, device: dict[str, Any]
) -> None:
    """RFC 7009 revocation of a refresh token (the library serves it at /token) revokes the grant
    in the library's KV; the registry follows, so grant.list stops showing it."""
    approved = approve(edge, device)
    issued = exchange_code(edge, approved).json()
    assert approved.grant_id in grants(edge, device)
    answer = edge.post(
        "/token",
        data={
            "token": issued["refresh_token"],
            "token_type_hint": "refresh_token",
            "client_id": approved.client_id,
        },
    )
    assert answer.status_code == 200, answer.text
    assert approved.grant_id not in grants(edge, device)
    assert mcp_status(edge, issued["access_token"]) == 401


def test_a_failed_code_exchange_leaves_the_code_usable_once(edge: Edge, device: dict[str, Any]) -> None:
    """The registry claims a code before the library runs; a refused exchange (a wrong PKCE
    verifier) releases it, so the right one still works, and only once."""
    approved = approve(edge, device)
    right = approved.verifier
    approved.verifier = pkce_pair()[0]
    wrong = exchange_code(edge, approved)
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant", wrong.text
    approved.verifier = right
    assert exchange_code(edge, approved).status_code == 200
    assert approved.grant_id in grants(edge, device)
