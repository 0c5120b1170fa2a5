"""Discovery: which release is the update candidate (SPEC 6, first step).

`discover(config)` reads the GitHub releases index of one repository and returns either the
`Candidate` (the single highest release the channel admits) or `NoCandidate` with a reason. A
release is considered only if all of these hold, checked in this order (the first that fails is
the `SkippedRelease.reason`):

1. `draft`: it is not a draft.
2. `tag_malformed`: its tag is exactly "v" + a semantic version that round-trips: parsing the part
   after "v" with `packaging.version.Version` and writing it back in semver spelling
   (`MAJOR.MINOR.PATCH`, then `-alpha.N`, `-beta.N`, `-rc.N`, `-dev.N`) gives the same text. This
   refuses "1.2.0" (no "v"), "v1.2" (two parts), "v01.2.3" (leading zero), "v1.2.3+build" (build
   metadata), "v1.2.0-rc1" (a second spelling of v1.2.0-rc.1) and "v1.2.0-1" (a semver
   prerelease that PEP 440 reads as a post-release, so the two orders would disagree). For a
   final release the semver spelling is `str(Version(...))`.
3. `prerelease_not_in_channel`: the channel admits it: `preview` admits every release, `stable`
   none that is a prerelease by its version or by GitHub's `prerelease` flag.
4. `manifest_missing`: it carries exactly one asset named `runtime-manifest.json`.

Versions are ordered by `packaging` (so 1.2.0.dev1 < 1.2.0a1 < 1.2.0rc1 < 1.2.0).

"Never falls back" means precisely: the rules above decide what *is* a release for this channel;
they only look at the index, never at downloaded bytes. A newer GitHub release that lacks the
manifest or has a malformed tag is not a release of ours and is skipped (and listed in
`skipped`). Among the releases that pass, the highest is the candidate and the only one: if
anything later refuses it (its manifest, signature, contract, download, install, probe or gate),
the update stops there and no older release is tried. Likewise, every check discovery itself makes
on the highest release (its asset URLs, a second release with the same version) fails the whole
discovery instead of moving on to the next one.

Discovery never reads the contract and downloads nothing but index pages: not the manifest, not
any asset. Transport rules: HTTPS only, the first request goes to `config.api_base_url`, redirects
are followed (by hand, at most `max_redirects`) only to HTTPS URLs on `config.allowed_hosts`
(host names, any port), every body is capped while it streams, and one deadline bounds the
whole discovery.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import httpx2
from packaging.version import Version

from herdr_mcp.release.bundle import Channel
from herdr_mcp.release.manifest import MANIFEST_FILENAME, MAX_URL_LENGTH
from herdr_mcp.release.versions import release_version
from herdr_mcp.strict_json import JsonLimits, loads_bounded
from herdr_mcp.update.errors import ReleaseDataError, UpdateTransportError, UpdateUsageError
from herdr_mcp.update.transport import TransportRules, declared_length, open_client, stream_get

GITHUB_API_BASE_URL = "https://api.github.com"
#: Where GitHub answers API calls and serves release assets: `browser_download_url` is on
#: github.com, which redirects to a signed URL on objects.githubusercontent.com (older) or
#: release-assets.githubusercontent.com (since 2025).
GITHUB_HOSTS = frozenset(
    {
        "api.github.com",
        "github.com",
        "objects.githubusercontent.com",
        "release-assets.githubusercontent.com",
    }
)
#: The update channels and what they admit. They mirror [channels] in release/config.toml
#: (tests/update/test_discovery.py checks that the two agree); that file is not installed on a
#: workstation, so the updater carries its own copy.
CHANNELS: Mapping[str, Channel] = {
    "stable": Channel(name="stable", prereleases=False),
    "preview": Channel(name="preview", prereleases=True),
}

#: Releases per index page: the original updater read 20; GitHub allows 1..100.
DEFAULT_PER_PAGE = 20
#: Pages read at most. GitHub lists releases newest-created first, so 5 pages of 20 are the 100
#: most recently created releases: far more than the releases a channel publishes between two
#: daily checks.
DEFAULT_MAX_PAGES = 5
#: Largest index page accepted. GitHub caps a release body (its notes) at 125,000 characters,
#: at most 3 UTF-8 bytes each in the BMP: 20 releases x 375 KB = 7.5 MB, plus the asset lists.
DEFAULT_MAX_PAGE_BYTES = 8 * 1024 * 1024
#: What one index page may hold (docs/runtime.md "Parse boundaries"): GitHub's 100 releases of a
#: page, each with ~30 fields, an author and assets of ~40 items each, stay well under this.
PAGE_MAX_ITEMS = 500_000
#: GitHub redirects a renamed repository's API URL once; two more leave room for a CDN hop.
DEFAULT_MAX_REDIRECTS = 3
#: Seconds to connect (TCP + TLS) and to wait for any one read: GitHub answers in well under
#: a second; 10 s tolerates a slow network without hanging a scheduled run.
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_READ_TIMEOUT = 10.0
#: Seconds for the whole discovery (every page and redirect), so a server trickling bytes
#: just inside the read timeout cannot hold the updater: 5 pages at 8 MiB over a 2 MB/s link.
DEFAULT_DEADLINE = 60.0
#: Longest tag considered: "v" plus the manifest's 64-character version limit.
MAX_TAG_LENGTH = 65
#: Longest asset name GitHub accepts is 255 characters (asset URLs: the manifest's MAX_URL_LENGTH).
MAX_ASSET_NAME_LENGTH = 255

# GitHub: owner 1-39 alphanumerics or '-', repository name 1-100 of [A-Za-z0-9._-] but not "." or "..".
_REPOSITORY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,38}/(?!\.\.?$)[A-Za-z0-9._-]{1,100}")
_HOST = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")
_T = TypeVar("_T")


@dataclass(frozen=True)
class DiscoveryConfig:
    """Where to look, what the channel admits, and every limit discovery enforces.

    `allowed_hosts` are the host names a redirect may lead to (the first request goes to the
    host of `api_base_url` whether listed or not). `ca_file`, when set, is the only trust anchor
    instead of httpx2's default store (tests point it at the release repository simulator's CA).
    Raises `UpdateUsageError` (`discovery_not_https`, `update_config_invalid`) on construction
    when a value is unusable.
    """

    repository: str
    channel: Channel = CHANNELS["stable"]
    api_base_url: str = GITHUB_API_BASE_URL
    allowed_hosts: frozenset[str] = GITHUB_HOSTS
    ca_file: Path | None = None
    per_page: int = DEFAULT_PER_PAGE
    max_pages: int = DEFAULT_MAX_PAGES
    max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES
    max_redirects: int = DEFAULT_MAX_REDIRECTS
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    deadline: float = DEFAULT_DEADLINE

    def __post_init__(self) -> None:
        if _REPOSITORY.fullmatch(self.repository) is None:
            _invalid(f'repository {self.repository!r} is not a GitHub "owner/name"')
        url = _parse_url(self.api_base_url)
        if url is None or not url.host:
            _invalid(f"api_base_url {self.api_base_url!r} is not a URL")
        if url.scheme != "https":
            raise UpdateUsageError(
                "discovery_not_https",
                f"api_base_url {self.api_base_url!r} is not HTTPS; discovery only talks HTTPS",
            )
        if url.query or url.fragment:
            _invalid(f"api_base_url {self.api_base_url!r} must not have a query or fragment")
        for host in self.allowed_hosts:
            if not isinstance(host, str) or _HOST.fullmatch(host) is None:
                _invalid(f"allowed host {host!r} is not a lowercase host name")
        if not 1 <= self.per_page <= 100:
            _invalid(f"per_page must be 1..100 (GitHub's range), not {self.per_page}")
        for name in ("max_pages", "max_page_bytes"):
            if getattr(self, name) < 1:
                _invalid(f"{name} must be at least 1")
        if self.max_redirects < 0:
            _invalid("max_redirects must not be negative")
        for name in ("connect_timeout", "read_timeout", "deadline"):
            if not getattr(self, name) > 0:
                _invalid(f"{name} must be positive")

    @property
    def index_url(self) -> str:
        """The first page's URL without its query: `<api>/repos/<owner>/<name>/releases`."""
        return f"{self.api_base_url.rstrip('/')}/repos/{self.repository}/releases"

    def rules(self, prefix: str = "discovery") -> TransportRules:
        """The transport rules of these settings; `prefix` names the step in error codes."""
        return TransportRules(
            prefix=prefix,
            allowed_hosts=self.allowed_hosts,
            ca_file=self.ca_file,
            max_redirects=self.max_redirects,
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
        )


