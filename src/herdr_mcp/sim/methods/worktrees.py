"""worktree.list/create/open/remove: real `git worktree` operations on the workspace's repository.

Herdr: src/app/api/worktrees.rs (results worktree_list {source, worktrees}, worktree_created and
worktree_opened {workspace, tab, root_pane, worktree}, worktree_removed {forced, path,
workspace_id}; events worktree_created, worktree_opened, worktree_removed; a workspace opened on a
worktree carries WorkspaceInfo.worktree). Refusals use `invalid_request`, as Herdr's do.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from herdr_mcp.sim.methods.workspaces import create_workspace, created_result
from herdr_mcp.sim.model import HerdrFailure, Workspace, WorktreeSpace

if TYPE_CHECKING:
    from herdr_mcp.sim.server import Simulator
    from herdr_mcp.sim.waits import Waits

Params = dict[str, Any]


async def _git(cwd: Path, *args: str) -> str:
    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False)

    done = await asyncio.to_thread(run)
    if done.returncode != 0:
        raise HerdrFailure(
            "invalid_request", f"git {args[0]} failed: {done.stderr.strip() or done.stdout.strip()}"
        )
    return done.stdout


def _source_dir(sim: Simulator, params: Params) -> tuple[Path, str | None]:
    world = sim.world
    if params.get("cwd") is not None:
        return Path(params["cwd"]), None
    workspace_id = params.get("workspace_id") or world.active_workspace_id
    if workspace_id is None:
        raise HerdrFailure("workspace_not_found", "no active workspace")
    workspace = world.workspace(workspace_id)
    return (workspace.worktree.checkout_path if workspace.worktree else workspace.cwd), workspace_id


async def _repo(cwd: Path) -> Path:
    if not cwd.is_dir():
        raise HerdrFailure("invalid_request", f"{cwd} is not a directory")
    common = (await _git(cwd, "rev-parse", "--path-format=absolute", "--git-common-dir")).strip()
    return Path(common).parent.resolve()


async def _worktrees(sim: Simulator, repo: Path) -> list[dict[str, Any]]:
    listing = await _git(repo, "worktree", "list", "--porcelain")
    entries: list[dict[str, Any]] = []
    for block in listing.strip().split("\n\n"):
        fields = {line.partition(" ")[0]: line.partition(" ")[2] for line in block.splitlines()}
        if "worktree" not in fields:
            continue
        path = Path(fields["worktree"]).resolve()
        info: dict[str, Any] = {"path": str(path), "label": path.name}
        if "branch" in fields:
            info["branch"] = fields["branch"].removeprefix("refs/heads/")
        info.update(
            is_bare="bare" in fields,
            is_detached="detached" in fields,
            is_linked_worktree=path != repo,
            is_prunable="prunable" in fields,
        )
        open_ws = _open_workspace(sim, path)
        if open_ws is not None:
            info["open_workspace_id"] = open_ws.workspace_id
        entries.append(info)
    return entries


def _open_workspace(sim: Simulator, path: Path) -> Workspace | None:
    for workspace in sim.world.workspaces.values():
        if workspace.worktree is not None and workspace.worktree.checkout_path == path:
            return workspace
    return None


async def worktree_list(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    source, workspace_id = _source_dir(sim, params)
    repo = await _repo(source)
    info: dict[str, Any] = {
        "repo_key": str(repo),
        "repo_name": repo.name,
        "repo_root": str(repo),
        "source_checkout_path": str(source.resolve()),
    }  # fmt: skip
    if workspace_id is not None:
        info["source_workspace_id"] = workspace_id
    return {"type": "worktree_list", "source": info, "worktrees": await _worktrees(sim, repo)}


async def _open(
    sim: Simulator, repo: Path, path: Path, label: str | None, focus: bool
) -> tuple[Workspace, bool]:
    existing = _open_workspace(sim, path)
    if existing is not None:
        return existing, True
    workspace = create_workspace(sim, path, label or path.name, focus, {})
    workspace.worktree = WorktreeSpace(repo, path, path != repo)
    return workspace, False


def _entry(entries: list[dict[str, Any]], path: Path) -> dict[str, Any]:
    for entry in entries:
        if Path(entry["path"]) == path:
            return entry
    raise HerdrFailure("invalid_request", f"{path} is not a worktree of the repository")


async def worktree_create(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    source, _ = _source_dir(sim, params)
    repo = await _repo(source)
    branch = params.get("branch") or f"herdr-{len(await _worktrees(sim, repo))}"
    if not re.fullmatch(r"[A-Za-z0-9._/-]+", branch):
        raise HerdrFailure("invalid_request", f"{branch!r} is not a branch name to create")
    path = (
        Path(params["path"])
        if params.get("path")
        else repo.parent / f"{repo.name}-worktrees" / branch.replace("/", "-")
    )
    base = [params["base"]] if params.get("base") else []
    await _git(repo, "worktree", "add", "-b", branch, str(path), *base)
    path = path.resolve()
    workspace, _ = await _open(sim, repo, path, params.get("label"), params.get("focus", False))
    worktree = _entry(await _worktrees(sim, repo), path)
    sim.world.emit(
        "worktree_created", {"workspace": sim.world.workspace_info(workspace), "worktree": worktree}
    )
    return {**created_result(sim, workspace, "worktree_created"), "worktree": worktree}


async def worktree_open(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    source, _ = _source_dir(sim, params)
    repo = await _repo(source)
    entries = await _worktrees(sim, repo)
    if params.get("path"):
        path = Path(params["path"]).resolve()
    elif params.get("branch"):
        match = [e for e in entries if e.get("branch") == params["branch"]]
        if not match:
            raise HerdrFailure("invalid_request", f"no worktree has branch {params['branch']}")
        path = Path(match[0]["path"])
    else:
        raise HerdrFailure("invalid_request", "give the worktree's path or branch")
    _entry(entries, path)
    workspace, already = await _open(sim, repo, path, params.get("label"), params.get("focus", False))
    worktree = _entry(await _worktrees(sim, repo), path)
    sim.world.emit(
        "worktree_opened",
        {"workspace": sim.world.workspace_info(workspace), "worktree": worktree, "already_open": already},
    )
    return {
        **created_result(sim, workspace, "worktree_opened"),
        "worktree": worktree,
        "already_open": already,
    }


async def worktree_remove(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    workspace = world.workspace(params["workspace_id"])
    space = workspace.worktree
    if space is None or not space.is_linked_worktree:
        raise HerdrFailure("invalid_request", f"workspace {workspace.workspace_id} is not a linked worktree")
    forced = params.get("force", False)
    worktree = _entry(await _worktrees(sim, space.repo_root), space.checkout_path)
    await _git(
        space.repo_root, "worktree", "remove", *(["--force"] if forced else []), str(space.checkout_path)
    )
    snapshot = world.workspace_info(workspace)
    world.close_workspace(workspace)
    world.emit(
        "worktree_removed",
        {
            "workspace_id": workspace.workspace_id,
            "workspace": snapshot,
            "worktree": worktree,
            "forced": forced,
        },
    )
    return {
        "type": "worktree_removed",
        "forced": forced,
        "path": str(space.checkout_path),
        "workspace_id": workspace.workspace_id,
    }


HANDLERS = {
    "worktree.list": worktree_list,
    "worktree.create": worktree_create,
    "worktree.open": worktree_open,
    "worktree.remove": worktree_remove,
}
