"""Install and probe: a bundle built from this tree, served by the simulator, staged, installed
with no network into a new generation, and probed against the manifest's (TARGET) contract.

Building the wheel and the host bundle needs PyPI once per module (as tests/release/test_bundle.py); the
install itself runs in a network namespace with no interfaces.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import stat
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.contract import ContractIdentity, contract_identity
from herdr_mcp.release import host_pip
from herdr_mcp.release.build import BuildEnvironment, BuildSystem, build
from herdr_mcp.release.bundle import Target, bundle
from herdr_mcp.release.host_pip import pip_for
from herdr_mcp.update import install
from herdr_mcp.update.admission import TrustedRelease
from herdr_mcp.update.errors import LocalStateError, ReleaseDataError, UpdateUsageError
from herdr_mcp.update.install import (
    UnsafeLocalBundle,
    install_generation,
    install_unsafe_local_bundle,
    offline_prefix,
    unpack_bundle,
)
from herdr_mcp.update.probe import parse_version_output, probe
from herdr_mcp.update.staging import DownloadConfig, StagedAsset, StagedRelease, stage
from tests.support.admitted_release import REPOSITORY, Keys, admitted
from tests.support.admitted_release import keys as keys  # the module-scoped signing keys fixture
from tests.support.release_builder import host_target
from tests.support.repository_sim import ReleaseRepositorySimulator

ROOT = Path(__file__).resolve().parents[2]
PROBE_TIMEOUT = 60.0


@dataclass(frozen=True)
class Built:
    archive: Path
    target: Target
    version: str


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    work = tmp_path_factory.mktemp("bundle")
    tree = work / "tree"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(tree)], check=True)
    environment = BuildEnvironment.create(work / "env", BuildSystem.from_pyproject(tree).requires)
    _, wheel = build(tree, work / "dist", environment=environment)
    target = host_target()
    archive = bundle(wheel, work / "bundles", target=target)
    version = wheel.name.split("-")[1]
    return Built(archive=archive, target=target, version=version)


@pytest.fixture
def sim() -> Iterator[ReleaseRepositorySimulator]:
    with ReleaseRepositorySimulator(REPOSITORY) as simulator:
        yield simulator


def served_and_staged(
    sim: ReleaseRepositorySimulator, release: TrustedRelease, archive: Path, target: str, jobs: Path
) -> StagedRelease:
    sim_release = sim.add_release(release.manifest.tag)
    sim_release.add_asset(archive.name, archive)
    url = sim.url(sim_release.download_path(archive.name), host=sim.download_host)
    config = DownloadConfig(allowed_hosts=sim.hosts, ca_file=sim.ca_file)
    return stage(release, target, jobs, config, url=url, progress=io.StringIO())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_staged_bundle_installs_offline_and_probes_against_the_target_contract(
    built: Built, keys: Keys, sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    release = admitted(built.archive, keys, version=built.version, target=built.target.name)
    staged = served_and_staged(sim, release, built.archive, built.target.name, tmp_path / "jobs")
    generations = tmp_path / "generations"

    generation = install_generation(staged, generations, "g-0001")

    assert generation.path == generations / "g-0001"
    assert stat.S_IMODE(generation.path.stat().st_mode) == 0o700
    assert generation.herdr_mcp == generation.path / "venv" / "bin" / "herdr-mcp"
    if sys.platform == "linux":
        assert generation.network_isolation == "unshare --net"
    # One pip run, this environment's pip aimed at the venv (release/host_pip.py), installed the
    # bundle and pip itself (its `release bundle` and `dev sync` run `python -m pip`), from the
    # wheel Python ships for ensurepip; no setuptools.
    assert install.bundled_pip(sys.executable) is not None
    assert pip_for(generation.python)[1]
    _has_pip_and_no_setuptools(generation.python)
    target_contract = release.manifest.contract
    result = probe(generation.herdr_mcp, target_contract, release.manifest.version, timeout=PROBE_TIMEOUT)
    assert (result.product, result.version, result.contract) == ("herdr-mcp", built.version, target_contract)
    assert result.state_schema == release.manifest.state_schema

    other = ContractIdentity(epoch=target_contract.epoch + 1, hash="sha256:" + "6" * 64, tool_count=19)
    for expected, version, code in (
        (other, release.manifest.version, "probe_contract_mismatch"),
        (contract_identity(4), release.manifest.version, "probe_contract_mismatch"),
        (target_contract, "9.9.9", "probe_version_mismatch"),
    ):
        with pytest.raises(ReleaseDataError) as caught:
            probe(generation.herdr_mcp, expected, version, timeout=PROBE_TIMEOUT)
        assert caught.value.code == code
    # The state schema the candidate reports must be the one the manifest declares.
    declared = release.manifest.state_schema
    probe(generation.herdr_mcp, target_contract, built.version, timeout=PROBE_TIMEOUT, state_schema=declared)
    with pytest.raises(ReleaseDataError) as schema:
        probe(
            generation.herdr_mcp,
            target_contract,
            built.version,
            timeout=PROBE_TIMEOUT,
            state_schema=declared + 1,
        )
    assert schema.value.code == "probe_state_schema_mismatch"
    assert f"reports state schema {declared}, the release declares {declared + 1}" in schema.value.message

    # An existing id is refused and the generation stays as it was.
    before = sorted(str(path.relative_to(generation.path)) for path in generation.path.rglob("*"))
    with pytest.raises(UpdateUsageError) as refused:
        install_generation(staged, generations, "g-0001")
    assert refused.value.code == "generation_exists"
    assert sorted(str(path.relative_to(generation.path)) for path in generation.path.rglob("*")) == before
    probe(generation.herdr_mcp, target_contract, release.manifest.version, timeout=PROBE_TIMEOUT)


def _has_pip_and_no_setuptools(python: Path) -> None:
    """The venv of `python` has its own pip, which runs, and no setuptools."""
    code = "import importlib.util as u; print(u.find_spec('pip').origin); print(u.find_spec('setuptools'))"
    found = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, check=True)
    pip, setuptools = found.stdout.splitlines()
    assert pip.startswith(str(python.parent.parent / "lib")) and setuptools == "None", found.stdout
    version = subprocess.run([str(python), "-I", "-m", "pip", "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("pip "), (version.stdout, version.stderr)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_without_network_isolation_or_a_bundled_pip_wheel_pip_runs_index_free_behind_a_dead_proxy(
    built: Built, keys: Keys, sim: ReleaseRepositorySimulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallbacks together: no network namespace (pip's proxies at a dead port), no pip in
    this environment (as in a `uv tool install`) and a Python whose pip wheel is not where
    ensurepip keeps it, so `python -m ensurepip` runs first and the venv's own pip installs."""
    monkeypatch.setattr(install, "offline_prefix", lambda: ((), install.NO_NETWORK_FALLBACK))
    monkeypatch.setattr(install, "bundled_pip", lambda python: None)
    monkeypatch.setattr(host_pip, "host_pip", lambda: None)
    steps: list[list[str]] = []
    run = install._run

    def recorded(command: list[str], *args: Any, **kwargs: Any) -> None:
        steps.append(command)
        run(command, *args, **kwargs)

    monkeypatch.setattr(install, "_run", recorded)
    release = admitted(built.archive, keys, version=built.version, target=built.target.name)
    staged = served_and_staged(sim, release, built.archive, built.target.name, tmp_path / "jobs")
    generation = install_generation(staged, tmp_path / "generations", "g-fallback")
    assert generation.network_isolation == install.NO_NETWORK_FALLBACK
    assert [step[:3] for step in steps] == [
        [sys.executable, "-m", "venv"],
        [str(generation.python), "-m", "ensurepip"],
        [str(generation.python), "-m", "pip"],
    ], steps
    pip = subprocess.run(
        [str(generation.python), "-I", "-m", "pip", "--version"], capture_output=True, text=True
    )
    assert pip.returncode == 0 and str(generation.path) in pip.stdout, (pip.stdout, pip.stderr)
    probe(generation.herdr_mcp, release.manifest.contract, release.manifest.version, timeout=PROBE_TIMEOUT)


