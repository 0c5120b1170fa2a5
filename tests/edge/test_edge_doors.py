"""The Edge's doors that were open (issue 21, item 5), against the real Worker under workerd
(tests/support/edge_harness.py):

- a client_id naming a client metadata document on a loopback, private, link-local, unique-local,
  CGNAT, unspecified, metadata or special-use host, in any spelling, is refused with
  `invalid_client_metadata_url` before anything is fetched (src/outbound.ts); so is a redirect
  to such a host. The proof of "nothing fetched": a recorder listening on loopback (IPv4 and
  IPv6, one port) counts every TCP connection, and the spellings that would reach loopback
  point at it; the rows that cannot reach it here (10.0.0.1, 169.254.169.254, ...) are answered
  by the same check before the library runs (its answer for a document it could not fetch is
  `invalid_client`, never this code). `pytest -s` prints the table;
- requests that made the Worker throw (a malformed percent-encoding in /status) answer 400 with a
  stable code, and a set of odd inputs on every route answers below 500;
- /status/<device> answers only that device's own credential or the ADMIN_SECRET.

The positive document tests (test_edge_oauth.py) name their loopback document server's origin in
EDGE_TEST_CIMD_ORIGINS, a test-only variable (honoured with EDGE_TEST_ROUTES=1; never in
wrangler.jsonc, tests/edge/test_edge_deploy.py).
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import re
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import trustme

from tests.support.edge_harness import REDIRECT_URI, Edge, pkce_pair, running_edge
from tests.support.edge_relay_harness import device_headers

REFUSED = "invalid_client_metadata_url"


@dataclass
class Recorder:
    """TCP listeners on 127.0.0.1 and [::1] (one port) that count every connection made to them."""

    port: int
    hits: list[str] = field(default_factory=list)


@contextlib.contextmanager
def recorder() -> Iterator[Recorder]:
    v4 = socket.create_server(("127.0.0.1", 0))
    port = v4.getsockname()[1]
    listeners = [v4]
    with contextlib.suppress(OSError):  # a machine without IPv6 loopback: the IPv4 listener still counts
        listeners.append(socket.create_server(("::1", port), family=socket.AF_INET6))
    record = Recorder(port)

    def accept(listener: socket.socket) -> None:
        while True:
            try:
                connection, peer = listener.accept()
            except OSError:
                return
            record.hits.append(str(peer))
            connection.close()

    threads = [threading.Thread(target=accept, args=(listener,), daemon=True) for listener in listeners]
    for thread in threads:
        thread.start()
    try:
        yield record
    finally:
        for listener in listeners:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for thread in threads:
            thread.join(timeout=10)


@dataclass
class DocumentSite:
    """An https server on loopback (its CA the only one the Edge trusts) with client metadata
    documents: /client.json, /self.json (redirects to a document on the same origin),
    /private.json (redirects to the recorder) and /switch.json (a document until `turned` is set,
    then a redirect to the recorder)."""

    origin: str
    ca_file: Path
    turned: threading.Event


@contextlib.contextmanager
def document_site(directory: Path, recorder_port: int) -> Iterator[DocumentSite]:
    ca = trustme.CA()
    ca_file = directory / "doors-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    origin: list[str] = []
    turned = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            redirects = {
                "/self.json": "/self-target.json",
                "/private.json": f"https://127.0.0.1:{recorder_port}/client.json",
            }
            documents = {
                "/client.json": "/client.json",
                "/self-target.json": "/self.json",
                "/switch.json": "/switch.json",
            }
            if turned.is_set():
                redirects["/switch.json"] = redirects["/private.json"]
            if self.path in redirects:
                self.send_response(302)
                self.send_header("Location", redirects[self.path])
                self.send_header("Content-Length", "0")
                self.send_header("Connection", "close")
                self.end_headers()
                return
            named = documents.get(self.path)
            body = json.dumps(
                {
                    "client_id": f"{origin[0]}{named}",
                    "client_name": f"Doors {named}",
                    "redirect_uris": [REDIRECT_URI],
                    "token_endpoint_auth_method": "none",
                    "grant_types": ["authorization_code", "refresh_token"],
                    "response_types": ["code"],
                }
            ).encode()
            self.send_response(200 if named else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")  # workerd drops an HTTP/1.0 answer without it
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the tests read answers."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    origin.append(f"https://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield DocumentSite(origin[0], ca_file, turned)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def hits() -> Iterator[Recorder]:
    with recorder() as record:
        yield record


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, hits: Recorder) -> Iterator[DocumentSite]:
    with document_site(tmp_path_factory.mktemp("doors-site"), hits.port) as served:
        yield served


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory, site: DocumentSite) -> Iterator[Edge]:
    with running_edge(
        tmp_path_factory.mktemp("edge-doors"),
        extra_vars={"EDGE_TEST_CIMD_ORIGINS": site.origin},
        trust_ca=site.ca_file,
    ) as running:
        yield running


def authorize(edge: Edge, client_id: str) -> tuple[int, str, str]:
    """GET /authorize for `client_id`: the status, the page's error code and its message."""
    _verifier, challenge = pkce_pair()
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT_URI,
        "state": "doors",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": f"{edge.base}/mcp",
    }
    page = edge.get(f"/authorize?{urlencode(query)}")
    message = re.search(r"</code>: (.*?)</p>", page.text)
    return (
        page.status_code,
        page.headers.get("x-error-code", ""),
        unescape(message.group(1)) if message else "",
    )


