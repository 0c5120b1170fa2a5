"""`POST /browser/<method>`: what the extension asks of the runtime (docs/browser-protocol.md 2).

binding.get / binding.set / binding.list keep scope bindings (`state/bindings.py`); a binding is
only made to a workspace that Herdr lists right now (`workspace_not_found` otherwise, 503
`herdr_unavailable` when Herdr does not answer), and labels are refreshed from Herdr's list
whenever it answers. turn.append journals a finalized turn of a bound scope through the
Continuity Journal (`herdr_mcp.continuity.turn.append`, with the scope as
`browser_session_ref` and, when not given, the binding's workspace, the scope's site and a
ChatGPT Project scope's project id); turn.resolve is `herdr_mcp.continuity.resolve`. inbox.read
and inbox.ack are the task inbox of one scope (`state/tasks.py`).

Every body is validated against the method's JSON Schema (draft 2020-12, closed objects) first:
`invalid_argument` names the first field at fault.
"""

from __future__ import annotations

import asyncio
import copy
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from herdr_mcp.errors import ToolError
from herdr_mcp.herdr import HerdrError
from herdr_mcp.runtime.browser.control import control_methods
from herdr_mcp.runtime.browser.handoff import handoff_methods
from herdr_mcp.runtime.browser.schema import WORKSPACE, closed
from herdr_mcp.runtime.tools.continuity_methods import CONTINUITY_METHODS
from herdr_mcp.state import continuity
from herdr_mcp.state.bindings import (
    CONV_KEY_PATTERN,
    MAX_LABEL_CHARS,
    MAX_SCOPE_CHARS,
    SCOPE_PATTERN,
    Binding,
    BindingStore,
    display_label,
)
from herdr_mcp.state.tasks import INBOX_MAX_ITEMS

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

    from herdr_mcp.runtime.services import Services

#: Herdr's workspace list for label refreshes: a slow Herdr must not hold a binding read up.
LABEL_REFRESH_TIMEOUT_S = 2.0

_SCOPE = {"type": "string", "maxLength": MAX_SCOPE_CHARS, "pattern": SCOPE_PATTERN}


def _with_scope(method: str, *, required: bool) -> dict[str, Any]:
    """A continuity method's params schema with `scope` in place of `browser_session_ref`."""
    spec = next(spec for spec in CONTINUITY_METHODS if spec.name == method)
    schema = copy.deepcopy(spec.params_schema)
    schema["properties"].pop("browser_session_ref", None)
    schema["properties"]["scope"] = _SCOPE
    if required:
        schema["required"] = [*schema.get("required", []), "scope"]
    schema.pop("dependentRequired", None)  # checked again by the method itself, after defaults
    return schema


@dataclass(frozen=True)
class BrowserMethod:
    name: str
    schema: dict[str, Any]
    run: Callable[[Services, dict[str, Any]], Awaitable[dict[str, Any]]]

    @functools.cached_property
    def validator(self) -> Draft202012Validator:
        """Built once per method, on its first request (jsonschema is imported then)."""
        from jsonschema import Draft202012Validator

        return Draft202012Validator(self.schema)

    def validate(self, params: dict[str, Any]) -> None:
        problem = next(
            iter(sorted(self.validator.iter_errors(params), key=lambda e: list(e.path))),
            None,
        )
        if problem is not None:
            where = "/".join(str(part) for part in problem.absolute_path) or "(body)"
            raise ToolError("invalid_argument", f"{where}: {problem.message}", argument=where)


async def _live_workspaces(svc: Services, timeout: float | None = None) -> dict[str, dict[str, Any]]:
    """Herdr's workspaces by id; raises ToolError `herdr_unavailable`."""
    try:
        answer = await svc.herdr.call("workspace.list", {}, timeout=timeout)
    except HerdrError as exc:
        raise ToolError(
            "herdr_unavailable", f"Herdr did not list its workspaces ({exc.code}); retry"
        ) from exc
    return {
        str(item["workspace_id"]): item
        for item in answer.get("workspaces", [])
        if isinstance(item, dict) and isinstance(item.get("workspace_id"), str)
    }


async def _refresh_labels(svc: Services, store: BindingStore) -> None:
    """Labels from Herdr's list, when Herdr answers in time (bindings are readable without it)."""
    try:
        live = await _live_workspaces(svc, LABEL_REFRESH_TIMEOUT_S)
    except ToolError:
        return
    await asyncio.to_thread(store.refresh_labels, {wid: item.get("label") for wid, item in live.items()})


def _binding(binding: Binding | None) -> dict[str, Any] | None:
    return None if binding is None else binding.to_dict()


