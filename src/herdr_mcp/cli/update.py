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

Trust (SPEC 6): a release must carry the pinned-key minisign signature, the keyless Sigstore
signature of its manifest and the build provenance of its assets, both by the release workflow
named in the signer identity policy (packaged, or `--identity-policy` / the settings'
`identity_policy` for another repository, which is required: naming another repository never
drops the check). `--unsafe-skip-sigstore` relies on the minisign key alone; it is warned about
on every use and `update auto` refuses it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from herdr_mcp import __version__
from herdr_mcp.cli.arguments import CommandParser, run_guarded, with_json
from herdr_mcp.errors import EXIT_REFUSED, InternalFault
from herdr_mcp.generations.fence import check_fence
from herdr_mcp.generations.process import check_serve_args
from herdr_mcp.layout import SETTINGS_FILE, default_config_dir
from herdr_mcp.terminal import error_line, printable
from herdr_mcp.update.admission import AlreadyCurrent, LocalIdentity, TrustedRelease
from herdr_mcp.update.apply import ReleaseSource, UpdateReport, check_may_update, check_update, run_update
from herdr_mcp.update.auto import run_update_auto
from herdr_mcp.update.check import CheckResult
from herdr_mcp.update.discovery import CHANNELS, GITHUB_API_BASE_URL, NoCandidate
from herdr_mcp.update.options import (
    REPOSITORY_ENV,
    REPOSITORY_ID_ENV,
    UpdateFlags,
    UpdateOptions,
    resolve_options,
)
from herdr_mcp.update.paths import UpdatePaths

MAJOR_MODES = ("major-apply", "major-rollback", "major-status")
#: How long `major-apply` waits in the foreground for its detached job (seed 001: a bounded wait).
MAJOR_WAIT_S = 600.0


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="herdr-mcp update", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "mode",
        nargs="?",
        choices=["auto", *MAJOR_MODES],
        help="auto: the scheduled daily run; major-apply / major-rollback / major-status: a release "
        "that migrates the state schema (docs/updater.md)",
    )
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
        "--repository", default=None, help=f"owner/name (else ${REPOSITORY_ENV}, else {SETTINGS_FILE})"
    )
    parser.add_argument(
        "--repository-id",
        type=int,
        default=None,
        help=f"its numeric id (else ${REPOSITORY_ID_ENV}, else {SETTINGS_FILE})",
    )
    parser.add_argument("--channel", choices=sorted(CHANNELS), default=None, help="default: stable")
    parser.add_argument("--api-url", default=GITHUB_API_BASE_URL, help="GitHub API base URL")
    parser.add_argument("--allowed-host", action="append", default=None, help="hosts downloads may come from")
    parser.add_argument("--ca-file", type=Path, default=None, help="trust only this CA (tests, mirrors)")
    parser.add_argument("--keys", type=Path, default=None, help="pinned release keys (default: packaged)")
    parser.add_argument(
        "--identity-policy",
        type=Path,
        default=None,
        help="the release workflow that must have signed (default: packaged; needed for another repository)",
    )
    parser.add_argument(
        "--trusted-root", type=Path, default=None, help="Sigstore trust root (default: packaged)"
    )
    parser.add_argument(
        "--unsafe-skip-sigstore",
        action="store_true",
        help="UNSAFE: do not require the keyless signature and the build provenance (not with auto)",
    )
    parser.add_argument("--config-dir", type=Path, default=None, help="the config dir (default: user config)")
    parser.add_argument(
        "--wait",
        type=float,
        default=MAJOR_WAIT_S,
        help=f"major-apply: seconds to wait for the detached job (default {MAJOR_WAIT_S:.0f}); "
        "it goes on after",
    )
    parser.add_argument("--major-worker", action="store_true", help=argparse.SUPPRESS)
    return with_json(parser)


def main(argv: Sequence[str]) -> int:
    """`herdr-mcp update ...` inside the CLI's one catch; the exit status."""
    return run_guarded(lambda: run(argv), argv)


