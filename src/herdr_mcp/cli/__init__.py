"""`herdr-mcp`: the one command-line entry point (the only module that knows every part).

One top-level catch turns every expected failure into one diagnostic line and exit code 2;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from herdr_mcp import __version__
from herdr_mcp.cli.arguments import CommandParser, dir_path, existing_dir, fail, io_failure, port
from herdr_mcp.contract import ContractError, contract_identity
from herdr_mcp.loopback import stop_signals
from herdr_mcp.runtime.auth import TokenFileError, load_or_create_token
from herdr_mcp.runtime.config import DEFAULT_PORT, default_config_dir
from herdr_mcp.state import STATE_SCHEMA
from herdr_mcp.state.store import StateError


class UsageError(Exception):
    """A command-line request that cannot be carried out as given: a stable `code` and a
    `message` saying what to do instead."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


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
    config_dir = args.config_dir or default_config_dir()
    path = config_dir / "token"
    if args.path:
        print(path)
        return 0
    print(load_or_create_token(path))
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from herdr_mcp.cli.serve import serve

    return serve(args)


def _cmd_stdio(args: argparse.Namespace) -> int:
    from herdr_mcp.cli.stdio import stdio

    return stdio(args)


def _add_connect(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from herdr_mcp.cli.connect import add_parser

    add_parser(commands)


def _run_sim(argv: list[str]) -> int:
    from herdr_mcp.sim.cli import main as sim_main

    return sim_main(argv)


def _run_handoff(argv: list[str]) -> int:
    from herdr_mcp.cli.handoff import main as handoff_main

    return handoff_main(argv)


def _run_release(argv: list[str]) -> int:
    from herdr_mcp.cli.release import main as release_main

    return release_main(argv)


def _run_update(argv: list[str]) -> int:
    from herdr_mcp.cli.update import main as update_main

    return update_main(argv)


def _run_generation(argv: list[str]) -> int:
    from herdr_mcp.generations.cli import main as generation_main

    return generation_main(argv)


def _run_service(argv: list[str]) -> int:
    from herdr_mcp.service.cli import main as service_main

    return service_main(argv)


def _run_rollback(argv: list[str]) -> int:
    from herdr_mcp.service.cli import rollback_main

    return rollback_main(argv)


def _run_dev(argv: list[str]) -> int:
    from herdr_mcp.dev.cli import main as dev_main

    return dev_main(argv)


def _run_link(argv: list[str]) -> int:
    from herdr_mcp.link.cli import main as link_main

    return link_main(argv)


def _run_audit(argv: list[str]) -> int:
    from herdr_mcp.cli.audit import main as audit_main

    return audit_main(argv)


#: Subcommands with parsers of their own: main() hands them their arguments untouched.
_DELEGATED = {
    "link": _run_link,
    "dev": _run_dev,
    "service": _run_service,
    "rollback": _run_rollback,
    "sim": _run_sim,
    "handoff": _run_handoff,
    "release": _run_release,
    "update": _run_update,
    "generation": _run_generation,
    "audit": _run_audit,
}


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="herdr-mcp", description=__doc__.splitlines()[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)

    version = commands.add_parser("version", help="print version, contract identity and state schema")
    version.add_argument("--json", action="store_true", help="one JSON object")
    version.set_defaults(run=_cmd_version)

    token = commands.add_parser("token", help="print the local bearer token (created on first use)")
    token.add_argument("--path", action="store_true", help="print the token file's path instead")
    token.add_argument("--config-dir", type=dir_path, default=None)
    token.set_defaults(run=_cmd_token)

    serve = commands.add_parser("serve", help="run the runtime (Streamable HTTP MCP on loopback)")
    serve.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=port, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0 picks one")
    _runtime_options(serve)
    serve.set_defaults(run=_cmd_serve)

    stdio = commands.add_parser(
        "stdio", help="run the runtime for one local MCP client over stdin/stdout (logs on stderr)"
    )
    _runtime_options(stdio)
    stdio.set_defaults(run=_cmd_stdio)

    _add_connect(commands)

    # Listed for --help only: main() hands these to their own parsers (see _DELEGATED).
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
    commands.add_parser("service", help="install|uninstall|status of the user services", add_help=False)
    commands.add_parser("rollback", help="macOS: re-activate the recorded service rollback", add_help=False)
    commands.add_parser(
        "generation", help="runtime generations: status, register, activate, rollback, remove", add_help=False
    )
    commands.add_parser(
        "audit", help="the audit log of tool calls (--since 1h, --tool NAME, --json)", add_help=False
    )
    return parser


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
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])


def _path(value: str) -> object:
    from pathlib import Path

    return Path(value).expanduser()


#: The long-running subcommands: SIGTERM/SIGINT ask them to stop from here on (before their
#: modules are even imported), never the default action (see `loopback.StopSignals`).
_SERVING = {"serve", "stdio", "link", "sim"}


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in _SERVING:
        stop_signals()
    if arguments and arguments[0] in _DELEGATED:
        return _DELEGATED[arguments[0]](arguments[1:])
    args = build_parser().parse_args(arguments)
    try:
        code: int = args.run(args)
    except UsageError as exc:
        return fail("herdr-mcp", exc.code, exc.message)
    except TokenFileError as exc:
        return fail("herdr-mcp", "token_unavailable", str(exc))
    except ContractError as exc:
        return fail("herdr-mcp", "contract_unknown", str(exc))
    except StateError as exc:
        return fail("herdr-mcp", exc.code, str(exc))
    except OSError as exc:
        return io_failure("herdr-mcp", exc)
    except KeyboardInterrupt:
        return 130
    return code
