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
import contextlib
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.herdr import HerdrClient, HerdrError, HerdrRemoteError
from herdr_mcp.runtime.events import FeedEvent
from herdr_mcp.runtime.herdr_errors import tool_error_from_herdr
from herdr_mcp.state.tasks import SETTLED_STATUSES, Settled, Task, TaskStore

log = logging.getLogger(__name__)

#: How often open tasks are compared with Herdr's view, in case an event was missed.
RECONCILE_INTERVAL_SECONDS = 5.0
#: How long an agent that was not working may show no state change after a prompt before the
#: wait calls the prompt stalled: Herdr's own prompt-effect window (AGENT_PROMPT_EFFECT_TIMEOUT_MS,
#: src/api/wait.rs).
PROMPT_EFFECT_WINDOW_SECONDS = 5.0
#: How often a herdr_prompt wait reads the agent itself, beside the events it is woken by.
WAIT_PROBE_INTERVAL_SECONDS = 0.1
#: Herdr types a prompt's text at once and presses Enter 300 ms later, on a timer of its own
#: (AGENT_PROMPT_SUBMIT_DELAY, src/app/api/agents.rs): text typed into the pane before that Enter
#: joins the line, and the agent takes both prompts as one. So the next prompt to a pane is sent
#: no sooner than this after the previous one's answer (the 300 ms, and a margin for a late timer).
PROMPT_SPACING_SECONDS = 0.5
#: Workspace ids as Herdr spells them: `w` + bijective base 32 over 123456789ABCDEFGHJKMNPQRSTVWXYZ0
#: (src/workspace.rs PUBLIC_ID_ALPHABET: w1, wA, w11): a target of that form is resolved here, and
#: an agent name such as `worker` never costs the extra agent.list.
_WORKSPACE_ID = re.compile(r"w[1-9A-HJKMNP-TV-Z0]+")
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


def _wait_outcome(task: Task, until: list[str]) -> bool | None:
    """Whether the task's turn reached `until` (True), ended elsewhere (False), or goes on (None)."""
    if "working" in until and task.saw_activity:
        return True
    if task.state == "completed":
        return task.settled_status in until or (task.settled_status is None and "idle" in until)
    if task.state == "blocked" and "blocked" in until:
        return True
    if task.state == "failed":
        return False
    return None


def _wait_answer(
    until: list[str],
    started: float,
    *,
    reached: bool,
    status: str | None,
    outcome: str,
    stalled: bool = False,
    timed_out: bool = False,
) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "reached": reached,
        "timed_out": timed_out,
        "stalled": stalled,
        "until": until,
        "task_state": outcome,
        "waited_ms": int((time.monotonic() - started) * 1000),
    }
    if status is not None:
        answer["status"] = status
    return answer


