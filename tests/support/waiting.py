"""Waiting on a condition, never on a fixed sleep: tests must hold on a loaded 2-core machine.

`wait_until(condition, what)` polls until `condition()` returns something truthy and returns it;
past the deadline it fails naming `what`. `wait_until_async` does the same inside an event loop,
`poll_until` with an async probe. The deadline is generous (a loaded machine is slow, a
broken one never gets there); the poll interval is short, so a passing wait costs little.
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


def wait_until(condition: Callable[[], T | None], what: str, timeout: float = DEADLINE_S) -> T:
    """Poll `condition` until it returns a truthy value and return that value; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL_S)
    return value


async def wait_until_async(condition: Callable[[], T | None], what: str, timeout: float = DEADLINE_S) -> T:
    """`wait_until` inside an event loop: the loop keeps running between polls."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(POLL_S)
    return value


async def poll_until(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = DEADLINE_S) -> T:
    """Await `probe()` (a call to the system under test, say) until it gives a truthy value;
    return that value; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while not (value := await probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(POLL_S)
    return value
