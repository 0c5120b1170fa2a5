"""The Control Center's endpoints (docs/browser-protocol.md 2): what the side panel may ask of Herdr.

Four methods and no others; each maps to one Herdr method, and the side panel offers nothing
else:

- `pane.list` `{workspace_id?}` -> `{panes}`: every pane with its agent (name, kind, status) or
  none, from Herdr's `pane.list` and `agent.list`.
- `pane.read` `{pane_id, lines?}` -> the newest `lines` (1..`MAX_READ_LINES`, default
  `DEFAULT_READ_LINES`) logical lines of the pane's output (Herdr's `pane.read`, source
  `recent_unwrapped`, so a line is what the program printed, not a screen row), ANSI stripped,
  the text capped at `MAX_READ_CHARS` characters (the newest kept; `capped: true` says so).
- `agent.prompt` `{pane_id, workspace_id, agent, text, idempotency_key}`: Herdr's
  `agent.prompt` to the agent in that pane, through the same task tracker and idempotency
  ledger (kind `prompt`) as herdr_prompt: the same key twice delivers once, the second answer
  is the first one with `idempotent_replay: true`.
- `pane.send_input` `{pane_id, workspace_id, text, idempotency_key}`: Herdr's `pane.send_input`
  with the text and the Enter key, only into a pane without an agent (`pane_has_agent`
  otherwise: an agent is prompted, never typed at); idempotency kind `send_input`.

Target fencing: the two mutations name what the person saw. The runtime reads the pane first
and refuses `target_changed` (409, nothing sent, the key released) when the pane is no longer
in `workspace_id`, or (agent.prompt) no longer holds the agent named `agent`; a pane that is
gone is `pane_not_found`. A replay of a key that already acted answers the stored outcome
without fencing again (the act happened when the target was right).

An agent prompted from here has no browser session scope: its outcome is not put in any
conversation's inbox (the person sent it from the panel, no conversation asked for it). Both
mutations are refused `read_only_mode` in a read-only runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from herdr_mcp.errors import ToolError
from herdr_mcp.herdr import HerdrError
from herdr_mcp.runtime.browser.schema import WORKSPACE, closed
from herdr_mcp.runtime.herdr_errors import tool_error_from_herdr

if TYPE_CHECKING:
    from herdr_mcp.runtime.browser.methods import BrowserMethod
    from herdr_mcp.runtime.services import Services

#: Lines a read may ask for, and the default.
MAX_READ_LINES = 200
DEFAULT_READ_LINES = 80
#: A read's text at most this many characters (200 lines of a wide terminal; the newest kept).
MAX_READ_CHARS = 32_000
#: A prompt's text at most this many characters; a terminal line's at most MAX_INPUT_CHARS.
MAX_PROMPT_CHARS = 16_000
MAX_INPUT_CHARS = 4_000
#: How long a duplicate request waits for the first one with the same key.
FOLLOWER_TIMEOUT_S = 30.0

_PANE = {"type": "string", "minLength": 1, "maxLength": 64, "pattern": r"^[A-Za-z0-9:_-]+$"}
_KEY = {"type": "string", "minLength": 8, "maxLength": 128, "pattern": "^[A-Za-z0-9._:-]+$"}
_AGENT = {"type": "string", "minLength": 1, "maxLength": 200}


def agent_name(agent: dict[str, Any]) -> str | None:
    """An agent's name as /push/state shows it (name, else kind, else its pane)."""
    name = agent.get("name") or agent.get("agent") or agent.get("pane_id")
    return name if isinstance(name, str) else None


async def _herdr(
    svc: Services, method: str, params: dict[str, Any], *, mutating: bool = False
) -> dict[str, Any]:
    try:
        return await svc.herdr.call(method, params)
    except HerdrError as exc:
        error = tool_error_from_herdr(exc, mutating=mutating)
        if not mutating:
            error.details["acted"] = False
        raise error from exc


