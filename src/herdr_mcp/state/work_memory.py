"""Work Memory: verified rolling checkpoints over a continuity chain, per partition.

A partition is the exact triple (project_ref, repo_id, work_chain_id) and belongs to one chain.
Its checkpoints are numbered revisions written by compare-and-swap: a put names the revision it
replaces (`expected_revision`, 0 for the first) and is refused with
`checkpoint_revision_conflict` (and the current revision) when another put got there first. A put
repeated after a lost answer is recognized by its request hash and answered again
(`idempotent_replay: true`).

A checkpoint is compact structured content (goal, constraints, progress, decisions, critical
context, next steps: the sections of a handoff document) that *covers* the chain's turns
1..covers_through_seq, plus evidence anchors:

- `message` anchors quote a turn of the partition's own chain;
- `evidence` anchors reuse evidence recorded earlier in the same partition;
- local evidence (`file`, `commit`, `command`, `task`, `note`) is recorded into the partition.

Anchors from another partition's chain or evidence are refused (`evidence_partition_mismatch`),
as are anchors to nothing (`evidence_anchor_not_found`) and coverage that runs past the journal or
back behind the last verified checkpoint (`checkpoint_coverage_invalid`).

**Verified** means the runtime checked, when the checkpoint was written, that it is grounded in
the journal:

1. every message anchor lies inside the covered range, and its quote (whitespace-insensitive) is
   in the turn's text, which is still present;
2. the last covered turn (seq == covers_through_seq) is itself anchored, by a new message anchor
   or by reused message evidence, so the checkpoint provably saw the end of what it covers.

A checkpoint that fails either check is still stored (the revision moves on, the problems are
listed) but is `verified: false`: resume never returns it, search does not index it, and it
never allows a reclaim. Local evidence is recorded as a claim; the runtime does not re-run it.

Reclaiming (`reclaim`) blanks the bodies of old turns, keeping each turn's row, role, hash and
length, and only for turns that every partition of the chain has covered with a verified
checkpoint, except turns those checkpoints anchor (their quotes stay checkable). A partition
with no verified checkpoint covers nothing, so it holds back all reclaiming on its chain.

Each public function is one transaction and raises `ToolError` only.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.state.journal import (
    DEFAULT_RESUME_CHARS,
    DEFAULT_RESUME_TURNS,
    NOT_LIVE_STATE,
    bounded_tail,
    chain_row,
    iso_ms,
    journal_transaction,
    new_id,
    now_ms,
    request_hash,
)
from herdr_mcp.state.journal_text import checkpoint_text, index_form
from herdr_mcp.state.store import StateStore
from herdr_mcp.text import cleans_params

CONTENT_LISTS = ("constraints", "progress", "decisions", "critical_context", "next_steps")
LOCAL_EVIDENCE_KINDS = ("file", "commit", "command", "task", "note")
MAX_ANCHORS = 64
DEFAULT_RECLAIM_TURNS = 1_000
#: Turns blanked in one reclaim transaction: keeps the write lock short for other writers.
MAX_RECLAIM_TURNS = 10_000


@dataclass(frozen=True)
class PartitionKey:
    project_ref: str
    repo_id: str
    work_chain_id: str

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> PartitionKey:
        return cls(params["project_ref"], params["repo_id"], params["work_chain_id"])

    def to_dict(self) -> dict[str, str]:
        return {"project_ref": self.project_ref, "repo_id": self.repo_id, "work_chain_id": self.work_chain_id}


@dataclass(frozen=True)
class _Anchor:
    """One anchor of a put, resolved against the journal (not yet written)."""

    kind: str
    evidence_id: str | None = None
    seq: int | None = None
    turn: sqlite3.Row | None = None
    ref: str | None = None
    note: str | None = None
    quote: str | None = None


def partition_row(conn: sqlite3.Connection, key: PartitionKey) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM work_memory_partitions WHERE project_ref = ? AND repo_id = ? AND work_chain_id = ?",
        (key.project_ref, key.repo_id, key.work_chain_id),
    ).fetchone()
    return row


def _partition_not_found(key: PartitionKey) -> ToolError:
    return ToolError(
        "work_memory_partition_not_found",
        f"No Work Memory for project_ref {key.project_ref!r}, repo_id {key.repo_id!r}, "
        f"work_chain_id {key.work_chain_id!r}; the partition must match exactly. Start it with "
        "herdr_mcp.work_memory.checkpoint.put (expected_revision 0) or resume the chain instead.",
        **key.to_dict(),
    )


def latest_verified(conn: sqlite3.Connection, partition_id: int) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM work_memory_checkpoints WHERE partition_id = ? AND verified = 1 "
        "ORDER BY revision DESC LIMIT 1",
        (partition_id,),
    ).fetchone()
    return row


def _content(raw: dict[str, Any]) -> dict[str, Any]:
    content: dict[str, Any] = {"goal": raw["goal"]}
    for name in CONTENT_LISTS:
        content[name] = list(raw.get(name, []))
    return content


def _flat(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------
# checkpoint.put


@cleans_params
def put_checkpoint(store: StateStore, params: dict[str, Any]) -> dict[str, Any]:
    """Write the next checkpoint revision of a partition, if `expected_revision` is still current.

    Raises ToolError `checkpoint_revision_conflict` (with `current_revision`),
    `evidence_partition_mismatch`, `evidence_anchor_not_found`, `checkpoint_coverage_invalid`,
    `work_memory_chain_required`, `work_memory_chain_mismatch`, `continuity_not_found`,
    `continuity_journal_unavailable`.
    """
    key = PartitionKey.from_params(params)
    expected = int(params["expected_revision"])
    covers = int(params["covers_through_seq"])
    content = _content(params["content"])
    digest = request_hash(params)
    with journal_transaction(store, write=True) as conn:
        # 1. The partition: found, or created by the first put (expected_revision 0).
        partition = partition_row(conn, key)
        if partition is None:
            if expected != 0:
                raise _revision_conflict(key, 0, expected)
            partition = _create_partition(conn, key, params.get("continuity_id"))
        elif params.get("continuity_id") not in (None, partition["continuity_id"]):
            raise ToolError(
                "work_memory_chain_mismatch",
                f"This partition belongs to chain {partition['continuity_id']!r}, not "
                f"{params['continuity_id']!r}; a partition never moves between chains.",
                continuity_id=partition["continuity_id"],
            )
        continuity_id: str = partition["continuity_id"]
        # 2. Compare-and-swap on the revision; the request that made the next revision is a replay.
        current = int(partition["current_revision"])
        if expected != current:
            replay = conn.execute(
                "SELECT checkpoint_id FROM work_memory_checkpoints "
                "WHERE partition_id = ? AND revision = ? AND request_sha256 = ?",
                (partition["partition_id"], expected + 1, digest),
            ).fetchone()
            if replay is None:
                raise _revision_conflict(key, current, expected)
            return _put_result(conn, key, continuity_id, replay["checkpoint_id"], replay=True)
        # 3. Coverage: inside the journal, never behind the last verified checkpoint.
        previous = latest_verified(conn, partition["partition_id"])
        _check_coverage(conn, continuity_id, covers, previous)
        # 4. Anchors: real, and from this partition.
        anchors = [_resolve_anchor(conn, partition, raw) for raw in params.get("anchors", [])]
        # 5. Verification (see the module docstring).
        problems = _verification_problems(conn, anchors, covers)
        # 6. Write the revision, its evidence, and the search index.
        now = now_ms()
        checkpoint_id = _write_checkpoint(
            conn, partition, current + 1, covers, content, digest, problems, params, now
        )
        _write_evidence(conn, partition, continuity_id, checkpoint_id, anchors, now)
        if not problems:
            if previous is not None:
                conn.execute(
                    "INSERT INTO work_memory_checkpoints_fts (work_memory_checkpoints_fts, rowid, body) "
                    "VALUES ('delete', ?, ?)",
                    (previous["checkpoint_id"], _indexed(previous["content_json"])),
                )
            conn.execute(
                "INSERT INTO work_memory_checkpoints_fts (rowid, body) VALUES (?, ?)",
                (checkpoint_id, index_form(checkpoint_text(content))),
            )
        conn.execute(
            "UPDATE continuity_chains SET updated_at = ? WHERE continuity_id = ?", (now, continuity_id)
        )
        return _put_result(conn, key, continuity_id, checkpoint_id, replay=False)


def _indexed(content_json: str) -> str:
    return index_form(checkpoint_text(json.loads(content_json)))


def _revision_conflict(key: PartitionKey, current: int, expected: int) -> ToolError:
    return ToolError(
        "checkpoint_revision_conflict",
        f"The checkpoint is at revision {current}, not {expected}: another writer moved it. Read "
        "it with herdr_mcp.work_memory.resume, merge, and put again with expected_revision "
        f"{current}.",
        current_revision=current,
        expected_revision=expected,
        **key.to_dict(),
    )


def _create_partition(conn: sqlite3.Connection, key: PartitionKey, continuity_id: str | None) -> sqlite3.Row:
    if continuity_id is None:
        raise ToolError(
            "work_memory_chain_required",
            "The first checkpoint of a partition names its chain: pass continuity_id.",
            argument="continuity_id",
        )
    chain_row(conn, continuity_id)
    created: sqlite3.Row = conn.execute(
        "INSERT INTO work_memory_partitions (project_ref, repo_id, work_chain_id, continuity_id, created_at) "
        "VALUES (?, ?, ?, ?, ?) RETURNING *",
        (key.project_ref, key.repo_id, key.work_chain_id, continuity_id, now_ms()),
    ).fetchone()
    return created


def _check_coverage(
    conn: sqlite3.Connection, continuity_id: str, covers: int, previous: sqlite3.Row | None
) -> None:
    journaled = int(chain_row(conn, continuity_id)["turn_count"])
    floor = int(previous["covers_through_seq"]) if previous is not None else 1
    if not floor <= covers <= journaled:
        raise ToolError(
            "checkpoint_coverage_invalid",
            f"covers_through_seq {covers} must be from {floor} (the last verified checkpoint's "
            f"coverage) to {journaled} (the chain's last journaled turn).",
            argument="covers_through_seq",
            minimum=floor,
            maximum=journaled,
        )


def _partition_mismatch(what: str) -> ToolError:
    return ToolError(
        "evidence_partition_mismatch",
        f"{what} belongs to another Work Memory partition; anchor only messages of this "
        "partition's chain and evidence recorded under the same project_ref, repo_id and "
        "work_chain_id.",
    )


def _anchor_not_found(what: str) -> ToolError:
    return ToolError(
        "evidence_anchor_not_found",
        f"{what} does not exist; anchor a journaled message (by seq) or recorded evidence (by id).",
    )


def _resolve_anchor(conn: sqlite3.Connection, partition: sqlite3.Row, raw: dict[str, Any]) -> _Anchor:
    kind: str = raw["kind"]
    if kind == "message":
        chain = raw.get("continuity_id", partition["continuity_id"])
        if chain != partition["continuity_id"]:
            raise _partition_mismatch(f"Message {chain}#{raw['seq']}")
        turn = conn.execute(
            "SELECT turn_id, seq, body, body_sha256, reclaimed_at FROM continuity_turns "
            "WHERE continuity_id = ? AND seq = ?",
            (chain, raw["seq"]),
        ).fetchone()
        if turn is None:
            raise _anchor_not_found(f"Message {chain}#{raw['seq']}")
        return _Anchor("message", seq=raw["seq"], turn=turn, quote=raw["quote"])
    if kind == "evidence":
        row = conn.execute(
            "SELECT e.partition_id, e.kind, t.seq FROM work_memory_evidence e "
            "LEFT JOIN continuity_turns t ON t.turn_id = e.turn_id WHERE e.evidence_id = ?",
            (raw["evidence_id"],),
        ).fetchone()
        if row is None:
            raise _anchor_not_found(f"Evidence {raw['evidence_id']!r}")
        if row["partition_id"] != partition["partition_id"]:
            raise _partition_mismatch(f"Evidence {raw['evidence_id']!r}")
        return _Anchor("evidence", evidence_id=raw["evidence_id"], seq=row["seq"])
    return _Anchor(kind, ref=raw["ref"], note=raw.get("note"))


def _verification_problems(conn: sqlite3.Connection, anchors: list[_Anchor], covers: int) -> list[str]:
    problems: list[str] = []
    for anchor in anchors:
        if anchor.kind != "message" or anchor.turn is None or anchor.quote is None:
            continue
        if anchor.seq is not None and anchor.seq > covers:
            problems.append(f"message {anchor.seq} is after the covered range 1..{covers}")
        elif anchor.turn["reclaimed_at"] is not None:
            problems.append(f"message {anchor.seq} was reclaimed, so its quote cannot be checked")
        elif _flat(anchor.quote) not in _flat(anchor.turn["body"]):
            problems.append(f"the quote given for message {anchor.seq} is not in its text")
    anchored_seqs = {anchor.seq for anchor in anchors if anchor.seq is not None}
    if covers not in anchored_seqs:
        problems.append(
            f"message {covers}, the last one covered, is not anchored; quote it so the checkpoint "
            "provably saw the end of what it covers"
        )
    return problems


def _write_checkpoint(
    conn: sqlite3.Connection,
    partition: sqlite3.Row,
    revision: int,
    covers: int,
    content: dict[str, Any],
    digest: str,
    problems: list[str],
    params: dict[str, Any],
    now: int,
) -> int:
    (checkpoint_id,) = conn.execute(
        "INSERT INTO work_memory_checkpoints (partition_id, revision, covers_through_seq, content_json, "
        "request_sha256, verified, problems_json, browser_session_ref, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING checkpoint_id",
        (
            partition["partition_id"],
            revision,
            covers,
            json.dumps(content, ensure_ascii=False),
            digest,
            0 if problems else 1,
            json.dumps(problems, ensure_ascii=False),
            params.get("browser_session_ref"),
            now,
        ),
    ).fetchone()
    conn.execute(
        "UPDATE work_memory_partitions SET current_revision = ? WHERE partition_id = ?",
        (revision, partition["partition_id"]),
    )
    return int(checkpoint_id)


def _write_evidence(
    conn: sqlite3.Connection,
    partition: sqlite3.Row,
    continuity_id: str,
    checkpoint_id: int,
    anchors: list[_Anchor],
    now: int,
) -> None:
    for position, anchor in enumerate(anchors):
        evidence_id = anchor.evidence_id
        if evidence_id is None:
            evidence_id = new_id("ev_")
            turn = anchor.turn
            conn.execute(
                "INSERT INTO work_memory_evidence (evidence_id, partition_id, kind, ref, note, turn_id, "
                "quote, body_sha256, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    evidence_id,
                    partition["partition_id"],
                    anchor.kind,
                    f"{continuity_id}#{anchor.seq}" if turn is not None else anchor.ref,
                    anchor.note,
                    turn["turn_id"] if turn is not None else None,
                    anchor.quote,
                    turn["body_sha256"] if turn is not None else None,
                    now,
                ),
            )
        conn.execute(
            "INSERT OR IGNORE INTO work_memory_checkpoint_evidence (checkpoint_id, evidence_id, position) "
            "VALUES (?, ?, ?)",
            (checkpoint_id, evidence_id, position),
        )


def checkpoint_evidence(conn: sqlite3.Connection, checkpoint_id: int) -> list[dict[str, Any]]:
    """The evidence a checkpoint anchors, in the order it was given."""
    rows = conn.execute(
        "SELECT e.evidence_id, e.kind, e.ref, e.note, e.quote, t.seq FROM work_memory_checkpoint_evidence l "
        "JOIN work_memory_evidence e USING (evidence_id) "
        "LEFT JOIN continuity_turns t ON t.turn_id = e.turn_id "
        "WHERE l.checkpoint_id = ? ORDER BY l.position",
        (checkpoint_id,),
    ).fetchall()
    return [
        {
            "evidence_id": row["evidence_id"],
            "kind": row["kind"],
            "ref": row["ref"],
            "note": row["note"],
            "quote": row["quote"],
            "seq": row["seq"],
        }
        for row in rows
    ]


def _put_result(
    conn: sqlite3.Connection, key: PartitionKey, continuity_id: str, checkpoint_id: int, *, replay: bool
) -> dict[str, Any]:
    row = conn.execute(
        "SELECT * FROM work_memory_checkpoints WHERE checkpoint_id = ?", (checkpoint_id,)
    ).fetchone()
    return {
        **key.to_dict(),
        "continuity_id": continuity_id,
        "revision": row["revision"],
        "covers_through_seq": row["covers_through_seq"],
        "verified": bool(row["verified"]),
        "problems": json.loads(row["problems_json"]),
        "evidence_ids": [item["evidence_id"] for item in checkpoint_evidence(conn, checkpoint_id)],
        "created_at": iso_ms(row["created_at"]),
        "idempotent_replay": replay,
    }


def checkpoint_view(conn: sqlite3.Connection, row: sqlite3.Row) -> dict[str, Any]:
    """A checkpoint as resume shows it: revision, coverage, content and evidence."""
    return {
        "revision": row["revision"],
        "covers_through_seq": row["covers_through_seq"],
        "verified": bool(row["verified"]),
        "created_at": iso_ms(row["created_at"]),
        **json.loads(row["content_json"]),
        "evidence": checkpoint_evidence(conn, row["checkpoint_id"]),
    }


# ---------------------------------------------------------------------------------------------
# resume


@cleans_params
def resume(store: StateStore, params: dict[str, Any]) -> dict[str, Any]:
    """The exact partition's latest verified checkpoint, the raw turns after it, and its evidence.

    The raw tail is bounded by `max_turns` and `max_chars` (newest kept); `omitted_turns` says how
    many uncovered turns were left out. Without a verified checkpoint the tail starts at turn 1.

    Raises ToolError `work_memory_partition_not_found`, `continuity_journal_unavailable`.
    """
    key = PartitionKey.from_params(params)
    max_turns = int(params.get("max_turns", DEFAULT_RESUME_TURNS))
    max_chars = int(params.get("max_chars", DEFAULT_RESUME_CHARS))
    with journal_transaction(store, write=False) as conn:
        partition = partition_row(conn, key)
        if partition is None:
            raise _partition_not_found(key)
        continuity_id: str = partition["continuity_id"]
        checkpoint = latest_verified(conn, partition["partition_id"])
        covered = int(checkpoint["covers_through_seq"]) if checkpoint is not None else 0
        turns, omitted = bounded_tail(
            conn, continuity_id, after_seq=covered, max_turns=max_turns, max_chars=max_chars
        )
        current = int(partition["current_revision"])
        verified_revision = int(checkpoint["revision"]) if checkpoint is not None else 0
        return {
            "partition": {**key.to_dict(), "continuity_id": continuity_id},
            "current_revision": current,
            "checkpoint": checkpoint_view(conn, checkpoint) if checkpoint is not None else None,
            "newer_unverified_revisions": current - verified_revision,
            "raw_tail": {"after_seq": covered, "turns": turns, "omitted_turns": omitted},
            "notice": NOT_LIVE_STATE,
        }


# ---------------------------------------------------------------------------------------------
# reclaim

#: Turns of a chain (?1) up to a covered seq (?2) whose bodies may go: not yet reclaimed, and not
#: anchored by the latest verified checkpoint of any partition of the chain (?3). ?4 is a LIMIT.
_RECLAIMABLE_TURNS = """
    SELECT turn_id, body FROM continuity_turns
    WHERE continuity_id = ? AND seq <= ? AND reclaimed_at IS NULL
      AND turn_id NOT IN (
        SELECT e.turn_id FROM work_memory_checkpoint_evidence l
        JOIN work_memory_evidence e USING (evidence_id)
        WHERE e.turn_id IS NOT NULL AND l.checkpoint_id IN (
          SELECT (SELECT c.checkpoint_id FROM work_memory_checkpoints c
                  WHERE c.partition_id = p.partition_id AND c.verified = 1
                  ORDER BY c.revision DESC LIMIT 1)
          FROM work_memory_partitions p WHERE p.continuity_id = ?))
    ORDER BY seq LIMIT ?
