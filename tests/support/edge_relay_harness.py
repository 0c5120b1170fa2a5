"""The relay's counterparts for tests: a scripted link (`ScriptedLink`, a `websockets` client that
speaks docs/edge-protocol.md frame by frame, so a test decides every answer), an MCP client of
/mcp holding a real OAuth token (`connect_connector`: registration, authorization code + PKCE, the
consent approved over the link with `consent.approve`, the token exchange), and the real thing on
the workstation's side: `herdr-mcp link` paired with `herdr-mcp link pair` and connected
(`paired_link`), with connectors approved by `herdr-mcp connector approve` (`approve_with_cli`).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import httpx2
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from herdr_mcp.contract import contract_identity
from tests.support.connector_harness import Consent, open_consent_at, poll
from tests.support.edge_harness import REDIRECT_URI, Edge, pkce_pair, register_client
from tests.support.link_harness import Link, running_link
from tests.support.waiting import wait_until
from tests.support.workstation_harness import Generations, cli_json

#: Generous for a loaded 2-core machine: each wait ends as soon as its condition holds.
WAIT_S = 60.0


def runtime_identity(epoch: int = 5, generation: str | None = "gen-a") -> dict[str, Any]:
    """The `runtime` object a link announces for the frozen catalog of `epoch`."""
    return {"generation": generation, "version": "0.1.0", "contract": contract_identity(epoch).to_dict()}


@dataclass
class ScriptedLink:
    """One link connection whose every frame the test sends and reads itself."""

    socket: ClientConnection
    device_id: str

    def send(self, frame: dict[str, Any]) -> None:
        self.socket.send(json.dumps(frame, ensure_ascii=False))

    def send_text(self, text: str) -> None:
        self.socket.send(text)

    def recv(self, timeout: float = WAIT_S) -> dict[str, Any]:
        """The next frame the Edge sends (raises ConnectionClosed when it closed)."""
        frame: dict[str, Any] = json.loads(self.socket.recv(timeout=timeout))
        return frame

    def recv_type(self, kind: str, timeout: float = WAIT_S) -> dict[str, Any]:
        """The next frame of type `kind`, skipping the Edge's heartbeats."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.recv(timeout=max(0.1, deadline - time.monotonic()))
            if frame["type"] == kind:
                return frame
            assert frame["type"] == "heartbeat", frame

    def hello(self, runtime: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send hello and return the hello_ack."""
        self.send(
            {
                "type": "hello",
                "protocol": 1,
                "device_id": self.device_id,
                "link_version": "0.1.0",
                "runtime": runtime or runtime_identity(),
            }
        )
        return self.recv_type("hello_ack")

    def close_code(self, timeout: float = WAIT_S) -> int | None:
        """Read until the Edge closes; its close code."""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                self.socket.recv(timeout=max(0.1, deadline - time.monotonic()))
        except (ConnectionClosed, TimeoutError):
            pass  # the close frame received, if any, decides
        close = self.socket.protocol.close_rcvd
        return close.code if close is not None else None

    def close(self) -> None:
        self.socket.close()


def open_link(edge: Edge, device: dict[str, Any]) -> ScriptedLink:
    """A WebSocket to /link/connect authenticated by the device secret (in a header, never the URL)."""
    url = edge.base.replace("http://", "ws://", 1) + "/link/connect"
    socket = connect(
        url,
        additional_headers={"Authorization": f"Device {device['device_id']}.{device['device_secret']}"},
        max_size=None,
        open_timeout=WAIT_S,
        close_timeout=10,
        legacy=True,  # a connection the test holds across steps, closed by ScriptedLink.close
    )
    return ScriptedLink(socket, device["device_id"])


@dataclass
class Connector:
    """An MCP client of /mcp with a bearer token (JSON-RPC over Streamable HTTP, one POST each)."""

    edge: Edge
    token: str
    ids: list[int] = field(default_factory=lambda: [0])

    def next_id(self) -> int:
        self.ids[0] += 1
        return self.ids[0]

    def post(self, message: dict[str, Any], headers: dict[str, str] | None = None) -> httpx2.Response:
        return httpx2.post(
            self.edge.base + "/mcp",
            json=message,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Accept": "application/json, text/event-stream",
                **(headers or {}),
            },
            timeout=WAIT_S * 2,
        )

    def rpc(
        self, method: str, params: dict[str, Any] | None = None, request_id: int | None = None
    ) -> dict[str, Any]:
        """One request; its JSON-RPC response object."""
        message = {
            "jsonrpc": "2.0",
            "id": request_id or self.next_id(),
            "method": method,
            "params": params or {},
        }
        answer = self.post(message)
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body

    def call(self, tool: str, arguments: dict[str, Any], request_id: int | None = None) -> dict[str, Any]:
        """tools/call; the CallToolResult."""
        body = self.rpc("tools/call", {"name": tool, "arguments": arguments}, request_id)
        result: dict[str, Any] = body["result"]
        return result


def _authorize_page(edge: Edge, client_id: str, challenge: str) -> Consent:
    query = urlencode(
        {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT_URI,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "resource": edge.base + "/mcp",
            "state": "relay-test",
        }
    )
    return open_consent_at(edge, "/authorize?" + query)


@dataclass
class Authorization:
    """An authorization request waiting for the owner's approval (the consent page's state)."""

    client_id: str
    verifier: str
    request_id: str
    poll_token: str
    #: The short code the consent page shows.
    code: str


def begin_authorization(edge: Edge) -> Authorization:
    """Register a public client and open the consent page (authorization code + PKCE S256)."""
    client = register_client(edge)
    verifier, challenge = pkce_pair()
    consent = _authorize_page(edge, client["client_id"], challenge)
    return Authorization(client["client_id"], verifier, consent.request_id, consent.poll_token, consent.code)


def finish_authorization(edge: Edge, authorization: Authorization) -> Connector:
    """After the approval: the page's status poll, then the token exchange."""
    consent = Consent(authorization.request_id, authorization.code, authorization.poll_token)
    status = poll(edge, consent)
    assert status["status"] == "approved", status
    code = parse_qs(urlparse(status["redirect_to"]).query)["code"][0]
    token = edge.post(
        "/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT_URI,
            "client_id": authorization.client_id,
            "code_verifier": authorization.verifier,
            "resource": edge.base + "/mcp",
        },
    )
    assert token.status_code == 200, token.text
    return Connector(edge, token.json()["access_token"])


