"""Fan-out of push events to the open `/push/events` streams of this runtime.

Durable events (agent_working, agent_settled, agent_gone) are read back from state.db, not
handed over in memory: `run()` tails the event log (`AgentStates.read`) from the newest `seq` it
published, when poked (a transition was just recorded here) and every `tail_interval` seconds
(one may have been recorded by the other generation's runtime, which shares state.db). So every
stream of every runtime sees every transition, whichever runtime recorded it. `agent_output` is
not kept; it is published directly by the runtime that read it.

Back-pressure: each subscriber has a queue of at most `queue_size` events. A subscriber that
falls that far behind (its client reads too slowly) is not given more: its queue is dropped and
replaced by one `End("overflow")`, and its stream ends; the client resumes with `?after=<seq>`
and the durable events it missed are replayed. Memory per subscriber stays bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from dataclasses import dataclass
from typing import Any

from herdr_mcp.runtime.push.settings import QUEUE_SIZE, TAIL_INTERVAL_S
from herdr_mcp.state.push import AgentStates, PushEvent

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class End:
    """The stream ends: `overflow` (the client fell behind) or `shutdown` (the runtime stops)."""

    reason: str


class Subscriber:
    """One open stream: its queue, and `start`, the newest durable `seq` published before it
    subscribed (durable events after it arrive through the queue)."""

    def __init__(self, start: int, queue_size: int) -> None:
        self.start = start
        self.queue: asyncio.Queue[PushEvent | End] = asyncio.Queue(queue_size + 1)
        self._limit = queue_size
        self.ended = False

    def offer(self, event: PushEvent | End) -> None:
        if self.ended:
            return
        if isinstance(event, End) or self.queue.qsize() >= self._limit:
            self.ended = True
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(event if isinstance(event, End) else End("overflow"))
            return
        self.queue.put_nowait(event)


class PushHub:
    def __init__(
        self, states: AgentStates, *, tail_interval: float = TAIL_INTERVAL_S, queue_size: int = QUEUE_SIZE
    ) -> None:
        self._states = states
        self._tail_interval = tail_interval
        self._queue_size = queue_size
        self._subscribers: set[Subscriber] = set()
        self._wake = asyncio.Event()
        self._closed = False
        #: The newest durable seq published to subscribers (the log's newest at start-up).
        self.cursor = states.last_seq()
        #: Streams subscribed since start-up (read-only, /health `push.opened`).
        self.opened = 0

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    @property
    def subscribers(self) -> tuple[Subscriber, ...]:
        return tuple(self._subscribers)

    def subscribe(self) -> Subscriber:
        """A new subscriber; durable events after `subscriber.start` will reach its queue."""
        subscriber = Subscriber(self.cursor, self._queue_size)
        self.opened += 1
        if self._closed:
            subscriber.offer(End("shutdown"))
        else:
            self._subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)

    def publish_output(self, data: dict[str, Any]) -> None:
        """An `agent_output` event (not kept): its `seq` is the newest durable one published."""
        event = PushEvent(self.cursor, "agent_output", {"seq": self.cursor, **data})
        for subscriber in list(self._subscribers):
            subscriber.offer(event)

    def poke(self) -> None:
        """Read the log now (a transition was just recorded)."""
        self._wake.set()

    def close(self) -> None:
        """End every stream (`shutdown`); later subscribers end at once."""
        self._closed = True
        for subscriber in list(self._subscribers):
            subscriber.offer(End("shutdown"))
        self._subscribers.clear()

    def tail(self) -> int:
        """Publish the durable events recorded since `cursor`; how many."""
        published = 0
        while True:
            replay = self._states.read(self.cursor)
            for event in replay.events:
                for subscriber in list(self._subscribers):
                    subscriber.offer(event)
            published += len(replay.events)
            moved = replay.upto != self.cursor
            self.cursor = max(self.cursor, replay.upto)
            if not moved or not replay.events:
                return published

    async def run(self) -> None:
        """Tail the log until cancelled (module docstring)."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._tail_interval):
                    await self._wake.wait()
            self._wake.clear()
            try:
                self.tail()
            except sqlite3.Error:
                log.warning("cannot read push events from state.db", exc_info=True)