def spellings(port: int) -> list[tuple[str, str]]:
    """(what it is, client_id): every spelling that would reach the recorder points at its port."""
    at = f":{port}/client.json"
    return [
        ("loopback", f"https://127.0.0.1{at}"),
        ("loopback, decimal", f"https://2130706433{at}"),
        ("loopback, hex", f"https://0x7f000001{at}"),
        ("loopback, octal", f"https://0177.0.0.1{at}"),
        ("loopback, shortened", f"https://127.1{at}"),
        ("loopback, hex and short", f"https://0x7f.1{at}"),
        ("loopback, trailing dot", f"https://127.0.0.1.{at}"),
        ("loopback, percent-encoded", f"https://%31%32%37.0.0.1{at}"),
        ("loopback, full-width digits", f"https://\uff11\uff12\uff17.\uff10.\uff10.\uff11{at}"),
        ("loopback, userinfo", f"https://evil.example@127.0.0.1{at}"),
        ("loopback, backslash", f"https://127.0.0.1\\@evil.example{at}"),
        ("loopback, http", f"http://127.0.0.1{at}"),
        ("unspecified", f"https://0.0.0.0{at}"),
        ("unspecified, zero", f"https://0{at}"),
        ("localhost", f"https://localhost{at}"),
        ("localhost, uppercase", f"https://LOCALHOST{at}"),
        ("localhost, trailing dot", f"https://localhost.{at}"),
        ("*.localhost", f"https://cimd.localhost{at}"),
        ("IPv6 loopback", f"https://[::1]{at}"),
        ("IPv6 loopback, long", f"https://[0:0:0:0:0:0:0:1]{at}"),
        ("IPv6 unspecified", f"https://[::]{at}"),
        ("IPv4-mapped loopback", f"https://[::ffff:127.0.0.1]{at}"),
        ("IPv4-compatible loopback", f"https://[::127.0.0.1]{at}"),
        ("NAT64 loopback", f"https://[64:ff9b::127.0.0.1]{at}"),
        ("IPv6 zone id", f"https://[fe80::1%25lo]{at}"),
        ("private 10/8", "https://10.0.0.1/client.json"),
        ("private 172.16/12", "https://172.16.0.1/client.json"),
        ("private 192.168/16", "https://192.168.1.1/client.json"),
        ("CGNAT 100.64/10", "https://100.64.0.1/client.json"),
        ("link-local metadata", "https://169.254.169.254/latest/meta-data/"),
        ("link-local metadata, decimal", "https://2852039166/latest/meta-data/"),
        ("IPv4-mapped metadata", "https://[::ffff:169.254.169.254]/latest/meta-data/"),
        ("NAT64 private", "https://[64:ff9b::10.0.0.1]/client.json"),
        ("IPv6 link-local", "https://[fe80::1]/client.json"),
        ("IPv6 unique-local", "https://[fc00::1]/client.json"),
        ("AWS metadata IPv6", "https://[fd00:ec2::254]/latest/meta-data/"),
        ("GCP metadata", "https://metadata.google.internal/computeMetadata/v1/"),
        ("GCP metadata, trailing dot", "https://metadata.google.internal./computeMetadata/v1/"),
        ("metadata, short name", "https://metadata/computeMetadata/v1/"),
        ("*.internal", "https://cimd.corp.internal/client.json"),
        ("*.local", "https://printer.local/client.json"),
    ]