class TaskTracker:
    def __init__(
        self,
        herdr: HerdrClient,
        tasks: TaskStore,
        *,
        prompt_effect_window: float = PROMPT_EFFECT_WINDOW_SECONDS,
        wait_probe_interval: float = WAIT_PROBE_INTERVAL_SECONDS,
        prompt_spacing: float = PROMPT_SPACING_SECONDS,
    ) -> None:
        self._herdr = herdr
        self.tasks = tasks
        self._prompt_effect_window = prompt_effect_window
        self._wait_probe_interval = wait_probe_interval
        self._prompt_spacing = prompt_spacing
        self._changed = asyncio.Event()
        self._pane_turns: dict[str, asyncio.Lock] = {}
        self._enter_due: dict[str, float] = {}

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
        Without `browser_session_ref`, `scope_for(<the target's workspace>)` may name the scope.

        The task is recorded (and, once Herdr took the prompt, marked submitted) before any wait
        starts, so a wait that is cut off leaves a submitted prompt, never an uncertain one."""
        try:
            herdr_target = await self._herdr_target(target)
            found = await self._herdr.call("agent.get", {"target": herdr_target})
        except HerdrError as exc:
            raise _not_acted(tool_error_from_herdr(exc, mutating=False)) from exc
        agent = found.get("agent", found)
        if browser_session_ref is None and scope_for is not None:
            workspace = agent.get("workspace_id")
            browser_session_ref = scope_for(workspace if isinstance(workspace, str) else None)
        pane = agent.get("pane_id")
        async with self._pane_turn(pane if isinstance(pane, str) else herdr_target):
            task = self.tasks.create(
                task_id=new_id("task"),
                turn_id=new_id("turn"),
                target=target,
                agent=agent,
                browser_session_ref=browser_session_ref,
                op_id=op_id,
            )
            try:
                await self._herdr.call("agent.prompt", {"target": herdr_target, "text": text})
            except HerdrError as exc:
                if isinstance(exc, HerdrRemoteError) or not exc.request_sent:
                    self.tasks.discard(task.task_id)  # Herdr refused it or never got it: nothing delivered
                    raise _not_acted(tool_error_from_herdr(exc, mutating=False)) from exc
                error = tool_error_from_herdr(exc, mutating=True)
                error.details["task_id"] = task.task_id
                raise error from exc
        submitted_at = time.monotonic()
        self.tasks.mark_submitted(task.task_id)
        answer = _submitted_answer(task, agent)
        if wait is not None:
            pane = agent.get("pane_id")
            answer["wait"] = await self._wait(
                task.task_id, pane if isinstance(pane, str) else herdr_target, wait, submitted_at
            )
        return answer

    @contextlib.asynccontextmanager
    async def _pane_turn(self, pane: str) -> AsyncIterator[None]:
        """One prompt at a time per pane, each sent once the previous one's Enter is due
        (PROMPT_SPACING_SECONDS): two prompts typed before one Enter would reach the agent as one."""
        lock = self._pane_turns.setdefault(pane, asyncio.Lock())
        async with lock:
            due = self._enter_due.pop(pane, 0.0) - time.monotonic()
            if due > 0:
                await asyncio.sleep(due)
            try:
                yield
            finally:
                self._enter_due[pane] = time.monotonic() + self._prompt_spacing

    async def _herdr_target(self, target: str) -> str:
        """The target as Herdr resolves it: an agent name or an agent pane id pass unchanged; a
        workspace id (which Herdr does not accept) becomes the pane id of that workspace's one
        agent. Raises ToolError when the workspace has no agent or several."""
        if ":" in target or not _WORKSPACE_ID.fullmatch(target):
            return target
        listed = await self._herdr.call("agent.list", {})
        agents = [a for a in listed.get("agents", []) if isinstance(a, dict)]
        if any(a.get("name") == target for a in agents):
            return target  # an agent named like a workspace: Herdr resolves names first
        here = [a for a in agents if a.get("workspace_id") == target and isinstance(a.get("pane_id"), str)]
        if len(here) == 1:
            return str(here[0]["pane_id"])
        if not here:
            raise ToolError(
                "agent_not_found",
                f"workspace {target} has no agent pane (or does not exist); herdr_inspect lists the "
                "agents and their pane ids",
                acted=False,
                target=target,
            )
        panes = ", ".join(f"{a['pane_id']} ({a.get('name') or a.get('agent') or 'agent'})" for a in here)
        raise ToolError(
            "agent_target_ambiguous",
            f"workspace {target} has {len(here)} agents ({panes}); target one of them by pane id or name",
            acted=False,
            target=target,
            candidates=[str(a["pane_id"]) for a in here],
        )

    def recover_answer(self, op_id: str) -> dict[str, Any] | None:
        """The answer of a prompt whose runtime died after recording it, if it was submitted."""
        task = self.tasks.by_operation(op_id)
        if task is None or task.state == "submitting":
            return None  # never recorded, or the send's outcome is unknown
        agent = {"name": task.agent_name, "pane_id": task.pane_id, "workspace_id": task.workspace_id}
        return {**_submitted_answer(task, agent), "recovered": True}

    async def _wait(self, task_id: str, pane: str, wait: dict[str, Any], started: float) -> dict[str, Any]:
        """Wait for THIS prompt's turn to reach one of `wait.until`.

        Herdr answers agent.prompt before the agent starts (it presses Enter about 300 ms later),
        so the agent's state at that moment is the previous turn's. The task's own attribution
        (TaskStore: new activity, then a settle; a prior turn's settle consumed first) decides,
        fed by the event feed as events arrive and by a probe of the agent every
        `wait_probe_interval` (in case the feed is down). An agent that was not working and shows
        no state change within the prompt-effect window (Herdr's own 5 s) is reported stalled."""
        until = list(wait["until"])  # both filled with herdr_prompt's catalog defaults
        timeout = wait["timeout_ms"] / 1000
        deadline = started + timeout
        task = self.tasks.get(task_id)
        effect_deadline = (
            None
            if task is None or task.prior_settle_pending
            else started + min(timeout, self._prompt_effect_window)
        )
        status: str | None = None
        next_probe = started + self._wait_probe_interval
        while True:
            task = self.tasks.get(task_id)
            if task is None:  # cannot happen once submitted; end the wait rather than spin
                return _wait_answer(until, started, reached=False, status=status, outcome="unknown")
            outcome = _wait_outcome(task, until)
            if outcome is not None:
                status = task.settled_status or status
                return _wait_answer(until, started, reached=outcome, status=status, outcome=task.state)
            now = time.monotonic()
            if effect_deadline is not None and now >= effect_deadline and not task.saw_activity:
                return _wait_answer(
                    until,
                    started,
                    reached=False,
                    status=status,
                    outcome=task.state,
                    stalled=True,
                    timed_out=now >= deadline,
                )
            if now >= deadline:
                return _wait_answer(
                    until, started, reached=False, status=status, outcome=task.state, timed_out=True
                )
            if now >= next_probe:
                next_probe = now + self._wait_probe_interval
                status = await self._probe(task, pane) or status
                continue
            wake_at = min(t for t in (next_probe, deadline, effect_deadline) if t is not None)
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, wake_at - now)):
                    await changed.wait()

    async def _probe(self, task: Task, pane: str) -> str | None:
        """Read the agent once and apply what it shows to the task; its status, or None."""
        try:
            found = await self._herdr.call("agent.get", {"target": pane})
        except HerdrRemoteError as exc:
            if exc.code in _GONE:
                self.tasks.settle(task.task_id, "failed", {"reason": exc.code})
            return None
        except HerdrError:
            return None
        agent = found.get("agent", found)
        if not isinstance(agent, dict):
            return None
        self._reconcile_one(task, agent)
        status = agent.get("agent_status")
        return status if isinstance(status, str) else None

    def _notify(self) -> None:
        """Wake every wait: a task may have moved."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def on_event(self, event: FeedEvent) -> list[Settled]:
        """Feed one Herdr event to the open tasks of its pane."""
        settled: list[Settled] = []
        if event.name == "pane.agent_status_changed":
            pane, status = event.data.get("pane_id"), event.data.get("agent_status")
            if isinstance(pane, str) and isinstance(status, str):
                settled = self.tasks.observe(pane, status, {"status": status})
                self._notify()
        elif event.name in ("pane_closed", "pane_exited"):
            body = event.data.get("pane")
            pane = body.get("pane_id") if isinstance(body, dict) else event.data.get("pane_id")
            if isinstance(pane, str):
                settled = self.tasks.fail_pane(pane, event.name)
                self._notify()
        return settled

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
                self._notify()
            return []
        if status not in SETTLED_STATUSES:
            return []
        # A settle counts when new activity was seen, or when the agent changed state since
        # submission and no earlier turn was still pending (then the change was this task's).
        if task.saw_activity or (moved and not task.prior_settle_pending):
            outcome = "blocked" if status == "blocked" else "completed"
            found = self.tasks.settle(task.task_id, outcome, {"status": status, "via": "reconcile"})
            self._notify()
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
