"""Handoff: the durable package a browser carries to a new conversation, and the handoff document.

**Packages** (`prepare`). One transfer has one package, stored whole: preparing the same
`transfer_id` again returns the same package, byte for byte; the same id with another request is
`handoff_transfer_conflict`. The package reuses the chain's existing `continuity_id`, keeps the
`source_url` exactly as given, names the Work Memory partition when `work_chain_id` is given, and
carries one compact continuation message that is both `automatic_delivery.params.message` and
`manual_delivery.copy_prompt` (the same string). The message holds pointers, not a summary: the
new conversation calls `continuity.resume` (and `work_memory.resume`) and re-inspects live state.
Its first line is the seed marker the browser looks for before cutting over. Preparing writes
only the transfer row; the source chain is never changed, and when the journal is unavailable
nothing is written at all.

**Documents** (`HandoffDocument`, `build_document`). A handoff document has six sections, in this
order: Goal, Constraints & Preferences, Progress, Key Decisions, Critical Context, Next Steps.
Seed 003 describes a /handoff that takes "the last assistant text" on trust; here a document is
validated, not assumed:

- `HandoffDocument.parse` checks every section is present, once, in order and non-empty (a
  section with nothing to say says "None"), and reports exactly which are missing, duplicated,
  out of order, empty or unexpected (`handoff_document_invalid`);
- empty output is its own failure, `handoff_document_empty`, never reported as a cancellation;
- a built document records its lineage (chain, the turns and checkpoint it was built from, the
  parent transfer) in its first lines and in `continuity_handoff_documents`.

`build_document` needs at least two journaled messages (`handoff_too_few_messages`).
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.state.continuity_identity import parse_conversation_url
from herdr_mcp.state.journal import (
    NOT_LIVE_STATE,
    bounded_tail,
    chain_row,
    iso_ms,
    journal_transaction,
    new_id,
    now_ms,
    request_hash,
    search_turns,
    sha256_hex,
)
from herdr_mcp.state.journal_text import clip, query_terms
from herdr_mcp.state.store import StateStore
from herdr_mcp.state.work_memory import PartitionKey, checkpoint_evidence, latest_verified
from herdr_mcp.text import cleans_params

SECTIONS = (
    "Goal",
    "Constraints & Preferences",
    "Progress",
    "Key Decisions",
    "Critical Context",
    "Next Steps",
)
#: A handoff of fewer messages carries no signal (seed 003 keeps the same floor).
MIN_MESSAGES = 2
#: The seed marker starts every continuation message; the browser confirms a cutover by it.
SEED_MARKER = "[herdr-handoff"
#: What a new conversation is told to call first.
RESUME_METHOD = "herdr_mcp.continuity.resume"
WORK_MEMORY_RESUME_METHOD = "herdr_mcp.work_memory.resume"
AUTOMATIC_DELIVERY_METHOD = "browser_session.create"
DEFAULT_DOCUMENT_TURNS = 12
MAX_DOCUMENT_TURNS = 50
#: Characters of turn text a built document draws from: the raw tail after the checkpoint.
DOCUMENT_TAIL_CHARS = 20_000
#: Characters shown per turn in a built document.
DOCUMENT_TURN_CHARS = 300
FOCUS_MATCHES = 5


# ---------------------------------------------------------------------------------------------
# Packages


@cleans_params
def prepare(store: StateStore, params: dict[str, Any]) -> dict[str, Any]:
    """The durable handoff package of one transfer (the same package every time it is asked for).

    Raises ToolError `continuity_journal_unavailable`, `continuity_not_found`,
    `handoff_source_mismatch`, `handoff_transfer_conflict`, `conversation_url_unrecognized`,
    `work_memory_partition_not_found`, `work_memory_partition_ambiguous`.
    """
    transfer_id: str = params["transfer_id"]
    continuity_id: str = params["continuity_id"]
    source_url: str = params["source_url"]
    digest = request_hash(params)
    with journal_transaction(store, write=True) as conn:
        stored = conn.execute(
            "SELECT request_sha256, package_json FROM continuity_transfers WHERE transfer_id = ?",
            (transfer_id,),
        ).fetchone()
        if stored is not None:
            if stored["request_sha256"] != digest:
                raise ToolError(
                    "handoff_transfer_conflict",
                    f"Transfer {transfer_id!r} was prepared for another chain, source or work chain; "
                    "use a new transfer_id for a new handoff.",
                    transfer_id=transfer_id,
                )
            package: dict[str, Any] = json.loads(stored["package_json"])
            return package
        chain = chain_row(conn, continuity_id)
        location = _source_location(conn, continuity_id, source_url)
        key = _named_partition(conn, continuity_id, params.get("work_chain_id"))
        checkpoint = _partition_checkpoint(conn, key)
        parent = _parent_transfer(conn, continuity_id)
        message = continuation_message(transfer_id, continuity_id, source_url, chain["title"], key)
        target: dict[str, Any] = {"site": location[0]}
        if location[1] is not None:
            target["project_id"] = location[1]
        now = now_ms()
        package = {
            "transfer_id": transfer_id,
            "continuity_id": continuity_id,
            "source_url": source_url,
            "work_chain_id": params.get("work_chain_id"),
            "work_memory": key.to_dict() if key is not None else None,
            "parent_transfer_id": parent,
            "through_seq": chain["turn_count"],
            "checkpoint_revision": checkpoint["revision"] if checkpoint is not None else None,
            "target_context": target,
            "message": message,
            "message_sha256": sha256_hex(message),
            "automatic_delivery": {
                "method": AUTOMATIC_DELIVERY_METHOD,
                "params": {**target, "message": message},
            },
            "manual_delivery": {"copy_prompt": message},
            "created_at": iso_ms(now),
        }
        conn.execute(
            "INSERT INTO continuity_transfers (transfer_id, continuity_id, parent_transfer_id, "
            "request_sha256, source_url, work_chain_id, through_seq, checkpoint_id, package_json, "
            "browser_session_ref, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                transfer_id,
                continuity_id,
                parent,
                digest,
                source_url,
                params.get("work_chain_id"),
                chain["turn_count"],
                checkpoint["checkpoint_id"] if checkpoint is not None else None,
                json.dumps(package, ensure_ascii=False),
                params.get("browser_session_ref"),
                now,
            ),
        )
        return package


def continuation_message(
    transfer_id: str, continuity_id: str, source_url: str, title: str | None, key: PartitionKey | None
) -> str:
    """The compact message a new conversation starts from: a seed marker and where to resume."""
    about = f" ({clip(title, 120)})" if title else ""
    steps = [
        f'Call herdr_call with method "{RESUME_METHOD}" and params '
        + json.dumps({"continuity_id": continuity_id}, ensure_ascii=False)
        + "."
    ]
    if key is not None:
        steps.append(
            f'Call herdr_call with method "{WORK_MEMORY_RESUME_METHOD}" and params '
            + json.dumps(key.to_dict(), ensure_ascii=False)
            + "."
        )
    steps.append(
        "Treat what they return as memory, not live state: re-inspect the Herdr workspace, Git "
        "and the runtime before any change."
    )
    lines = [
        f"{SEED_MARKER} transfer={transfer_id} continuity={continuity_id}]",
        f"Continue the work of an earlier conversation{about}.",
        f"Source conversation: {source_url}",
        *(f"{number}. {step}" for number, step in enumerate(steps, start=1)),
    ]
    return "\n".join(lines)


def _source_location(conn: sqlite3.Connection, continuity_id: str, source_url: str) -> tuple[str, str | None]:
    """(site, project_id) of the source conversation, which must journal into this chain."""
    location = parse_conversation_url(source_url)
    bound = None
    if location.conversation_id is not None:
        row = conn.execute(
            "SELECT continuity_id FROM continuity_bindings "
            "WHERE kind = 'conversation' AND site = ? AND value = ?",
            (location.site, location.conversation_id),
        ).fetchone()
        bound = row["continuity_id"] if row is not None else None
    if bound != continuity_id:
        raise ToolError(
            "handoff_source_mismatch",
            f"{source_url} is not a conversation journaled into chain {continuity_id!r}; prepare "
            "the handoff from the conversation the chain was resolved from.",
            bound_continuity_id=bound,
        )
    return location.site, location.project_id


def _named_partition(
    conn: sqlite3.Connection, continuity_id: str, work_chain_id: str | None
) -> PartitionKey | None:
    """The chain's partition with this work_chain_id (None when none was asked for)."""
    if work_chain_id is None:
        return None
    rows = conn.execute(
        "SELECT project_ref, repo_id, work_chain_id FROM work_memory_partitions "
        "WHERE continuity_id = ? AND work_chain_id = ? ORDER BY partition_id",
        (continuity_id, work_chain_id),
    ).fetchall()
    return _one_partition(rows, f"work_chain_id {work_chain_id!r}")


