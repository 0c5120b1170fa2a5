"""One refusal for evidence over its size cap, whichever path reads it.

A release's evidence (the manifest, its minisign signature, the Sigstore bundle of the manifest
and the build provenance) is size-capped wherever it is read: while the updater downloads it
(`update/check.py`), where `release verify` reads it from disk (`cli/release.py`), and in the
parser of each (`manifest.py`, `minisign.py`, `attestation.py`). Each cap is defined once, by the
parser of that file, and each of these places refuses with the one code `evidence_too_large`
and a message naming the file and its cap (`too_large_message`), so an oversized Sigstore bundle
is the same refusal whether it was downloaded, read from disk or passed in as bytes (until
2026-12-01 it was `manifest_too_large`, `file_too_large` or `attestation_bundle_malformed`).
"""

from __future__ import annotations

from typing import Final

EVIDENCE_TOO_LARGE: Final = "evidence_too_large"


def too_large_message(name: str, cap: int, size: int | None = None) -> str:
    """What `evidence_too_large` says: which file, its cap, and its size when known."""
    seen = f"{size} bytes" if size is not None else "more"
    return (
        f"{name} is over its cap of {cap} bytes ({seen}); refused unread: "
        "a release's evidence is never that large"
    )
