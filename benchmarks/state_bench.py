"""State figures from one run, each next to a peer measured in the same run.

1. herdr_exec with an idempotency key (recorded in the ledger before acting, result stored)
   against plain herdr_exec of the same command, interleaved. Target ratio <= 1.2.
2. Inbox latency: from the simulator's settle event to the inbox row the runtime writes (its
   `created_at`). The settle's time is when an independent subscriber in this process received
   the same event (the simulator sends it to every subscriber at once), so figures near zero,
   even slightly negative, mean the row was committed within the event's own delivery jitter.
   Target p95 under 250 ms.

Run from the repository root with the project installed: `python benchmarks/state_bench.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.runtime_harness import RunningRuntime, make_repo, running_runtime

from herdr_mcp.herdr import HerdrClient
from herdr_mcp.sim import AgentScript, ScriptStep, SimConfig, SimulatorThread


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def exec_overhead(runtime: RunningRuntime, calls: int) -> None:
    plain = {"workspace": "w1", "command": "echo ok", "intent": "idempotent_write"}
    keyed: list[float] = []
    unkeyed: list[float] = []
    async with runtime.client() as client:
        for index in range(calls + 3):
            for bucket, arguments in (
                (unkeyed, plain),
                (keyed, {**plain, "intent": "non_idempotent_write", "idempotency_key": str(uuid.uuid4())}),
            ):
                start = time.perf_counter()
                result = await client.call_tool("herdr_exec", arguments)
                elapsed = (time.perf_counter() - start) * 1000
                if result.is_error:
                    raise RuntimeError(result.structured_content)
                if index >= 3:  # warm-up
                    bucket.append(elapsed)
    ratio = statistics.median(keyed) / statistics.median(unkeyed)
    print(f"\n== herdr_exec 'echo ok' ({calls} calls each, interleaved, ms)")
    print(f"{'call':<28}{'p50':>9}{'p95':>9}")
    print(f"{'plain (no key)':<28}{statistics.median(unkeyed):>9.1f}{_p(unkeyed, 0.95):>9.1f}")
    print(f"{'idempotent (ledger)':<28}{statistics.median(keyed):>9.1f}{_p(keyed, 0.95):>9.1f}")
    print(f"ratio idempotent / plain    {ratio:>9.2f}")


async def inbox_latency(runtime: RunningRuntime, herdr_socket: Path, pane: str, prompts: int) -> None:
    database = sqlite3.connect(f"file:{runtime.config_dir / 'state.db'}?mode=ro", uri=True)
    settles: list[float] = []
    subscription = [{"type": "pane.agent_status_changed", "pane_id": pane}]
    latencies: list[float] = []
    async with HerdrClient(herdr_socket).subscribe(subscription) as stream:

        async def watch() -> None:
            async for event in stream:
                if event.data.get("agent_status") == "done":
                    settles.append(time.time() * 1000)

        watcher = asyncio.create_task(watch())
        try:
            for _ in range(prompts):
                answer = await runtime.call("herdr_prompt", {"target": "repo-agent", "text": "go"})
                row = None
                deadline = time.monotonic() + 10
                while row is None and time.monotonic() < deadline:
                    row = database.execute(
                        "SELECT created_at FROM inbox WHERE task_id = ?", (answer["task_id"],)
                    ).fetchone()
                    await asyncio.sleep(0.002)
                if row is None or not settles:
                    raise RuntimeError("no inbox row or no settle event within 10 s")
                latencies.append(row[0] - settles[-1])
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            database.close()
    print(f"\n== inbox latency: settle event -> inbox row ({prompts} prompts, ms)")
    print(
        f"p50 {statistics.median(latencies):.1f}   p95 {_p(latencies, 0.95):.1f}   max {max(latencies):.1f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--prompts", type=int, default=40)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hm-sbench-", dir="/tmp"))
    try:
        repo = make_repo(tmp / "repo", {"a.txt": b"a\n"})
        script = AgentScript(
            (ScriptStep(after_ms=20, state="working"), ScriptStep(after_ms=50, state="done"))
        )
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock") as sim,
            running_runtime(tmp / "herdr.sock", tmp / "config") as runtime,
        ):
            sim.set_script("repo-agent", script)
            pane = next(a for a in sim.snapshot()["agents"] if a["name"] == "repo-agent")["pane_id"]
            asyncio.run(exec_overhead(runtime, args.calls))
            asyncio.run(inbox_latency(runtime, tmp / "herdr.sock", pane, args.prompts))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
