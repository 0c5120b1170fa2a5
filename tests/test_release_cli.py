"""The maintainer's release commands end to end on a tagged clone: build, manifest, sign, verify."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from herdr_mcp import __version__
from herdr_mcp.contract import contract_identity
from tests.runtime_harness import git

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "herdr_mcp", "release"]


def _release(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(result.stderr)
    return result


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A tagged clone of HEAD, its built dist, a manifest and a throwaway key pair."""
    base = tmp_path_factory.mktemp("release")
    clone = base / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    git(clone, "tag", f"v{__version__}")
    dist = base / "dist"
    _release("build", "--source", str(clone), "--out", str(dist))
    manifest = base / "runtime-manifest.json"
    _release(
        "manifest", "--dist", str(dist), "--source", str(clone), "--repository", "herdr-mcp/herdr-mcp",
        "--repository-id", "123456", "--published-at", "2026-11-29T12:00:00Z", "--out", str(manifest),
    )  # fmt: skip
    keys = base / "keys"
    keys.mkdir()
    _release("keygen", "--public-key", str(keys / "release.pub"), "--secret-key", str(base / "release.key"))
    _release("sign", "--manifest", str(manifest), "--secret-key", str(base / "release.key"))
    return manifest, dist, keys


def test_manifest_is_built_from_the_tree(released: tuple[Path, Path, Path]) -> None:
    manifest, dist, _ = released
    document = json.loads(manifest.read_bytes())
    assert document["contract"] == contract_identity().to_dict()
    assert document["tag"] == f"v{__version__}"
    assert {asset["kind"] for asset in document["assets"]} == {"wheel", "sdist"}
    assert sorted(asset["name"] for asset in document["assets"]) == sorted(p.name for p in dist.iterdir())
    assert "contract_migration" not in document


def test_verify_accepts_its_own_output(released: tuple[Path, Path, Path]) -> None:
    manifest, dist, keys = released
    answer = _release("verify", "--manifest", str(manifest), "--keys", str(keys), "--dist", str(dist))
    report = json.loads(answer.stdout)
    assert report["contract"] == contract_identity().to_dict()
    assert len(report["assets"]) == 2


def test_verify_refuses_tampering_unpinned_keys_and_changed_assets(
    released: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    manifest, dist, keys = released
    tampered = tmp_path / "runtime-manifest.json"
    tampered.write_bytes(manifest.read_bytes().replace(b'"state_schema":', b'"state_schema": '))
    (tmp_path / "runtime-manifest.json.minisig").write_bytes(
        (manifest.parent / (manifest.name + ".minisig")).read_bytes()
    )
    cases = {
        "signature_invalid": ["--manifest", str(tampered), "--keys", str(keys)],
        "no_pinned_keys": ["--manifest", str(manifest)],
    }
    for code, arguments in cases.items():
        result = _release("verify", *arguments, check=False)
        assert result.returncode == 2, (code, result.stderr)
        assert f"error: {code}:" in result.stderr
    changed = tmp_path / "dist"
    changed.mkdir()
    for path in dist.iterdir():
        (changed / path.name).write_bytes(path.read_bytes())
    wheel = next(changed.glob("*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    result = _release(
        "verify", "--manifest", str(manifest), "--keys", str(keys), "--dist", str(changed), check=False
    )
    assert result.returncode == 2
    assert "error: asset_digest_mismatch:" in result.stderr


def test_migration_from_the_epoch_4_catalog(released: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, dist, _ = released
    clone = released[0].parent / "clone"
    out = tmp_path / "migrating.json"
    _release(
        "manifest", "--dist", str(dist), "--source", str(clone), "--repository", "herdr-mcp/herdr-mcp",
        "--repository-id", "123456", "--migrate-from", str(REPO / "manifests/contracts/runtime-epoch-4.json"),
        "--out", str(out),
    )  # fmt: skip
    migration = json.loads(out.read_bytes())["contract_migration"]
    assert migration["from"]["epoch"] == 4
    assert migration["from"]["tool_count"] == 18


def test_verify_runs_the_sigstore_check_and_refuses_a_foreign_bundle(
    released: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    manifest, _, keys = released
    fixtures = Path(os.environ.get("HERDR_MCP_SIGSTORE_FIXTURES", REPO.parent / "shared/fixtures/sigstore"))
    if not fixtures.is_dir():
        fixtures = REPO / "tests/fixtures/sigstore"
    foreign = fixtures / "rfc8785-release.whl.sigstore.json"
    result = _release(
        "verify",
        "--manifest",
        str(manifest),
        "--keys",
        str(keys),
        "--sigstore-bundle",
        str(foreign),
        check=False,
    )
    assert result.returncode == 2
    assert "error: attestation_" in result.stderr