def test_every_spelling_of_a_private_host_is_refused_before_any_fetch(edge: Edge, hits: Recorder) -> None:
    rows = []
    for what, client_id in spellings(hits.port):
        status, code, message = authorize(edge, client_id)
        rows.append((what, client_id, status, code, len(hits.hits), message))
    print(f"\nclient metadata document URLs refused at GET /authorize (recorder: loopback port {hits.port})")
    print(f"{'what':30} {'client_id':60} {'answer':34} hits  why")
    for what, client_id, status, code, count, message in rows:
        reason = message.split("does not fetch: ", 1)[-1]
        print(f"{what:30} {client_id:60} {f'{status} {code}':34} {count:<5} {reason}")
    for what, client_id, status, code, count, message in rows:
        assert (status, code) == (400, REFUSED), (what, client_id, status, code, message)
        assert "Nothing was fetched" in message
        assert count == 0, (what, hits.hits)


def test_a_document_on_an_allowed_origin_is_fetched_and_a_redirect_to_a_private_host_is_not(
    edge: Edge, site: DocumentSite, hits: Recorder
) -> None:
    before = len(hits.hits)
    assert authorize(edge, f"{site.origin}/client.json")[0] == 200
    # A redirect within the allowed origin is followed (each hop checked) ...
    assert authorize(edge, f"{site.origin}/self.json")[0] == 200
    # ... one to loopback is refused before it is followed.
    status, code, message = authorize(edge, f"{site.origin}/private.json")
    print(f"\nredirect {site.origin}/private.json -> 127.0.0.1:{hits.port}: {status} {code}: {message}")
    assert (status, code) == (400, REFUSED), message
    assert "a redirect led to 127.0.0.1 is loopback" in message
    assert len(hits.hits) == before


def test_an_approval_whose_document_now_redirects_to_a_private_host_fetches_nothing(
    edge: Edge, site: DocumentSite, hits: Recorder
) -> None:
    """The library fetches the document again when the owner approves: a document that now
    redirects to loopback is refused then too, and no grant is made."""
    device = edge.pair_device("doors-approver")
    _verifier, challenge = pkce_pair()
    query = {
        "response_type": "code",
        "client_id": f"{site.origin}/switch.json",
        "redirect_uri": REDIRECT_URI,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": f"{edge.base}/mcp",
    }
    page = edge.get(f"/authorize?{urlencode(query)}")
    assert page.status_code == 200, page.text
    boot = re.search(r"const boot = (\{.*?\});", page.text)
    assert boot is not None
    request_id = json.loads(boot.group(1))["request_id"]
    before = len(hits.hits)
    site.turned.set()
    try:
        outcome = edge.control(device["device_id"], "consent.approve", {"request_id": request_id})
    finally:
        site.turned.clear()
    print(f"\napproval after the document turned into a redirect to loopback: {outcome}")
    assert outcome["error"]["code"] == REFUSED, outcome
    assert "a redirect led to 127.0.0.1 is loopback" in outcome["error"]["message"]
    assert len(hits.hits) == before
    assert edge.control(device["device_id"], "grant.list")["result"]["grants"] == []


