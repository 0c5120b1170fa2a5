"""`herdr-mcp dev status|sync|rollback`: run a generation built from this checkout, and go back.

Exit 0 on success; 3 when the gate or the plane refused (the gate's outcome code when it did not
activate: the generation active before stays active); otherwise the failure's fault's exit
status (2 a bad argument, 4 the local environment: a build, the disk). A refusal is one line
`herdr-mcp: error: <code>: <message>` on stderr; under `--json` the answer on stdout carries
`{"error": {"code", "message"}}` too.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from herdr_mcp.cli.arguments import CommandParser, dir_path, existing_dir, run_guarded, with_json
from herdr_mcp.dev.plane import rollback, status, sync
from herdr_mcp.errors import EXIT_REFUSED
from herdr_mcp.generations.gate import ActivationResult
from herdr_mcp.generations.process import check_serve_args
from herdr_mcp.layout import default_config_dir
from herdr_mcp.progress import printable_steps
from herdr_mcp.terminal import error_line
from herdr_mcp.update.paths import UpdatePaths


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="herdr-mcp dev", description="the DEV plane over the pinned PROD")
    parser.add_argument(
        "--config-dir", type=dir_path, default=None, help="the config dir (default: user config)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("status", help="the plane, the pinned PROD generation and the active one")
    sync_cmd = commands.add_parser("sync", help="build this checkout and activate it as the DEV generation")
    sync_cmd.add_argument(
        "--source", type=existing_dir, default=Path.cwd(), help="the checkout (default: here)"
    )
    sync_cmd.add_argument(
        "--serve-arg",
        action="append",
        default=None,
        help="a `serve` argument (default: the active generation's)",
    )
    commands.add_parser("rollback", help="re-activate the pinned PROD generation (nothing is rebuilt)")
    return with_json(parser)


def _schema(value: int | None, otherwise: str) -> str:
    return otherwise if value is None else str(value)


def main(argv: list[str]) -> int:
    """`herdr-mcp dev ...` inside the CLI's one catch; the exit status."""
    return run_guarded(lambda: run(argv), argv)


def run(argv: list[str]) -> int:
    """Run one `dev` subcommand; raises what the CLI's one catch reports."""
    args = build_parser().parse_args(argv)
    paths = UpdatePaths(args.config_dir or default_config_dir())
    if args.command == "status":
        answer: dict[str, Any] = status(paths)
        summary = f"plane {answer['plane']}, active generation {answer['active']}"
        if answer["plane"] == "dev":
            pin = answer["pinned_prod"]
            summary += (
                ", checkout only: no PROD pinned (nothing for `dev rollback` to return to)"
                if pin is None
                else f", pinned PROD {pin['generation']} ({pin['version']})"
            )
        schemas = answer["state_schema"]
        summary += f"; state schema: state.db {_schema(schemas['database'], 'no file yet')}"
        if answer["plane"] == "dev" and answer["pinned_prod"] is not None:
            summary += f", PROD {_schema(schemas['pinned_prod'], 'unknown')}"
        label = "DEV" if answer["plane"] == "dev" else "active"
        missing = "none active" if answer["active"] is None else "unknown"
        summary += f", {label} {_schema(schemas['active'], missing)}"
        summary += "".join(f"\n  note: {note}" for note in answer["state_schema_notes"])
        answer["summary"] = summary
        result: ActivationResult | None = None
    elif args.command == "sync":
        serve_args = check_serve_args(args.serve_arg) if args.serve_arg is not None else None
        # A build and an install: rich's spinner on a terminal, one line a step elsewhere.
        with printable_steps(sys.stderr) as say:
            result, plane = sync(paths, args.source, serve_args=serve_args, say=say)
        answer = {**result.to_dict(), "plane": plane.to_dict(), "summary": result.message}
    else:
        with printable_steps(sys.stderr) as say:
            result, pin = rollback(paths, say=say)
        answer = {**result.to_dict(), "pinned_prod": pin.to_dict(), "summary": result.message}
    if result is not None and not result.ok:
        if args.json:
            answer["error"] = {"code": result.outcome, "message": result.message}
            print(json.dumps(answer, sort_keys=True))
        print(error_line(result.outcome, result.message), file=sys.stderr)
        return EXIT_REFUSED
    print(json.dumps(answer, sort_keys=True) if args.json else answer["summary"])
    return 0
