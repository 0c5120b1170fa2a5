"""Herdr round trips: herdr_prompt's wait, and herdr_call against a direct socket call.

One run: the Herdr simulator at real timing (Enter pressed 300 ms after agent.prompt answers, as
Herdr does) on a thread of this process, and `herdr-mcp serve` as a child on loopback, called
with the raw client (benchmarks/raw_client.py: keep-alive HTTP/1.1, the bytes of each request
built once) and, alongside, with the `mcp` SDK's client. Printed:

- **prompt wait**: from the moment the simulated agent reaches its terminal state (stamped by
  the simulator as the state changes, on this process's monotonic clock) to herdr_prompt with
  `wait` answered to the client; each turn of a random length (50-450 ms) so the settle falls at
  any phase of the polls. The runtime learns of the settle from whichever comes first: the agent
  status event on its feed (Herdr polls its subscriptions every 100 ms, src/api/server.rs) or its
  own `agent.get` probe every 100 ms. No floor: Herdr's own 100 ms poll bounds it.
- **herdr_call overhead**: herdr_call `pane.get` through MCP against the same `pane.get` sent
  by `HerdrClient` straight to the socket (the floor), interleaved call by call; p50 of each,
  their ratio and the difference (the MCP transport, validation, the class rules, the audit).

Each figure over `--repeat` rounds (min/median/max) with the load average. Run from the
repository root with the project installed: `python benchmarks/herdr_bench.py` (`--turns`,
`--calls`, `--repeat`; `--record` writes benchmarks/results/herdr_bench.json). Exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.runtime_harness import call_tool, mcp_client, running_runtime
from tests.support.sim_helpers import one_workspace_config

from benchmarks.raw_client import RawHttp, Spread, interleaved, load_text, percentile
from benchmarks.results import Row, record
from herdr_mcp.herdr import HerdrClient
from herdr_mcp.sim import AgentConfig, AgentScript, PaneConfig, ScriptStep, Simulator, SimulatorThread

TURN = AgentScript((ScriptStep(after_ms=20, state="working"), ScriptStep(after_ms=60, state="done")))
PANE_GET = {"method": "pane.get", "params": {"pane_id": "w1:p1"}}


async def prompt_waits(sim: SimulatorThread, client: RawHttp, turns: int) -> list[float]:
    settled: list[float] = []

    def listen(simulator: Simulator) -> None:
        agent = simulator.world.panes["w1:p2"].agent  # the simulator's own state, stamped as it changes
        assert agent is not None

        def stamp(_pane: Any) -> None:
            if agent.status == "done":
                settled.append(time.monotonic())

        agent.listeners.append(stamp)

    sim.call(listen)
    waits: list[float] = []
    for _ in range(turns):
        # A turn of a random length, so the settle falls anywhere between the runtime's probes
        # and Herdr's 100 ms subscription polls.
        work_ms = random.randint(50, 450)
        sim.set_script(
            "coder",
            AgentScript(
                (ScriptStep(after_ms=20, state="working"), ScriptStep(after_ms=work_ms, state="done"))
            ),
        )
        settled.clear()
        answer = await client.call_tool(
            "herdr_prompt",
            {"target": "coder", "text": "go", "wait": {"until": ["done"], "timeout_ms": 10000}},
        )
        returned = time.monotonic()
        structured = answer.get("structuredContent", {})
        if not structured.get("wait", {}).get("reached") or not settled:
            raise SystemExit(f"a round did not settle: {structured}")
        waits.append((returned - settled[0]) * 1000)
    return waits


async def main(args: argparse.Namespace) -> int:
    print(load_text())
    with tempfile.TemporaryDirectory(prefix="hm-", dir="/tmp") as tmp:
        base = Path(tmp)
        config = one_workspace_config(
            base, PaneConfig(label="shell"), PaneConfig(agent=AgentConfig("coder", "claude", script=TURN))
        )
        with (
            SimulatorThread(config, base / "herdr.sock") as sim,
            running_runtime(base / "herdr.sock", base / "config") as runtime,
        ):
            raw = await RawHttp(runtime.url, runtime.token).connect()
            direct = HerdrClient(sim.socket_path)
            wait_p50, wait_p95, socket_p50, raw_p50, sdk_p50 = [], [], [], [], []
            async with mcp_client(runtime.url, runtime.token) as sdk:

                async def by_socket() -> None:
                    await direct.call("pane.get", {"pane_id": "w1:p1"})

                async def by_raw() -> None:
                    await raw.call_tool("herdr_call", PANE_GET)

                async def by_sdk() -> None:
                    await call_tool(sdk, "herdr_call", PANE_GET)

                for round_index in range(args.repeat):
                    waits = await prompt_waits(sim, raw, args.turns)
                    socket, through_raw, through_sdk = await interleaved(
                        [by_socket, by_raw, by_sdk], args.calls, warmup=20
                    )
                    wait_p50.append(percentile(waits, 0.5))
                    wait_p95.append(percentile(waits, 0.95))
                    socket_p50.append(percentile(socket, 0.5))
                    raw_p50.append(percentile(through_raw, 0.5))
                    sdk_p50.append(percentile(through_sdk, 0.5))
                    print(
                        f"round {round_index + 1}: prompt wait p50 {wait_p50[-1]:.1f} ms "
                        f"p95 {wait_p95[-1]:.1f} ms; "
                        f"pane.get socket {socket_p50[-1]:.3f} ms, herdr_call raw {raw_p50[-1]:.3f} ms, "
                        f"SDK client {sdk_p50[-1]:.3f} ms; {load_text()}"
                    )
            await raw.close()
    ratio = Spread(tuple(r / s for r, s in zip(raw_p50, socket_p50, strict=True)))
    added = Spread(tuple(r - s for r, s in zip(raw_p50, socket_p50, strict=True)))
    waits50, waits95 = Spread(tuple(wait_p50)), Spread(tuple(wait_p95))
    raws, sockets, sdks = Spread(tuple(raw_p50)), Spread(tuple(socket_p50)), Spread(tuple(sdk_p50))
    print(f"prompt wait, terminal state -> herdr_prompt answered: p50 {waits50.text(1, ' ms')}")
    print(f"                                                      p95 {waits95.text(1, ' ms')}")
    print(f"pane.get straight to the socket (floor): p50 {sockets.text(3, ' ms')}")
    print(f"herdr_call pane.get, raw client:        p50 {raws.text(3, ' ms')}")
    print(f"herdr_call pane.get, SDK client:        p50 {sdks.text(3, ' ms')}")
    print(f"herdr_call / socket: {ratio.text(2, 'x')}, added {added.text(2, ' ms')}")
    print(load_text())
    if args.record:
        command = "python benchmarks/herdr_bench.py --record"
        path = record(
            "herdr_bench",
            [
                Row(
                    "herdr_prompt's wait: a simulated agent reaching its terminal state -> herdr_prompt "
                    "with `wait` answered (simulator at Herdr's timing, turns of random length)",
                    f"p50 {waits50.median:.1f} ms, p95 {waits95.median:.1f} ms",
                    "Herdr's own subscription poll: 100 ms (the runtime also probes every 100 ms)",
                    "",
                ),
                Row(
                    "herdr_call `pane.get` through MCP (raw client)",
                    f"p50 {raws.median:.3f} ms (SDK client {sdks.median:.3f} ms)",
                    f"`pane.get` sent straight to the socket: p50 {sockets.median:.3f} ms",
                    f"{ratio.min:.2f}/{ratio.median:.2f}/{ratio.max:.2f}x (+{added.median:.2f} ms)",
                ),
            ],
            command=command,
            details={
                "prompt_wait_p50_ms": waits50.to_json(),
                "prompt_wait_p95_ms": waits95.to_json(),
                "socket_p50_ms": sockets.to_json(),
                "herdr_call_raw_p50_ms": raws.to_json(),
                "herdr_call_sdk_p50_ms": sdks.to_json(),
            },
        )
        print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20, help="herdr_prompt turns per round")
    parser.add_argument("--calls", type=int, default=300, help="pane.get calls per side per round")
    parser.add_argument("--repeat", type=int, default=3, help="rounds")
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/herdr_bench.json")
    arguments = parser.parse_args()
    arguments.turns = max(5, arguments.turns)
    sys.exit(asyncio.run(main(arguments)))
