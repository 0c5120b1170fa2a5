"""The journal core that the Continuity Journal, Work Memory and handoff share.

The clock and ids of journal rows, the request hash of idempotent writes, the one-transaction
discipline (`journal_transaction`: a missing or unusable state.db is
`continuity_journal_unavailable` and nothing is written), a chain's row, the bounded tail of its
turns, ranked full-text search over turns, and the notice that all of it is memory, not live
state. The operations built on it live in `continuity`, `work_memory` and `handoff`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.state.journal_text import match_expression, query_terms
from herdr_mcp.state.store import StateStore

DEFAULT_RESUME_TURNS = 20
MAX_RESUME_TURNS = 100
#: Characters of turn text a resume returns at most: enough for a planner to pick the work back
#: up, small enough not to fill its context window on arrival.
DEFAULT_RESUME_CHARS = 12_000
MAX_RESUME_CHARS = 60_000
#: A search ranks at most the newest this many matching turns: scoring is per
#: candidate, and a query matching more turns than this says little about which one is meant
#: (5,000 scores take about 10 ms; all 100,000 turns of the benchmark take about 110 ms).
RANK_WINDOW = 5_000

NOT_LIVE_STATE = (
    "This is journal memory, not live state: re-inspect the Herdr workspace, Git and the runtime "
    "before any change."
)


# ---------------------------------------------------------------------------------------------
# Clock, ids, transactions


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def iso_ms(ms: int) -> str:
    """Milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def new_id(prefix: str) -> str:
    """`prefix` + 20 hex digits (80 random bits)."""
    return prefix + secrets.token_hex(10)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def request_hash(params: dict[str, Any], *, ignore: tuple[str, ...] = ("browser_session_ref",)) -> str:
    """A stable hash of a request's parameters (keys sorted), leaving out provenance fields."""
    kept = {key: value for key, value in params.items() if key not in ignore}
    return sha256_hex(json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False))


def journal_unavailable(detail: str) -> ToolError:
    return ToolError(
        "continuity_journal_unavailable",
        f"The continuity journal cannot be used ({detail}); nothing was changed. Keep the current "
        "conversation and retry once `herdr-mcp serve` has its state.db back.",
    )


@contextlib.contextmanager
def journal_transaction(store: StateStore, *, write: bool) -> Iterator[sqlite3.Connection]:
    """One transaction on the journal: `BEGIN IMMEDIATE` to write, a consistent snapshot to read.

    A missing, locked, read-only or unreadable database is `continuity_journal_unavailable` and
    nothing is written. The file's existence is checked before connecting, so a removed
    `state.db` is never silently recreated empty.
    """
    if not store.path.is_file():
        raise journal_unavailable(f"{store.path} does not exist")
    try:
        conn = store.connection()
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN DEFERRED")
    except sqlite3.DatabaseError as exc:
        raise journal_unavailable(str(exc)) from exc
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.DatabaseError) and not isinstance(
            exc, sqlite3.IntegrityError | sqlite3.ProgrammingError
        ):
            raise journal_unavailable(str(exc)) from exc
        raise


# ---------------------------------------------------------------------------------------------
# Chains and their turns


def chain_row(conn: sqlite3.Connection, continuity_id: str) -> sqlite3.Row:
    """The chain's row. Raises ToolError `continuity_not_found`."""
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM continuity_chains WHERE continuity_id = ?", (continuity_id,)
    ).fetchone()
    if row is None:
        raise ToolError(
            "continuity_not_found",
            f"No continuity chain {continuity_id!r} is in this workstation's journal; resolve the "
            "conversation with herdr_mcp.continuity.resolve instead of guessing an id.",
            continuity_id=continuity_id,
        )
    return row


def _turn_view(row: sqlite3.Row, text: str, truncated: bool) -> dict[str, Any]:
    return {
        "seq": row["seq"],
        "role": row["role"],
        "text": text,
        "chars": row["body_chars"],
        "truncated": truncated,
        "reclaimed": row["reclaimed_at"] is not None,
        "site": row["site"],
        "conversation_id": row["conversation_id"],
        "appended_at": iso_ms(row["appended_at"]),
    }


