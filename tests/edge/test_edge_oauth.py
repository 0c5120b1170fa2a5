"""OAuth 2.1 on the Edge, against the real Worker under workerd (tests/support/edge_harness.py): the
metadata documents, the 401 challenge of /mcp, dynamic client registration and client ID metadata
documents, authorization code + PKCE S256 completed by the owner's approval (the control methods
the link carries), and the attack table: PKCE plain, a wrong redirect_uri, a token for another
resource, reuse of a rotated refresh token (the grant is revoked), a revoked grant at the next
call. The `mcp` SDK's own OAuth client is tested end to end, with the owner's approval by the
CLI, in tests/edge/test_edge_relay_e2e.py."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import pytest

from tests.support.connector_harness import Consent, open_consent_at, poll
from tests.support.edge_harness import (
    REDIRECT_URI,
    ClientDocument,
    Edge,
    client_document_server,
    pkce_pair,
    register_client,
    running_edge,
)
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def client_document(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClientDocument]:
    """A client ID metadata document on loopback https (the Edge trusts its CA)."""
    with client_document_server(tmp_path_factory.mktemp("client-document")) as document:
        yield document


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory, client_document: ClientDocument) -> Iterator[Edge]:
    # The Edge fetches no loopback document unless the test configuration names its origin
    # (src/outbound.ts; tests/edge/test_edge_doors.py refuses the rest).
    origin = client_document.client_id.rsplit("/", 1)[0]
    with running_edge(
        tmp_path_factory.mktemp("edge-oauth"),
        extra_vars={"EDGE_TEST_CIMD_ORIGINS": origin},
        trust_ca=client_document.ca_file,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def device(edge: Edge) -> dict[str, Any]:
    """The paired workstation that approves consents."""
    return edge.pair_device("owner-workstation")


@pytest.fixture
def clock(edge: Edge) -> Iterator[Edge]:
    """The registry clock back at real time after the test (the instance is shared)."""
    yield edge
    edge.shift_clock(0)


def authorize_url(edge: Edge, client_id: str, challenge: str, **overrides: str) -> str:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT_URI,
        "state": "state-123",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": f"{edge.base}/mcp",
    }
    params.update(overrides)
    return f"/authorize?{urlencode(params)}"


def open_consent(edge: Edge, client_id: str, challenge: str, **overrides: str) -> Consent:
    """GET /authorize as a browser: the consent page with its code, request id and poll token."""
    return open_consent_at(edge, authorize_url(edge, client_id, challenge, **overrides))


def token(edge: Edge, **form: str) -> httpx2.Response:
    return edge.post("/token", data=form)


def refresh_with(edge: Edge, refresh_token: str, client_id: str) -> httpx2.Response:
    return token(edge, grant_type="refresh_token", refresh_token=refresh_token, client_id=client_id)


@dataclass
class Tokens:
    client_id: str
    access: str
    refresh: str
    grant_id: str


def connect_connector(edge: Edge, device: dict[str, Any]) -> Tokens:
    """The whole flow: register, authorize with PKCE S256, approve on the workstation, poll, exchange."""
    client = register_client(edge)
    verifier, challenge = pkce_pair()
    consent = open_consent(edge, client["client_id"], challenge)
    assert poll(edge, consent)["status"] == "pending"
    pending = edge.control(device["device_id"], "consent.list")["result"]["pending"]
    listed = [entry for entry in pending if entry["request_id"] == consent.request_id]
    assert listed == [
        {
            "request_id": consent.request_id,
            "code": consent.code,
            "client_name": "Test Connector",
            "redirect_uri": REDIRECT_URI,
            "created_at": listed[0]["created_at"],
        }
    ]
    approved = edge.control(device["device_id"], "consent.approve", {"request_id": consent.request_id})
    result = approved["result"]
    assert result["request_id"] == consent.request_id
    assert result["code"] == consent.code
    assert result["client_name"] == "Test Connector"
    status = poll(edge, consent)
    assert status["status"] == "approved"
    redirect = urlsplit(status["redirect_to"])
    assert f"{redirect.scheme}://{redirect.netloc}{redirect.path}" == REDIRECT_URI
    query = parse_qs(redirect.query)
    assert query["state"] == ["state-123"]
    answer = token(
        edge,
        grant_type="authorization_code",
        code=query["code"][0],
        redirect_uri=REDIRECT_URI,
        client_id=client["client_id"],
        code_verifier=verifier,
        resource=f"{edge.base}/mcp",
    )
    assert answer.status_code == 200, answer.text
    issued = answer.json()
    assert issued["token_type"].lower() == "bearer"
    return Tokens(client["client_id"], issued["access_token"], issued["refresh_token"], result["grant_id"])


def call_mcp(edge: Edge, access_token: str) -> httpx2.Response:
    return edge.post(
        "/mcp",
        headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
    )


def test_authorization_server_metadata(edge: Edge) -> None:
    metadata = edge.get("/.well-known/oauth-authorization-server").json()
    assert metadata["issuer"] == edge.base
    assert metadata["authorization_endpoint"] == f"{edge.base}/authorize"
    assert metadata["token_endpoint"] == f"{edge.base}/token"
    assert metadata["registration_endpoint"] == f"{edge.base}/register"
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert set(metadata["grant_types_supported"]) >= {"authorization_code", "refresh_token"}
    assert "none" in metadata["token_endpoint_auth_methods_supported"]


def test_protected_resource_metadata_names_mcp(edge: Edge) -> None:
    metadata = edge.get("/.well-known/oauth-protected-resource/mcp").json()
    assert metadata["resource"] == f"{edge.base}/mcp"
    assert metadata["authorization_servers"] == [edge.base]


def test_mcp_without_a_token_is_401_pointing_at_the_resource_metadata(edge: Edge) -> None:
    answer = edge.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert answer.status_code == 401
    challenge = answer.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'resource_metadata="{edge.base}/.well-known/oauth-protected-resource/mcp"' in challenge
    assert call_mcp(edge, "u:g:not-a-token").status_code == 401


def test_dynamic_client_registration(edge: Edge) -> None:
    client = register_client(edge)
    assert client["client_id"]
    assert client["redirect_uris"] == [REDIRECT_URI]
    assert client["token_endpoint_auth_method"] == "none"
    assert "client_secret" not in client


def test_authorization_code_with_pkce_completed_on_the_workstation(
    edge: Edge, device: dict[str, Any]
) -> None:
    tokens = connect_connector(edge, device)
    assert grant_of(edge, device, tokens.grant_id)["last_used_at"] is None
    # The token opens /mcp (whatever the relay answers there, the OAuth check passed).
    assert call_mcp(edge, tokens.access).status_code != 401
    grant = wait_until(
        lambda: (listed := grant_of(edge, device, tokens.grant_id))["last_used_at"] and listed,
        "the call recorded as the grant's last use",
    )
    assert grant["client_name"] == "Test Connector"
    assert abs(grant["last_used_at"] - time.time()) < 120


def grant_of(edge: Edge, device: dict[str, Any], grant_id: str) -> dict[str, Any]:
    grants = edge.control(device["device_id"], "grant.list")["result"]["grants"]
    [grant] = [grant for grant in grants if grant["grant_id"] == grant_id]
    assert isinstance(grant, dict)
    return grant


def test_a_wrong_code_verifier_is_refused(edge: Edge, device: dict[str, Any]) -> None:
    client = register_client(edge)
    _, challenge = pkce_pair()
    consent = open_consent(edge, client["client_id"], challenge)
    edge.control(device["device_id"], "consent.approve", {"request_id": consent.request_id})
    code = parse_qs(urlsplit(poll(edge, consent)["redirect_to"]).query)["code"][0]
    answer = token(
        edge,
        grant_type="authorization_code",
        code=code,
        redirect_uri=REDIRECT_URI,
        client_id=client["client_id"],
        code_verifier=pkce_pair()[0],
    )
    assert answer.status_code == 400
    assert answer.json()["error"] == "invalid_grant"


def pending_ids(edge: Edge, device: dict[str, Any]) -> set[str]:
    pending = edge.control(device["device_id"], "consent.list")["result"]["pending"]
    return {entry["request_id"] for entry in pending}


def test_pkce_plain_is_refused(edge: Edge, device: dict[str, Any]) -> None:
    client = register_client(edge)
    verifier, _ = pkce_pair()
    before = pending_ids(edge, device)
    answer = edge.get(authorize_url(edge, client["client_id"], verifier, code_challenge_method="plain"))
    # The redirect URI is validated: the refusal goes back to the client, no consent is started.
    assert answer.status_code == 302
    location = urlsplit(answer.headers["location"])
    assert parse_qs(location.query)["error"] == ["invalid_request"]
    assert pending_ids(edge, device) == before


def test_an_authorization_without_pkce_is_refused(edge: Edge) -> None:
    client = register_client(edge)
    url = authorize_url(edge, client["client_id"], "x")
    url = re.sub(r"&code_challenge=[^&]*&code_challenge_method=S256", "", url)
    answer = edge.get(url)
    assert answer.status_code == 302
    assert parse_qs(urlsplit(answer.headers["location"]).query)["error"] == ["invalid_request"]


def test_a_wrong_redirect_uri_is_refused_without_redirecting(edge: Edge) -> None:
    client = register_client(edge)
    _, challenge = pkce_pair()
    answer = edge.get(
        authorize_url(edge, client["client_id"], challenge, redirect_uri="https://attacker.example/callback")
    )
    # Never a redirect to an unregistered URI: the error is shown on the Edge's own page.
    assert answer.status_code == 400
    assert "location" not in answer.headers
    assert answer.headers["x-error-code"] == "invalid_request"


def test_a_wrong_redirect_uri_at_the_token_endpoint_is_refused(edge: Edge, device: dict[str, Any]) -> None:
    client = register_client(edge)
    verifier, challenge = pkce_pair()
    consent = open_consent(edge, client["client_id"], challenge)
    edge.control(device["device_id"], "consent.approve", {"request_id": consent.request_id})
    code = parse_qs(urlsplit(poll(edge, consent)["redirect_to"]).query)["code"][0]
    answer = token(
        edge,
        grant_type="authorization_code",
        code=code,
        redirect_uri="http://127.0.0.1:9/elsewhere",
        client_id=client["client_id"],
        code_verifier=verifier,
    )
    assert answer.status_code == 400
    assert answer.json()["error"] == "invalid_grant"


def test_a_token_for_another_resource_is_refused(edge: Edge, device: dict[str, Any]) -> None:
    client = register_client(edge)
    _, challenge = pkce_pair()
    answer = edge.get(
        authorize_url(edge, client["client_id"], challenge, resource="https://other.example/mcp")
    )
    assert answer.status_code == 302
    assert parse_qs(urlsplit(answer.headers["location"]).query)["error"] == ["invalid_target"]
    tokens = connect_connector(edge, device)
    refreshed = token(
        edge,
        grant_type="refresh_token",
        refresh_token=tokens.refresh,
        client_id=tokens.client_id,
        resource="https://other.example/mcp",
    )
    assert refreshed.status_code == 400
    assert refreshed.json()["error"] == "invalid_target"
    # A refused refresh rotated nothing: the same refresh token still works once.
    again = token(edge, grant_type="refresh_token", refresh_token=tokens.refresh, client_id=tokens.client_id)
    assert again.status_code == 200, again.text


def test_refresh_rotates_and_reuse_of_a_rotated_token_revokes_the_grant(
    edge: Edge, device: dict[str, Any]
) -> None:
    tokens = connect_connector(edge, device)
    first = token(edge, grant_type="refresh_token", refresh_token=tokens.refresh, client_id=tokens.client_id)
    assert first.status_code == 200, first.text
    rotated = first.json()
    assert rotated["refresh_token"] != tokens.refresh
    assert call_mcp(edge, rotated["access_token"]).status_code != 401
    # The old refresh token again: it leaked, so the whole grant goes.
    reused = token(edge, grant_type="refresh_token", refresh_token=tokens.refresh, client_id=tokens.client_id)
    assert reused.status_code == 400
    assert reused.json()["error"] == "invalid_grant"
    after = token(
        edge, grant_type="refresh_token", refresh_token=rotated["refresh_token"], client_id=tokens.client_id
    )
    assert after.status_code == 400
    assert after.json()["error"] == "invalid_grant"
    assert call_mcp(edge, rotated["access_token"]).status_code == 401
    grants = edge.control(device["device_id"], "grant.list")["result"]["grants"]
    assert tokens.grant_id not in {grant["grant_id"] for grant in grants}


def test_two_parallel_uses_of_one_refresh_token_revoke_the_grant(edge: Edge, device: dict[str, Any]) -> None:
    """A refresh token works once even when both uses arrive together: the second is a reuse."""
    tokens = connect_connector(edge, device)

    def refresh(_: int) -> httpx2.Response:
        return refresh_with(edge, tokens.refresh, tokens.client_id)

    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(pool.map(refresh, range(2)))
    assert sorted(answer.status_code for answer in answers)[-1] == 400
    assert call_mcp(edge, tokens.access).status_code == 401
    for answer in answers:
        if answer.status_code == 200:
            issued = answer.json()
            assert call_mcp(edge, issued["access_token"]).status_code == 401
            assert refresh_with(edge, issued["refresh_token"], tokens.client_id).status_code == 400


def test_a_forged_refresh_token_does_not_revoke_the_grant(edge: Edge, device: dict[str, Any]) -> None:
    """Only a token the Edge issued counts as reused: one made up from a grant's public parts
    (`<user>:<grant>:` is in every token of the grant) is refused and revokes nothing."""
    tokens = connect_connector(edge, device)
    user, grant, _ = tokens.refresh.split(":")
    forged = token(
        edge, grant_type="refresh_token", refresh_token=f"{user}:{grant}:forged", client_id=tokens.client_id
    )
    assert forged.status_code == 400
    assert forged.json()["error"] == "invalid_grant"
    assert call_mcp(edge, tokens.access).status_code != 401
    real = token(edge, grant_type="refresh_token", refresh_token=tokens.refresh, client_id=tokens.client_id)
    assert real.status_code == 200, real.text


def test_a_revoked_grant_stops_working_at_the_next_call(edge: Edge, device: dict[str, Any]) -> None:
    tokens = connect_connector(edge, device)
    assert call_mcp(edge, tokens.access).status_code != 401
    revoked = edge.control(device["device_id"], "grant.revoke", {"grant_id": tokens.grant_id})
    assert revoked == {"result": {"grant_id": tokens.grant_id, "revoked": True}}
    assert call_mcp(edge, tokens.access).status_code == 401
    refreshed = token(
        edge, grant_type="refresh_token", refresh_token=tokens.refresh, client_id=tokens.client_id
    )
    assert refreshed.status_code == 400


def test_a_grant_belongs_to_the_device_that_approved_it(edge: Edge, device: dict[str, Any]) -> None:
    tokens = connect_connector(edge, device)
    stranger = edge.pair_device("another-workstation")
    assert edge.control(stranger["device_id"], "grant.list") == {"result": {"grants": []}}
    refused = edge.control(stranger["device_id"], "grant.revoke", {"grant_id": tokens.grant_id})
    assert refused["error"]["code"] == "grant_not_found"
    assert call_mcp(edge, tokens.access).status_code != 401


def test_a_denied_consent_sends_the_browser_back_with_access_denied(
    edge: Edge, device: dict[str, Any]
) -> None:
    client = register_client(edge)
    _, challenge = pkce_pair()
    consent = open_consent(edge, client["client_id"], challenge)
    assert edge.control(device["device_id"], "consent.deny", {"request_id": consent.request_id}) == {
        "result": {"request_id": consent.request_id}
    }
    status = poll(edge, consent)
    assert status["status"] == "denied"
    query = parse_qs(urlsplit(status["redirect_to"]).query)
    assert query["error"] == ["access_denied"]
    assert query["state"] == ["state-123"]
    assert consent.request_id not in pending_ids(edge, device)
    again = edge.control(device["device_id"], "consent.approve", {"request_id": consent.request_id})
    assert again["error"]["code"] == "consent_not_found"


def test_only_the_page_that_started_a_consent_may_poll_it(edge: Edge) -> None:
    client = register_client(edge)
    consent = open_consent(edge, client["client_id"], pkce_pair()[1])
    answer = edge.post("/authorize/status", json={"request_id": consent.request_id, "poll_token": "guess"})
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "consent_not_found"


def test_an_expired_consent_cannot_be_approved(clock: Edge, device: dict[str, Any]) -> None:
    client = register_client(clock)
    consent = open_consent(clock, client["client_id"], pkce_pair()[1])
    clock.shift_clock(601)
    answer = clock.control(device["device_id"], "consent.approve", {"request_id": consent.request_id})
    assert answer["error"]["code"] == "consent_expired"
    assert consent.request_id not in pending_ids(clock, device)
    status = clock.post(
        "/authorize/status", json={"request_id": consent.request_id, "poll_token": consent.poll_token}
    )
    assert status.status_code == 410
    assert status.json()["error"]["code"] == "consent_expired"


@pytest.mark.parametrize(
    ("method", "params", "code"),
    [
        ("consent.approve", {"request_id": "req_unknown"}, "consent_not_found"),
        ("consent.deny", {"request_id": "req_unknown"}, "consent_not_found"),
        ("consent.approve", {}, "invalid_argument"),
        ("grant.revoke", {"grant_id": "unknown"}, "grant_not_found"),
        ("grant.revoke", {}, "invalid_argument"),
        ("grant.drop", {}, "method_not_found"),
    ],
)
def test_control_method_errors_have_stable_codes(
    edge: Edge, device: dict[str, Any], method: str, params: dict[str, Any], code: str
) -> None:
    answer = edge.control(device["device_id"], method, params)
    assert answer["error"]["code"] == code
    assert answer["error"]["message"]


def test_test_routes_need_the_admin_secret(edge: Edge) -> None:
    answer = edge.post("/__test/control", json={"device_id": "x", "method": "consent.list", "params": {}})
    assert answer.status_code == 401


def test_client_id_metadata_documents_are_enabled(edge: Edge) -> None:
    metadata = edge.get("/.well-known/oauth-authorization-server").json()
    assert metadata["client_id_metadata_document_supported"] is True


def test_a_client_id_document_that_cannot_be_fetched_is_refused(
    edge: Edge, device: dict[str, Any], client_document: ClientDocument
) -> None:
    before = pending_ids(edge, device)
    # An https client_id is a metadata document URL; this one is on the allowed document server,
    # which answers 404 for it. (A host the Edge does not fetch at all is refused before any
    # fetch with invalid_client_metadata_url: tests/edge/test_edge_doors.py.)
    missing = client_document.client_id.rsplit("/", 1)[0] + "/missing.json"
    answer = edge.get(authorize_url(edge, missing, pkce_pair()[1]))
    assert answer.status_code == 400
    assert "location" not in answer.headers
    assert answer.headers["x-error-code"] == "invalid_client"
    assert pending_ids(edge, device) == before


def test_a_client_id_metadata_document_client_connects_without_registering(
    edge: Edge, device: dict[str, Any], client_document: ClientDocument
) -> None:
    verifier, challenge = pkce_pair()
    consent = open_consent(edge, client_document.client_id, challenge)
    pending = edge.control(device["device_id"], "consent.list")["result"]["pending"]
    # The document's domain is shown next to the name it claims.
    names = [entry["client_name"] for entry in pending if entry["request_id"] == consent.request_id]
    assert names == ["Document Client (127.0.0.1)"]
    edge.control(device["device_id"], "consent.approve", {"request_id": consent.request_id})
    code = parse_qs(urlsplit(poll(edge, consent)["redirect_to"]).query)["code"][0]
    answer = token(
        edge,
        grant_type="authorization_code",
        code=code,
        redirect_uri=REDIRECT_URI,
        client_id=client_document.client_id,
        code_verifier=verifier,
    )
    assert answer.status_code == 200, answer.text
    assert call_mcp(edge, answer.json()["access_token"]).status_code != 401


def test_a_token_is_refused_at_another_origin_of_the_same_edge(edge: Edge, device: dict[str, Any]) -> None:
    """Tokens are bound to `<origin>/mcp`: the same Worker reached under another host name is
    another resource, and a token minted for the first is refused there."""
    tokens = connect_connector(edge, device)
    port = urlsplit(edge.base).port
    answer = httpx2.post(
        f"{edge.base}/mcp",
        headers={
            "Host": f"localhost:{port}",
            "Authorization": f"Bearer {tokens.access}",
            "Accept": "application/json, text/event-stream",
        },
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        timeout=30,
    )
    assert answer.status_code == 401
    assert (
        f"http://localhost:{port}/.well-known/oauth-protected-resource/mcp"
        in answer.headers["www-authenticate"]
    )
    assert call_mcp(edge, tokens.access).status_code != 401
