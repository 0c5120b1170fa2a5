"""`herdr-mcp update --check`: discover, fetch the manifest and its signatures, admit. No asset.

The first two steps of an update, and nothing else: discovery picks the single candidate, then
only `runtime-manifest.json`, its `.minisig` and (when the release has one) its
`.sigstore.json` are fetched, size-capped, and handed to admission. No bundle or other asset is
downloaded, whatever the outcome; the highest-seen version is not raised by a check (only an
install that follows an admission raises it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from herdr_mcp.release.manifest import MANIFEST_FILENAME, MAX_MANIFEST_BYTES
from herdr_mcp.update.admission import AdmissionPolicy, AlreadyCurrent, LocalIdentity, TrustedRelease, admit
from herdr_mcp.update.discovery import Candidate, DiscoveryConfig, NoCandidate, ReleaseAsset, discover
from herdr_mcp.update.errors import ReleaseDataError, UpdateTransportError
from herdr_mcp.update.highest_seen import read_highest_seen
from herdr_mcp.update.transport import declared_length, open_client, stream_get

SIGNATURE_NAME = MANIFEST_FILENAME + ".minisig"
SIGSTORE_NAME = MANIFEST_FILENAME + ".sigstore.json"
#: A minisign signature file is four short lines; a Sigstore bundle is a few KiB.
MAX_SIGNATURE_BYTES = 64 * 1024
MAX_SIGSTORE_BUNDLE_BYTES = 1024 * 1024
#: The whole check (three small files after discovery) must finish within this many seconds.
FETCH_DEADLINE_SECONDS = 120.0


@dataclass(frozen=True)
class CheckResult:
    """What a check found: no candidate, the current version, or an admitted release."""

    candidate: Candidate | NoCandidate
    outcome: TrustedRelease | AlreadyCurrent | None


def check_for_update(
    discovery: DiscoveryConfig, local: LocalIdentity, policy: AdmissionPolicy, highest_seen_file: Path
) -> CheckResult:
    """Discover and admit; raises the discovery, transport and `AdmissionRefused` errors."""
    candidate = discover(discovery)
    if isinstance(candidate, NoCandidate):
        return CheckResult(candidate, None)
    rules = discovery.rules(prefix="manifest")
    deadline = time.monotonic() + FETCH_DEADLINE_SECONDS
    by_name = {asset.name: asset for asset in candidate.assets}
    with open_client(rules) as client:

        def fetch(asset: ReleaseAsset, cap: int) -> bytes:
            with stream_get(client, asset.url, rules, deadline) as response:
                return _read_capped(response.iter_raw(), declared_length(response), asset.name, cap, deadline)

        manifest = fetch(candidate.manifest, MAX_MANIFEST_BYTES)
        signature_asset = by_name.get(SIGNATURE_NAME)
        if signature_asset is None:
            raise ReleaseDataError(
                "signature_missing", f"release {candidate.tag} has no {SIGNATURE_NAME}; it cannot be trusted"
            )
        signature = fetch(signature_asset, MAX_SIGNATURE_BYTES)
        sigstore_asset = by_name.get(SIGSTORE_NAME)
        bundle = fetch(sigstore_asset, MAX_SIGSTORE_BUNDLE_BYTES) if sigstore_asset is not None else None
    outcome = admit(
        manifest,
        signature,
        discovered_tag=candidate.tag,
        local=local,
        policy=policy,
        highest_seen=read_highest_seen(highest_seen_file),
        sigstore_bundle=bundle if policy.identity_policy is not None else None,
    )
    return CheckResult(candidate, outcome)


def _read_capped(
    chunks: Iterator[bytes], declared: int | None, name: str, cap: int, deadline: float
) -> bytes:
    """The body, refused as soon as it is known to exceed `cap` (before or while reading)."""
    if declared is not None and declared > cap:
        raise ReleaseDataError("manifest_too_large", f"{name} is larger than {cap} bytes; refused")
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > cap:
            raise ReleaseDataError("manifest_too_large", f"{name} is larger than {cap} bytes; refused")
        if time.monotonic() > deadline:
            raise UpdateTransportError("manifest_timeout", f"fetching {name} did not finish in time")
    return bytes(body)
