"""`herdr-mcp update auto`: the scheduled (daily) update, PROD and the stable channel only.

`run_update_auto` decides first whether this workstation may update itself unattended, in this
order, and stops at the first rule that says no, with a stated reason (an `AutoDecision` whose
`action` is `skipped`):

1. `update_fenced`: the update fence is set (`service uninstall`); `service install` clears it.
2. `plane_not_prod`: a DEV plane marker (`<config dir>/dev-plane.json`, written by `dev sync`)
   exists: a DEV generation runs from a checkout and `dev rollback` owns the way back.
3. `update_settings_invalid`: `<config dir>/update-settings.json` is not a settings file we
   wrote (fail closed: a broken file does not mean "update").
4. `auto_update_disabled`: the settings say `"auto_update": false`.
5. `channel_not_stable`: the channel (the settings' `channel`, or the caller's) is not `stable`.

Otherwise it runs what it is given: the whole interactive update (`herdr-mcp update auto` does:
discovery, admission, install, activation through the gate; action `no_release`, `current`,
`activated` or `refused`), or only the check (action `no_release`, `current` or `admitted`).
Errors of the run itself (transport, a refused release) are raised to the caller, as for
`herdr-mcp update`.

`update-settings.json` (optional; defaults when absent): `{"auto_update": true, "channel":
"stable", "repository": "owner/name", "repository_id": 123, "identity_policy":
"/path/to/identity-policy.json"}`; unknown fields are refused. The release repository and its
numeric id (what the manifest's `source` must name) and, for a repository other than the one
the packaged signer policy names (a fork), that repository's signer identity policy are where
the daily job, which gets no arguments, finds them; command-line flags and the
`HERDR_MCP_UPDATE_REPOSITORY(_ID)` variables take precedence. Skipping the Sigstore checks
cannot be configured here: only the interactive `--unsafe-skip-sigstore` does it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from herdr_mcp.errors import UsageFault
from herdr_mcp.generations.fence import read_fence
from herdr_mcp.layout import SETTINGS_FILE, Layout
from herdr_mcp.records import FailRule, RecordInvalid, RecordKind
from herdr_mcp.update.admission import AlreadyCurrent, TrustedRelease
from herdr_mcp.update.apply import DEV_PLANE_MARKER, UpdateReport
from herdr_mcp.update.check import CheckResult
from herdr_mcp.update.discovery import CHANNELS, NoCandidate

AUTO_CHANNEL = "stable"
_REPOSITORY = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
#: A settings file is two fields.
MAX_SETTINGS_BYTES = 16 * 1024
SETTINGS_RECORD = RecordKind(SETTINGS_FILE, MAX_SETTINGS_BYTES, FailRule.CLOSED)

Action = Literal["skipped", "no_release", "current", "admitted", "activated", "refused"]


@dataclass(frozen=True)
class UpdateSettings:
    """The workstation's update preferences."""

    auto_update: bool = True
    channel: str = AUTO_CHANNEL
    repository: str | None = None
    repository_id: int | None = None
    identity_policy: str | None = None


class SettingsInvalid(UsageFault):
    """`update-settings.json` breaks its schema (the message says how)."""

    code = "update_settings_invalid"

    def __init__(self, message: str) -> None:
        super().__init__(self.code, message)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class AutoDecision:
    """What `update auto` did and why: `reason` is a stable code, `message` a sentence."""

    action: Action
    reason: str
    message: str
    result: CheckResult | None = None
    report: UpdateReport | None = None

    @property
    def skipped(self) -> bool:
        return self.action == "skipped"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action, "reason": self.reason, "message": self.message}
        if self.result is not None and isinstance(self.result.outcome, TrustedRelease):
            out["version"] = str(self.result.outcome.manifest.version)
        if self.report is not None:
            out["update"] = self.report.to_dict()
            if self.report.version is not None:
                out["version"] = self.report.version
        return out


