"""`herdr-mcp generation up`: the managed generations' runtimes are started again after they
die, on the ports the gate validated (or a free one, with the endpoint updated), an interrupted
activation is undone, generations registered by hand are left alone, SIGTERM stops what it
keeps; and the runtime service runs it once the active generation is managed."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx2
import pytest

from herdr_mcp.generations import Generation, GenerationStore, Observation
from herdr_mcp.generations.control import GenerationStatus, Validation
from herdr_mcp.generations.process import runtime_pid, runtimes_dir, start_runtime, stop_runtime
from herdr_mcp.service.units import CommandResult, ServiceConfig
from herdr_mcp.update.apply import start_and_activate
from herdr_mcp.update.paths import UpdatePaths
from tests.support.processes import alive
from tests.support.runtime_harness import make_repo
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow  # every test starts managed generations (real runtimes)


def _managed_executable(config: Path, generation: str) -> Path:
    """A console script like the one a generation venv holds, inside the generation's runtime dir."""
    path = runtimes_dir(config) / generation / "venv" / "bin" / "herdr-mcp"
    path.parent.mkdir(parents=True)
    path.write_text(f"#!{sys.executable}\nimport sys\nfrom herdr_mcp.cli import main\nsys.exit(main())\n")
    path.chmod(0o700)
    return path


@dataclass
class Managed:
    paths: UpdatePaths

    @property
    def store(self) -> GenerationStore:
        return self.paths.generations

    def endpoint(self, name: str) -> str:
        return self.store.read_control().find(name).endpoint

    def healthy(self, name: str) -> bool:
        try:
            return httpx2.get(f"{self.endpoint(name)}/health", timeout=5).status_code == 200
        except httpx2.HTTPError:
            return False

    def up(self, *extra: str) -> subprocess.CompletedProcess[str]:
        command = [
            sys.executable, "-m", "herdr_mcp", "generation",
            "--state-dir", str(self.store.state_dir), "up", *extra,
        ]  # fmt: skip
        return subprocess.run(command, capture_output=True, text=True, timeout=120)


def _kill(runtime_dir: Path) -> None:
    """SIGKILL the generation's runtime and wait until it has exited (a zombie holds no socket)."""
    pid = runtime_pid(runtime_dir)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)

    def exited() -> bool:
        if alive(pid):  # every thread gone (they share the listening socket), not the main one only
            return False
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        return True

    if sys.platform == "linux":
        wait_until(exited, f"runtime {pid} to exit")
    wait_until(lambda: runtime_pid(runtime_dir) is None, "the runtime's pid file to go")


@pytest.fixture
def managed(tmp_path: Path) -> Iterator[Managed]:
    """Generations A then B, both managed, started and activated (A previous, B active)."""
    from herdr_mcp.sim import SimConfig, SimulatorThread

    config = tmp_path / "config"
    config.mkdir(mode=0o700)
    paths = UpdatePaths(config)
    repo = make_repo(tmp_path / "repo", {"README.md": b"# demo\n"})
    herdr = tmp_path / "herdr.sock"
    with SimulatorThread(SimConfig.for_roots([repo]), herdr):
        try:
            for name in ("A", "B"):
                spec = Generation(
                    name, "http://127.0.0.1:1", executable=str(_managed_executable(config, name))
                )
                result = start_and_activate(paths, spec, ["--no-sim", "--herdr-socket", str(herdr)])
                assert result.outcome == "activated", result
                if name == "A":
                    # A short observation from B's activation on (the control file exists once
                    # A is in it; the default, 3 checks 500 ms apart, is observed nowhere here).
                    control = paths.generations.read_control()
                    paths.generations.write_control(
                        replace(control, observation=Observation(checks=1, interval_ms=50)),
                        expected_revision=control.revision,
                    )
            yield Managed(paths)
        finally:
            for name in ("A", "B", "C", "D"):
                stop_runtime(runtimes_dir(config) / name, grace_s=5)


def test_dead_runtimes_come_back_on_their_ports_and_a_taken_port_moves_the_endpoint(managed: Managed) -> None:
    status = managed.store.read_status()
    assert (status.active, status.previous) == ("B", "A")
    before = {name: managed.endpoint(name) for name in ("A", "B")}
    for name in ("A", "B"):
        _kill(runtimes_dir(managed.paths.config_dir) / name)
        assert not managed.healthy(name)

    done = managed.up("--once")
    assert done.returncode == 0, done.stderr
    assert "started A" in done.stderr and "started B" in done.stderr
    assert {name: managed.endpoint(name) for name in ("A", "B")} == before
    assert managed.healthy("A") and managed.healthy("B")
    assert managed.up("--once").stderr == ""  # nothing to do

    # B's port is taken by someone else meanwhile: B comes back elsewhere, the control file says where.
    _kill(runtimes_dir(managed.paths.config_dir) / "B")
    port = int(before["B"].rsplit(":", 1)[1])
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        revision = managed.store.read_control().revision
        done = managed.up("--once")
        assert done.returncode == 0, done.stderr
        assert managed.endpoint("B") != before["B"]
        assert managed.store.read_control().revision == revision + 1
        assert managed.healthy("B")


