"""`herdr-mcp update --check`: discover, fetch the manifest and its evidence, admit. No asset.

The first two steps of an update, and nothing else: discovery picks the single candidate, then
only `runtime-manifest.json`, its `.minisig`, its `.sigstore.json` and the release's
`runtime-provenance.sigstore.json` are fetched, each capped at its parser's cap
(`evidence_too_large` past it, `release/evidence.py`), and handed to admission (a release
without one of them is refused there, `sigstore_missing` or `provenance_missing`). No bundle or
other asset is downloaded, whatever the outcome; the highest-seen version is not raised by a
check (only an install that follows an admission raises it).

Every URL is checked against the transport rules (HTTPS, an allowed host) before its first
byte is requested, including a manifest URL the user pinned (`manifest_not_https`,
`manifest_host_refused`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from herdr_mcp.release.attestation import MAX_BUNDLE_BYTES
from herdr_mcp.release.evidence import EVIDENCE_TOO_LARGE, too_large_message
from herdr_mcp.release.manifest import MANIFEST_FILENAME, MAX_MANIFEST_BYTES
from herdr_mcp.release.minisign import MAX_SIGNATURE_FILE_BYTES
from herdr_mcp.release.verification import (
    PROVENANCE_BUNDLE_NAME,
    SIGNATURE_NAME,
    SIGSTORE_BUNDLE_NAME,
    PublishedRelease,
    UnsafeSkipSigstore,
)
from herdr_mcp.update.admission import AdmissionPolicy, AlreadyCurrent, LocalIdentity, TrustedRelease, admit
from herdr_mcp.update.discovery import Candidate, DiscoveryConfig, NoCandidate, discover
from herdr_mcp.update.errors import ReleaseDataError, UpdateTransportError, UpdateUsageError
from herdr_mcp.update.highest_seen import read_highest_seen
from herdr_mcp.update.transport import (
    TransportRules,
    check_https_url,
    declared_length,
    open_client,
    stream_get,
)

#: The whole check (three small files after discovery) must finish within this many seconds.
FETCH_DEADLINE_SECONDS = 120.0


@dataclass(frozen=True)
class CheckResult:
    """What a check found: no candidate, the current version, or an admitted release.
    `candidate` is None for a release pinned by its manifest URL (nothing was discovered)."""

    candidate: Candidate | NoCandidate | None
    outcome: TrustedRelease | AlreadyCurrent | None


def check_for_update(
    discovery: DiscoveryConfig, local: LocalIdentity, policy: AdmissionPolicy, highest_seen_file: Path
) -> CheckResult:
    """Discover and admit; raises the discovery, transport and `AdmissionRefused` errors."""
    candidate = discover(discovery)
    if isinstance(candidate, NoCandidate):
        return CheckResult(candidate, None)
    by_name = {asset.name: asset for asset in candidate.assets}
    signature_asset = by_name.get(SIGNATURE_NAME)
    if signature_asset is None:
        raise ReleaseDataError(
            "signature_missing", f"release {candidate.tag} has no {SIGNATURE_NAME}; it cannot be trusted"
        )
    sigstore_asset = by_name.get(SIGSTORE_BUNDLE_NAME)
    provenance_asset = by_name.get(PROVENANCE_BUNDLE_NAME)
    outcome = fetch_and_admit(
        ReleaseFiles(
            tag=candidate.tag,
            manifest_url=candidate.manifest.url,
            signature_url=signature_asset.url,
            sigstore_url=sigstore_asset.url if sigstore_asset is not None else None,
            provenance_url=provenance_asset.url if provenance_asset is not None else None,
        ),
        discovery.rules(prefix="manifest"),
        local,
        policy,
        highest_seen_file,
    )
    return CheckResult(candidate, outcome)


@dataclass(frozen=True)
class ReleaseFiles:
    """Where one release's manifest and evidence are (discovered, or next to a pinned manifest).

    A None URL: the release lists no such file (admission decides what that means)."""

    tag: str
    manifest_url: str
    signature_url: str
    sigstore_url: str | None
    provenance_url: str | None
    #: True when the Sigstore URLs are only where the bundles would be (a pinned manifest's
    #: neighbours): a 404 there means the release has no such file.
    evidence_guessed: bool = False


def pinned_release_files(manifest_url: str, rules: TransportRules) -> ReleaseFiles:
    """The files of a release pinned by its manifest URL, which must be an HTTPS release download
    URL `.../download/<tag>/runtime-manifest.json` on an allowed host (checked here, before any
    byte is requested): the signatures are the files next to it, and the tag in the URL is the
    one admission checks the manifest against. Raises `UpdateUsageError` (`manifest_url_invalid`,
    `manifest_not_https`, `manifest_host_refused`)."""
    check_https_url(manifest_url, rules)
    head, _, name = manifest_url.partition("?")[0].rpartition("/")
    tag = head.rpartition("/")[2]
    if name != MANIFEST_FILENAME or not head.rpartition("/")[0].endswith("/download") or not tag:
        raise UpdateUsageError(
            "manifest_url_invalid",
            f"{manifest_url} is not a release download URL ending in /download/<tag>/{MANIFEST_FILENAME}",
        )
    return ReleaseFiles(
        tag=tag,
        manifest_url=manifest_url,
        signature_url=f"{head}/{SIGNATURE_NAME}",
        sigstore_url=f"{head}/{SIGSTORE_BUNDLE_NAME}",
        provenance_url=f"{head}/{PROVENANCE_BUNDLE_NAME}",
        evidence_guessed=True,
    )


def fetch_and_admit(
    files: ReleaseFiles,
    rules: TransportRules,
    local: LocalIdentity,
    policy: AdmissionPolicy,
    highest_seen_file: Path,
) -> TrustedRelease | AlreadyCurrent:
    """Fetch the manifest and its evidence (size-capped, within `FETCH_DEADLINE_SECONDS`) and
    admit it. The Sigstore bundles are not fetched when the policy skips them (unsafe)."""
    deadline = time.monotonic() + FETCH_DEADLINE_SECONDS
    wanted = [files.manifest_url, files.signature_url]
    if not isinstance(policy.sigstore, UnsafeSkipSigstore):
        wanted += [url for url in (files.sigstore_url, files.provenance_url) if url is not None]
    for url in wanted:  # every URL obeys the rules before the first byte is requested
        check_https_url(url, rules)
    with open_client(rules) as client:

        def fetch(url: str, name: str, cap: int) -> bytes:
            with stream_get(client, url, rules, deadline) as response:
                return _read_capped(response.iter_raw(), declared_length(response), name, cap, deadline)

        def fetch_evidence(url: str | None, name: str) -> bytes | None:
            if url is None or isinstance(policy.sigstore, UnsafeSkipSigstore):
                return None
            try:
                return fetch(url, name, MAX_BUNDLE_BYTES)
            except UpdateTransportError as exc:
                # A pinned release's neighbour that is not there: the release has no such file.
                if files.evidence_guessed and exc.http_status == 404:
                    return None
                raise

        published = PublishedRelease(
            manifest=fetch(files.manifest_url, MANIFEST_FILENAME, MAX_MANIFEST_BYTES),
            signature=fetch(files.signature_url, SIGNATURE_NAME, MAX_SIGNATURE_FILE_BYTES),
            sigstore_bundle=fetch_evidence(files.sigstore_url, SIGSTORE_BUNDLE_NAME),
            provenance_bundle=fetch_evidence(files.provenance_url, PROVENANCE_BUNDLE_NAME),
        )
    return admit(
        published,
        discovered_tag=files.tag,
        local=local,
        policy=policy,
        highest_seen=read_highest_seen(highest_seen_file),
    )


def _read_capped(
    chunks: Iterator[bytes], declared: int | None, name: str, cap: int, deadline: float
) -> bytes:
    """The body, refused as soon as it is known to exceed `cap` (before or while reading) with
    the one code for oversized evidence (`release/evidence.py`)."""
    if declared is not None and declared > cap:
        raise ReleaseDataError(EVIDENCE_TOO_LARGE, too_large_message(name, cap, declared))
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > cap:
            raise ReleaseDataError(EVIDENCE_TOO_LARGE, too_large_message(name, cap))
        if time.monotonic() > deadline:
            raise UpdateTransportError("manifest_timeout", f"fetching {name} did not finish in time")
    return bytes(body)
