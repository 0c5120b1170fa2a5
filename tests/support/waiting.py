"""Waiting on a condition, never on a fixed sleep: tests must hold on a loaded 2-core machine.

`wait_until(condition, what)` polls until `condition()` returns something truthy and returns it;
past the deadline it fails naming `what`. `wait_until_async` does the same inside an event loop,
`poll_until` with an async probe. The deadline is generous (a loaded machine is slow, a
broken one never gets there).

How often: every 10 ms at first, so a wait that passes at once costs little; then, as the wait
goes on, a twentieth of the time waited so far, at most 100 ms between polls (`pause`), so a
wait is late by at most 5 % of it (and 100 ms). A condition is often not free: a request to a
runtime, a SQLite read, a process started (`every`: the least time between two polls, for a
condition that starts a process). The suite runs on 2 busy cores: until 2026-12-08 every wait
polled every 10 ms however long it lasted, and test_major_update's wait for the major-apply
worker started v1's herdr-mcp back to back beside the install it waited for. Measured in clean
clones on one machine, two runs each: pytest 874-876 s before, 795 s after.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

#: Long enough for anything a test waits on under load; reached only when the condition is broken.
DEADLINE_S = 60.0
POLL_S = 0.01
#: The longest pause between two polls (`every` aside).
MAX_POLL_S = 0.1


def pause(waited_s: float, every: float = 0.0) -> float:
    """How long to sleep before the next poll, `waited_s` into a wait (see the module docs)."""
    return max(every, min(MAX_POLL_S, max(POLL_S, waited_s / 20)))


class _Wait:
    """One wait's clock: `next_pause()` is the sleep before the next poll, or fails naming
    `what` once `timeout` has passed."""

    def __init__(self, what: str, timeout: float, every: float = 0.0) -> None:
        self.what, self.timeout, self.every = what, timeout, every
        self.started = time.monotonic()

    def next_pause(self) -> float:
        waited = time.monotonic() - self.started
        if waited > self.timeout:
            raise AssertionError(f"timed out after {self.timeout:g} s waiting for {self.what}")
        return pause(waited, self.every)


def wait_until(
    condition: Callable[[], T | None], what: str, timeout: float = DEADLINE_S, *, every: float = 0.0
) -> T:
    """Poll `condition` until it returns a truthy value and return that value; fail after `timeout`."""
    wait = _Wait(what, timeout, every)
    while not (value := condition()):
        time.sleep(wait.next_pause())
    return value


async def wait_until_async(condition: Callable[[], T | None], what: str, timeout: float = DEADLINE_S) -> T:
    """`wait_until` inside an event loop: the loop keeps running between polls."""
    wait = _Wait(what, timeout)
    while not (value := condition()):
        await asyncio.sleep(wait.next_pause())
    return value


async def poll_until(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = DEADLINE_S) -> T:
    """Await `probe()` (a call to the system under test, say) until it gives a truthy value;
    return that value; fail after `timeout`."""
    wait = _Wait(what, timeout)
    while not (value := await probe()):
        await asyncio.sleep(wait.next_pause())
    return value
