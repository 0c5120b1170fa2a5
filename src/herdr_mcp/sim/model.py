"""The simulated session's records: workspaces, tabs, panes and the fake agents in them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from herdr_mcp.sim.config import AgentScript
from herdr_mcp.sim.layout import Leaf, Node
from herdr_mcp.sim.terminal import PaneProcess, Scrollback

StatusListener = Callable[["Pane"], None]


class HerdrFailure(Exception):
    """A Herdr error answer: `code` is one of Herdr's error codes."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass
class Agent:
    kind: str
    """The agent label Herdr shows as PaneInfo.agent (e.g. `claude`)."""
    script: AgentScript
    status: str
    name: str | None = None
    """Set only for agents named by the session config, `agent.start` or `agent.rename`."""
    state_change_seq: int = 0
    launch_pending: bool = False
    interactive_ready: bool = True
    turn: int = 0
    listeners: list[StatusListener] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    """Every line an Enter submitted to the agent, in order: what it was asked, once per prompt
    (the pane shows a prompt twice, as typed and as the agent echoes it)."""


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
    """Text typed into an agent pane since the last Enter."""
    process: PaneProcess | None = None
    env: dict[str, str] = field(default_factory=dict)
    title: str | None = None
    tokens: dict[str, str] = field(default_factory=dict)
    graphics: dict[str, dict[str, object]] = field(default_factory=dict)
    right_click: str = "herdr"
    scroll_offset: int = 0
    """Rows scrolled back from the bottom (pane.scroll at 22; what source=visible reads)."""

    @property
    def status(self) -> str:
        return self.agent.status if self.agent else "unknown"


@dataclass
class Tab:
    tab_id: str
    workspace_id: str
    number: int
    label: str | None
    root: Node
    focused_pane_id: str
    zoomed: bool = False

    @classmethod
    def with_root(cls, tab_id: str, workspace_id: str, number: int, label: str | None, pane_id: str) -> Tab:
        return cls(tab_id, workspace_id, number, label, Leaf(pane_id), pane_id)


@dataclass
class WorktreeSpace:
    repo_root: Path
    checkout_path: Path
    is_linked_worktree: bool


@dataclass
class Workspace:
    workspace_id: str
    label: str | None
    """The custom name (config `label`, workspace.create `label`, workspace.rename)."""
    cwd: Path
    tabs: list[Tab] = field(default_factory=list)
    active_tab: int = 0
    next_tab_number: int = 1
    next_pane_number: int = 1
    pane_numbers: int = 0
    worktree: WorktreeSpace | None = None
    tokens: dict[str, str] = field(default_factory=dict)
