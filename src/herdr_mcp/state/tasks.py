"""Agent tasks and the parent inbox: who asked what of which agent, and how it ended.

A task is one prompt submitted to a Herdr agent (herdr_prompt or herdr_mcp.agent.task.dispatch).
Its row is written BEFORE the prompt is sent (state `submitting`), so an agent status event that
races the submission answer is still attributed. The runtime feeds every agent status change of
a pane into `observe()`, which moves the pane's open tasks along these rules:

- If the target was already working at submission (`prior_settle_pending`), the first settle
  (idle, done or blocked) belongs to the previous turn: it is consumed and nothing is attributed.
- `working` afterwards is new activity (`saw_activity`).
- A settle after new activity is terminal: idle/done -> `completed`, blocked -> `blocked`
  (a blocked task that starts working again stays open and can still complete).
- A pane that closes fails its open tasks (`failed`).

Each terminal outcome writes one inbox row (unique per task and outcome), scoped by the caller's
`browser_session_ref`, so a settle is delivered exactly once even if it is observed twice (for
example once live and once by the restart reconciliation). `inbox()` lists what is not yet
acknowledged; `ack()` removes entries from that list.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from herdr_mcp.state.store import StateStore

#: Tasks in these states still wait for a settle (the queries below spell out all four).
OPEN_STATES = ("submitting", "submitted", "working", "blocked")
SETTLED_STATUSES = ("idle", "done", "blocked")
#: Inbox listings are bounded; the parent acknowledges and asks again.
INBOX_MAX_ITEMS = 100


def _now_ms() -> int:
    return int(time.time() * 1000)


def _settled_status(detail_json: str | None) -> str | None:
    if not detail_json:
        return None
    try:
        detail = json.loads(detail_json)
    except ValueError:
        return None
    status = detail.get("status") if isinstance(detail, dict) else None
    return status if isinstance(status, str) else None


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


@dataclass(frozen=True)
class Task:
    task_id: str
    turn_id: str
    target: str
    pane_id: str | None
    workspace_id: str | None
    agent_name: str | None
    browser_session_ref: str | None
    state: str
    prior_settle_pending: bool
    saw_activity: bool
    seq_at_submit: int | None
    submitted_at: int
    settled_status: str | None = None
    """The agent status the task settled on (idle, done, blocked), once it settled."""

    @classmethod
    def from_row(cls, row: Any) -> Task:
        return cls(
            task_id=row["task_id"],
            turn_id=row["turn_id"],
            target=row["target"],
            pane_id=row["pane_id"],
            workspace_id=row["workspace_id"],
            agent_name=row["agent_name"],
            browser_session_ref=row["browser_session_ref"],
            state=row["state"],
            prior_settle_pending=bool(row["prior_settle_pending"]),
            saw_activity=bool(row["saw_activity"]),
            seq_at_submit=row["seq_at_submit"],
            submitted_at=row["submitted_at"],
            settled_status=_settled_status(row["detail_json"]),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "dispatch_id": self.task_id,
            "turn_id": self.turn_id,
            "target": self.target,
            "pane_id": self.pane_id,
            "workspace_id": self.workspace_id,
            "agent": self.agent_name,
            "state": self.state,
            "submitted_at": _iso(self.submitted_at),
        }


@dataclass(frozen=True)
class Settled:
    """A terminal outcome just written to the inbox."""

    task: Task
    outcome: str
    inbox_id: int


class TaskStore:
    """The tasks and inbox tables; every method is one transaction."""

    def __init__(self, store: StateStore) -> None:
        self._store = store

    def create(
        self,
        *,
        task_id: str,
        turn_id: str,
        target: str,
        agent: dict[str, Any],
        browser_session_ref: str | None,
        op_id: str | None = None,
    ) -> Task:
        """Record a task before its prompt is sent."""
        status = agent.get("agent_status")
        with self._store.transaction() as tx:
            tx.execute(
                """INSERT INTO tasks (task_id, turn_id, op_id, browser_session_ref, target, pane_id,
                       workspace_id, agent_name, status_at_submit, seq_at_submit, prior_settle_pending,
                       state, submitted_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'submitting', ?)""",
                (
                    task_id,
                    turn_id,
                    op_id,
                    browser_session_ref,
                    target,
                    agent.get("pane_id"),
                    agent.get("workspace_id"),
                    agent.get("name"),
                    status,
                    agent.get("state_change_seq"),
                    int(status == "working"),
                    _now_ms(),
                ),
            )
            row = tx.execute("SELECT * FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
        return Task.from_row(row)

    def mark_submitted(self, task_id: str) -> None:
        with self._store.transaction() as tx:
            tx.execute(
                "UPDATE tasks SET state = 'submitted' WHERE task_id = ? AND state = 'submitting'", (task_id,)
            )

    def discard(self, task_id: str) -> None:
        """Forget a task whose prompt was certainly never delivered."""
        with self._store.transaction() as tx:
            tx.execute("DELETE FROM tasks WHERE task_id = ?", (task_id,))

    def get(self, task_id: str) -> Task | None:
        row = self._store.connection().execute("SELECT * FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
        return Task.from_row(row) if row else None

    def by_operation(self, op_id: str) -> Task | None:
        row = self._store.connection().execute("SELECT * FROM tasks WHERE op_id = ?", (op_id,)).fetchone()
        return Task.from_row(row) if row else None

    def open_tasks(self) -> list[Task]:
        rows = self._store.connection().execute(
            "SELECT * FROM tasks WHERE state IN (?, ?, ?, ?) ORDER BY submitted_at", OPEN_STATES
        )
        return [Task.from_row(row) for row in rows]

    def open_panes(self) -> set[str]:
        return {task.pane_id for task in self.open_tasks() if task.pane_id}

    def observe(self, pane_id: str, status: str, detail: dict[str, Any] | None = None) -> list[Settled]:
        """Apply one agent status change of `pane_id` to its open tasks (oldest first)."""
        settled: list[Settled] = []
        with self._store.transaction() as tx:
            rows = tx.execute(
                "SELECT * FROM tasks WHERE pane_id = ? AND state IN (?, ?, ?, ?) ORDER BY submitted_at",
                (pane_id, *OPEN_STATES),
            ).fetchall()
            for task in map(Task.from_row, rows):
                outcome = self._step(tx, task, status)
                if outcome is not None:
                    settled.append(self._settle(tx, task, outcome, detail or {}))
        return settled

    def fail_pane(self, pane_id: str, reason: str) -> list[Settled]:
        """The pane (and its agent) is gone: every open task there failed."""
        with self._store.transaction() as tx:
            rows = tx.execute(
                "SELECT * FROM tasks WHERE pane_id = ? AND state IN (?, ?, ?, ?)",
                (pane_id, *OPEN_STATES),
            ).fetchall()
            return [self._settle(tx, Task.from_row(row), "failed", {"reason": reason}) for row in rows]

    def settle(self, task_id: str, outcome: str, detail: dict[str, Any]) -> Settled | None:
        """Settle one open task directly (restart reconciliation)."""
        with self._store.transaction() as tx:
            row = tx.execute("SELECT * FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
            if row is None or row["state"] not in OPEN_STATES:
                return None
            return self._settle(tx, Task.from_row(row), outcome, detail)

    def note_activity(self, task_id: str) -> None:
        with self._store.transaction() as tx:
            tx.execute(
                "UPDATE tasks SET saw_activity = 1, prior_settle_pending = 0, state = 'working' "
                "WHERE task_id = ?",
                (task_id,),
            )

    @staticmethod
    def _step(tx: Any, task: Task, status: str) -> str | None:
        if status == "working":
            if not task.prior_settle_pending:
                tx.execute(
                    "UPDATE tasks SET saw_activity = 1, state = 'working' WHERE task_id = ?", (task.task_id,)
                )
            return None
        if status not in SETTLED_STATUSES:
            return None
        if task.prior_settle_pending:
            tx.execute("UPDATE tasks SET prior_settle_pending = 0 WHERE task_id = ?", (task.task_id,))
            return None
        if not task.saw_activity:
            return None
        return "blocked" if status == "blocked" else "completed"

    @staticmethod
    def _settle(tx: Any, task: Task, outcome: str, detail: dict[str, Any]) -> Settled:
        now = _now_ms()
        final_state = outcome
        tx.execute(
            "UPDATE tasks SET state = ?, settled_at = ?, detail_json = ? WHERE task_id = ?",
            (final_state, now, json.dumps(detail, sort_keys=True), task.task_id),
        )
        summary = {**task.to_dict(), "state": final_state, "outcome": outcome, **detail}
        tx.execute(
            """INSERT INTO inbox (task_id, browser_session_ref, outcome, summary_json, created_at)
               VALUES (?, ?, ?, ?, ?) ON CONFLICT (task_id, outcome) DO NOTHING""",
            (task.task_id, task.browser_session_ref, outcome, json.dumps(summary, sort_keys=True), now),
        )
        row = tx.execute(
            "SELECT inbox_id FROM inbox WHERE task_id = ? AND outcome = ?", (task.task_id, outcome)
        ).fetchone()
        return Settled(task=task, outcome=outcome, inbox_id=int(row["inbox_id"]))

    def inbox(self, browser_session_ref: str | None, *, limit: int = INBOX_MAX_ITEMS) -> dict[str, Any]:
        """Unacknowledged terminal work of one scope, oldest first."""
        rows = (
            self._store.connection()
            .execute(
                """SELECT * FROM inbox WHERE browser_session_ref IS ? AND acked_at IS NULL
               ORDER BY inbox_id LIMIT ?""",
                (browser_session_ref, limit + 1),
            )
            .fetchall()
        )
        items = [
            {
                "inbox_id": row["inbox_id"],
                "task_id": row["task_id"],
                "outcome": row["outcome"],
                "created_at": _iso(row["created_at"]),
                "summary": json.loads(row["summary_json"]),
            }
            for row in rows[:limit]
        ]
        return {"items": items, "more": len(rows) > limit}

    def ack(self, browser_session_ref: str | None, inbox_ids: Iterable[int]) -> dict[str, Any]:
        """Acknowledge entries of this scope; ids of other scopes or already acked are reported."""
        wanted = sorted(set(inbox_ids))
        acked: list[int] = []
        with self._store.transaction() as tx:
            for inbox_id in wanted:
                cursor = tx.execute(
                    """UPDATE inbox SET acked_at = ?
                       WHERE inbox_id = ? AND browser_session_ref IS ? AND acked_at IS NULL""",
                    (_now_ms(), inbox_id, browser_session_ref),
                )
                if cursor.rowcount:
                    acked.append(inbox_id)
        return {"acked": acked, "not_acked": [i for i in wanted if i not in acked]}

    def move(self, from_ref: str, to_ref: str) -> dict[str, Any]:
        """A handoff's cutover: the unacknowledged inbox entries of scope `from_ref`, and its tasks
        still waiting for a settle (whose outcome would land there), now belong to `to_ref`. One
        transaction; moving again moves nothing (the entries are no longer under `from_ref`)."""
        with self._store.transaction() as tx:
            moved = [
                int(row["inbox_id"])
                for row in tx.execute(
                    """SELECT inbox_id FROM inbox WHERE browser_session_ref = ? AND acked_at IS NULL
                       ORDER BY inbox_id""",
                    (from_ref,),
                ).fetchall()
            ]
            tx.executemany(
                "UPDATE inbox SET browser_session_ref = ? WHERE inbox_id = ?",
                [(to_ref, inbox_id) for inbox_id in moved],
            )
            tasks = [
                str(row["task_id"])
                for row in tx.execute(
                    """SELECT task_id FROM tasks WHERE browser_session_ref = ?
                       AND state IN ('submitting', 'submitted', 'working', 'blocked') ORDER BY task_id""",
                    (from_ref,),
                ).fetchall()
            ]
            tx.executemany(
                "UPDATE tasks SET browser_session_ref = ? WHERE task_id = ?",
                [(to_ref, task_id) for task_id in tasks],
            )
        return {"moved": moved, "tasks_moved": tasks}
