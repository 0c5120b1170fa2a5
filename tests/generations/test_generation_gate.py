"""The activation gate against REAL runtimes: two `herdr-mcp serve` processes on loopback, each
with its own config dir (own token, own state.db), one simulated Herdr behind both; plus a small
misbehaving HTTP server for the answers a real runtime never gives (HTTP 500, oversized or
malformed tool lists)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp import __version__
from herdr_mcp.cli.generation import main
from herdr_mcp.contract import CURRENT_EPOCH, ContractIdentity, contract_identity, identity_of, load_catalog
from herdr_mcp.errors import EXIT_REFUSED
from herdr_mcp.generations import (
    ActivationResult,
    ControlFile,
    Generation,
    GenerationStore,
    Observation,
    activate,
    recover_interrupted,
    rollback,
)
from tests.support.logging_proxy import LoggingProxy, closed_port_url, proxy_env
from tests.support.runtime_harness import RunningRuntime, running_runtime, two_runtimes
from tests.support.sim_helpers import short_tmp_dir
from tests.support.waiting import wait_until


@dataclass
class World:
    a: RunningRuntime
    b: RunningRuntime
    sim_socket: Path
    tmp: Path


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with short_tmp_dir() as tmp, two_runtimes(tmp) as (a, b):
        yield World(a, b, tmp / "herdr.sock", tmp)


def generation(
    name: str,
    runtime: RunningRuntime,
    *,
    expected_runtime_version: str | None = None,
    expected_contract: ContractIdentity | None = None,
) -> Generation:
    """A generation spec for a running runtime, reading the bearer from its own config dir."""
    return Generation(
        generation=name,
        endpoint=runtime.base,
        expected_runtime_version=expected_runtime_version,
        expected_contract=expected_contract,
        token_file=str(runtime.config_dir / "token"),
    )


def store_with(
    state_dir: Path, *specs: Generation, checks: int = 2, interval_ms: int = 50
) -> GenerationStore:
    store = GenerationStore.in_dir(state_dir)
    store.write_control(
        ControlFile(generations=specs, observation=Observation(checks, interval_ms)), expected_revision=0
    )
    return store


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def pointers(result: ActivationResult) -> tuple[str, str | None, str | None]:
    return result.outcome, result.active, result.previous


def test_activate_switch_and_rollback(world: World, tmp_path: Path) -> None:
    store = store_with(
        tmp_path / "generations",
        generation("A", world.a, expected_runtime_version=__version__, expected_contract=contract_identity()),
        generation("B", world.b, expected_contract=contract_identity()),
    )

    first = activate(store, "A")
    assert pointers(first) == ("activated", "A", None)
    assert first.validation is not None
    assert first.validation.contract_hash == contract_identity().hash
    assert first.validation.tool_count == 18
    assert first.validation.runtime_version == __version__
    assert pointers(activate(store, "A")) == ("active_unchanged", "A", None)

    assert pointers(activate(store, "B")) == ("activated", "B", "A")
    status = store.read_status()
    assert (status.active, status.previous, status.last_good) == ("B", "A", "B")
    assert status.status_of("A").phase == "standby"
    assert status.processed_revision == store.read_control().revision == 3

    assert pointers(rollback(store)) == ("activated", "A", "B")
    status = store.read_status()
    assert (status.active, status.previous, status.last_good, status.transition_seq) == ("A", "B", "A", 3)
    assert store.read_control().desired_active == "A"

    # Both files are 0600 and hold neither runtime's token (nor any part of it).
    for path in (store.control_path, store.status_path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        text = path.read_text()
        for runtime in (world.a, world.b):
            assert runtime.token not in text
            assert runtime.token[:12] not in text


def test_wrong_expected_contract_is_rejected_and_active_stays(world: World, tmp_path: Path) -> None:
    store = store_with(
        tmp_path,
        generation("A", world.a),
        generation("B", world.b, expected_contract=contract_identity(4)),
    )
    assert pointers(activate(store, "A")) == ("activated", "A", None)
    rejected = activate(store, "B")
    assert pointers(rejected) == ("candidate_rejected:contract_mismatch", "A", None)
    assert "not the expected contract" in rejected.message
    status = store.read_status()
    assert status.active == "A"
    assert status.outcome == "candidate_rejected:contract_mismatch"
    assert status.status_of("B").phase == "rejected"
    validation = status.status_of("B").validation
    assert validation is not None
    # What B really serves is recorded: the epoch-5 catalog, hashed as epoch 4 was expected.
    assert (validation.ok, validation.tool_count) == (False, 18)
    assert validation.contract_hash == contract_identity(5).hash


def test_missing_tools_and_version_mismatch(world: World, tmp_path: Path) -> None:
    bigger = ContractIdentity(epoch=5, hash="sha256:" + "0" * 64, tool_count=19)
    store = store_with(
        tmp_path,
        generation("more", world.a, expected_contract=bigger),
        generation("newer", world.b, expected_runtime_version="99.0.0"),
    )
    assert activate(store, "more").outcome == "candidate_rejected:missing_tools"
    assert activate(store, "newer").outcome == "candidate_rejected:version_mismatch"
    assert store.read_status().active is None


def test_dead_endpoint_and_wrong_token(world: World, tmp_path: Path) -> None:
    wrong_token = tmp_path / "wrong-token"
    wrong_token.write_text("x" * 40)
    wrong_token.chmod(0o600)
    store = store_with(
        tmp_path / "state",
        generation("A", world.a),
        Generation("dead", f"http://127.0.0.1:{free_port()}"),
        Generation("stranger", world.b.base, token_file=str(wrong_token)),
    )
    assert activate(store, "A").outcome == "activated"
    assert pointers(activate(store, "dead")) == ("candidate_rejected:health_unreachable", "A", None)
    assert pointers(activate(store, "stranger")) == ("candidate_rejected:catalog_http_401", "A", None)
    assert store.read_status().active == "A"

    tokenless = store_with(
        tmp_path / "other", Generation("A", world.a.base, token_file=str(tmp_path / "missing"))
    )
    assert activate(tokenless, "A").outcome == "candidate_rejected:token_unavailable"


def test_default_token_is_the_config_dirs(world: World, tmp_path: Path) -> None:
    # The default state dir is <config dir>/generations, so the default token is <config dir>/token.
    state = world.a.config_dir / f"generations-{tmp_path.name}"
    try:
        store = store_with(state, Generation("A", world.a.base))
        assert activate(store, "A").outcome == "activated"
    finally:
        for path in sorted(state.iterdir()):
            path.unlink()
        state.rmdir()


@pytest.mark.slow
def test_candidate_dying_during_observation_is_rolled_back(world: World, tmp_path: Path) -> None:
    with running_runtime(world.sim_socket, world.tmp / f"config-c-{os.getpid()}") as c:
        store = store_with(tmp_path, generation("A", world.a), generation("C", c), checks=3, interval_ms=50)
        assert activate(store, "A").outcome == "activated"
        sleeps: list[float] = []

        def sleep_then_kill(seconds: float) -> None:
            # The switch is recorded before the first observation: the link would route to C now.
            if not sleeps:
                assert store.read_status().active == "C"
                c.process.kill()
                c.process.wait(timeout=10)
            sleeps.append(seconds)

        result = activate(store, "C", sleep=sleep_then_kill)
    assert pointers(result) == ("rolled_back:health_unreachable", "A", None)
    assert sleeps == [0.05]
    status = store.read_status()
    assert (status.active, status.last_good, status.transition_seq) == ("A", "A", 3)
    assert status.status_of("C").phase == "failed"
    assert status.status_of("A").phase == "active"


def test_sigkill_during_observation_is_repaired(world: World, tmp_path: Path) -> None:
    store = store_with(tmp_path, generation("A", world.a), generation("B", world.b))
    assert activate(store, "A").outcome == "activated"
    assert recover_interrupted(store) is None
    # A long observation, so the activator is surely asleep in it when it is killed.
    control = store.read_control()
    store.write_control(
        replace(control, observation=Observation(3, 5000)), expected_revision=control.revision
    )
    code = "import sys; from herdr_mcp.cli.generation import main; sys.exit(main(sys.argv[1:]))"
    activator = subprocess.Popen(
        [sys.executable, "-c", code, "--state-dir", str(tmp_path), "activate", "B"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: store.read_status().outcome == "observing", "the activation's observation")
        assert store.read_status().active == "B"
    finally:
        activator.send_signal(signal.SIGKILL)
        activator.wait(timeout=10)

    repaired = recover_interrupted(store)
    assert repaired is not None
    assert (repaired.active, repaired.previous, repaired.outcome) == (
        "A",
        None,
        "rolled_back:activation_interrupted",
    )
    assert repaired.status_of("B").phase == "failed"
    assert pointers(activate(store, "A")) == ("active_unchanged", "A", None)


@pytest.mark.slow
def test_cli_activate_and_rollback(world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = ["--state-dir", str(tmp_path)]
    for name, runtime in (("A", world.a), ("B", world.b)):
        register = ["register", "--id", name, "--endpoint", runtime.base, "--expected-epoch", "5"]
        assert main([*state, *register, "--token-file", str(runtime.config_dir / "token")]) == 0
    dead = f"http://127.0.0.1:{free_port()}"
    assert main([*state, "register", "--id", "dead", "--endpoint", dead]) == 0
    capsys.readouterr()

    assert main([*state, "activate", "A"]) == 0
    assert capsys.readouterr().out.startswith("activated: generation A is active")
    assert main([*state, "activate", "B", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["outcome"], shown["active"], shown["previous"]) == ("activated", "B", "A")
    assert main([*state, "activate", "dead"]) == EXIT_REFUSED
    assert capsys.readouterr().err.startswith("herdr-mcp: error: candidate_rejected:health_unreachable: ")
    assert main([*state, "remove", "B"]) == 2
    assert "generation_active" in capsys.readouterr().err
    assert main([*state, "rollback"]) == 0
    assert capsys.readouterr().out.startswith("activated: generation A is active")
    assert main([*state, "status"]) == 0
    out = capsys.readouterr().out
    assert "active A  previous B  last good A" in out
    assert "* A " in out


class _FakeGeneration(http.server.BaseHTTPRequestHandler):
    """A misbehaving 'generation': /health and /mcp answers chosen by the server's `mode`."""

    server: _FakeServer

    def do_GET(self) -> None:
        if self.server.mode == "health_500":
            self._answer(500, b"{}")
            return
        contract = self.server.declared.to_dict()
        self._answer(200, json.dumps({"status": "ok", "version": __version__, "contract": contract}).encode())

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        message = json.loads(self.rfile.read(length))
        if "id" not in message:
            self._answer(202, b"")
            return
        if message["method"] == "initialize":
            result: object = {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "fake", "version": "0"},
            }
        elif self.server.mode == "huge":
            result = {"tools": [], "padding": "x" * (3 * 1024 * 1024)}
        elif self.server.tools is not None:
            result = {"tools": self.server.tools}
        elif self.server.mode == "huge_integer":
            result = {"tools": [{"name": "herdr_inspect", "inputSchema": {"maximum": 2**60}}]}
        elif self.server.mode == "duplicate_key":
            # The frozen catalog with one key given twice: a reader that keeps the last one sees
            # the frozen catalog, one that keeps the first sees another description.
            frozen = json.dumps(load_catalog())
            twice = frozen.replace('"description": ', '"description": "first reading", "description": ', 1)
            body = f'{{"jsonrpc": "2.0", "id": {message["id"]}, "result": {{"tools": {twice}}}}}'
            self._answer(200, body.encode())
            return
        else:
            result = {"tools": "not a list"}
        self._answer(200, json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode())

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


