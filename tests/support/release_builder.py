"""Real releases of this tree at other versions (and contract epochs), for updater tests.

`ReleaseFactory.release(version, epoch=...)` snapshots the working tree (tracked and untracked,
not ignored, files: what a commit of it would hold), edits its version (pyproject.toml) and the
contract epoch it serves (`CURRENT_EPOCH`; epoch 6 gets a catalog of its own, epoch 5's with one
description changed), commits and tags it, builds the wheel and sdist with the release toolchain,
bundles the wheel for this machine's target, and makes the signed `runtime-manifest.json` with
the release's OWN code (the built wheel on PYTHONPATH runs `herdr-mcp release manifest`), as the
release workflow does. `publish` puts a release into the repository simulator.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from herdr_mcp.contract import contract_identity
from herdr_mcp.generations import Generation
from herdr_mcp.generations.process import stop_runtime
from herdr_mcp.release.build import BuildEnvironment, BuildSystem, build
from herdr_mcp.release.bundle import Target, bundle, load_release_config
from herdr_mcp.state import STATE_SCHEMA
from herdr_mcp.update.apply import start_and_activate
from herdr_mcp.update.install import UnsafeLocalBundle, install_unsafe_local_bundle
from herdr_mcp.update.paths import UpdatePaths
from tests.support.release_evidence import write_evidence
from tests.support.repository_sim import ReleaseRepositorySimulator
from tests.support.sigstore_stack import SigstoreStack

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = "herdr-mcp/herdr-mcp"
REPOSITORY_ID = 918273645
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "release test",
    "GIT_AUTHOR_EMAIL": "release@example.invalid",
    "GIT_COMMITTER_NAME": "release test",
    "GIT_COMMITTER_EMAIL": "release@example.invalid",
    "GIT_AUTHOR_DATE": "2026-11-29T12:00:00Z",
    "GIT_COMMITTER_DATE": "2026-11-29T12:00:00Z",
}


def host_target() -> Target:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for target in load_release_config(ROOT / "release" / "config.toml").targets:
        if (target.sys_platform, target.platform_machine, target.python_version) == (
            sys.platform,
            platform.machine(),
            version,
        ):
            return target
    raise AssertionError(
        f"release/config.toml has no target for {sys.platform}/{platform.machine()}/{version}"
    )


@dataclass(frozen=True)
class BuiltRelease:
    version: str
    epoch: int
    tree: Path
    dist: Path  # the wheel, sdist, bundle (if any), runtime-manifest.json, its .minisig (and Sigstore files)
    wheel: Path
    bundle: Path | None

    @property
    def tag(self) -> str:
        return f"v{self.version}"

    @property
    def manifest(self) -> Path:
        return self.dist / "runtime-manifest.json"


def snapshot_tree(source: Path, destination: Path) -> None:
    """Copy the files a commit of `source`'s working tree would hold into a fresh repository."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=source, capture_output=True, check=True
    ).stdout.split(b"\0")
    for raw in filter(None, listed):
        relative = raw.decode()
        origin = source / relative
        target = destination / relative
        if origin.is_symlink():  # the packaged-data links (src/herdr_mcp/attestations, ...)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(os.readlink(origin))
            continue
        if not origin.is_file():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(origin, target)


#: The migration a `state_step` release adds: a new table and a column on an existing one, so a
#: database it migrated is one the previous release cannot open (schema too new).
STEP_MIGRATION = '''"""Test release migration: a note per exec session (tests/support/release_builder.py)."""

from herdr_mcp.state.migrations import Migration

MIGRATION = Migration(
    name="release_notes",
    statements=(
        "CREATE TABLE release_notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL) STRICT",
        "ALTER TABLE meta ADD COLUMN note TEXT",
    ),
)
'''


def add_state_migration(tree: Path) -> None:
    """Append migration STATE_SCHEMA + 1 to the snapshot `tree` (the numbered, append-only list)."""
    number = STATE_SCHEMA + 1
    migrations = tree / "src" / "herdr_mcp" / "state" / "migrations"
    (migrations / f"m{number:04d}_release_notes.py").write_text(STEP_MIGRATION)
    init = migrations / "__init__.py"
    init.write_text(
        init.read_text()
        + f"\nfrom herdr_mcp.state.migrations import m{number:04d}_release_notes  # noqa: E402\n\n"
        + f"MIGRATIONS = (*MIGRATIONS, m{number:04d}_release_notes.MIGRATION)\n"
    )


def _git(tree: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=tree, check=True, capture_output=True, env={**os.environ, **_GIT_ENV})


