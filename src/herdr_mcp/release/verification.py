"""The one verifier of a published release: what `release verify` checks and admission relies on.

A release is published as a manifest plus three pieces of evidence over its exact bytes (SPEC 5):
a minisign signature by a pinned release key, a keyless Sigstore signature by the release
workflow, and the GitHub artifact attestation (SLSA provenance v1) of the manifest and every
asset. `verify_release` checks all three, offline, in one fixed order, and returns a
`VerifiedRelease`; it raises `ReleaseVerificationError` with a stable code at the first failure.
Bytes go in, a typed object comes out, and nothing here touches the network or the disk (apart
from reading the packaged Sigstore trust root, or the one `SigstoreTrust.trusted_root` names).

The checklist, numbered in `verify_release` exactly as here:

1. the minisign signature over the exact manifest bytes, by a pinned key, before anything is
   parsed (the minisign codes: `no_pinned_keys`, `evidence_too_large`, `signature_malformed`,
   `signature_algorithm_unsupported`, `signature_key_not_pinned`, `signature_invalid`);
2. parse, through the one parse boundary `RuntimeManifest.from_bytes` (the `manifest_*` codes);
3. the release's own tag identity: `tag` is "v" + `version` and `source.ref` is
   "refs/tags/" + `tag` (`tag_mismatch`); the Sigstore signer is judged at exactly that ref;
4. the identity policy names the manifest's source repository (`repository_mismatch`);
5. the keyless Sigstore signature over the same bytes, by the release workflow at that ref
   (`sigstore_missing` when the release has none; the `attestation_*` codes of
   `herdr_mcp.release.attestation` when it does not verify);
6. the build provenance: a DSSE attestation signed for the same workflow run (build config =
   the release workflow at that ref), SLSA provenance v1, whose subjects give the manifest's
   exact bytes and every asset the sha256 the manifest lists (`provenance_missing`,
   `provenance_mismatch`, or the other `attestation_*` codes).

Steps 5 and 6 are skipped only with `UnsafeSkipSigstore`, which a caller must construct by
name: there is no default that drops them (SPEC 6: all three are required in PROD).

Decisions:
- The signer ref is derived from the manifest's tag, and step 3 makes the manifest's source ref
  agree with it, so `release verify` and admission cannot judge the same release by different
  refs (they did until 2026-12-01: one used `source.ref`, the other the tag).
- The provenance must list the manifest itself, not only the assets: that binds the attestation
  to these exact manifest bytes, and the release workflow attests them together.
"""

from __future__ import annotations

import hashlib
from dataclasses import InitVar, dataclass
from pathlib import Path
from typing import Literal

from herdr_mcp.errors import RefusedFault
from herdr_mcp.release.attestation import (
    AttestationError,
    IdentityPolicy,
    Statement,
    trusted_root_age,
    verify_artifact_signature,
    verify_attestation,
)
from herdr_mcp.release.manifest import MANIFEST_FILENAME, ManifestError, RuntimeManifest
from herdr_mcp.release.minisign import PublicKey, SignatureError, VerifiedSignature, verify

#: The published files next to the manifest (release.yml writes them; release/README.md).
SIGNATURE_NAME = MANIFEST_FILENAME + ".minisig"
SIGSTORE_BUNDLE_NAME = MANIFEST_FILENAME + ".sigstore.json"
PROVENANCE_BUNDLE_NAME = "runtime-provenance.sigstore.json"


class ReleaseVerificationError(RefusedFault):
    """A published release failed verification; `code` is stable, `message` says what to do.

    `manifest` is the parsed manifest when the failure came after its signature held and it
    parsed (steps 3 to 6), else None: bytes that were not signed are never described.
    """

    def __init__(self, code: str, message: str, manifest: RuntimeManifest | None = None) -> None:
        super().__init__(code, message)
        self.manifest = manifest


@dataclass(frozen=True)
class SigstoreTrust:
    """Whom Sigstore evidence must come from: the identity policy (repository, workflow, refs,
    issuer, runner) and the trust root (None: the vendored one packaged with herdr-mcp)."""

    identity_policy: IdentityPolicy
    trusted_root: Path | None = None


@dataclass(frozen=True)
class UnsafeSkipSigstore:
    """Skip the keyless signature and the provenance: only the minisign key vouches for the
    release. For a user who said so by name (`--unsafe-skip-sigstore`), never a default."""


@dataclass(frozen=True)
class ReleaseTrust:
    """What a release must be verified against: the pinned minisign keys and Sigstore's signer."""

    public_keys: tuple[PublicKey, ...]
    sigstore: SigstoreTrust | UnsafeSkipSigstore


@dataclass(frozen=True)
class PublishedRelease:
    """A release's manifest and its evidence, as published (None: the release has no such file)."""

    manifest: bytes
    signature: str | bytes
    sigstore_bundle: bytes | None
    provenance_bundle: bytes | None


_VERIFIED = object()