class _FakeServer(http.server.ThreadingHTTPServer):
    mode = ""
    #: The tool array tools/list serves as is (None: the `mode` answer).
    tools: list[dict[str, Any]] | None = None
    #: The contract /health declares.
    declared = contract_identity()


@contextlib.contextmanager
def fake_generation(tmp_path: Path, **settings: Any) -> Iterator[GenerationStore]:
    """A `_FakeServer` with `settings` (mode, tools, declared), registered as generation "fake"
    (no expected contract) in a store under `tmp_path`."""
    token = tmp_path / "token"
    token.write_text("t" * 32)
    token.chmod(0o600)
    with _FakeServer(("127.0.0.1", 0), _FakeGeneration) as server:
        for name, value in settings.items():
            setattr(server, name, value)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            port = server.server_address[1]
            yield store_with(
                tmp_path / "state", Generation("fake", f"http://127.0.0.1:{port}", token_file=str(token))
            )
        finally:
            server.shutdown()
            thread.join()


@pytest.mark.parametrize(
    ("mode", "outcome"),
    [
        ("health_500", "candidate_rejected:health_http_500"),
        ("huge", "candidate_rejected:catalog_too_large"),
        ("malformed", "candidate_rejected:catalog_malformed"),
        ("duplicate_key", "candidate_rejected:catalog_malformed"),
        ("huge_integer", "candidate_rejected:catalog_malformed"),
    ],
)
def test_misbehaving_candidates_are_rejected(tmp_path: Path, mode: str, outcome: str) -> None:
    with fake_generation(tmp_path, mode=mode) as store:
        assert pointers(activate(store, "fake")) == (outcome, None, None)


