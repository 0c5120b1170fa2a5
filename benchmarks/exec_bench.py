"""herdr_exec figures from one run, next to a shell spawned directly in the same run.

herdr_exec of `echo ok` through a real runtime (`herdr-mcp serve`, Streamable HTTP on loopback,
the `mcp` SDK's client) against `bash -c 'echo ok'` spawned directly from Python with
`subprocess` (both pipes captured, as the runtime does), interleaved so that drift in machine
load hits both alike. `bash -lc 'echo ok'` (what every call cost before the login environment was
captured once) is printed for reference, timed after the others: interleaved, its ~100 ms of
profile work slows whatever runs next. Target: herdr_exec p50 <= 15 ms.

Run from the repository root with the project installed: `python benchmarks/exec_bench.py`
(`--calls` to change the count). Prints a table; exits 0 (figures, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.runtime_harness import RunningRuntime, make_repo, running_runtime

from herdr_mcp.sim import SimConfig, SimulatorThread

_WARMUP = 5


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _direct(argv: list[str]) -> None:
    completed = subprocess.run(argv, capture_output=True, check=True)
    if completed.stdout != b"ok\n":
        raise RuntimeError(f"{argv} printed {completed.stdout!r}")


async def _interleaved(calls: list[Callable[[], Awaitable[None]]], count: int) -> list[list[float]]:
    """Time the calls in turn, round after round, after a few rounds of warm-up."""
    samples: list[list[float]] = [[] for _ in calls]
    for index in range(count + _WARMUP):
        for call, bucket in zip(calls, samples, strict=True):
            start = time.perf_counter()
            await call()
            if index >= _WARMUP:
                bucket.append((time.perf_counter() - start) * 1000)
    return samples


async def measure(runtime: RunningRuntime, calls: int) -> None:
    bash = shutil.which("bash")
    if bash is None:
        raise RuntimeError("bash is needed")
    async with runtime.client() as client:

        async def herdr_exec() -> None:
            result = await client.call_tool("herdr_exec", {"workspace": "w1", "command": "echo ok"})
            structured: Any = result.structured_content
            if result.is_error or structured["stdout"] != "ok\n":
                raise RuntimeError(f"herdr_exec failed: {structured}")

        async def direct() -> None:
            _direct([bash, "-c", "echo ok"])

        async def login() -> None:
            _direct([bash, "-lc", "echo ok"])

        exec_samples, direct_samples = await _interleaved([herdr_exec, direct], calls)
        (login_samples,) = await _interleaved([login], max(5, calls // 5))
    print(f"\n== herdr_exec 'echo ok' ({calls} calls each, interleaved; bash -lc after, ms)")
    print(f"{'call':<44}{'p50':>9}{'p95':>9}")
    for name, bucket in (
        ("herdr_exec via MCP (runtime)", exec_samples),
        ("bash -c 'echo ok' from Python (peer)", direct_samples),
        ("bash -lc 'echo ok' from Python (reference)", login_samples),
    ):
        print(f"{name:<44}{statistics.median(bucket):>9.2f}{_p(bucket, 0.95):>9.2f}")
    ratio = statistics.median(exec_samples) / statistics.median(direct_samples)
    print(f"ratio herdr_exec / bash -c (p50)            {ratio:>9.2f}")
    print(f"herdr_exec p50 target <= 15 ms              {statistics.median(exec_samples):>9.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hm-ebench-", dir="/tmp"))
    try:
        repo = make_repo(tmp / "repo", {"a.txt": b"a\n"})
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"),
            running_runtime(tmp / "herdr.sock", tmp / "config") as runtime,
        ):
            asyncio.run(measure(runtime, args.calls))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