@dataclass(frozen=True)
class VerifiedRelease:
    """A manifest whose evidence held. `sigstore` says whether steps 5 and 6 ran or were skipped
    by the unsafe choice; `provenance` is the verified statement (None when skipped). Only
    `verify_release` makes one (a TypeError otherwise, `dataclasses.replace` included), so a
    value of this type always means that it ran."""

    manifest: RuntimeManifest
    manifest_sha256: str
    signature: VerifiedSignature
    sigstore: Literal["verified", "unsafe_skipped"]
    provenance: Statement | None
    _verified: InitVar[object] = None

    def __post_init__(self, _verified: object) -> None:
        if _verified is not _VERIFIED:
            raise TypeError("a VerifiedRelease is made by verify_release() only")


def trust_root_warning(sigstore: SigstoreTrust | UnsafeSkipSigstore) -> str | None:
    """The warning for a trust root past the project's age limit, by the rule `release verify`
    applies (`attestation.TrustedRootAge.warning`: no key newer than `TRUSTED_ROOT_STALE_AFTER`),
    for the root `sigstore` checks against; None when it is fresh, when the checks are skipped,
    or when it cannot be read (the verification itself then refuses, saying why)."""
    if isinstance(sigstore, UnsafeSkipSigstore):
        return None
    try:
        return trusted_root_age(sigstore.trusted_root).warning
    except AttestationError:
        return None


def verify_release(published: PublishedRelease, trust: ReleaseTrust) -> VerifiedRelease:
    """Verify `published` against `trust` (the checklist in the module docstring).

    Returns a `VerifiedRelease`; raises `ReleaseVerificationError`. No network, no writes.
    """
    data = published.manifest
    # 1. minisign over the exact bytes, by a pinned key, before anything is parsed.
    try:
        signature = verify(data, published.signature, trust.public_keys)
    except SignatureError as exc:
        raise ReleaseVerificationError(exc.code, exc.message) from None
    # 2. The one parse boundary.
    try:
        manifest = RuntimeManifest.from_bytes(data)
    except ManifestError as exc:
        raise ReleaseVerificationError(exc.code, exc.message) from None
    digest = hashlib.sha256(data).hexdigest()
    # 3. The release's own tag identity; the signer ref follows from it.
    ref = "refs/tags/" + manifest.tag
    if manifest.tag != "v" + manifest.version or manifest.source.ref != ref:
        raise ReleaseVerificationError(
            "tag_mismatch",
            f"the manifest's tag {manifest.tag!r}, version {manifest.version} and source ref "
            f"{manifest.source.ref!r} disagree; a release tag is 'v' + version and its ref refs/tags/<tag>",
            manifest,
        )
    if isinstance(trust.sigstore, UnsafeSkipSigstore):
        return VerifiedRelease(manifest, digest, signature, "unsafe_skipped", None, _VERIFIED)
    # 4. The identity policy is about this release's repository.
    base = trust.sigstore.identity_policy
    if base.repository != manifest.source.repository:
        raise ReleaseVerificationError(
            "repository_mismatch",
            f"the release was built from {manifest.source.repository}, but the signer identity policy "
            f"is for {base.repository}; pass the identity policy of that repository",
            manifest,
        )
    try:
        policy = base.with_ref(ref)
    except AttestationError as exc:
        raise ReleaseVerificationError(exc.code, f"release {manifest.tag}: {exc.message}", manifest) from None
    root = trust.sigstore.trusted_root
    # 5. The keyless Sigstore signature over the same bytes, by the release workflow at `ref`.
    if published.sigstore_bundle is None:
        raise ReleaseVerificationError(
            "sigstore_missing",
            f"release {manifest.tag} has no {SIGSTORE_BUNDLE_NAME}: its manifest carries no keyless "
            "signature by the release workflow, so it cannot be trusted",
            manifest,
        )
    try:
        verify_artifact_signature(data, published.sigstore_bundle, policy, trusted_root=root)
    except AttestationError as exc:
        raise ReleaseVerificationError(exc.code, f"{SIGSTORE_BUNDLE_NAME}: {exc.message}", manifest) from None
    # 6. The build provenance covers these manifest bytes and every asset's digest.
    provenance = _verify_provenance(manifest, digest, published.provenance_bundle, policy, root)
    return VerifiedRelease(manifest, digest, signature, "verified", provenance, _VERIFIED)


def _verify_provenance(
    manifest: RuntimeManifest, digest: str, bundle: bytes | None, policy: IdentityPolicy, root: Path | None
) -> Statement:
    if bundle is None:
        raise ReleaseVerificationError(
            "provenance_missing",
            f"release {manifest.tag} has no {PROVENANCE_BUNDLE_NAME}: nothing says its assets were "
            "built by the release workflow, so it cannot be trusted",
            manifest,
        )
    subjects = {asset.name: asset.sha256 for asset in manifest.assets}
    subjects[MANIFEST_FILENAME] = digest
    try:
        return verify_attestation(bundle, policy, subjects, trusted_root=root)
    except AttestationError as exc:
        code = "provenance_mismatch" if exc.code == "attestation_subject_mismatch" else exc.code
        raise ReleaseVerificationError(code, f"{PROVENANCE_BUNDLE_NAME}: {exc.message}", manifest) from None
