"""A release published on the release repository simulator as the release workflow does it
(`publish`): a bundle, its manifest, the minisign signature and the Sigstore evidence; and the
`Trust` a workstation pins for it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from herdr_mcp.contract import ContractIdentity
from herdr_mcp.release.attestation import MAX_BUNDLE_BYTES
from herdr_mcp.release.manifest import MANIFEST_FILENAME, MAX_MANIFEST_BYTES
from herdr_mcp.release.manifest_build import AssetInput, build_manifest
from herdr_mcp.release.minisign import MAX_SIGNATURE_FILE_BYTES, keygen, load_secret_key, sign
from herdr_mcp.release.verification import PROVENANCE_BUNDLE_NAME, SIGNATURE_NAME, SIGSTORE_BUNDLE_NAME
from tests.support.release_evidence import evidence, sigstore_flags
from tests.support.repository_sim import ReleaseRepositorySimulator
from tests.support.sigstore_stack import SigstoreStack

REPOSITORY = "herdr-mcp/herdr-mcp"
REPOSITORY_ID = 424242
VERSION = "9.0.0"
TAG = f"v{VERSION}"
BUNDLE = f"herdr-mcp-{VERSION}-linux-x86_64-cp311.tar.gz"

#: Each evidence file's cap, as its parser defines it.
EVIDENCE_CAPS = {
    MANIFEST_FILENAME: MAX_MANIFEST_BYTES,
    SIGNATURE_NAME: MAX_SIGNATURE_FILE_BYTES,
    SIGSTORE_BUNDLE_NAME: MAX_BUNDLE_BYTES,
    PROVENANCE_BUNDLE_NAME: MAX_BUNDLE_BYTES,
}


@dataclass(frozen=True)
class Trust:
    """What the workstation pins: the release keys dir and the Sigstore flags (policy, trust root)."""

    keys: Path
    sigstore: list[str]

    def flags(self) -> list[str]:
        return ["--keys", str(self.keys), *self.sigstore]


def publish(
    sim: ReleaseRepositorySimulator,
    tmp: Path,
    *,
    contract: ContractIdentity | None = None,
    tamper: bool = False,
    sigstore: bool = True,
    provenance: bool = True,
    target: str = "linux-x86_64-cp311",
    bundle_size: int | None = None,
    oversized: str | None = None,
) -> Trust:
    """Publish TAG as the release workflow does: a bundle, the manifest listing it, its minisign
    signature, its keyless Sigstore signature and the build provenance (each can be left out).
    `target` is the bundle's, `bundle_size` its size in bytes (default: one short line);
    `oversized` names one of the evidence files to publish one byte over its cap instead."""
    stack: SigstoreStack = sim.stack  # type: ignore[attr-defined]
    keys = tmp / "keys"
    keys.mkdir()
    keygen(keys / "release.pub", tmp / "release.key")
    bundle = tmp / BUNDLE.replace("linux-x86_64-cp311", target)
    line = b"not really a bundle, but its sha256 is signed\n"
    bundle.write_bytes(line if bundle_size is None else (line * (bundle_size // len(line) + 1))[:bundle_size])
    manifest = build_manifest(
        version=VERSION,
        repository=REPOSITORY,
        repository_id=REPOSITORY_ID,
        commit="3f1c2a9b8e7d6c5b4a39281706f5e4d3c2b1a098",
        ref=f"refs/tags/{TAG}",
        published_at=datetime(2026, 11, 29, 12, tzinfo=UTC),
        assets=[AssetInput(path=bundle, target=target, kind="bundle")],
    )
    if contract is not None:
        manifest = dataclasses.replace(manifest, contract=contract)
    data = manifest.to_bytes()
    signature = sign(data, load_secret_key(tmp / "release.key"), trusted_comment=f"herdr-mcp {TAG}")
    release = sim.add_release(TAG)
    signature_bundle, provenance_bundle = evidence(stack, data)
    files = {
        MANIFEST_FILENAME: data + (b" " if tamper else b""),
        SIGNATURE_NAME: signature.encode(),
        SIGSTORE_BUNDLE_NAME: signature_bundle if sigstore else None,
        PROVENANCE_BUNDLE_NAME: provenance_bundle if provenance else None,
    }
    if oversized is not None:
        files[oversized] = b" " * (EVIDENCE_CAPS[oversized] + 1)
    for name, content in files.items():
        if content is not None:
            release.add_asset(name, content)
    release.add_asset(bundle.name, bundle.read_bytes())
    return Trust(keys, sigstore_flags(stack, tmp, REPOSITORY))
