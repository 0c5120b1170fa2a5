"""`herdr-mcp start` from a checkout, on a workstation with no generation: the link answers
tools/call (the `mcp` SDK client through the link), the real native host reaches the active
runtime, a second run changes nothing, and the DEV plane with no PROD pin shows in `dev status`.
Also: the native host finds the active runtime's socket when a generation registered by hand
listens on `runtime.sock` (and refuses a runtime.sock that is another runtime), and `service
install` refuses a checkout's venv and writes no `update auto` job without a release repository.

Everything real: the build, bundle and offline install of a snapshot of this tree (as `dev sync`
does), the gate, the runtimes, the link, the native host, the Herdr simulator, the CLI as its own
process. Only `systemctl` is a recording script on PATH (no systemd runs here; tests/service/test_service.py
checks the rendered units with `systemd-analyze verify`).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.browser_ipc import active_socket
from herdr_mcp.generations import GenerationStore
from herdr_mcp.layout import Layout
from herdr_mcp.local_http import local_client
from herdr_mcp.service import detached
from herdr_mcp.sim import SimConfig, SimulatorThread
from herdr_mcp.update.paths import UpdatePaths
from tests.support.native_host_harness import native_host
from tests.support.release_builder import ROOT, snapshot_tree, stop_all
from tests.support.runtime_harness import make_repo, mcp_client, running_runtime
from tests.support.sim_helpers import short_tmp_dir

CLI = [sys.executable, "-m", "herdr_mcp"]
#: `start` from a checkout builds a wheel, bundles ~30 wheels and installs them offline.
START_TIMEOUT_S = 600
CLI_TIMEOUT_S = 120


def herdr_mcp(
    *argv: str, env: dict[str, str] | None = None, timeout: float = CLI_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *argv], capture_output=True, text=True, timeout=timeout, check=False, env=env
    )


def answer(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def error_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    error: dict[str, Any] = json.loads(done.stdout)["error"]
    return error


def _git_commit(checkout: Path, message: str, *first: list[str]) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.invalid"}
    env |= {"GIT_COMMITTER_NAME": "dev", "GIT_COMMITTER_EMAIL": "dev@example.invalid"}
    for command in (*first, ["add", "-A"], ["commit", "-q", "-m", message]):
        subprocess.run(["git", *command], cwd=checkout, check=True, env=env)


def _commit_snapshot(checkout: Path) -> None:
    snapshot_tree(ROOT, checkout)
    _git_commit(checkout, "the checkout", ["init", "-q", "-b", "main"])


@dataclass
class Started:
    config: Path
    checkout: Path
    first: dict[str, Any]
    start_args: list[str]

    @property
    def store(self) -> GenerationStore:
        return GenerationStore.in_dir(Layout(self.config).generations_dir)


@pytest.fixture(scope="module")
def started() -> Iterator[Started]:
    """`herdr-mcp start` once, from a snapshot of this tree, with runtime options passed through."""
    with short_tmp_dir() as tmp:
        checkout, config = tmp / "checkout", tmp / "config"
        _commit_snapshot(checkout)
        repo = make_repo(tmp / "repo", {"README.md": b"# demo\n"})
        socket = tmp / "herdr.sock"
        with SimulatorThread(SimConfig.for_roots([repo]), socket):
            start_args = [
                "start", "--config-dir", str(config), "--source", str(checkout), "--link-port", "0",
                "--no-sim", "--herdr-socket", str(socket), "--write-root", str(repo),
            ]  # fmt: skip
            try:
                first = answer(herdr_mcp(*start_args, "--json", timeout=START_TIMEOUT_S))
                yield Started(config, checkout, first, start_args)
            finally:
                herdr_mcp("stop", "--config-dir", str(config))
                stop_all(UpdatePaths(config))


@pytest.mark.slow
def test_start_from_a_checkout_activates_a_dev_generation_in_its_own_venv_and_the_link_answers(
    started: Started,
) -> None:
    first = started.first
    print(f"\nstart: changed={first['changed']} plane={first['plane']!r}")
    print(f"start: generation {first['generation']} at {first['endpoint']}, link {first['link']['url']}")
    assert first["changed"] is True
    assert first["plane"].startswith("DEV: built from the checkout") and "no PROD pinned" in first["plane"]
    spec = started.store.read_control().find(first["generation"])
    assert spec.provenance is not None and spec.provenance["plane"] == "dev"
    assert spec.provenance["path"] == str(started.checkout)
    # Its own venv under <config>/runtimes/<id>/, not the .venv ./scripts/serve rebuilds.
    assert spec.executable == str(
        started.config / "runtimes" / spec.generation / "venv" / "bin" / "herdr-mcp"
    )
    launch = json.loads((started.config / "runtimes" / spec.generation / "launch.json").read_text())
    assert "--no-sim" in launch["serve_args"] and "--write-root" in launch["serve_args"]
    assert first["link"]["mode"] == "detached"

    async def call() -> Any:
        token = (started.config / "link-token").read_text().strip()
        async with mcp_client(first["link"]["url"], token) as client:
            return await client.call_tool("herdr_inspect", {})

    result = asyncio.run(call())
    print(f"link tools/call herdr_inspect: is_error={result.is_error}")
    assert not result.is_error, result


@pytest.mark.slow
def test_the_native_host_reaches_the_runtime_start_activated(started: Started) -> None:
    generation = started.first["generation"]
    assert active_socket(Layout(started.config)) == started.config / "ipc" / f"{generation}.sock"
    with native_host(started.config) as host:
        host.send({"id": "state", "method": "GET", "path": "/push/state"})
        reply = host.message("state")
    print(f"\nnative host GET /push/state: status {reply['status']}")
    assert reply["status"] == 200, reply


@pytest.mark.slow
def test_a_second_start_changes_nothing(started: Started) -> None:
    store = started.store
    before = (store.control_path.read_bytes(), store.status_path.read_bytes())
    link_pid = (started.config / "link.pid").read_bytes()
    again = answer(herdr_mcp(*started.start_args, "--json"))
    text = herdr_mcp(*started.start_args)
    print(f"\nsecond start: changed={again['changed']} done={again['done']}; {text.stdout.splitlines()[0]}")
    assert again["changed"] is False and again["done"] == [] and again["notes"] == []
    assert text.returncode == 0 and text.stdout.startswith("already up: nothing changed")
    assert (store.control_path.read_bytes(), store.status_path.read_bytes()) == before
    assert (started.config / "link.pid").read_bytes() == link_pid
    # A new commit in the checkout is not built by start (that is `dev sync`): it says so, changes nothing.
    (started.checkout / "NEW").write_text("x\n")
    _git_commit(started.checkout, "a new commit")
    noted = answer(herdr_mcp(*started.start_args, "--json"))
    print(f"after a new commit: changed={noted['changed']}, note: {noted['notes']}")
    assert noted["changed"] is False and "`herdr-mcp dev sync` runs it" in noted["notes"][0]
    assert (store.control_path.read_bytes(), store.status_path.read_bytes()) == before
    # Other runtime options for the running generation are refused, not applied behind its back.
    other = herdr_mcp(*started.start_args, "--read-only", "--json")
    print(f"start with other options: exit {other.returncode}, {error_of(other)['code']}")
    assert other.returncode == 2 and error_of(other)["code"] == "start_options_differ"


@pytest.mark.slow
def test_the_checkout_only_dev_plane_shows_and_has_nothing_to_roll_back_to(started: Started) -> None:
    config = str(started.config)
    status = answer(herdr_mcp("dev", "--config-dir", config, "status", "--json"))
    print(f"\ndev status: {status['summary']}")
    assert status["plane"] == "dev" and status["pinned_prod"] is None
    assert status["active"] == started.first["generation"]
    assert status["active_provenance"]["plane"] == "dev"
    back = herdr_mcp("dev", "--config-dir", config, "rollback", "--json")
    print(f"dev rollback: exit {back.returncode}, {error_of(back)['code']}")
    assert back.returncode == 3 and error_of(back)["code"] == "dev_no_prod_pin"
    auto = answer(herdr_mcp("update", "auto", "--json", env={**os.environ, "HERDR_MCP_CONFIG_DIR": config}))
    print(f"update auto: {auto['action']} ({auto['reason']})")
    assert auto["action"] == "skipped" and auto["reason"] == "plane_not_prod"


@pytest.mark.slow
def test_start_service_installs_the_services_on_the_dev_generation_without_an_update_job(
    started: Started, tmp_path: Path
) -> None:
    """`start --service` (after the tests above: it replaces the detached link): the units run the
    DEV generation's own executable (`generation up`, `link`), not the checkout's .venv, and no
    update job is written (no release repository; a DEV plane). systemctl is a recording script."""
    bin_dir, log = tmp_path / "fakebin", tmp_path / "systemctl.log"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "systemctl $*" >> "{log}"\nexit 0\n')
    (bin_dir / "systemctl").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "XDG_CONFIG_HOME": str(tmp_path),
    }
    done = herdr_mcp(*started.start_args, "--service", "--json", env=env)
    document = answer(done)
    units = tmp_path / "systemd" / "user"
    names = sorted(path.name for path in units.iterdir())
    runtime_unit = (units / "herdr-mcp-runtime.service").read_text()
    exe = started.store.read_control().find(started.first["generation"]).executable
    print(f"\nstart --service: {document['done']}; units {names}")
    assert names == ["herdr-mcp-link.service", "herdr-mcp-runtime.service"]
    assert f'ExecStart="{exe}" "generation" "up"' in runtime_unit
    assert f'ExecStart="{exe}" "link"' in (units / "herdr-mcp-link.service").read_text()
    assert "no daily `update auto` job is scheduled" in done.stderr
    assert document["link"]["mode"] == "service"
    assert "stopped the detached link (the services run the link now)" in document["done"]
    assert any(line.startswith("installed the user services into") for line in document["done"])
    assert detached.running_link(started.config) is None
    assert "systemctl --user restart herdr-mcp-runtime.service herdr-mcp-link.service" in log.read_text()
    # Run again: the services are installed as they would be written, so nothing is restarted.
    calls = log.read_text()
    again = answer(herdr_mcp(*started.start_args, "--service", "--json", env=env))
    print(f"start --service again: changed={again['changed']}")
    assert again["changed"] is False and log.read_text() == calls


@pytest.mark.slow
def test_an_install_that_is_neither_a_release_nor_a_checkout_is_refused(
    started: Started, tmp_path: Path
) -> None:
    """The DEV generation's own herdr-mcp, on another (empty) config dir, is a venv installed from
    a wheelhouse with no checkout behind it: `start` refuses, naming `herdr-mcp update`."""
    exe = started.store.read_control().find(started.first["generation"]).executable
    assert exe is not None
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        [exe, "start", "--config-dir", str(tmp_path / "fresh"), "--link-port", "0", "--json"],
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False, env=env,
    )  # fmt: skip
    print(f"\nstart from {exe} on an empty config dir: exit {done.returncode}, {error_of(done)['code']}")
    assert done.returncode == 3 and error_of(done)["code"] == "start_not_installable"
    assert "herdr-mcp update" in error_of(done)["message"]
    assert not (tmp_path / "fresh" / "runtimes").exists()


def test_no_active_generation_names_the_command_that_fixes_it(tmp_path: Path) -> None:
    from tests.support.link_harness import running_link

    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "herdr_inspect"}}
    with (
        running_link(tmp_path / "generations", tmp_path / "link-token") as link,
        local_client(timeout=CLI_TIMEOUT_S) as http,
    ):
        reply = http.post(link.url, json=call, headers={"Authorization": f"Bearer {link.token}"})
    error = reply.json()["error"]
    print(f"\nlink with no generation: {reply.status_code} {error['data'].get('reason')}: {error['message']}")
    assert reply.status_code == 503 and error["data"]["reason"] == "no_active_generation"
    assert "run `herdr-mcp start`" in error["message"]


# -- the native host's socket when a generation was registered by hand ---------------------------


def test_a_hand_registered_generation_on_runtime_sock_is_reached_and_another_runtime_is_not() -> None:
    """`./scripts/serve` (a runtime on `<config>/ipc/runtime.sock`) registered and activated by
    hand: the host reaches it; a generation whose endpoint is another runtime is never sent to
    the runtime that happens to listen on runtime.sock."""
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", {"README.md": b"# demo\n"})
        config = tmp / "c"
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"),
            running_runtime(tmp / "herdr.sock", config) as served,
            running_runtime(tmp / "herdr.sock", tmp / "other") as other,
        ):
            layout = Layout(config)
            assert layout.runtime_socket.exists()
            state = ["generation", "--state-dir", str(layout.generations_dir)]
            answer(herdr_mcp(*state, "register", "--id", "byhand", "--endpoint", served.base, "--json"))
            token = str(tmp / "other" / "token")
            elsewhere = ["--id", "elsewhere", "--endpoint", other.base, "--token-file", token, "--json"]
            answer(herdr_mcp(*state, "register", *elsewhere))
            assert answer(herdr_mcp(*state, "activate", "byhand", "--json"))["outcome"] == "activated"
            chosen = active_socket(layout)
            with native_host(config) as host:
                host.send({"id": "state", "method": "GET", "path": "/push/state"})
                reply = host.message("state")
            print(
                f"\nby hand on runtime.sock: active_socket {chosen.name}, GET /push/state {reply['status']}"
            )
            assert chosen == layout.runtime_socket and reply["status"] == 200, reply
            assert answer(herdr_mcp(*state, "activate", "elsewhere", "--json"))["outcome"] == "activated"
            chosen = active_socket(layout)
            with native_host(config) as host:
                host.send({"id": "state", "method": "GET", "path": "/push/state"})
                refused = host.message("state")
            print(f"active generation elsewhere: active_socket {chosen.name}, host: {refused.get('error')}")
            assert chosen == layout.generation_socket("elsewhere")
            assert refused["error"]["code"] == "runtime_unavailable", refused


# -- service install -----------------------------------------------------------------------------


@pytest.fixture
def fake_systemctl(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose PATH starts with a `systemctl` that logs its arguments and exits 0."""
    bin_dir, log = tmp_path / "fakebin", tmp_path / "systemctl.log"
    bin_dir.mkdir()
    script = bin_dir / "systemctl"
    script.write_text(f'#!/bin/sh\necho "systemctl $*" >> "{log}"\necho active\nexit 0\n')
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, log


