"""The Edge (edge/, a Cloudflare Worker) for tests: `npx wrangler dev --local` runs it under the
real workerd on loopback, with its KV and Durable Objects persisted in a temporary directory.

`running_edge(persist_dir)` starts one instance and stops its whole process group at the end;
`Edge` holds its URL and the test secrets, and speaks the Edge's test routes (enabled only by
`EDGE_TEST_ROUTES=1`, which this harness sets and wrangler.jsonc never does). `pkce_pair()` and
`register_client()` are the OAuth client side the tests share; `client_document_server()` serves
a client ID metadata document over https on loopback, from a CA the Edge is told to trust.

Wrangler runs with `wrangler_env()`: OFFLINE_ENV turns off every lookup `wrangler dev --local`
makes by itself (miniflare's cf.json from workers.cloudflare.com, the banner's update check on the
npm registry, metrics, crash reports), so the Edge's tests reach nothing but loopback;
tests/edge/test_edge_offline.py proves it with strace in a loopback-only network namespace
(scripts/netns-run).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import http.server
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import trustme

ROOT = Path(__file__).resolve().parents[2]
EDGE_DIR = ROOT / "edge"
WRANGLER = EDGE_DIR / "node_modules" / ".bin" / "wrangler"
ADMIN_SECRET = "admin-secret-for-tests-" + "a" * 20
EDGE_HMAC_KEY = "edge-hmac-key-for-tests-" + "k" * 20
#: workerd's first start on a loaded 2-core machine takes seconds (esbuild bundles, workerd boots).
START_TIMEOUT_S = 180.0
#: `npm ci` of the Edge's packages, when the test command did not run it before (a plain pytest).
NPM_CI_TIMEOUT_S = 600
#: A redirect URI on loopback: the library accepts http there (OAuth 2.1 native-app rule).
REDIRECT_URI = "http://127.0.0.1:9/callback"


def ensure_edge_packages() -> None:
    """`npm ci` in edge/ unless its packages are installed already (scripts/test runs it first);
    an flock serialises test processes starting at once."""
    with (EDGE_DIR / ".npm-ci.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not WRANGLER.exists():
            subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund"],
                cwd=EDGE_DIR,
                check=True,
                timeout=NPM_CI_TIMEOUT_S,
                stdout=subprocess.DEVNULL,
            )


#: What keeps wrangler 4.86.0 (and the miniflare 4.20260426.0 it runs) on this machine, each
#: setting found in their bundled source (edge/node_modules/...; line numbers of those files) and
#: checked with strace (tests/edge/test_edge_offline.py):
OFFLINE_ENV = {
    # miniflare dist/src/index.js:56793 (CF_FETCH_ENABLED_ENV_VAR, setupCf): "false" makes
    # `request.cf` the built-in placeholder instead of fetching https://workers.cloudflare.com/cf.json
    # at every start (once for the proxy worker, once for the Worker), which had no cache here.
    "CLOUDFLARE_CF_FETCH_ENABLED": "false",
    # wrangler-dist/cli.js:138767 (printWranglerBanner): the banner, printed before every command,
    # first asks the npm registry for wrangler's latest version (src/update-check.ts), unless hidden.
    "WRANGLER_HIDE_BANNER": "true",
    # The same update check also runs on a compatibility-date warning (cli.js:65353) and after an
    # unexpected error (logPossibleBugMessage, cli.js:310477); it takes the registry from the `rc`
    # package's "npm_" variables (registry-url, cli.js:63392): a closed loopback port answers it.
    "npm_registry": "http://127.0.0.1:9/",
    # cli.js:37207 and 55792 (getMetricsConfig): no usage event to https://sparrow.cloudflare.com.
    "WRANGLER_SEND_METRICS": "false",
    # cli.js:37210 and 183589 (captureGlobalException): no Sentry report of a crash, and no prompt.
    "WRANGLER_SEND_ERROR_REPORTS": "false",
    # Non-interactive (ci-info): no prompt waits on a terminal.
    "CI": "1",
}


def wrangler_env(home: Path) -> dict[str, str]:
    """The environment a test runs wrangler in: OFFLINE_ENV, and `home` (created) for wrangler's
    own config, logs and update-check cache instead of the user's home and /tmp."""
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        **OFFLINE_ENV,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        # update-check keeps its cache in os.tmpdir(): a stale one there would hide a lookup.
        "TMPDIR": str(home / "tmp"),
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Edge:
    """One running Edge on loopback."""

    base: str
    log: Path
    #: wrangler's process group (wrangler, its node child and workerd), gone after the block.
    process_group: int

    def get(self, path: str, **kwargs: Any) -> httpx2.Response:
        return httpx2.get(self.base + path, timeout=30, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx2.Response:
        return httpx2.post(self.base + path, timeout=30, **kwargs)

    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_SECRET}"}

    def control(self, device_id: str, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """A control method as the relay runs it for `device_id` (the test route)."""
        answer = self.post(
            "/__test/control",
            headers=self.admin_headers(),
            json={"device_id": device_id, "method": method, "params": params or {}},
        )
        assert answer.status_code == 200, answer.text
        outcome: dict[str, Any] = answer.json()
        return outcome

    def shift_clock(self, offset_s: int) -> None:
        """Shift the registry's clock (pairing and consent expiry) by `offset_s` seconds."""
        answer = self.post("/__test/clock", headers=self.admin_headers(), json={"offset_s": offset_s})
        assert answer.status_code == 200, answer.text

    def start_pairing(self) -> dict[str, Any]:
        answer = self.get("/pair", headers=self.admin_headers())
        assert answer.status_code == 200, answer.text
        ticket: dict[str, Any] = answer.json()
        return ticket

    def pair_device(self, name: str = "workstation") -> dict[str, Any]:
        """A freshly paired device: its `device_id` and `device_secret`."""
        code = self.start_pairing()["code"]
        answer = self.post("/link/pair", json={"code": code, "name": name})
        assert answer.status_code == 200, answer.text
        device: dict[str, Any] = answer.json()
        return device


def _answers(url: str) -> bool:
    try:
        return httpx2.get(url, timeout=5).status_code == 200
    except httpx2.HTTPError:
        return False


@contextlib.contextmanager
def running_edge(
    persist_dir: Path,
    extra_vars: dict[str, str] | None = None,
    trust_ca: Path | None = None,
    port: int | None = None,
) -> Iterator[Edge]:
    """The Worker under `wrangler dev --local` on a free loopback port, until the block ends.
    `trust_ca`: the only CA workerd trusts for the Worker's outbound https (a test server's).
    `port`: this port instead of a free one (an Edge restarted where its link dials)."""
    ensure_edge_packages()
    variables = {
        "ADMIN_SECRET": ADMIN_SECRET,
        "EDGE_HMAC_KEY": EDGE_HMAC_KEY,
        "EDGE_TEST_ROUTES": "1",
        **(extra_vars or {}),
    }
    options = [
        "--persist-to",
        str(persist_dir / "state"),
        "--show-interactive-dev-session=false",
        "--log-level",
        "warn",
    ]
    for name, value in variables.items():
        options += ["--var", f"{name}:{value}"]
    env = {
        **wrangler_env(persist_dir / "home"),
        # workerd reads its trusted CAs from SSL_CERT_FILE (checked with wrangler 4.86.0).
        **({"SSL_CERT_FILE": str(trust_ca)} if trust_ca is not None else {}),
    }
    log = persist_dir / "wrangler.log"
    for attempt in range(1, PORT_ATTEMPTS + 1):
        listen = port if port is not None else _free_port()
        command = [str(WRANGLER), "dev", "--local", "--ip", "127.0.0.1", "--port", str(listen)]
        command += ["--inspector-port", str(_free_port()), *options]
        with log.open("w") as log_file:
            process = subprocess.Popen(
                command,
                cwd=EDGE_DIR,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        edge = Edge(f"http://127.0.0.1:{listen}", log, process.pid)
        try:
            if _started(edge, process):
                yield edge
                return
            output = log.read_text(errors="replace")
            if "Address already in use" not in output or attempt == PORT_ATTEMPTS:
                raise RuntimeError(f"the Edge did not start: {output[-3000:]}")
        finally:
            _stop_group(process)


#: The free port the harness picked may be taken by another process before wrangler binds it.
PORT_ATTEMPTS = 3


def _started(edge: Edge, process: subprocess.Popen[bytes]) -> bool:
    """Wait until the Edge answers /health (True) or wrangler exits (False)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(edge.base + "/health"):
        if process.poll() is not None:
            return False
        if time.monotonic() > deadline:
            output = edge.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the Edge did not answer within {START_TIMEOUT_S:g} s: {output}")
        time.sleep(0.2)  # polling the Edge's start, bounded by the deadline above
    return True


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to wrangler and workerd (one process group), SIGKILL if they outlive 15 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)
    # workerd and esbuild may outlive wrangler by a moment: the group is stopped only when none
    # of it runs any more (a zombie waiting for init to reap it counts as gone).
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 15
    while live_group_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # waiting for SIGKILL to land, bounded by the deadline above


def live_group_members(process_group: int) -> list[int]:
    """The processes of `process_group` still running (zombies are not), from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # Fields after the command name: state, ppid, pgrp, ...
        state, _ppid, pgrp = text[text.rfind(")") + 2 :].split()[:3]
        if int(pgrp) == process_group and state not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members


def pkce_pair() -> tuple[str, str]:
    """A PKCE verifier and its S256 challenge (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def register_client(edge: Edge, redirect_uri: str = REDIRECT_URI) -> dict[str, Any]:
    """A public client registered by dynamic client registration (RFC 7591)."""
    answer = edge.post(
        "/register",
        json={
            "client_name": "Test Connector",
            "redirect_uris": [redirect_uri],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
        },
    )
    assert answer.status_code == 201, answer.text
    client: dict[str, Any] = answer.json()
    return client


@dataclass
class ClientDocument:
    """A client ID metadata document served at `client_id` (an https URL on loopback)."""

    client_id: str
    ca_file: Path


@contextlib.contextmanager
def client_document_server(directory: Path, client_name: str = "Document Client") -> Iterator[ClientDocument]:
    """An https server on loopback serving one client ID metadata document at /client.json."""
    ca = trustme.CA()
    ca_file = directory / "client-document-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    document: dict[str, Any] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(document).encode()
            self.send_response(200 if self.path == "/client.json" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            # workerd reports "Network connection lost" on an HTTP/1.0 answer without it.
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the tests read answers, not the access log."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    client_id = f"https://127.0.0.1:{server.server_address[1]}/client.json"
    document.update(
        client_id=client_id,
        client_name=client_name,
        redirect_uris=[REDIRECT_URI],
        token_endpoint_auth_method="none",
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ClientDocument(client_id, ca_file)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
