"""`update auto`: PROD and the stable channel only, skipping with a stated reason; otherwise the
same discovery and admission as `update --check` (against the release repository simulator)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from herdr_mcp import __version__
from herdr_mcp.generations.fence import set_fence
from herdr_mcp.layout import SETTINGS_FILE
from herdr_mcp.release.minisign import load_pinned_keys
from herdr_mcp.update.admission import AdmissionPolicy, LocalIdentity
from herdr_mcp.update.apply import DEV_PLANE_MARKER
from herdr_mcp.update.auto import (
    SettingsInvalid,
    UpdateSettings,
    read_settings,
    run_update_auto,
)
from herdr_mcp.update.check import CheckResult, check_for_update
from herdr_mcp.update.discovery import CHANNELS, DiscoveryConfig
from tests.support.published_release import REPOSITORY, REPOSITORY_ID, VERSION, publish
from tests.support.release_evidence import sigstore_trust
from tests.support.repository_sim import ReleaseRepositorySimulator
from tests.support.sigstore_stack import SigstoreStack


def _never() -> CheckResult:
    raise AssertionError("a skipped `update auto` must not check for a release")


def _settings(config: Path, document: object) -> None:
    config.mkdir(exist_ok=True)
    (config / SETTINGS_FILE).write_text(json.dumps(document))


@pytest.mark.parametrize(
    ("prepare", "channel", "reason"),
    [
        (lambda c: set_fence(c, "services were uninstalled"), None, "update_fenced"),
        (lambda c: (c / DEV_PLANE_MARKER).write_text("{}"), None, "plane_not_prod"),
        (lambda c: _settings(c, {"auto_update": False}), None, "auto_update_disabled"),
        (lambda c: _settings(c, {"channel": "preview"}), None, "channel_not_stable"),
        (lambda c: None, "preview", "channel_not_stable"),
        (lambda c: _settings(c, {"auto_update": "yes"}), None, "update_settings_invalid"),
        (lambda c: _settings(c, {"channel": "nightly"}), None, "update_settings_invalid"),
        (lambda c: _settings(c, {"channel": ["stable"]}), None, "update_settings_invalid"),
        (lambda c: _settings(c, {"auto": True}), None, "update_settings_invalid"),
        (lambda c: (c / SETTINGS_FILE).write_text("{"), None, "update_settings_invalid"),
        (lambda c: _settings(c, {"identity_policy": "policy.json"}), None, "update_settings_invalid"),
        (lambda c: _settings(c, {"unsafe_skip_sigstore": True}), None, "update_settings_invalid"),
    ],
    ids=[
        "fenced", "dev-plane", "disabled", "preview-in-settings", "preview-asked", "auto-not-bool",
        "unknown-channel", "channel-not-str", "unknown-field", "not-json", "relative-identity-policy",
        "no-unsafe-skip-in-settings",
    ],
)  # fmt: skip
def test_update_auto_skips_with_a_stated_reason(
    tmp_path: Path, prepare: object, channel: str | None, reason: str
) -> None:
    config = tmp_path / "config"
    config.mkdir()
    assert callable(prepare)
    prepare(config)
    decision = run_update_auto(config, _never, channel=channel)
    assert (decision.action, decision.reason, decision.skipped) == ("skipped", reason, True)
    assert decision.message
    assert decision.to_dict() == {"action": "skipped", "reason": reason, "message": decision.message}


def test_the_fence_is_checked_before_everything_else(tmp_path: Path) -> None:
    (tmp_path / DEV_PLANE_MARKER).write_text("{}")
    _settings(tmp_path, {"auto_update": False, "channel": "preview"})
    set_fence(tmp_path, "services were uninstalled")
    decision = run_update_auto(tmp_path, _never)
    assert decision.reason == "update_fenced"
    assert "services were uninstalled" in decision.message


def test_settings_default_and_parse(tmp_path: Path) -> None:
    assert read_settings(tmp_path) == UpdateSettings(auto_update=True, channel="stable")
    _settings(tmp_path, {"auto_update": True, "channel": "preview"})
    assert read_settings(tmp_path) == UpdateSettings(auto_update=True, channel="preview")
    (tmp_path / SETTINGS_FILE).write_text("[]")
    with pytest.raises(SettingsInvalid):
        read_settings(tmp_path)


@pytest.fixture
def sim(sigstore_stack: SigstoreStack) -> Iterator[ReleaseRepositorySimulator]:
    with ReleaseRepositorySimulator(REPOSITORY) as simulator:
        simulator.stack = sigstore_stack  # type: ignore[attr-defined]
        yield simulator


def _stable_check(sim: ReleaseRepositorySimulator, keys: Path, config: Path) -> CheckResult:
    discovery = DiscoveryConfig(
        repository=REPOSITORY,
        channel=CHANNELS["stable"],
        api_base_url=sim.api_base_url,
        allowed_hosts=frozenset(sim.hosts),
        ca_file=sim.ca_file,
    )
    policy = AdmissionPolicy(
        public_keys=tuple(load_pinned_keys(keys)),
        repository=REPOSITORY,
        repository_id=REPOSITORY_ID,
        sigstore=sigstore_trust(sim.stack, REPOSITORY),  # type: ignore[attr-defined]
    )
    local = LocalIdentity.of_this_runtime(__version__)
    return check_for_update(discovery, local, policy, config / "highest-seen.json")


def test_prod_stable_runs_the_check_and_says_what_it_found(
    sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    config.mkdir()
    no_keys = tmp_path / "no-keys"
    no_keys.mkdir()

    empty = run_update_auto(config, lambda: _stable_check(sim, no_keys, config))
    assert (empty.action, empty.reason) == ("no_release", "no_releases")

    keys = publish(sim, tmp_path).keys
    decision = run_update_auto(config, lambda: _stable_check(sim, keys, config))
    assert (decision.action, decision.reason) == ("admitted", "admitted")
    assert decision.to_dict()["version"] == VERSION
    assert VERSION in decision.message
    assert decision.result is not None
    before = len(sim.downloads())

    set_fence(config, "services were uninstalled")
    fenced = run_update_auto(config, lambda: _stable_check(sim, keys, config))
    assert fenced.reason == "update_fenced"
    assert len(sim.downloads()) == before  # a skip fetches nothing