@pytest.mark.parametrize("runner", ["this environment's pip", "pip from the wheel on PYTHONPATH"])
def test_each_pip_runner_gives_a_venv_without_pip_its_pinned_pip(
    runner: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step 5's two runners with a wheel to install (install.py): this environment's pip with
    `--python` (release/host_pip.py) and, where there is none, the venv's python running pip from
    Python's own pip wheel. A bundle of nothing but pip, so each is seconds."""
    if runner != "this environment's pip":
        monkeypatch.setattr(host_pip, "host_pip", lambda: None)
    python = sys._base_executable  # type: ignore[attr-defined]
    pip_wheel = install.bundled_pip(python)
    assert pip_wheel is not None
    top = tmp_path / "bundle"
    (top / "wheelhouse").mkdir(parents=True)
    (top / "requirements.txt").write_text("")
    venv = tmp_path / "g" / "venv"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip, from_host = pip_for(venv / "bin" / "python")
    assert from_host == (runner == "this environment's pip")
    env = install._pip_env(tmp_path, offline=False)
    runs = env if from_host else {**env, "PYTHONPATH": str(pip_wheel)}
    install._pip_install((), pip, runs, venv, top, extra=install._pin_pip(pip_wheel, tmp_path / "pip.txt"))
    _has_pip_and_no_setuptools(venv / "bin" / "python")
    version = pip_wheel.name.split("-")[1]
    shown = subprocess.run(
        [str(venv / "bin" / "python"), "-I", "-m", "pip", "--version"], capture_output=True, text=True
    )
    assert shown.stdout.startswith(f"pip {version} "), shown.stdout


def test_the_offline_prefix_cannot_reach_the_network() -> None:
    prefix, isolation = offline_prefix()
    assert prefix, (
        f"no network isolation on this host ({isolation}): install util-linux (unshare) or run as root"
    )
    reached = subprocess.run(
        [*prefix, sys.executable, "-c", "import socket; socket.create_connection(('151.101.0.223', 443), 5)"],
        capture_output=True,
        text=True,
    )
    assert reached.returncode != 0
    assert "OSError" in reached.stderr or "unreachable" in reached.stderr


# --- unsafe bundles ----------------------------------------------------------------------------------

TOP = "herdr-mcp-1.2.0-linux-x86_64-cp311"


def _tarball(path: Path, members: list[tuple[str, bytes | None, bytes]]) -> Path:
    """A tar.gz of (name, type, data) members: type None is a regular file, else a tarfile type."""
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind is None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                info.type = kind
                info.linkname = data.decode()
                tar.addfile(info)
    return path


def _good_members() -> list[tuple[str, bytes | None, bytes]]:
    return [
        (f"{TOP}/requirements.txt", None, b"# nothing\n"),
        (f"{TOP}/wheelhouse", tarfile.DIRTYPE, b""),
    ]


@pytest.mark.parametrize(
    "evil",
    [
        ("../evil", None, b"x"),
        (f"{TOP}/../../evil", None, b"x"),
        ("/tmp/evil", None, b"x"),
        ("other-top/evil", None, b"x"),
        (f"{TOP}/wheelhouse/link", tarfile.SYMTYPE, b"/etc/passwd"),
        (f"{TOP}/wheelhouse/hard", tarfile.LNKTYPE, b"../../etc/passwd"),
        (f"{TOP}/fifo", tarfile.FIFOTYPE, b""),
    ],
    ids=["dotdot", "dotdot inside top", "absolute", "outside the top dir", "symlink", "hardlink", "fifo"],
)
def test_an_unsafe_member_is_refused_before_anything_is_written(
    tmp_path: Path, evil: tuple[str, bytes | None, bytes]
) -> None:
    archive = _tarball(tmp_path / f"{TOP}.tar.gz", [*_good_members(), evil])
    with pytest.raises(ReleaseDataError) as caught:
        unpack_bundle(archive, tmp_path / "out")
    assert caught.value.code == "bundle_unsafe_member"
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "evil").exists()


