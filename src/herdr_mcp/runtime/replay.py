"""Telling a lifecycle event Herdr replays from one it reports live.

Herdr 0.8.2 (protocol 20) starts every lifecycle subscription at the beginning of its event hub
(`last_sequence: 0`, src/api/subscriptions.rs; the hub keeps the last 512 events,
src/api/event_hub.rs), so each new subscriber is first sent the retained history, one event per
subscribed kind per 100 ms poll (src/api/server.rs, `stream_subscriptions`), and only then the
live events. The wire gives a replayed event no mark and no sequence number. The runtime
reconnects whenever the stream breaks, so without care every reconnect would record old closes
and creations again as new (issue "Real Herdr").

What the runtime recorded from this Herdr server (the same socket, so the same hub) is the hub's
own order restricted to the times it was connected, kind by kind. So each kind's replay begins
with events it has recorded, in the same order: either a suffix of what it recorded (the hub
holds less), or older events followed by all of it (the hub holds more). `KindAligner` follows
one kind's stream and holds events back until it knows: once the stream has gone through the
last event recorded of that kind, everything held is a replay (skipped) and what follows is new;
when the stream cannot be the replay of what was recorded (it diverged, and nothing arrived for
`STALE_SECONDS`, longer than Herdr's replay pauses between two events of a kind), what was held
is new after all and is released in order.

Identity is by content: the event's name and canonical JSON data. An event genuinely repeated
with the same content (a focus that goes back and forth) is told apart by its position in the
sequence, not by its content alone.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

#: The most events of one kind Herdr's hub can replay (src/api/event_hub.rs keeps 512 in all).
HUB_RETAINED_EVENTS = 512
#: A kind's held events are released as new once nothing of that kind arrived for this long:
#: a replay sends one event of a kind every 100 ms, so a pause this long means it is over.
STALE_SECONDS = 2.0

T = TypeVar("T")


def fingerprint(name: str, data: dict[str, Any]) -> str:
    """The identity of one event's content."""
    text = json.dumps([name, data], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass
class _Candidate:
    """The stream from position `stream_at` on repeats the recorded tail from `tail_at` on."""

    tail_at: int
    stream_at: int


@dataclass
class KindAligner(Generic[T]):
    """One event kind's stream against the fingerprints last recorded of that kind (oldest first).

    `push(fp, item)` and `flush_if_stale()` return the items that are new, in stream order; items
    found to be replays are dropped. An empty tail means nothing was recorded of this kind from
    this server, so nothing can be a replay of it: everything passes at once.

    Where the stream could be read two ways (events genuinely repeated with the same content, in
    the same order as recorded ones), the longer replay is assumed: an event is never recorded
    twice, at the cost of a live event identical to recorded history being taken for replay.
    The alignment ends within the first HUB_RETAINED_EVENTS events, the longest replay there is.
    """

    tail: list[str]
    clock: Callable[[], float] = time.monotonic
    done: bool = False
    skipped: int = 0
    _held: list[T] = field(default_factory=list)
    _seen: int = 0
    _candidates: list[_Candidate] = field(default_factory=list)
    _replay_through: int | None = None
    _last_arrival: float = 0.0

    def __post_init__(self) -> None:
        self.tail = self.tail[-HUB_RETAINED_EVENTS:]
        self.done = self.done or not self.tail

    def push(self, fp: str, item: T) -> list[T]:
        if self.done:
            return [item]
        position = self._seen
        self._seen += 1
        self._last_arrival = self.clock()
        self._held.append(item)
        last = len(self.tail) - 1
        alive = []
        for candidate in self._candidates:
            index = candidate.tail_at + (position - candidate.stream_at)
            if self.tail[index] == fp:
                alive.append(candidate)
        if position == 0:
            # The replay may begin anywhere inside what was recorded (the hub holds less)...
            alive.extend(_Candidate(at, 0) for at, known in enumerate(self.tail) if known == fp)
        elif self.tail[0] == fp and position <= HUB_RETAINED_EVENTS - len(self.tail):
            # ...or what was recorded may come after older events (the hub holds more).
            alive.append(_Candidate(0, position))
        self._candidates = []
        for candidate in alive:
            if candidate.tail_at + (position - candidate.stream_at) == last:
                self._replay_through = position  # through the last event recorded: replay so far
            else:
                self._candidates.append(candidate)
        if self._candidates and position < HUB_RETAINED_EVENTS:
            return []  # a longer replay is still possible
        if self._replay_through is not None or position >= HUB_RETAINED_EVENTS:
            return self._settle()
        return []  # nothing matched yet: what is held may still be older history

    def flush_if_stale(self) -> list[T]:
        """Decide once the stream paused longer than any replay does."""
        if self.done or not self._held or self.clock() - self._last_arrival < STALE_SECONDS:
            return []
        return self._settle()

    def _settle(self) -> list[T]:
        """Drop what was replay (through `_replay_through`) and release the rest as new."""
        cut = 0 if self._replay_through is None else self._replay_through + 1
        self.skipped += cut
        released, self._held = self._held[cut:], []
        self.done = True
        self._candidates = []
        return released
