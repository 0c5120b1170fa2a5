"""Turning Herdr's agent activity into push events (docs/browser-protocol.md, section 3).

`AgentWatcher` gets every Herdr event the runtime's feed records (`on_event`) and, every
`poll_interval` seconds, Herdr's list of agents. With them it does two jobs:

- Transitions (durable), only while this runtime holds the `push` lease (`state/push.py`: one of
  two generations records them). An agent status event is recorded at once through
  `AgentStates.observe`; a closed or exited pane through `gone`. The poll repairs what events
  missed (the runtime was down, a stream reconnected, the lease changed hands): an agent whose
  listed status differs from the recorded one is recorded, and a recorded agent that is no longer
  listed is gone; both only when two polls in a row agree, so a poll never races an event that
  is still on its way.
- Output (not kept), while this runtime holds the lease or has open streams: for every agent
  whose pane revision moved, its pane is read (`pane.read`, recent unwrapped lines) and compared
  with the previous read; new non-empty text of an agent that is working is published as
  `agent_output` (the newest 2,000 characters). The first read of a pane is only the baseline:
  text that was there before is never sent as new. Reading while no stream is open keeps the
  baselines fresh, so the first output after a stream opens is not lost to a late baseline; a
  runtime that neither leads nor serves a stream reads nothing and forgets its baselines.

Events and polls are handled by one task in arrival order. Herdr being away only pauses the
work; nothing here raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from typing import Any

from herdr_mcp.herdr import HerdrClient, HerdrError
from herdr_mcp.runtime.events import FeedEvent
from herdr_mcp.runtime.push.hub import PushHub
from herdr_mcp.runtime.push.output import MAX_OUTPUT_CHARS, clip, new_output
from herdr_mcp.runtime.push.settings import LEASE_TTL_S, POLL_INTERVAL_S
from herdr_mcp.state.event_log import iso_ms
from herdr_mcp.state.push import AgentStates, PushEvent

log = logging.getLogger(__name__)

#: Lines of a pane read to find its new output.
READ_LINES = 200
#: Herdr events waiting to be handled at most; past it they are dropped and the next poll
#: repairs what they would have recorded.
EVENT_BACKLOG = 10_000
_STATUS_EVENT = "pane.agent_status_changed"
_GONE_EVENTS = ("pane_closed", "pane_exited")


def _pane_of(data: dict[str, Any]) -> str | None:
    pane = data.get("pane_id")
    if isinstance(pane, str):
        return pane
    body = data.get("pane")
    if isinstance(body, dict) and isinstance(body.get("pane_id"), str):
        return str(body["pane_id"])
    return None


class AgentWatcher:
    def __init__(
        self,
        herdr: HerdrClient,
        states: AgentStates,
        hub: PushHub,
        owner: str,
        *,
        poll_interval: float = POLL_INTERVAL_S,
        lease_ttl: float = LEASE_TTL_S,
        output_chars: int = MAX_OUTPUT_CHARS,
    ) -> None:
        self._herdr = herdr
        self._states = states
        self._hub = hub
        self._owner = owner
        self._poll_interval = poll_interval
        self._lease_ttl = max(lease_ttl, 3 * poll_interval)
        self._output_chars = output_chars
        self._events: asyncio.Queue[FeedEvent] = asyncio.Queue(EVENT_BACKLOG)
        self._poll_now = asyncio.Event()
        self.leader = False
        #: Polls done so far (a test waits for the first before it makes output).
        self.polls = 0
        #: pane -> agent name, from the last agent list.
        self._names: dict[str, str] = {}
        #: pane -> status in the previous poll (a repair needs two polls that agree).
        self._previous_poll: dict[str, str] | None = None
        #: pane -> (revision, text) of the last read, while streams are open.
        self._reads: dict[str, tuple[object, str]] = {}

    # -- intake ----------------------------------------------------------------------------

    def on_event(self, event: FeedEvent) -> None:
        """Take one event from the runtime's feed (called on the event loop, never blocks)."""
        if event.name == "feed_connected":
            self._poll_now.set()
            return
        if event.name != _STATUS_EVENT and event.name not in _GONE_EVENTS:
            return
        try:
            self._events.put_nowait(event)
        except asyncio.QueueFull:
            self._poll_now.set()  # dropped: the poll repairs it

    async def run(self) -> None:
        """Handle events and poll until cancelled; gives the lease back on the way out."""
        try:
            await self._loop()
        finally:
            if self.leader:
                with contextlib.suppress(sqlite3.Error):
                    self._states.release_lease(self._owner)

    async def _loop(self) -> None:
        next_poll = time.monotonic()
        while True:
            if self._poll_now.is_set():
                self._poll_now.clear()
                next_poll = time.monotonic()
            wait = next_poll - time.monotonic()
            if wait > 0:
                event = await self._next_event(wait)
                if event is not None:
                    await self._handle(event)
                    continue
            next_poll = time.monotonic() + self._poll_interval
            await self._poll()

    async def _next_event(self, wait: float) -> FeedEvent | None:
        getter = asyncio.ensure_future(self._events.get())
        poke = asyncio.ensure_future(self._poll_now.wait())
        try:
            done, _ = await asyncio.wait({getter, poke}, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        finally:
            poke.cancel()
            if not getter.done():
                getter.cancel()
        if getter in done and not getter.cancelled():
            return getter.result()
        return None

    # -- transitions -----------------------------------------------------------------------

    async def _handle(self, event: FeedEvent) -> None:
        if not self.leader:
            return
        pane = _pane_of(event.data)
        if pane is None:
            return
        if event.name in _GONE_EVENTS:
            self._record(self._states.gone(pane, at=event.at))
            return
        status = event.data.get("agent_status")
        workspace = event.data.get("workspace_id") or (pane.split(":", 1)[0] if ":" in pane else None)
        if not isinstance(status, str) or not isinstance(workspace, str):
            return
        name = self._names.get(pane) or await self._name_of(pane, event.data)
        self._record(self._states.observe(pane, workspace, name, status, at=event.at))

    async def _name_of(self, pane: str, data: dict[str, Any]) -> str:
        try:
            found = await self._herdr.call("agent.get", {"target": pane})
        except HerdrError:
            found = {}
        agent = found.get("agent", found)
        name = agent.get("name") if isinstance(agent, dict) else None
        if isinstance(name, str) and name:
            self._names[pane] = name
            return name
        kind = data.get("agent")
        return kind if isinstance(kind, str) and kind else pane

    def _record(self, event: PushEvent | None) -> None:
        if event is not None:
            self._hub.poke()

    # -- polling ---------------------------------------------------------------------------

    async def _poll(self) -> None:
        try:
            self.leader = self._states.hold_lease(self._owner, self._lease_ttl)
        except sqlite3.Error:
            log.warning("cannot take the push lease", exc_info=True)
            self.leader = False
        if not self.leader and not self._hub.subscriber_count:
            self._previous_poll = None
            self._reads.clear()
            self.polls += 1
            return
        try:
            listed = await self._herdr.call("agent.list", {})
        except HerdrError as exc:
            log.debug("agent.list failed: %s", exc)
            return
        agents = [agent for agent in listed.get("agents", []) if isinstance(agent, dict)]
        current = {str(agent["pane_id"]): agent for agent in agents if isinstance(agent.get("pane_id"), str)}
        for pane, agent in current.items():
            if isinstance(agent.get("name"), str):
                self._names[pane] = agent["name"]
        if self.leader:
            self._repair(current)
        await self._read_output(current)
        self.polls += 1

    def _repair(self, current: dict[str, dict[str, Any]]) -> None:
        statuses = {pane: str(agent.get("agent_status")) for pane, agent in current.items()}
        previous, self._previous_poll = self._previous_poll, statuses
        if previous is None:
            return
        try:
            known = self._states.known()
            for pane, status in statuses.items():
                agent = current[pane]
                workspace = agent.get("workspace_id")
                if previous.get(pane) != status or not isinstance(workspace, str):
                    continue
                record = known.get(pane)
                if record is None or record.status != status:
                    name = self._names.get(pane, pane)
                    self._record(self._states.observe(pane, workspace, name, status))
            for pane in known:
                if pane not in statuses and pane not in previous:
                    self._record(self._states.gone(pane))
        except sqlite3.Error:
            log.warning("cannot record agent states in state.db", exc_info=True)

    async def _read_output(self, current: dict[str, dict[str, Any]]) -> None:
        for pane in [pane for pane in self._reads if pane not in current]:
            del self._reads[pane]
        for pane, agent in current.items():
            revision = agent.get("revision")
            seen = self._reads.get(pane)
            if seen is not None and revision is not None and seen[0] == revision:
                continue
            try:
                answer = await self._herdr.call(
                    "pane.read", {"pane_id": pane, "source": "recent_unwrapped", "lines": READ_LINES}
                )
            except HerdrError:
                continue
            read = answer.get("read", answer)
            text = read.get("text") if isinstance(read, dict) else None
            if not isinstance(text, str):
                continue
            self._reads[pane] = (revision if revision is not None else read.get("revision"), text)
            if seen is None or agent.get("agent_status") != "working":
                continue
            added = new_output(seen[1], text).strip("\n")
            if not added.strip():
                continue
            shown, truncated = clip(added, self._output_chars)
            self._hub.publish_output(
                {
                    "workspace_id": agent.get("workspace_id"),
                    "pane_id": pane,
                    "agent": self._names.get(pane, pane),
                    "text": shown,
                    "truncated": truncated,
                    "at": iso_ms(time.time_ns() // 1_000_000),
                }
            )
