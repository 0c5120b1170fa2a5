"""herdr_methods and herdr_call: Herdr's long tail and our internal methods, validated.

Native methods are the connected Herdr's own (runtime/native.py: its live schema or the built-in
reference for its protocol), each with its class; internal `herdr_mcp.*` methods are served by
the runtime itself. Params are checked against the method's JSON schema before anything is sent
(unknown params refused too; an internal method's params then get its schema's defaults, as the
dispatcher gives a tool its catalog defaults; Herdr applies its own), unknown methods are
refused, and each class gets its rule (runtime/native.py): streaming methods bounded or refused,
server control and install refused by default, changing methods refused in read-only mode.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from herdr_mcp.contract import load_catalog
from herdr_mcp.errors import ToolError
from herdr_mcp.herdr import HerdrError
from herdr_mcp.herdr.client import wait_budget_ms
from herdr_mcp.herdr.reference import MethodReference, ProtocolReference
from herdr_mcp.runtime.herdr_errors import tool_error_from_herdr
from herdr_mcp.runtime.native import BOUNDED_WAITS, CHANGING_CLASSES, MAX_WAIT_MS, NativeMethods
from herdr_mcp.runtime.tools import agents, skill
from herdr_mcp.runtime.tools.arguments import complete, describe_problem, first_problem, validator_for
from herdr_mcp.runtime.tools.continuity_methods import CONTINUITY_METHODS, MethodSpec

if TYPE_CHECKING:
    from herdr_mcp.runtime.services import Services

#: herdr_call waits at least this long for a native answer; longer when its params ask Herdr to
#: wait longer (agent.wait's timeout_ms, agent.prompt's wait.timeout_ms, ...).
CALL_TIMEOUT_SECONDS = 30.0
#: Seconds beyond the longest wait in the params, so Herdr's own timeout answers first.
WAIT_SLACK_SECONDS = 5.0

_MODULE_PARAMS = {
    "type": "object",
    "properties": {"module": {"type": "string", "minLength": 1, "maxLength": 64}},
    "required": ["module"],
    "additionalProperties": False,
}
_NO_PARAMS = {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(frozen=True)
class InternalMethod:
    name: str
    summary: str
    params_schema: dict[str, Any]
    run: Callable[[Services, dict[str, Any]], Awaitable[dict[str, Any]]]
    mutates: bool = False


_SCOPE = {
    "type": "string",
    "minLength": 1,
    "maxLength": 256,
    "description": "The caller's browser session scope; omit for the default scope.",
}
_KEY = {"type": "string", "minLength": 8, "maxLength": 128, "pattern": "^[A-Za-z0-9._:-]+$"}
#: herdr_prompt's own `wait` (the frozen catalog's schema, defaults included), so a task.dispatch
#: waits exactly as herdr_prompt does.
_PROMPT = next(tool for tool in load_catalog() if tool["name"] == "herdr_prompt")
_WAIT = _PROMPT["inputSchema"]["properties"]["wait"]


def _object(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


def _journal_method(spec: MethodSpec) -> InternalMethod:
    """A continuity/work-memory/handoff method: blocking SQLite work, run in a worker thread."""

    async def run(svc: Services, params: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.to_thread(spec.run, svc.state, params)

    return InternalMethod(spec.name, spec.summary, spec.params_schema, run, mutates=spec.mutates)


INTERNAL_METHODS: dict[str, InternalMethod] = {
    method.name: method
    for method in (
        *(_journal_method(spec) for spec in CONTINUITY_METHODS),
        InternalMethod(
            "herdr_mcp.skill.list",
            "List the on-demand planner policy modules.",
            _NO_PARAMS,
            skill.internal_list,
        ),
        InternalMethod(
            "herdr_mcp.skill.describe",
            "Title, summary and section headings of one policy module.",
            _MODULE_PARAMS,
            skill.internal_describe,
        ),
        InternalMethod(
            "herdr_mcp.skill.load", "The full text of one policy module.", _MODULE_PARAMS, skill.internal_load
        ),
        InternalMethod(
            "herdr_mcp.agent.task.dispatch",
            "Submit a prompt to a Herdr agent as a task scoped to browser_session_ref (like herdr_prompt).",
            _object(
                {
                    "target": {"type": "string", "minLength": 1, "maxLength": 128},
                    "text": {"type": "string", "minLength": 1, "maxLength": 200000},
                    "browser_session_ref": _SCOPE,
                    "idempotency_key": _KEY,
                    "wait": _WAIT,
                },
                "target",
                "text",
            ),
            agents.task_dispatch,
            mutates=True,
        ),
        InternalMethod(
            "herdr_mcp.agent.task.inbox",
            "Unacknowledged terminal task outcomes (completed, blocked, failed) of one scope, oldest first.",
            _object(
                {
                    "browser_session_ref": _SCOPE,
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 100},
                }
            ),
            agents.task_inbox,
        ),
        InternalMethod(
            "herdr_mcp.agent.task.ack",
            "Acknowledge inbox entries (after the wake was delivered) so the inbox stops listing them.",
            _object(
                {
                    "browser_session_ref": _SCOPE,
                    "inbox_ids": {
                        "type": "array",
                        "items": {"type": "integer", "minimum": 1},
                        "minItems": 1,
                        "maxItems": 100,
                    },
                },
                "inbox_ids",
            ),
            agents.task_ack,
            mutates=True,
        ),
        InternalMethod(
            "herdr_mcp.agent.task.get",
            "One task's current state.",
            _object({"task_id": {"type": "string", "minLength": 1, "maxLength": 64}}, "task_id"),
            agents.task_get,
        ),
    )
}


def _entry(
    reference: ProtocolReference, method: MethodReference, native: NativeMethods, *, read_only: bool
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "method": method.name,
        "kind": "native",
        "class": method.method_class,
        "summary": method.summary,
        "mutates": method.method_class in CHANGING_CLASSES,
        "params_schema": reference.params_json(method.name),
    }
    refusal = native.class_refusal(method, read_only=read_only)
    if refusal is not None:
        entry["refused"] = {"code": refusal.code, "message": refusal.message}
    elif method.name in BOUNDED_WAITS:
        entry["requires"] = f"timeout_ms between 1 and {MAX_WAIT_MS}"
    return entry


async def method_index(svc: Services, query: str | None, *, native_only: bool = False) -> dict[str, Any]:
    """Every method herdr_call knows (`query` filters by name or summary), and the connected
    Herdr's surface: its version and protocol, where the schemas come from, any warnings."""
    surface = await svc.native.surface()
    reference = surface.reference
    needle = query.casefold() if query else None

    def wanted(name: str, summary: str) -> bool:
        return needle is None or needle in name.casefold() or needle in summary.casefold()

    # The query is applied before an entry is built: an entry carries its params schema, and
    # building all of them for a query that keeps a few was most of the call (issue 24).
    entries = [
        _entry(reference, method, svc.native, read_only=svc.policy.read_only)
        for method in reference.methods.values()
        if wanted(method.name, method.summary)
    ]
    if not native_only:
        entries.extend(
            {
                "method": method.name,
                "kind": "internal",
                "class": "mutating" if method.mutates else "read",
                "summary": method.summary,
                "mutates": method.mutates,
                "params_schema": method.params_schema,
            }
            for method in INTERNAL_METHODS.values()
            if wanted(method.name, method.summary)
        )
    entries.sort(key=lambda e: str(e["method"]))
    return {"methods": entries, "count": len(entries), "herdr": surface.describe()}


