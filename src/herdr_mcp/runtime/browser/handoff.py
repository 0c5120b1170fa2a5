"""`POST /browser/handoff.prepare`: the durable package of one browser handoff (docs/browser-protocol.md 2).

The extension hands a long conversation to a new one (extension/src/background/handoff.js). Before
it opens anything it asks here, and this method is the gate and the package in one call:

- `scope` must be a conversation or Project scope (`chatgpt:conv:<id>`, `chatgpt:project:<p>`,
  `zai:conv:<id>`, `deepseek:conv:<id>`), and `source_url` the full URL of a conversation of that
  scope (`handoff_scope_mismatch` otherwise): a handoff starts from a concrete conversation.
- When the scope is bound, its workspace must have no working agent: `workspace_working` (409,
  with the working agents) otherwise, so a settle and its wake never race the cutover. Herdr not
  answering is `herdr_unavailable` (503): idle that cannot be confirmed is not idle. An unbound
  scope may hand off too (seed 000: a handoff needs durable continuity, not a binding).
- The chain is `continuity_id` when given, else the one the source conversation resolves to
  (`herdr_mcp.continuity.resolve` by `conversation_url`); a conversation the journal has never
  seen is `continuity_not_found` (404): nothing is prepared from page text.
- The package is `herdr_mcp.browser_handoff.prepare` (state/handoff.py) with the scope as
  `browser_session_ref`: one package per `transfer_id`, the same one when asked again, its
  message's first line the seed marker.

Answer: `{package, workspace_id (or null), seed_marker}`, `seed_marker` being the message's first
line (what the extension must see on the new page before it cuts over).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from herdr_mcp.errors import ToolError
from herdr_mcp.herdr import HerdrError
from herdr_mcp.runtime.tools.continuity_methods import CONTINUITY_METHODS
from herdr_mcp.state import continuity, handoff
from herdr_mcp.state.bindings import MAX_SCOPE_CHARS, SCOPE_PATTERN, BindingStore
from herdr_mcp.state.continuity_identity import parse_conversation_url

if TYPE_CHECKING:
    from herdr_mcp.runtime.browser.methods import BrowserMethod
    from herdr_mcp.runtime.services import Services

_PREPARE = next(spec for spec in CONTINUITY_METHODS if spec.name == "herdr_mcp.browser_handoff.prepare")
_PROPERTIES = _PREPARE.params_schema["properties"]


def _scope_of_url(scope: str, source_url: str) -> None:
    """Refuse a source URL that is not a conversation of `scope`."""
    site, kind, value = scope.split(":", 2)
    location = parse_conversation_url(source_url)
    if kind == "root":
        raise ToolError(
            "handoff_scope_mismatch",
            "a handoff starts from a conversation or a Project, not from a root page's pending binding",
            scope=scope,
        )
    matches = location.site == site and location.conversation_id is not None
    if kind == "conv":
        matches = matches and location.conversation_id == value and location.project_id is None
    else:  # project
        matches = matches and location.project_id == value
    if not matches:
        raise ToolError(
            "handoff_scope_mismatch",
            f"{source_url} is not a conversation of scope {scope}",
            scope=scope,
            source_url=source_url,
        )


async def _refuse_working(svc: Services, workspace_id: str) -> None:
    try:
        answer = await svc.herdr.call("agent.list", {})
    except HerdrError as exc:
        raise ToolError(
            "herdr_unavailable",
            f"Herdr did not list its agents ({exc.code}); a handoff waits until the workspace is "
            "confirmed idle",
        ) from exc
    working = [
        str(agent.get("name") or agent.get("agent") or agent.get("pane_id"))
        for agent in answer.get("agents", [])
        if isinstance(agent, dict)
        and agent.get("workspace_id") == workspace_id
        and agent.get("agent_status") == "working"
    ]
    if working:
        raise ToolError(
            "workspace_working",
            f"workspace {workspace_id} has working agents ({', '.join(working)}); hand off once it settles",
            workspace_id=workspace_id,
            agents=working,
        )


def _resolved_chain(svc: Services, source_url: str) -> str:
    answer = continuity.resolve(svc.state, {"conversation_url": source_url, "max_turns": 1})
    context = answer.get("context")
    if answer.get("status") != "resolved" or not isinstance(context, dict):
        raise ToolError(
            "continuity_not_found",
            f"the journal has no chain for {source_url} ({answer.get('status')}); a conversation "
            "is journaled once it is bound and has finalized turns",
            source_url=source_url,
        )
    if context.get("matched_by") != "conversation_id":
        raise ToolError(
            "continuity_not_found",
            f"{source_url} itself was never journaled (only by {context.get('matched_by')}); hand "
            "off from a conversation whose turns reached the journal",
            source_url=source_url,
        )
    return str(context["continuity_id"])


async def handoff_prepare(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    scope: str = params["scope"]
    source_url: str = params["source_url"]
    _scope_of_url(scope, source_url)
    binding = await asyncio.to_thread(BindingStore(svc.state).get, scope)
    if binding is not None:
        await _refuse_working(svc, binding.workspace_id)
    continuity_id = params.get("continuity_id") or await asyncio.to_thread(_resolved_chain, svc, source_url)
    request: dict[str, Any] = {
        "transfer_id": params["transfer_id"],
        "continuity_id": continuity_id,
        "source_url": source_url,
        "browser_session_ref": scope,
    }
    if "work_chain_id" in params:
        request["work_chain_id"] = params["work_chain_id"]
    package = await asyncio.to_thread(handoff.prepare, svc.state, request)
    return {
        "package": package,
        "workspace_id": None if binding is None else binding.workspace_id,
        "seed_marker": str(package["message"]).split("\n", 1)[0],
    }


def handoff_methods(method: type[BrowserMethod]) -> list[BrowserMethod]:
    """`handoff.prepare`, as a `BrowserMethod` of methods.py's table."""
    schema = {
        "type": "object",
        "properties": {
            "scope": {"type": "string", "maxLength": MAX_SCOPE_CHARS, "pattern": SCOPE_PATTERN},
            "transfer_id": _PROPERTIES["transfer_id"],
            "source_url": _PROPERTIES["source_url"],
            "continuity_id": _PROPERTIES["continuity_id"],
            "work_chain_id": _PROPERTIES["work_chain_id"],
        },
        "required": ["scope", "transfer_id", "source_url"],
        "additionalProperties": False,
    }
    return [method("handoff.prepare", schema, handoff_prepare)]
