"""What one `herdr-mcp update` run uses: its flags, then the environment, then the settings file.

`resolve_options(flags, config_dir, environ)` is the one place that decides where each value comes
from (flag, then environment variable, then `update-settings.json`; the first that
gives one wins):

- release repository: `--repository`, `HERDR_MCP_UPDATE_REPOSITORY`, `repository`; else refused
  (`update_config_invalid`);
- its numeric id: `--repository-id`, `HERDR_MCP_UPDATE_REPOSITORY_ID` (digits only),
  `repository_id`; else refused (`update_config_invalid`);
- channel: `--channel`, `channel`; else stable;
- signer identity policy: `--identity-policy`, `identity_policy`; else the packaged one, which
  serves its own repository only (`identity_policy_missing` for another);
- pinned keys, Sigstore trust root, API URL, download hosts, CA: their flags only; else the
  packaged ones and GitHub's.

The daily job (`update auto`) gets no flags, so it finds the repository in the environment or the
settings file. Skipping the Sigstore checks is never a setting: only `--unsafe-skip-sigstore`.

Raises `UpdateUsageError` (`update_settings_invalid`, `update_config_invalid`,
`identity_policy_missing`, and the configuration checks of `DiscoveryConfig`, `AdmissionPolicy` and
`DownloadConfig`), `AttestationError` for an unreadable identity policy and `SignatureError` for
unreadable keys.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from herdr_mcp.layout import SETTINGS_FILE
from herdr_mcp.release.attestation import IdentityPolicy, load_identity_policy
from herdr_mcp.release.minisign import load_pinned_keys
from herdr_mcp.release.verification import SigstoreTrust, UnsafeSkipSigstore
from herdr_mcp.update.admission import AdmissionPolicy
from herdr_mcp.update.auto import SettingsInvalid, UpdateSettings, read_settings
from herdr_mcp.update.discovery import CHANNELS, GITHUB_API_BASE_URL, GITHUB_HOSTS, DiscoveryConfig
from herdr_mcp.update.errors import UpdateUsageError
from herdr_mcp.update.staging import DownloadConfig

REPOSITORY_ENV = "HERDR_MCP_UPDATE_REPOSITORY"
REPOSITORY_ID_ENV = "HERDR_MCP_UPDATE_REPOSITORY_ID"


@dataclass(frozen=True)
class UpdateFlags:
    """What the command line said; None (or False) where an option was not given."""

    repository: str | None = None
    repository_id: int | None = None
    channel: str | None = None
    api_url: str = GITHUB_API_BASE_URL
    allowed_hosts: tuple[str, ...] | None = None
    ca_file: Path | None = None
    keys: Path | None = None
    identity_policy: Path | None = None
    trusted_root: Path | None = None
    unsafe_skip_sigstore: bool = False


@dataclass(frozen=True)
class UpdateOptions:
    """Where to look for releases (`discovery`), what to trust (`policy`), how to download."""

    discovery: DiscoveryConfig
    policy: AdmissionPolicy

    @property
    def download(self) -> DownloadConfig:
        """Downloads go to the hosts discovery may use, trusting the same CA."""
        return DownloadConfig(allowed_hosts=self.discovery.allowed_hosts, ca_file=self.discovery.ca_file)


def resolve_options(
    flags: UpdateFlags, config_dir: Path, environ: Mapping[str, str] | None = None
) -> UpdateOptions:
    """The options of one update run (the list in the module docstring); `environ` defaults to
    the process environment. Raises the errors of the module docstring."""
    env = os.environ if environ is None else environ
    try:
        settings = read_settings(config_dir)
    except SettingsInvalid as exc:
        raise UpdateUsageError("update_settings_invalid", f"{exc}; fix or remove it") from None
    # An empty flag or variable falls through to the settings, as a missing one does.
    given = flags.repository if flags.repository is not None else env.get(REPOSITORY_ENV)
    repository = given or settings.repository
    repository_id = flags.repository_id
    if repository_id is None:
        repository_id = _env_int(env, REPOSITORY_ID_ENV)
    if repository_id is None:
        repository_id = settings.repository_id
    channel = flags.channel or settings.channel
    if not repository or repository_id is None:
        raise UpdateUsageError(
            "update_config_invalid",
            "name the release repository: --repository OWNER/NAME --repository-id ID "
            f'(or {REPOSITORY_ENV} / {REPOSITORY_ID_ENV}, or "repository" and '
            f'"repository_id" in {config_dir / SETTINGS_FILE})',
        )
    sigstore = (
        UnsafeSkipSigstore() if flags.unsafe_skip_sigstore else _sigstore_trust(flags, settings, repository)
    )
    discovery = DiscoveryConfig(
        repository=repository,
        channel=CHANNELS[channel],
        api_base_url=flags.api_url,
        allowed_hosts=frozenset(flags.allowed_hosts) if flags.allowed_hosts else GITHUB_HOSTS,
        ca_file=flags.ca_file,
    )
    policy = AdmissionPolicy(
        public_keys=tuple(load_pinned_keys(flags.keys)),
        repository=repository,
        repository_id=repository_id,
        sigstore=sigstore,
    )
    return UpdateOptions(discovery, policy)


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    return int(value) if value and value.isdigit() else None


def _sigstore_trust(flags: UpdateFlags, settings: UpdateSettings, repository: str) -> SigstoreTrust:
    """The signer identity policy for `repository`: the flag's, the settings', else the packaged
    one, which must be about `repository` (a fork or a mirror brings its own, or is refused)."""
    path = flags.identity_policy or (Path(settings.identity_policy) if settings.identity_policy else None)
    identity = load_identity_policy() if path is None else IdentityPolicy.from_file(path)
    if identity.repository != repository:
        source = "the packaged signer identity policy" if path is None else str(path)
        raise UpdateUsageError(
            "identity_policy_missing",
            f"{source} is for {identity.repository}, not {repository}: pass --identity-policy FILE naming "
            f"{repository}'s release workflow (or set identity_policy in {SETTINGS_FILE}); the "
            "Sigstore checks are never dropped for another repository",
        )
    return SigstoreTrust(identity_policy=identity, trusted_root=flags.trusted_root)
