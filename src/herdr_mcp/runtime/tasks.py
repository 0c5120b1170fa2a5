"""Submitting prompts as tasks and following them to the parent inbox.

`TaskTracker.submit` is the one path for herdr_prompt and herdr_mcp.agent.task.dispatch: read the
target (unknown targets fail before anything is recorded), record the task, send the prompt, and
answer at once with task_id / dispatch_id / turn_id. The event feed hands every agent status
change to `on_event`, which moves tasks through `TaskStore.observe` and so into the inbox.
Events can be missed (the runtime was down, a stream reconnected), so `reconcile()` compares
each open task with Herdr's current view of its agent: at start-up and then every
`RECONCILE_INTERVAL_SECONDS`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.herdr import HerdrClient, HerdrError, HerdrRemoteError
from herdr_mcp.runtime.events import FeedEvent
from herdr_mcp.runtime.herdr_errors import tool_error_from_herdr
from herdr_mcp.state.tasks import SETTLED_STATUSES, Settled, Task, TaskStore

log = logging.getLogger(__name__)

#: How often open tasks are compared with Herdr's view, in case an event was missed.
RECONCILE_INTERVAL_SECONDS = 5.0
#: Extra seconds the socket waits beyond agent.wait's own timeout, so Herdr answers first.
WAIT_SLACK_SECONDS = 5.0
_GONE = ("agent_not_found", "pane_not_found")


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def _not_acted(error: ToolError) -> ToolError:
    error.details["acted"] = False
    return error


def _submitted_answer(task: Task, agent: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = {
        **task.to_dict(),
        "state": "submitted",
        "agent": {key: agent.get(key) for key in ("name", "pane_id", "workspace_id", "kind") if key in agent},
        "status_at_submit": agent.get("agent_status"),
        "prior_turn_pending": task.prior_settle_pending,
        "exact_native_turn": False,
    }
    if task.browser_session_ref is not None:
        answer["browser_session_ref"] = task.browser_session_ref
    return answer


class TaskTracker:
    def __init__(self, herdr: HerdrClient, tasks: TaskStore) -> None:
        self._herdr = herdr
        self.tasks = tasks

    async def submit(
        self,
        target: str,
        text: str,
        *,
        browser_session_ref: str | None,
        wait: dict[str, Any] | None,
        op_id: str | None = None,
        scope_for: Callable[[str | None], str | None] | None = None,
    ) -> dict[str, Any]:
        """Send one prompt as a task; raises ToolError (`acted: false` when nothing was delivered).
        Without `browser_session_ref`, `scope_for(<the target's workspace>)` may name the scope."""
        try:
            found = await self._herdr.call("agent.get", {"target": target})
        except HerdrError as exc:
            raise _not_acted(tool_error_from_herdr(exc, mutating=False)) from exc
        agent = found.get("agent", found)
        if browser_session_ref is None and scope_for is not None:
            workspace = agent.get("workspace_id")
            browser_session_ref = scope_for(workspace if isinstance(workspace, str) else None)
        task = self.tasks.create(
            task_id=new_id("task"),
            turn_id=new_id("turn"),
            target=target,
            agent=agent,
            browser_session_ref=browser_session_ref,
            op_id=op_id,
        )
        try:
            await self._herdr.call("agent.prompt", {"target": target, "text": text})
        except HerdrError as exc:
            if isinstance(exc, HerdrRemoteError) or not exc.request_sent:
                self.tasks.discard(task.task_id)  # Herdr refused it or never got it: nothing delivered
                raise _not_acted(tool_error_from_herdr(exc, mutating=False)) from exc
            error = tool_error_from_herdr(exc, mutating=True)
            error.details["task_id"] = task.task_id
            raise error from exc
        self.tasks.mark_submitted(task.task_id)
        answer = _submitted_answer(task, agent)
        if wait is not None:
            answer["wait"] = await self._wait(target, wait)
        return answer

    def recover_answer(self, op_id: str) -> dict[str, Any] | None:
        """The answer of a prompt whose runtime died after recording it, if it was submitted."""
        task = self.tasks.by_operation(op_id)
        if task is None or task.state == "submitting":
            return None  # never recorded, or the send's outcome is unknown
        agent = {"name": task.agent_name, "pane_id": task.pane_id, "workspace_id": task.workspace_id}
        return {**_submitted_answer(task, agent), "recovered": True}

    async def _wait(self, target: str, wait: dict[str, Any]) -> dict[str, Any]:
        until = list(wait.get("until", ["idle", "done", "blocked"]))
        timeout_ms = int(wait.get("timeout_ms", 60000))
        started = time.monotonic()
        try:
            result = await self._herdr.call(
                "agent.wait",
                {"target": target, "until": until, "timeout_ms": timeout_ms},
                timeout=timeout_ms / 1000 + WAIT_SLACK_SECONDS,
            )
        except HerdrError as exc:
            timed_out = isinstance(exc, HerdrRemoteError) and exc.code == "timeout"
            answer: dict[str, Any] = {"reached": False, "timed_out": timed_out, "until": until}
            if not timed_out:
                answer["error"] = {"code": exc.code}
            return answer
        agent = result.get("agent", result)
        return {
            "reached": True,
            "timed_out": False,
            "until": until,
            "status": agent.get("agent_status") if isinstance(agent, dict) else None,
            "waited_ms": int((time.monotonic() - started) * 1000),
        }

    def on_event(self, event: FeedEvent) -> list[Settled]:
        """Feed one Herdr event to the open tasks of its pane."""
        if event.name == "pane.agent_status_changed":
            pane, status = event.data.get("pane_id"), event.data.get("agent_status")
            if isinstance(pane, str) and isinstance(status, str):
                return self.tasks.observe(pane, status, {"status": status})
        elif event.name in ("pane_closed", "pane_exited"):
            body = event.data.get("pane")
            pane = body.get("pane_id") if isinstance(body, dict) else event.data.get("pane_id")
            if isinstance(pane, str):
                return self.tasks.fail_pane(pane, event.name)
        return []

    async def reconcile(self) -> list[Settled]:
        """Bring every open task in line with Herdr's current view of its agent."""
        settled: list[Settled] = []
        for task in self.tasks.open_tasks():
            if task.pane_id is None or task.state == "submitting":
                continue
            try:
                found = await self._herdr.call("agent.get", {"target": task.pane_id})
            except HerdrRemoteError as exc:
                if exc.code in _GONE:
                    outcome = self.tasks.settle(task.task_id, "failed", {"reason": exc.code})
                    settled.extend([outcome] if outcome else [])
                continue
            except HerdrError:
                return settled  # Herdr is away; try again next round
            settled.extend(self._reconcile_one(task, found.get("agent", found)))
        return settled

    def _reconcile_one(self, task: Task, agent: dict[str, Any]) -> list[Settled]:
        status = agent.get("agent_status")
        seq = agent.get("state_change_seq")
        moved = isinstance(seq, int) and task.seq_at_submit is not None and seq > task.seq_at_submit
        if status == "working":
            if not task.prior_settle_pending and moved:
                self.tasks.note_activity(task.task_id)
            return []
        if status not in SETTLED_STATUSES:
            return []
        # A settle counts when new activity was seen, or when the agent changed state since
        # submission and no earlier turn was still pending (then the change was this task's).
        if task.saw_activity or (moved and not task.prior_settle_pending):
            outcome = "blocked" if status == "blocked" else "completed"
            found = self.tasks.settle(task.task_id, outcome, {"status": status, "via": "reconcile"})
            return [found] if found else []
        return []

    async def run_reconciler(self) -> None:
        """Reconcile at once, then every RECONCILE_INTERVAL_SECONDS, until cancelled."""
        while True:
            try:
                await self.reconcile()
            except (HerdrError, OSError, ToolError):
                log.debug("task reconciliation round failed", exc_info=True)
            await asyncio.sleep(RECONCILE_INTERVAL_SECONDS)
