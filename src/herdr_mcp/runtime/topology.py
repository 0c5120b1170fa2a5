"""What the live Herdr session looks like, and which roots it proves.

`Topology` owns one cached view of Herdr (workspaces, tabs, panes, agents) and the `RootSet`
derived from it. The view is fetched with `session.snapshot`; when that fails it degrades to
the list methods and says so in `warnings` (SPEC 3.1: a control-plane failure is not a project
failure). The cache lives `ttl` seconds and is dropped at once when Herdr reports a lifecycle
event, so roots follow the live session closely without a snapshot per tool call.

Roots: every pane cwd (and foreground cwd) inside a Git work tree makes that work tree a managed
root; any other pane cwd is an exact operational root. `RootSet.build` refuses $HOME and its
ancestors whatever their kind.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from herdr_mcp.herdr import HerdrClient, HerdrError
from herdr_mcp.runtime.boundary import RootCandidate, RootSet
from herdr_mcp.runtime.tools.git import git_toplevel

#: How long a view is reused when no event invalidated it. Short: roots are a security boundary.
VIEW_TTL_SECONDS = 2.0
#: Each list call of the degraded path gets this long; Herdr's own read timeout is 5 s.
LIST_TIMEOUT_SECONDS = 2.0

_LIST_METHODS = (
    ("workspaces", "workspace.list"),
    ("tabs", "tab.list"),
    ("panes", "pane.list"),
    ("agents", "agent.list"),
)


@dataclass(frozen=True)
class SessionView:
    """One observation of the Herdr session."""

    workspaces: list[dict[str, Any]]
    tabs: list[dict[str, Any]]
    panes: list[dict[str, Any]]
    agents: list[dict[str, Any]]
    source: str  # "snapshot", "lists" (degraded) or "unavailable"
    warnings: list[dict[str, str]] = field(default_factory=list)
    herdr_version: str | None = None
    focused_workspace_id: str | None = None

    def working_cwds(self) -> list[Path]:
        """Cwds of panes whose agent is working (busy projects)."""
        return [
            Path(cwd)
            for item in [*self.panes, *self.agents]
            if _status_of(item) == "working"
            for cwd in _cwds_of(item)
        ]


def _status_of(item: dict[str, Any]) -> str | None:
    status = item.get("agent_status") or item.get("state") or item.get("status")
    return status if isinstance(status, str) else None


def _cwds_of(item: dict[str, Any]) -> list[str]:
    found = [item.get("cwd"), item.get("foreground_cwd")]
    return [value for value in dict.fromkeys(found) if isinstance(value, str) and value.startswith("/")]


class Topology:
    """Cached Herdr view + derived roots; safe to share between concurrent tool calls."""

    def __init__(
        self,
        herdr: HerdrClient,
        *,
        home: Path,
        ttl: float = VIEW_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`clock` (seconds) ages the cached view; tests move it instead of sleeping past `ttl`."""
        self._herdr = herdr
        self._home = home
        self._ttl = ttl
        self._clock = clock
        self._lock = asyncio.Lock()
        self._view: SessionView | None = None
        self._roots: RootSet | None = None
        self._fetched_at = 0.0
        self._generation = 0

    def invalidate(self) -> None:
        """Forget the cached view (called on every Herdr lifecycle event)."""
        self._generation += 1
        self._view = None
        self._roots = None

    async def view(self) -> SessionView:
        view, _ = await self._current()
        return view

    async def roots(self) -> RootSet:
        _, roots = await self._current()
        return roots

    async def _current(self) -> tuple[SessionView, RootSet]:
        # A fresh view is answered without the lock: under load, taking it for every call made
        # a convoy (each release wakes one waiter a loop iteration later, and a caller that
        # finds waiters queues behind them), so after one refresh every fs call waited for the
        # ones before it: herdr_fs_read at 32 clients spent a median 26 ms here (issue 24).
        view, roots = self._view, self._roots
        if view is not None and roots is not None and self._clock() - self._fetched_at < self._ttl:
            return view, roots
        async with self._lock:
            fresh = self._clock() - self._fetched_at < self._ttl
            if self._view is not None and self._roots is not None and fresh:
                return self._view, self._roots
            generation = self._generation
            view = await self._observe()
            roots = await asyncio.to_thread(derive_roots, view, self._home)
            if generation == self._generation:
                self._view, self._roots, self._fetched_at = view, roots, self._clock()
            return view, roots

    async def _observe(self) -> SessionView:
        try:
            result = await self._herdr.call("session.snapshot", {})
        except HerdrError as exc:
            return await self._observe_degraded(exc)
        snapshot = result.get("snapshot", {})
        return SessionView(
            workspaces=list(snapshot.get("workspaces", [])),
            tabs=list(snapshot.get("tabs", [])),
            panes=list(snapshot.get("panes", [])),
            agents=list(snapshot.get("agents", [])),
            source="snapshot",
            herdr_version=snapshot.get("version"),
            focused_workspace_id=snapshot.get("focused_workspace_id"),
        )

    async def _observe_degraded(self, cause: HerdrError) -> SessionView:
        warnings = [
            {
                "code": "snapshot_failed",
                "message": f"session.snapshot failed ({cause.code}); facts below come from list "
                "calls and direct Git reads and may be incomplete",
            }
        ]
        collected: dict[str, list[dict[str, Any]]] = {}
        answered = 0
        for key, method in _LIST_METHODS:
            try:
                result = await self._herdr.call(method, {}, timeout=LIST_TIMEOUT_SECONDS)
            except HerdrError as exc:
                warnings.append({"code": f"{key}_unavailable", "message": f"{method} failed ({exc.code})"})
                collected[key] = []
                continue
            answered += 1
            collected[key] = _first_list(result, key)
        return SessionView(
            workspaces=collected["workspaces"],
            tabs=collected["tabs"],
            panes=collected["panes"],
            agents=collected["agents"],
            source="lists" if answered else "unavailable",
            warnings=warnings,
        )


