"""The runtime's own event feed: Herdr events numbered with cursors for herdr_since.

A background task keeps Herdr subscriptions open (reconnecting with backoff when Herdr goes
away) and appends every event to the durable `EventLog` in `state.db`, whose sequence numbers
are the cursors: they only grow and keep their meaning across runtime restarts. Each event is
also handed to the listener (topology invalidation, the task tracker).

No Herdr event is recorded twice:
- Herdr 0.8.2 (protocol 20) replays its retained lifecycle history to every new subscriber;
  `runtime.replay` recognises the replayed part of each reconnect against what was recorded from
  the same Herdr server (its socket's identity, kept in each `feed_connected` event) and drops it,
  for the log and the listeners alike. Protocol 22 sends live events only.
- Two runtime generations run side by side after an activation and follow the same Herdr; only
  the holder of the `events` lease (state/leases.py) appends to the log. The other still hands
  every event to its own listeners (its tasks and topology need them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herdr_mcp.herdr import HerdrClient, HerdrError, HerdrEvent, HerdrRemoteError
from herdr_mcp.herdr.reference import SUPPORTED_PROTOCOLS, nearest
from herdr_mcp.runtime.replay import HUB_RETAINED_EVENTS, KindAligner, fingerprint
from herdr_mcp.state.event_log import EventLog
from herdr_mcp.state.leases import Lease

_log = logging.getLogger(__name__)

_RECONNECT_DELAYS = (0.2, 0.5, 1.0, 2.0, 5.0)
#: Herdr filters agent status events by pane (one `pane_id` per entry).
AGENT_STATUS_SUBSCRIPTION = "pane.agent_status_changed"
#: The `events` lease: renewed this often while held, lost when not renewed for the TTL.
LEASE_NAME = "events"
LEASE_RENEW_SECONDS = 2.0
LEASE_TTL_SECONDS = 10.0
#: How often held replay candidates are looked at while no event arrives.
_ALIGN_TICK_SECONDS = 0.5
#: `feed_connected` events looked back over to find the latest run of one Herdr server.
_EPOCH_SCAN = 1000


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


def socket_identity(path: Path) -> str | None:
    """Which Herdr server owns the socket: a restarted server makes a new socket file."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return f"{info.st_dev}:{info.st_ino}:{info.st_ctime_ns}"


def replays_lifecycle(protocol: int) -> bool:
    """Whether a Herdr speaking `protocol` replays retained lifecycle events to a new subscriber
    (the reference of its protocol, or of the nearest lower one): protocol 20 does
    (src/api/subscriptions.rs at 0.8.2), 22 sends live events only."""
    return nearest(protocol)[0].lifecycle_replay


def lifecycle_types(protocol: int) -> list[str]:
    """The lifecycle subscription types of `protocol` (the filtered ones, which need a pane, left
    out): subscribing to a type the server does not know would fail the whole request."""
    reference = nearest(protocol)[0]
    events = set(reference.lifecycle_events)
    return [
        kind
        for kind in reference.subscription_types
        if kind.replace(".", "_") in events and kind != AGENT_STATUS_SUBSCRIPTION
    ]


