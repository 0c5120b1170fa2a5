"""The Continuity Journal: chains, their stable identities, and the finalized turns of each.

A *chain* (`continuity_id`) is the continuity identity of one long piece of Web work. It outlives
any one conversation: a ChatGPT Project keeps its chain when the user opens a new conversation,
and a handoff carries the same `continuity_id` into the next conversation.

Rules this module enforces:

- Stable identities are a site's conversation (from its id or its full URL), a site's project,
  and a Herdr workspace. A conversation or project journals into exactly one chain; a workspace
  may serve several. Identities are tried most specific first (conversation, project, workspace);
  the first that matches anything decides (`continuity_identity`).
- `append_turn` is idempotent per (chain, turn_key): a repeat returns the first answer with
  `idempotent_replay: true`; the same key with other content is `continuity_turn_conflict`.
- `resolve` resumes only when a stable identity narrows to exactly one chain. Several chains give
  a bounded candidate list; free text only ever gives candidates that need the user's
  confirmation, even when there is just one; nothing is ever picked as "the most recent".
- `search` is FTS5 over turn bodies and verified checkpoint summaries; bounded; query text is
  never FTS syntax (see `journal_text`).
- `resume` returns bounded recent context of exactly one chain, also from a full conversation URL.

The journal is the browser's memory of a conversation, not live state: everything it returns says
so, and a planner re-inspects Herdr, Git and the runtime before any mutation.

`browser_session_ref` is recorded with each turn as provenance. It does not filter reads: the
journal belongs to the one user of this workstation, and a chain spans the several browser
sessions (conversations) it was handed through.

Each public function is one transaction (`journal_transaction`) and raises `ToolError` only. The
core this module shares with Work Memory and handoff (clock, ids, transactions, turn tails, turn
search) is `journal`.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.state.continuity_identity import Identity, bound_chains, narrow
from herdr_mcp.state.journal import (
    DEFAULT_RESUME_CHARS,
    DEFAULT_RESUME_TURNS,
    NOT_LIVE_STATE,
    RANK_WINDOW,
    bounded_tail,
    chain_row,
    iso_ms,
    journal_transaction,
    new_id,
    now_ms,
    search_turns,
    sha256_hex,
)
from herdr_mcp.state.journal_text import checkpoint_text, clip, excerpt, index_form, match_expression
from herdr_mcp.state.store import StateStore
from herdr_mcp.text import cleans_params

#: A finalized turn longer than this is refused: 100,000 characters is at most 400 KB of UTF-8,
#: which stays inside the 1 MiB native-messaging frame with room for the envelope.
MAX_TURN_CHARS = 100_000
DEFAULT_CANDIDATES = 5
MAX_CANDIDATES = 10
#: Length of a candidate's recent summary and of a chain title derived from its first message.
SUMMARY_CHARS = 280
TITLE_CHARS = 80
DEFAULT_SEARCH_LIMIT = 10
MAX_SEARCH_LIMIT = 50
#: Checkpoint hits a search returns beside its turn hits.
MAX_CHECKPOINT_HITS = 5
#: Text hits scanned when grouping a free-text resolve into candidate chains.
TEXT_RESOLVE_HITS = 200
#: Bindings listed in one resume answer.
MAX_BINDINGS_SHOWN = 20


# ---------------------------------------------------------------------------------------------
# Append


@cleans_params
def append_turn(store: StateStore, params: dict[str, Any]) -> dict[str, Any]:
    """Journal one finalized user/assistant turn, exactly once per (chain, turn_key).

    The chain is `continuity_id` when given, else the one the conversation or the project is bound
    to, else a new chain. The conversation, project and workspace named are bound to it.

    Raises ToolError `continuity_not_found`, `continuity_binding_conflict`,
    `continuity_turn_conflict`, `conversation_url_unrecognized`, `continuity_identity_conflict`,
    `invalid_params`, `continuity_journal_unavailable`.
    """
    identity = Identity.from_params(params)
    if identity.site is None or identity.conversation_id is None:
        raise ToolError(
            "invalid_params",
            "A turn is finalized in a conversation: pass site and conversation_id, or the conversation_url.",
            argument="conversation_id",
        )
    role: str = params["role"]
    text: str = params["text"]
    turn_key: str = params["turn_key"]
    with journal_transaction(store, write=True) as conn:
        continuity_id = _chain_for_append(conn, identity, params.get("continuity_id"))
        if continuity_id is not None:
            replay = _replayed_turn(conn, continuity_id, turn_key, role, text)
            if replay is not None:
                return replay
        now = now_ms()
        if continuity_id is None:
            continuity_id = new_id("cont_")
            conn.execute(
                "INSERT INTO continuity_chains (continuity_id, created_at, updated_at) VALUES (?, ?, ?)",
                (continuity_id, now, now),
            )
        _bind(conn, continuity_id, identity, now)
        chain = chain_row(conn, continuity_id)
        seq = int(chain["turn_count"]) + 1
        cursor = conn.execute(
            "INSERT INTO continuity_turns (continuity_id, seq, turn_key, role, site, conversation_id, "
            "browser_session_ref, body, body_sha256, body_chars, appended_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                continuity_id,
                seq,
                turn_key,
                role,
                identity.site,
                identity.conversation_id,
                params.get("browser_session_ref"),
                text,
                sha256_hex(text),
                len(text),
                now,
            ),
        )
        conn.execute(
            "INSERT INTO continuity_turns_fts (rowid, body, chain) VALUES (?, ?, ?)",
            (cursor.lastrowid, index_form(text), continuity_id),
        )
        title = params.get("title") or chain["title"]
        if title is None and role == "user" and text.strip():
            title = clip(text, TITLE_CHARS)
        conn.execute(
            "UPDATE continuity_chains SET turn_count = ?, updated_at = ?, title = ? WHERE continuity_id = ?",
            (seq, now, title, continuity_id),
        )
        return _turn_result(continuity_id, seq, turn_key, role, now, replay=False)


def _turn_result(
    continuity_id: str, seq: int, turn_key: str, role: str, appended_at: int, *, replay: bool
) -> dict[str, Any]:
    return {
        "continuity_id": continuity_id,
        "seq": seq,
        "turn_key": turn_key,
        "role": role,
        "appended_at": iso_ms(appended_at),
        "idempotent_replay": replay,
    }


def _chain_for_append(conn: sqlite3.Connection, identity: Identity, explicit: str | None) -> str | None:
    """The chain this turn belongs to (None: a new one), refusing identities bound elsewhere."""
    exclusive = [(kind, site, value) for kind, site, value in identity.stable() if kind != "workspace"]
    bound = {
        kind: chains[0]
        for kind, site, value in exclusive
        if (chains := bound_chains(conn, kind, site, value))
    }
    chosen = explicit
    if chosen is not None:
        chain_row(conn, chosen)
    else:
        chosen = bound.get("conversation") or bound.get("project")
    for kind, other in bound.items():
        if other != chosen:
            raise ToolError(
                "continuity_binding_conflict",
                f"This {kind} already journals into chain {other!r}, not {chosen!r}; append with "
                f"continuity_id {other!r}, or from a conversation that is not bound yet.",
                bound_continuity_id=other,
                kind=kind,
            )
    return chosen


def _replayed_turn(
    conn: sqlite3.Connection, continuity_id: str, turn_key: str, role: str, text: str
) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT seq, role, body_sha256, appended_at FROM continuity_turns "
        "WHERE continuity_id = ? AND turn_key = ?",
        (continuity_id, turn_key),
    ).fetchone()
    if row is None:
        return None
    if row["role"] != role or row["body_sha256"] != sha256_hex(text):
        raise ToolError(
            "continuity_turn_conflict",
            f"Turn {turn_key!r} is already journaled (seq {row['seq']}) with other content; a "
            "finalized turn does not change, so use a new turn_key for a new message.",
            continuity_id=continuity_id,
            seq=row["seq"],
        )
    return _turn_result(continuity_id, row["seq"], turn_key, row["role"], row["appended_at"], replay=True)


def _bind(conn: sqlite3.Connection, continuity_id: str, identity: Identity, now: int) -> None:
    for kind, site, value in identity.stable():
        url = identity.conversation_url if kind == "conversation" else None
        conn.execute(
            "INSERT INTO continuity_bindings (continuity_id, kind, site, value, url, created_at, seen_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (kind, site, value, continuity_id) DO UPDATE SET "
            "seen_at = excluded.seen_at, url = coalesce(excluded.url, url)",
            (continuity_id, kind, site, value, url, now, now),
        )


# ---------------------------------------------------------------------------------------------
# Candidates and context


def _latest_verified_checkpoint(conn: sqlite3.Connection, continuity_id: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT c.content_json, c.revision, p.work_chain_id FROM work_memory_checkpoints c "
        "JOIN work_memory_partitions p USING (partition_id) "
        "WHERE p.continuity_id = ? AND c.verified = 1 "
        "ORDER BY c.created_at DESC, c.checkpoint_id DESC LIMIT 1",
        (continuity_id,),
    ).fetchone()
    return row


def recent_summary(conn: sqlite3.Connection, continuity_id: str) -> str:
    """A short line about where the chain stands: its latest verified checkpoint, else its last turns."""
    checkpoint = _latest_verified_checkpoint(conn, continuity_id)
    if checkpoint is not None:
        content = json.loads(checkpoint["content_json"])
        line = f"Checkpoint {checkpoint['work_chain_id']} r{checkpoint['revision']}: {content['goal']}"
        if content.get("next_steps"):
            line += f" Next: {content['next_steps'][0]}"
        return clip(line, SUMMARY_CHARS)
    rows = conn.execute(
        "SELECT role, body FROM continuity_turns WHERE continuity_id = ? AND reclaimed_at IS NULL "
        "ORDER BY seq DESC LIMIT 2",
        (continuity_id,),
    ).fetchall()
    line = " | ".join(f"{row['role']}: {clip(row['body'], SUMMARY_CHARS // 2)}" for row in reversed(rows))
    return clip(line, SUMMARY_CHARS)


def _workspaces(conn: sqlite3.Connection, continuity_id: str) -> list[str]:
    rows = conn.execute(
        "SELECT value FROM continuity_bindings WHERE continuity_id = ? AND kind = 'workspace' "
        "ORDER BY value LIMIT ?",
        (continuity_id, MAX_BINDINGS_SHOWN),
    ).fetchall()
    return [str(row[0]) for row in rows]


def candidate(conn: sqlite3.Connection, continuity_id: str, matched_by: str) -> dict[str, Any]:
    """What a user needs to confirm a chain: title, workspace, last update and where it stands."""
    chain = chain_row(conn, continuity_id)
    return {
        "continuity_id": continuity_id,
        "title": chain["title"],
        "workspace_ids": _workspaces(conn, continuity_id),
        "updated_at": iso_ms(chain["updated_at"]),
        "turn_count": chain["turn_count"],
        "recent_summary": recent_summary(conn, continuity_id),
        "matched_by": matched_by,
    }


def _bindings(conn: sqlite3.Connection, continuity_id: str) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT kind, site, value, url FROM continuity_bindings WHERE continuity_id = ? "
        "ORDER BY kind, site, seen_at DESC LIMIT ?",
        (continuity_id, MAX_BINDINGS_SHOWN),
    ).fetchall()
    return [
        {"kind": row["kind"], "site": row["site"], "value": row["value"], "url": row["url"]} for row in rows
    ]


def _work_memory_pointers(conn: sqlite3.Connection, continuity_id: str) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT p.project_ref, p.repo_id, p.work_chain_id, p.current_revision, "
        "(SELECT max(revision) FROM work_memory_checkpoints c "
        " WHERE c.partition_id = p.partition_id AND c.verified = 1) AS verified_revision "
        "FROM work_memory_partitions p WHERE p.continuity_id = ? ORDER BY p.partition_id LIMIT ?",
        (continuity_id, MAX_BINDINGS_SHOWN),
    ).fetchall()
    return [dict(row) for row in rows]


def resume_context(
    conn: sqlite3.Connection, continuity_id: str, matched_by: str, *, max_turns: int, max_chars: int
) -> dict[str, Any]:
    """Bounded recent context of one chain: identity, bindings, Work Memory pointers, last turns."""
    chain = chain_row(conn, continuity_id)
    turns, omitted = bounded_tail(conn, continuity_id, after_seq=0, max_turns=max_turns, max_chars=max_chars)
    return {
        "continuity_id": continuity_id,
        "matched_by": matched_by,
        "title": chain["title"],
        "created_at": iso_ms(chain["created_at"]),
        "updated_at": iso_ms(chain["updated_at"]),
        "turn_count": chain["turn_count"],
        "bindings": _bindings(conn, continuity_id),
        "work_memory": _work_memory_pointers(conn, continuity_id),
        "recent_turns": turns,
        "omitted_turns": omitted,
        "notice": NOT_LIVE_STATE,
    }


# ---------------------------------------------------------------------------------------------
# Resolve, resume, search


@cleans_params
def resolve(store: StateStore, params: dict[str, Any]) -> dict[str, Any]:
    """Find the chain a request means, resuming only when a stable identity leaves exactly one.

    `status` is `resolved` (with `context`), `ambiguous` (several chains share the identity),
    `needs_confirmation` (free-text candidates: never resumed, even when there is one) or
    `not_found`. Candidates are bounded by `limit`.

    Raises ToolError `continuity_identity_required`, `continuity_not_found` (for an explicit
    continuity_id), `conversation_url_unrecognized`, `continuity_identity_conflict`,
    `continuity_journal_unavailable`.
    """
    identity = Identity.from_params(params)
    text: str | None = params.get("text")
    explicit: str | None = params.get("continuity_id")
    if explicit is None and not identity.stable() and not text:
        raise ToolError(
            "continuity_identity_required",
            "Name the conversation: continuity_id, conversation_url, site with conversation_id or "
            "project_id, workspace_id, or text to search for.",
        )
    limit = int(params.get("limit", DEFAULT_CANDIDATES))
    bounds = _resume_bounds(params)
    with journal_transaction(store, write=False) as conn:
        if explicit is not None:
            chain_row(conn, explicit)
            return {
                "status": "resolved",
                "context": resume_context(conn, explicit, "continuity_id", **bounds),
            }
        narrowed = narrow(conn, identity)
        if len(narrowed.chain_ids) == 1 and narrowed.matched_by is not None:
            only = narrowed.chain_ids[0]
            return {
                "status": "resolved",
                "context": resume_context(conn, only, narrowed.matched_by, **bounds),
            }
        if narrowed.matched_by is not None:
            return {
                "status": "ambiguous",
                "matched_by": narrowed.matched_by,
                "candidate_count": len(narrowed.chain_ids),
                "candidates": [
                    candidate(conn, cid, narrowed.matched_by) for cid in narrowed.chain_ids[:limit]
                ],
                "advice": "Several chains share this identity; ask the user which one to continue.",
            }
        if text:
            return _text_candidates(conn, text, limit)
        return {"status": "not_found", "candidate_count": 0, "candidates": []}


def _text_candidates(conn: sqlite3.Connection, text: str, limit: int) -> dict[str, Any]:
    hits = search_turns(conn, text, limit=TEXT_RESOLVE_HITS)
    found: dict[str, str] = {}
    for row in hits.rows:
        found.setdefault(row["continuity_id"], excerpt(row["body"], hits.terms))
    if not found:
        return {"status": "not_found", "candidate_count": 0, "candidates": []}
    listed = []
    for continuity_id, match in list(found.items())[:limit]:
        entry = candidate(conn, continuity_id, "text")
        entry["match_excerpt"] = match
        listed.append(entry)
    return {
        "status": "needs_confirmation",
        "matched_by": "text",
        "candidate_count": len(found),
        "candidates": listed,
        "advice": (
            "Text matches are not identities: show these to the user and resume only the chain they "
            "confirm (herdr_mcp.continuity.resume with its continuity_id)."
        ),
    }


def _resume_bounds(params: dict[str, Any]) -> dict[str, int]:
    return {
        "max_turns": int(params.get("max_turns", DEFAULT_RESUME_TURNS)),
        "max_chars": int(params.get("max_chars", DEFAULT_RESUME_CHARS)),
    }


@cleans_params
def resume(store: StateStore, params: dict[str, Any]) -> dict[str, Any]:
    """Bounded recent context of exactly one chain, named by id, full URL or stable identity.

    Raises ToolError `continuity_not_found` (nothing matches), `continuity_ambiguous` (several
    chains; the bounded candidates are in the error), `continuity_identity_required`,
    `conversation_url_unrecognized`, `continuity_identity_conflict`,
    `continuity_journal_unavailable`.
    """
    identity = Identity.from_params(params)
    explicit: str | None = params.get("continuity_id")
    if explicit is None and not identity.stable():
        raise ToolError(
            "continuity_identity_required",
            "Name the chain: continuity_id, conversation_url, site with conversation_id or "
            "project_id, or workspace_id (to search by text use herdr_mcp.continuity.resolve).",
        )
    bounds = _resume_bounds(params)
    with journal_transaction(store, write=False) as conn:
        if explicit is not None:
            return resume_context(conn, explicit, "continuity_id", **bounds)
        narrowed = narrow(conn, identity)
        if not narrowed.chain_ids or narrowed.matched_by is None:
            raise ToolError(
                "continuity_not_found",
                "No chain in this workstation's journal is bound to that identity. A conversation "
                "never journaled here cannot be recovered from its URL; search with "
                "herdr_mcp.continuity.search or start a new chain.",
            )
        if len(narrowed.chain_ids) > 1:
            raise ToolError(
                "continuity_ambiguous",
                f"{len(narrowed.chain_ids)} chains share this {narrowed.matched_by}; ask the user "
                "which to continue and resume it by continuity_id.",
                candidates=[
                    candidate(conn, cid, narrowed.matched_by) for cid in narrowed.chain_ids[:MAX_CANDIDATES]
                ],
                candidate_count=len(narrowed.chain_ids),
            )
        return resume_context(conn, narrowed.chain_ids[0], narrowed.matched_by, **bounds)


def _checkpoint_hits(
    conn: sqlite3.Connection, terms: list[str], require_all: bool, limit: int, continuity_id: str | None
) -> list[sqlite3.Row]:
    sql = (
        "SELECT c.checkpoint_id, c.revision, c.content_json, c.created_at, p.project_ref, p.repo_id, "
        "p.work_chain_id, p.continuity_id FROM work_memory_checkpoints_fts f "
        "JOIN work_memory_checkpoints c ON c.checkpoint_id = f.rowid "
        "JOIN work_memory_partitions p ON p.partition_id = c.partition_id "
        "WHERE work_memory_checkpoints_fts MATCH ? AND (? IS NULL OR p.continuity_id = ?) "
        "ORDER BY f.rank LIMIT ?"
    )
    expression = match_expression(terms, require_all=require_all)
    return conn.execute(sql, (expression, continuity_id, continuity_id, limit)).fetchall()


@cleans_params
def search(store: StateStore, params: dict[str, Any]) -> dict[str, Any]:
    """FTS5 search over journal turns and verified checkpoints, best matches first, bounded.

    Every term must match; when that finds nothing, any term may (`match` says which). Turn hits
    and checkpoint hits are ranked separately (their scores are not comparable). A query that
    matches more than RANK_WINDOW turns is ranked among the newest of them
    (`ranked_within_newest`).

    Raises ToolError `continuity_query_unsearchable`, `continuity_journal_unavailable`.
    """
    limit = int(params.get("limit", DEFAULT_SEARCH_LIMIT))
    continuity_id: str | None = params.get("continuity_id")
    with journal_transaction(store, write=False) as conn:
        found = search_turns(conn, params["query"], limit=limit, continuity_id=continuity_id)
        checkpoint_limit = min(limit, MAX_CHECKPOINT_HITS)
        checkpoints = _checkpoint_hits(
            conn, found.terms, found.match == "all", checkpoint_limit, continuity_id
        )
        hits = [
            {
                "continuity_id": row["continuity_id"],
                "title": row["title"],
                "seq": row["seq"],
                "role": row["role"],
                "excerpt": excerpt(row["body"], found.terms),
                "appended_at": iso_ms(row["appended_at"]),
            }
            for row in found.rows
        ]
        checkpoint_hits = [_checkpoint_hit(row, found.terms) for row in checkpoints]
    return {
        "query": params["query"],
        "match": found.match,
        "ranked_within_newest": RANK_WINDOW if found.window_capped else None,
        "hits": hits,
        "checkpoint_hits": checkpoint_hits,
        "truncated": len(hits) == limit,
        "notice": NOT_LIVE_STATE,
    }


def _checkpoint_hit(row: sqlite3.Row, terms: list[str]) -> dict[str, Any]:
    return {
        "continuity_id": row["continuity_id"],
        "project_ref": row["project_ref"],
        "repo_id": row["repo_id"],
        "work_chain_id": row["work_chain_id"],
        "revision": row["revision"],
        "excerpt": excerpt(checkpoint_text(json.loads(row["content_json"])), terms),
        "created_at": iso_ms(row["created_at"]),
    }
