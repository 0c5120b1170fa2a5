"""`herdr-mcp generation status|register|activate|rollback|remove`.

The state dir is `--state-dir`, else `<config dir>/generations`. Exit 0 on success (`activated`,
`active_unchanged`); 3 when the gate refused the generation (the one active before stays
active); otherwise the exit status of the failure's fault (`errors.py`: 2 a bad request, 4 the
local state), with one line `herdr-mcp: error: <code>: <message>` on stderr (and under
`--json` `{"error": {"code", "message"}}` on stdout).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from herdr_mcp.cli.arguments import CommandParser, dir_path, run_guarded, seconds, with_json
from herdr_mcp.contract import ContractError, ContractIdentity, contract_identity, identity_of_catalog
from herdr_mcp.errors import EXIT_REFUSED
from herdr_mcp.generations.control import (
    Generation,
    GenerationError,
    GenerationStore,
    check_endpoint,
    check_generation_id,
)
from herdr_mcp.generations.gate import ActivationResult, activate, rollback
from herdr_mcp.generations.registry import register, remove
from herdr_mcp.generations.supervisor import DEFAULT_INTERVAL_S, ensure_running, supervise
from herdr_mcp.layout import Layout
from herdr_mcp.loopback import stop_signals
from herdr_mcp.strict_json import PACKAGED_LIMITS, JsonLimits, loads_bounded
from herdr_mcp.terminal import error_line, printable

#: A frozen catalog file is ~40 KiB; this is far above it and far below a memory problem.
MAX_CONTRACT_FILE_BYTES = 4 * 1024 * 1024
#: A catalog file's structure (docs/runtime.md "Parse boundaries"): as our packaged catalogs.
CONTRACT_FILE_LIMITS = JsonLimits(max_bytes=MAX_CONTRACT_FILE_BYTES, max_items=PACKAGED_LIMITS.max_items)


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="herdr-mcp generation", description="runtime A/B generations")
    parser.add_argument(
        "--state-dir", type=dir_path, help="generations state dir (default <config dir>/generations)"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser("status", help="show the generations, the active one and the last outcome")

    register = commands.add_parser("register", help="record a running generation (does not activate it)")
    register.add_argument("--id", required=True, dest="generation", help="the generation's id")
    register.add_argument("--endpoint", required=True, help="http://127.0.0.1:<port> or http://[::1]:<port>")
    register.add_argument("--expected-version", help="the runtime version it must report")
    expected = register.add_mutually_exclusive_group()
    expected.add_argument("--expected-contract-file", type=Path, help="a catalog runtime-epoch-<E>.json")
    expected.add_argument("--expected-epoch", type=int, help="the frozen catalog of this epoch shipped here")
    register.add_argument("--executable", help="the generation's herdr-mcp executable (recorded only)")
    register.add_argument("--token-file", help="its bearer token file (default <state dir>/../token)")

    activate_cmd = commands.add_parser("activate", help="validate a generation and switch traffic to it")
    activate_cmd.add_argument("generation", help="the registered generation to activate")

    commands.add_parser("rollback", help="re-activate the previous generation through the gate")

    remove = commands.add_parser("remove", help="forget a generation that is not active")
    remove.add_argument("generation", help="the generation to forget")

    up = commands.add_parser(
        "up", help="keep the active and previous generations' runtimes running (the runtime service)"
    )
    up.add_argument("--once", action="store_true", help="one pass, then exit")
    up.add_argument("--interval", type=seconds, default=DEFAULT_INTERVAL_S, help="seconds between passes")
    return with_json(parser)


def main(argv: list[str]) -> int:
    """`herdr-mcp generation ...` inside the CLI's one catch; the exit status."""
    return run_guarded(lambda: run(argv), argv)


def run(argv: list[str]) -> int:
    """Run one `generation` subcommand; raises what the CLI's one catch reports."""
    args = build_parser().parse_args(argv)
    store = GenerationStore.in_dir(args.state_dir or Layout.default().generations_dir)
    if args.command == "status":
        return _status(store, as_json=args.json)
    if args.command == "register":
        return _register(store, args, as_json=args.json)
    if args.command == "activate":
        return _report(activate(store, check_generation_id(args.generation)), as_json=args.json)
    if args.command == "rollback":
        return _report(rollback(store), as_json=args.json)
    if args.command == "up":
        return _up(store, once=args.once, interval_s=args.interval)
    return _remove(store, check_generation_id(args.generation), as_json=args.json)