def _one_partition(rows: list[sqlite3.Row], what: str) -> PartitionKey:
    if not rows:
        raise ToolError(
            "work_memory_partition_not_found",
            f"The chain has no Work Memory partition with {what}; leave it out or write a checkpoint first.",
        )
    if len(rows) > 1:
        raise ToolError(
            "work_memory_partition_ambiguous",
            f"The chain has {len(rows)} Work Memory partitions with {what}; name the work chain.",
            partitions=[dict(row) for row in rows],
        )
    return PartitionKey(rows[0]["project_ref"], rows[0]["repo_id"], rows[0]["work_chain_id"])


def _partition_checkpoint(conn: sqlite3.Connection, key: PartitionKey | None) -> sqlite3.Row | None:
    if key is None:
        return None
    row = conn.execute(
        "SELECT partition_id FROM work_memory_partitions "
        "WHERE project_ref = ? AND repo_id = ? AND work_chain_id = ?",
        (key.project_ref, key.repo_id, key.work_chain_id),
    ).fetchone()
    return latest_verified(conn, row["partition_id"])


def _parent_transfer(conn: sqlite3.Connection, continuity_id: str) -> str | None:
    row = conn.execute(
        "SELECT transfer_id FROM continuity_transfers WHERE continuity_id = ? "
        "ORDER BY created_at DESC, rowid DESC LIMIT 1",
        (continuity_id,),
    ).fetchone()
    return row["transfer_id"] if row is not None else None