def _first_list(result: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = result.get(key)
    if isinstance(value, list):
        return [item for item in value if isinstance(item, dict)]
    lists = [item for item in result.values() if isinstance(item, list)]
    return [item for item in lists[0] if isinstance(item, dict)] if lists else []


def derive_roots(view: SessionView, home: Path) -> RootSet:
    """Managed and operational roots proven by the live view (blocking: runs git)."""
    workspace_of: dict[Path, set[str]] = {}
    for item in [*view.panes, *view.agents]:
        for cwd in _cwds_of(item):
            workspace_of.setdefault(Path(cwd), set()).add(str(item.get("workspace_id", "")))
    for workspace in view.workspaces:
        worktree = workspace.get("worktree")
        if isinstance(worktree, dict):
            for key in ("checkout_path", "repo_root"):
                path = worktree.get(key)
                if isinstance(path, str) and path.startswith("/"):
                    workspace_of.setdefault(Path(path), set()).add(str(workspace.get("workspace_id", "")))
    busy_cwds = view.working_cwds()
    return RootSet.build(_candidates(workspace_of, busy_cwds), home=home)


def _candidates(workspace_of: dict[Path, set[str]], busy_cwds: Iterable[Path]) -> list[RootCandidate]:
    toplevels: dict[Path, Path | None] = {cwd: git_toplevel(cwd) for cwd in workspace_of}
    busy_roots = {toplevels.get(cwd) or cwd for cwd in busy_cwds}
    candidates = []
    for cwd, workspaces in workspace_of.items():
        top = toplevels[cwd]
        root = top if top is not None else cwd
        candidates.append(
            RootCandidate(
                path=root,
                kind="managed" if top is not None else "operational",
                busy=root in busy_roots,
                workspace_ids=frozenset(w for w in workspaces if w),
            )
        )
    return candidates