class ReleaseFactory:
    """Builds releases under `work`, sharing one build environment. With a Sigstore `stack`, each
    release also carries its keyless signature and build provenance, as the workflow publishes."""

    def __init__(self, work: Path, secret_key: Path, stack: SigstoreStack | None = None) -> None:
        self.work = work
        self.secret_key = secret_key
        self.stack = stack
        self._environment: BuildEnvironment | None = None
        self.target = host_target()

    def release(
        self,
        version: str,
        *,
        epoch: int = 5,
        migrate_from_epoch: int | None = None,
        with_bundle: bool = True,
        state_step: bool = False,
    ) -> BuiltRelease:
        """With `state_step`, the release carries one more numbered state migration than this tree
        (`add_state_migration`) and declares the step in its manifest (`--state-schema-from`)."""
        tree = self.work / f"tree-{version}"
        snapshot_tree(ROOT, tree)
        if state_step:
            add_state_migration(tree)
        pyproject = tree / "pyproject.toml"
        text = pyproject.read_text()
        assert 'version = "0.1.0"' in text
        pyproject.write_text(text.replace('version = "0.1.0"', f'version = "{version}"', 1))
        contract = tree / "src" / "herdr_mcp" / "contract" / "__init__.py"
        code = contract.read_text()
        assert "CURRENT_EPOCH = 5\n" in code
        contract.write_text(code.replace("CURRENT_EPOCH = 5\n", f"CURRENT_EPOCH = {epoch}\n", 1))
        if epoch == 6:
            catalog = json.loads((tree / "manifests" / "contracts" / "runtime-epoch-5.json").read_text())
            catalog["epoch"] = 6
            catalog["tools"][0]["description"] += " (epoch 6)"
            (tree / "manifests" / "contracts" / "runtime-epoch-6.json").write_text(
                json.dumps(catalog, indent=2)
            )
        _git(tree, "init", "--quiet", "--initial-branch=main")
        _git(tree, "add", "-A")
        _git(tree, "commit", "--quiet", "-m", f"release {version}")
        _git(tree, "tag", f"v{version}")
        if self._environment is None:
            self._environment = BuildEnvironment.create(
                self.work / "build-env", BuildSystem.from_pyproject(tree).requires
            )
        dist = self.work / f"dist-{version}"
        _, wheel = build(tree, dist, environment=self._environment)
        archive = bundle(wheel, dist, target=self.target) if with_bundle else None
        command = [
            sys.executable, "-m", "herdr_mcp", "release", "manifest", "--dist", str(dist),
            "--source", str(tree), "--repository", REPOSITORY, "--repository-id", str(REPOSITORY_ID),
            "--published-at", "2026-11-29T12:00:00Z", "--out", str(dist / "runtime-manifest.json"),
        ]  # fmt: skip
        if migrate_from_epoch is not None:
            command += [
                "--migrate-from",
                str(tree / "manifests" / "contracts" / f"runtime-epoch-{migrate_from_epoch}.json"),
            ]
        if state_step:
            command += ["--state-schema-from", str(STATE_SCHEMA)]
        # The release's own code makes its manifest: the wheel (pure Python) first on the path.
        env = {**os.environ, "PYTHONPATH": str(wheel)}
        subprocess.run(command, check=True, capture_output=True, env=env, cwd=tree)
        sign = [
            sys.executable, "-m", "herdr_mcp", "release", "sign",
            "--manifest", str(dist / "runtime-manifest.json"), "--secret-key", str(self.secret_key),
        ]  # fmt: skip
        subprocess.run(sign, check=True, capture_output=True)
        if self.stack is not None:
            write_evidence(self.stack, dist / "runtime-manifest.json")
        return BuiltRelease(version, epoch, tree, dist, wheel, archive)


def publish(sim: ReleaseRepositorySimulator, release: BuiltRelease) -> None:
    """The release on the simulator, as the release workflow uploads it."""
    published = sim.add_release(release.tag)
    for path in sorted(release.dist.iterdir()):
        published.add_asset(path.name, path)


def install_active(
    paths: UpdatePaths, release: BuiltRelease, generation: str, serve_args: list[str], job: Path
) -> None:
    """Bootstrap a workstation: `release` installed from its bundle as `generation`, started with
    `serve_args`, registered and activated through the gate (what a first install does)."""
    assert release.bundle is not None
    job.mkdir()
    # The test's own bundle, not staged from a release: the unsafe install, as `dev sync` does.
    installed = install_unsafe_local_bundle(
        UnsafeLocalBundle(release.bundle, job), paths.runtimes, generation
    )
    spec = Generation(
        generation,
        "http://127.0.0.1:1",  # replaced by the endpoint the runtime announces
        expected_runtime_version=release.version,
        expected_contract=contract_identity(release.epoch),
        executable=str(installed.herdr_mcp),
        provenance={"plane": "prod", "source": "release", "tag": release.tag},
    )
    result = start_and_activate(paths, spec, serve_args)
    assert result.outcome == "activated", result


def stop_all(paths: UpdatePaths) -> None:
    """Stop every generation runtime of `paths` (test teardown)."""
    if paths.runtimes.is_dir():
        for runtime_dir in paths.runtimes.iterdir():
            stop_runtime(runtime_dir, grace_s=5)
