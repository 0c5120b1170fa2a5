"""The runtime's own event feed: Herdr events numbered with cursors for herdr_since.

A background task keeps Herdr subscriptions open (reconnecting with backoff when Herdr goes
away), numbers every event with a runtime sequence number and keeps the last `capacity` of
them. Each event also invalidates the cached topology.

Cursors are plain integers that only grow, also across runtime restarts: the first number of a
process is its start time in milliseconds times 1000, so a cursor handed out by an earlier
process (which numbered fewer than 1000 events per millisecond it lived) is below the current
window and is answered with `gap: true` instead of being silently misread. Durable cursors that
replay history across restarts come with the state store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from herdr_mcp.herdr import HerdrClient, HerdrError, HerdrUnavailable
from herdr_mcp.herdr.methods import AGENT_STATUS_SUBSCRIPTION, LIFECYCLE_SUBSCRIPTIONS

log = logging.getLogger(__name__)

#: Events kept in memory for herdr_since; older cursors get `gap: true`.
DEFAULT_CAPACITY = 10_000
_RECONNECT_DELAYS = (0.2, 0.5, 1.0, 2.0, 5.0)


@dataclass(frozen=True)
class FeedEvent:
    seq: int
    name: str
    data: dict[str, Any]
    at: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "event": self.name,
            "data": self.data,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at)),
        }

    @property
    def workspace_id(self) -> str | None:
        """The workspace the event concerns, from its data or the object it carries."""
        nested = [value for value in self.data.values() if isinstance(value, dict)]
        for source in (self.data, *nested):
            value = source.get("workspace_id")
            if isinstance(value, str):
                return value
            pane = source.get("pane_id")
            if isinstance(pane, str) and ":" in pane:
                return pane.split(":", 1)[0]
        return None


class EventFeed:
    """Numbered Herdr events in a bounded window, filled by `run()`."""

    def __init__(
        self,
        herdr: HerdrClient,
        *,
        on_event: Callable[[FeedEvent], None] | None = None,
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        self._herdr = herdr
        self._on_event = on_event
        self._events: deque[FeedEvent] = deque(maxlen=capacity)
        self.first_seq = int(time.time() * 1000) * 1000
        self._next_seq = self.first_seq
        self.connected = False
        self.last_error: str | None = None
        self._attempt = 0  # reconnects since the feed last connected (sets the backoff)

    @property
    def last_seq(self) -> int:
        return self._next_seq - 1

    def record(self, name: str, data: dict[str, Any]) -> FeedEvent:
        event = FeedEvent(seq=self._next_seq, name=name, data=data, at=time.time())
        self._next_seq += 1
        self._events.append(event)
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:  # a listener's failure must not stop the feed
                log.exception("event listener failed on %s", name)
        return event

    def since(self, cursor: int, *, workspace: str | None, limit: int) -> dict[str, Any]:
        """Events with seq > cursor (oldest first), the cursor to pass next, and gap facts."""
        oldest = self._events[0].seq if self._events else self._next_seq
        gap = cursor < oldest - 1 and cursor != 0
        selected: list[FeedEvent] = []
        more = False
        for event in self._events:
            if event.seq <= cursor or (workspace is not None and event.workspace_id != workspace):
                continue
            if len(selected) == limit:
                more = True
                break
            selected.append(event)
        next_cursor = selected[-1].seq if more else max(cursor, self.last_seq)
        return {
            "events": [event.to_dict() for event in selected],
            "next_cursor": next_cursor,
            "more": more,
            "gap": gap,
            "feed_connected": self.connected,
        }

    async def run(self) -> None:
        """Follow Herdr until cancelled; never raises for Herdr being away."""
        while True:
            try:
                await self._follow()
            except HerdrError as exc:
                self.last_error = exc.code
            except (OSError, ValueError) as exc:  # a connection torn mid-line
                self.last_error = type(exc).__name__
            if self.connected:
                self.connected = False
                self.record("feed_disconnected", {"reason": self.last_error or "stream_ended"})
            delay = _RECONNECT_DELAYS[min(self._attempt, len(_RECONNECT_DELAYS) - 1)]
            self._attempt += 1
            await asyncio.sleep(delay)

    async def _follow(self) -> None:
        """One lifecycle subscription, plus agent-status subscriptions for every pane.

        Herdr filters `pane.agent_status_changed` by pane, so the panes that exist once the
        lifecycle stream is open get one status subscription, and each `pane_created` opens one
        more for the new pane; the lifecycle stream itself is never interrupted. A pane listed
        and also announced is followed once.
        """
        followed: set[str] = set()
        status_tasks: set[asyncio.Task[None]] = set()

        def follow(pane_ids: list[str]) -> None:
            fresh = [pane for pane in pane_ids if pane not in followed]
            if fresh:
                followed.update(fresh)
                task = asyncio.create_task(self._follow_status(fresh), name="herdr-agent-status")
                status_tasks.add(task)
                task.add_done_callback(status_tasks.discard)

        lifecycle = [{"type": name} for name in LIFECYCLE_SUBSCRIPTIONS]
        try:
            async with self._herdr.subscribe(lifecycle) as stream:
                panes = await self._herdr.call("pane.list", {})
                listed = panes.get("panes", [])
                follow([p["pane_id"] for p in listed if isinstance(p, dict) and "pane_id" in p])
                if not self.connected:
                    self.connected, self.last_error = True, None
                    self.record("feed_connected", {})
                self._attempt = 0
                async for event in stream:
                    self.record(event.name, dict(event.data))
                    pane = event.data.get("pane")
                    if event.name == "pane_created" and isinstance(pane, dict) and "pane_id" in pane:
                        follow([str(pane["pane_id"])])
        finally:
            for task in status_tasks:
                task.cancel()
            await asyncio.gather(*status_tasks, return_exceptions=True)
        raise HerdrUnavailable("Herdr closed the event stream")

    async def _follow_status(self, pane_ids: list[str]) -> None:
        subscriptions = [{"type": AGENT_STATUS_SUBSCRIPTION, "pane_id": pane} for pane in pane_ids]
        try:
            async with self._herdr.subscribe(subscriptions) as stream:
                async for event in stream:
                    self.record(event.name, dict(event.data))
        except (HerdrError, OSError, ValueError) as exc:
            # Closed panes end their stream; anything else is covered by the lifecycle stream's
            # pane_updated events, so this is worth a log line, not a reconnect.
            log.debug("agent status stream for %s ended: %s", pane_ids, exc)
