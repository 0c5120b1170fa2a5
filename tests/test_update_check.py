"""`herdr-mcp update --check` against the release repository simulator: discovery, the manifest
and its signature, admission; the simulator's log proves no asset is downloaded, admitted or not."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from herdr_mcp.contract import ContractIdentity
from herdr_mcp.release.manifest import AssetInput, build_manifest
from herdr_mcp.release.minisign import keygen, load_secret_key, sign
from herdr_mcp.service.fence import clear_fence, set_fence
from herdr_mcp.update.repository_sim import ReleaseRepositorySimulator

REPOSITORY = "herdr-mcp/herdr-mcp"
REPOSITORY_ID = 424242
VERSION = "9.0.0"
TAG = f"v{VERSION}"
BUNDLE = f"herdr-mcp-{VERSION}-linux-x86_64-cp311.tar.gz"


@pytest.fixture
def sim() -> Iterator[ReleaseRepositorySimulator]:
    with ReleaseRepositorySimulator(REPOSITORY) as simulator:
        yield simulator


def _publish(
    sim: ReleaseRepositorySimulator,
    tmp: Path,
    *,
    contract: ContractIdentity | None = None,
    tamper: bool = False,
) -> Path:
    """Publish TAG with a bundle, a manifest listing it and a minisign signature; return the keys dir."""
    keys = tmp / "keys"
    keys.mkdir()
    keygen(keys / "release.pub", tmp / "release.key")
    bundle = tmp / BUNDLE
    bundle.write_bytes(b"not really a bundle, but its sha256 is signed\n")
    manifest = build_manifest(
        version=VERSION,
        repository=REPOSITORY,
        repository_id=REPOSITORY_ID,
        commit="3f1c2a9b8e7d6c5b4a39281706f5e4d3c2b1a098",
        ref=f"refs/tags/{TAG}",
        published_at=datetime(2026, 11, 29, 12, tzinfo=UTC),
        assets=[AssetInput(path=bundle, target="linux-x86_64-cp311", kind="bundle")],
    )
    if contract is not None:
        manifest = dataclasses.replace(manifest, contract=contract)
    data = manifest.to_bytes()
    signature = sign(data, load_secret_key(tmp / "release.key"), trusted_comment=f"herdr-mcp {TAG}")
    release = sim.add_release(TAG)
    release.add_asset("runtime-manifest.json", data + (b" " if tamper else b""))
    release.add_asset("runtime-manifest.json.minisig", signature.encode())
    release.add_asset(BUNDLE, bundle.read_bytes())
    return keys


def _check(
    sim: ReleaseRepositorySimulator, tmp: Path, keys: Path, *mode: str
) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "herdr_mcp", "update", *(mode or ("--check",)), "--json", "--no-sigstore",
        "--repository", REPOSITORY, "--repository-id", str(REPOSITORY_ID), "--api-url", sim.api_base_url,
        *(f"--allowed-host={host}" for host in sorted(sim.hosts)), "--ca-file", str(sim.ca_file),
        "--keys", str(keys), "--config-dir", str(tmp / "config"),
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def _fetched(sim: ReleaseRepositorySimulator) -> list[str]:
    return sorted(Path(entry.path).name for entry in sim.downloads())


def test_a_same_contract_release_is_admitted_without_downloading_its_bundle(
    sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    keys = _publish(sim, tmp_path)
    result = _check(sim, tmp_path, keys)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert (answer["status"], answer["version"], answer["kind"]) == ("admitted", VERSION, "same_contract")
    assert _fetched(sim) == ["runtime-manifest.json", "runtime-manifest.json.minisig"]


@pytest.mark.parametrize(
    ("contract", "tamper", "code"),
    [
        (ContractIdentity(7, "sha256:" + "a" * 64, 18), False, "contract_epoch_not_adjacent"),
        (None, True, "signature_invalid"),
    ],
    ids=["two-epochs-ahead", "tampered-manifest"],
)
def test_a_refused_release_downloads_nothing_but_its_manifest(
    sim: ReleaseRepositorySimulator,
    tmp_path: Path,
    contract: ContractIdentity | None,
    tamper: bool,
    code: str,
) -> None:
    keys = _publish(sim, tmp_path, contract=contract, tamper=tamper)
    result = _check(sim, tmp_path, keys)
    assert result.returncode == 2
    assert f"error: {code}:" in result.stderr
    assert BUNDLE not in _fetched(sim)
    assert not (tmp_path / "config" / "highest-seen.json").exists()


def test_update_paths_respect_the_fence(sim: ReleaseRepositorySimulator, tmp_path: Path) -> None:
    keys = _publish(sim, tmp_path)
    set_fence(tmp_path / "config", "service uninstall")
    for mode in ("--check", "--json"):  # the check, and the whole update
        refused = _check(sim, tmp_path, keys, mode)
        assert refused.returncode == 2
        assert "error: update_fenced:" in refused.stderr
    skipped = _check(sim, tmp_path, keys, "auto")
    assert skipped.returncode == 0, skipped.stderr
    assert json.loads(skipped.stdout)["reason"] == "update_fenced"
    assert sim.log == [], "a fenced update contacts nothing"
    clear_fence(tmp_path / "config")
    admitted = json.loads(_check(sim, tmp_path, keys).stdout)
    assert admitted["status"] == "admitted"
    assert _fetched(sim) == ["runtime-manifest.json", "runtime-manifest.json.minisig"]
    # Unfenced, `auto` runs the whole update: this release's "bundle" is not one, so it fails
    # after admission, at the download or install step, and nothing is activated.
    tried = _check(sim, tmp_path, keys, "auto")
    assert tried.returncode == 2 and "\nherdr-mcp: error: " in tried.stderr, tried.stderr
    assert not (tmp_path / "config" / "generations" / "runtime-status.json").exists()


def test_a_pinned_manifest_url_is_admitted_from_the_files_next_to_it(
    sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    keys = _publish(sim, tmp_path)
    url = sim.url(f"/{REPOSITORY}/releases/download/{TAG}/runtime-manifest.json", host=sim.download_host)
    result = _check(sim, tmp_path, keys, "--check", "--manifest-url", url)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "admitted"
    assert _fetched(sim) == ["runtime-manifest.json", "runtime-manifest.json.minisig"]
    assert [
        entry.path for entry in sim.log if "/releases?" in entry.path or entry.path.endswith("/releases")
    ] == []

    # The tag comes from the URL: a manifest served under another tag is refused as moved.
    moved = url.replace(f"/download/{TAG}/", "/download/v0.0.1/")
    refused = _check(sim, tmp_path, keys, "--check", "--manifest-url", moved)
    assert refused.returncode == 2

    for bad in (url.replace("runtime-manifest.json", "other.json"), url.replace("/download/", "/x/")):
        refused = _check(sim, tmp_path, keys, "--check", "--manifest-url", bad)
        assert refused.returncode == 2
        assert "error: manifest_url_invalid:" in refused.stderr


def test_the_repository_and_channel_come_from_the_settings_file_when_no_flag_names_them(
    sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    keys = _publish(sim, tmp_path)
    config = tmp_path / "config"
    config.mkdir()
    command = [
        sys.executable, "-m", "herdr_mcp", "update", "--check", "--json", "--no-sigstore",
        "--api-url", sim.api_base_url, *(f"--allowed-host={host}" for host in sorted(sim.hosts)),
        "--ca-file", str(sim.ca_file), "--keys", str(keys), "--config-dir", str(config),
    ]  # fmt: skip
    env = {
        key: value for key, value in os.environ.items() if not key.startswith("HERDR_MCP_UPDATE_REPOSITORY")
    }
    missing = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert missing.returncode == 2
    assert "error: update_config_invalid:" in missing.stderr and "update-settings.json" in missing.stderr

    settings = config / "update-settings.json"
    settings.write_text(json.dumps({"repository": REPOSITORY, "repository_id": REPOSITORY_ID}))
    found = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["status"] == "admitted"

    for bad in ({"repository": "no-slash"}, {"repository_id": "1"}, {"repository_id": True}):
        settings.write_text(json.dumps(bad))
        refused = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
        assert refused.returncode == 2
        assert "error: update_settings_invalid:" in refused.stderr