"""


@cleans_params
def reclaim(store: StateStore, params: dict[str, Any]) -> dict[str, Any]:
    """Blank the bodies of old turns that verified checkpoints cover (see the module docstring).

    Reclaims at most `max_turns` turns, oldest first (`reclaimable`); `more` says whether further
    turns qualify for another call. `dry_run` counts without changing anything.

    Raises ToolError `continuity_not_found`, `continuity_journal_unavailable`.
    """
    continuity_id: str = params["continuity_id"]
    limit = int(params.get("max_turns", DEFAULT_RECLAIM_TURNS))
    dry_run = bool(params.get("dry_run", False))
    with journal_transaction(store, write=not dry_run) as conn:
        chain_row(conn, continuity_id)
        partitions = conn.execute(
            "SELECT * FROM work_memory_partitions WHERE continuity_id = ? ORDER BY partition_id",
            (continuity_id,),
        ).fetchall()
        covering = [(partition, latest_verified(conn, partition["partition_id"])) for partition in partitions]
        verified = [checkpoint for _, checkpoint in covering if checkpoint is not None]
        if not partitions or len(verified) < len(partitions):
            floor, limiting = 0, None
        else:
            limiting = min(verified, key=lambda checkpoint: int(checkpoint["covers_through_seq"]))
            floor = int(limiting["covers_through_seq"])
        rows = conn.execute(_RECLAIMABLE_TURNS, (continuity_id, floor, continuity_id, limit + 1)).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        if not dry_run and limiting is not None:
            now = now_ms()
            for row in rows:
                conn.execute(
                    "INSERT INTO continuity_turns_fts (continuity_turns_fts, rowid, body, chain) "
                    "VALUES ('delete', ?, ?, ?)",
                    (row["turn_id"], index_form(row["body"]), continuity_id),
                )
                conn.execute(
                    "UPDATE continuity_turns SET body = '', reclaimed_at = ?, reclaimed_by = ? "
                    "WHERE turn_id = ?",
                    (now, limiting["checkpoint_id"], row["turn_id"]),
                )
        return {
            "continuity_id": continuity_id,
            "covered_through_seq": floor,
            "reclaimable": len(rows),
            "reclaimed": 0 if dry_run else len(rows),
            "more": more,
            "dry_run": dry_run,
            "covered_by": [
                {
                    "project_ref": partition["project_ref"],
                    "repo_id": partition["repo_id"],
                    "work_chain_id": partition["work_chain_id"],
                    "verified_revision": checkpoint["revision"] if checkpoint is not None else None,
                    "covers_through_seq": checkpoint["covers_through_seq"] if checkpoint is not None else 0,
                }
                for partition, checkpoint in covering
            ],
        }
