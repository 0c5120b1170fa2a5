"""`herdr-mcp service install|uninstall|status` and `herdr-mcp rollback`: parse, call, print.

What install, uninstall and status do (the transaction, its restore on failure, the fence) is
`service/install.py`; the macOS service rollback is `service/rollback.py`.

Whether the daily update job is installed is the caller's answer (`UpdateCheck`): the service
package knows nothing of release repositories; `herdr-mcp` passes the updater's own rule
(`cli/start.py`, `update_job_blocker`). Without one, no update job is installed.

Exit 0 on success, 2 with one line `herdr-mcp: error: <code>: <message>` otherwise; warnings
(`install_warnings`) go to stderr, one line each, and into the `--json` answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from herdr_mcp.cli.arguments import CommandParser, dir_path, fixed_port, run_guarded, with_json
from herdr_mcp.generations.control import check_generation_id
from herdr_mcp.layout import DEFAULT_PORT, default_config_dir
from herdr_mcp.service.install import (
    ServiceHost,
    install_services,
    install_warnings,
    rollback_services,
    service_config,
    service_host,
    service_status,
    uninstall_services,
)
from herdr_mcp.service.units import PLATFORMS, Runner, run_command
from herdr_mcp.terminal import printable

#: Why the daily update job cannot run from `config dir` (None: it can): the caller's rule.
UpdateCheck = Callable[[Path], str | None]


def _unknown_repository(_: Path) -> str | None:
    return "the caller did not say where releases come from"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--platform", choices=PLATFORMS, default=None, help="default: this OS's")
    parser.add_argument(
        "--config-dir", type=dir_path, default=None, help="the config dir (default: user config)"
    )
    parser.add_argument("--target-dir", type=dir_path, default=None, help="where the unit/plist files go")
    parser.add_argument("--state-dir", type=dir_path, default=None, help="generations state dir")


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="herdr-mcp service", description="launchd / systemd --user services")
    commands = parser.add_subparsers(dest="command", required=True)
    install = commands.add_parser("install", help="install and load the services; clears the update fence")
    _common(install)
    install.add_argument("--executable", type=Path, default=None, help="herdr-mcp to run (default: on PATH)")
    install.add_argument(
        "--port", type=fixed_port, default=None, help=f"runtime port (default {DEFAULT_PORT})"
    )
    install.add_argument(
        "--log-dir", type=dir_path, default=None, help="launchd logs (~/Library/Logs/herdr-mcp)"
    )
    install.add_argument(
        "--generation",
        default=None,
        help="run this registered generation (its executable and endpoint), activate it through the gate",
    )
    uninstall = commands.add_parser("uninstall", help="set the update fence, unload and remove the services")
    _common(uninstall)
    status = commands.add_parser("status", help="show the services, the fence and the recorded rollback")
    _common(status)
    return with_json(parser)


def _host(args: argparse.Namespace, runner: Runner) -> ServiceHost:
    return service_host(
        args.config_dir or default_config_dir(),
        platform=args.platform,
        target_dir=args.target_dir,
        state_dir=args.state_dir,
        runner=runner,
    )


def main(
    argv: list[str], *, runner: Runner = run_command, update_check: UpdateCheck = _unknown_repository
) -> int:
    """`herdr-mcp service ...` inside the CLI's one catch; the exit status."""
    return run_guarded(lambda: run(argv, runner=runner, update_check=update_check), argv)


def run(
    argv: list[str], *, runner: Runner = run_command, update_check: UpdateCheck = _unknown_repository
) -> int:
    """Run one `service` subcommand; raises what the CLI's one catch reports."""
    args = build_parser().parse_args(argv)
    host = _host(args, runner)
    if args.command == "install":
        generation = None if args.generation is None else check_generation_id(args.generation)
        blocker = update_check(host.config_dir)
        config = service_config(
            host,
            executable=args.executable,
            port=args.port,
            log_dir=args.log_dir,
            generation=generation,
            update_job=blocker is None,
        )
        warnings = install_warnings(host, config, blocker)
        result = install_services(host, config, generation=generation)
        document: dict[str, Any] = {**result.to_dict(), "update_job": config.update_job, "warnings": warnings}
        summary = f"installed {len(result.written)} {host.platform} jobs into {host.target_dir}"
        if result.fence_cleared:
            summary += "; update fence cleared"
        if result.rollback_recorded:
            summary += "; service rollback recorded"
        for warning in warnings:
            print(printable(f"herdr-mcp: warning: {warning}"), file=sys.stderr)
    elif args.command == "uninstall":
        removed = uninstall_services(host)
        document = {"removed": [str(path) for path in removed], "update_fence": "set"}
        summary = f"removed {len(removed)} {host.platform} jobs; updates are fenced until `service install`"
    else:
        document = service_status(host)
        summary = _status_text(document)
    print(json.dumps(document, indent=2, sort_keys=True) if args.json else summary)
    return 0


def _status_text(document: dict[str, Any]) -> str:
    lines = [f"{document['platform']} jobs in {document['target_dir']}"]
    for name, job in document["jobs"].items():
        installed = "installed" if job["installed"] else "missing"
        lines.append(f"  {name:<36} {installed:<10} {job['state']}")
    fence = document["update_fence"]
    lines.append(
        "update fence: " + ("not set" if fence is None else f"set {fence['set_at']} ({fence['reason']})")
    )
    record = document["service_rollback"]
    if record is not None:
        lines.append(f"service rollback: back to generation {record['previous_generation']}")
    return "\n".join(lines)


def build_rollback_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="herdr-mcp rollback", description="re-activate the service rollback recorded by the last install"
    )
    _common(parser)
    return with_json(parser)


def rollback_main(argv: list[str], *, runner: Runner = run_command) -> int:
    """`herdr-mcp rollback` inside the CLI's one catch; the exit status."""
    return run_guarded(lambda: rollback_run(argv, runner=runner), argv)


def rollback_run(argv: list[str], *, runner: Runner = run_command) -> int:
    """`herdr-mcp rollback`: re-validate and re-activate the recorded service rollback (macOS)."""
    args = build_rollback_parser().parse_args(argv)
    result = rollback_services(_host(args, runner))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        print(f"rolled back: {result.message}; previous service definitions reloaded")
    return 0