class EventFeed:
    """Herdr events, numbered durably in `log`, filled by `run()`."""

    def __init__(
        self,
        herdr: HerdrClient,
        log: EventLog,
        *,
        on_event: Callable[[FeedEvent], None] | None = None,
        lease: Lease | None = None,
        owner: str = "",
        replays: Callable[[int], bool] = replays_lifecycle,
        kinds_of: Callable[[int], Sequence[str]] = lifecycle_types,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._herdr = herdr
        self._log = log
        self._on_event = on_event
        self._lease = lease
        self._owner = owner
        self._replays = replays
        self._kinds_of = kinds_of
        self._clock = clock
        self._lease_checked = -LEASE_RENEW_SECONDS
        self._leading = lease is None
        self.connected = False
        self.last_error: str | None = None
        #: What the connected Herdr said in `ping` (None before the first connection).
        self.herdr_version: str | None = None
        self.herdr_protocol: int | None = None
        #: Replayed lifecycle events recognised and dropped so far.
        self.replayed_skipped = 0
        #: Panes whose agent-status subscription Herdr has taken (a status change before that
        #: reaches the feed only through the topology's polls).
        self.status_followed: set[str] = set()
        self._attempt = 0  # reconnects since the feed last connected (sets the backoff)

    @property
    def last_seq(self) -> int:
        return self._log.last_seq()

    @property
    def recording(self) -> bool:
        """Whether this runtime appends to the log (holds the `events` lease)."""
        if self._lease is None:
            return True
        now = self._clock()
        if now - self._lease_checked >= LEASE_RENEW_SECONDS:
            self._lease_checked = now
            try:
                self._leading = self._lease.hold(self._owner, LEASE_TTL_SECONDS)
            except sqlite3.Error:
                _log.warning("cannot take the events lease", exc_info=True)
                self._leading = False
        return self._leading

    def record(self, name: str, data: dict[str, Any]) -> FeedEvent:
        """Append one event to the log (when this runtime records) and hand it to the listener."""
        at = time.time()
        seq = self._log.append(name, workspace_of(data), data, at) if self.recording else 0
        event = FeedEvent(seq=seq, name=name, data=data, at=at)
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:  # a listener's failure must not stop the feed
                _log.exception("event listener failed on %s", name)
        return event

    def release(self) -> None:
        """Give the `events` lease back (on the way out)."""
        if self._lease is not None and self._leading:
            with contextlib.suppress(sqlite3.Error):
                self._lease.release(self._owner)
            self._leading = False

    def since(self, cursor: int, *, workspace: str | None, limit: int) -> dict[str, Any]:
        """Events with seq > cursor (oldest first), the cursor to pass next, and gap facts."""
        answer = self._log.since(cursor, workspace=workspace, limit=limit)
        answer["feed_connected"] = self.connected
        return answer

    async def run(self) -> None:
        """Follow Herdr until cancelled; never raises for Herdr being away."""
        try:
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
        finally:
            self.release()

    async def _follow(self) -> None:
        """One lifecycle subscription, plus agent-status subscriptions for every pane.

        Herdr filters `pane.agent_status_changed` by pane, so the panes that exist once the
        lifecycle stream is open get one status subscription, and each `pane_created` opens one
        more for the new pane; the lifecycle stream itself is never interrupted. A pane listed
        and also announced is followed once.
        """
        pong = await self._herdr.call("ping", {})
        protocol = pong.get("protocol")
        version = pong.get("version")
        self.herdr_protocol = (
            protocol if isinstance(protocol, int) and not isinstance(protocol, bool) else None
        )
        self.herdr_version = version if isinstance(version, str) else None
        identity = socket_identity(self._herdr.socket_path)
        # The protocol's reference is read and built once a process (~300 KB of JSON parsed,
        # bounded and copied: 70 ms on this 2-core machine under load) in a worker thread, not on
        # the event loop, which is answering a runtime's first requests when the feed connects.
        await asyncio.to_thread(nearest, self.herdr_protocol or max(SUPPORTED_PROTOCOLS))
        replay = self.herdr_protocol is not None and self._replays(self.herdr_protocol)
        kinds = list(self._kinds_of(self.herdr_protocol or max(SUPPORTED_PROTOCOLS)))
        aligners = self._aligners(kinds, identity) if replay else {}
        followed: set[str] = set()
        status_tasks: set[asyncio.Task[None]] = set()

        def follow(pane_ids: list[str]) -> None:
            fresh = [pane for pane in pane_ids if pane not in followed]
            if fresh:
                followed.update(fresh)
                task = asyncio.create_task(self._follow_status(fresh), name="herdr-agent-status")
                status_tasks.add(task)
                task.add_done_callback(status_tasks.discard)

        def take(event: HerdrEvent) -> None:
            self.record(event.name, dict(event.data))
            pane = event.data.get("pane")
            if event.name == "pane_created" and isinstance(pane, dict) and "pane_id" in pane:
                follow([str(pane["pane_id"])])

        lifecycle = [{"type": name} for name in kinds]
        try:
            async with self._herdr.subscribe(lifecycle) as stream:
                panes = await self._herdr.call("pane.list", {})
                listed = panes.get("panes", [])
                follow([p["pane_id"] for p in listed if isinstance(p, dict) and "pane_id" in p])
                if not self.connected:
                    self.connected, self.last_error = True, None
                    connected: dict[str, Any] = {
                        "herdr": {"version": self.herdr_version, "protocol": protocol}
                    }
                    if identity is not None:
                        connected["socket"] = identity
                    self.record("feed_connected", connected)
                self._attempt = 0
                events = aiter(stream)
                # Aligners still deciding; once none is, events are read without a timeout.
                pending = {name: aligner for name, aligner in aligners.items() if not aligner.done}
                while True:
                    if not pending:
                        take(await anext(events))
                        continue
                    try:
                        event = await asyncio.wait_for(anext(events), timeout=_ALIGN_TICK_SECONDS)
                    except TimeoutError:
                        for waiting in pending.values():
                            for held in waiting.flush_if_stale():
                                take(held)
                    else:
                        aligner = pending.get(event.name)
                        if aligner is None:
                            take(event)
                        else:
                            for fresh in aligner.push(fingerprint(event.name, event.data), event):
                                take(fresh)
                    pending = {name: aligner for name, aligner in pending.items() if not aligner.done}
                    self.replayed_skipped = sum(a.skipped for a in aligners.values())
        finally:
            for task in status_tasks:
                task.cancel()
            await asyncio.gather(*status_tasks, return_exceptions=True)

    def _aligners(self, kinds: list[str], identity: str | None) -> dict[str, KindAligner[HerdrEvent]]:
        """One aligner per lifecycle event kind, holding what was recorded of that kind from this
        same Herdr server (since the first `feed_connected` of the latest run with its socket)."""
        since = self._epoch_start(identity)
        aligners: dict[str, KindAligner[HerdrEvent]] = {}
        for kind in kinds:
            name = kind.replace(".", "_")
            tail = [] if since is None else self._log.recent(name, limit=HUB_RETAINED_EVENTS, after=since)
            aligners[name] = KindAligner([fingerprint(name, data) for _seq, data in tail], clock=self._clock)
        return aligners

    def _epoch_start(self, identity: str | None) -> int | None:
        """The seq of the first `feed_connected` of the latest run of connections to the server
        with `identity`, or None when the last connection recorded was to another server."""
        if identity is None:
            return None
        start: int | None = None
        for seq, data in reversed(self._log.recent("feed_connected", limit=_EPOCH_SCAN)):
            if data.get("socket") != identity:
                break
            start = seq
        return start

    async def _follow_status(self, pane_ids: list[str]) -> None:
        """One status subscription for these panes. Herdr refuses the whole request when one of
        them is gone (its probe fails, and the error names its index): that pane is left out and
        the rest subscribed again, so one pane closing costs the others nothing."""
        panes = list(pane_ids)
        while panes:
            subscriptions = [{"type": AGENT_STATUS_SUBSCRIPTION, "pane_id": pane} for pane in panes]
            try:
                async with self._herdr.subscribe(subscriptions) as stream:
                    self.status_followed.update(panes)
                    try:
                        async for event in stream:
                            self.record(event.name, dict(event.data))
                    finally:
                        self.status_followed.difference_update(panes)
                return
            except HerdrRemoteError as exc:
                index = exc.subscription_index
                if exc.code != "pane_not_found" or index is None or not 0 <= index < len(panes):
                    _log.debug("agent status stream for %s refused: %s", panes, exc)
                    return
                del panes[index]
            except (HerdrError, OSError, ValueError) as exc:
                # Anything else is covered by the lifecycle stream's pane_updated events and the
                # polls, so this is worth a log line, not a reconnect.
                _log.debug("agent status stream for %s ended: %s", panes, exc)
                return
