"""`resolve_options`: which of flag, environment and settings file gives each update option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from herdr_mcp.release.attestation import load_identity_policy
from herdr_mcp.release.verification import SigstoreTrust, UnsafeSkipSigstore
from herdr_mcp.update.discovery import CHANNELS
from herdr_mcp.update.errors import UpdateUsageError
from herdr_mcp.update.options import REPOSITORY_ENV, REPOSITORY_ID_ENV, UpdateFlags, resolve_options

PACKAGED = load_identity_policy().repository
ENV = {REPOSITORY_ENV: "env/repo", REPOSITORY_ID_ENV: "22"}
SETTINGS = {"repository": "settings/repo", "repository_id": 33, "channel": "preview"}
FLAGS = UpdateFlags(repository="flag/repo", repository_id=11, channel="stable", unsafe_skip_sigstore=True)
UNSAFE = UpdateFlags(unsafe_skip_sigstore=True)


def _settings(config_dir: Path, document: dict[str, object]) -> Path:
    (config_dir / "update-settings.json").write_text(json.dumps(document))
    return config_dir


@pytest.mark.parametrize(
    ("flags", "env", "settings", "expected"),
    [
        (FLAGS, ENV, SETTINGS, ("flag/repo", 11, "stable")),
        (UNSAFE, ENV, SETTINGS, ("env/repo", 22, "preview")),
        (UNSAFE, {}, SETTINGS, ("settings/repo", 33, "preview")),
        # An empty or non-numeric variable is no value: the settings give it.
        (UNSAFE, {REPOSITORY_ENV: "", REPOSITORY_ID_ENV: "x1"}, SETTINGS, ("settings/repo", 33, "preview")),
        # Each value is resolved on its own.
        (
            UpdateFlags(repository_id=11, unsafe_skip_sigstore=True),
            ENV,
            SETTINGS,
            ("env/repo", 11, "preview"),
        ),
        (UNSAFE, {REPOSITORY_ENV: "env/repo"}, SETTINGS, ("env/repo", 33, "preview")),
        (UNSAFE, ENV, {}, ("env/repo", 22, "stable")),
    ],
)
def test_flag_then_environment_then_settings(
    tmp_path: Path,
    flags: UpdateFlags,
    env: dict[str, str],
    settings: dict[str, object],
    expected: tuple[str, int, str],
) -> None:
    options = resolve_options(flags, _settings(tmp_path, settings), env)
    repository, repository_id, channel = expected
    assert options.discovery.repository == options.policy.repository == repository
    assert options.policy.repository_id == repository_id
    assert options.discovery.channel == CHANNELS[channel]
    assert options.download.allowed_hosts == options.discovery.allowed_hosts


def test_no_repository_anywhere_is_refused(tmp_path: Path) -> None:
    for env in ({}, {REPOSITORY_ENV: "env/repo"}, {REPOSITORY_ID_ENV: "22"}):
        with pytest.raises(UpdateUsageError) as refused:
            resolve_options(UNSAFE, tmp_path, env)
        assert refused.value.code == "update_config_invalid"
        assert REPOSITORY_ENV in refused.value.message


def test_a_broken_settings_file_is_refused_even_when_flags_name_everything(tmp_path: Path) -> None:
    (tmp_path / "update-settings.json").write_text("{not json")
    with pytest.raises(UpdateUsageError) as refused:
        resolve_options(FLAGS, tmp_path, {})
    assert refused.value.code == "update_settings_invalid"


def test_the_packaged_signer_policy_serves_only_its_own_repository(tmp_path: Path) -> None:
    ours = resolve_options(UpdateFlags(repository=PACKAGED, repository_id=1), tmp_path, {})
    assert isinstance(ours.policy.sigstore, SigstoreTrust)
    assert ours.policy.sigstore.identity_policy.repository == PACKAGED
    with pytest.raises(UpdateUsageError) as refused:
        resolve_options(UpdateFlags(repository="fork/repo", repository_id=1), tmp_path, {})
    assert refused.value.code == "identity_policy_missing"
    skipped = resolve_options(
        UpdateFlags(repository="fork/repo", repository_id=1, unsafe_skip_sigstore=True), tmp_path, {}
    )
    assert isinstance(skipped.policy.sigstore, UnsafeSkipSigstore)