def read_settings(config_dir: Path) -> UpdateSettings:
    """The settings file, or the defaults when there is none; raises `SettingsInvalid` (the
    record fails closed: a bad file is never read as the defaults)."""
    try:
        document = SETTINGS_RECORD.read(Layout(config_dir).settings_file)
    except RecordInvalid as exc:
        raise SettingsInvalid(f"{SETTINGS_FILE} is unusable ({exc})") from exc
    if document is None:
        return UpdateSettings()
    unknown = set(document) - {"auto_update", "channel", "repository", "repository_id", "identity_policy"}
    if unknown:
        raise SettingsInvalid(f"unknown field(s) in {SETTINGS_FILE}: {', '.join(sorted(unknown))}")
    settings = UpdateSettings(**document)
    if not isinstance(settings.auto_update, bool):
        raise SettingsInvalid(f"{SETTINGS_FILE}: auto_update must be true or false")
    if not isinstance(settings.channel, str) or settings.channel not in CHANNELS:
        raise SettingsInvalid(f"{SETTINGS_FILE}: channel must be one of {', '.join(sorted(CHANNELS))}")
    if settings.repository is not None and not (
        isinstance(settings.repository, str) and _REPOSITORY.fullmatch(settings.repository)
    ):
        raise SettingsInvalid(f'{SETTINGS_FILE}: repository must be "owner/name"')
    repository_id = settings.repository_id
    if repository_id is not None and (
        isinstance(repository_id, bool) or not isinstance(repository_id, int) or not 0 < repository_id < 2**53
    ):
        raise SettingsInvalid(f"{SETTINGS_FILE}: repository_id must be a positive integer")
    if settings.identity_policy is not None and not (
        isinstance(settings.identity_policy, str) and Path(settings.identity_policy).is_absolute()
    ):
        raise SettingsInvalid(f"{SETTINGS_FILE}: identity_policy must be an absolute path")
    return settings


def skip_reason(config_dir: Path, channel: str | None = None) -> AutoDecision | None:
    """Rules 1-5 of the module docstring: the skip decision, or None when `update auto` may run."""

    def skip(reason: str, message: str) -> AutoDecision:
        return AutoDecision("skipped", reason, message)

    fence = read_fence(config_dir)
    if fence is not None:
        return skip(
            "update_fenced",
            f"updates are fenced since {fence.set_at or 'an unknown time'} ({fence.reason}); "
            "`herdr-mcp service install` clears the fence",
        )
    if (config_dir / DEV_PLANE_MARKER).exists():
        return skip(
            "plane_not_prod",
            "this workstation runs a DEV generation; `update auto` only updates PROD "
            "(`herdr-mcp dev status` says whether a PROD is pinned: `herdr-mcp dev rollback` "
            "returns to it; a checkout-only workstation has none)",
        )
    try:
        settings = read_settings(config_dir)
    except SettingsInvalid as exc:
        return skip("update_settings_invalid", f"{exc}; fix or remove it")
    if not settings.auto_update:
        return skip(
            "auto_update_disabled",
            f"auto_update is false in {SETTINGS_FILE}; run `herdr-mcp update` by hand",
        )
    chosen = channel or settings.channel
    if chosen != AUTO_CHANNEL:
        return skip(
            "channel_not_stable",
            f"the {chosen} channel is updated by hand only (`herdr-mcp update`); "
            f"`update auto` follows {AUTO_CHANNEL}",
        )
    return None


def run_update_auto(
    config_dir: Path, check: Callable[[], CheckResult | UpdateReport], *, channel: str | None = None
) -> AutoDecision:
    """Skip with a reason, or run `check` (the whole update, or only discovery + admission, on
    the stable channel) and say what it found. Raises whatever `check` raises."""
    skipped = skip_reason(config_dir, channel)
    if skipped is not None:
        return skipped
    result = check()
    if isinstance(result, UpdateReport):
        status: Action = result.status  # type: ignore[assignment]
        return AutoDecision(status, result.outcome or result.status, result.summary, report=result)
    if isinstance(result.candidate, NoCandidate):
        reason = result.candidate.reason
        return AutoDecision("no_release", reason, f"no stable release to take ({reason})", result)
    if isinstance(result.outcome, AlreadyCurrent):
        version = result.outcome.manifest.version
        return AutoDecision("current", "current", f"herdr-mcp {version} is already current", result)
    if isinstance(result.outcome, TrustedRelease):
        version = result.outcome.manifest.version
        return AutoDecision(
            "admitted", "admitted", f"herdr-mcp {version} is admitted ({result.outcome.kind})", result
        )
    return AutoDecision("no_release", "check_incomplete", "the check found a release but no answer", result)
