"""`herdr-mcp sim`: run the Herdr simulator on a socket until SIGINT or SIGTERM.

Prints the socket path as the first line of stdout (for scripts), a summary on stderr, and
removes the socket file on exit. Exit status: 0 after a signal, 1 if the socket cannot be
served, 2 for bad arguments or config.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from herdr_mcp.sim.config import SimConfig, SimulatorError
from herdr_mcp.sim.server import Simulator


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="herdr-mcp sim",
        description="Run a protocol-faithful Herdr simulator with scripted fake agents.",
    )
    parser.add_argument(
        "--socket", required=True, type=Path, help="Unix socket path to listen on (mode 0600)"
    )
    parser.add_argument("--config", type=Path, help="JSON session config (see `pydoc herdr_mcp.sim`)")
    parser.add_argument(
        "--root",
        action="append",
        type=Path,
        default=[],
        help="a directory to open as a workspace with a shell pane and a fake agent pane (repeatable)",
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="METHOD[=CODE]",
        help="make METHOD fail with Herdr error CODE (default internal_error), e.g. session.snapshot",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of `herdr-mcp sim` and `python -m herdr_mcp.sim`."""
    args = build_parser().parse_args(argv)
    try:
        config = _config(args.config, args.root)
        faults = [_fault(spec) for spec in args.fault]
        simulator = Simulator(config, args.socket)
        for method, code in faults:
            simulator.inject_fault(method, code=code)
    except SimulatorError as exc:
        print(f"herdr-mcp sim: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_serve(simulator))


def _config(config_file: Path | None, roots: list[Path]) -> SimConfig:
    base = SimConfig.from_json_file(config_file) if config_file is not None else SimConfig()
    if config_file is None and not roots:
        roots = [Path.cwd()]
    extra = SimConfig.for_roots(roots, taken_names=base.agent_names())
    return SimConfig(base.workspaces + extra.workspaces, base.version, base.protocol)


def _fault(spec: str) -> tuple[str, str]:
    method, _, code = spec.partition("=")
    if not method:
        raise SimulatorError(f"--fault needs METHOD[=CODE], got {spec!r}")
    return method, code or "internal_error"


async def _serve(simulator: Simulator) -> int:
    try:
        await simulator.start()
    except SimulatorError as exc:
        print(f"herdr-mcp sim: {exc}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        print(simulator.socket_path, flush=True)
        _describe(simulator)
        await stop.wait()
    finally:
        await simulator.stop()
    return 0


def _describe(simulator: Simulator) -> None:
    snapshot = simulator.snapshot()
    agents = {a["pane_id"]: a["name"] for a in snapshot["agents"]}
    print(f"herdr simulator {snapshot['version']} (protocol {snapshot['protocol']})", file=sys.stderr)
    for pane in snapshot["panes"]:
        who = f"agent {agents[pane['pane_id']]}" if pane["pane_id"] in agents else "shell"
        print(f"  {pane['pane_id']}  {who:<24} {pane['cwd']}", file=sys.stderr)
    print(f"export HERDR_SOCKET_PATH={simulator.socket_path}  # Ctrl-C to stop", file=sys.stderr, flush=True)