# ---------------------------------------------------------------------------------------------
# Documents

_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_NUMBERING = re.compile(r"^\d+[.)]\s*")


def _heading_key(title: str) -> str:
    title = _NUMBERING.sub("", title.strip()).rstrip(":").strip()
    return " ".join(title.split()).casefold().replace(" and ", " & ")


_SECTION_KEYS = {_heading_key(name): name for name in SECTIONS}


@dataclass(frozen=True)
class HandoffDocument:
    """A handoff document known to have the six sections, once each, in order, none empty."""

    text: str
    sections: tuple[tuple[str, str], ...]

    def section(self, name: str) -> str:
        return dict(self.sections)[name]

    @classmethod
    def parse(cls, text: str) -> HandoffDocument:
        """Validate `text` as a handoff document (markdown headings, any one level).

        Text before the first section (a title, a lineage comment) is allowed; headings deeper
        than the sections' level belong to the section they are in; headings inside code fences
        are text. Raises ToolError `handoff_document_empty` or `handoff_document_invalid` (with
        `missing`, `duplicate`, `out_of_order`, `empty` and `unexpected` lists).
        """
        if not text.strip():
            raise ToolError(
                "handoff_document_empty",
                "The handoff document is empty: nothing was produced. That is a failure, not a "
                "cancellation; build it again (herdr-mcp handoff) or write the six sections.",
            )
        found, unexpected = _split_sections(text)
        names = [name for name, _ in found]
        duplicate = sorted({name for name in names if names.count(name) > 1}, key=SECTIONS.index)
        first = dict(reversed(found))
        missing = [name for name in SECTIONS if name not in first]
        empty = [name for name in SECTIONS if name in first and not first[name].strip()]
        out_of_order: list[str] = []
        highest = -1
        for name in dict.fromkeys(names):
            if SECTIONS.index(name) < highest:
                out_of_order.append(name)
            highest = max(highest, SECTIONS.index(name))
        problems = {
            "missing": missing,
            "duplicate": duplicate,
            "out_of_order": out_of_order,
            "empty": empty,
            "unexpected": unexpected,
        }
        if any(problems.values()):
            said = "; ".join(
                f"{kind.replace('_', ' ')}: {', '.join(items)}" for kind, items in problems.items() if items
            )
            raise ToolError(
                "handoff_document_invalid",
                f"The handoff document is not valid ({said}). Write the sections "
                f"{', '.join(SECTIONS)} once each, in that order; put 'None' in a section with "
                "nothing to say.",
                **problems,
            )
        return cls(text, tuple((name, first[name].strip()) for name in SECTIONS))