async def binding_get(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    store = BindingStore(svc.state)
    await _refresh_labels(svc, store)
    return {"binding": _binding(await asyncio.to_thread(store.get, params["scope"]))}


async def binding_list(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    store = BindingStore(svc.state)
    await _refresh_labels(svc, store)
    bindings = await asyncio.to_thread(store.all)
    return {"bindings": [binding.to_dict() for binding in bindings]}


async def binding_set(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    store = BindingStore(svc.state)
    scope = params["scope"]
    workspace_id = params["workspace_id"]
    if workspace_id is None:
        if "label" in params or "active_conv_key" in params:
            raise ToolError(
                "invalid_argument",
                "a binding is deleted with workspace_id null alone",
                argument="workspace_id",
            )
        deleted = await asyncio.to_thread(store.delete, scope)
        return {"binding": None, "deleted": deleted}
    live = await _live_workspaces(svc)
    workspace = live.get(workspace_id)
    if workspace is None:
        raise ToolError(
            "workspace_not_found",
            f"Herdr has no workspace {workspace_id}; list them with GET /push/state",
            workspace_id=workspace_id,
        )
    label = params.get("label") or display_label(workspace.get("label"))
    binding = await asyncio.to_thread(
        store.put, scope, workspace_id, label=label, active_conv_key=params.get("active_conv_key")
    )
    return {"binding": binding.to_dict()}


def _scope_identity(scope: str) -> dict[str, str]:
    """What a scope says about the conversation: its site, and a ChatGPT Project's id."""
    site, kind, value = scope.split(":", 2)
    identity = {"site": site}
    if site == "chatgpt" and kind == "project":
        identity["project_id"] = value
    return identity


async def turn_append(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    scope = params.pop("scope")
    binding = await asyncio.to_thread(BindingStore(svc.state).get, scope)
    if binding is None:
        raise ToolError(
            "binding_not_found", f"scope {scope} is not bound to a workspace; bind it first", scope=scope
        )
    merged = {**_scope_identity(scope), "workspace_id": binding.workspace_id, **params}
    merged["browser_session_ref"] = scope
    return await asyncio.to_thread(continuity.append_turn, svc.state, merged)


async def turn_resolve(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    scope = params.pop("scope", None)
    if scope is not None:
        params["browser_session_ref"] = scope
    return await asyncio.to_thread(continuity.resolve, svc.state, params)


async def inbox_read(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    limit = int(params.get("limit", INBOX_MAX_ITEMS))
    answer = await asyncio.to_thread(svc.tasks.tasks.inbox, params["scope"], limit=limit)
    return {"scope": params["scope"], **answer}


async def inbox_ack(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    return await asyncio.to_thread(svc.tasks.tasks.ack, params["scope"], params["inbox_ids"])


async def inbox_move(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
    """A conversation scope's cutover (extension handoff.js): its open inbox moves to the new scope."""
    source, target = params["from_scope"], params["to_scope"]
    if source == target or ":root:" in source or ":root:" in target:
        raise ToolError(
            "invalid_argument",
            "inbox.move takes two different conversation or Project scopes (not a root page's)",
            from_scope=source,
            to_scope=target,
        )
    answer = await asyncio.to_thread(svc.tasks.tasks.move, source, target)
    return {"from_scope": source, "to_scope": target, **answer}


_INBOX_ID = {"type": "integer", "minimum": 1, "maximum": 2**53 - 1}

METHODS: dict[str, BrowserMethod] = {
    method.name: method
    for method in (
        BrowserMethod("binding.get", closed({"scope": _SCOPE}, "scope"), binding_get),
        BrowserMethod(
            "binding.set",
            closed(
                {
                    "scope": _SCOPE,
                    "workspace_id": {"anyOf": [WORKSPACE, {"type": "null"}]},
                    "label": {"type": "string", "minLength": 1, "maxLength": MAX_LABEL_CHARS},
                    "active_conv_key": {"type": "string", "pattern": CONV_KEY_PATTERN},
                },
                "scope",
                "workspace_id",
            ),
            binding_set,
        ),
        BrowserMethod("binding.list", closed({}), binding_list),
        BrowserMethod(
            "turn.append", _with_scope("herdr_mcp.continuity.turn.append", required=True), turn_append
        ),
        BrowserMethod(
            "turn.resolve", _with_scope("herdr_mcp.continuity.resolve", required=False), turn_resolve
        ),
        BrowserMethod(
            "inbox.read",
            closed(
                {"scope": _SCOPE, "limit": {"type": "integer", "minimum": 1, "maximum": INBOX_MAX_ITEMS}},
                "scope",
            ),
            inbox_read,
        ),
        BrowserMethod(
            "inbox.ack",
            closed(
                {
                    "scope": _SCOPE,
                    "inbox_ids": {
                        "type": "array",
                        "items": _INBOX_ID,
                        "minItems": 1,
                        "maxItems": INBOX_MAX_ITEMS,
                    },
                },
                "scope",
                "inbox_ids",
            ),
            inbox_ack,
        ),
        BrowserMethod(
            "inbox.move",
            closed({"from_scope": _SCOPE, "to_scope": _SCOPE}, "from_scope", "to_scope"),
            inbox_move,
        ),
        *control_methods(BrowserMethod),  # the Control Center's four (control.py)
        *handoff_methods(BrowserMethod),  # handoff.prepare (handoff.py)
    )
}