def _up(store: GenerationStore, *, once: bool, interval_s: float) -> int:
    config_dir = store.state_dir.parent

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if once:
        ensure_running(store, config_dir, say)
        return 0
    stop = stop_signals()
    say(f"herdr-mcp generation up: keeping the generations of {store.state_dir} running")
    try:
        supervise(store, config_dir, stop, interval_s=interval_s, say=say)
    finally:
        stop.exiting()
    return 0


def _status(store: GenerationStore, *, as_json: bool) -> int:
    control, status = store.read_control(), store.read_status()
    if as_json:
        print(
            json.dumps({"control": control.to_dict(), "status": status.to_dict()}, indent=2, sort_keys=True)
        )
        return 0
    print(f"control revision {control.revision} (processed {status.processed_revision})")
    pointers = f"active {status.active or '-'}  previous {status.previous or '-'}"
    print(f"{pointers}  last good {status.last_good or '-'}")
    print(f"last outcome {status.outcome or '-'}")
    for spec in control.generations:
        entry = status.status_of(spec.generation)
        validation = entry.validation
        detail = "-" if validation is None else ("ok" if validation.ok else validation.code or "failed")
        marker = "*" if spec.generation == status.active else " "
        print(f"{marker} {spec.generation:<24} {spec.endpoint:<28} {entry.phase:<10} {detail}")
    return 0


def _expected_contract(args: argparse.Namespace) -> ContractIdentity | None:
    if args.expected_epoch is not None:
        try:
            return contract_identity(args.expected_epoch)
        except ContractError as exc:
            raise GenerationError("contract_unknown", f"{exc}; pass --expected-contract-file") from exc
    path: Path | None = args.expected_contract_file
    if path is None:
        return None
    try:
        with path.open("rb") as handle:
            document = loads_bounded(
                handle.read(MAX_CONTRACT_FILE_BYTES + 1), CONTRACT_FILE_LIMITS, strict=False
            )
        return identity_of_catalog(document)
    except (OSError, ValueError, ContractError) as exc:  # ValueError: not JSON, or past the bounds
        raise GenerationError(
            "contract_file_invalid", f"{path} is not a catalog file {{epoch, tools}}: {exc}"
        ) from exc


def _register(store: GenerationStore, args: argparse.Namespace, *, as_json: bool) -> int:
    spec = Generation(
        generation=check_generation_id(args.generation),
        endpoint=check_endpoint(args.endpoint),
        expected_runtime_version=args.expected_version,
        expected_contract=_expected_contract(args),
        executable=args.executable,
        token_file=args.token_file,
    )
    written = register(store, spec)
    if as_json:
        print(
            json.dumps(
                {"registered": spec.generation, "endpoint": spec.endpoint, "revision": written.revision}
            )
        )
    else:
        print(f"registered {spec.generation} at {spec.endpoint} (control revision {written.revision})")
    return 0


def _remove(store: GenerationStore, generation: str, *, as_json: bool) -> int:
    written = remove(store, generation)
    if as_json:
        print(json.dumps({"removed": generation, "revision": written.revision}))
    else:
        print(f"removed {generation} (control revision {written.revision})")
    return 0


def _report(result: ActivationResult, *, as_json: bool) -> int:
    """Print the gate's result: 0 when it activated (or nothing was to change), else
    `EXIT_REFUSED` (under `--json` the result then carries `{"error": {"code", "message"}}`)."""
    if as_json:
        document: dict[str, Any] = result.to_dict()
        if not result.ok:
            document["error"] = {"code": result.outcome, "message": result.message}
        print(json.dumps(document, indent=2, sort_keys=True))
    if result.ok:
        if not as_json:
            print(printable(f"{result.outcome}: {result.message}"))
        return 0
    print(error_line(result.outcome, result.message), file=sys.stderr)
    return EXIT_REFUSED
