"""Which Herdr `serve` and `stdio` talk to (`--sim`, `--no-sim`, `--sim-root`, `--herdr-socket`).

`--sim` always embeds the simulator, `--no-sim` never does, and the default embeds it only when
no Herdr answers a ping on the configured socket. The embedded simulator's socket lives in a
private 0700 directory and disappears with the process. The simulator is imported only when it
runs, and nothing here imports the HTTP stack, so `stdio` starts without either.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from herdr_mcp.errors import LocalFault
from herdr_mcp.herdr import HerdrClient, HerdrError, default_socket_path

#: How long the default selection waits for an existing Herdr to answer before embedding the
#: simulator.
PROBE_TIMEOUT_SECONDS = 1.0


async def _herdr_answers(path: Path) -> bool:
    try:
        await HerdrClient(path, timeout=PROBE_TIMEOUT_SECONDS).call("ping", {})
    except HerdrError:
        return False
    return True


@contextlib.asynccontextmanager
async def herdr_connection(args: argparse.Namespace) -> AsyncIterator[tuple[Path, str]]:
    """Yield the Herdr socket to use and a description of where it came from."""
    path: Path = args.herdr_socket or default_socket_path()
    if args.sim == "off" or (args.sim == "auto" and await _herdr_answers(path)):
        yield path, f"Herdr at {path}"
        return
    from herdr_mcp.sim import SimConfig, Simulator, SimulatorError

    roots = [root.resolve() for root in (args.sim_root or [Path.cwd()])]
    with tempfile.TemporaryDirectory(prefix="herdr-sim-", dir="/tmp") as private:
        sim_socket = Path(private) / "herdr.sock"
        try:
            simulator = Simulator(SimConfig.for_roots(roots), sim_socket)
            await simulator.start()
        except SimulatorError as exc:
            raise LocalFault("simulator_unavailable", f"{exc}; or pass --no-sim to use Herdr") from None
        try:
            yield sim_socket, f"embedded Herdr simulator rooted at {', '.join(map(str, roots))}"
        finally:
            await simulator.stop()