def bounded_tail(
    conn: sqlite3.Connection, continuity_id: str, *, after_seq: int, max_turns: int, max_chars: int
) -> tuple[list[dict[str, Any]], int]:
    """The newest turns after `after_seq`, oldest first, within `max_turns` and `max_chars`.

    The newest turn is always included (cut to the budget if it is longer); older ones are added
    while the budget lasts. Returns (turns, omitted): `omitted` turns after `after_seq` were left out.
    """
    rows = conn.execute(
        "SELECT * FROM continuity_turns WHERE continuity_id = ? AND seq > ? ORDER BY seq DESC LIMIT ?",
        (continuity_id, after_seq, max_turns),
    ).fetchall()
    (available,) = conn.execute(
        "SELECT count(*) FROM continuity_turns WHERE continuity_id = ? AND seq > ?",
        (continuity_id, after_seq),
    ).fetchone()
    budget = max_chars
    turns: list[dict[str, Any]] = []
    for row in rows:
        if budget <= 0:
            break
        body: str = row["body"]
        text = body[:budget]
        budget -= len(text)
        turns.append(_turn_view(row, text, truncated=len(text) < len(body)))
    turns.reverse()
    return turns, int(available) - len(turns)


# ---------------------------------------------------------------------------------------------
# Turn search


@dataclass(frozen=True)
class TurnHits:
    """Ranked turn rows of a search, the query's terms, and how they matched."""

    rows: list[sqlite3.Row]
    terms: list[str]
    match: str
    window_capped: bool


def _turn_hits(
    conn: sqlite3.Connection, terms: list[str], require_all: bool, limit: int, continuity_id: str | None
) -> tuple[list[sqlite3.Row], bool]:
    """Best `limit` turns for the terms, and whether ranking was confined to the newest window."""
    expression = match_expression(terms, require_all=require_all, chain=continuity_id)
    # Ranking scores every candidate, so a word in nearly every turn would cost a score per turn;
    # candidates are the newest RANK_WINDOW matches (finding them walks the index only).
    edge = conn.execute(
        "SELECT rowid FROM continuity_turns_fts WHERE continuity_turns_fts MATCH ? "
        "ORDER BY rowid DESC LIMIT 1 OFFSET ?",
        (expression, RANK_WINDOW - 1),
    ).fetchone()
    sql = (
        "SELECT t.*, c.title FROM (SELECT rowid, rank FROM continuity_turns_fts "
        "WHERE continuity_turns_fts MATCH ? AND rowid >= ? ORDER BY rank LIMIT ?) AS hit "
        "JOIN continuity_turns t ON t.turn_id = hit.rowid "
        "JOIN continuity_chains c ON c.continuity_id = t.continuity_id ORDER BY hit.rank"
    )
    rows = conn.execute(sql, (expression, edge[0] if edge else 0, limit)).fetchall()
    return rows, edge is not None


def search_turns(
    conn: sqlite3.Connection, query: str, *, limit: int, continuity_id: str | None = None
) -> TurnHits:
    """Ranked turn rows for a free-text query: all terms first, any term if that finds nothing.

    Raises ToolError `continuity_query_unsearchable` when the query has no word to search for.
    """
    terms = _searchable(query)
    rows, capped = _turn_hits(conn, terms, True, limit, continuity_id)
    if rows or len(terms) == 1:
        return TurnHits(rows, terms, "all", capped)
    rows, capped = _turn_hits(conn, terms, False, limit, continuity_id)
    return TurnHits(rows, terms, "any", capped)


def _searchable(query: str) -> list[str]:
    terms = query_terms(query)
    if not terms:
        raise ToolError(
            "continuity_query_unsearchable",
            f"The query {query!r} has no word or number to search for; search with words from the "
            "conversation.",
            argument="query",
        )
    return terms
