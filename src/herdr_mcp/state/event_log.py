"""The durable event log behind herdr_since: numbered events whose cursors survive restarts.

Every event gets `seq` from an AUTOINCREMENT column, so numbers only grow and are never reused,
not even after the newest rows were deleted or the runtime restarted: a cursor handed out by an
earlier process keeps its meaning. The log keeps the newest `keep` events; older ones are pruned
every few appends. A cursor that points before what is kept is answered with `gap: true` (events
were missed); a cursor beyond the last number ever given (the database was deleted and started
again) is answered with `gap: true` and the events from the start.

This module is the one owner of the `events` table: every statement on it is here. Two writers
use it: the runtime's feed (`EventLog.append`, Herdr's own events) and the push plane
(`state/push.py`, agent transitions), which appends with `append_event` inside its own
transaction so a transition and its `push_agents` row commit together; both read with
`position` and the selects below.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.state.store import StateStore

__all__ = [
    "DEFAULT_KEEP",
    "EventLog",
    "Position",
    "append_event",
    "events_named",
    "iso_ms",
    "last_event_seq",
    "position",
]

#: Events kept for herdr_since. At a few hundred bytes each this is tens of megabytes at most, and
#: a day of a busy workstation's agent status changes.
DEFAULT_KEEP = 100_000
# Pruning runs every this many appends (fewer for a small `keep`); between two runs the table
# holds at most this many rows more than `keep`.
_PRUNE_EVERY = 1000


def iso_ms(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def last_event_seq(conn: sqlite3.Connection) -> int:
    """The newest sequence number ever given (0 before the first event)."""
    # sqlite_sequence remembers the highest number ever given, even once its row is deleted.
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
    return int(row[0]) if row else 0


def append_event(
    tx: sqlite3.Connection, name: str, workspace_id: str | None, data: dict[str, Any], at_ms: int
) -> int:
    """Insert one event inside the caller's transaction; its sequence number. Raises
    TypeError/ValueError when `data` is not JSON."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    cursor = tx.execute(
        "INSERT INTO events (name, workspace_id, data_json, at) VALUES (?, ?, ?, ?)",
        (name, workspace_id, text, at_ms),
    )
    if cursor.lastrowid is None:
        raise RuntimeError("SQLite did not report the new event's rowid")
    return cursor.lastrowid


@dataclass(frozen=True)
class Position:
    """Where a read after `cursor` starts: `start` (0 when the cursor is from a log that no longer
    exists), `last` the newest number ever given, `gap` (events after the cursor were pruned, or
    the cursor is unknown) and `unknown` (the cursor is beyond every number ever given)."""

    start: int
    last: int
    gap: bool
    unknown: bool


def position(conn: sqlite3.Connection, cursor: int) -> Position:
    last = last_event_seq(conn)
    oldest_row = conn.execute("SELECT MIN(seq) FROM events").fetchone()
    oldest = oldest_row[0] if oldest_row[0] is not None else last + 1
    unknown = cursor > last
    gap = unknown or (cursor != 0 and cursor < oldest - 1)
    return Position(0 if unknown else cursor, last, gap, unknown)


def events_named(
    conn: sqlite3.Connection, names: Sequence[str], after: int, upto: int, limit: int
) -> list[tuple[int, str, dict[str, Any]]]:
    """Events called one of `names` with `after < seq <= upto`, oldest first, at most `limit`."""
    placeholders = ", ".join("?" for _ in names)
    rows = conn.execute(
        f"SELECT seq, name, data_json FROM events WHERE name IN ({placeholders}) "  # noqa: S608 (placeholders only)
        "AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
        (*names, after, upto, limit),
    ).fetchall()
    return [(int(row[0]), str(row[1]), json.loads(row[2])) for row in rows]


class EventLog:
    """The `events` table of `state.db`. Thread-safe; several processes may append."""

    def __init__(self, store: StateStore, *, keep: int = DEFAULT_KEEP) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self._store = store
        self._keep = keep
        self._prune_every = max(1, min(_PRUNE_EVERY, keep // 10))
        self._lock = threading.Lock()
        self._appended = 0
        self.prune()

    def append(self, name: str, workspace_id: str | None, data: dict[str, Any], at: float) -> int:
        """Store one event (`at` in Unix seconds) and return its sequence number.

        Raises TypeError/ValueError when `data` is not JSON, sqlite3.Error when the database
        is unusable.
        """
        with self._store.transaction() as tx:
            seq = append_event(tx, name, workspace_id, data, round(at * 1000))
        with self._lock:
            self._appended += 1
            due = self._appended % self._prune_every == 0
        if due:
            self.prune()
        return seq

    def since(self, cursor: int, *, workspace: str | None, limit: int) -> dict[str, Any]:
        """Events after `cursor`, oldest first, at most `limit` of them.

        Returns `{"events": [{"seq", "event", "data", "at"}], "next_cursor", "more", "gap"}`:
        `at` is ISO 8601 UTC with a Z; `more` says `limit` cut the answer; `next_cursor` is the
        cursor to pass next (the last returned seq when `more`, else the newest seq of the log,
        so events filtered out by `workspace` are not looked at again); `gap` says events after
        `cursor` were pruned, or that `cursor` is from a log that no longer exists (then the
        events start from the oldest kept). Raises ToolError `invalid_arguments`.
        """
        if cursor < 0:
            raise ToolError("invalid_arguments", "cursor must be 0 or more; start with 0.")
        if limit < 1:
            raise ToolError("invalid_arguments", "max_events must be at least 1.")
        with self._store.snapshot() as conn:
            at = position(conn, cursor)
            start, last, gap = at.start, at.last, at.gap
            if workspace is None:
                rows = conn.execute(
                    "SELECT seq, name, data_json, at FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
                    (start, limit + 1),
                ).fetchall()
            else:
                rows = conn.execute(
                    "SELECT seq, name, data_json, at FROM events WHERE seq > ? AND workspace_id = ? "
                    "ORDER BY seq LIMIT ?",
                    (start, workspace, limit + 1),
                ).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        return {
            "events": [
                {"seq": row[0], "event": row[1], "data": json.loads(row[2]), "at": iso_ms(row[3])}
                for row in rows
            ],
            "next_cursor": rows[-1][0] if more else max(start, last),
            "more": more,
            "gap": gap,
        }

    def recent(self, name: str, *, limit: int, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
        """The newest `limit` events called `name` with seq > `after`, oldest first, as (seq, data)."""
        rows = (
            self._store.connection()
            .execute(
                "SELECT seq, data_json FROM events WHERE name = ? AND seq > ? ORDER BY seq DESC LIMIT ?",
                (name, after, limit),
            )
            .fetchall()
        )
        return [(int(row[0]), json.loads(row[1])) for row in reversed(rows)]

    def last_seq(self) -> int:
        """The newest sequence number ever given (0 before the first event)."""
        return last_event_seq(self._store.connection())

    def prune(self) -> None:
        """Delete all but the newest `keep` events (numbers are dense, so a range delete)."""
        with self._store.transaction() as tx:
            tx.execute(
                "DELETE FROM events WHERE seq <= (SELECT MAX(seq) FROM events) - ?",
                (self._keep,),
            )
