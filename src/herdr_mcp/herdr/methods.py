"""The Herdr socket methods herdr-mcp knows, with the JSON Schema of their params.

The schemas follow Herdr's published request schema (`herdr api schema --json`, protocol 18-22)
for the fields herdr-mcp uses, and are stricter in one way: unknown params are refused
(`additionalProperties: false`), so a typo fails loudly instead of being ignored by Herdr.
The simulator (`herdr_mcp.sim`) validates params against this same table, so whatever passes
here is what the simulator accepts.

`events.subscribe` is in the table for validation only: it streams, so it is marked
`streaming=True` and must not be offered through a one-shot passthrough.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

AGENT_STATUSES: tuple[str, ...] = ("idle", "working", "blocked", "done", "unknown")
"""Herdr's agent states; `done` means idle and not yet seen by the user."""

READ_SOURCES: tuple[str, ...] = ("visible", "recent", "recent_unwrapped", "detection")

LIFECYCLE_SUBSCRIPTIONS: tuple[str, ...] = (
    "workspace.created",
    "workspace.updated",
    "workspace.metadata_updated",
    "workspace.renamed",
    "workspace.moved",
    "workspace.closed",
    "workspace.focused",
    "worktree.created",
    "worktree.opened",
    "worktree.removed",
    "tab.created",
    "tab.closed",
    "tab.focused",
    "tab.renamed",
    "tab.moved",
    "pane.created",
    "pane.closed",
    "pane.updated",
    "pane.focused",
    "pane.moved",
    "pane.exited",
    "pane.agent_detected",
    "layout.updated",
)
"""Subscription types that stream lifecycle events; the event name is the type with `.` -> `_`."""

AGENT_STATUS_SUBSCRIPTION = "pane.agent_status_changed"
"""The filtered subscription for agent state: Herdr requires a `pane_id` (one pane per entry)."""

_UINT32_MAX = 4_294_967_295
_JSON_SAFE_INT_MAX = 2**53 - 1

_STRING: Mapping[str, Any] = {"type": "string"}
_STATUS: Mapping[str, Any] = {"type": "string", "enum": list(AGENT_STATUSES)}
_READ_SOURCE: Mapping[str, Any] = {"type": "string", "enum": list(READ_SOURCES)}
_READ_FORMAT: Mapping[str, Any] = {"type": "string", "enum": ["text", "ansi"]}
_LINES: Mapping[str, Any] = {"type": ["integer", "null"], "minimum": 0, "maximum": _UINT32_MAX}
_TIMEOUT_MS: Mapping[str, Any] = {"type": ["integer", "null"], "minimum": 0, "maximum": _JSON_SAFE_INT_MAX}
_UNTIL: Mapping[str, Any] = {"type": "array", "items": _STATUS}