def _edited_catalog(edit: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """The frozen catalog of this epoch as served, with `edit` applied to its herdr_fs_read."""
    tools = load_catalog()
    edit(next(tool for tool in tools if tool["name"] == "herdr_fs_read"))
    return tools


_CATALOG_EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "extra_tool_field": lambda tool: tool.update({"x-unlisted": True}),
    "extra_annotation": lambda tool: tool["annotations"].update({"secretHint": True}),
    "missing_field": lambda tool: tool["annotations"].pop("title"),
    "changed_annotation": lambda tool: tool["annotations"].update({"readOnlyHint": False}),
}


def test_the_frozen_catalog_as_served_is_activated(tmp_path: Path) -> None:
    # The control case for the edits below: the exact frozen array, served raw, passes.
    with fake_generation(tmp_path, tools=load_catalog()) as store:
        result = activate(store, "fake")
    assert pointers(result) == ("activated", "fake", None)
    assert result.validation is not None and result.validation.contract_hash == contract_identity().hash


@pytest.mark.parametrize("edit", sorted(_CATALOG_EDITS))
@pytest.mark.parametrize("registered", [True, False])
def test_a_catalog_that_differs_from_the_frozen_one_in_any_field_is_refused(
    tmp_path: Path, edit: str, registered: bool
) -> None:
    # tools/list is compared as served: a field the SDK's models would drop (an extra one on a
    # tool or in its annotations) counts like a missing or changed one. Whether the contract is
    # registered or only declared by the candidate's /health (consistently with what it serves),
    # the frozen catalog of that epoch is the reference.
    tools = _edited_catalog(_CATALOG_EDITS[edit])
    with fake_generation(tmp_path, tools=tools, declared=identity_of(tools, CURRENT_EPOCH)) as store:
        if registered:
            spec = replace(store.read_control().find("fake"), expected_contract=contract_identity())
            control = store.read_control()
            store.write_control(replace(control, generations=(spec,)), expected_revision=control.revision)
        result = activate(store, "fake")
    assert pointers(result) == ("candidate_rejected:contract_mismatch", None, None)
    status = store.read_status()
    assert (status.active, status.last_good, status.status_of("fake").phase) == (None, None, "rejected")
    assert result.validation is not None
    assert (
        result.validation.contract_hash == identity_of(tools, CURRENT_EPOCH).hash != contract_identity().hash
    )


