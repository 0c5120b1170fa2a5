"""The durable half of the push plane: agent transitions as numbered events (docs/browser-protocol.md 3).

`push_agents` holds the last status recorded for every agent pane. `observe()` compares a status
with it and, only when the agent moved between working and not working, appends one row to the
`events` table (`agent_working` or `agent_settled`) in the same `BEGIN IMMEDIATE` transaction; an
agent that went away (`gone()`) appends `agent_gone`. The rows are written and read through
`state/event_log.py`, the table's one owner. The row's `seq` is the herdr_since cursor:
it only grows and keeps its meaning across restarts, and since every event-log row is inserted
and committed under SQLite's one writer lock, the rows become visible in `seq` order, so a reader
that remembers the highest `seq` it read (`read()`) never skips one committed later.

Each event's data carries `workspace_working`: whether any agent of that workspace still works
after this change (from `push_agents`, in the same transaction).

Two runtimes (A/B generations) share state.db and both follow Herdr. Only the holder of the
`push` lease (`hold_lease`) records transitions, so one Herdr change is never recorded twice; the
holder renews it, and a lease whose holder died (its pid is gone) or expired is taken over.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from herdr_mcp.state.event_log import append_event, events_named, iso_ms, last_event_seq, position
from herdr_mcp.state.leases import Lease
from herdr_mcp.state.store import StateStore

DURABLE_EVENTS = ("agent_working", "agent_settled", "agent_gone")
#: Statuses that end work: a working agent that reaches one of them has settled. Herdr's
#: `unknown` (it no longer recognises an agent in the pane) ends work too.
NOT_WORKING = ("idle", "done", "blocked", "unknown")
LEASE_NAME = "push"
#: Rows fetched per query when reading a range of events.
READ_PAGE = 500


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class PushEvent:
    """One event of the push stream: `data` is what the stream sends (it includes `seq`)."""

    seq: int
    name: str
    data: dict[str, Any]

    @property
    def durable(self) -> bool:
        return self.name in DURABLE_EVENTS


@dataclass(frozen=True)
class AgentRecord:
    pane_id: str
    workspace_id: str
    agent: str
    status: str
    seq: int


@dataclass(frozen=True)
class Replay:
    """What `read()` found: the events, the position read up to, and whether events were lost."""

    events: list[PushEvent]
    upto: int
    gap: bool
    #: `limit` cut the answer: read again from `upto`.
    more: bool = False
    #: `after` was beyond every seq ever given (the log was started again).
    unknown: bool = False


class AgentStates:
    """`push_agents`, the push rows of `events`, and the `push` lease."""

    def __init__(self, store: StateStore) -> None:
        self._store = store

    # -- recording -------------------------------------------------------------------------

    def observe(
        self, pane_id: str, workspace_id: str, agent: str, status: str, at: float | None = None
    ) -> PushEvent | None:
        """Record `status` for the pane; the transition event it caused, if any."""
        at_ms = _now_ms() if at is None else round(at * 1000)
        with self._store.transaction() as tx:
            row = tx.execute("SELECT * FROM push_agents WHERE pane_id = ?", (pane_id,)).fetchone()
            before = row["status"] if row else None
            name: str | None = None
            if status == "working" and before != "working":
                name = "agent_working"
            elif status != "working" and before == "working":
                name = "agent_settled"
            if name is None:
                if row is None or (row["status"], row["agent"], row["workspace_id"]) != (
                    status,
                    agent,
                    workspace_id,
                ):
                    tx.execute(
                        """INSERT INTO push_agents (pane_id, workspace_id, agent, status, seq, updated_at)
                           VALUES (?, ?, ?, ?, 0, ?)
                           ON CONFLICT (pane_id) DO UPDATE SET workspace_id = excluded.workspace_id,
                               agent = excluded.agent, status = excluded.status,
                               updated_at = excluded.updated_at""",
                        (pane_id, workspace_id, agent, status, at_ms),
                    )
                return None
            data: dict[str, Any] = {"workspace_id": workspace_id, "pane_id": pane_id, "agent": agent}
            if name == "agent_settled":
                data["status"] = status
                data["workspace_working"] = _others_working(tx, workspace_id, pane_id)
            data["at"] = iso_ms(at_ms)
            seq = append_event(tx, name, workspace_id, data, at_ms)
            tx.execute(
                """INSERT INTO push_agents (pane_id, workspace_id, agent, status, seq, updated_at)
                   VALUES (?, ?, ?, ?, ?, ?)
                   ON CONFLICT (pane_id) DO UPDATE SET workspace_id = excluded.workspace_id,
                       agent = excluded.agent, status = excluded.status, seq = excluded.seq,
                       updated_at = excluded.updated_at""",
                (pane_id, workspace_id, agent, status, seq, at_ms),
            )
        return PushEvent(seq, name, {"seq": seq, **data})

    def gone(self, pane_id: str, at: float | None = None) -> PushEvent | None:
        """The pane closed or its agent exited: `agent_gone` if the pane was known."""
        at_ms = _now_ms() if at is None else round(at * 1000)
        with self._store.transaction() as tx:
            row = tx.execute("SELECT * FROM push_agents WHERE pane_id = ?", (pane_id,)).fetchone()
            if row is None:
                return None
            tx.execute("DELETE FROM push_agents WHERE pane_id = ?", (pane_id,))
            workspace_id = row["workspace_id"]
            data = {
                "workspace_id": workspace_id,
                "pane_id": pane_id,
                "agent": row["agent"],
                "workspace_working": _others_working(tx, workspace_id, pane_id),
                "at": iso_ms(at_ms),
            }
            seq = append_event(tx, "agent_gone", workspace_id, data, at_ms)
        return PushEvent(seq, "agent_gone", {"seq": seq, **data})

    def known(self) -> dict[str, AgentRecord]:
        """Every agent pane recorded, by pane id."""
        rows = self._store.connection().execute("SELECT * FROM push_agents").fetchall()
        return {
            row["pane_id"]: AgentRecord(
                row["pane_id"], row["workspace_id"], row["agent"], row["status"], row["seq"]
            )
            for row in rows
        }

    # -- reading ---------------------------------------------------------------------------

    def last_seq(self) -> int:
        return last_event_seq(self._store.connection())

    def read(self, after: int, upto: int | None = None, limit: int = READ_PAGE) -> Replay:
        """Push events with `after < seq <= upto` (upto: the newest committed when None), oldest
        first, at most `limit`; `upto` of the answer is where the next read starts (the last
        event returned when `limit` cut the answer). `gap` says events after `after` were pruned
        from the log, or that `after` is from a log that no longer exists (then the events start
        from the oldest kept)."""
        with self._store.snapshot() as conn:
            at = position(conn, after)
            ceiling = at.last if upto is None else min(upto, at.last)
            rows = events_named(conn, DURABLE_EVENTS, at.start, ceiling, limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        events = [PushEvent(seq, name, {"seq": seq, **data}) for seq, name, data in rows]
        return Replay(events, rows[-1][0] if more else max(at.start, ceiling), at.gap, more, at.unknown)

    # -- the lease -------------------------------------------------------------------------

    def hold_lease(self, owner: str, ttl_s: float, pid: int | None = None) -> bool:
        """Take or renew the `push` lease for `owner` (state/leases.py); whether `owner` holds it."""
        return Lease(self._store, LEASE_NAME).hold(owner, ttl_s, pid)

    def release_lease(self, owner: str) -> None:
        Lease(self._store, LEASE_NAME).release(owner)


def _others_working(tx: sqlite3.Connection, workspace_id: str, pane_id: str) -> bool:
    row = tx.execute(
        "SELECT 1 FROM push_agents WHERE workspace_id = ? AND status = 'working' AND pane_id != ? LIMIT 1",
        (workspace_id, pane_id),
    ).fetchone()
    return row is not None
