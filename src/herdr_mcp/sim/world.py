"""The simulated Herdr session: workspaces, tabs, panes and agents, with Herdr's ids and shapes.

Pure state: no sockets, no tasks. Every change goes through a `World` method, which keeps the
rollups and revisions right and publishes the matching Herdr events through `emit`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from herdr_mcp.sim.config import AgentConfig, AgentScript, SimConfigError

_ROLLUP_RANK = {"unknown": 0, "idle": 1, "done": 2, "blocked": 3, "working": 4}
"""Which status a tab or workspace shows when its panes differ: working > blocked > done > idle."""

_BASE32_DIGITS = "123456789abcdefghijklmnopqrstuvw"

MAX_SCROLLBACK_LINES = 5000
"""Lines of history kept per pane, like a terminal's scrollback."""

SCREEN_COLUMNS = 80
SCREEN_ROWS = 24
DEFAULT_RECENT_LINES = 200

_ANSI_ESCAPE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")

Emit = Callable[[str, dict[str, Any]], None]
StatusListener = Callable[["Pane"], None]


class HerdrFailure(Exception):
    """A Herdr error response: `code` is one of Herdr's error codes."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def workspace_id_for(number: int) -> str:
    """Herdr's workspace id: `w` + the number in bijective base 32 (w1 .. ww, w11, ...)."""
    digits = []
    while number > 0:
        number, remainder = divmod(number - 1, 32)
        digits.append(_BASE32_DIGITS[remainder])
    return "w" + "".join(reversed(digits))


@dataclass
class Agent:
    name: str
    kind: str
    script: AgentScript
    status: str
    state_change_seq: int = 0
    turn: int = 0
    """The prompt number whose script is running (or last ran)."""
    listeners: list[StatusListener] = field(default_factory=list)


@dataclass
class Scrollback:
    """A pane's output: finished lines plus the line being written."""

    lines: list[str] = field(default_factory=list)
    partial: str = ""

    def append(self, text: str) -> None:
        pieces = (self.partial + text.replace("\r\n", "\n")).split("\n")
        self.lines.extend(pieces[:-1])
        self.partial = pieces[-1]
        del self.lines[:-MAX_SCROLLBACK_LINES]

    def logical_lines(self) -> list[str]:
        return [*self.lines, self.partial] if self.partial else list(self.lines)


@dataclass
class Pane:
    pane_id: str
    terminal_id: str
    workspace_id: str
    tab_id: str
    cwd: Path
    label: str | None
    agent: Agent | None = None
    revision: int = 0
    scrollback: Scrollback = field(default_factory=Scrollback)
    typed: str = ""
    """Text typed into the pane since the last enter."""

    @property
    def status(self) -> str:
        return self.agent.status if self.agent else "unknown"


@dataclass
class Tab:
    tab_id: str
    workspace_id: str
    label: str
    pane_ids: list[str] = field(default_factory=list)
    focused_pane_id: str | None = None


@dataclass
class Workspace:
    workspace_id: str
    label: str
    cwd: Path
    tab_ids: list[str] = field(default_factory=list)
    active_tab_id: str | None = None
    next_tab: int = 1
    next_pane: int = 1
    status: str = "unknown"