async def pane_list(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    query = {"workspace_id": params["workspace_id"]} if "workspace_id" in params else {}
    panes = (await _herdr(svc, "pane.list", query)).get("panes", [])
    agents = (await _herdr(svc, "agent.list", {})).get("agents", [])
    by_pane = {a.get("pane_id"): a for a in agents if isinstance(a, dict)}
    listed = []
    for pane in panes:
        if not isinstance(pane, dict) or not isinstance(pane.get("pane_id"), str):
            continue
        agent = by_pane.get(pane["pane_id"])
        listed.append(
            {
                "pane_id": pane["pane_id"],
                "workspace_id": pane.get("workspace_id"),
                "tab_id": pane.get("tab_id"),
                "label": pane.get("label"),
                "cwd": pane.get("cwd"),
                "agent": None if agent is None else agent_name(agent),
                "agent_kind": None if agent is None else agent.get("kind") or agent.get("agent"),
                "status": None if agent is None else agent.get("agent_status"),
            }
        )
    return {"panes": listed}


async def pane_read(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    lines = int(params.get("lines", DEFAULT_READ_LINES))
    answer = await _herdr(
        svc,
        "pane.read",
        {"pane_id": params["pane_id"], "source": "recent_unwrapped", "lines": lines, "strip_ansi": True},
    )
    read = answer.get("read", answer)
    text = str(read.get("text") or "")
    capped = len(text) > MAX_READ_CHARS
    return {
        "pane_id": params["pane_id"],
        "workspace_id": read.get("workspace_id"),
        "lines": lines,
        "text": text[-MAX_READ_CHARS:] if capped else text,
        "truncated": bool(read.get("truncated")),
        "capped": capped,
        "max_chars": MAX_READ_CHARS,
        "revision": read.get("revision"),
    }


def _refuse_read_only(svc: Services, what: str) -> None:
    if svc.policy.read_only:
        raise ToolError("read_only_mode", f"the runtime is in read-only mode; {what} is refused")


def _changed(message: str, **details: Any) -> ToolError:
    return ToolError("target_changed", message, acted=False, **details)


async def _fenced_pane(svc: Services, pane_id: str, workspace_id: str) -> dict[str, Any]:
    """The pane as Herdr shows it now, refused `target_changed` when it left `workspace_id`."""
    found = await _herdr(svc, "pane.get", {"pane_id": pane_id})
    pane: dict[str, Any] = found.get("pane", found)
    if pane.get("workspace_id") != workspace_id:
        raise _changed(
            f"pane {pane_id} is now in workspace {pane.get('workspace_id')}, not {workspace_id}; "
            "look again and choose the target",
            pane_id=pane_id,
            expected_workspace_id=workspace_id,
            workspace_id=pane.get("workspace_id"),
        )
    return pane


async def _agent_in(svc: Services, pane_id: str) -> dict[str, Any] | None:
    agents = (await _herdr(svc, "agent.list", {})).get("agents", [])
    return next((a for a in agents if isinstance(a, dict) and a.get("pane_id") == pane_id), None)


async def agent_prompt(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    _refuse_read_only(svc, "prompting an agent")
    pane_id, workspace_id, expected = params["pane_id"], params["workspace_id"], params["agent"]

    async def action(op_id: str) -> dict[str, Any]:
        await _fenced_pane(svc, pane_id, workspace_id)
        agent = await _agent_in(svc, pane_id)
        held = None if agent is None else agent_name(agent)
        if held != expected:
            raise _changed(
                f"pane {pane_id} holds {'no agent' if held is None else 'agent ' + repr(held)} now, "
                f"not {expected!r}; look again and choose the target",
                pane_id=pane_id,
                expected_agent=expected,
                agent=held,
            )
        return await svc.tasks.submit(
            pane_id, params["text"], browser_session_ref=None, wait=None, op_id=op_id
        )

    request = {"target": pane_id, "workspace_id": workspace_id, "agent": expected, "text": params["text"]}
    answer = await svc.idempotency.run(
        "prompt",
        params["idempotency_key"],
        request,
        action,
        follower_timeout=FOLLOWER_TIMEOUT_S,
        recover=svc.tasks.recover_answer,
    )
    return {**answer, "idempotency_key": params["idempotency_key"]}


async def pane_send_input(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    _refuse_read_only(svc, "typing into a pane")
    pane_id, workspace_id, text = params["pane_id"], params["workspace_id"], params["text"]

    async def action(op_id: str) -> dict[str, Any]:
        pane = await _fenced_pane(svc, pane_id, workspace_id)
        agent = await _agent_in(svc, pane_id)
        if agent is not None or pane.get("agent"):
            raise ToolError(
                "pane_has_agent",
                f"pane {pane_id} runs an agent ({agent_name(agent or pane)}); prompt it with "
                "agent.prompt instead of typing into it",
                acted=False,
                pane_id=pane_id,
                agent=None if agent is None else agent_name(agent),
            )
        await _herdr(
            svc, "pane.send_input", {"pane_id": pane_id, "text": text, "keys": ["enter"]}, mutating=True
        )
        return {"pane_id": pane_id, "workspace_id": workspace_id, "state": "sent", "op_id": op_id}

    request = {"pane_id": pane_id, "workspace_id": workspace_id, "text": text}
    answer = await svc.idempotency.run(
        "send_input", params["idempotency_key"], request, action, follower_timeout=FOLLOWER_TIMEOUT_S
    )
    return {**answer, "idempotency_key": params["idempotency_key"]}


def control_methods(method: type[BrowserMethod]) -> list[BrowserMethod]:
    """The four methods, as `BrowserMethod`s of methods.py's table."""
    no_newline = r"^[^\r\n]*$"
    return [
        method("pane.list", closed({"workspace_id": WORKSPACE}), pane_list),
        method(
            "pane.read",
            closed(
                {"pane_id": _PANE, "lines": {"type": "integer", "minimum": 1, "maximum": MAX_READ_LINES}},
                "pane_id",
            ),
            pane_read,
        ),
        method(
            "agent.prompt",
            closed(
                {
                    "pane_id": _PANE,
                    "workspace_id": WORKSPACE,
                    "agent": _AGENT,
                    "text": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_PROMPT_CHARS,
                        "pattern": r"\S",
                    },
                    "idempotency_key": _KEY,
                },
                "pane_id",
                "workspace_id",
                "agent",
                "text",
                "idempotency_key",
            ),
            agent_prompt,
        ),
        method(
            "pane.send_input",
            closed(
                {
                    "pane_id": _PANE,
                    "workspace_id": WORKSPACE,
                    "text": {"type": "string", "maxLength": MAX_INPUT_CHARS, "pattern": no_newline},
                    "idempotency_key": _KEY,
                },
                "pane_id",
                "workspace_id",
                "text",
                "idempotency_key",
            ),
            pane_send_input,
        ),
    ]
