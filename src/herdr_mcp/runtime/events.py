"""The runtime's own event feed: Herdr events numbered with cursors for herdr_since.

A background task keeps Herdr subscriptions open (reconnecting with backoff when Herdr goes
away) and appends every event to the durable `EventLog` in `state.db`, whose sequence numbers
are the cursors: they only grow and keep their meaning across runtime restarts. Each event is
also handed to the listener (topology invalidation, the task tracker).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from herdr_mcp.herdr import HerdrClient, HerdrError, HerdrUnavailable
from herdr_mcp.herdr.methods import AGENT_STATUS_SUBSCRIPTION, LIFECYCLE_SUBSCRIPTIONS
from herdr_mcp.state.event_log import EventLog

_log = logging.getLogger(__name__)

_RECONNECT_DELAYS = (0.2, 0.5, 1.0, 2.0, 5.0)


@dataclass(frozen=True)
class FeedEvent:
    seq: int
    name: str
    data: dict[str, Any]
    at: float

    @property
    def workspace_id(self) -> str | None:
        return workspace_of(self.data)


def workspace_of(data: dict[str, Any]) -> str | None:
    """The workspace an event concerns, from its data or the object it carries."""
    nested = [value for value in data.values() if isinstance(value, dict)]
    for source in (data, *nested):
        value = source.get("workspace_id")
        if isinstance(value, str):
            return value
        pane = source.get("pane_id")
        if isinstance(pane, str) and ":" in pane:
            return pane.split(":", 1)[0]
    return None


class EventFeed:
    """Herdr events, numbered durably in `log`, filled by `run()`."""

    def __init__(
        self, herdr: HerdrClient, log: EventLog, *, on_event: Callable[[FeedEvent], None] | None = None
    ) -> None:
        self._herdr = herdr
        self._log = log
        self._on_event = on_event
        self.connected = False
        self.last_error: str | None = None
        self._attempt = 0  # reconnects since the feed last connected (sets the backoff)

    @property
    def last_seq(self) -> int:
        return self._log.last_seq()

    def record(self, name: str, data: dict[str, Any]) -> FeedEvent:
        at = time.time()
        seq = self._log.append(name, workspace_of(data), data, at)
        event = FeedEvent(seq=seq, name=name, data=data, at=at)
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:  # a listener's failure must not stop the feed
                _log.exception("event listener failed on %s", name)
        return event

    def since(self, cursor: int, *, workspace: str | None, limit: int) -> dict[str, Any]:
        """Events with seq > cursor (oldest first), the cursor to pass next, and gap facts."""
        answer = self._log.since(cursor, workspace=workspace, limit=limit)
        answer["feed_connected"] = self.connected
        return answer

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
            _log.debug("agent status stream for %s ended: %s", pane_ids, exc)