def test_the_token_endpoint_fetches_no_private_document_either(edge: Edge, hits: Recorder) -> None:
    """/token looks the client up too; a document URL on loopback is refused by the fetch check."""
    before = len(hits.hits)
    answer = edge.post(
        "/token",
        data={
            "grant_type": "authorization_code",
            "code": "dev_x:grant:secret",
            "client_id": f"https://127.0.0.1:{hits.port}/client.json",
            "code_verifier": pkce_pair()[0],
        },
    )
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"] == "invalid_client"
    assert len(hits.hits) == before


def outbound(edge: Edge, url: str) -> dict[str, Any]:
    answer = edge.post("/__test/outbound", headers=edge.admin_headers(), json={"url": url})
    assert answer.status_code == 200, answer.text
    verdict: dict[str, Any] = answer.json()
    return verdict


def test_the_check_also_refuses_other_schemes_ports_and_userinfo_and_lets_public_hosts_through(
    edge: Edge,
) -> None:
    """The rules after the host's class, through the test route (nothing is fetched), and public
    hosts the check lets through (a name whose DNS answer is private is not seen: edge/README.md)."""
    refused = {
        "http://cimd.example.com/client.json": "only https is fetched",
        "https://cimd.example.com:8443/client.json": "only port 443 is fetched",
        "https://user:pw@cimd.example.com/client.json": "user name or password",
        "https://[2001:db8::1]/client.json": "documentation",
        "https://[2002:a00:1::]/client.json": "6to4 (10.0.0.1)",
        "https://[2001::1]/client.json": "Teredo",
        "https://224.0.0.1/client.json": "multicast",
        "https://255.255.255.255/client.json": "reserved",
        "https://exa mple.com/client.json": "not a valid URL",
    }
    allowed = [
        "https://cimd.example.com/client.json",
        "https://cimd.example.com:443/client.json",
        "https://8.8.8.8/client.json",
        "https://[2606:4700:4700::1111]/client.json",
        "https://127.0.0.1.nip.io/client.json",
    ]
    print()
    for url, reason in refused.items():
        verdict = outbound(edge, url)
        print(f"{url:50} hostname={verdict['hostname']!s:24} refused: {verdict['refusal']}")
        assert verdict["refusal"] is not None and reason in verdict["refusal"], (url, verdict)
    for url in allowed:
        verdict = outbound(edge, url)
        print(f"{url:50} hostname={verdict['hostname']!s:24} fetched")
        assert verdict["refusal"] is None, (url, verdict)


def test_a_malformed_percent_encoding_in_status_is_a_400(edge: Edge) -> None:
    for path in ("/status/%E0%A4%A", "/status/%", "/status/%ZZ", "/status/dev_%FF"):
        answer = raw_request(edge, "GET", path, {})
        assert answer.status == 400, (path, answer.status, answer.text)
        assert stable_code(answer) == "invalid_path"


def test_odd_inputs_on_every_route_answer_below_500_with_a_stable_code(edge: Edge) -> None:
    device = edge.pair_device("doors-odd")
    odd = [
        ("GET", "/authorize?client_id=%E0%A4%A&response_type=code", {}, None),
        ("GET", "/authorize?client_id=https%3A%2F%2F%E0%A4%A", {}, None),
        ("GET", "/authorize?resource=%%%&client_id=x", {}, None),
        ("GET", "/pair", {"Authorization": "Basic !!!not-base64"}, None),
        ("GET", "/pair", {"Authorization": "Basic"}, None),
        ("GET", "/link/connect", {"Authorization": "Device ."}, None),
        ("GET", "/link/connect", {"Authorization": f"Device {device['device_id']}"}, None),
        ("GET", f"/status/{device['device_id']}", {"Authorization": "Device %E0%A4%A"}, None),
        ("POST", "/mcp", {"Authorization": "Bearer a:b:c", "Content-Type": "application/json"}, b"{"),
        ("POST", "/mcp", {"Authorization": "Bearer %E0%A4%A"}, b"[]"),
        ("POST", "/token", {"Content-Type": "application/x-www-form-urlencoded"}, b"%E0%A4%A=%"),
        ("POST", "/token", {"Content-Type": "multipart/form-data; boundary=x"}, b"--x\r\nbroken"),
        ("POST", "/token", {"Content-Type": "application/json"}, b"{"),
        ("POST", "/register", {"Content-Type": "application/json"}, b"{"),
        ("POST", "/register", {"Content-Type": "application/json"}, b'{"redirect_uris": ["%E0%A4%A"]}'),
        ("POST", "/authorize/status", {"Content-Type": "application/json"}, b"[1]"),
        ("POST", "/link/pair", {"Content-Type": "application/json"}, b'"x"'),
        ("GET", "/%E0%A4%A", {}, None),
        # A Host the URL parser takes but the library refuses as its resource (http, not
        # loopback). One no parser takes ("a b", "%zz") is refused by miniflare's own entry
        # worker before the Worker runs (edge/README.md, "Decisions").
        ("GET", "/mcp", {"Host": "odd.example:1"}, None),
        ("POST", "/token", {"Host": "odd.example"}, b""),
        ("GET", "/authorize", {"Host": "odd.example"}, None),
        ("GET", "/.well-known/oauth-authorization-server", {"Host": "odd.example"}, None),
    ]
    print()
    for method, path, headers, body in odd:
        answer = raw_request(edge, method, path, headers, body)
        code = stable_code(answer)
        print(f"{method:4} {path[:60]:60} {str(headers)[:40]:40} {answer.status} {code}")
        assert 400 <= answer.status < 500, (method, path, headers, answer.status, answer.text[:300])
        assert code, (method, path, answer.text[:300])