async def methods(svc: Services, args: dict[str, Any]) -> dict[str, Any]:
    return await method_index(svc, args.get("query"))


def _validate(method: str, schema: Mapping[str, Any], params: dict[str, Any]) -> None:
    problem = first_problem(validator_for(schema), params)
    if problem is not None:
        where = describe_problem(problem, "(params)")
        raise ToolError("invalid_params", f"{method} {where}; see herdr_methods for the schema")


def _unknown_params(method: str, schema: Mapping[str, Any], params: dict[str, Any]) -> None:
    """Herdr ignores params it does not know; herdr_call refuses them, so a typo fails loudly."""
    known = schema.get("properties")
    if not isinstance(known, Mapping):
        return
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ToolError(
            "invalid_params",
            f"{method} has no param {', '.join(unknown)} (it takes {', '.join(sorted(known)) or 'none'}); "
            "see herdr_methods for the schema",
        )


async def call(svc: Services, args: dict[str, Any]) -> dict[str, Any]:
    name: str = args["method"]
    params: dict[str, Any] = dict(args["params"])
    internal = INTERNAL_METHODS.get(name)
    if internal is not None:
        _validate(name, internal.params_schema, params)
        filled: dict[str, Any] = complete(internal.params_schema, params)
        return {"method": name, "result": await internal.run(svc, filled)}
    surface = await svc.native.surface()
    native = surface.reference.methods.get(name)
    if native is None:
        raise ToolError(
            "unknown_method",
            f"{name!r} is not a method of the connected Herdr (protocol {surface.reference.protocol}) "
            "nor an herdr_mcp.* method; herdr_methods lists the ones herdr_call can run",
        )
    _unknown_params(name, native.params_schema, params)
    _validate(name, native.params_schema, params)
    refusal = svc.native.refusal(native, params, read_only=svc.policy.read_only)
    if refusal is not None:
        raise refusal
    changes = native.method_class in CHANGING_CLASSES
    # Every wait inside the params (a top-level timeout_ms, agent.prompt's wait.timeout_ms) gets
    # its whole time plus the socket's slack, so Herdr answers before the call gives up.
    timeout = CALL_TIMEOUT_SECONDS
    wait_ms = wait_budget_ms(params)
    if wait_ms is not None:
        timeout = max(timeout, wait_ms / 1000 + WAIT_SLACK_SECONDS)
    try:
        result = await svc.herdr.call(name, params, timeout=timeout)
    except HerdrError as exc:
        raise tool_error_from_herdr(exc, mutating=changes) from exc
    return {"method": name, "class": native.method_class, "result": result}
