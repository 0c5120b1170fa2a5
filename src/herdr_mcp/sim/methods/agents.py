"""agent.* and events.wait, and how typed input reaches a fake agent.

Herdr: src/app/api/agents.rs (agent.prompt types the text and sends Enter
AGENT_PROMPT_SUBMIT_DELAY = 300 ms later, answering at once with the agent as it was; empty text
is `empty_agent_prompt`, a blocked agent `agent_blocked`, a launch still pending
`agent_not_ready`), src/app/agents.rs (agent.start and agent.rename: names are 1-32 of a-z, 0-9,
`-`, `_`, starting with a letter; `agent_name_taken`; the launch stays pending for
AGENT_START_SETTLE_DELAY), src/app/terminal_targets.rs (targets), src/api/wait.rs (the waits).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from herdr_mcp.sim.clock import AGENT_PROMPT_SUBMIT_DELAY_MS, AGENT_START_SETTLE_DELAY_MS
from herdr_mcp.sim.config import AgentScript
from herdr_mcp.sim.model import Agent, HerdrFailure, Pane
from herdr_mcp.sim.terminal import InvalidKey, Key, parse_key

if TYPE_CHECKING:
    from herdr_mcp.sim.server import Simulator
    from herdr_mcp.sim.waits import Waits

Params = dict[str, Any]

AGENT_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
# Herdr: src/detect/manifests/*.toml, the agents Herdr knows by label.
KNOWN_AGENTS = frozenset(
    {
        "amp", "antigravity", "claude", "cline", "codex", "cursor", "devin", "droid", "gemini",
        "github-copilot", "copilot", "grok", "hermes", "kilo", "kimi", "kiro", "maki", "opencode", "pi",
        "qodercli", "qwen",
    }
)  # fmt: skip
MIN_START_TIMEOUT_MS, MAX_START_TIMEOUT_MS, DEFAULT_START_TIMEOUT_MS = 3_000, 300_000, 30_000
INTERRUPTS = {("esc", frozenset()), ("escape", frozenset()), ("c", frozenset({"ctrl"}))}


def type_into(sim: Simulator, pane: Pane, text: str, keys: list[Key]) -> None:
    """Typed input for a fake agent: Enter submits the typed line as a prompt, Esc or Ctrl+C
    interrupts a working agent, any input answers a blocked one."""
    agent = pane.agent
    assert agent is not None
    echo, submitted, interrupted = text, [], False
    *lines, typed = (pane.typed + text).replace("\r", "\n").split("\n")
    submitted.extend(lines)
    for key in keys:
        if key.data == "\r":
            submitted.append(typed)
            typed, echo = "", echo + "\n"
        elif (key.name, key.modifiers) in INTERRUPTS:
            interrupted = True
        elif len(key.data) == 1 and key.data.isprintable():
            typed, echo = typed + key.data, echo + key.data
    pane.typed = typed
    sim.world.append_output(pane, echo)
    runner = sim.runner(pane)
    if interrupted and agent.status in ("working", "blocked"):
        runner.interrupt("idle")
    elif agent.status == "blocked" and (text or keys):
        runner.receive_input()
    else:
        for prompt in submitted:
            if prompt.strip():
                runner.submit(prompt)


def prompt_now(sim: Simulator, params: Params) -> dict[str, Any]:
    """Herdr: handle_agent_prompt — type now, Enter after the submit delay, answer at once."""
    if params["text"] == "":
        raise HerdrFailure("empty_agent_prompt", "the prompt text is empty")
    world = sim.world
    pane = world.resolve_agent(params["target"])
    agent = pane.agent
    assert agent is not None
    if agent.status == "blocked":
        raise HerdrFailure(
            "agent_blocked", f"agent {params['target']} is blocked and needs interactive input"
        )
    if agent.launch_pending:
        raise HerdrFailure("agent_not_ready", f"agent {params['target']} is not ready for a prompt yet")
    answer = {"type": "agent_prompted", "agent": world.agent_info(pane)}
    type_into(sim, pane, params["text"], [])

    def press_enter() -> None:
        if pane.pane_id in world.panes and pane.agent is agent:
            type_into(sim, pane, "", [parse_key("Enter")])

    sim.later(AGENT_PROMPT_SUBMIT_DELAY_MS, press_enter)
    return answer


def _keys(keys: list[str]) -> list[Key]:
    try:
        return [parse_key(key) for key in keys]
    except InvalidKey as bad:
        raise HerdrFailure("invalid_key", str(bad)) from None


def _valid_name(name: str) -> None:
    if not AGENT_NAME.fullmatch(name):
        raise HerdrFailure(
            "invalid_agent_name",
            "an agent name is 1-32 lowercase letters, digits, '-' or '_', starting with a letter",
        )


def _name_taken(sim: Simulator, name: str, except_pane: str | None) -> None:
    owners = [
        p for p in sim.world.agent_panes() if p.agent and p.agent.name == name and p.pane_id != except_pane
    ]
    if owners:
        listed = "; ".join(f"pane_id={p.pane_id} workspace_id={p.workspace_id}" for p in owners)
        raise HerdrFailure("agent_name_taken", f"agent name {name} is taken; candidates: {listed}")


async def agent_list(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    return {"type": "agent_list", "agents": [sim.world.agent_info(p) for p in sim.world.agent_panes()]}


async def agent_get(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    return {"type": "agent_info", "agent": waits.agent_get(params["target"])}


async def agent_read(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    return {"type": "pane_read", "read": sim.world.read(sim.world.resolve_agent(params["target"]), params)}


async def agent_explain(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = sim.world.resolve_agent(params["target"])
    assert pane.agent is not None
    explain = {
        "agent": pane.agent.kind,
        "state": pane.status,
        "screen_detection_skipped": True,
        "evaluated_rules": [],
    }
    return {"type": "agent_explain", "explain": explain}


async def agent_send_keys(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = sim.world.resolve_agent(params["target"])
    assert pane.agent is not None
    if pane.agent.launch_pending:
        raise HerdrFailure("agent_not_ready", f"agent {params['target']} is not ready yet")
    type_into(sim, pane, "", _keys(params["keys"]))
    return {"type": "ok"}


async def agent_rename(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = sim.world.resolve_agent(params["target"])
    assert pane.agent is not None
    name = params.get("name")
    if name is not None:
        _valid_name(name)
        _name_taken(sim, name, pane.pane_id)
    if pane.agent.launch_pending:
        raise HerdrFailure("agent_launch_pending", "the agent's name cannot change while it starts")
    pane.agent.name = name
    sim.world.emit("pane_updated", {"pane": sim.world.pane_info(pane)})
    return {"type": "agent_info", "agent": sim.world.agent_info(pane)}


async def agent_focus(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = sim.world.resolve_agent(params["target"])
    sim.world.focus_pane(pane)
    return {"type": "agent_info", "agent": sim.world.agent_info(pane)}


async def agent_start(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    """Herdr: start_agent — the agent command is typed into a shell pane; it is launch_pending
    until the settle delay, then ready (a fake agent playing the default script)."""
    world = sim.world
    name, kind, args = params["name"], params["kind"], params.get("args", [])
    _valid_name(name)
    if kind not in KNOWN_AGENTS:
        raise HerdrFailure("unsupported_agent_kind", f"{kind} is not an interactive agent Herdr knows")
    if any(not char.isprintable() for arg in args for char in arg):
        raise HerdrFailure("invalid_agent_argument", "agent arguments cannot be typed safely into the shell")
    _name_taken(sim, name, None)
    pane = world.panes.get(params["pane_id"])
    if pane is None:
        raise HerdrFailure("agent_pane_not_found", f"agent target pane {params['pane_id']} not found")
    if pane.agent is not None:
        raise HerdrFailure("agent_pane_busy", f"pane {pane.pane_id} is not an available shell")
    timeout = params.get("timeout_ms") or DEFAULT_START_TIMEOUT_MS
    if not MIN_START_TIMEOUT_MS < timeout <= MAX_START_TIMEOUT_MS:
        raise HerdrFailure("invalid_agent_timeout", "timeout_ms must be over 3000 and at most 300000")
    argv = [kind, *args]
    world.append_output(pane, " ".join(argv) + "\n")
    agent = Agent(
        kind, AgentScript.default(), "unknown", name=name, launch_pending=True, interactive_ready=False
    )
    pane.agent = agent
    sim.start_runner(pane)

    def settled() -> None:
        if pane.agent is not agent:
            return
        agent.launch_pending, agent.interactive_ready = False, True
        world.emit(
            "pane_agent_detected", {"pane_id": pane.pane_id, "workspace_id": pane.workspace_id, "agent": kind}
        )
        world.set_status(pane, "idle")

    sim.later(AGENT_START_SETTLE_DELAY_MS, settled)
    return {"type": "agent_started", "agent": world.agent_info(pane), "argv": argv}


async def agent_prompt(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    return await waits.agent_prompt(params)


async def agent_wait(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    return await waits.agent_wait(params)


async def events_wait(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    return await waits.events_wait(rid, params)


HANDLERS = {
    "agent.list": agent_list,
    "agent.get": agent_get,
    "agent.read": agent_read,
    "agent.explain": agent_explain,
    "agent.send_keys": agent_send_keys,
    "agent.rename": agent_rename,
    "agent.focus": agent_focus,
    "agent.start": agent_start,
    "agent.prompt": agent_prompt,
    "agent.wait": agent_wait,
    "events.wait": events_wait,
}