def connect_connector(edge: Edge, link: ScriptedLink) -> Connector:
    """A connector authorized by the owner through `link` (a `control_request` consent.approve)."""
    authorization = begin_authorization(edge)
    params = {"request_id": authorization.request_id}
    link.send({"type": "control_request", "id": "c1", "method": "consent.approve", "params": params})
    approved = link.recv_type("control_result")
    assert approved["id"] == "c1" and "result" in approved, approved
    return finish_authorization(edge, authorization)


@dataclass
class PairedLink:
    """`herdr-mcp link` (a subprocess) paired with an Edge and connected to it."""

    link: Link
    device_id: str
    #: The workstation's config dir: the device record and the link's token file.
    config_dir: Path

    @property
    def where(self) -> tuple[str, ...]:
        """The options that point a `herdr-mcp link status|connector ...` at this link."""
        return ("--config-dir", str(self.config_dir), "--link-port", self.link.base.rsplit(":", 1)[1])

    def status(self) -> dict[str, Any]:
        """`herdr-mcp link status --json`, as its own process."""
        return cli_json("link", "status", *self.where)


def device_headers(device: dict[str, Any]) -> dict[str, str]:
    """The paired device's own credential, as the link sends it (/link/connect, /status)."""
    return {"Authorization": f"Device {device['device_id']}.{device['device_secret']}"}


def edge_status(edge: Edge, device_id: str) -> dict[str, Any]:
    """/status/<device> on the Edge (what herdr_devices shows), read with the owner's ADMIN_SECRET."""
    answer = edge.get(f"/status/{device_id}", headers=edge.admin_headers())
    assert answer.status_code == 200, answer.text
    status: dict[str, Any] = answer.json()
    return status


@contextlib.contextmanager
def paired_link(edge: Edge, generations: Generations, name: str = "workstation") -> Iterator[PairedLink]:
    """`herdr-mcp link pair` with a code from the Edge's pairing page, then `herdr-mcp link` in
    front of `generations` until the block ends; yields once the Edge sees it online and
    `herdr-mcp link status` says connected."""
    tmp = generations.tmp
    code = edge.start_pairing()["code"]
    paired = cli_json(
        "link", "pair", "--edge", edge.base, "--code", code, "--name", name, "--config-dir", str(tmp)
    )
    with running_link(generations.store.state_dir, tmp / "link-token") as link:
        ready = PairedLink(link, paired["device_id"], tmp)
        wait_until(lambda: edge_status(edge, ready.device_id)["online"], "the Edge to see the link", WAIT_S)
        wait_until(lambda: ready.status()["edge"]["state"] == "connected", "the link to connect", WAIT_S)
        yield ready


def approve_with_cli(edge: Edge, paired: PairedLink) -> Connector:
    """A connector whose consent the owner approved with `herdr-mcp connector approve` (a
    subprocess, through the link); the requests a client makes are made here."""
    authorization = begin_authorization(edge)
    approved = cli_json(
        "connector", "approve", authorization.request_id, "--code", authorization.code, *paired.where
    )
    assert (approved["request_id"], approved["code"]) == (authorization.request_id, authorization.code)
    return finish_authorization(edge, authorization)
