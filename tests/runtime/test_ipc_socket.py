"""The runtime's Unix socket (docs/browser-protocol.md, section 1): `bind_ipc_socket`'s rules on
real files and sockets, and `herdr-mcp serve` (a real process) listening on loopback and on the
socket with the bearer required on both, `--ipc-socket`, `--no-ipc-socket`, a stale socket
replaced and a live one refused."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from herdr_mcp.errors import EXIT_LOCAL
from herdr_mcp.runtime.ipc import MAX_SOCKET_PATH_BYTES, IpcError, bind_ipc_socket
from herdr_mcp.sim import SimulatorThread
from tests.support.push_harness import two_agent_config
from tests.support.runtime_harness import close_pipes, running_runtime, stop_process
from tests.support.sim_helpers import short_tmp_dir
from tests.support.waiting import wait_until

CLI = [sys.executable, "-m", "herdr_mcp"]


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


def refused(path: Path) -> str:
    with pytest.raises(IpcError) as caught:
        bind_ipc_socket(path)
    return caught.value.code


def answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


# -- bind_ipc_socket ------------------------------------------------------------------------


def test_a_new_socket_is_0600_in_a_0700_dir_and_goes_away_on_close(tmp_short: Path) -> None:
    path = tmp_short / "config" / "ipc" / "runtime.sock"
    bound = bind_ipc_socket(path)
    try:
        assert path.is_socket() and answers(path)
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.lstat(path.parent).st_mode) == 0o700
        assert sorted(p.name for p in path.parent.iterdir()) == ["runtime.sock", "runtime.sock.lock"]
    finally:
        bound.close()
    assert not path.exists()


@pytest.mark.parametrize("mode", [0o755, 0o710, 0o701])
def test_an_existing_dir_open_to_others_is_refused(tmp_short: Path, mode: int) -> None:
    directory = tmp_short / "ipc"
    directory.mkdir()
    directory.chmod(mode)
    assert refused(directory / "runtime.sock") == "ipc_dir_unsafe"
    assert list(directory.iterdir()) == []


def test_a_symlinked_dir_is_refused(tmp_short: Path) -> None:
    real = tmp_short / "real"
    real.mkdir(mode=0o700)
    (tmp_short / "ipc").symlink_to(real)
    assert refused(tmp_short / "ipc" / "runtime.sock") == "ipc_dir_unsafe"


def test_a_stale_socket_is_replaced(tmp_short: Path) -> None:
    path = tmp_short / "ipc" / "runtime.sock"
    path.parent.mkdir(mode=0o700)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays, nothing listens: what a killed runtime leaves
    assert path.is_socket() and not answers(path)
    bound = bind_ipc_socket(path)
    try:
        assert answers(path)
    finally:
        bound.close()


def test_a_live_socket_is_refused_and_left_alone(tmp_short: Path) -> None:
    path = tmp_short / "ipc" / "runtime.sock"
    path.parent.mkdir(mode=0o700)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(path))
    other.listen(1)
    try:
        assert refused(path) == "ipc_socket_in_use"
        assert answers(path)
    finally:
        other.close()


def test_a_second_runtime_on_the_same_path_is_refused_by_the_lock(tmp_short: Path) -> None:
    path = tmp_short / "ipc" / "runtime.sock"
    first = bind_ipc_socket(path)
    try:
        assert refused(path) == "ipc_socket_in_use"
        assert answers(path)
    finally:
        first.close()
    bind_ipc_socket(path).close()  # free again once the first let go


def test_something_else_at_the_path_is_refused_not_deleted(tmp_short: Path) -> None:
    path = tmp_short / "ipc" / "runtime.sock"
    path.parent.mkdir(mode=0o700)
    path.write_text("not a socket")
    assert refused(path) == "ipc_path_not_socket"
    assert path.read_text() == "not a socket"


def test_a_path_too_long_for_a_socket_is_refused(tmp_short: Path) -> None:
    deep = tmp_short / ("d" * (MAX_SOCKET_PATH_BYTES - len(str(tmp_short)) - 10))
    assert refused(deep / "runtime.sock") == "ipc_socket_path_too_long"


# -- herdr-mcp serve -------------------------------------------------------------------------


def test_serve_listens_on_both_and_wants_the_bearer_on_both(tmp_short: Path) -> None:
    config = tmp_short / "config"
    with (
        SimulatorThread(two_agent_config(tmp_short), tmp_short / "herdr.sock"),
        running_runtime(tmp_short / "herdr.sock", config) as runtime,
    ):
        path = config / "ipc" / "runtime.sock"
        assert path.is_socket()
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.lstat(path.parent).st_mode) == 0o700
        bearer = {"Authorization": f"Bearer {runtime.token}"}
        tcp = httpx2.Client(base_url=runtime.base, trust_env=False, timeout=30)
        unix = httpx2.Client(
            transport=httpx2.HTTPTransport(uds=str(path)),
            base_url="http://localhost",
            trust_env=False,
            timeout=30,
        )
        with tcp, unix:
            for client in (tcp, unix):
                assert client.get("/health").json()["status"] == "ok"  # open, as on loopback
                for route in ("/push/state", "/mcp"):
                    assert client.get(route).status_code == 401
                    assert client.get(route, headers={"Authorization": "Bearer nope"}).status_code == 401
                refusal = client.post("/browser/binding.list", json={})
                assert refusal.status_code == 401
                assert refusal.json()["error"]["code"] == "unauthorized"
                state = client.get("/push/state", headers=bearer)
                assert state.status_code == 200
                assert [w["label"] for w in state.json()["workspaces"]] == ["api", "web"]
                listed = client.post("/browser/binding.list", json={}, headers=bearer)
                assert listed.json() == {"bindings": []}
    wait_until(lambda: not path.exists(), "serve to remove its socket on the way out")


def _serve(
    config: Path, herdr: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *CLI,
            "serve",
            "--no-sim",
            "--port",
            "0",
            "--config-dir",
            str(config),
            "--herdr-socket",
            str(herdr),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def test_a_live_socket_stops_a_second_serve_and_a_stale_one_is_replaced(tmp_short: Path) -> None:
    config = tmp_short / "config"
    herdr = tmp_short / "herdr.sock"
    path = config / "ipc" / "runtime.sock"
    with SimulatorThread(two_agent_config(tmp_short), herdr):
        first = _serve(config, herdr)
        try:
            assert (first.stdout.readline() if first.stdout else "").startswith("herdr-mcp serving ")
            second = subprocess.run(
                [*CLI, "serve", "--no-sim", "--port", "0", "--config-dir", str(config),
                 "--herdr-socket", str(herdr), "--json"],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert second.returncode == EXIT_LOCAL, second.stderr
            assert json.loads(second.stdout)["error"]["code"] == "ipc_socket_in_use"
            assert "Traceback" not in second.stderr
            first.send_signal(signal.SIGKILL)  # dies without removing its socket
            first.wait(timeout=30)
        finally:
            if first.poll() is None:
                stop_process(first)
            close_pipes(first)
        assert path.is_socket() and not answers(path)  # stale
        third = _serve(config, herdr)
        try:
            assert (third.stdout.readline() if third.stdout else "").startswith("herdr-mcp serving ")
            assert answers(path)
        finally:
            stop_process(third)
            close_pipes(third)


def test_ipc_socket_options_and_the_launcher_variable(tmp_short: Path) -> None:
    config = tmp_short / "config"
    herdr = tmp_short / "herdr.sock"
    chosen = tmp_short / "mine" / "x.sock"
    given = tmp_short / "given" / "g.sock"
    with SimulatorThread(two_agent_config(tmp_short), herdr):
        for extra, env, expected in (
            (("--no-ipc-socket",), {}, None),
            (("--ipc-socket", str(chosen)), {}, chosen),
            ((), {"HERDR_MCP_IPC_SOCKET": str(given)}, given),
        ):
            process = _serve(config, herdr, *extra, env=env)
            try:
                assert (process.stdout.readline() if process.stdout else "").startswith("herdr-mcp serving ")
                assert not (config / "ipc" / "runtime.sock").exists()
                if expected is not None:
                    assert expected.is_socket() and answers(expected)
            finally:
                stop_process(process)
                close_pipes(process)
        both = subprocess.run(
            [*CLI, "serve", "--ipc-socket", str(chosen), "--no-ipc-socket", "--json"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert both.returncode == 2 and json.loads(both.stdout)["error"]["code"] == "invalid_argument"
        too_long = subprocess.run(
            [*CLI, "serve", "--no-sim", "--port", "0", "--config-dir", str(config),
             "--herdr-socket", str(herdr), "--ipc-socket", str(tmp_short / ("x" * 120)), "--json"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert too_long.returncode == EXIT_LOCAL
        assert json.loads(too_long.stdout)["error"]["code"] == "ipc_socket_path_too_long"