def run(argv: Sequence[str]) -> int:
    """Run `update`, `update --check` or `update auto`; raises what the CLI's one catch reports."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    if args.mode in MAJOR_MODES:
        if args.mode == "major-apply" and not args.major_worker:
            if args.wait < 0:
                parser.error("--wait takes a number of seconds, 0 or more")
            return _major_detached(args, argv)
        return _major(args)
    if args.mode == "auto" and (args.check or args.manifest_url):
        parser.error("`update auto` takes neither --check nor --manifest-url")
    if args.mode == "auto" and args.unsafe_skip_sigstore:
        parser.error(
            "`update auto` never skips the Sigstore checks; run `herdr-mcp update` by hand to do that"
        )
    if args.unsafe_skip_sigstore:
        _say(
            "herdr-mcp: warning: --unsafe-skip-sigstore: the release's keyless signature and build "
            "provenance are NOT checked; only the minisign key vouches for it"
        )
    config_dir: Path = args.config_dir or default_config_dir()
    failed = False
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
    if failed:
        code = answer.get("outcome") or answer.get("reason") or "refused"
        print(error_line(code, answer["summary"]), file=sys.stderr)
        if not args.json:
            return EXIT_REFUSED
        answer["error"] = {"code": code, "message": answer["summary"]}
    print(json.dumps(answer, sort_keys=True, default=str) if args.json else printable(answer["summary"]))
    return EXIT_REFUSED if failed else 0


def _major(args: argparse.Namespace) -> int:
    """`update major-apply | major-rollback | major-status` (update/major.py)."""
    from herdr_mcp.update.major_job import run_major_apply, run_major_rollback, run_major_status

    config_dir: Path = args.config_dir or default_config_dir()
    paths = UpdatePaths(config_dir)
    if args.mode == "major-apply":
        check_may_update(config_dir)
        options = _options(args, config_dir)
        answer = run_major_apply(
            paths,
            ReleaseSource(options.discovery, args.manifest_url),
            options.policy,
            options.download,
            fallback=LocalIdentity.of_this_runtime(__version__),
            say=_say,
        )
    elif args.mode == "major-rollback":
        answer = run_major_rollback(paths, say=_say)
    else:
        answer = run_major_status(paths, say=_say)
    print(json.dumps(answer, sort_keys=True, default=str) if args.json else printable(answer["summary"]))
    return 0


def _major_detached(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """`major-apply` in the foreground: the job runs in a detached worker (its own session, its
    output in a file), which survives this command; this waits at most `--wait` seconds."""
    from herdr_mcp.update.major_job import run_detached

    config_dir: Path = args.config_dir or default_config_dir()
    check_may_update(config_dir)
    command = [sys.executable, "-m", "herdr_mcp", "update", *argv, "--major-worker"]
    finished = run_detached(
        command, config_dir, args.wait, echo=lambda line: print(line, end="", file=sys.stderr)
    )
    if finished is None:
        summary = (
            f"the major job goes on in the background after {args.wait:.0f} s; "
            "`herdr-mcp update major-status` shows its phase"
        )
        answer = {"status": "running", "summary": summary}
        print(json.dumps(answer, sort_keys=True) if args.json else summary)
        return 0
    code, out = finished
    print(out, end="")
    return code


def _say(line: str) -> None:
    print(printable(line), file=sys.stderr, flush=True)


def _update(args: argparse.Namespace, config_dir: Path) -> UpdateReport:
    check_may_update(config_dir)  # a fenced or DEV workstation hears that, not a config problem
    options = _options(args, config_dir)
    paths = UpdatePaths(config_dir)
    fallback = LocalIdentity.of_this_runtime(__version__)
    return run_update(
        paths,
        ReleaseSource(options.discovery, args.manifest_url),
        options.policy,
        options.download,
        fallback=fallback,
        serve_args=check_serve_args(args.serve_arg) if args.serve_arg is not None else None,
        say=_say,
    )


def _check(args: argparse.Namespace, config_dir: Path) -> CheckResult:
    options = _options(args, config_dir)
    source = ReleaseSource(options.discovery, args.manifest_url)
    return check_update(
        UpdatePaths(config_dir), source, options.policy, LocalIdentity.of_this_runtime(__version__), say=_say
    )


def _options(args: argparse.Namespace, config_dir: Path) -> UpdateOptions:
    """The flags as given; `update/options.py` adds the environment and the settings file."""
    flags = UpdateFlags(
        repository=args.repository,
        repository_id=args.repository_id,
        channel=args.channel,
        api_url=args.api_url,
        allowed_hosts=tuple(args.allowed_host) if args.allowed_host else None,
        ca_file=args.ca_file,
        keys=args.keys,
        identity_policy=args.identity_policy,
        trusted_root=args.trusted_root,
        unsafe_skip_sigstore=args.unsafe_skip_sigstore,
    )
    return resolve_options(flags, config_dir)


def _describe(result: CheckResult) -> dict[str, Any]:
    if isinstance(result.candidate, NoCandidate):
        reason = result.candidate.reason
        return {"status": "no_release", "reason": reason, "summary": f"no release ({reason})"}
    if isinstance(result.outcome, AlreadyCurrent):
        version = result.outcome.manifest.version
        return {"status": "current", "version": version, "summary": f"herdr-mcp {version} is current"}
    release = result.outcome
    if not isinstance(release, TrustedRelease):
        # Admission answers every candidate discovery found: no answer is a bug, not the user's.
        raise InternalFault(
            "update_check_incomplete",
            "discovery found a release but admission gave no answer; please report this as a bug",
        )
    if release.state_step:
        return {
            "status": "admitted",
            "version": str(release.version),
            "kind": release.kind,
            "major": True,
            "state_schema": release.manifest.state_schema,
            "contract": release.manifest.contract.to_dict(),
            "summary": f"herdr-mcp {release.version} is available and admitted; it migrates the state "
            "schema, so `herdr-mcp update major-apply` takes it (`herdr-mcp update` does not)",
        }
    return {
        "status": "admitted",
        "version": str(release.version),
        "kind": release.kind,
        "contract": release.manifest.contract.to_dict(),
        "summary": f"herdr-mcp {release.version} is available and admitted ({release.kind}); "
        "`herdr-mcp update` installs and activates it",
    }
