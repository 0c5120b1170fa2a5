"""Herdr round trips: herdr_prompt's wait, and herdr_call against a direct socket call.

One run: the Herdr simulator at real timing (Enter pressed 300 ms after agent.prompt answers,
as Herdr does) and the runtime's ASGI app in the same process, called with the `mcp` SDK's
client. Printed:

- **prompt wait**: from the moment the simulated agent reaches its terminal state (stamped by
  the simulator as the state changes, on the same monotonic clock) to herdr_prompt with `wait`
  returning to the client; p50/p95/max over the rounds, each turn of a random length (50-450 ms)
  so the settle falls at any phase of the polls. The runtime learns of the settle from whichever
  comes first: the agent status event on its feed (Herdr polls its subscriptions every 100 ms,
  src/api/server.rs) or its own `agent.get` probe every 100 ms.
- **herdr_call overhead**: herdr_call `pane.get` through MCP against the same `pane.get` sent by
  `HerdrClient` straight to the socket, interleaved round by round; p50 of each, their ratio and
  the difference (the MCP transport, validation, the class rules and the audit record).

Run from the repository root with the project installed: `python benchmarks/herdr_bench.py`
(`--rounds` to change the count). Exits 0 (figures, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.runtime_harness import call_tool, in_process_runtime
from tests.support.sim_helpers import one_workspace_config, running_sim, short_tmp_dir

from benchmarks.timing import interleaved, percentile
from herdr_mcp.herdr import HerdrClient
from herdr_mcp.sim import (
    AgentConfig,
    AgentScript,
    PaneConfig,
    ScriptStep,
)

TURN = AgentScript((ScriptStep(after_ms=20, state="working"), ScriptStep(after_ms=60, state="done")))


def _figures(label: str, samples: list[float]) -> str:
    return (
        f"{label}: p50 {percentile(samples, 0.5):.1f} ms, p95 {percentile(samples, 0.95):.1f} ms, "
        f"max {max(samples):.1f} ms ({len(samples)} rounds)"
    )


async def main(rounds: int) -> None:
    with short_tmp_dir() as base:
        async with running_sim(
            base,
            one_workspace_config(
                base, PaneConfig(label="shell"), PaneConfig(agent=AgentConfig("coder", "claude", script=TURN))
            ),
        ) as (sim, _client):
            settled: list[float] = []
            agent = sim.world.panes["w1:p2"].agent  # the simulator's own state, stamped as it changes
            assert agent is not None

            def stamp(_pane: Any) -> None:
                if agent.status == "done":
                    settled.append(time.monotonic())

            agent.listeners.append(stamp)
            async with (
                in_process_runtime(sim.socket_path, base / "config") as runtime,
                runtime.client() as client,
            ):
                waits: list[float] = []
                for _ in range(rounds):
                    await asyncio.sleep(0.05)
                    # A turn of a random length, so the settle falls anywhere between the
                    # runtime's probes and Herdr's 100 ms subscription polls.
                    work_ms = random.randint(50, 450)
                    sim.set_script(
                        "coder",
                        AgentScript(
                            (
                                ScriptStep(after_ms=20, state="working"),
                                ScriptStep(after_ms=work_ms, state="done"),
                            )
                        ),
                    )
                    settled.clear()
                    answer = await call_tool(
                        client,
                        "herdr_prompt",
                        {"target": "coder", "text": "go", "wait": {"until": ["done"], "timeout_ms": 10000}},
                    )
                    returned = time.monotonic()
                    if not answer.get("wait", {}).get("reached") or not settled:
                        raise SystemExit(f"a round did not settle: {answer}")
                    waits.append((returned - settled[0]) * 1000)

                direct = HerdrClient(sim.socket_path)

                async def socket_call() -> None:
                    await direct.call("pane.get", {"pane_id": "w1:p1"})

                async def passthrough() -> None:
                    await call_tool(
                        client, "herdr_call", {"method": "pane.get", "params": {"pane_id": "w1:p1"}}
                    )

                by_socket, by_call = await interleaved(
                    [socket_call, passthrough], count=rounds * 4, warmup=10
                )
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"load average: {load}")
    print(_figures("prompt wait, terminal state -> herdr_prompt answered", waits))
    socket_p50, call_p50 = percentile(by_socket, 0.5), percentile(by_call, 0.5)
    print(_figures("pane.get straight to the socket", by_socket))
    print(_figures("herdr_call pane.get through MCP", by_call))
    print(
        f"herdr_call / direct socket call: {call_p50 / socket_p50:.2f}x at p50 "
        f"(+{call_p50 - socket_p50:.2f} ms)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    asyncio.run(main(max(5, parser.parse_args().rounds)))