@dataclass
class RawAnswer:
    status: int
    headers: dict[str, str]
    text: str


def raw_request(
    edge: Edge, method: str, path: str, headers: dict[str, str], body: bytes | None = None
) -> RawAnswer:
    """One request with `path` sent as it is (an HTTP client library would re-escape a malformed
    percent-encoding) and `headers` as given (a Host header replaces the usual one)."""
    host, port = edge.base.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.putrequest(method, path, skip_host="Host" in headers, skip_accept_encoding=True)
        for name, value in {**headers, "Content-Length": str(len(body or b""))}.items():
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        text = response.read().decode(errors="replace")
        return RawAnswer(
            response.status, {name.lower(): value for name, value in response.getheaders()}, text
        )
    finally:
        connection.close()


def stable_code(answer: RawAnswer) -> str:
    """The error code of an answer: ours (`{"error": {"code"}}` or the page's X-Error-Code) or
    OAuth's (`{"error": "..."}`)."""
    if answer.headers.get("x-error-code"):
        return answer.headers["x-error-code"]
    with contextlib.suppress(ValueError):
        body = json.loads(answer.text)
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            return str(error.get("code", ""))
        if isinstance(error, str):
            return error
    return ""


def test_status_answers_only_the_devices_own_credential_or_the_admin_secret(edge: Edge) -> None:
    mine = edge.pair_device("doors-mine")
    other = edge.pair_device("doors-other")
    path = f"/status/{mine['device_id']}"
    own = edge.get(path, headers=device_headers(mine))
    assert own.status_code == 200 and own.json()["device_id"] == mine["device_id"], own.text
    admin = edge.get(path, headers=edge.admin_headers())
    assert admin.status_code == 200 and admin.json()["name"] == "doors-mine"
    assert mine["device_secret"] not in own.text + admin.text
    refusals = {
        "none": {},
        "another device's": device_headers(other),
        "a wrong secret": device_headers({**mine, "device_secret": other["device_secret"]}),
        "a token-like bearer": {"Authorization": f"Bearer {mine['device_id']}:grant:secret"},
        "a wrong admin secret": {"Authorization": "Bearer " + "x" * 44},
    }
    unknown = edge.get("/status/dev_AAAAAAAAAAAAAAAA")
    for what, headers in refusals.items():
        answer = edge.get(path, headers=headers)
        assert answer.status_code == 401, (what, answer.text)
        assert answer.json()["error"]["code"] == "status_unauthorized"
        # Nothing tells a paired device from an unknown one.
        assert answer.json() == unknown.json()
    assert unknown.status_code == 401
    missing = edge.get("/status/dev_AAAAAAAAAAAAAAAA", headers=edge.admin_headers())
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "device_not_found"
