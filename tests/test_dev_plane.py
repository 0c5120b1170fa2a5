"""`herdr-mcp dev status|sync|rollback` on a real workstation layout.

PROD is release 1.0.0 installed from its bundle; the DEV checkout is a snapshot of this tree
(version 0.1.0) in its own Git repository. `dev sync` pins PROD, builds the checkout, activates
the DEV generation through the gate (a real MCP call through the link reaches it); `update` and
`update auto` refuse or skip on DEV; a second sync keeps the pin; `dev rollback` refuses a
pinned generation whose installed files changed and otherwise re-activates PROD (restarting its
runtime, which was stopped) without building anything.
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

import httpx2
import pytest

from herdr_mcp.errors import EXIT_REFUSED
from herdr_mcp.generations import GenerationStore
from herdr_mcp.generations.process import runtime_pid, stop_runtime
from herdr_mcp.release.minisign import keygen
from herdr_mcp.update.apply import DEV_PLANE_MARKER, UpdatePaths
from tests.link_harness import Link, running_link
from tests.release_builder import ROOT, BuiltRelease, ReleaseFactory, install_active, snapshot_tree, stop_all
from tests.runtime_harness import make_repo, mcp_client

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]
PROD_ID = "r1.0.0-prod"


@pytest.fixture(scope="module")
def prod_release(tmp_path_factory: pytest.TempPathFactory) -> BuiltRelease:
    work = tmp_path_factory.mktemp("prod")
    keygen(work / "release.pub", work / "release.key")
    return ReleaseFactory(work, work / "release.key").release("1.0.0", epoch=5)


@dataclass
class Workstation:
    paths: UpdatePaths
    link: Link
    checkout: Path

    @property
    def store(self) -> GenerationStore:
        return self.paths.generations

    def dev(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [
            sys.executable,
            "-m",
            "herdr_mcp",
            "dev",
            "--config-dir",
            str(self.paths.config_dir),
            *args,
        ]
        env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)

    def active_version(self) -> str:
        status = self.store.read_status()
        assert status.active is not None
        endpoint = self.store.read_control().find(status.active).endpoint
        version: str = httpx2.get(f"{endpoint}/health", timeout=10).json()["version"]
        return version


def _commit(checkout: Path, message: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.invalid"}
    env |= {"GIT_COMMITTER_NAME": "dev", "GIT_COMMITTER_EMAIL": "dev@example.invalid"}
    subprocess.run(["git", "add", "-A"], cwd=checkout, check=True, env=env)
    subprocess.run(["git", "commit", "--quiet", "-m", message], cwd=checkout, check=True, env=env)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=checkout, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def workstation(prod_release: BuiltRelease, tmp_path: Path) -> Iterator[Workstation]:
    from herdr_mcp.sim import SimConfig, SimulatorThread

    config = tmp_path / "config"
    config.mkdir(mode=0o700)
    paths = UpdatePaths(config)
    checkout = tmp_path / "checkout"
    snapshot_tree(ROOT, checkout)
    subprocess.run(["git", "init", "--quiet", "--initial-branch=main"], cwd=checkout, check=True)
    _commit(checkout, "the DEV checkout")
    repo = make_repo(tmp_path / "repo", {"README.md": b"# demo\n"})
    socket = tmp_path / "herdr.sock"
    with SimulatorThread(SimConfig.for_roots([repo]), socket):
        try:
            serve_args = ["--no-sim", "--herdr-socket", str(socket)]
            install_active(paths, prod_release, PROD_ID, serve_args, tmp_path / "bootstrap-job")
            with running_link(config / "generations", config / "link-token") as link:
                yield Workstation(paths, link, checkout)
        finally:
            stop_all(paths)


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


async def _inspect_through(link: Link) -> None:
    async with mcp_client(link.url, link.token) as client:
        result = await client.call_tool("herdr_inspect", {})
        assert not result.is_error, result


def test_dev_sync_pins_prod_and_dev_rollback_returns_to_it_without_building(workstation: Workstation) -> None:
    ws = workstation
    status = _json(ws.dev("--json", "status"))
    assert (status["plane"], status["active"]) == ("prod", PROD_ID)
    assert _refused(ws.dev("rollback")) == "dev_not_dev"

    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ws.checkout, capture_output=True, text=True
    ).stdout
    synced = _json(ws.dev("--json", "sync", "--source", str(ws.checkout)))
    assert synced["outcome"] == "activated"
    first_dev = synced["generation"]
    plane = synced["plane"]
    assert plane["pinned_prod"]["generation"] == PROD_ID
    assert plane["pinned_prod"]["checksum"].startswith("sha256:")
    assert (plane["source"]["commit"], plane["source"]["dirty"]) == (head.strip(), False)
    spec = ws.store.read_control().find(first_dev)
    assert spec.provenance is not None
    assert (spec.provenance["plane"], spec.provenance["commit"]) == ("dev", head.strip())
    assert ws.active_version() == "0.1.0"  # the checkout, not PROD's 1.0.0
    asyncio.run(_inspect_through(ws.link))
    assert (ws.paths.config_dir / DEV_PLANE_MARKER).exists()

    # Updates leave a DEV plane alone.
    update = [sys.executable, "-m", "herdr_mcp", "update", "--config-dir", str(ws.paths.config_dir)]
    auto = subprocess.run([*update, "auto", "--json"], capture_output=True, text=True)
    assert json.loads(auto.stdout)["reason"] == "plane_not_prod", auto.stderr
    interactive = subprocess.run(
        [*update, "--repository", "o/r", "--repository-id", "1"], capture_output=True, text=True
    )
    assert _refused(interactive) == "plane_not_prod"

    # A second sync keeps the pin, and the pinned PROD stays registered.
    (ws.checkout / "docs" / "dev-note.md").write_text("a DEV change\n")
    second_head = _commit(ws.checkout, "a DEV change")
    again = _json(ws.dev("--json", "sync", "--source", str(ws.checkout)))
    assert again["outcome"] == "activated"
    assert again["plane"]["pinned_prod"] == plane["pinned_prod"]
    assert again["plane"]["source"]["commit"] == second_head
    registered = [item.generation for item in ws.store.read_control().generations]
    assert PROD_ID in registered and again["generation"] in registered
    dev_status = _json(ws.dev("--json", "status"))
    assert (dev_status["plane"], dev_status["active"]) == ("dev", again["generation"])

    # A pinned generation whose installed files changed is refused.
    prod_dir = ws.paths.runtimes / PROD_ID
    (record,) = prod_dir.glob("venv/lib/python*/site-packages/herdr_mcp-*.dist-info/RECORD")
    original = record.read_bytes()
    record.write_bytes(original + b"tampered.py,,\n")
    assert _refused(ws.dev("rollback")) == "dev_pin_mismatch"
    record.write_bytes(original)

    # Rollback: PROD again, its stopped runtime started again, nothing built.
    stop_runtime(prod_dir)
    assert runtime_pid(prod_dir) is None
    before = sorted(path.name for path in ws.paths.runtimes.iterdir())
    rolled = _json(ws.dev("--json", "rollback"))
    assert (rolled["outcome"], rolled["active"]) == ("activated", PROD_ID)
    assert runtime_pid(prod_dir) is not None
    assert ws.active_version() == "1.0.0"
    asyncio.run(_inspect_through(ws.link))
    assert not (ws.paths.config_dir / DEV_PLANE_MARKER).exists()
    after = sorted(path.name for path in ws.paths.runtimes.iterdir())
    assert set(after) <= set(before), "dev rollback built or installed something"
    assert _json(ws.dev("--json", "status"))["plane"] == "prod"


def _refused(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == EXIT_REFUSED, (done.stdout, done.stderr)
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("herdr-mcp: error: "), done.stderr
    return line.removeprefix("herdr-mcp: error: ").split(":", 1)[0]