class World:
    """The session state and its invariants; call only from the simulator's event loop."""

    def __init__(self, version: str, protocol: int, emit: Emit) -> None:
        self.version = version
        self.protocol = protocol
        self._emit = emit
        self.workspaces: dict[str, Workspace] = {}
        self.tabs: dict[str, Tab] = {}
        self.panes: dict[str, Pane] = {}
        self.focused_workspace_id: str | None = None
        self._next_workspace = 1
        self._next_terminal = 1
        self._state_change_seq = 0

    # -- building -----------------------------------------------------------------------

    def new_workspace(self, cwd: Path, label: str | None) -> Workspace:
        directory = _real_directory(cwd)
        workspace_id = workspace_id_for(self._next_workspace)
        self._next_workspace += 1
        workspace = Workspace(workspace_id, label or directory.name or str(directory), directory)
        self.workspaces[workspace_id] = workspace
        if self.focused_workspace_id is None:
            self.focused_workspace_id = workspace_id
        return workspace

    def new_tab(self, workspace: Workspace, label: str | None) -> Tab:
        tab_id = f"{workspace.workspace_id}:t{workspace.next_tab}"
        workspace.next_tab += 1
        tab = Tab(tab_id, workspace.workspace_id, label or str(len(workspace.tab_ids) + 1))
        self.tabs[tab_id] = tab
        workspace.tab_ids.append(tab_id)
        workspace.active_tab_id = workspace.active_tab_id or tab_id
        return tab

    def new_pane(self, tab: Tab, cwd: Path | None, label: str | None, agent: AgentConfig | None) -> Pane:
        workspace = self.workspaces[tab.workspace_id]
        directory = _real_directory(cwd) if cwd is not None else workspace.cwd
        if agent is not None:
            self._check_agent_name(agent.name)
        pane_id = f"{workspace.workspace_id}:p{workspace.next_pane}"
        workspace.next_pane += 1
        pane = Pane(
            pane_id, f"term_{self._next_terminal}", workspace.workspace_id, tab.tab_id, directory, label
        )
        self._next_terminal += 1
        if agent is not None:
            pane.agent = Agent(agent.name, agent.kind, agent.script, agent.status)
        self.panes[pane_id] = pane
        tab.pane_ids.append(pane_id)
        tab.focused_pane_id = tab.focused_pane_id or pane_id
        return pane

    def attach_agent(self, pane: Pane, agent: AgentConfig) -> None:
        if pane.agent is not None:
            raise SimConfigError(f"pane {pane.pane_id} already runs agent {pane.agent.name!r}")
        self._check_agent_name(agent.name)
        pane.agent = Agent(agent.name, agent.kind, agent.script, agent.status)
        pane.revision += 1
        self._emit(
            "pane_agent_detected",
            {
                "type": "pane_agent_detected",
                "pane_id": pane.pane_id,
                "workspace_id": pane.workspace_id,
                "agent": agent.kind,
            },
        )
        self._emit("pane_updated", {"type": "pane_updated", "pane": self.pane_info(pane)})
        self.refresh_rollups(pane.workspace_id)

    def announce_workspace(self, workspace: Workspace) -> None:
        """Publish the creation of a freshly built workspace, its tabs and its panes."""
        workspace.status = self._rollup(self._workspace_panes(workspace))
        self._emit(
            "workspace_created", {"type": "workspace_created", "workspace": self.workspace_info(workspace)}
        )
        for tab_id in workspace.tab_ids:
            self.announce_tab(self.tabs[tab_id])

    def announce_tab(self, tab: Tab) -> None:
        self._emit("tab_created", {"type": "tab_created", "tab": self.tab_info(tab)})
        for pane_id in tab.pane_ids:
            self.announce_pane(self.panes[pane_id])

    def announce_pane(self, pane: Pane) -> None:
        self._emit("pane_created", {"type": "pane_created", "pane": self.pane_info(pane)})

    # -- changes ------------------------------------------------------------------------

    def set_status(self, pane: Pane, status: str) -> None:
        """Move an agent to `status`; a real change bumps its seq and the pane revision."""
        agent = pane.agent
        if agent is None or agent.status == status:
            return
        self._state_change_seq += 1
        agent.status = status
        agent.state_change_seq = self._state_change_seq
        pane.revision += 1
        self._emit(
            "pane.agent_status_changed",
            {
                "pane_id": pane.pane_id,
                "workspace_id": pane.workspace_id,
                "agent_status": status,
                "agent": agent.kind,
            },
        )
        self._emit("pane_updated", {"type": "pane_updated", "pane": self.pane_info(pane)})
        self.refresh_rollups(pane.workspace_id)
        for listener in list(agent.listeners):
            listener(pane)

    def append_output(self, pane: Pane, text: str) -> None:
        if text:
            pane.scrollback.append(text)
            pane.revision += 1

    def close_pane(self, pane: Pane) -> None:
        """Close a pane; an emptied tab closes, and an emptied workspace closes."""
        del self.panes[pane.pane_id]
        tab = self.tabs[pane.tab_id]
        tab.pane_ids.remove(pane.pane_id)
        if tab.focused_pane_id == pane.pane_id:
            tab.focused_pane_id = tab.pane_ids[0] if tab.pane_ids else None
        self._emit(
            "pane_closed", {"type": "pane_closed", "pane_id": pane.pane_id, "workspace_id": pane.workspace_id}
        )
        if pane.agent is not None:
            for listener in list(pane.agent.listeners):
                listener(pane)
        workspace = self.workspaces[pane.workspace_id]
        if not tab.pane_ids:
            self._close_tab(workspace, tab)
        if workspace.tab_ids:
            self.refresh_rollups(workspace.workspace_id)
        else:
            self._close_workspace(workspace)

    def refresh_rollups(self, workspace_id: str) -> None:
        workspace = self.workspaces[workspace_id]
        status = self._rollup(self._workspace_panes(workspace))
        if status != workspace.status:
            workspace.status = status
            self._emit(
                "workspace_updated",
                {"type": "workspace_updated", "workspace": self.workspace_info(workspace)},
            )

    # -- lookups ------------------------------------------------------------------------

    def pane(self, pane_id: str) -> Pane:
        try:
            return self.panes[pane_id]
        except KeyError:
            raise HerdrFailure("pane_not_found", f"pane {pane_id!r} not found") from None

    def tab(self, tab_id: str) -> Tab:
        try:
            return self.tabs[tab_id]
        except KeyError:
            raise HerdrFailure("tab_not_found", f"tab {tab_id!r} not found") from None

    def workspace(self, workspace_id: str) -> Workspace:
        try:
            return self.workspaces[workspace_id]
        except KeyError:
            raise HerdrFailure("workspace_not_found", f"workspace {workspace_id!r} not found") from None

    def agent_panes(self) -> Iterator[Pane]:
        return (pane for pane in self.panes.values() if pane.agent is not None)

    def resolve_agent(self, target: str) -> Pane:
        """An agent target is a pane id, an agent name, or a workspace id with exactly one agent
        (tried in that order)."""
        if target in self.panes:
            pane = self.panes[target]
            if pane.agent is None:
                raise HerdrFailure("agent_not_found", f"pane {target} has no agent")
            return pane
        for pane in self.agent_panes():
            if pane.agent is not None and pane.agent.name == target:
                return pane
        if target in self.workspaces:
            candidates = [p for p in self.agent_panes() if p.workspace_id == target]
            if len(candidates) == 1:
                return candidates[0]
            if not candidates:
                raise HerdrFailure("agent_not_found", f"workspace {target} has no agent")
            names = ", ".join(f"{p.pane_id} ({p.agent.name})" for p in candidates if p.agent)
            raise HerdrFailure(
                "invalid_params",
                f"workspace {target} has {len(candidates)} agents ({names}); target one of them",
            )
        raise HerdrFailure("agent_not_found", f"no agent matches {target!r} (use an agent name or pane id)")

    # -- Herdr shapes -------------------------------------------------------------------

    def focused_tab_id(self) -> str | None:
        if self.focused_workspace_id is None:
            return None
        return self.workspaces[self.focused_workspace_id].active_tab_id

    def focused_pane_id(self) -> str | None:
        tab_id = self.focused_tab_id()
        return self.tabs[tab_id].focused_pane_id if tab_id else None

    def workspace_info(self, workspace: Workspace) -> dict[str, Any]:
        number = (
            list(self.workspaces).index(workspace.workspace_id) + 1
            if workspace.workspace_id in self.workspaces
            else 0
        )
        return {
            "workspace_id": workspace.workspace_id,
            "number": number,
            "label": workspace.label,
            "focused": workspace.workspace_id == self.focused_workspace_id,
            "pane_count": sum(len(self.tabs[t].pane_ids) for t in workspace.tab_ids if t in self.tabs),
            "tab_count": len(workspace.tab_ids),
            "active_tab_id": workspace.active_tab_id or "",
            "agent_status": workspace.status,
        }

    def tab_info(self, tab: Tab) -> dict[str, Any]:
        workspace = self.workspaces[tab.workspace_id]
        return {
            "tab_id": tab.tab_id,
            "workspace_id": tab.workspace_id,
            "number": workspace.tab_ids.index(tab.tab_id) + 1,
            "label": tab.label,
            "focused": tab.tab_id == self.focused_tab_id(),
            "pane_count": len(tab.pane_ids),
            "agent_status": self._rollup(self.panes[p] for p in tab.pane_ids),
        }

    def pane_info(self, pane: Pane) -> dict[str, Any]:
        cwd = str(pane.cwd)
        return {
            "pane_id": pane.pane_id,
            "terminal_id": pane.terminal_id,
            "workspace_id": pane.workspace_id,
            "tab_id": pane.tab_id,
            "focused": pane.pane_id == self.focused_pane_id(),
            "agent_status": pane.status,
            "revision": pane.revision,
            "cwd": cwd,
            "foreground_cwd": cwd,
            "label": pane.label,
            "agent": pane.agent.kind if pane.agent else None,
            "title": None,
        }

    def agent_info(self, pane: Pane) -> dict[str, Any]:
        agent = pane.agent
        if agent is None:
            raise HerdrFailure("agent_not_found", f"pane {pane.pane_id} has no agent")
        return {
            **self.pane_info(pane),
            "name": agent.name,
            "kind": agent.kind,
            "state_change_seq": agent.state_change_seq,
            "interactive_ready": True,
            "launch_pending": False,
        }

    def snapshot(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "protocol": self.protocol,
            "focused_workspace_id": self.focused_workspace_id,
            "focused_tab_id": self.focused_tab_id(),
            "focused_pane_id": self.focused_pane_id(),
            "workspaces": [self.workspace_info(w) for w in self.workspaces.values()],
            "tabs": [self.tab_info(t) for t in self.tabs.values()],
            "panes": [self.pane_info(p) for p in self.panes.values()],
            "layouts": [],
            "agents": [self.agent_info(p) for p in self.agent_panes()],
        }

    def read(
        self, pane: Pane, source: str, lines: int | None, keep_ansi: bool, format_: str
    ) -> dict[str, Any]:
        """A `PaneReadResult`: the last `lines` rows of the chosen view of the pane's output."""
        logical = pane.scrollback.logical_lines()
        if not keep_ansi:
            logical = [_ANSI_ESCAPE.sub("", line) for line in logical]
        rows = logical if source == "recent_unwrapped" else [r for line in logical for r in _wrap(line)]
        default = SCREEN_ROWS if source in ("visible", "detection") else DEFAULT_RECENT_LINES
        wanted = default if lines is None else lines
        if source in ("visible", "detection"):
            wanted = min(wanted, SCREEN_ROWS)
        shown = rows[len(rows) - wanted :] if wanted else []
        text = "\n".join(shown)
        return {
            "pane_id": pane.pane_id,
            "workspace_id": pane.workspace_id,
            "tab_id": pane.tab_id,
            "source": source,
            "format": format_,
            "text": text,
            "revision": pane.revision,
            "truncated": len(shown) < len(rows),
        }

    # -- internals ----------------------------------------------------------------------

    def _check_agent_name(self, name: str) -> None:
        if any(p.agent is not None and p.agent.name == name for p in self.panes.values()):
            raise SimConfigError(f"an agent named {name!r} already exists; agent names are unique")

    def _workspace_panes(self, workspace: Workspace) -> Iterator[Pane]:
        return (self.panes[p] for t in workspace.tab_ids for p in self.tabs[t].pane_ids)

    @staticmethod
    def _rollup(panes: Iterator[Pane]) -> str:
        return max((pane.status for pane in panes), key=_ROLLUP_RANK.__getitem__, default="unknown")

    def _close_tab(self, workspace: Workspace, tab: Tab) -> None:
        del self.tabs[tab.tab_id]
        workspace.tab_ids.remove(tab.tab_id)
        if workspace.active_tab_id == tab.tab_id:
            workspace.active_tab_id = workspace.tab_ids[0] if workspace.tab_ids else None
        self._emit(
            "tab_closed", {"type": "tab_closed", "tab_id": tab.tab_id, "workspace_id": workspace.workspace_id}
        )

    def _close_workspace(self, workspace: Workspace) -> None:
        final = self.workspace_info(workspace)
        del self.workspaces[workspace.workspace_id]
        if self.focused_workspace_id == workspace.workspace_id:
            self.focused_workspace_id = next(iter(self.workspaces), None)
        self._emit(
            "workspace_closed",
            {"type": "workspace_closed", "workspace_id": workspace.workspace_id, "workspace": final},
        )


def _wrap(line: str) -> list[str]:
    if len(line) <= SCREEN_COLUMNS:
        return [line]
    return [line[i : i + SCREEN_COLUMNS] for i in range(0, len(line), SCREEN_COLUMNS)]


def _real_directory(path: Path) -> Path:
    directory = Path(path).expanduser().resolve()
    if not directory.is_dir():
        raise SimConfigError(f"{path} is not an existing directory; simulated panes live in real directories")
    return directory
