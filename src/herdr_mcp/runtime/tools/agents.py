"""herdr_prompt: submit one prompt to a Herdr agent and answer at once.

The answer carries a task_id (the same canonical identity as dispatch_id) and a runtime turn_id:
Herdr has no native prompt-turn identity, so `exact_native_turn` is false. With `wait`, the
runtime also waits for one of the given agent states; a wait that times out only ends the wait,
the prompt stays submitted. Transport failure before submission (nothing sent) and uncertainty
after it (answer lost) are reported with different codes.

This issue's runtime keeps no ledger: idempotency keys are echoed back but not yet recorded
durably, and terminal states are not yet written to an inbox (both come with the state store).
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

from herdr_mcp.herdr import HerdrError, HerdrRemoteError
from herdr_mcp.runtime.herdr_errors import tool_error_from_herdr

if TYPE_CHECKING:
    from herdr_mcp.runtime.services import Services

#: Extra seconds the socket waits beyond agent.wait's own timeout, so Herdr answers first.
WAIT_SLACK_SECONDS = 5.0


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


async def prompt(svc: Services, args: dict[str, Any]) -> dict[str, Any]:
    target: str = args["target"]
    try:
        before = await svc.herdr.call("agent.get", {"target": target})
    except HerdrError as exc:
        raise tool_error_from_herdr(exc, mutating=False) from exc
    agent = before.get("agent", before)
    dispatch_id = _new_id("task")
    turn_id = _new_id("turn")
    try:
        submitted = await svc.herdr.call("agent.prompt", {"target": target, "text": args["text"]})
    except HerdrError as exc:
        raise tool_error_from_herdr(exc, mutating=True) from exc
    answer: dict[str, Any] = {
        "task_id": dispatch_id,
        "dispatch_id": dispatch_id,
        "turn_id": turn_id,
        "target": target,
        "agent": {key: agent.get(key) for key in ("name", "pane_id", "workspace_id", "kind") if key in agent},
        "status_at_submit": agent.get("agent_status"),
        "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "exact_native_turn": False,
        "herdr": submitted,
    }
    if "idempotency_key" in args:
        answer["idempotency_key"] = args["idempotency_key"]
    wait = args.get("wait")
    if wait is not None:
        answer["wait"] = await _wait(svc, target, wait)
    return answer


async def _wait(svc: Services, target: str, wait: dict[str, Any]) -> dict[str, Any]:
    until = list(wait.get("until", ["idle", "done", "blocked"]))
    timeout_ms = int(wait.get("timeout_ms", 60000))
    started = time.monotonic()
    try:
        result = await svc.herdr.call(
            "agent.wait",
            {"target": target, "until": until, "timeout_ms": timeout_ms},
            timeout=timeout_ms / 1000 + WAIT_SLACK_SECONDS,
        )
    except HerdrRemoteError as exc:
        if exc.code == "timeout":
            return {"reached": False, "timed_out": True, "until": until}
        return {"reached": False, "timed_out": False, "until": until, "error": {"code": exc.code}}
    except HerdrError as exc:
        return {"reached": False, "timed_out": False, "until": until, "error": {"code": exc.code}}
    agent = result.get("agent", result)
    return {
        "reached": True,
        "timed_out": False,
        "until": until,
        "status": agent.get("agent_status") if isinstance(agent, dict) else None,
        "waited_ms": int((time.monotonic() - started) * 1000),
    }
