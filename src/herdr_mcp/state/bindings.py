"""Browser scope bindings: which Herdr workspace a web conversation scope follows.

A *scope* (`browser_session_ref`) names one web conversation scope (docs/browser-protocol.md,
section 2): `chatgpt:project:<project id>` (every conversation of a ChatGPT Project shares it),
`chatgpt:conv:<id>`, `zai:conv:<chat id>`, `deepseek:conv:<id>`, or `<site>:root:<tab-local id>`
for a binding made on a site's root page before a conversation exists. A binding maps one scope
to one workspace; a workspace may be bound by several scopes. `workspace_id` is the identity;
`label` is for display only (refreshed from the live workspace list by the runtime);
`active_conv_key` is the conversation inside a Project scope that wakes and progress go to.

Every function is one transaction and raises `ToolError` with a stable code:
`invalid_argument` (a malformed scope, workspace id, label or conversation key).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.state.store import StateStore

MAX_SCOPE_CHARS = 256
SCOPE_PATTERN = r"^(chatgpt|zai|deepseek):(project|conv|root):[A-Za-z0-9._:-]{1,200}$"
WORKSPACE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$"
#: A conversation inside the scope, as the site's path names it (`/c/<id>`).
CONV_KEY_PATTERN = r"^/[A-Za-z0-9._:/-]{1,255}$"
MAX_LABEL_CHARS = 200
_SCOPE = re.compile(SCOPE_PATTERN)
_WORKSPACE = re.compile(WORKSPACE_ID_PATTERN)
_CONV_KEY = re.compile(CONV_KEY_PATTERN)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def check_scope(value: object, argument: str = "scope") -> str:
    """`value` if it is a well-formed scope, else `ToolError("invalid_argument")`."""
    if not isinstance(value, str) or len(value) > MAX_SCOPE_CHARS or not _SCOPE.match(value):
        raise ToolError(
            "invalid_argument",
            f"{argument} must match {SCOPE_PATTERN} (at most {MAX_SCOPE_CHARS} characters), "
            "e.g. chatgpt:project:g-p-1234 or zai:conv:abc",
            argument=argument,
        )
    return value


def check_workspace_id(value: object) -> str:
    if not isinstance(value, str) or not _WORKSPACE.match(value):
        raise ToolError(
            "invalid_argument",
            f"workspace_id must be a Herdr workspace id matching {WORKSPACE_ID_PATTERN}",
            argument="workspace_id",
        )
    return value


def _check_label(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_LABEL_CHARS or _CONTROL.search(value):
        raise ToolError(
            "invalid_argument",
            f"label must be text of at most {MAX_LABEL_CHARS} characters without control characters",
            argument="label",
        )
    return value


def display_label(value: object) -> str | None:
    """A label as Herdr gives it, made fit for a binding: control characters dropped, clipped."""
    if not isinstance(value, str):
        return None
    return _CONTROL.sub("", value)[:MAX_LABEL_CHARS] or None


def _check_conv_key(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _CONV_KEY.match(value):
        raise ToolError(
            "invalid_argument",
            f"active_conv_key must be a conversation path such as /c/<id> (matching {CONV_KEY_PATTERN})",
            argument="active_conv_key",
        )
    return value


@dataclass(frozen=True)
class Binding:
    scope: str
    workspace_id: str
    label: str | None
    active_conv_key: str | None
    created_at: int
    updated_at: int

    @classmethod
    def from_row(cls, row: Any) -> Binding:
        return cls(
            scope=row["scope"],
            workspace_id=row["workspace_id"],
            label=row["label"],
            active_conv_key=row["active_conv_key"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "workspace_id": self.workspace_id,
            "label": self.label,
            "active_conv_key": self.active_conv_key,
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
        }


class BindingStore:
    """The `browser_bindings` table."""

    def __init__(self, store: StateStore) -> None:
        self._store = store

    def get(self, scope: str) -> Binding | None:
        row = (
            self._store.connection()
            .execute("SELECT * FROM browser_bindings WHERE scope = ?", (check_scope(scope),))
            .fetchone()
        )
        return Binding.from_row(row) if row else None

    def all(self) -> list[Binding]:
        rows = self._store.connection().execute("SELECT * FROM browser_bindings ORDER BY scope").fetchall()
        return [Binding.from_row(row) for row in rows]

    def scopes_for(self, workspace_id: str) -> list[str]:
        """The scopes bound to `workspace_id`, sorted."""
        rows = self._store.connection().execute(
            "SELECT scope FROM browser_bindings WHERE workspace_id = ? ORDER BY scope", (workspace_id,)
        )
        return [row["scope"] for row in rows]

    def put(
        self,
        scope: str,
        workspace_id: str,
        *,
        label: str | None = None,
        active_conv_key: str | None = None,
    ) -> Binding:
        """Bind `scope` to `workspace_id` (replacing its binding; `created_at` is kept when the
        scope was bound before)."""
        scope = check_scope(scope)
        workspace_id = check_workspace_id(workspace_id)
        label = _check_label(label)
        active_conv_key = _check_conv_key(active_conv_key)
        now = _now_ms()
        with self._store.transaction() as tx:
            tx.execute(
                """INSERT INTO browser_bindings
                       (scope, workspace_id, label, active_conv_key, created_at, updated_at)
                   VALUES (?, ?, ?, ?, ?, ?)
                   ON CONFLICT (scope) DO UPDATE SET
                       workspace_id = excluded.workspace_id, label = excluded.label,
                       active_conv_key = excluded.active_conv_key, updated_at = excluded.updated_at""",
                (scope, workspace_id, label, active_conv_key, now, now),
            )
            row = tx.execute("SELECT * FROM browser_bindings WHERE scope = ?", (scope,)).fetchone()
        return Binding.from_row(row)

    def delete(self, scope: str) -> bool:
        """Forget the binding of `scope`; whether there was one."""
        with self._store.transaction() as tx:
            cursor = tx.execute("DELETE FROM browser_bindings WHERE scope = ?", (check_scope(scope),))
        return cursor.rowcount > 0

    def refresh_labels(self, labels: Mapping[str, str | None]) -> int:
        """Set the label of every binding whose workspace is in `labels` (workspace id -> the live
        label) where it differs; how many bindings changed. `updated_at` is left alone: a label
        is display, not a change of the binding."""
        changed = 0
        with self._store.transaction() as tx:
            for workspace_id, live in labels.items():
                label = display_label(live)
                cursor = tx.execute(
                    "UPDATE browser_bindings SET label = ? WHERE workspace_id = ? AND label IS NOT ?",
                    (label, workspace_id, label),
                )
                changed += cursor.rowcount
        return changed
