"""`herdr-mcp update` end to end on loopback, with real releases of this tree.

v1 (version 1.0.0, serving the epoch-4 contract) is installed from its bundle and active behind
the link; v2 (2.0.0, epoch 5, with a contract_migration from epoch 4) is published in the
release repository simulator; v1's own `herdr-mcp update` admits, installs and activates it; a
real MCP call through the link reaches v2; `generation rollback` brings v1 back; v3 (epoch 6)
is refused with both epochs named and nothing downloaded. Then the updater is killed (SIGKILL)
after its download, after its install, right after it started the candidate's runtime (before
recording its pid) and during its activation: v1 stays active and serving each time, and the
next `update` cleans up (stopping the orphaned runtime it finds by its tag) and resumes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.contract import ContractIdentity, contract_identity, identity_of
from herdr_mcp.errors import EXIT_LOCAL, EXIT_REFUSED
from herdr_mcp.generations import GenerationStore, Observation
from herdr_mcp.generations.process import PID_FILE, START_MARKER, generation_processes
from herdr_mcp.release.manifest import MANIFEST_FILENAME
from herdr_mcp.release.minisign import keygen
from herdr_mcp.release.verification import PROVENANCE_BUNDLE_NAME, SIGNATURE_NAME, SIGSTORE_BUNDLE_NAME
from herdr_mcp.update.paths import UpdatePaths
from tests.support.link_harness import Link, running_link
from tests.support.logging_proxy import LoggingProxy, proxy_env
from tests.support.processes import alive, read_until
from tests.support.release_builder import (
    REPOSITORY,
    REPOSITORY_ID,
    BuiltRelease,
    ReleaseFactory,
    install_active,
    publish,
    stop_all,
)
from tests.support.release_evidence import sigstore_flags
from tests.support.repository_sim import ReleaseRepositorySimulator
from tests.support.runtime_harness import make_repo, mcp_client
from tests.support.sigstore_stack import SigstoreStack
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]


@dataclass(frozen=True)
class Releases:
    v1: BuiltRelease
    v2: BuiltRelease
    v3: BuiltRelease
    keys: Path
    #: `--identity-policy` and `--trusted-root` of the local Sigstore stack that signed them.
    sigstore: list[str]


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory, sigstore_stack: SigstoreStack) -> Releases:
    """v1, v2 and v3 built from this tree, each signed with minisign and, by the local Sigstore
    stack, keylessly and with build provenance: the update verifies all three, nothing skipped."""
    work = tmp_path_factory.mktemp("releases")
    keys = work / "keys"
    keys.mkdir()
    keygen(keys / "release.pub", work / "release.key")
    factory = ReleaseFactory(work, work / "release.key", sigstore_stack)
    return Releases(
        v1=factory.release("1.0.0", epoch=4),
        v2=factory.release("2.0.0", epoch=5, migrate_from_epoch=4),
        v3=factory.release("3.0.0", epoch=6, migrate_from_epoch=5, with_bundle=False),
        keys=keys,
        sigstore=sigstore_flags(sigstore_stack, work, REPOSITORY),
    )


@dataclass
class Workstation:
    config: Path
    sim: ReleaseRepositorySimulator
    link: Link
    v1_herdr_mcp: Path
    keys: Path
    sigstore: list[str]
    #: In every proxy variable of each `update`: the update (discovery and downloads from the
    #: loopback simulator, the probe, the gate's bearer-carrying requests) must send it nothing.
    proxy: LoggingProxy

    @property
    def store(self) -> GenerationStore:
        return GenerationStore.in_dir(self.config / "generations")

    def update_command(self, *extra: str) -> list[str]:
        return [
            str(self.v1_herdr_mcp), "update", "--json", *self.sigstore, *self.sim.update_flags(REPOSITORY_ID),
            "--keys", str(self.keys), "--config-dir", str(self.config), *extra,
        ]  # fmt: skip

    def update(self, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.update_command(*extra),
            capture_output=True,
            text=True,
            timeout=600,
            env={**_env(), **proxy_env(self.proxy.url)},
        )

    def served_contract(self) -> ContractIdentity:
        """The contract the active generation serves, from a real tools/list through the link."""
        return asyncio.run(_served_contract(self.link))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("HERDR_MCP_UPDATE_FAILPOINT", None)
    return env


async def _served_contract(link: Link) -> ContractIdentity:
    async with mcp_client(link.url, link.token) as client:
        listed = await client.list_tools()
        tools = [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in listed.tools]
        exec_tool = next(tool for tool in tools if tool["name"] == "herdr_exec")
        epoch = 5 if "intent" in exec_tool["inputSchema"].get("properties", {}) else 4
        result = await client.call_tool("herdr_inspect", {})
        assert not result.is_error, result
    return identity_of(tools, epoch)


@pytest.fixture
def workstation(releases: Releases, tmp_path: Path) -> Iterator[Workstation]:
    """v1 installed from its bundle, started, registered and active; the link in front of it."""
    from herdr_mcp.sim import SimConfig, SimulatorThread

    config = tmp_path / "config"
    config.mkdir(mode=0o700)
    repo = make_repo(tmp_path / "repo", {"README.md": b"# demo\n"})
    paths = UpdatePaths(config)
    socket = tmp_path / "herdr.sock"
    with SimulatorThread(SimConfig.for_roots([repo]), socket), ReleaseRepositorySimulator(REPOSITORY) as sim:
        try:
            serve_args = ["--no-sim", "--herdr-socket", str(socket)]
            install_active(paths, releases.v1, "r1.0.0-bootstrap", serve_args, tmp_path / "bootstrap-job")
            v1 = paths.runtimes / "r1.0.0-bootstrap" / "venv" / "bin" / "herdr-mcp"
            with (
                running_link(config / "generations", config / "link-token") as link,
                LoggingProxy() as proxy,
            ):
                yield Workstation(config, sim, link, v1, releases.keys, releases.sigstore, proxy)
        finally:
            stop_all(paths)


def _answer(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def test_v1_updates_to_v2_across_one_epoch_rolls_back_and_refuses_v3(
    releases: Releases, workstation: Workstation
) -> None:
    ws = workstation
    assert ws.served_contract() == contract_identity(4)

    publish(ws.sim, releases.v2)
    # A runtime that cannot start is never registered, and its install is removed.
    broken = ws.update("--serve-arg=--no-such-option")
    assert broken.returncode == EXIT_LOCAL
    assert "herdr-mcp: error: runtime_start_failed:" in broken.stderr, broken.stderr
    assert [path.name for path in (ws.config / "runtimes").iterdir()] == ["r1.0.0-bootstrap"]
    assert ws.store.read_status().active == "r1.0.0-bootstrap"

    answer = _answer(ws.update())
    assert (answer["status"], answer["version"], answer["outcome"]) == ("activated", "2.0.0", "activated")
    v2_generation = answer["generation"]
    # A real MCP call through the link reaches v2: it serves the epoch-5 contract.
    assert ws.served_contract() == contract_identity(5)
    status = ws.store.read_status()
    assert (status.active, status.previous) == (v2_generation, "r1.0.0-bootstrap")
    assert json.loads((ws.config / "highest-seen.json").read_text()) == {"version": "2.0.0"}
    spec = ws.store.read_control().find(v2_generation)
    assert spec.provenance is not None and spec.provenance["tag"] == "v2.0.0"
    assert spec.provenance["sigstore"] == "verified"  # keyless signature and build provenance held
    assert ws.proxy.requests() == []  # nothing of the update went through the proxy
    assert spec.expected_contract == contract_identity(5)

    rolled = subprocess.run(
        [
            sys.executable,
            "-m",
            "herdr_mcp",
            "generation",
            "--state-dir",
            str(ws.config / "generations"),
            "rollback",
        ],
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert rolled.returncode == 0, rolled.stderr
    assert rolled.stdout.startswith("activated:")
    assert ws.served_contract() == contract_identity(4)

    publish(ws.sim, releases.v3)
    ws.sim.clear_log()
    refused = ws.update()
    assert refused.returncode == EXIT_REFUSED, refused.stdout
    assert "epoch 4" in refused.stderr and "epoch 6" in refused.stderr, refused.stderr
    assert refused.stderr.startswith("herdr-mcp: error: contract_"), refused.stderr
    downloaded = sorted(entry.path.rsplit("/", 1)[1] for entry in ws.sim.downloads())
    assert downloaded == sorted(
        [MANIFEST_FILENAME, SIGNATURE_NAME, SIGSTORE_BUNDLE_NAME, PROVENANCE_BUNDLE_NAME]
    ), downloaded
    assert ws.served_contract() == contract_identity(4)  # v1 still serves


def _killed_at(ws: Workstation, failpoint: str) -> None:
    process = subprocess.Popen(
        ws.update_command(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**_env(), "HERDR_MCP_UPDATE_FAILPOINT": failpoint},
    )
    assert process.stderr is not None
    read_until(process.stderr, f"failpoint {failpoint}")
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    process.stderr.close()
    if process.stdout is not None:
        process.stdout.close()


def test_a_killed_update_leaves_v1_serving_and_the_next_one_cleans_up_and_resumes(
    releases: Releases, workstation: Workstation
) -> None:
    ws = workstation
    publish(ws.sim, releases.v2)
    paths = UpdatePaths(ws.config)

    # 1. Killed right after the download: a staging job is left, v1 serves.
    _killed_at(ws, "staged")
    assert [job.name.startswith("upd-") for job in paths.jobs.iterdir()] == [True]
    assert ws.store.read_status().active == "r1.0.0-bootstrap"
    assert ws.served_contract() == contract_identity(4)

    # 2. Killed right after the install: a half-made generation is left, v1 serves.
    _killed_at(ws, "installed")
    half_made = [path.name for path in paths.runtimes.iterdir() if path.name != "r1.0.0-bootstrap"]
    assert len(half_made) == 1
    assert [spec.generation for spec in ws.store.read_control().generations] == ["r1.0.0-bootstrap"]
    assert ws.served_contract() == contract_identity(4)

    # 2b. Killed right after the candidate's runtime started, before its pid was recorded: the
    # runtime keeps running, found only by its tag; v1 serves.
    _killed_at(ws, "spawned")
    assert not (paths.runtimes / half_made[0]).exists()  # that run cleaned up the one before
    (spawned,) = [path for path in paths.runtimes.iterdir() if path.name != "r1.0.0-bootstrap"]
    assert (spawned / START_MARKER).exists() and not (spawned / PID_FILE).exists()
    orphans = wait_until(lambda: generation_processes(spawned) or None, "the candidate's runtime to run")
    assert all(alive(pid) for pid in orphans)
    assert ws.served_contract() == contract_identity(4)

    # 3. Killed while the gate observes the switched candidate: the next reader undoes it.
    control = ws.store.read_control()
    ws.store.write_control(
        replace(control, observation=Observation(checks=20, interval_ms=1000)),
        expected_revision=control.revision,
    )
    process = subprocess.Popen(
        ws.update_command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env()
    )

    def observing() -> bool:
        assert process.poll() is None, "the update ended before its activation was observed"
        return ws.store.read_status().outcome == "observing"

    wait_until(observing, "the update's activation to be observed", timeout=300)
    candidate = ws.store.read_status().active
    assert candidate is not None
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    assert candidate != "r1.0.0-bootstrap"
    # That run cleaned up what the runs before it left: the orphaned runtime was stopped first.
    assert not spawned.exists()
    assert not any(alive(pid) for pid in orphans), orphans
    assert list(paths.jobs.iterdir()) == []
    # The link notices the activator died and puts v1 back before routing.
    assert ws.served_contract() == contract_identity(4)
    status = ws.store.read_status()
    assert (status.active, status.outcome) == ("r1.0.0-bootstrap", "rolled_back:activation_interrupted")

    # 4. The next update cleans up and resumes with the interrupted candidate.
    control = ws.store.read_control()
    ws.store.write_control(
        replace(control, observation=Observation(checks=2, interval_ms=100)),
        expected_revision=control.revision,
    )
    done = ws.update()
    answer = _answer(done)
    assert (answer["status"], answer["generation"], answer.get("reused")) == ("activated", candidate, True)
    assert ws.served_contract() == contract_identity(5)
    assert sorted(path.name for path in paths.runtimes.iterdir()) == sorted(["r1.0.0-bootstrap", candidate])
