"""`herdr-mcp`: the one command-line entry point (the only module that knows every part).

Every subcommand, its own parser's or one of this module's, runs inside the one catch
(`arguments.run_guarded`): an expected failure is one diagnostic line (one JSON object under
`--json`) and its fault's exit status (`errors.py`: 2 usage, 3 refused, 4 local environment);
anything else is a bug and keeps its traceback (exit 1).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from herdr_mcp import __version__
from herdr_mcp.cli.arguments import CommandParser, dir_path, existing_dir, port, run_guarded, with_json
from herdr_mcp.contract import contract_identity
from herdr_mcp.errors import UsageFault
from herdr_mcp.layout import DEFAULT_PORT, Layout
from herdr_mcp.loopback import StartStopped, full_collections_held, stop_signals
from herdr_mcp.state import STATE_SCHEMA
from herdr_mcp.tokens import load_or_create_token


class UsageError(UsageFault):
    """A command-line request that cannot be carried out as given: a stable `code` and a
    `message` saying what to do instead."""


def version_info() -> dict[str, object]:
    return {
        "product": "herdr-mcp",
        "version": __version__,
        "contract": contract_identity().to_dict(),
        "state_schema": STATE_SCHEMA,
    }


def _cmd_version(args: argparse.Namespace) -> int:
    info = version_info()
    if args.json:
        print(json.dumps(info, sort_keys=True))
        return 0
    contract = contract_identity()
    print(f"herdr-mcp {__version__}")
    print(f"contract epoch {contract.epoch} / {contract.tool_count} tools")
    print(contract.hash)
    print(f"state schema {STATE_SCHEMA}")
    return 0


def _cmd_token(args: argparse.Namespace) -> int:
    path = Layout.of(args.config_dir).token_file
    if args.path:
        print(json.dumps({"path": str(path)}) if args.json else path)
        return 0
    token = load_or_create_token(path)
    print(json.dumps({"path": str(path), "token": token}) if args.json else token)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    stop = stop_signals()
    with full_collections_held():  # until the runtime is built and its heap frozen
        try:
            with stop.imports_end_the_start():  # the rest of the start: cli/serve.py
                from herdr_mcp.cli.serve import serve
        except StartStopped:
            return 0
        return serve(args)


def _cmd_stdio(args: argparse.Namespace) -> int:
    with full_collections_held():  # until the runtime is composed and its heap frozen
        from herdr_mcp.cli.stdio import stdio

        return stdio(args)


def _add_connect(commands: argparse._SubParsersAction[Any]) -> None:
    from herdr_mcp.cli.connect import add_parser

    add_parser(commands)


#: Subcommands with parsers of their own: main() hands them their arguments untouched.
#: name -> (module, its `run(argv)` that raises what the one catch reports, its parser factory).
DELEGATED: dict[str, tuple[str, str, str]] = {
    "link": ("herdr_mcp.cli.link", "run", "build_parser"),
    "connector": ("herdr_mcp.cli.link", "connector_run", "build_connector_parser"),
    "dev": ("herdr_mcp.cli.dev", "run", "build_parser"),
    "service": ("herdr_mcp.cli.start", "service_run", "build_service_parser"),
    "start": ("herdr_mcp.cli.start", "run", "build_parser"),
    "stop": ("herdr_mcp.cli.start", "stop_run", "build_stop_parser"),
    "rollback": ("herdr_mcp.cli.service", "rollback_run", "build_rollback_parser"),
    "sim": ("herdr_mcp.cli.sim", "run", "build_parser"),
    "handoff": ("herdr_mcp.cli.handoff", "run", "build_parser"),
    "release": ("herdr_mcp.cli.release", "run", "build_parser"),
    "update": ("herdr_mcp.cli.update", "run", "build_parser"),
    "generation": ("herdr_mcp.cli.generation", "run", "build_parser"),
    "audit": ("herdr_mcp.cli.audit", "run", "build_parser"),
    "native-host": ("herdr_mcp.cli.native_host", "run", "build_parser"),
    "edge": ("herdr_mcp.cli.edge", "run", "build_parser"),
}


def _delegated(name: str, index: int) -> Callable[..., Any]:
    """Import a delegated subcommand's module only when it runs (`serve` never loads the updater)."""
    module = importlib.import_module(DELEGATED[name][0])
    function: Callable[..., Any] = getattr(module, DELEGATED[name][index])
    return function


