"""The simulator's method handlers, by area. Each handler takes (simulator, waits, request id,
params) and returns the `result` object, or raises `HerdrFailure` for Herdr's error answer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from herdr_mcp.sim.methods import agents, layouts, panes, session, viewport, workspaces, worktrees

if TYPE_CHECKING:
    from herdr_mcp.sim.server import Simulator
    from herdr_mcp.sim.waits import Waits

Handler = Callable[["Simulator", "Waits", str, dict[str, Any]], Awaitable[dict[str, Any]]]


def registry() -> dict[str, Handler]:
    table: dict[str, Handler] = {}
    for module in (session, workspaces, panes, agents, layouts, worktrees, viewport):
        table.update(module.HANDLERS)
    return table


__all__ = [
    "Handler",
    "agents",
    "layouts",
    "panes",
    "registry",
    "session",
    "viewport",
    "workspaces",
    "worktrees",
]
