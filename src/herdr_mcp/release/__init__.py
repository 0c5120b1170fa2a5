"""The release toolchain: the manifest model shared with the updater, and release signatures.

- `manifest`: `runtime-manifest.json` (`RuntimeManifest`, its one parser and canonical bytes,
  `build_manifest` from the tree).
- `minisign`: minisign-compatible Ed25519 keys and signatures over the exact manifest bytes,
  checked against the public keys pinned in the package (`herdr_mcp/attestations/release-keys/`).
- `attestation`: offline Sigstore verification (keyless signature of the manifest, GitHub
  artifact attestations) against the vendored trust root and the release identity policy.
- `build`: reproducible wheel + sdist with the pinned hatchling, and `check_reproducible`.
- `bundle`: the offline-installable, hash-locked wheelhouse of one target.

Only the manifest and minisign names are re-exported here: `attestation` imports sigstore (slow
to import) and `build`/`bundle` are maintainer-only, so they are imported from their modules.
"""

from herdr_mcp.release.manifest import (
    MANIFEST_FILENAME,
    Asset,
    AssetInput,
    ContractMigration,
    ManifestError,
    Provenance,
    RuntimeManifest,
    Source,
    build_manifest,
    contract_migration_from_file,
    github_download_base,
    resolve_repository,
    source_from_git,
)
from herdr_mcp.release.minisign import (
    SECRET_KEY_ENV,
    PublicKey,
    SecretKey,
    SignatureError,
    VerifiedSignature,
    keygen,
    load_pinned_keys,
    load_secret_key,
    sign,
    verify,
)

__all__ = [
    "MANIFEST_FILENAME",
    "SECRET_KEY_ENV",
    "Asset",
    "AssetInput",
    "ContractMigration",
    "ManifestError",
    "Provenance",
    "PublicKey",
    "RuntimeManifest",
    "SecretKey",
    "SignatureError",
    "Source",
    "VerifiedSignature",
    "build_manifest",
    "contract_migration_from_file",
    "github_download_base",
    "keygen",
    "load_pinned_keys",
    "load_secret_key",
    "resolve_repository",
    "sign",
    "source_from_git",
    "verify",
]
