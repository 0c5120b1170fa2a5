"""The internal herdr_call methods of the Continuity Journal, Work Memory and handoff packages.

Each `MethodSpec` names a method, says what it does, gives its params as a JSON Schema (draft
2020-12: closed objects, required fields, bounded strings, integers and arrays), says whether it
writes, and runs it. `run` is synchronous and does one state.db transaction; the runtime validates
params against `params_schema` first and calls `run` in a worker thread. Every refusal is a
`ToolError` with a stable code (listed in each module's docstrings).

`browser_session_ref` is accepted where a browser session acts (appending, checkpointing,
preparing a handoff) and recorded as provenance; it does not filter what a read returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from herdr_mcp.state import continuity, continuity_identity, handoff, journal, work_memory
from herdr_mcp.state.store import StateStore


@dataclass(frozen=True)
class MethodSpec:
    name: str
    summary: str
    params_schema: dict[str, Any]
    mutates: bool
    run: Callable[[StateStore, dict[str, Any]], dict[str, Any]]


_ID = "^[A-Za-z0-9][A-Za-z0-9._:-]*$"


def _id(description: str, *, max_length: int = 128) -> dict[str, Any]:
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": max_length,
        "pattern": _ID,
        "description": description,
    }


def _text(description: str, max_length: int, *, min_length: int = 1) -> dict[str, Any]:
    return {"type": "string", "minLength": min_length, "maxLength": max_length, "description": description}


def _int(description: str, minimum: int, maximum: int, default: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "integer",
        "minimum": minimum,
        "maximum": maximum,
        "description": description,
    }
    if default is not None:
        schema["default"] = default
    return schema


def _object(properties: dict[str, Any], required: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
        **extra,
    }


_SCOPE = _text("The caller's browser session scope, recorded as provenance.", 256)
_CONTINUITY_ID = _id("The continuity chain's id (continuity_id).")
_SITE = {"type": "string", "enum": list(continuity_identity.SITES), "description": "The Web AI site."}
_CONVERSATION_ID = _id("The site's conversation id (the <id> of its /c/<id> URL).", max_length=200)
_PROJECT_ID = _id("The site's project id (ChatGPT: g-p-...).", max_length=200)
_WORKSPACE_ID = _id("A Herdr workspace id.", max_length=200)
_URL = {
    "type": "string",
    "minLength": 9,
    "maxLength": 2048,
    "pattern": "^https://",
    "description": "The full https URL of a conversation (or ChatGPT project) as the browser shows it.",
}
_IDENTITY = {
    "continuity_id": _CONTINUITY_ID,
    "conversation_url": _URL,
    "site": _SITE,
    "conversation_id": _CONVERSATION_ID,
    "project_id": _PROJECT_ID,
    "workspace_id": _WORKSPACE_ID,
}
_NEEDS_SITE = {"conversation_id": ["site"], "project_id": ["site"]}
_RESUME_BOUNDS = {
    "max_turns": _int(
        "Most recent turns returned.", 1, journal.MAX_RESUME_TURNS, journal.DEFAULT_RESUME_TURNS
    ),
    "max_chars": _int(
        "Characters of turn text returned at most.",
        200,
        journal.MAX_RESUME_CHARS,
        journal.DEFAULT_RESUME_CHARS,
    ),
}
_PARTITION = {
    "project_ref": _text("The project the work belongs to (exact).", 256),
    "repo_id": _text("The repository's identity (exact).", 256),
    "work_chain_id": _id("The line of work inside the project and repository (exact).", max_length=200),
}
_SECTION_ITEMS = {"type": "array", "maxItems": 32, "items": _text("One item.", 2_000)}
_CONTENT = _object(
    {
        "goal": _text("What the work is for.", 4_000),
        **{name: _SECTION_ITEMS for name in work_memory.CONTENT_LISTS},
    },
    ("goal",),
)
_ANCHOR = {
    "oneOf": [
        _object(
            {
                "kind": {"const": "message"},
                "seq": _int("The turn's number in its chain.", 1, 2**62),
                "quote": _text("Words of that turn, verbatim (whitespace may differ).", 500),
                "continuity_id": _CONTINUITY_ID,
            },
            ("kind", "seq", "quote"),
        ),
        _object(
            {"kind": {"const": "evidence"}, "evidence_id": _id("Evidence recorded in this partition.")},
            ("kind", "evidence_id"),
        ),
        _object(
            {
                "kind": {"enum": list(work_memory.LOCAL_EVIDENCE_KINDS)},
                "ref": _text("What it is: a path, a commit, a command, a task id, a note.", 1_000),
                "note": _text("What it shows.", 2_000),
            },
            ("kind", "ref"),
        ),
    ]
}


CONTINUITY_METHODS: tuple[MethodSpec, ...] = (
    MethodSpec(
        "herdr_mcp.continuity.turn.append",
        "Journal one finalized user/assistant turn (idempotent per turn_key); binds the "
        "conversation, project and workspace named to the chain.",
        _object(
            {
                **_IDENTITY,
                "turn_key": _id("The site's stable id of this message (dedupe key).", max_length=200),
                "role": {"type": "string", "enum": ["user", "assistant"]},
                "text": _text("The finalized message text.", continuity.MAX_TURN_CHARS, min_length=0),
                "title": _text("The conversation's title as the site shows it.", 200),
                "browser_session_ref": _SCOPE,
            },
            ("turn_key", "role", "text"),
            dependentRequired=_NEEDS_SITE,
        ),
        True,
        continuity.append_turn,
    ),
    MethodSpec(
        "herdr_mcp.continuity.resolve",
        "Find the chain a conversation continues: a stable identity that leaves one chain resumes "
        "it; several chains or a text match return bounded candidates to confirm; never guesses.",
        _object(
            {
                **_IDENTITY,
                "text": _text("Words to search the journal for (needs the user's confirmation).", 500),
                "limit": _int(
                    "Candidates listed at most.", 1, continuity.MAX_CANDIDATES, continuity.DEFAULT_CANDIDATES
                ),
                **_RESUME_BOUNDS,
                "browser_session_ref": _SCOPE,
            },
            dependentRequired=_NEEDS_SITE,
        ),
        False,
        continuity.resolve,
    ),
    MethodSpec(
        "herdr_mcp.continuity.search",
        "Full-text search (FTS5) over journaled turns and verified checkpoints, best first, bounded.",
        _object(
            {
                "query": _text("Words to find (quotes and operators are plain text).", 500),
                "continuity_id": _CONTINUITY_ID,
                "limit": _int(
                    "Turn hits at most.", 1, continuity.MAX_SEARCH_LIMIT, continuity.DEFAULT_SEARCH_LIMIT
                ),
                "browser_session_ref": _SCOPE,
            },
            ("query",),
        ),
        False,
        continuity.search,
    ),
    MethodSpec(
        "herdr_mcp.continuity.resume",
        "Bounded recent context of one chain, by continuity_id, full conversation URL or stable "
        "identity (continuity_ambiguous lists candidates when several chains match).",
        _object(
            {**_IDENTITY, **_RESUME_BOUNDS, "browser_session_ref": _SCOPE},
            dependentRequired=_NEEDS_SITE,
        ),
        False,
        continuity.resume,
    ),
    MethodSpec(
        "herdr_mcp.work_memory.checkpoint.put",
        "Write the next Work Memory checkpoint of a partition by revision compare-and-swap, with "
        "evidence anchors from the same partition; says whether it verified.",
        _object(
            {
                **_PARTITION,
                "continuity_id": _CONTINUITY_ID,
                "expected_revision": _int("The revision this one replaces (0 for the first).", 0, 2**62),
                "covers_through_seq": _int("The last turn of the chain this checkpoint covers.", 1, 2**62),
                "content": _CONTENT,
                "anchors": {"type": "array", "maxItems": work_memory.MAX_ANCHORS, "items": _ANCHOR},
                "browser_session_ref": _SCOPE,
            },
            ("project_ref", "repo_id", "work_chain_id", "expected_revision", "covers_through_seq", "content"),
        ),
        True,
        work_memory.put_checkpoint,
    ),
    MethodSpec(
        "herdr_mcp.work_memory.resume",
        "The exact partition's latest verified checkpoint, the bounded raw turns after it, and its evidence.",
        _object({**_PARTITION, **_RESUME_BOUNDS, "browser_session_ref": _SCOPE}, tuple(_PARTITION)),
        False,
        work_memory.resume,
    ),
    MethodSpec(
        "herdr_mcp.work_memory.reclaim",
        "Blank the bodies of old turns that every partition's verified checkpoint covers (never "
        "uncovered or anchored turns); dry_run only counts.",
        _object(
            {
                "continuity_id": _CONTINUITY_ID,
                "max_turns": _int(
                    "Turns reclaimed at most in this call.",
                    1,
                    work_memory.MAX_RECLAIM_TURNS,
                    work_memory.DEFAULT_RECLAIM_TURNS,
                ),
                "dry_run": {"type": "boolean", "default": False},
                "browser_session_ref": _SCOPE,
            },
            ("continuity_id",),
        ),
        True,
        work_memory.reclaim,
    ),
    MethodSpec(
        "herdr_mcp.browser_handoff.prepare",
        "The one durable handoff package of a transfer (same package when asked again): existing "
        "continuity_id, exact source_url, optional work_chain_id, one compact message for automatic "
        "and manual delivery. Leaves the source chain unchanged.",
        _object(
            {
                "transfer_id": _id("The browser's id for this transfer (idempotency key)."),
                "continuity_id": _CONTINUITY_ID,
                "source_url": _URL,
                "work_chain_id": _PARTITION["work_chain_id"],
                "browser_session_ref": _SCOPE,
            },
            ("transfer_id", "continuity_id", "source_url"),
        ),
        True,
        handoff.prepare,
    ),
)