def test_a_tampered_bundle_with_dotdot_is_refused_through_stage_and_install(
    keys: Keys, sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    archive = _tarball(tmp_path / f"{TOP}.tar.gz", [*_good_members(), ("../evil", None, b"evil")])
    release = admitted(archive, keys)
    staged = served_and_staged(sim, release, archive, "linux-x86_64-cp311", tmp_path / "jobs")
    generations = tmp_path / "generations"
    with pytest.raises(ReleaseDataError) as caught:
        install_generation(staged, generations, "g-evil")
    assert caught.value.code == "bundle_unsafe_member"
    assert "../evil" in caught.value.message
    assert list(generations.iterdir()) == []
    assert not list(tmp_path.rglob("evil"))


def test_a_bundle_without_requirements_is_malformed(tmp_path: Path) -> None:
    archive = _tarball(tmp_path / f"{TOP}.tar.gz", [(f"{TOP}/wheelhouse", tarfile.DIRTYPE, b"")])
    with pytest.raises(ReleaseDataError) as caught:
        unpack_bundle(archive, tmp_path / "out")
    assert caught.value.code == "bundle_malformed"


def test_install_refuses_a_staged_asset_that_stage_did_not_make(tmp_path: Path) -> None:
    """A StagedAsset built by hand (any bundle, its own digest) never reaches a venv."""
    archive = _tarball(tmp_path / f"{TOP}.tar.gz", _good_members())
    data = archive.read_bytes()
    job = tmp_path / "job"
    job.mkdir()
    hand_built = StagedAsset(archive, hashlib.sha256(data).hexdigest(), len(data), job)
    generations = tmp_path / "generations"
    with pytest.raises(UpdateUsageError) as refused:
        install_generation(hand_built, generations, "g-hand")  # type: ignore[arg-type]
    assert refused.value.code == "install_unverified"
    assert not generations.exists()


def test_install_refuses_a_staged_release_made_by_hand_or_whose_bytes_changed(
    keys: Keys, sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    archive = _tarball(tmp_path / f"{TOP}.tar.gz", _good_members())
    release = admitted(archive, keys)
    staged = served_and_staged(sim, release, archive, "linux-x86_64-cp311", tmp_path / "jobs")
    (tmp_path / "other").mkdir()
    other = _tarball(tmp_path / "other" / f"{TOP}.tar.gz", [*_good_members(), (f"{TOP}/x", None, b"x")])
    # Made by hand with the real release and asset, or copied with another file: refused at once.
    with pytest.raises(UpdateUsageError) as by_hand:
        StagedRelease(other, staged.sha256, staged.size, staged.job_dir, release, staged.asset)
    with pytest.raises(UpdateUsageError) as copied:
        dataclasses.replace(staged, path=other)
    assert by_hand.value.code == copied.value.code == "install_unverified"
    # The staged file replaced after stage() checked it: refused before anything is written.
    staged.path.write_bytes(other.read_bytes())
    generations = tmp_path / "generations"
    with pytest.raises(LocalStateError) as changed:
        install_generation(staged, generations, "g-changed")
    assert changed.value.code == "install_bundle_changed"
    assert not generations.exists()


@pytest.mark.parametrize("generation_id", ["", ".", "..", "a/b", "x" * 65, "ünïcode", "a b"])
def test_a_malformed_generation_id_is_refused(tmp_path: Path, generation_id: str) -> None:
    # The id rule is the same for both install entries; the unsafe one needs no signed release.
    bundle = UnsafeLocalBundle(path=tmp_path / "x.tar.gz", job_dir=tmp_path)
    with pytest.raises(UpdateUsageError) as caught:
        install_unsafe_local_bundle(bundle, tmp_path / "generations", generation_id)
    assert caught.value.code == "generation_id_invalid"
    assert not (tmp_path / "generations").exists()


# --- probe against fake candidates -------------------------------------------------------------------

GOOD = {
    "product": "herdr-mcp",
    "version": "1.2.0",
    "contract": contract_identity().to_dict(),
    "state_schema": 1,
}


def _candidate(tmp_path: Path, script: str) -> Path:
    path = tmp_path / "herdr-mcp"
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return path


def _printing(tmp_path: Path, output: str) -> Path:
    (tmp_path / "out.json").write_text(output)
    return _candidate(tmp_path, f'cat "{tmp_path / "out.json"}"')


@pytest.mark.parametrize(
    ("output", "code"),
    [
        (json.dumps(GOOD), None),
        ("not json", "probe_output_malformed"),
        (json.dumps([GOOD]), "probe_output_malformed"),
        (json.dumps({**GOOD, "extra": 1}), "probe_output_malformed"),
        (
            json.dumps({key: value for key, value in GOOD.items() if key != "state_schema"}),
            "probe_output_malformed",
        ),
        (
            json.dumps({**GOOD, "contract": {**contract_identity().to_dict(), "epoch": True}}),
            "probe_output_malformed",
        ),
        (
            json.dumps({**GOOD, "contract": {**contract_identity().to_dict(), "more": 1}}),
            "probe_output_malformed",
        ),
        ('{"product": "herdr-mcp", "product": "x"}', "probe_output_malformed"),
        (json.dumps({**GOOD, "product": "herdr-edge"}), "probe_product_mismatch"),
        (json.dumps({**GOOD, "version": "1.2.1"}), "probe_version_mismatch"),
        (json.dumps({**GOOD, "contract": contract_identity(4).to_dict()}), "probe_contract_mismatch"),
        (" " * 70_000 + json.dumps(GOOD), "probe_output_malformed"),
    ],
    ids=[
        "good",
        "not json",
        "an array",
        "an extra key",
        "a missing key",
        "a bool epoch",
        "an extra contract key",
        "a duplicate key",
        "another product",
        "another version",
        "the local epoch 4 contract",
        "too much output",
    ],
)
def test_the_probe_parses_strictly_and_checks_in_order(tmp_path: Path, output: str, code: str | None) -> None:
    candidate = _printing(tmp_path, output)
    if code is None:
        assert probe(candidate, contract_identity(), "1.2.0", timeout=10).contract == contract_identity()
        return
    with pytest.raises(ReleaseDataError) as caught:
        probe(candidate, contract_identity(), "1.2.0", timeout=10)
    assert caught.value.code == code


def test_a_failing_a_hanging_and_a_missing_candidate_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ReleaseDataError) as failed:
        probe(_candidate(tmp_path, "echo broken >&2; exit 3"), contract_identity(), "1.2.0", timeout=10)
    assert failed.value.code == "probe_failed" and "broken" in failed.value.message
    with pytest.raises(ReleaseDataError) as hung:
        probe(_candidate(tmp_path, "exec sleep 30"), contract_identity(), "1.2.0", timeout=0.3)
    assert hung.value.code == "probe_timeout"
    with pytest.raises(LocalStateError) as missing:
        probe(tmp_path / "nothing-here", contract_identity(), "1.2.0", timeout=10)
    assert missing.value.code == "probe_failed"


def test_parse_version_output_reads_the_real_command_shape() -> None:
    from herdr_mcp.cli import version_info

    parsed = parse_version_output(json.dumps(version_info(), sort_keys=True).encode())
    assert parsed.contract == contract_identity()