def _params(properties: Mapping[str, Any] | None = None, *required: str) -> dict[str, Any]:
    """An object schema that refuses unknown fields."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": dict(properties or {}),
        "additionalProperties": False,
    }
    if required:
        schema["required"] = list(required)
    return schema


_READ_OPTIONS: Mapping[str, Any] = {
    "source": _READ_SOURCE,
    "lines": _LINES,
    "format": _READ_FORMAT,
    "strip_ansi": {"type": "boolean"},
}

_SUBSCRIPTION: Mapping[str, Any] = {
    "oneOf": [
        _params({"type": {"type": "string", "enum": list(LIFECYCLE_SUBSCRIPTIONS)}}, "type"),
        _params(
            {
                "type": {"const": AGENT_STATUS_SUBSCRIPTION},
                "pane_id": _STRING,
                "agent_status": {"anyOf": [_STATUS, {"type": "null"}]},
            },
            "type",
            "pane_id",
        ),
    ]
}


@dataclass(frozen=True)
class NativeMethod:
    """One Herdr socket method: what it does, its params schema, and whether it changes state."""

    name: str
    summary: str
    params_schema: Mapping[str, Any]
    result_type: str
    mutates: bool
    streaming: bool = False


def _method(
    name: str,
    summary: str,
    params_schema: dict[str, Any],
    result_type: str,
    *,
    mutates: bool = False,
    streaming: bool = False,
) -> NativeMethod:
    return NativeMethod(name, summary, params_schema, result_type, mutates, streaming)


_TABLE: tuple[NativeMethod, ...] = (
    _method("ping", "Check that Herdr answers; returns its version and protocol number.", _params(), "pong"),
    _method(
        "session.snapshot",
        "One-shot bootstrap of everything: workspaces, tabs, panes, layouts and agents.",
        _params(),
        "session_snapshot",
    ),
    _method("workspace.list", "List workspaces with their agent status rollup.", _params(), "workspace_list"),
    _method(
        "workspace.get",
        "Get one workspace by id (w1).",
        _params({"workspace_id": _STRING}, "workspace_id"),
        "workspace_info",
    ),
    _method(
        "tab.list",
        "List tabs, optionally of one workspace.",
        _params({"workspace_id": {"type": ["string", "null"]}}),
        "tab_list",
    ),
    _method("tab.get", "Get one tab by id (w1:t1).", _params({"tab_id": _STRING}, "tab_id"), "tab_info"),
    _method(
        "pane.list",
        "List panes with cwd, agent and status, optionally of one workspace.",
        _params({"workspace_id": {"type": ["string", "null"]}}),
        "pane_list",
    ),
    _method("pane.get", "Get one pane by id (w1:p1).", _params({"pane_id": _STRING}, "pane_id"), "pane_info"),
    _method(
        "pane.read",
        "Read a pane's terminal text: visible screen, recent scrollback (wrapped or unwrapped).",
        _params({"pane_id": _STRING, **_READ_OPTIONS}, "pane_id", "source"),
        "pane_read",
    ),
    _method(
        "pane.send_input",
        "Type text and/or key combos (enter, esc, ctrl+c, ...) into a pane.",
        _params(
            {"pane_id": _STRING, "text": _STRING, "keys": {"type": "array", "items": _STRING}}, "pane_id"
        ),
        "ok",
        mutates=True,
    ),
    _method(
        "agent.list", "List agents with name, kind, status and state_change_seq.", _params(), "agent_list"
    ),
    _method(
        "agent.get",
        "Get one agent by target: agent name, pane id, or a workspace id holding exactly one agent.",
        _params({"target": _STRING}, "target"),
        "agent_info",
    ),
    _method(
        "agent.read",
        "Read an agent pane's terminal text (same options as pane.read).",
        _params({"target": _STRING, **_READ_OPTIONS}, "target", "source"),
        "pane_read",
    ),
    _method(
        "agent.prompt",
        "Submit a prompt to an agent; with wait, also wait for it to reach one of wait.until.",
        _params(
            {
                "target": _STRING,
                "text": _STRING,
                "wait": {
                    "anyOf": [
                        _params({"until": _UNTIL, "timeout_ms": _TIMEOUT_MS}),
                        {"type": "null"},
                    ]
                },
            },
            "target",
            "text",
        ),
        "agent_prompted",
        mutates=True,
    ),
    _method(
        "agent.wait",
        "Wait until an agent is in one of `until` (default idle, done, blocked); error timeout otherwise.",
        _params({"target": _STRING, "until": _UNTIL, "timeout_ms": _TIMEOUT_MS}, "target"),
        "agent_info",
    ),
    _method(
        "events.subscribe",
        "Stream lifecycle events and pane.agent_status_changed on a held-open connection.",
        _params({"subscriptions": {"type": "array", "items": _SUBSCRIPTION}}, "subscriptions"),
        "subscription_started",
        streaming=True,
    ),
)

NATIVE_METHODS: Mapping[str, NativeMethod] = MappingProxyType({m.name: m for m in _TABLE})
"""Every Herdr method herdr-mcp knows, by name. Passthrough must skip `streaming` entries."""
