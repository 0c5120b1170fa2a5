"""Pairing a workstation with the Edge and authenticating its link (docs/edge-protocol.md), against
the real Worker under workerd (tests/support/edge_harness.py): the admin secret on /pair, a 6-digit code
valid at most 10 minutes, once; five wrong codes lock it; only an HMAC verifier is kept; the link
is authenticated by device secret in a header before anything reaches its Durable Object."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import pytest

from herdr_mcp.cli import main as cli_main
from herdr_mcp.edge_deploy.deploy import RECORD, DeployFiles
from herdr_mcp.layout import Layout
from tests.support import edge_harness
from tests.support.edge_harness import ADMIN_SECRET, EDGE_HMAC_KEY, Edge, live_group_members, running_edge


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    with running_edge(tmp_path_factory.mktemp("edge-pairing")) as running:
        yield running


@pytest.fixture
def clock(edge: Edge) -> Iterator[Edge]:
    """The registry clock back at real time after the test (the instance is shared)."""
    yield edge
    edge.shift_clock(0)


def error_code(answer: httpx2.Response) -> str:
    code: str = answer.json()["error"]["code"]
    return code


def test_health_answers_without_secrets(edge: Edge) -> None:
    answer = edge.get("/health")
    assert answer.status_code == 200
    assert answer.json()["status"] == "ok"
    assert ADMIN_SECRET not in answer.text and EDGE_HMAC_KEY not in answer.text


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-secret"},
        {"Authorization": f"Bearer {ADMIN_SECRET}x"},
        {"Authorization": "Basic " + base64.b64encode(b"owner:wrong").decode()},
    ],
)
def test_pair_refuses_without_the_admin_secret(edge: Edge, headers: dict[str, str]) -> None:
    answer = edge.get("/pair", headers=headers)
    assert answer.status_code == 401
    assert error_code(answer) == "admin_unauthorized"
    assert "code" not in answer.json()


def test_pair_takes_the_admin_secret_as_basic_password(edge: Edge) -> None:
    basic = base64.b64encode(f"owner:{ADMIN_SECRET}".encode()).decode()
    answer = edge.get("/pair", headers={"Authorization": f"Basic {basic}", "Accept": "text/html"})
    assert answer.status_code == 200
    code = re.search(r"<strong>([0-9]{6})</strong>", answer.text)
    assert code is not None
    assert f"herdr-mcp link pair --edge {edge.base} --code {code.group(1)}" in answer.text


def test_a_pairing_code_has_six_digits_and_lives_at_most_ten_minutes(edge: Edge) -> None:
    ticket = edge.start_pairing()
    assert re.fullmatch(r"[0-9]{6}", ticket["code"])
    # workerd runs on this machine: its clock is ours.
    assert 0 < ticket["expires_at"] - time.time() <= 600 + 5


def test_the_code_gives_a_device_id_and_secret_once(edge: Edge) -> None:
    code = edge.start_pairing()["code"]
    first = edge.post("/link/pair", json={"code": code, "name": "ws-1"})
    assert first.status_code == 200, first.text
    device = first.json()
    assert re.fullmatch(r"dev_[A-Za-z0-9_-]{16}", device["device_id"])
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", device["device_secret"])
    again = edge.post("/link/pair", json={"code": code, "name": "ws-2"})
    assert again.status_code == 403
    assert error_code(again) == "pairing_expired"


def test_five_wrong_codes_lock_the_pairing_and_the_sixth_attempt_is_refused(edge: Edge) -> None:
    code = edge.start_pairing()["code"]
    wrong = f"{(int(code) + 1) % 1_000_000:06d}"
    for _ in range(5):
        answer = edge.post("/link/pair", json={"code": wrong, "name": "attacker"})
        assert answer.status_code == 401
        assert error_code(answer) == "pairing_code_wrong"
    # The sixth attempt, even with the right code, meets the lock.
    locked = edge.post("/link/pair", json={"code": code, "name": "ws"})
    assert locked.status_code == 403
    assert error_code(locked) == "pairing_locked"
    # A new pairing from the owner starts afresh.
    assert edge.pair_device()["device_id"].startswith("dev_")


def test_parallel_guesses_get_five_tries_in_all(edge: Edge) -> None:
    """The lockout counter lives in one Durable Object whose calls run one at a time: twenty
    guesses at once still meet exactly five "wrong" answers, then the lock."""
    code = edge.start_pairing()["code"]
    wrong = [f"{(int(code) + offset) % 1_000_000:06d}" for offset in range(1, 21)]
    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(
            pool.map(lambda guess: edge.post("/link/pair", json={"code": guess, "name": "x"}), wrong)
        )
    codes = sorted(error_code(answer) for answer in answers)
    assert codes == ["pairing_code_wrong"] * 5 + ["pairing_locked"] * 15


def test_an_expired_code_is_refused(clock: Edge) -> None:
    code = clock.start_pairing()["code"]
    clock.shift_clock(601)
    answer = clock.post("/link/pair", json={"code": code, "name": "ws"})
    assert answer.status_code == 403
    assert error_code(answer) == "pairing_expired"


def test_a_new_pairing_replaces_the_pending_one(edge: Edge) -> None:
    old = edge.start_pairing()["code"]
    new = edge.start_pairing()["code"]
    if old != new:  # one chance in a million that both codes are the same
        assert error_code(edge.post("/link/pair", json={"code": old, "name": "ws"})) == "pairing_code_wrong"
    assert edge.post("/link/pair", json={"code": new, "name": "ws"}).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"code": "12345", "name": "ws"},
        {"code": 123456, "name": "ws"},
        {"code": "123456"},
        {"code": "123456", "name": ""},
    ],
)
def test_a_malformed_pairing_request_is_invalid_argument(edge: Edge, body: dict[str, object]) -> None:
    answer = edge.post("/link/pair", json=body)
    assert answer.status_code == 400
    assert error_code(answer) == "invalid_argument"


def test_the_edge_keeps_no_device_secret(edge: Edge) -> None:
    device = edge.pair_device()
    state = Path(edge.log).parent / "state"
    stored = b"".join(path.read_bytes() for path in state.rglob("*") if path.is_file())
    assert stored, "the registry's storage is persisted under the state directory"
    assert device["device_id"].encode() in stored
    assert device["device_secret"].encode() not in stored


def connect(edge: Edge, authorization: str | None, query: str = "") -> int:
    headers = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13"}
    headers["Sec-WebSocket-Key"] = base64.b64encode(b"0123456789abcdef").decode()
    if authorization is not None:
        headers["Authorization"] = authorization
    status: int = edge.get("/link/connect" + query, headers=headers).status_code
    return status


def test_link_connect_authenticates_the_device_secret(edge: Edge) -> None:
    device = edge.pair_device()
    other = edge.pair_device()
    device_id, secret = device["device_id"], device["device_secret"]
    refused = [
        None,
        f"Bearer {secret}",
        f"Device {device_id}.{other['device_secret']}",
        f"Device {device_id}.{secret[:-1]}A" if secret[-1] != "A" else f"Device {device_id}.{secret[:-1]}B",
        f"Device dev_{'x' * 16}.{secret}",
        f"Device {device_id}",
    ]
    for authorization in refused:
        answer = edge.get(
            "/link/connect", headers={} if authorization is None else {"Authorization": authorization}
        )
        assert answer.status_code == 401, authorization
        assert error_code(answer) == "device_unauthorized"
    # A secret in the URL is never read.
    assert connect(edge, None, f"?device_id={device_id}&device_secret={secret}") == 401
    # The right secret reaches the device's Durable Object (whatever it answers, it is not 401).
    assert connect(edge, f"Device {device_id}.{secret}") != 401


@pytest.mark.slow
def test_without_its_secrets_the_edge_refuses_to_pair(tmp_path: Path) -> None:
    """An HMAC under an empty or short key would verify nothing: pairing and links refuse to run."""
    with running_edge(tmp_path, extra_vars={"EDGE_HMAC_KEY": "short"}) as unconfigured:
        assert unconfigured.get("/health").status_code == 200
        for answer in (
            unconfigured.get("/pair", headers=unconfigured.admin_headers()),
            unconfigured.post("/link/pair", json={"code": "123456", "name": "ws"}),
            unconfigured.get("/link/connect", headers={"Authorization": f"Device dev_{'x' * 16}.{'y' * 43}"}),
        ):
            assert answer.status_code == 503
            assert error_code(answer) == "edge_not_configured"
            assert "EDGE_HMAC_KEY" in answer.json()["error"]["message"]
            assert "ADMIN_SECRET" not in answer.json()["error"]["message"]
    # The harness stops wrangler, workerd and esbuild: their whole process group.
    assert live_group_members(unconfigured.process_group) == []


@pytest.mark.slow
def test_the_harness_retries_a_port_taken_before_wrangler_binds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        free_port = edge_harness._free_port
        monkeypatch.setattr(edge_harness, "_free_port", lambda: next(ports, None) or free_port())
        with running_edge(tmp_path) as edge:
            assert edge.get("/health").status_code == 200
            assert edge.base != f"http://127.0.0.1:{taken.getsockname()[1]}"


def test_link_pair_without_a_code_starts_the_pairing_with_the_deploys_admin_secret(
    edge: Edge, tmp_path: Path
) -> None:
    """`herdr-mcp link pair --edge <origin>` with no --code: the ADMIN_SECRET `edge deploy` kept
    for the Worker at that origin starts the pairing (GET /pair, as the page does), then the code
    is redeemed. A wrong secret is the Edge's own refusal, and no record of that origin asks for
    the page's code; neither writes a device."""

    def pair(config: Path, *extra: str) -> tuple[int, dict[str, Any]]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            argv = ["link", "pair", "--edge", edge.base, "--config-dir", str(config), *extra, "--json"]
            status = cli_main(argv)
        return status, json.loads(out.getvalue())

    # No deploy of that origin here: the page's code is asked for.
    status, answer = pair(tmp_path / "none")
    assert (status, answer["error"]["code"]) == (2, "pairing_code_required"), answer
    assert not Layout(tmp_path / "none").edge_device_file.exists()

    # A deploy record of this origin with its ADMIN_SECRET file (what `edge deploy` writes).
    config = tmp_path / "deployed"
    files = DeployFiles(Layout(config).edge_deploy_dir("herdr-mcp-edge"))
    files.directory.mkdir(parents=True)
    files.admin_secret.write_text(ADMIN_SECRET + "\n")
    files.admin_secret.chmod(0o600)
    RECORD.write(files.record, {"worker": "herdr-mcp-edge", "origin": edge.base, "account_id": "a" * 32})
    status, answer = pair(config, "--name", "deployed-box")
    assert status == 0, answer
    print(f"link pair --edge {edge.base} (no --code): paired as {answer['device_id']} ({answer['name']})")
    assert answer["device_id"].startswith("dev_") and ADMIN_SECRET not in json.dumps(answer)
    assert Layout(config).edge_device_file.exists()

    # A wrong secret: the Edge refuses, nothing written.
    wrong = tmp_path / "wrong-secret"
    wrong.write_text("not-the-admin-secret-" + "x" * 20 + "\n")
    status, answer = pair(tmp_path / "wrong", "--admin-secret-file", str(wrong))
    assert (status, answer["error"]["code"]) == (3, "admin_unauthorized"), answer
    assert not Layout(tmp_path / "wrong").edge_device_file.exists()


def test_a_pairing_body_over_4_kib_is_refused_without_reading_it_whole(edge: Edge) -> None:
    """A valid code padded past PAIR_BODY_MAX_BYTES: refused whether the body declares its length
    or comes chunked (edge/src/http.ts readCappedText stops reading at the cap)."""
    code = edge.start_pairing()["code"]
    body = json.dumps({"code": code, "name": "ws-big", "pad": "x" * 5000}).encode()
    declared = edge.post("/link/pair", content=body, headers={"content-type": "application/json"})
    chunked = edge.post("/link/pair", content=iter([body[:3000], body[3000:]]))
    assert (declared.status_code, error_code(declared)) == (400, "invalid_argument")
    assert (chunked.status_code, error_code(chunked)) == (400, "invalid_argument")
    fine = edge.post("/link/pair", json={"code": code, "name": "ws-big"})
    assert fine.status_code == 200, fine.text