def _split_sections(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(section name, body) in order of appearance, and headings that are not sections."""
    found: list[tuple[str, list[str]]] = []
    unexpected: list[str] = []
    level: int | None = None
    fence: str | None = None
    current: list[str] | None = None
    for line in text.splitlines():
        opened = _FENCE.match(line)
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
        elif opened:
            fence = opened.group(1)
        else:
            heading = _HEADING.match(line)
            if heading is not None:
                depth, title = len(heading.group(1)), heading.group(2)
                name = _SECTION_KEYS.get(_heading_key(title))
                if level is None and name is not None:
                    level = depth
                if level is not None and depth <= level:
                    if name is not None and depth == level:
                        current = []
                        found.append((name, current))
                    else:
                        unexpected.append(title)
                        current = None
                    continue
        if current is not None:
            current.append(line)
    return [(name, "\n".join(body)) for name, body in found], unexpected


def _bullets(items: list[str]) -> str:
    return "\n".join(f"- {item}" for item in items) if items else "None"


def build_document(
    store: StateStore,
    continuity_id: str,
    *,
    focus: str | None = None,
    work_chain_id: str | None = None,
    max_turns: int = DEFAULT_DOCUMENT_TURNS,
) -> dict[str, Any]:
    """Build, validate and record a handoff document of a chain, deterministically.

    It is drawn from the chain's latest verified checkpoint (of the partition `work_chain_id`
    names, or of the only partition that has one), the turns after it, the checkpoint's evidence
    and the chain's bindings; `focus` is stated in the Goal and its best matches in the chain are
    listed under Critical Context. Returns document, sections and lineage.

    Raises ToolError `handoff_too_few_messages`, `continuity_not_found`,
    `work_memory_partition_not_found`, `work_memory_partition_ambiguous`,
    `handoff_document_invalid` (a bug: the built text failed validation),
    `continuity_journal_unavailable`.
    """
    with journal_transaction(store, write=True) as conn:
        chain = chain_row(conn, continuity_id)
        if int(chain["turn_count"]) < MIN_MESSAGES:
            raise ToolError(
                "handoff_too_few_messages",
                f"Chain {continuity_id!r} has {chain['turn_count']} message(s); a handoff needs at "
                f"least {MIN_MESSAGES}. Continue in the current conversation instead.",
                message_count=chain["turn_count"],
            )
        key = _document_partition(conn, continuity_id, work_chain_id)
        checkpoint = _partition_checkpoint(conn, key)
        covered = int(checkpoint["covers_through_seq"]) if checkpoint is not None else 0
        tail, omitted = bounded_tail(
            conn, continuity_id, after_seq=covered, max_turns=max_turns, max_chars=DOCUMENT_TAIL_CHARS
        )
        focus_rows: list[sqlite3.Row] = []
        if focus and query_terms(focus):
            focus_rows = search_turns(conn, focus, limit=FOCUS_MATCHES, continuity_id=continuity_id).rows
        document_id = new_id("hdoc_")
        lineage = {
            "document_id": document_id,
            "continuity_id": continuity_id,
            "through_seq": chain["turn_count"],
            "raw_turns": [tail[0]["seq"], tail[-1]["seq"]] if tail else None,
            "checkpoint": {**key.to_dict(), "revision": checkpoint["revision"], "covers_through_seq": covered}
            if key is not None and checkpoint is not None
            else None,
            "parent_transfer_id": _parent_transfer(conn, continuity_id),
            "focus": focus,
        }
        content = json.loads(checkpoint["content_json"]) if checkpoint is not None else None
        sections = {
            "Goal": _goal(conn, chain, content, focus),
            "Constraints & Preferences": _bullets(content["constraints"] if content else []),
            "Progress": _progress(content, covered, tail, omitted),
            "Key Decisions": _bullets(content["decisions"] if content else []),
            "Critical Context": _critical_context(conn, continuity_id, key, content, checkpoint, focus_rows),
            "Next Steps": _next_steps(content, tail),
        }
        text = _render(chain["title"] or continuity_id, lineage, sections)
        document = HandoffDocument.parse(text)
        now = now_ms()
        conn.execute(
            "INSERT INTO continuity_handoff_documents (document_id, continuity_id, through_seq, "
            "checkpoint_id, parent_transfer_id, focus, document, document_sha256, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                document_id,
                continuity_id,
                chain["turn_count"],
                checkpoint["checkpoint_id"] if checkpoint is not None else None,
                lineage["parent_transfer_id"],
                focus,
                text,
                sha256_hex(text),
                now,
            ),
        )
        return {
            "document_id": document_id,
            "continuity_id": continuity_id,
            "document": document.text,
            "sections": [name for name, _ in document.sections],
            "lineage": lineage,
            "created_at": iso_ms(now),
        }


def _document_partition(
    conn: sqlite3.Connection, continuity_id: str, work_chain_id: str | None
) -> PartitionKey | None:
    """The named partition, else the only one with a verified checkpoint (never a guess among several)."""
    if work_chain_id is not None:
        return _named_partition(conn, continuity_id, work_chain_id)
    rows = conn.execute(
        "SELECT project_ref, repo_id, work_chain_id FROM work_memory_partitions p WHERE continuity_id = ? "
        "AND EXISTS (SELECT 1 FROM work_memory_checkpoints c WHERE c.partition_id = p.partition_id "
        "AND c.verified = 1) ORDER BY partition_id",
        (continuity_id,),
    ).fetchall()
    return _one_partition(rows, "a verified checkpoint") if rows else None


def _render(title: str, lineage: dict[str, Any], sections: dict[str, str]) -> str:
    checkpoint = lineage["checkpoint"]
    built_from = f"{checkpoint['work_chain_id']}@r{checkpoint['revision']}" if checkpoint else "none"
    lines = [
        f"# Handoff: {clip(title, 120)}",
        "",
        f"<!-- herdr-handoff document={lineage['document_id']} continuity={lineage['continuity_id']} "
        f"through_seq={lineage['through_seq']} "
        f"checkpoint={built_from} "
        f"parent_transfer={lineage['parent_transfer_id'] or 'none'} -->",
    ]
    for name in SECTIONS:
        lines += ["", f"## {name}", "", sections[name]]
    return "\n".join(lines) + "\n"


def _goal(
    conn: sqlite3.Connection, chain: sqlite3.Row, content: dict[str, Any] | None, focus: str | None
) -> str:
    if content is not None:
        goal = str(content["goal"])
    else:
        first = conn.execute(
            "SELECT seq, body FROM continuity_turns WHERE continuity_id = ? AND role = 'user' "
            "AND reclaimed_at IS NULL ORDER BY seq LIMIT 1",
            (chain["continuity_id"],),
        ).fetchone()
        if first is not None:
            goal = f"As first asked (message {first['seq']}): {clip(first['body'], 2 * DOCUMENT_TURN_CHARS)}"
        else:
            goal = f"Continue the work titled {chain['title']!r}."
    if focus:
        goal += f"\n\nFocus for the next session: {clip(focus, 2 * DOCUMENT_TURN_CHARS)}"
    return goal


def _turn_line(turn: dict[str, Any]) -> str:
    text = (
        "(reclaimed; covered by the checkpoint)"
        if turn["reclaimed"]
        else clip(turn["text"], DOCUMENT_TURN_CHARS)
    )
    return f"[message {turn['seq']}] {turn['role']}: {text}"


def _progress(content: dict[str, Any] | None, covered: int, tail: list[dict[str, Any]], omitted: int) -> str:
    parts: list[str] = []
    if content is not None and content["progress"]:
        parts.append(f"As of the checkpoint (messages 1-{covered}):\n{_bullets(content['progress'])}")
    if tail:
        earlier = f"; {omitted} earlier message(s) not shown" if omitted else ""
        header = f"Since then (messages {tail[0]['seq']}-{tail[-1]['seq']}{earlier}):"
        parts.append(header + "\n" + "\n".join(f"- {_turn_line(turn)}" for turn in tail))
    return "\n\n".join(parts) if parts else "None"


def _critical_context(
    conn: sqlite3.Connection,
    continuity_id: str,
    key: PartitionKey | None,
    content: dict[str, Any] | None,
    checkpoint: sqlite3.Row | None,
    focus_rows: list[sqlite3.Row],
) -> str:
    items = list(content["critical_context"]) if content else []
    if key is not None:
        items.append(
            f"Work Memory: project_ref {key.project_ref}, repo_id {key.repo_id}, "
            f"work_chain_id {key.work_chain_id}"
        )
    if checkpoint is not None:
        for evidence in checkpoint_evidence(conn, checkpoint["checkpoint_id"]):
            if evidence["kind"] == "message":
                items.append(
                    f"Evidence, message {evidence['seq']}: \u201c{clip(evidence['quote'] or '', 200)}\u201d"
                )
            else:
                note = f" ({clip(evidence['note'], 200)})" if evidence["note"] else ""
                items.append(f"Evidence, {evidence['kind']}: {evidence['ref']}{note}")
    for row in conn.execute(
        "SELECT kind, site, value, url FROM continuity_bindings WHERE continuity_id = ? "
        "ORDER BY kind, site, value",
        (continuity_id,),
    ).fetchall():
        where = row["url"] or row["value"]
        items.append(
            f"Bound {row['kind']}"
            + (f" ({row['site']})" if row["kind"] != "workspace" else "")
            + f": {where}"
        )
    items.extend(
        f"Relevant to the focus, message {row['seq']} ({row['role']}): "
        + clip(row["body"], DOCUMENT_TURN_CHARS)
        for row in focus_rows
    )
    items.append(f"Continuity chain: {continuity_id}. {NOT_LIVE_STATE}")
    return _bullets(items)


def _next_steps(content: dict[str, Any] | None, tail: list[dict[str, Any]]) -> str:
    items = list(content["next_steps"]) if content else []
    latest_user = next(
        (turn for turn in reversed(tail) if turn["role"] == "user" and not turn["reclaimed"]), None
    )
    if latest_user is not None:
        items.append(
            f"Carry on from the latest request (message {latest_user['seq']}): "
            f"{clip(latest_user['text'], DOCUMENT_TURN_CHARS)}"
        )
    items.append("Re-inspect the Herdr workspace, Git status and running agents, then continue.")
    return _bullets(items)
