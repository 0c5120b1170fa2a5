"""The release toolchain: the manifest model shared with the updater, and release signatures.

- `manifest`: `runtime-manifest.json` (`RuntimeManifest`, its one parser and canonical bytes).
- `manifest_build`: the maintainer's side of it: `build_manifest` from the tree's assets, the
  previous contract of a migration, the source commit and ref from git.
- `minisign`: minisign-compatible Ed25519 keys and signatures over the exact manifest bytes,
  checked against the public keys pinned in the package (`herdr_mcp/attestations/release-keys/`).
- `attestation`: offline Sigstore verification (keyless signature of the manifest, GitHub
  artifact attestations) against the vendored trust root and the release identity policy.
- `build`: reproducible wheel + sdist with the pinned hatchling, and `check_reproducible`.
- `bundle`: the offline-installable, hash-locked wheelhouse of one target.

Only the manifest and minisign names are re-exported here: `attestation` imports sigstore (slow
to import) and `manifest_build`/`build`/`bundle` are maintainer-only, so they are imported from
their modules.
"""

from herdr_mcp.release.manifest import (
    MANIFEST_FILENAME,
    Asset,
    ContractMigration,
    ManifestError,
    Provenance,
    RuntimeManifest,
    Source,
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
    "ContractMigration",
    "ManifestError",
    "Provenance",
    "PublicKey",
    "RuntimeManifest",
    "SecretKey",
    "SignatureError",
    "Source",
    "VerifiedSignature",
    "keygen",
    "load_pinned_keys",
    "load_secret_key",
    "sign",
    "verify",
]
