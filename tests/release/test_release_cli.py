"""The maintainer's release commands end to end on a tagged clone: build, manifest, sign, verify."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from herdr_mcp import __version__
from herdr_mcp.contract import contract_identity
from herdr_mcp.errors import EXIT_REFUSED
from herdr_mcp.release.verification import PROVENANCE_BUNDLE_NAME, SIGNATURE_NAME, SIGSTORE_BUNDLE_NAME
from tests.support.release_evidence import sigstore_flags, write_evidence
from tests.support.runtime_harness import git
from tests.support.sigstore_stack import SigstoreStack

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "herdr_mcp", "release"]


@pytest.fixture(scope="module")
def minisign_binary() -> str:
    path = shutil.which("minisign")
    if path is None:
        pytest.fail("the minisign binary is required: apt-get install -y minisign")
    return path


def _release(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(result.stderr)
    return result


@pytest.fixture(scope="module")
def released(
    tmp_path_factory: pytest.TempPathFactory, sigstore_stack: SigstoreStack
) -> tuple[Path, Path, Path]:
    """A tagged clone of HEAD, its built dist, a manifest and a throwaway key pair; next to the
    manifest, the keyless signature and the provenance as the release workflow publishes them
    (made by the local Sigstore stack: `sigstore_flags` points `verify` at its trust root)."""
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
    write_evidence(sigstore_stack, manifest)
    return manifest, dist, keys


@pytest.fixture(scope="module")
def trust(released: tuple[Path, Path, Path], sigstore_stack: SigstoreStack) -> list[str]:
    """The verify flags: the test key pair and the stack's identity policy and trust root."""
    return ["--keys", str(released[2]), *sigstore_flags(sigstore_stack, released[2], "herdr-mcp/herdr-mcp")]


def test_manifest_is_built_from_the_tree(released: tuple[Path, Path, Path]) -> None:
    manifest, dist, _ = released
    document = json.loads(manifest.read_bytes())
    assert document["contract"] == contract_identity().to_dict()
    assert document["tag"] == f"v{__version__}"
    assert {asset["kind"] for asset in document["assets"]} == {"wheel", "sdist"}
    assert sorted(asset["name"] for asset in document["assets"]) == sorted(p.name for p in dist.iterdir())
    assert "contract_migration" not in document


def test_verify_accepts_its_own_output(released: tuple[Path, Path, Path], trust: list[str]) -> None:
    manifest, dist, _ = released
    answer = _release("verify", "--manifest", str(manifest), *trust, "--dist", str(dist))
    report = json.loads(answer.stdout)
    assert report["contract"] == contract_identity().to_dict()
    assert len(report["assets"]) == 2
    assert report["sigstore"] == "verified"
    assert report["provenance"] == {"subjects": 3}  # the manifest, the wheel and the sdist


def _beside(manifest: Path, folder: Path, *names: str) -> Path:
    """A copy of the manifest in `folder` with only the published files `names` next to it."""
    folder.mkdir()
    for name in (manifest.name, *names):
        (folder / name).write_bytes((manifest.parent / name).read_bytes())
    return folder / manifest.name


def test_verify_requires_the_keyless_signature_and_the_provenance(
    released: tuple[Path, Path, Path], trust: list[str], tmp_path: Path
) -> None:
    manifest, _, _ = released
    signature, sigstore, provenance = SIGNATURE_NAME, SIGSTORE_BUNDLE_NAME, PROVENANCE_BUNDLE_NAME
    cases = {
        "sigstore_missing": _beside(manifest, tmp_path / "a", signature, provenance),
        "provenance_missing": _beside(manifest, tmp_path / "b", signature, sigstore),
    }
    for code, copy in cases.items():
        result = _release("verify", "--manifest", str(copy), *trust, check=False)
        assert result.returncode == EXIT_REFUSED, (code, result.stdout)
        assert f"error: {code}:" in result.stderr
    # The provenance of other bytes (here: the manifest's keyless bundle given as provenance).
    mismatched = _release(
        "verify",
        "--manifest",
        str(manifest),
        *trust,
        "--attestation",
        str(manifest.parent / sigstore),
        check=False,
    )
    assert mismatched.returncode == EXIT_REFUSED
    assert "error: attestation_bundle_malformed:" in mismatched.stderr
    skipped = _release(
        "verify", "--manifest", str(cases["sigstore_missing"]), *trust, "--unsafe-skip-sigstore"
    )
    assert json.loads(skipped.stdout)["sigstore"] == "unsafe_skipped"
    assert "warning: --unsafe-skip-sigstore" in skipped.stderr


