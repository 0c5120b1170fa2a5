"""`herdr-mcp update`, `update --check` and `update auto`: take the highest admitted release.

`update` discovers the highest release of the channel (or takes `--manifest-url`), admits it
against the ACTIVE generation's identity, installs it as a new generation and activates it
through the gate (`update/apply.py`). `--check` stops after admission and downloads no asset.
`auto` (the daily job) first decides whether to run at all (`update/auto.py`: fence, PROD plane,
stable channel, settings) and says why it skipped, else runs the whole update. All of them
refuse while the update fence is set. Exit 0 with a JSON (or text) answer when a release was
activated or admitted, when the runtime is already current, when there is no release, or when
auto skipped; exit 2 with `herdr-mcp: error: <code>: <message>` when the release is refused,
cannot be read, or the gate did not activate it (the previous generation then stays active).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from herdr_mcp import __version__
from herdr_mcp.generations.control import GenerationError
from herdr_mcp.generations.process import check_serve_args
from herdr_mcp.release.attestation import AttestationError, load_identity_policy
from herdr_mcp.release.manifest import ManifestError
from herdr_mcp.release.minisign import SignatureError, load_pinned_keys
from herdr_mcp.runtime.config import default_config_dir
from herdr_mcp.service.fence import FenceSet, check_fence
from herdr_mcp.update.admission import AdmissionPolicy, AlreadyCurrent, LocalIdentity, TrustedRelease
from herdr_mcp.update.apply import ReleaseSource, UpdatePaths, UpdateReport, local_identity, run_update
from herdr_mcp.update.auto import SETTINGS_FILE, SettingsInvalid, read_settings, run_update_auto
from herdr_mcp.update.check import CheckResult, check_for_update, fetch_and_admit, pinned_release_files
from herdr_mcp.update.discovery import (
    CHANNELS,
    GITHUB_API_BASE_URL,
    GITHUB_HOSTS,
    DiscoveryConfig,
    NoCandidate,
)
from herdr_mcp.update.errors import UpdateError, UpdateUsageError
from herdr_mcp.update.staging import DownloadConfig


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="herdr-mcp update", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("mode", nargs="?", choices=["auto"], help="auto: the scheduled daily run")
    parser.add_argument("--check", action="store_true", help="only discover and admit")
    parser.add_argument(
        "--manifest-url",
        default=None,
        help="take this release (…/download/<tag>/runtime-manifest.json) instead of discovering one",
    )
    parser.add_argument(
        "--serve-arg",
        action="append",
        default=None,
        help="a `serve` argument for the new generation (repeat; default: the active generation's)",
    )
    parser.add_argument(
        "--repository", default=os.environ.get("HERDR_MCP_UPDATE_REPOSITORY"), help="owner/name"
    )
    parser.add_argument("--repository-id", type=int, default=_env_int("HERDR_MCP_UPDATE_REPOSITORY_ID"))
    parser.add_argument("--channel", choices=sorted(CHANNELS), default=None, help="default: stable")
    parser.add_argument("--api-url", default=GITHUB_API_BASE_URL, help="GitHub API base URL")
    parser.add_argument("--allowed-host", action="append", default=None, help="hosts downloads may come from")
    parser.add_argument("--ca-file", type=Path, default=None, help="trust only this CA (tests, mirrors)")
    parser.add_argument("--keys", type=Path, default=None, help="pinned release keys (default: packaged)")
    parser.add_argument("--no-sigstore", action="store_true", help="do not check Sigstore bundles")
    parser.add_argument("--config-dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    return parser


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value and value.isdigit() else None


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv))
    if args.mode == "auto" and (args.check or args.manifest_url):
        parser.error("`update auto` takes neither --check nor --manifest-url")
    config_dir: Path = args.config_dir or default_config_dir()
    failed = False
    try:
        if args.mode == "auto":
            decision = run_update_auto(config_dir, lambda: _update(args, config_dir), channel=args.channel)
            answer: dict[str, Any] = decision.to_dict()
            answer["summary"] = decision.message
            failed = decision.action == "refused"
        elif args.check:
            check_fence(config_dir)
            answer = _describe(_check(args, config_dir))
        else:
            report = _update(args, config_dir)
            answer = report.to_dict()
            failed = not report.ok
    except (UpdateError, ManifestError, SignatureError, AttestationError, FenceSet, GenerationError) as exc:
        print(f"herdr-mcp: error: {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    if failed and not args.json:
        print(f"herdr-mcp: error: {answer.get('outcome', 'refused')}: {answer['summary']}", file=sys.stderr)
        return 2
    print(json.dumps(answer, sort_keys=True, default=str) if args.json else answer["summary"])
    return 2 if failed else 0


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _update(args: argparse.Namespace, config_dir: Path) -> UpdateReport:
    discovery, policy = _configuration(args, config_dir)
    paths = UpdatePaths(config_dir)
    fallback = LocalIdentity.of_this_runtime(__version__)
    return run_update(
        paths,
        ReleaseSource(discovery, args.manifest_url),
        policy,
        DownloadConfig(allowed_hosts=discovery.allowed_hosts, ca_file=discovery.ca_file),
        fallback=fallback,
        serve_args=check_serve_args(args.serve_arg) if args.serve_arg is not None else None,
        say=_say,
    )


def _check(args: argparse.Namespace, config_dir: Path) -> CheckResult:
    discovery, policy = _configuration(args, config_dir)
    paths = UpdatePaths(config_dir)
    local = local_identity(paths.generations, LocalIdentity.of_this_runtime(__version__))
    if args.manifest_url is not None:
        outcome = fetch_and_admit(
            pinned_release_files(args.manifest_url),
            discovery.rules(prefix="manifest"),
            local,
            policy,
            paths.highest_seen,
        )
        return CheckResult(None, outcome)
    return check_for_update(discovery, local, policy, paths.highest_seen)


def _configuration(args: argparse.Namespace, config_dir: Path) -> tuple[DiscoveryConfig, AdmissionPolicy]:
    """Flags (and their environment variables) first, then `update-settings.json`."""
    try:
        settings = read_settings(config_dir)
    except SettingsInvalid as exc:
        raise UpdateUsageError("update_settings_invalid", f"{exc}; fix or remove it") from None
    repository = args.repository or settings.repository
    repository_id = args.repository_id if args.repository_id is not None else settings.repository_id
    channel = args.channel or settings.channel
    if not repository or repository_id is None:
        raise UpdateUsageError(
            "update_config_invalid",
            "name the release repository: --repository OWNER/NAME --repository-id ID "
            '(or HERDR_MCP_UPDATE_REPOSITORY / HERDR_MCP_UPDATE_REPOSITORY_ID, or "repository" and '
            f'"repository_id" in {config_dir / SETTINGS_FILE})',
        )
    identity = None if args.no_sigstore else load_identity_policy()
    if identity is not None and identity.repository != repository:
        identity = None  # the packaged signer policy names another repository (a fork or a mirror)
    discovery = DiscoveryConfig(
        repository=repository,
        channel=CHANNELS[channel],
        api_base_url=args.api_url,
        allowed_hosts=frozenset(args.allowed_host) if args.allowed_host else GITHUB_HOSTS,
        ca_file=args.ca_file,
    )
    policy = AdmissionPolicy(
        public_keys=tuple(load_pinned_keys(args.keys)),
        repository=repository,
        repository_id=repository_id,
        identity_policy=identity,
    )
    return discovery, policy


def _describe(result: CheckResult) -> dict[str, Any]:
    if isinstance(result.candidate, NoCandidate):
        reason = result.candidate.reason
        return {"status": "no_release", "reason": reason, "summary": f"no release ({reason})"}
    if isinstance(result.outcome, AlreadyCurrent):
        version = result.outcome.manifest.version
        return {"status": "current", "version": version, "summary": f"herdr-mcp {version} is current"}
    release = result.outcome
    if not isinstance(release, TrustedRelease):
        raise UpdateUsageError(
            "update_check_incomplete", "discovery found a release but admission gave no answer"
        )
    return {
        "status": "admitted",
        "version": str(release.version),
        "kind": release.kind,
        "contract": release.manifest.contract.to_dict(),
        "summary": f"herdr-mcp {release.version} is available and admitted ({release.kind}); "
        "`herdr-mcp update` installs and activates it",
    }
