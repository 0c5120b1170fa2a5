"""Herdr's event hub: every event gets a sequence number and the last 512 are kept.

Herdr: src/api/event_hub.rs (EventHub::push, events_after, current_sequence, MAX_EVENTS = 512).
Lifecycle subscriptions and agent waits read the hub from a sequence number on; at protocol 20 a
new lifecycle subscriber starts from 0 and so is replayed what is retained, at 22 it starts live.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

MAX_EVENTS = 512


@dataclass(frozen=True)
class HubEvent:
    sequence: int
    event: str
    """The snake_case EventKind, e.g. `pane_created`, `pane_agent_status_changed`."""
    data: dict[str, Any]
    """EventData, with its `type` tag."""

    def envelope(self) -> dict[str, Any]:
        return {"event": self.event, "data": self.data}


class EventHub:
    def __init__(self) -> None:
        self._events: deque[HubEvent] = deque(maxlen=MAX_EVENTS)
        self._sequence = 0

    def push(self, event: str, data: dict[str, Any]) -> HubEvent:
        self._sequence += 1
        entry = HubEvent(self._sequence, event, {"type": event, **data})
        self._events.append(entry)
        return entry

    def events_after(self, sequence: int) -> list[HubEvent]:
        return [entry for entry in self._events if entry.sequence > sequence]

    def current_sequence(self) -> int:
        return self._sequence
