"""herdr_inspect and herdr_since: what the workstation looks like and what changed."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary import Policy, Root, root_mutations
from herdr_mcp.runtime.tools.git import project_git_summary

if TYPE_CHECKING:
    from herdr_mcp.runtime.services import Services

#: Projects whose Git facts are read per inspect; more are listed without them.
MAX_PROJECT_SUMMARIES = 32


async def inspect(svc: Services, args: dict[str, Any]) -> dict[str, Any]:
    view = await svc.topology.view()
    roots = await svc.topology.roots()
    workspace = args.get("workspace")

    def keep(item: dict[str, Any]) -> bool:
        return workspace is None or item.get("workspace_id") == workspace

    selected = [root for root in roots.roots if workspace is None or workspace in root.workspace_ids]
    projects = await asyncio.to_thread(_projects, selected, svc.policy)
    warnings = list(view.warnings)
    warnings.extend(
        {"code": "root_excluded", "message": f"{item.path}: {item.reason}"} for item in roots.excluded
    )
    return {
        "herdr": {
            "reachable": view.source != "unavailable",
            "source": view.source,
            "version": view.herdr_version,
            "socket": str(svc.config.herdr_socket),
        },
        "focused_workspace_id": view.focused_workspace_id,
        "workspaces": [item for item in view.workspaces if keep(item)],
        "tabs": [item for item in view.tabs if keep(item)],
        "panes": [item for item in view.panes if keep(item)],
        "agents": [item for item in view.agents if keep(item)],
        "projects": projects,
        "policy": {
            "read_only": svc.policy.read_only,
            "write_roots": [str(path) for path in svc.policy.write_roots or ()] or None,
            "exec_is_sandboxed": False,
        },
        "cursor": svc.events.last_seq,
        "warnings": warnings,
    }


def _projects(roots: list[Root], policy: Policy) -> list[dict[str, Any]]:
    projects = []
    for index, root in enumerate(sorted(roots, key=lambda r: str(r.path))):
        project: dict[str, Any] = {
            "root": str(root.path),
            "kind": root.kind,
            "vcs": "git" if root.kind == "managed" else None,
            "managed": root.kind == "managed",
            "busy": root.busy,
            "workspace_ids": sorted(root.workspace_ids),
            # What the mutation gates would answer here, read-only mode and write roots included.
            "mutations": root_mutations(policy, root),
        }
        if root.kind == "managed" and index < MAX_PROJECT_SUMMARIES:
            try:
                project.update(project_git_summary(root.path))
            except ToolError as exc:  # Git trouble in one project must not hide the others
                project["git_error"] = exc.to_dict()
        projects.append(project)
    return projects


async def since(svc: Services, args: dict[str, Any]) -> dict[str, Any]:
    workspace = args.get("workspace")
    answer = svc.events.since(args["cursor"], workspace=workspace, limit=args["max_events"])
    view = await svc.topology.view()
    answer["agents"] = [
        agent for agent in view.agents if workspace is None or agent.get("workspace_id") == workspace
    ]
    answer["warnings"] = list(view.warnings)
    return answer