def subcommand_parser(name: str) -> argparse.ArgumentParser:
    """The full parser of subcommand `name` (a delegated one's own, else this module's)."""
    if name in DELEGATED:
        parser: argparse.ArgumentParser = _delegated(name, 2)()
        return parser
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    chosen: argparse.ArgumentParser = commands.choices[name]
    return chosen


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only` (one of `_OWN`), the top level and that one
    subcommand: argparse builds a help formatter for every option it adds, which cost a
    `serve` or `stdio` start 10-20 ms for subcommands it never reads."""
    parser = CommandParser(prog="herdr-mcp", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"herdr-mcp {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, add in _OWN.items():
        if only is None or name == only:
            add(commands)
    if only is None:
        _add_listed(commands)
    return with_json(parser)


def _add_version(commands: argparse._SubParsersAction[Any]) -> None:
    version = commands.add_parser("version", help="print version, contract identity and state schema")
    version.set_defaults(run=_cmd_version)


def _add_token(commands: argparse._SubParsersAction[Any]) -> None:
    token = commands.add_parser("token", help="print the local bearer token (created on first use)")
    token.add_argument("--path", action="store_true", help="print the token file's path instead")
    token.add_argument(
        "--config-dir", type=dir_path, default=None, help="the config dir (default: user config)"
    )
    token.set_defaults(run=_cmd_token)


def _add_serve(commands: argparse._SubParsersAction[Any]) -> None:
    serve = commands.add_parser("serve", help="run the runtime (Streamable HTTP MCP on loopback)")
    serve.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=port, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0 picks one")
    ipc = serve.add_mutually_exclusive_group()
    ipc.add_argument(
        "--ipc-socket",
        type=_path,
        default=None,
        help="Unix socket for the native host (default: <config dir>/ipc/runtime.sock)",
    )
    ipc.add_argument("--no-ipc-socket", action="store_true", help="serve no Unix socket")
    _runtime_options(serve)
    _state_db_option(serve)
    serve.set_defaults(run=_cmd_serve)


def _add_stdio(commands: argparse._SubParsersAction[Any]) -> None:
    stdio = commands.add_parser(
        "stdio", help="run the runtime for one local MCP client over stdin/stdout (logs on stderr)"
    )
    _runtime_options(stdio)
    _state_db_option(stdio)
    stdio.set_defaults(run=_cmd_stdio)


def _add_listed(commands: argparse._SubParsersAction[Any]) -> None:
    """The delegated subcommands, listed for --help only: main() hands these to their own
    parsers (see DELEGATED)."""
    commands.add_parser("sim", help="run the Herdr simulator (see `herdr-mcp sim --help`)", add_help=False)
    commands.add_parser(
        "handoff", help="build a handoff document from a continuity chain (see --help)", add_help=False
    )
    commands.add_parser(
        "release", help="maintainer release commands: build, bundle, manifest, sign, verify", add_help=False
    )
    commands.add_parser(
        "update",
        help="install and activate the next release (--check: admit only)",
        add_help=False,
    )
    commands.add_parser(
        "dev", help="DEV plane: status | sync (build this checkout) | rollback (pinned PROD)", add_help=False
    )
    commands.add_parser(
        "link", help="the stable local MCP endpoint in front of the active generation", add_help=False
    )
    commands.add_parser(
        "connector", help="list|approve|deny|grants|revoke MCP connectors on the Edge", add_help=False
    )
    commands.add_parser(
        "start", help="bring this workstation up: active generation, runtime, link", add_help=False
    )
    commands.add_parser("stop", help="stop what `start` started: the link, the runtimes", add_help=False)
    commands.add_parser("service", help="install|uninstall|status of the user services", add_help=False)
    commands.add_parser("rollback", help="macOS: re-activate the recorded service rollback", add_help=False)
    commands.add_parser(
        "generation", help="runtime generations: status, register, activate, rollback, remove", add_help=False
    )
    commands.add_parser(
        "audit", help="the audit log of tool calls (--since 1h, --tool NAME, --json)", add_help=False
    )
    commands.add_parser(
        "native-host", help="the Chrome native messaging host; install|uninstall its manifest", add_help=False
    )
    commands.add_parser(
        "edge",
        help="deploy: the public Edge on your Cloudflare account (create or reconcile)",
        add_help=False,
    )


#: The subcommands this module parses itself, in the order `--help` lists them.
_OWN: dict[str, Callable[[argparse._SubParsersAction[Any]], None]] = {
    "version": _add_version,
    "token": _add_token,
    "serve": _add_serve,
    "stdio": _add_stdio,
    "connect": _add_connect,
}


def _state_db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-db",
        type=_path,
        default=None,
        help="the state database (default: <config dir>/state.db; a generation's own copy during a "
        "major migration, docs/updater.md)",
    )


def _runtime_options(parser: argparse.ArgumentParser) -> None:
    """The options `serve` and `stdio` share: where state lives, which Herdr, what may change."""
    parser.add_argument(
        "--config-dir", type=dir_path, default=None, help="token and state (default: user config)"
    )
    parser.add_argument(
        "--herdr-socket", type=_path, default=None, help="Herdr socket (default: Herdr's rules)"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--sim", dest="sim", action="store_const", const="on", help="always embed the simulator"
    )
    mode.add_argument("--no-sim", dest="sim", action="store_const", const="off", help="never embed it")
    parser.set_defaults(sim="auto")
    parser.add_argument(
        "--sim-root",
        type=existing_dir,
        action="append",
        default=None,
        help="workspace root for the embedded simulator (repeatable; default: cwd)",
    )
    parser.add_argument("--read-only", action="store_true", help="refuse every mutation")
    parser.add_argument(
        "--write-root",
        type=existing_dir,
        action="append",
        default=None,
        help="allow writes only under this directory (repeatable)",
    )
    parser.add_argument(
        "--allow-herdr-class",
        choices=["server_control", "install", "unclassified"],
        action="append",
        default=None,
        help="let herdr_call run Herdr methods of this class, refused by default (repeatable; "
        "docs/runtime.md)",
    )
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="default: warning",
    )


def _path(value: str) -> object:
    from pathlib import Path

    return Path(value).expanduser()


#: The long-running subcommands: SIGTERM/SIGINT ask them to stop from here on (before their
#: modules are even imported), never the default action (see `loopback.StopSignals`).
_SERVING = {"serve", "stdio", "link", "sim"}


def main(argv: Sequence[str] | None = None) -> int:
    """`herdr-mcp ...`: run one subcommand inside the one catch; its exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in _SERVING:
        stop_signals()
    return run_guarded(lambda: _dispatch(arguments), arguments)


def _dispatch(arguments: list[str]) -> int:
    if arguments and arguments[0] in DELEGATED:
        code: int = _delegated(arguments[0], 1)(arguments[1:])
        return code
    # `serve` and `stdio` are started by programs, and their start is timed: only their own
    # subcommand is built (the same options, errors and --help).
    only = arguments[0] if arguments and arguments[0] in {"serve", "stdio"} else None
    args = build_parser(only).parse_args(arguments)
    code = args.run(args)
    return code
