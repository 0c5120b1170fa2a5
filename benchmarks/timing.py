"""What the benchmarks share for timing: interleaved rounds and percentiles."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any


async def interleaved(
    calls: list[Callable[[], Awaitable[Any]]], count: int, warmup: int
) -> list[list[float]]:
    """Time the calls in turn, round after round, so drift in machine load hits all alike (ms)."""
    for _ in range(warmup):
        for call in calls:
            await call()
    samples: list[list[float]] = [[] for _ in calls]
    for _ in range(count):
        for call, bucket in zip(calls, samples, strict=True):
            start = time.perf_counter()
            await call()
            bucket.append((time.perf_counter() - start) * 1000)
    return samples


def percentile(samples: list[float], q: float) -> float:
    """The `q` quantile of `samples` (nearest rank)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