def channel_named(name: str) -> Channel:
    """The update channel called `name`. Raises `UpdateUsageError("update_channel_unknown")`."""
    try:
        return CHANNELS[name]
    except KeyError:
        raise UpdateUsageError(
            "update_channel_unknown", f"unknown channel {name!r}; use one of {', '.join(CHANNELS)}"
        ) from None


@dataclass(frozen=True)
class ReleaseAsset:
    """One asset of a release as the index lists it (nothing about it has been downloaded)."""

    id: int
    name: str
    size: int
    url: str
    content_type: str


@dataclass(frozen=True)
class IndexRelease:
    """One release as the index lists it: parsed and type-checked, not yet judged."""

    id: int
    tag: str
    draft: bool
    prerelease: bool
    assets: tuple[ReleaseAsset, ...]


@dataclass(frozen=True)
class SkippedRelease:
    """A listed release that is not a release of this channel, and why (module docstring)."""

    tag: str
    reason: str


@dataclass(frozen=True)
class Candidate:
    """The single highest release the channel admits: the only one this update may install.

    `manifest` is the `runtime-manifest.json` asset (URL and listed size; not downloaded);
    `assets` are the release's other assets. `prerelease` is True when the version or GitHub
    says so. `skipped` lists the releases of the index that were not releases of the channel.
    """

    tag: str
    version: Version
    prerelease: bool
    release_id: int
    manifest: ReleaseAsset
    assets: tuple[ReleaseAsset, ...]
    skipped: tuple[SkippedRelease, ...] = field(default=())


