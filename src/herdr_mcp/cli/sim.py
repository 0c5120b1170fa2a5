"""`herdr-mcp sim`: run the Herdr simulator on a socket until SIGINT or SIGTERM.

Prints the socket path as the first line of stdout (for scripts), a summary on stderr, and
removes the socket file on exit. Exit status: 0 after a signal (SIGTERM, SIGINT); with one line
`herdr-mcp: error: <code>: <message>`, 2 for bad arguments or config (`sim_config_invalid`) and
4 for a socket it cannot serve (`sim_socket_unavailable`). The socket's directory must exist.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from herdr_mcp.cli.arguments import CommandParser, existing_dir, socket_path, with_json
from herdr_mcp.errors import LocalFault
from herdr_mcp.loopback import StopSignals, stop_signals
from herdr_mcp.sim.config import SimConfig, SimulatorError
from herdr_mcp.sim.server import Simulator

PROG = "herdr-mcp sim"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog=PROG,
        description="Run a protocol-faithful Herdr simulator with scripted fake agents.",
    )
    parser.add_argument(
        "--socket", required=True, type=socket_path, help="Unix socket path to listen on (mode 0600)"
    )
    parser.add_argument("--config", type=Path, help="JSON session config (see `pydoc herdr_mcp.sim`)")
    parser.add_argument(
        "--root",
        action="append",
        type=existing_dir,
        default=[],
        help="a directory to open as a workspace with a shell pane and a fake agent pane (repeatable)",
    )
    parser.add_argument(
        "--protocol",
        type=int,
        choices=(20, 22),
        help="Herdr protocol to speak (default: the config's, else 22)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        help="multiply Herdr's own delays (Enter after agent.prompt, prompt window, polls); default 1",
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="METHOD[=CODE]",
        help="make METHOD fail with Herdr error CODE (default internal_error), e.g. session.snapshot",
    )
    return with_json(parser)


def run(argv: list[str]) -> int:
    """Run the simulator until a signal; raises what the CLI's one catch reports."""
    stop = stop_signals()
    args = build_parser().parse_args(argv)
    config = _config(args.config, args.root)
    if args.protocol is not None or args.time_scale is not None:
        config = SimConfig(
            config.workspaces,
            "" if args.protocol is not None else config.version,
            args.protocol if args.protocol is not None else config.protocol,
            args.time_scale if args.time_scale is not None else config.time_scale,
        )
    faults = [_fault(spec) for spec in args.fault]
    simulator = Simulator(config, args.socket)
    for method, code in faults:
        simulator.inject_fault(method, code=code)
    try:
        return asyncio.run(_serve(simulator, stop))
    finally:
        stop.exiting()


def _config(config_file: Path | None, roots: list[Path]) -> SimConfig:
    base = SimConfig.from_json_file(config_file) if config_file is not None else SimConfig()
    if config_file is None and not roots:
        roots = [Path.cwd()]
    extra = SimConfig.for_roots(roots, taken_names=base.agent_names())
    return SimConfig(base.workspaces + extra.workspaces, base.version, base.protocol, base.time_scale)


def _fault(spec: str) -> tuple[str, str]:
    method, _, code = spec.partition("=")
    if not method:
        raise SimulatorError(f"--fault needs METHOD[=CODE], got {spec!r}")
    return method, code or "internal_error"


async def _serve(simulator: Simulator, stop: StopSignals) -> int:
    if stop.is_set():  # asked to stop while starting: leave before serving anything
        return 0
    try:
        await simulator.start()
    except SimulatorError as exc:
        raise LocalFault("sim_socket_unavailable", str(exc)) from exc
    try:
        print(simulator.socket_path, flush=True)
        _describe(simulator)
        await stop.wait_async()
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
