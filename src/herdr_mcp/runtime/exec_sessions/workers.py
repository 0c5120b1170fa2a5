"""A few threads that take blocking work off the event loop: spawning shells (a spawn waits for
its child's exec, most of its time on a busy machine) and looking at `/proc`.

Lighter than `loop.run_in_executor` on a `ThreadPoolExecutor`, which a herdr_exec used twice:
no `concurrent.futures.Future` (a condition and its locks per job), no future chained to the
loop's, no semaphore per submit. A job is a function, its arguments and `done(result, error)`,
which is called on the job's event loop when the function has returned or raised (whether or
not anybody still waits for it, so what a job started is never dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Workers"]

Done = Callable[[Any, BaseException | None], None]
_Job = tuple[asyncio.AbstractEventLoop, Callable[..., Any], tuple[Any, ...], Done]


class Workers:
    """`count` daemon threads, started at the first job, stopped by `stop`."""

    def __init__(self, count: int, name: str) -> None:
        self._count = count
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def submit(
        self,
        loop: asyncio.AbstractEventLoop,
        function: Callable[..., Any],
        arguments: tuple[Any, ...],
        done: Done,
    ) -> None:
        """Run `function(*arguments)` in a thread; then `done(result, None)` or `done(None,
        error)` on `loop` (not at all if that loop is closed by then)."""
        if not self._threads:
            for index in range(self._count):
                thread = threading.Thread(target=self._work, name=f"{self._name}-{index}", daemon=True)
                thread.start()
                self._threads.append(thread)
        self._jobs.put((loop, function, arguments, done))

    def backlog(self) -> bool:
        """Whether jobs wait for a thread (any thread may ask)."""
        return not self._jobs.empty()

    def stop(self) -> None:
        """Let every thread end once the jobs queued before are done."""
        for _ in self._threads:
            self._jobs.put(None)
        self._threads = []

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, function, arguments, done = job
            try:
                result = function(*arguments)
            except BaseException as exc:  # handed to `done`, on the loop
                outcome: tuple[Any, BaseException | None] = (None, exc)
            else:
                outcome = (result, None)
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is listening
                loop.call_soon_threadsafe(done, *outcome)
            del job, outcome