@dataclass(frozen=True)
class NoCandidate:
    """No release of the index is a release of this channel.

    `reason` is stable: `no_release_for_channel` (the index lists releases, none passes) or
    `no_releases` (the index is empty).
    """

    reason: str
    channel: str
    skipped: tuple[SkippedRelease, ...] = field(default=())


def discover(config: DiscoveryConfig) -> Candidate | NoCandidate:
    """Read the releases index of `config.repository` and choose the update candidate.

    Raises `UpdateTransportError` (`discovery_unreachable`, `discovery_timeout`,
    `discovery_http_error`, `discovery_not_https`, `discovery_redirect_refused`,
    `discovery_too_many_redirects`) when the index cannot be fetched, `ReleaseDataError`
    (`discovery_index_too_large`, `discovery_index_malformed`, `discovery_release_ambiguous`,
    `discovery_asset_url_refused`) when what it says cannot be used, and
    `UpdateUsageError("update_config_invalid")` when `config.ca_file` cannot be loaded.
    """
    deadline = time.monotonic() + config.deadline
    releases = list(_read_index(config, deadline))
    return choose(releases, config.channel, allowed_hosts=config.allowed_hosts)


def choose(
    releases: Sequence[IndexRelease], channel: Channel, *, allowed_hosts: frozenset[str]
) -> Candidate | NoCandidate:
    """The candidate among `releases` for `channel` (no I/O: the rules of the module docstring).

    Raises `ReleaseDataError` (`discovery_release_ambiguous` when two releases share the highest
    version, `discovery_asset_url_refused` when the candidate lists an asset that is not on an
    allowed HTTPS host).
    """
    admitted: list[tuple[Version, bool, IndexRelease, ReleaseAsset]] = []
    skipped: list[SkippedRelease] = []
    for release in releases:
        version = tag_version(release.tag)
        manifests = [asset for asset in release.assets if asset.name == MANIFEST_FILENAME]
        prerelease = release.prerelease or (version is not None and version.is_prerelease)
        if release.draft:
            reason = "draft"
        elif version is None:
            reason = "tag_malformed"
        elif prerelease and not channel.prereleases:
            reason = "prerelease_not_in_channel"
        elif len(manifests) != 1:
            reason = "manifest_missing"
        else:
            admitted.append((version, prerelease, release, manifests[0]))
            continue
        skipped.append(SkippedRelease(tag=release.tag, reason=reason))
    if not admitted:
        reason = "no_release_for_channel" if releases else "no_releases"
        return NoCandidate(reason=reason, channel=channel.name, skipped=tuple(skipped))
    admitted.sort(key=lambda entry: entry[0], reverse=True)
    version, prerelease, release, manifest = admitted[0]
    if len(admitted) > 1 and admitted[1][0] == version:
        raise ReleaseDataError(
            "discovery_release_ambiguous",
            f"the index lists release {release.tag} twice (ids {release.id} and {admitted[1][2].id}); "
            "refusing to guess which one to install",
        )
    for asset in release.assets:
        _check_asset_url(asset, release.tag, allowed_hosts)
    return Candidate(
        tag=release.tag,
        version=version,
        prerelease=prerelease,
        release_id=release.id,
        manifest=manifest,
        assets=tuple(asset for asset in release.assets if asset is not manifest),
        skipped=tuple(skipped),
    )