def _fake_executable(path: Path) -> Path:
    path.parent.mkdir(parents=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def _service_install(tmp: Path, config: Path, executable: Path, env: dict[str, str] | None = None) -> Any:
    return herdr_mcp(
        "service", "install", "--platform", "systemd", "--config-dir", str(config),
        "--target-dir", str(tmp / "units"), "--executable", str(executable), "--json", env=env,
    )  # fmt: skip


def test_service_install_from_a_checkout_venv_is_refused(tmp_path: Path) -> None:
    checkout_exe = Path(sys.prefix) / "bin" / "herdr-mcp"  # this checkout's .venv, as ./scripts/serve made it
    done = _service_install(tmp_path, tmp_path / "config", checkout_exe)
    print(f"\nservice install --executable {checkout_exe}: exit {done.returncode}, {error_of(done)['code']}")
    assert done.returncode == 3 and error_of(done)["code"] == "service_from_checkout"
    assert "herdr-mcp start --service" in error_of(done)["message"]
    assert not (tmp_path / "units").exists() or not any((tmp_path / "units").iterdir())


def test_no_update_job_without_a_release_repository_and_one_with_it(
    tmp_path: Path, fake_systemctl: tuple[dict[str, str], Path]
) -> None:
    env, log = fake_systemctl
    exe = _fake_executable(tmp_path / "bin" / "herdr-mcp")
    config = tmp_path / "config"
    done = _service_install(tmp_path, config, exe, env)
    installed = answer(done)
    units = sorted(path.name for path in (tmp_path / "units").iterdir())
    print(f"\nwithout a repository: {units}; stderr: {done.stderr.strip().splitlines()[0]}")
    assert units == ["herdr-mcp-link.service", "herdr-mcp-runtime.service"]
    assert installed["update_job"] is False
    assert "no daily `update auto` job is scheduled: no release repository is configured" in done.stderr
    assert "herdr-mcp-update.timer" not in log.read_text()
    # With the repository the daily job reads (update-settings.json), the job is written and started.
    config.mkdir(exist_ok=True)
    (config / "update-settings.json").write_text('{"repository": "herdr-mcp/herdr-mcp", "repository_id": 1}')
    again = answer(_service_install(tmp_path, config, exe, env))
    units = sorted(path.name for path in (tmp_path / "units").iterdir())
    print(f"with a repository: {units}")
    assert (
        again["update_job"] is True
        and "herdr-mcp-update.timer" in units
        and "herdr-mcp-update.service" in units
    )
    assert "systemctl --user start herdr-mcp-update.timer" in log.read_text()
    # And taken away again when the repository is: no stale daily job is left behind.
    (config / "update-settings.json").unlink()
    removed = answer(_service_install(tmp_path, config, exe, env))
    units = sorted(path.name for path in (tmp_path / "units").iterdir())
    print(f"repository removed: {units}; removed {[Path(p).name for p in removed['removed']]}")
    assert units == ["herdr-mcp-link.service", "herdr-mcp-runtime.service"]
