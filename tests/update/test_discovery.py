"""Discovery (SPEC 6) against the release repository simulator: one table of cases, then limits.

Every case ends by checking the simulator's log: discovery requested index pages and nothing
else (no manifest, no asset), whatever it decided.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.version import Version

from herdr_mcp.release.bundle import load_release_config
from herdr_mcp.release.manifest import MANIFEST_FILENAME
from herdr_mcp.release.versions import semver_text
from herdr_mcp.update.discovery import (
    CHANNELS,
    Candidate,
    DiscoveryConfig,
    NoCandidate,
    channel_named,
    discover,
    tag_version,
)
from herdr_mcp.update.errors import ReleaseDataError, UpdateError, UpdateTransportError, UpdateUsageError
from tests.support.repository_sim import API_HOST, DOWNLOAD_HOST, Behavior, ReleaseRepositorySimulator

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = "herdr/herdr-mcp"


@pytest.fixture
def sim() -> Iterator[ReleaseRepositorySimulator]:
    with ReleaseRepositorySimulator(REPOSITORY) as simulator:
        yield simulator


def config_for(sim: ReleaseRepositorySimulator, **overrides: object) -> DiscoveryConfig:
    base = DiscoveryConfig(
        repository=REPOSITORY,
        api_base_url=sim.api_base_url,
        allowed_hosts=sim.hosts,
        ca_file=sim.ca_file,
        read_timeout=5.0,
        deadline=10.0,
    )
    return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]


def publish(
    sim: ReleaseRepositorySimulator,
    tag: str,
    *,
    manifest: bool = True,
    draft: bool = False,
    prerelease: bool | None = None,
) -> None:
    """A release as the release workflow makes it: the manifest and one bundle."""
    release = sim.add_release(tag, draft=draft, prerelease=prerelease)
    if manifest:
        release.add_asset(MANIFEST_FILENAME, b'{"not": "read by discovery"}', content_type="application/json")
    release.add_asset(f"herdr-mcp-{tag[1:]}-linux-x86_64-cp311.tar.gz", b"bundle bytes")


def assert_only_index_requested(sim: ReleaseRepositorySimulator) -> None:
    assert sim.log, "discovery made no request at all"
    assert sim.downloads() == []
    assert {entry.path for entry in sim.log} == {f"/repos/{REPOSITORY}/releases"}


Setup = Callable[[ReleaseRepositorySimulator], object]


# --- the table -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    setup: Setup
    tag: str | None = None  # the expected candidate
    no_candidate: str | None = None  # or the expected NoCandidate reason
    error: tuple[type[UpdateError], str] | None = None  # or the expected error
    channel: str = "stable"
    skipped: tuple[tuple[str, str], ...] | None = None  # (tag, reason) when the case is about skipping
    allowed: frozenset[str] = frozenset({API_HOST, DOWNLOAD_HOST})
    hosts_contacted: frozenset[str] = frozenset({API_HOST})


def releases(*tags: str) -> Setup:
    def setup(sim: ReleaseRepositorySimulator) -> None:
        for tag in tags:
            publish(sim, tag)

    return setup


def then(
    *steps: Setup,
) -> Setup:
    def setup(sim: ReleaseRepositorySimulator) -> None:
        for step in steps:
            step(sim)

    return setup


def release(tag: str, *, manifest: bool = True, draft: bool = False, prerelease: bool | None = None) -> Setup:
    return lambda sim: publish(sim, tag, manifest=manifest, draft=draft, prerelease=prerelease)


def api(behavior: Behavior) -> Setup:
    def setup(sim: ReleaseRepositorySimulator) -> None:
        sim.api_behavior = behavior

    return setup


MALFORMED_TAGS = {
    "no_v": "1.2.0",
    "two_parts": "v1.2",
    "leading_zero": "v01.2.3",
    "build_metadata": "v1.2.3+build",
    "capital_v": "V1.2.3",
    "four_parts": "v1.2.3.4",
    "pep440_spelling": "v1.2.0rc1",
    "second_semver_spelling": "v1.2.0-rc1",
    "semver_pre_read_as_post": "v1.2.0-1",
    "epoch": "v1!1.2.0",
    "whitespace": "v1.2.3 ",
    "empty_prerelease": "v1.2.3-",
}

CASES = [
    Case("highest_stable_wins", releases("v1.0.0", "v1.10.0", "v1.2.0", "v1.9.9"), tag="v1.10.0"),
    Case(
        "prerelease_ignored_on_stable",
        releases("v1.0.0", "v1.1.0-rc.1"),
        tag="v1.0.0",
        skipped=(("v1.1.0-rc.1", "prerelease_not_in_channel"),),
    ),
    Case(
        "prerelease_chosen_on_preview",
        releases("v1.0.0", "v1.1.0-rc.1"),
        tag="v1.1.0-rc.1",
        channel="preview",
    ),
    Case(
        "preview_prefers_the_final_release",
        releases("v1.1.0-rc.1", "v1.1.0", "v1.1.0-beta.2"),
        tag="v1.1.0",
        channel="preview",
    ),
    Case(
        "prerelease_order_by_packaging",
        releases("v2.0.0-alpha.3", "v2.0.0-beta.1"),
        tag="v2.0.0-beta.1",
        channel="preview",
    ),
    Case(
        "github_prerelease_flag_on_a_final_tag_is_not_stable",
        then(release("v1.0.0"), release("v1.1.0", prerelease=True)),
        tag="v1.0.0",
        skipped=(("v1.1.0", "prerelease_not_in_channel"),),
    ),
    Case(
        "draft_ignored",
        then(release("v1.0.0"), release("v2.0.0", draft=True)),
        tag="v1.0.0",
        skipped=(("v2.0.0", "draft"),),
    ),
    Case(
        "draft_ignored_on_preview",
        then(release("v1.0.0"), release("v2.0.0-rc.1", draft=True)),
        tag="v1.0.0",
        channel="preview",
    ),
    *(
        Case(
            f"malformed_tag_{kind}",
            releases("v1.0.0", tag),
            tag="v1.0.0",
            channel="preview",
            skipped=((tag, "tag_malformed"),),
        )
        for kind, tag in MALFORMED_TAGS.items()
    ),
    # No fallback, precisely: v1.1.0 without a manifest is not a release of ours, so v1.0.0 is the
    # highest release and the candidate. Had v1.1.0 carried a manifest, it would be the candidate
    # and, if any later step refused it, the update would stop (no older release is tried).
    Case(
        "newer_release_without_manifest_is_not_a_release",
        then(release("v1.0.0"), release("v1.1.0", manifest=False)),
        tag="v1.0.0",
        skipped=(("v1.1.0", "manifest_missing"),),
    ),
    Case(
        "manifest_name_must_match_exactly",
        then(
            release("v1.0.0"),
            lambda sim: sim.add_release("v1.1.0").add_asset("Runtime-Manifest.json", b"{}"),
        ),
        tag="v1.0.0",
        skipped=(("v1.1.0", "manifest_missing"),),
    ),
    Case("only_prereleases_on_stable", releases("v1.0.0-rc.1"), no_candidate="no_release_for_channel"),
    Case(
        "only_releases_without_manifest",
        release("v1.0.0", manifest=False),
        no_candidate="no_release_for_channel",
    ),
    Case("empty_index", releases(), no_candidate="no_releases"),
    Case(
        "same_version_twice_is_ambiguous",
        releases("v1.0.0", "v1.0.0"),
        error=(ReleaseDataError, "discovery_release_ambiguous"),
    ),
    Case(
        "candidate_asset_on_a_host_not_allowed",
        releases("v1.0.0"),
        allowed=frozenset({API_HOST}),
        error=(ReleaseDataError, "discovery_asset_url_refused"),
    ),
    Case(
        "redirect_to_an_allowed_host_is_followed",
        then(releases("v1.0.0"), api(Behavior(redirect_host=DOWNLOAD_HOST, redirect_status=301))),
        tag="v1.0.0",
        hosts_contacted=frozenset({API_HOST, DOWNLOAD_HOST}),
    ),
    Case(
        "redirect_to_a_host_not_allowed_is_refused",
        then(releases("v1.0.0"), api(Behavior(redirect_host=DOWNLOAD_HOST))),
        allowed=frozenset({API_HOST}),
        error=(UpdateTransportError, "discovery_redirect_refused"),
    ),
    Case(
        "redirect_to_a_foreign_name_is_refused",
        then(releases("v1.0.0"), api(Behavior(redirect_host="evil.invalid"))),
        error=(UpdateTransportError, "discovery_redirect_refused"),
    ),
    Case(
        "redirect_to_http_is_refused_even_on_an_allowed_host",
        then(releases("v1.0.0"), api(Behavior(redirect_host=DOWNLOAD_HOST, redirect_scheme="http"))),
        error=(UpdateTransportError, "discovery_not_https"),
    ),
    Case(
        "redirect_loop",
        then(releases("v1.0.0"), api(Behavior(redirect_host=API_HOST, redirect_status=307))),
        error=(UpdateTransportError, "discovery_too_many_redirects"),
    ),
    Case(
        "http_500",
        then(releases("v1.0.0"), api(Behavior(status=500))),
        error=(UpdateTransportError, "discovery_http_error"),
    ),
    Case(
        "http_404",
        then(releases("v1.0.0"), api(Behavior(status=404))),
        error=(UpdateTransportError, "discovery_http_error"),
    ),
    Case(
        "oversized_index_with_content_length",
        then(lambda sim: sim.add_release("v1.0.0", body="x" * 200_000), releases("v1.0.1")),
        error=(ReleaseDataError, "discovery_index_too_large"),
    ),
    Case(
        "oversized_index_without_content_length",
        then(lambda sim: sim.add_release("v1.0.0", body="x" * 200_000), api(Behavior(chunked=True))),
        error=(ReleaseDataError, "discovery_index_too_large"),
    ),
    Case(
        "content_length_understating_an_oversized_body",
        then(lambda sim: sim.add_release("v1.0.0", body="x" * 200_000), api(Behavior(declared_length=100))),
        error=(ReleaseDataError, "discovery_index_malformed"),
    ),
    Case(
        "index_not_json",
        api(Behavior(body=b"<html>rate limited</html>")),
        error=(ReleaseDataError, "discovery_index_malformed"),
    ),
    Case(
        "index_not_a_list",
        api(Behavior(body=b'{"message": "hi"}')),
        error=(ReleaseDataError, "discovery_index_malformed"),
    ),
    Case(
        "index_duplicate_key",
        api(
            Behavior(
                body=b'[{"id": 1, "id": 2, "tag_name": "v1.0.0", "draft": false, '
                b'"prerelease": false, "assets": []}]'
            )
        ),
        error=(ReleaseDataError, "discovery_index_malformed"),
    ),
    Case(
        "index_release_missing_a_field",
        api(Behavior(body=b'[{"id": 1, "tag_name": "v1.0.0", "prerelease": false, "assets": []}]')),
        error=(ReleaseDataError, "discovery_index_malformed"),
    ),
    Case(
        "index_draft_flag_not_a_boolean",
        api(
            Behavior(body=b'[{"id": 1, "tag_name": "v1.0.0", "draft": 0, "prerelease": false, "assets": []}]')
        ),
        error=(ReleaseDataError, "discovery_index_malformed"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_discovery(sim: ReleaseRepositorySimulator, case: Case) -> None:
    case.setup(sim)
    config = config_for(
        sim, channel=channel_named(case.channel), allowed_hosts=case.allowed, max_page_bytes=64 * 1024
    )
    if case.error is not None:
        kind, code = case.error
        with pytest.raises(kind) as raised:
            discover(config)
        assert raised.value.code == code, raised.value
        assert code in str(raised.value)
    else:
        result = discover(config)
        if case.tag is not None:
            assert isinstance(result, Candidate), result
            assert result.tag == case.tag
            assert result.version == Version(case.tag[1:])
            assert result.prerelease == (case.channel == "preview" and "-" in case.tag)
            assert result.manifest.name == MANIFEST_FILENAME
            assert result.manifest.url.endswith(f"/releases/download/{case.tag}/{MANIFEST_FILENAME}")
            assert [asset.name for asset in result.assets] == [
                f"herdr-mcp-{case.tag[1:]}-linux-x86_64-cp311.tar.gz"
            ]
        else:
            assert isinstance(result, NoCandidate), result
            assert result.reason == case.no_candidate
            assert result.channel == case.channel
        if case.skipped is not None:
            assert tuple((entry.tag, entry.reason) for entry in result.skipped) == case.skipped
    assert_only_index_requested(sim)
    assert {entry.host for entry in sim.log} == case.hosts_contacted


# --- what the table does not show ---------------------------------------------------------------


def test_pages_are_read_until_a_short_page_and_no_further_than_max_pages(
    sim: ReleaseRepositorySimulator,
) -> None:
    publish(sim, "v9.0.0")  # created first, so listed last: on page 3 of 20-per-page
    for minor in range(44):
        publish(sim, f"v1.{minor}.0")
    result = discover(config_for(sim))
    assert isinstance(result, Candidate)
    assert result.tag == "v9.0.0"
    assert [entry.query for entry in sim.log] == [f"per_page=20&page={page}" for page in (1, 2, 3)]

    sim.clear_log()
    result = discover(config_for(sim, max_pages=2))
    assert isinstance(result, Candidate)
    assert result.tag == "v1.43.0"
    assert len(sim.log) == 2
    assert_only_index_requested(sim)


def test_a_full_last_page_is_followed_by_an_empty_one(sim: ReleaseRepositorySimulator) -> None:
    for patch in range(4):
        publish(sim, f"v1.0.{patch}")
    result = discover(config_for(sim, per_page=2))
    assert isinstance(result, Candidate)
    assert result.tag == "v1.0.3"
    assert [entry.query for entry in sim.log] == [f"per_page=2&page={page}" for page in (1, 2, 3)]


def test_an_oversized_index_is_refused_while_streaming(sim: ReleaseRepositorySimulator) -> None:
    sim.add_release("v1.0.0", body="x" * 2_000_000)
    sim.api_behavior = Behavior(chunked=True, chunk_size=16 * 1024, chunk_delay=0.01)
    started = time.monotonic()
    with pytest.raises(ReleaseDataError) as raised:
        discover(config_for(sim, max_page_bytes=64 * 1024))
    assert raised.value.code == "discovery_index_too_large"
    # The whole body takes over 1.2 s to send; the cap is hit after about 5 chunks.
    assert time.monotonic() - started < 0.6


def test_a_slow_index_hits_the_deadline(sim: ReleaseRepositorySimulator) -> None:
    publish(sim, "v1.0.0")
    sim.api_behavior = Behavior(chunk_size=64, chunk_delay=0.1)
    started = time.monotonic()
    with pytest.raises(UpdateTransportError) as raised:
        discover(config_for(sim, deadline=0.3))
    assert raised.value.code == "discovery_timeout"
    assert time.monotonic() - started < 1.5


def test_a_server_not_signed_by_the_trusted_ca_is_unreachable(sim: ReleaseRepositorySimulator) -> None:
    publish(sim, "v1.0.0")
    with pytest.raises(UpdateTransportError) as raised:
        discover(config_for(sim, ca_file=None))
    assert raised.value.code == "discovery_unreachable"


def test_an_unreadable_ca_file_is_a_caller_error(sim: ReleaseRepositorySimulator, tmp_path: Path) -> None:
    with pytest.raises(UpdateUsageError) as raised:
        discover(config_for(sim, ca_file=tmp_path / "missing.pem"))
    assert raised.value.code == "update_config_invalid"
    assert sim.log == []


def test_a_closed_port_is_unreachable() -> None:
    with ReleaseRepositorySimulator(REPOSITORY) as sim:
        config = config_for(sim)
    with pytest.raises(UpdateTransportError) as raised:
        discover(dataclasses.replace(config, ca_file=None))
    assert raised.value.code == "discovery_unreachable"


@pytest.mark.parametrize(
    ("overrides", "code"),
    [
        ({"api_base_url": "http://api.github.com"}, "discovery_not_https"),
        ({"api_base_url": "ftp://api.github.com"}, "discovery_not_https"),
        ({"api_base_url": "https://api.github.com/?x=1"}, "update_config_invalid"),
        ({"api_base_url": "not a url"}, "update_config_invalid"),
        ({"repository": "no-slash"}, "update_config_invalid"),
        ({"repository": "owner/.."}, "update_config_invalid"),
        ({"allowed_hosts": frozenset({"GitHub.com"})}, "update_config_invalid"),
        ({"per_page": 101}, "update_config_invalid"),
        ({"max_pages": 0}, "update_config_invalid"),
        ({"max_page_bytes": 0}, "update_config_invalid"),
        ({"max_redirects": -1}, "update_config_invalid"),
        ({"deadline": 0}, "update_config_invalid"),
    ],
)
def test_config_refuses_unusable_values(overrides: dict[str, object], code: str) -> None:
    with pytest.raises(UpdateUsageError) as raised:
        DiscoveryConfig(**{"repository": REPOSITORY, **overrides})  # type: ignore[arg-type]
    assert raised.value.code == code


def test_the_default_config_talks_to_github_over_https_only() -> None:
    config = DiscoveryConfig(repository=REPOSITORY)
    assert config.index_url == f"https://api.github.com/repos/{REPOSITORY}/releases"
    assert config.channel == CHANNELS["stable"]
    assert "api.github.com" in config.allowed_hosts
    assert "release-assets.githubusercontent.com" in config.allowed_hosts


def test_channels_mirror_the_release_config() -> None:
    configured = load_release_config(ROOT / "release" / "config.toml").channels
    assert {channel.name: channel for channel in configured} == dict(CHANNELS)


def test_unknown_channel() -> None:
    with pytest.raises(UpdateUsageError) as raised:
        channel_named("nightly")
    assert raised.value.code == "update_channel_unknown"


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("v0.0.0", "0.0.0"),
        ("v10.20.30", "10.20.30"),
        ("v1.2.0-alpha.1", "1.2.0a1"),
        ("v1.2.0-beta.2", "1.2.0b2"),
        ("v1.2.0-rc.10", "1.2.0rc10"),
        ("v1.2.0-dev.3", "1.2.0.dev3"),
        ("v1.2.0-rc.1.dev.2", "1.2.0rc1.dev2"),
        *((tag, None) for tag in MALFORMED_TAGS.values()),
        ("v1.2.0-alpha", None),  # PEP 440 reads it as alpha 0, which semver spells alpha.0
        ("v1.2.0-preview.1", None),
        ("v" + "1" * 70 + ".0.0", None),
    ],
)
def test_tag_version(tag: str, expected: str | None) -> None:
    version = tag_version(tag)
    assert (None if version is None else str(version)) == expected
    if version is not None:
        assert semver_text(version) == tag[1:]
