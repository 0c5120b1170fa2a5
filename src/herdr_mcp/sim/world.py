"""The simulated session: workspaces, tabs, panes and agents, with Herdr's ids, shapes and events.

Every change goes through a `World` method, which keeps ids, rollups and revisions right and
pushes the events Herdr emits for that change into the event hub (`sim.hub`). Shapes follow the
published schema and Herdr's builders (src/app/creation.rs workspace_info, tab_info, pane_info;
src/app/agents.rs agent_info): optional fields are omitted, never null.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from herdr_mcp.sim import layout
from herdr_mcp.sim.config import AgentConfig, SimConfigError
from herdr_mcp.sim.hub import EventHub
from herdr_mcp.sim.ids import new_terminal_id, pane_id_for, tab_id_for, workspace_id_for
from herdr_mcp.sim.model import Agent, HerdrFailure, Pane, Tab, Workspace
from herdr_mcp.sim.terminal import ANSI_ESCAPE, SCREEN_COLUMNS, SCREEN_ROWS, PaneProcess

# Herdr: src/app/api_helpers.rs tab_attention_priority (Idle unseen is `done`).
_ROLLUP_RANK = {"blocked": 4, "done": 3, "working": 2, "idle": 1, "unknown": 0}

# Herdr: src/app/api_helpers.rs read_terminal_snapshot: lines capped at 1000, recent default 80.
MAX_READ_LINES = 1000
DEFAULT_RECENT_LINES = 80


class World:
    """The session state; call only from the simulator's event loop."""

    def __init__(self, version: str, protocol: int, hub: EventHub) -> None:
        self.version = version
        self.protocol = protocol
        self.hub = hub
        self.workspaces: dict[str, Workspace] = {}
        self.panes: dict[str, Pane] = {}
        self.active_workspace_id: str | None = None
        self.socket_path = ""
        self.live = False
        """Whether panes get real shells (set by the simulator once it listens)."""
        self._next_workspace = 1
        self._state_change_seq = 0
        self.aliases: dict[str, str] = {}
        """Old public id -> current id of a pane moved to another workspace (Herdr:
        src/app/state.rs public_pane_id_aliases, set by src/app/api/panes.rs handle_pane_move)."""

    def emit(self, event: str, data: dict[str, Any]) -> None:
        self.hub.push(event, data)

    # -- building -----------------------------------------------------------------------

    def new_workspace(self, cwd: Path, label: str | None) -> Workspace:
        directory = real_directory(cwd)
        workspace = Workspace(self.next_workspace_id(), label, directory)
        self.workspaces[workspace.workspace_id] = workspace
        if self.active_workspace_id is None:
            self.active_workspace_id = workspace.workspace_id
        return workspace

    def next_workspace_id(self) -> str:
        workspace_id = workspace_id_for(self._next_workspace)
        self._next_workspace += 1
        return workspace_id

    def new_tab(self, workspace: Workspace, label: str | None, pane: dict[str, Any] | None = None) -> Tab:
        """A tab with one root pane (`pane`: keyword arguments of `new_pane`)."""
        number = workspace.next_tab_number
        workspace.next_tab_number += 1
        tab_id = tab_id_for(workspace.workspace_id, number)
        root = self.new_pane(workspace, tab_id, **(pane or {}))
        tab = Tab.with_root(tab_id, workspace.workspace_id, number, label, root.pane_id)
        workspace.tabs.append(tab)
        return tab

    def new_pane(
        self,
        workspace: Workspace,
        tab_id: str,
        cwd: Path | None = None,
        label: str | None = None,
        agent: AgentConfig | None = None,
        env: dict[str, str] | None = None,
    ) -> Pane:
        directory = real_directory(cwd) if cwd is not None else workspace.cwd
        if agent is not None:
            self.check_agent_name(agent.name)
        pane_id = pane_id_for(workspace.workspace_id, workspace.next_pane_number)
        workspace.next_pane_number += 1
        workspace.pane_numbers += 1
        pane = Pane(pane_id, new_terminal_id(), workspace.workspace_id, tab_id, directory, label)
        pane.env = dict(env or {})
        self.aliases.pop(pane_id, None)  # Herdr: remove_alias_shadowed_by_new_pane
        if agent is not None:
            pane.agent = Agent(agent.kind, agent.script, agent.status, name=agent.name)
        self.panes[pane_id] = pane
        self.start_process(pane)
        return pane

    def start_process(self, pane: Pane) -> None:
        """Give the pane its real shell once the simulator is live (Herdr's pane launch env)."""
        if not self.live or pane.process is not None:
            return
        env = {
            **pane.env,
            "HERDR_ENV": "1",
            "HERDR_SOCKET_PATH": self.socket_path,
            "HERDR_WORKSPACE_ID": pane.workspace_id,
            "HERDR_TAB_ID": pane.tab_id,
            "HERDR_PANE_ID": pane.pane_id,
        }
        pane.process = PaneProcess(
            pane.cwd, env, lambda text: self.shell_output(pane, text), lambda: self.shell_exited(pane)
        )

    def shell_output(self, pane: Pane, text: str) -> None:
        if pane.agent is None:
            self.append_output(pane, text)

    def shell_exited(self, pane: Pane) -> None:
        """The pane's program ended by itself: Herdr's pane_exited, then the pane closes
        (src/app/api.rs, AppEvent::PaneDied)."""
        if pane.pane_id not in self.panes:
            return
        self.emit("pane_exited", {"pane_id": pane.pane_id, "workspace_id": pane.workspace_id})
        self.close_pane(pane)

    def check_agent_name(self, name: str) -> None:
        if any(p.agent is not None and p.agent.name == name for p in self.panes.values()):
            raise SimConfigError(f"an agent named {name!r} already exists; agent names are unique")

    # -- events of creation -------------------------------------------------------------

    def announce_workspace(self, workspace: Workspace) -> None:
        """Herdr: src/app/creation.rs emit_workspace_open_events (created, tab, root pane, layout)."""
        self.emit("workspace_created", {"workspace": self.workspace_info(workspace)})
        for tab in workspace.tabs:
            self.announce_tab(tab)

    def announce_tab(self, tab: Tab) -> None:
        """Herdr: src/app/creation.rs emit_tab_created_events."""
        self.emit("tab_created", {"tab": self.tab_info(tab)})
        for pane_id in layout.pane_ids(tab.root):
            self.emit("pane_created", {"pane": self.pane_info(self.panes[pane_id])})
        self.emit_layout(tab)

    def emit_layout(self, tab: Tab) -> None:
        self.emit("layout_updated", {"layout": self.layout_snapshot(tab)})

    # -- changes ------------------------------------------------------------------------

    def set_status(self, pane: Pane, status: str) -> None:
        """Move an agent to `status`; a change bumps its state_change_seq and emits Herdr's
        pane_agent_status_changed (src/app/api.rs emit_pane_state_update)."""
        agent = pane.agent
        if agent is None or agent.status == status:
            return
        self._state_change_seq += 1
        agent.status = status
        agent.state_change_seq = self._state_change_seq
        pane.revision += 1
        self.emit(
            "pane_agent_status_changed",
            {
                "pane_id": pane.pane_id,
                "workspace_id": pane.workspace_id,
                "agent_status": status,
                "agent": agent.kind,
            },
        )
        for listener in list(agent.listeners):
            listener(pane)

    def append_output(self, pane: Pane, text: str) -> None:
        if text:
            pane.scrollback.append(text)
            pane.revision += 1

    def focus_pane(self, pane: Pane) -> None:
        """Focus a pane (its tab and workspace too); a change of focus emits workspace_focused,
        tab_focused and pane_focused (src/app/api.rs sync_focus_events_with_outer_event). The
        focused tab is seen, so a `done` agent there becomes `idle`."""
        before = self.focused_pane_id()
        workspace = self.workspaces[pane.workspace_id]
        tab = self.tab(pane.tab_id)
        self.active_workspace_id = workspace.workspace_id
        workspace.active_tab = workspace.tabs.index(tab)
        tab.focused_pane_id = pane.pane_id
        self.focus_changed(before)
        self.mark_seen(tab)

    def focus_changed(self, before: str | None) -> None:
        after = self.focused_pane_id()
        if after is None or after == before:
            return
        pane = self.panes[after]
        self.emit("workspace_focused", {"workspace_id": pane.workspace_id})
        self.emit("tab_focused", {"tab_id": pane.tab_id, "workspace_id": pane.workspace_id})
        self.emit("pane_focused", {"pane_id": pane.pane_id, "workspace_id": pane.workspace_id})

    def mark_seen(self, tab: Tab) -> None:
        for pane_id in layout.pane_ids(tab.root):
            if self.panes[pane_id].status == "done":
                self.set_status(self.panes[pane_id], "idle")

    def close_pane(self, pane: Pane) -> None:
        """Herdr: src/app/api/panes.rs close_pane: pane_closed, then workspace_closed when it was
        the workspace's last pane, else layout_updated for its tab (an emptied tab goes quietly)."""
        workspace = self.workspaces[pane.workspace_id]
        tab = self.tab(pane.tab_id)
        snapshot = self.workspace_info(workspace)
        before = self.focused_pane_id()
        last = self._workspace_pane_ids(workspace) == [pane.pane_id]
        self._drop_pane(pane)
        remaining = layout.remove_leaf(tab.root, pane.pane_id)
        self.emit("pane_closed", {"pane_id": pane.pane_id, "workspace_id": pane.workspace_id})
        if last:
            self.drop_workspace(workspace)
            self.emit("workspace_closed", {"workspace_id": workspace.workspace_id, "workspace": snapshot})
        elif remaining is None:
            self.drop_tab(workspace, tab)
        else:
            tab.root = remaining
            if tab.focused_pane_id == pane.pane_id:
                tab.focused_pane_id = layout.pane_ids(remaining)[0]
            tab.zoomed = tab.zoomed and len(layout.pane_ids(remaining)) > 1
            self.emit_layout(tab)
        self.focus_changed(before)

    def close_tab(self, tab: Tab) -> None:
        """Herdr: src/app/api/tabs.rs handle_tab_close (the last tab closes its workspace)."""
        workspace = self.workspaces[tab.workspace_id]
        before = self.focused_pane_id()
        if len(workspace.tabs) == 1:
            self.emit("tab_closed", {"tab_id": tab.tab_id, "workspace_id": workspace.workspace_id})
            self.close_workspace(workspace)
            return
        for pane_id in layout.pane_ids(tab.root):
            self._drop_pane(self.panes[pane_id])
        self.drop_tab(workspace, tab)
        self.emit("tab_closed", {"tab_id": tab.tab_id, "workspace_id": workspace.workspace_id})
        self.focus_changed(before)

    def close_workspace(self, workspace: Workspace) -> None:
        """Herdr: src/app/api/workspaces.rs handle_workspace_close."""
        snapshot = self.workspace_info(workspace)
        before = self.focused_pane_id()
        for pane_id in self._workspace_pane_ids(workspace):
            self._drop_pane(self.panes[pane_id])
        self.drop_workspace(workspace)
        self.emit("workspace_closed", {"workspace_id": workspace.workspace_id, "workspace": snapshot})
        self.focus_changed(before)

    def _drop_pane(self, pane: Pane) -> None:
        del self.panes[pane.pane_id]
        self.aliases = {old: new for old, new in self.aliases.items() if new != pane.pane_id}
        self.workspaces[pane.workspace_id].pane_numbers -= 1
        if pane.process is not None:
            pane.process.close()
        if pane.agent is not None:
            for listener in list(pane.agent.listeners):
                listener(pane)

    def drop_tab(self, workspace: Workspace, tab: Tab) -> None:
        index = workspace.tabs.index(tab)
        workspace.tabs.remove(tab)
        if workspace.active_tab >= len(workspace.tabs) or (index < workspace.active_tab):
            workspace.active_tab = max(0, workspace.active_tab - 1)

    def drop_workspace(self, workspace: Workspace) -> None:
        order = list(self.workspaces)
        index = order.index(workspace.workspace_id)
        del self.workspaces[workspace.workspace_id]
        if self.active_workspace_id == workspace.workspace_id:
            rest = list(self.workspaces)
            self.active_workspace_id = rest[min(index, len(rest) - 1)] if rest else None

    def rekey_pane(self, pane: Pane, new_id: str) -> None:
        """Give a pane a new public id (a move to another workspace)."""
        del self.panes[pane.pane_id]
        pane.pane_id = new_id
        self.panes[new_id] = pane

    def stop_processes(self) -> None:
        self.live = False
        for pane in self.panes.values():
            if pane.process is not None:
                pane.process.close()
                pane.process = None

    # -- lookups (Herdr's not-found messages) --------------------------------------------

    def pane(self, pane_id: str) -> Pane:
        """A pane by its id, or by the id it had before moving to another workspace (Herdr:
        src/app/ids.rs parse_pane_id looks up public_pane_id_aliases first)."""
        try:
            return self.panes[self.aliases.get(pane_id, pane_id)]
        except KeyError:
            raise HerdrFailure("pane_not_found", f"pane {pane_id} not found") from None

    def tab(self, tab_id: str) -> Tab:
        for workspace in self.workspaces.values():
            for tab in workspace.tabs:
                if tab.tab_id == tab_id:
                    return tab
        raise HerdrFailure("tab_not_found", f"tab {tab_id} not found")

    def workspace(self, workspace_id: str) -> Workspace:
        try:
            return self.workspaces[workspace_id]
        except KeyError:
            raise HerdrFailure("workspace_not_found", f"workspace {workspace_id} not found") from None

    def tabs(self) -> Iterator[Tab]:
        return (tab for workspace in self.workspaces.values() for tab in workspace.tabs)

    def ordered_panes(self, workspace: Workspace | None = None) -> list[Pane]:
        spaces = [workspace] if workspace else list(self.workspaces.values())
        return [self.panes[p] for ws in spaces for p in self._workspace_pane_ids(ws)]

    def agent_panes(self) -> list[Pane]:
        return [pane for pane in self.ordered_panes() if pane.agent is not None]

    def resolve_agent(self, target: str) -> Pane:
        """Herdr: src/app/terminal_targets.rs resolve_agent_target: a pane id of an agent pane,
        else an exact agent name (several -> agent_target_ambiguous). No workspace-id form."""
        pane = self.panes.get(target)
        if pane is not None and pane.agent is not None:
            return pane
        named = [p for p in self.agent_panes() if p.agent is not None and p.agent.name == target]
        if len(named) == 1:
            return named[0]
        if len(named) > 1:
            candidates = "; ".join(
                f"terminal_id={p.terminal_id} pane_id={p.pane_id} workspace_id={p.workspace_id} "
                f"tab_id={p.tab_id} cwd={p.cwd} status={p.status.capitalize()}"
                for p in named
            )
            raise HerdrFailure(
                "agent_target_ambiguous", f"agent target {target} is ambiguous; candidates: {candidates}"
            )
        raise HerdrFailure("agent_not_found", f"agent target {target} not found")

    # -- Herdr shapes -------------------------------------------------------------------

    def focused_tab(self) -> Tab | None:
        if self.active_workspace_id is None:
            return None
        workspace = self.workspaces[self.active_workspace_id]
        return workspace.tabs[workspace.active_tab] if workspace.tabs else None

    def focused_pane_id(self) -> str | None:
        tab = self.focused_tab()
        return tab.focused_pane_id if tab else None

    def workspace_info(self, workspace: Workspace) -> dict[str, Any]:
        order = list(self.workspaces)
        info: dict[str, Any] = {
            "workspace_id": workspace.workspace_id,
            "number": order.index(workspace.workspace_id) + 1 if workspace.workspace_id in order else 0,
            "label": workspace.label or workspace.cwd.name or str(workspace.cwd),
            "focused": workspace.workspace_id == self.active_workspace_id,
            "pane_count": workspace.pane_numbers,
            "tab_count": len(workspace.tabs),
            "active_tab_id": workspace.tabs[workspace.active_tab].tab_id
            if workspace.tabs
            else tab_id_for(workspace.workspace_id, workspace.active_tab + 1),
            "agent_status": rollup(self.panes[p].status for p in self._workspace_pane_ids(workspace)),
        }
        if workspace.tokens:
            info["tokens"] = dict(workspace.tokens)
        if workspace.worktree is not None:
            space = workspace.worktree
            info["worktree"] = {
                "repo_key": str(space.repo_root),
                "repo_name": space.repo_root.name,
                "repo_root": str(space.repo_root),
                "checkout_path": str(space.checkout_path),
                "is_linked_worktree": space.is_linked_worktree,
            }
        return info

    def tab_info(self, tab: Tab) -> dict[str, Any]:
        focused = self.focused_tab()
        return {
            "tab_id": tab.tab_id,
            "workspace_id": tab.workspace_id,
            "number": tab.number,
            "label": tab.label or str(tab.number),
            "focused": focused is not None and focused.tab_id == tab.tab_id,
            "pane_count": len(layout.pane_ids(tab.root)),
            "agent_status": rollup(self.panes[p].status for p in layout.pane_ids(tab.root)),
        }

    def pane_info(self, pane: Pane) -> dict[str, Any]:
        info: dict[str, Any] = {
            "pane_id": pane.pane_id,
            "terminal_id": pane.terminal_id,
            "workspace_id": pane.workspace_id,
            "tab_id": pane.tab_id,
            "focused": pane.pane_id == self.focused_pane_id(),
            "cwd": str(pane.cwd),
            "foreground_cwd": str(pane.cwd),
        }
        if pane.label is not None:
            info["label"] = pane.label
        if pane.agent is not None:
            info["agent"] = pane.agent.kind
        if pane.title is not None:
            info["title"] = pane.title
        info["agent_status"] = pane.status
        if pane.tokens:
            info["tokens"] = dict(pane.tokens)
        scroll = self.scroll_info(pane)
        if scroll is not None:
            info["scroll"] = scroll
        info["revision"] = pane.revision
        return info

    def text_rows(self, pane: Pane) -> list[str]:
        """The pane's retained text as screen rows (wrapped at the screen width, ANSI stripped),
        row 0 the oldest: the coordinates of PaneTextPoint.row."""
        logical = [ANSI_ESCAPE.sub("", line) for line in pane.scrollback.logical_lines()]
        return [row for line in logical for row in wrap(line)]

    def scroll_info(self, pane: Pane) -> dict[str, int] | None:
        """Herdr: src/app/creation.rs pane_info (PaneInfo.scroll from the terminal runtime's
        scroll_metrics; none without a running terminal)."""
        if pane.process is None:
            return None
        most = max(0, len(self.text_rows(pane)) - SCREEN_ROWS)
        return {
            "offset_from_bottom": min(pane.scroll_offset, most),
            "max_offset_from_bottom": most,
            "viewport_rows": SCREEN_ROWS,
        }

    def agent_info(self, pane: Pane) -> dict[str, Any]:
        """Herdr: src/app/agents.rs agent_info; `name` only when the agent is named, false
        booleans omitted (src/api/schema/agents.rs AgentInfo)."""
        agent = pane.agent
        if agent is None:
            raise HerdrFailure("agent_not_found", f"agent target {pane.pane_id} not found")
        pane_info = self.pane_info(pane)
        info: dict[str, Any] = {"terminal_id": pane.terminal_id}
        if agent.name is not None:
            info["name"] = agent.name
        info["agent"] = agent.kind
        if pane.title is not None:
            info["title"] = pane.title
        info.update(
            agent_status=pane.status,
            workspace_id=pane.workspace_id,
            tab_id=pane.tab_id,
            pane_id=pane.pane_id,
            focused=pane_info["focused"],
        )
        if agent.launch_pending:
            info["launch_pending"] = True
        if agent.interactive_ready:
            info["interactive_ready"] = True
        info.update(
            state_change_seq=agent.state_change_seq,
            cwd=pane_info["cwd"],
            foreground_cwd=pane_info["foreground_cwd"],
            revision=pane.revision,
        )
        return info

    def layout_snapshot(self, tab: Tab) -> dict[str, Any]:
        return layout.snapshot(tab.root, tab.workspace_id, tab.tab_id, tab.focused_pane_id, tab.zoomed)

    def snapshot(self) -> dict[str, Any]:
        """Herdr: src/app/api/session.rs (SessionSnapshot); unset focus ids are omitted."""
        shot: dict[str, Any] = {"version": self.version, "protocol": self.protocol}
        tab = self.focused_tab()
        if self.active_workspace_id is not None:
            shot["focused_workspace_id"] = self.active_workspace_id
        if tab is not None:
            shot["focused_tab_id"] = tab.tab_id
            shot["focused_pane_id"] = tab.focused_pane_id
        shot.update(
            workspaces=[self.workspace_info(w) for w in self.workspaces.values()],
            tabs=[self.tab_info(t) for t in self.tabs()],
            panes=[self.pane_info(p) for p in self.ordered_panes()],
            layouts=[self.layout_snapshot(t) for t in self.tabs()],
            agents=[self.agent_info(p) for p in self.agent_panes()],
        )
        return shot

    def read(self, pane: Pane, params: dict[str, Any]) -> dict[str, Any]:
        """A PaneReadResult (Herdr: src/app/api_helpers.rs read_terminal_snapshot). Herdr's
        pane.read and agent.read report revision 0 (src/app/api/panes.rs handle_pane_read)."""
        source = params["source"]
        format_ = params.get("format") or "text"
        lines = params.get("lines")
        limit = None if lines is None else min(int(lines), MAX_READ_LINES)
        logical = pane.scrollback.logical_lines()
        if params.get("strip_ansi", True) is not False and format_ == "text":
            logical = [ANSI_ESCAPE.sub("", line) for line in logical]
        rows = logical if source == "recent_unwrapped" else [row for line in logical for row in wrap(line)]
        if source == "visible" and pane.scroll_offset:
            offset = min(pane.scroll_offset, max(0, len(rows) - SCREEN_ROWS))
            rows = rows[max(0, len(rows) - SCREEN_ROWS - offset) : len(rows) - offset]
        if source in ("visible", "detection"):
            rows = rows[-SCREEN_ROWS:]
            wanted = len(rows) if limit is None else limit
        else:
            wanted = DEFAULT_RECENT_LINES if limit is None else limit
        shown = rows[max(0, len(rows) - wanted) :] if wanted else []
        return {
            "pane_id": pane.pane_id,
            "workspace_id": pane.workspace_id,
            "tab_id": pane.tab_id,
            "source": source,
            "format": format_,
            "text": "\n".join(shown),
            "revision": 0,
            "truncated": len(shown) < len(rows),
        }

    def _workspace_pane_ids(self, workspace: Workspace) -> list[str]:
        return [p for tab in workspace.tabs for p in layout.pane_ids(tab.root)]


def rollup(statuses: Iterator[str]) -> str:
    """Herdr's attention order: blocked > done > working > idle > unknown."""
    return max(statuses, key=_ROLLUP_RANK.__getitem__, default="unknown")


def wrap(line: str) -> list[str]:
    if len(line) <= SCREEN_COLUMNS:
        return [line]
    return [line[i : i + SCREEN_COLUMNS] for i in range(0, len(line), SCREEN_COLUMNS)]


def real_directory(path: Path) -> Path:
    directory = Path(path).expanduser().resolve()
    if not directory.is_dir():
        raise SimConfigError(f"{path} is not an existing directory; simulated panes live in real directories")
    return directory
