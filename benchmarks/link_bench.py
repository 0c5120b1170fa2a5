"""The link's cost, from one run: added latency over calling the generation directly, and the
longest pause a request sees while the link's active generation switches.

1. tools/call latency (p50/p95) of a cheap tool (herdr_methods with a query matching nothing)
   sent directly to generation A and through the link to A, interleaved round by round.
   Target: link p50 / direct p50 <= 1.15.
2. A client calls through the link back to back while the active generation switches A -> B
   and back (each through the real activation gate, run as `herdr-mcp generation activate` /
   `rollback` processes); the longest call during the switches is printed next to the longest
   call of the same loop before them.

Run from the repository root with the project installed: `python benchmarks/link_bench.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp import Client
from tests.support.link_harness import generation_for, running_link
from tests.support.runtime_harness import two_runtimes

from herdr_mcp.generations import ControlFile, GenerationStore, Observation, activate

ARGUMENTS = {"query": "no-such-method"}


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _call(client: Client) -> float:
    start = time.perf_counter()
    result = await client.call_tool("herdr_methods", ARGUMENTS)
    if result.is_error:
        raise RuntimeError(result.structured_content)
    return (time.perf_counter() - start) * 1000


async def _latency(direct: Any, link: Any, calls: int) -> None:
    async with direct.client() as to_a, link.client() as via_link:
        for _ in range(30):
            await _call(to_a)
            await _call(via_link)
        direct_ms, link_ms = [], []
        for _ in range(calls):
            direct_ms.append(await _call(to_a))
            link_ms.append(await _call(via_link))
    ratio = statistics.median(link_ms) / statistics.median(direct_ms)
    print(f"\n== tools/call herdr_methods ({calls} calls each, interleaved, ms)")
    print(f"{'path':<22}{'p50':>9}{'p95':>9}")
    print(f"{'directly to A':<22}{statistics.median(direct_ms):>9.2f}{_p(direct_ms, 0.95):>9.2f}")
    print(f"{'through the link':<22}{statistics.median(link_ms):>9.2f}{_p(link_ms, 0.95):>9.2f}")
    print(f"ratio link / direct   {ratio:>9.2f}")


async def _pauses(link: Any, store: GenerationStore, switches: int) -> None:
    async with link.client() as via_link:
        before = [await _call(via_link) for _ in range(200)]
        done = threading.Event()

        def switch() -> None:
            # As in use: `herdr-mcp generation activate|rollback` run as their own processes (a
            # gate in this process would hold the GIL the measuring client needs).
            command = [sys.executable, "-m", "herdr_mcp", "generation", "--state-dir", str(store.state_dir)]
            try:
                for _ in range(switches):
                    for step in (["activate", "B"], ["rollback"]):
                        subprocess.run([*command, *step], check=True, capture_output=True, timeout=60)
            finally:
                done.set()

        thread = threading.Thread(target=switch)
        thread.start()
        during = []
        while not done.is_set():
            during.append(await _call(via_link))
        thread.join()
    print(f"\n== calls through the link while the active generation switched {2 * switches} times")
    print(f"longest call before the switches  {max(before):>8.2f} ms  (p50 {statistics.median(before):.2f})")
    print(f"longest call during the switches  {max(during):>8.2f} ms  ({len(during)} calls, none failed)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--switches", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hm-lbench-", dir="/tmp"))
    try:
        with two_runtimes(tmp) as (a, b):
            store = GenerationStore.in_dir(tmp / "generations")
            store.write_control(
                ControlFile(
                    generations=(generation_for("A", a), generation_for("B", b)),
                    observation=Observation(2, 50),
                ),
                expected_revision=0,
            )
            activate(store, "A")
            with running_link(store.state_dir, tmp / "link-token") as link:
                asyncio.run(_latency(a, link, args.calls))
                asyncio.run(_pauses(link, store, args.switches))
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