def test_verify_takes_any_bytes_in_the_untrusted_comment(
    released: tuple[Path, Path, Path], trust: list[str], tmp_path: Path, minisign_binary: str
) -> None:
    """The untrusted comment is covered by no signature; minisign ignores it, so do we (a
    non-UTF-8 one crashed `release verify` with UnicodeDecodeError)."""
    manifest, _, keys = released
    copy = _beside(manifest, tmp_path / "c", SIGSTORE_BUNDLE_NAME, PROVENANCE_BUNDLE_NAME)
    lines = (manifest.parent / SIGNATURE_NAME).read_bytes().split(b"\n")
    lines[0] = b"untrusted comment: \xff\xfe not UTF-8 \x1b[31m"
    (copy.parent / SIGNATURE_NAME).write_bytes(b"\n".join(lines))
    result = _release("verify", "--manifest", str(copy), *trust, check=False)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    # minisign itself accepts the same file.
    public = next(keys.glob("*.pub"))
    accepted = subprocess.run(
        [minisign_binary, "-V", "-p", str(public), "-m", str(copy), "-x", str(copy.parent / SIGNATURE_NAME)],
        capture_output=True,
        timeout=60,
    )
    assert accepted.returncode == 0, accepted.stderr


def test_verify_refuses_tampering_unpinned_keys_and_changed_assets(
    released: tuple[Path, Path, Path], trust: list[str], tmp_path: Path
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
        assert result.returncode == EXIT_REFUSED, (code, result.stderr)
        assert f"error: {code}:" in result.stderr
    changed = tmp_path / "dist"
    changed.mkdir()
    for path in dist.iterdir():
        (changed / path.name).write_bytes(path.read_bytes())
    wheel = next(changed.glob("*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    result = _release("verify", "--manifest", str(manifest), *trust, "--dist", str(changed), check=False)
    assert result.returncode == EXIT_REFUSED
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
    released: tuple[Path, Path, Path], trust: list[str], tmp_path: Path
) -> None:
    manifest, _, keys = released
    fixtures = Path(os.environ.get("HERDR_MCP_SIGSTORE_FIXTURES", REPO.parent / "shared/fixtures/sigstore"))
    if not fixtures.is_dir():
        fixtures = REPO / "tests/fixtures/sigstore"
    foreign = fixtures / "rfc8785-release.whl.sigstore.json"
    result = _release(
        "verify", "--manifest", str(manifest), *trust, "--sigstore-bundle", str(foreign), check=False
    )
    assert result.returncode == EXIT_REFUSED
    assert "error: attestation_untrusted_root:" in result.stderr
    # Against the packaged (public-good) root, the stack's own bundles are the foreign ones.
    packaged = _release("verify", "--manifest", str(manifest), "--keys", str(keys), check=False)
    assert packaged.returncode == EXIT_REFUSED
    assert "error: attestation_untrusted_root:" in packaged.stderr


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("herdr_mcp.whl", "not a valid wheel file name"),
        ("herdr_mcp-0.1.0.whl", "not a valid wheel file name"),
        ("herdr_mcp-notaversion-py3-none-any.whl", "not a valid wheel file name"),
        ("other_project-0.1.0-py3-none-any.whl", "a wheel of other-project, not of herdr-mcp"),
    ],
)
def test_manifest_refuses_a_badly_named_wheel(tmp_path: Path, name: str, needle: str) -> None:
    """`release manifest` reads the wheel's name with packaging.utils: a bad one is `manifest_value`
    on one line (it was an IndexError traceback, or another project's wheel taken as ours)."""
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / name).write_bytes(b"PK\x05\x06" + bytes(18))
    result = _release(
        "manifest", "--dist", str(dist), "--repository", "herdr-mcp/herdr-mcp", "--repository-id", "1",
        "--out", str(tmp_path / "runtime-manifest.json"), check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "manifest_value" in result.stderr
    assert needle in result.stderr
    assert not (tmp_path / "runtime-manifest.json").exists()