def tag_version(tag: str) -> Version | None:
    """The version of a tag that is exactly "v" + a round-tripping semver, else None."""
    if len(tag) > MAX_TAG_LENGTH or not tag.startswith("v"):
        return None
    return release_version(tag[1:])


def parse_index_page(data: bytes) -> list[IndexRelease]:
    """One page of `GET /repos/{owner}/{repo}/releases`: a JSON array of release objects.

    Only the fields discovery uses are read (and type-checked); others are ignored, as GitHub
    adds fields over time. Raises `ReleaseDataError("discovery_index_malformed")`.
    """
    try:
        # The page's size was capped as it was read; the cap here only guards a direct caller.
        limits = JsonLimits(max_bytes=max(len(data), DEFAULT_MAX_PAGE_BYTES), max_items=PAGE_MAX_ITEMS)
        document = loads_bounded(data, limits)
    except ValueError as exc:  # not UTF-8, not JSON, or past the bounds (its code in the text)
        raise _malformed(f"the releases index is not JSON within bounds ({exc})") from None
    if not isinstance(document, list):
        raise _malformed("the releases index is not a JSON array")
    return [_parse_release(entry, index) for index, entry in enumerate(document)]


# --- parsing -------------------------------------------------------------------------------------


def _parse_release(entry: object, index: int) -> IndexRelease:
    where = f"release [{index}]"
    if not isinstance(entry, dict):
        raise _malformed(f"{where} is not an object")
    assets = _get(entry, "assets", list, where)
    return IndexRelease(
        id=_get_int(entry, "id", where),
        tag=_get(entry, "tag_name", str, where),
        draft=_get(entry, "draft", bool, where),
        prerelease=_get(entry, "prerelease", bool, where),
        assets=_parse_assets(assets, f"{where} assets"),
    )


def _parse_assets(entries: list[Any], where: str) -> tuple[ReleaseAsset, ...]:
    assets: list[ReleaseAsset] = []
    for index, entry in enumerate(entries):
        at = f"{where} [{index}]"
        if not isinstance(entry, dict):
            raise _malformed(f"{at} is not an object")
        name = _get(entry, "name", str, at)
        url = _get(entry, "browser_download_url", str, at)
        if not 0 < len(name) <= MAX_ASSET_NAME_LENGTH or not 0 < len(url) <= MAX_URL_LENGTH:
            raise _malformed(f"{at} has an empty or overlong name or URL")
        content_type = entry.get("content_type", "")
        assets.append(
            ReleaseAsset(
                id=_get_int(entry, "id", at),
                name=name,
                size=_get_int(entry, "size", at),
                url=url,
                content_type=content_type if isinstance(content_type, str) else "",
            )
        )
    names = [asset.name for asset in assets]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise _malformed(f"{where} lists {', '.join(duplicates)} more than once")
    return tuple(assets)


