"""herdr_exec and herdr_exec_start/read/kill: a real shell as the workstation user.

Not a sandbox: the boundary only chooses the working directory (a root proven by the live
Herdr session) and applies the read-only and busy gates. In read-only mode only herdr_exec with
intent read_only runs; that intent is the caller's declaration, not something we can enforce.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary import Root, RootSet

if TYPE_CHECKING:
    from herdr_mcp.runtime.services import Services


def _gate(svc: Services, root: Root, args: dict[str, Any], *, intent: str | None) -> None:
    """The read-only and busy gates; `args` as the dispatcher parsed them (`confirm_busy` set)."""
    if svc.policy.read_only and intent != "read_only":
        raise ToolError(
            "read_only_mode",
            "the runtime is in read-only mode; only herdr_exec with intent read_only may run",
        )
    if root.busy and not args["confirm_busy"]:
        raise ToolError(
            "project_busy_unconfirmed",
            f"an agent is working in {root.path}; wait with herdr_since or pass confirm_busy true",
            root=str(root.path),
        )


def _workspace_root(roots: RootSet, workspace: str, project_root: str | None) -> Root:
    if project_root is not None:
        root = roots.root_for(project_root)
        if workspace not in root.workspace_ids:
            raise ToolError(
                "root_not_in_workspace",
                f"{root.path} is not a root of workspace {workspace}; see herdr_inspect projects",
            )
        return root
    candidates = [root for root in roots.roots if workspace in root.workspace_ids]
    if not candidates:
        raise ToolError(
            "workspace_has_no_root",
            f"workspace {workspace} has no pane in a usable root; check the id with herdr_inspect",
        )
    if len(candidates) > 1:
        raise ToolError(
            "workspace_root_ambiguous",
            f"workspace {workspace} spans several roots; pass project_root",
            roots=[str(root.path) for root in candidates],
        )
    return candidates[0]


async def exec_short(svc: Services, args: dict[str, Any]) -> dict[str, Any]:
    roots = await svc.topology.roots()
    root = _workspace_root(roots, args["workspace"], args.get("project_root"))
    intent = args.get("intent")
    key = args.get("idempotency_key")
    _gate(svc, root, args, intent=intent)
    if intent == "non_idempotent_write" and key is None:
        raise ToolError(
            "idempotency_key_required",
            "a non_idempotent_write must carry an idempotency_key (any fresh string of 8+ characters, "
            "e.g. a UUID) so a lost answer can be recovered without running the command twice",
        )
    timeout_ms: int = args["timeout_ms"]

    async def action(op_id: str | None) -> dict[str, Any]:
        try:
            result = await svc.sessions.run(root.path, args["command"], timeout_ms, op_id=op_id)
        except ToolError as exc:
            exc.details["acted"] = False  # the process never started
            raise
        result["cwd"] = str(root.path)
        if intent is not None:
            result["intent"] = intent
        return result

    if key is None or intent == "read_only":
        return await action(None)
    request = {
        "workspace": args["workspace"],
        "command": args["command"],
        "project_root": args.get("project_root"),
        "intent": intent,
    }
    return await svc.idempotency.run(
        "exec",
        key,
        request,
        action,
        follower_timeout=timeout_ms / 1000 + 5,
        recover=lambda op_id: _recover_exec(svc, op_id),
    )


def _recover_exec(svc: Services, op_id: str) -> dict[str, Any] | None:
    """The answer of an exec whose runtime died, if its session finished and is still spooled."""
    session_id = svc.sessions.session_of_operation(op_id)
    return svc.sessions.result_of(session_id) if session_id is not None else None


async def exec_start(svc: Services, args: dict[str, Any]) -> dict[str, Any]:
    root = (await svc.topology.roots()).root_for(args["root"])
    _gate(svc, root, args, intent=None)
    shell = await svc.sessions.prepare()
    result = svc.sessions.start(root.path, args["command"], shell=shell)
    result["cwd"] = str(root.path)
    return result


async def exec_read(svc: Services, args: dict[str, Any]) -> dict[str, Any]:
    return svc.sessions.read(
        args["session_id"],
        stream=args["stream"],
        stdout_offset=args["stdout_offset"],
        stderr_offset=args["stderr_offset"],
        max_bytes=args["max_bytes"],
    )


async def exec_kill(svc: Services, args: dict[str, Any]) -> dict[str, Any]:
    return await svc.sessions.kill(args["session_id"], args["grace_ms"])