def test_an_interrupted_activation_is_undone_and_unmanaged_generations_are_left_alone(
    managed: Managed, tmp_path: Path
) -> None:
    store = managed.store
    # A hand-registered generation (its executable elsewhere) is never started here.
    elsewhere = tmp_path / "elsewhere" / "herdr-mcp"
    elsewhere.parent.mkdir()
    elsewhere.write_text("#!/bin/sh\nexit 1\n")
    with store.locked():
        control = store.read_control()
        hand = Generation("C", "http://127.0.0.1:9", executable=str(elsewhere))
        store.write_control_locked(
            replace(control, generations=(*control.generations, hand)), expected_revision=control.revision
        )
        status = store.read_status()
        # The activator of C died while observing it.
        store.write_status_locked(
            replace(status, active="C", previous="B", outcome="observing").with_generation(
                GenerationStatus("C", "active", Validation(ok=True))
            )
        )
    done = managed.up("--once")
    assert done.returncode == 0, done.stderr
    assert "undid an interrupted activation" in done.stderr
    status = store.read_status()
    assert (status.active, status.outcome) == ("B", "rolled_back:activation_interrupted")
    assert not (runtimes_dir(managed.paths.config_dir) / "C").exists()


def test_the_foreground_loop_restarts_and_sigterm_stops_what_it_keeps(managed: Managed) -> None:
    config = managed.paths.config_dir
    command = [
        sys.executable, "-m", "herdr_mcp", "generation", "--state-dir", str(managed.store.state_dir),
        "up", "--interval", "0.2",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _kill(runtimes_dir(config) / "B")
        wait_until(lambda: managed.healthy("B"), "generation up to restart B", timeout=60)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert "stopped A" in stderr and "stopped B" in stderr
    assert runtime_pid(runtimes_dir(config) / "A") is None
    assert runtime_pid(runtimes_dir(config) / "B") is None


def test_the_runtime_service_runs_generation_up_for_managed_generations(
    managed: Managed, tmp_path: Path
) -> None:
    from herdr_mcp.cli.service import main

    active = managed.store.read_control().find("B")
    command = [
        "install", "--platform", "systemd", "--config-dir", str(managed.paths.config_dir),
        "--target-dir", str(tmp_path / "units"), "--state-dir", str(managed.store.state_dir),
    ]  # fmt: skip
    assert main(command, runner=lambda argv: CommandResult(0, "", "")) == 0
    unit = (tmp_path / "units" / "herdr-mcp-runtime.service").read_text()
    assert f'ExecStart="{active.executable}" "generation" "up"' in unit
    assert ServiceConfig(Path("/x/herdr-mcp"), Path("/c"), supervise=True).arguments("runtime") == [
        "/x/herdr-mcp",
        "generation",
        "up",
    ]

    # Two more updates: A is retired as usual, but B, whose venv the services run from, is kept
    # (registered, its files in place) although it is neither active nor previous any more.
    config = managed.paths.config_dir
    for name in ("C", "D"):
        spec = Generation(name, "http://127.0.0.1:1", executable=str(_managed_executable(config, name)))
        assert start_and_activate(managed.paths, spec, None).outcome == "activated"
    status = managed.store.read_status()
    assert (status.active, status.previous) == ("D", "C")
    registered = [item.generation for item in managed.store.read_control().generations]
    assert "A" not in registered and not (runtimes_dir(config) / "A").exists()
    assert "B" in registered and Path(str(active.executable)).is_file()

    uninstall = [
        "uninstall", "--platform", "systemd", "--config-dir", str(config),
        "--target-dir", str(tmp_path / "units"), "--state-dir", str(managed.store.state_dir),
    ]  # fmt: skip
    assert main(uninstall, runner=lambda argv: CommandResult(0, "", "")) == 0
    assert not (config / "services.json").exists()


def test_start_runtime_without_posix_spawn_sessions_falls_back_to_popen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where libc has no POSIX_SPAWN_SETSID, os.posix_spawn(setsid=True) raises NotImplementedError.
    def unsupported(*args: object, **kwargs: object) -> int:
        raise NotImplementedError("setsid")

    monkeypatch.setattr(os, "posix_spawn", unsupported)
    config = tmp_path / "config"
    executable = _managed_executable(config, "P")
    runtime_dir = runtimes_dir(config) / "P"
    started = start_runtime(
        executable, runtime_dir, config, ["--no-sim", "--herdr-socket", str(tmp_path / "none")]
    )
    try:
        assert os.getsid(started.pid) == started.pid  # its own session
        assert runtime_pid(runtime_dir) == started.pid
        assert httpx2.get(started.endpoint + "/health", timeout=10).status_code == 200
    finally:
        assert stop_runtime(runtime_dir)
    assert runtime_pid(runtime_dir) is None