def _get(entry: dict[str, Any], key: str, kind: type[_T], where: str) -> _T:
    value = entry.get(key)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise _malformed(f"{where}: {key!r} is missing or not a {kind.__name__}")
    return value


def _get_int(entry: dict[str, Any], key: str, where: str) -> int:
    value = _get(entry, key, int, where)
    if value < 0:
        raise _malformed(f"{where}: {key!r} is negative")
    return value


def _check_asset_url(asset: ReleaseAsset, tag: str, allowed_hosts: frozenset[str]) -> None:
    url = _parse_url(asset.url)
    if url is None or url.scheme != "https" or url.host not in allowed_hosts:
        raise ReleaseDataError(
            "discovery_asset_url_refused",
            f"release {tag} lists asset {asset.name} at {asset.url!r}, which is not HTTPS on an "
            f"allowed host ({', '.join(sorted(allowed_hosts))}); the update stops here",
        )


# --- transport -----------------------------------------------------------------------------------


def _read_index(config: DiscoveryConfig, deadline: float) -> Iterator[IndexRelease]:
    """Every release on the first `max_pages` pages, stopping at the first short page."""
    with _client(config) as client:
        for page in range(1, config.max_pages + 1):
            url = f"{config.index_url}?per_page={config.per_page}&page={page}"
            releases = parse_index_page(_fetch(client, url, config, deadline))
            if len(releases) > config.per_page:
                raise _malformed(f"page {page} lists {len(releases)} releases, asked for {config.per_page}")
            yield from releases
            if len(releases) < config.per_page:
                return


def _client(config: DiscoveryConfig) -> httpx2.Client:
    return open_client(
        config.rules(), accept="application/vnd.github+json", headers={"X-GitHub-Api-Version": "2022-11-28"}
    )


def _fetch(client: httpx2.Client, url: str, config: DiscoveryConfig, deadline: float) -> bytes:
    """GET `url`, following allowed redirects, and return the body (at most `max_page_bytes`)."""
    with stream_get(client, url, config.rules(), deadline) as response:
        return _read_capped(response, url, config, deadline)


def _read_capped(response: httpx2.Response, url: str, config: DiscoveryConfig, deadline: float) -> bytes:
    cap = config.max_page_bytes
    declared = declared_length(response)
    if declared is not None and declared > cap:
        raise _too_large(url, cap)
    body = bytearray()
    for chunk in response.iter_raw():
        body += chunk
        if len(body) > cap:
            raise _too_large(url, cap)
        if time.monotonic() > deadline:
            raise _timeout(url, config)
    return bytes(body)


# --- errors --------------------------------------------------------------------------------------


def _parse_url(text: str) -> httpx2.URL | None:
    try:
        return httpx2.URL(text)
    except (httpx2.InvalidURL, TypeError):
        return None


def _invalid(message: str) -> NoReturn:
    raise UpdateUsageError("update_config_invalid", message)


def _malformed(message: str) -> ReleaseDataError:
    return ReleaseDataError("discovery_index_malformed", message)


def _too_large(url: str, cap: int) -> ReleaseDataError:
    return ReleaseDataError(
        "discovery_index_too_large", f"GET {url} returned more than {cap} bytes; refused while reading"
    )


def _timeout(url: str, config: DiscoveryConfig) -> UpdateTransportError:
    return UpdateTransportError(
        "discovery_timeout",
        f"GET {url} did not finish in time (read timeout {config.read_timeout} s, discovery deadline "
        f"{config.deadline} s); try again later",
    )
