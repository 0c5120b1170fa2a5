"""herdr_prompt and the internal herdr_mcp.agent.task.* methods.

herdr_prompt submits through the task tracker and answers at once with task_id, dispatch_id and
turn_id (Herdr has no native prompt-turn identity, so `exact_native_turn` is false); the
terminal outcome lands in the parent inbox. With `wait`, the runtime also waits for one of the
given agent states; a wait that times out only ends the wait, the prompt stays submitted.

Which inbox scope (`browser_session_ref`) the outcome goes to (docs/browser-protocol.md 2):
herdr_prompt's arguments are frozen, so the scope travels in the tools/call's
`params._meta["herdr-mcp/scope"]` (the dispatcher hands it over in `CALL_SCOPE`); without it, the
one scope bound to the target's workspace when exactly one is, else none.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from herdr_mcp.errors import ToolError
from herdr_mcp.state.bindings import BindingStore, check_scope

if TYPE_CHECKING:
    from herdr_mcp.runtime.services import Services


#: The `_meta` key of a tools/call that names the browser session scope.
SCOPE_META_KEY = "herdr-mcp/scope"
#: The current tools/call's `_meta["herdr-mcp/scope"]` as given (None when absent).
CALL_SCOPE: ContextVar[object | None] = ContextVar("herdr_mcp_call_scope", default=None)


async def prompt(svc: Services, args: dict[str, Any]) -> dict[str, Any]:
    given = CALL_SCOPE.get()
    if given is None:
        return await _dispatch(svc, args, browser_session_ref=None, infer_scope=True)
    try:
        scope = check_scope(given, f"_meta.{SCOPE_META_KEY}")
    except ToolError as exc:
        raise ToolError("invalid_arguments", exc.message, argument=f"_meta.{SCOPE_META_KEY}") from None
    return await _dispatch(svc, args, browser_session_ref=scope)


def _bound_scope(svc: Services, workspace_id: str | None) -> str | None:
    """The scope bound to `workspace_id` when exactly one is, else None."""
    if workspace_id is None:
        return None
    scopes = BindingStore(svc.state).scopes_for(workspace_id)
    return scopes[0] if len(scopes) == 1 else None


#: How long a concurrent duplicate waits for the first submission when it does not wait itself.
FOLLOWER_TIMEOUT_SECONDS = 30.0


async def _dispatch(
    svc: Services, args: dict[str, Any], *, browser_session_ref: str | None, infer_scope: bool = False
) -> dict[str, Any]:
    if svc.policy.read_only:
        raise ToolError("read_only_mode", "the runtime is in read-only mode; prompting an agent is refused")
    wait = args.get("wait")

    async def action(op_id: str | None) -> dict[str, Any]:
        return await svc.tasks.submit(
            args["target"],
            args["text"],
            browser_session_ref=browser_session_ref,
            wait=wait,
            op_id=op_id,
            scope_for=(lambda workspace: _bound_scope(svc, workspace)) if infer_scope else None,
        )

    key = args.get("idempotency_key")
    if key is None:
        return await action(None)
    request = {"target": args["target"], "text": args["text"], "browser_session_ref": browser_session_ref}
    follower_timeout = FOLLOWER_TIMEOUT_SECONDS
    if wait is not None:
        follower_timeout += wait["timeout_ms"] / 1000
    answer = await svc.idempotency.run(
        "prompt", key, request, action, follower_timeout=follower_timeout, recover=svc.tasks.recover_answer
    )
    return {**answer, "idempotency_key": key}


async def task_dispatch(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    return await _dispatch(svc, params, browser_session_ref=params.get("browser_session_ref"))


async def task_inbox(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    return svc.tasks.tasks.inbox(params.get("browser_session_ref"), limit=params["limit"])


async def task_ack(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    return svc.tasks.tasks.ack(params.get("browser_session_ref"), params["inbox_ids"])


async def task_get(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    task = svc.tasks.tasks.get(params["task_id"])
    if task is None:
        raise ToolError("task_not_found", f"no task {params['task_id']}; task ids come from herdr_prompt")
    return task.to_dict()