# -- bearer tokens never go through a proxy ---------------------------------------------------


def _activate_in_a_process(state: Path, name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`herdr-mcp generation activate <name>` as its own process, with `env` over ours."""
    return subprocess.run(
        [sys.executable, "-m", "herdr_mcp", "generation", "--state-dir", str(state), "activate", name],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


@pytest.mark.parametrize("proxy_mode", ["forward", "fail", "unreachable"])
def test_generation_activate_sends_nothing_through_a_proxy(
    world: World, tmp_path: Path, proxy_mode: str
) -> None:
    # Every proxy variable, both cases, names a proxy that logs (and forwards, or fails) or a
    # closed port; the gate's requests carry the runtime's bearer and must go straight to it.
    store_with(
        tmp_path,
        generation("A", world.a, expected_contract=contract_identity()),
        generation("B", world.b, expected_contract=contract_identity()),
    )
    with LoggingProxy("fail" if proxy_mode == "fail" else "forward") as proxy:
        env = proxy_env(closed_port_url() if proxy_mode == "unreachable" else proxy.url)
        for name in ("A", "B"):
            done = _activate_in_a_process(tmp_path, name, env)
            assert done.returncode == 0, (done.stdout, done.stderr)
            assert done.stdout.startswith(f"activated: generation {name} is active"), done.stdout
        assert proxy.requests() == []
