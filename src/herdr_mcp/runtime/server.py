"""The MCP server: the frozen catalog on tools/list and one dispatcher on tools/call.

The tool list is served byte-for-byte from the frozen catalog of the current epoch, so what a
client receives hashes to the contract identity in `herdr-mcp version`. Arguments are parsed once,
before a handler runs (`runtime.tools.arguments`: bounded, validated against the catalog's own
JSON schema, its defaults filled); a handler returns a dict (the structured result) or an
`ImageResult`, or raises `ToolError`.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from starlette.requests import Request

from herdr_mcp import __version__
from herdr_mcp.contract import CURRENT_EPOCH, load_catalog
from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.audit import AuditLog, AuditUnavailable, describe_call
from herdr_mcp.runtime.services import Services
from herdr_mcp.runtime.tools import HANDLERS
from herdr_mcp.runtime.tools.agents import CALL_SCOPE, SCOPE_META_KEY
from herdr_mcp.runtime.tools.arguments import ToolArguments, check_limits
from herdr_mcp.runtime.tools.fs.image import ImageResult
from herdr_mcp.text import clean_json, safe_json

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "herdr-mcp controls a developer workstation managed by Herdr. Start with herdr_inspect, read "
    "herdr_skill once, and re-inspect before repeating any mutation whose answer was lost. "
    "herdr_exec is a real shell as the workstation user, not a sandbox."
)


class ToolDispatcher:
    """Parses arguments once (bounds, the frozen schemas, their defaults), runs the matching
    handler and records every call in the audit log (`audit`; by default `audit.jsonl` in the
    config dir)."""

    def __init__(self, services: Services, epoch: int = CURRENT_EPOCH, audit: AuditLog | None = None) -> None:
        self.services = services
        self.audit = audit if audit is not None else AuditLog(services.config.config_dir)
        self.catalog = load_catalog(epoch)
        missing = {tool["name"] for tool in self.catalog} - set(HANDLERS)
        if missing:
            raise RuntimeError(f"catalog tools without a handler: {sorted(missing)}")
        self.arguments = ToolArguments(self.catalog)
        self.input_schemas: dict[str, Mapping[str, Any]] = self.arguments.schemas
        self.list_result = types.ListToolsResult(
            tools=[types.Tool.model_validate(tool) for tool in self.catalog]
        )

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        session: str | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> types.CallToolResult:
        """Answer one tools/call; the answer leaves only after its audit record is written.
        `meta` is the request's `_meta`: its `herdr-mcp/scope` (the browser session scope a
        herdr_prompt's outcome wakes, docs/browser-protocol.md 2) is handed to the handler."""
        # Bounds first (docs/runtime.md "Tool arguments"): arguments past them are not read
        # further, not even for the audit record's digest.
        received = dict(arguments or {})
        try:
            check_limits(received)
        except ToolError as exc:
            refused: ToolError | None = exc
            given: dict[str, Any] = {}
        else:
            refused = None
            # Text rule (docs/runtime.md "Text"): a lone surrogate in the arguments is U+FFFD from here on.
            given = clean_json(received)
        CALL_SCOPE.set(None if meta is None else meta.get(SCOPE_META_KEY))
        started, clock = dt.datetime.now(dt.UTC), time.perf_counter()

        def record(outcome: str) -> dict[str, Any]:
            entry = describe_call(
                tool=name,
                arguments=given,
                session=session,
                runtime=self.services.runtime_instance,
                version=__version__,
                started=started,
                outcome=outcome,
                duration_ms=(time.perf_counter() - clock) * 1000,
                known_secrets=self.audit.known_secrets.values(),
            )
            if refused is not None:
                entry["args_sha256"] = None  # the arguments were refused unread
            return entry

        # Only cancellation (the client went away) leaves _answer without an outcome.
        outcome = "cancelled"
        try:
            result, outcome = await self._answer(name, given, refused)
        finally:
            try:
                self.audit.append(record(outcome))
            except AuditUnavailable as exc:
                # The call has run: withholding its answer would invite a blind retry of a
                # mutation. Later calls are refused before they run until the log is writable.
                log.error("%s answered without an audit record: %s", name, exc)
        return result

    async def _answer(
        self, name: str, arguments: dict[str, Any], refused: ToolError | None
    ) -> tuple[types.CallToolResult, str]:
        """The call's result and its outcome code (`ok` or the error code); `refused` is the
        bounds' refusal of the arguments, if any."""
        try:
            if not self.audit.healthy:
                raise ToolError(
                    "audit_unavailable",
                    f"nothing was run: the runtime cannot write its audit log ({self.audit.last_error}); "
                    f"free disk space or fix the permissions of {self.audit.directory}, then retry",
                )
            if refused is not None:
                raise refused
            output = await self._run(name, arguments)
        except ToolError as exc:
            return _error_result(exc), exc.code
        except Exception:
            log.exception("tool %s failed unexpectedly", name)
            failure = ToolError("internal_error", f"{name} failed inside the runtime; see the runtime log")
            return _error_result(failure), failure.code
        return _ok_result(output), "ok"

    async def _run(self, name: str, arguments: dict[str, Any]) -> dict[str, Any] | ImageResult:
        prepared = self.arguments.prepare(name, arguments)  # unknown_tool before a handler is looked up
        return await HANDLERS[name](self.services, prepared)


def _ok_result(output: dict[str, Any] | ImageResult) -> types.CallToolResult:
    # Text rule: whatever a tool returned, its answer encodes (a byte a name kept is `\xNN`, any
    # other lone surrogate U+FFFD); the SDK's serializer would otherwise fail on it.
    if isinstance(output, ImageResult):
        encoded = base64.b64encode(output.data).decode("ascii")
        info = safe_json(dict(output.info))
        return types.CallToolResult(
            content=[
                types.ImageContent(type="image", data=encoded, mime_type=output.mime_type),
                types.TextContent(type="text", text=_json(info)),
            ],
            structured_content=info,
        )
    output = safe_json(output)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=_json(output))], structured_content=output
    )


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _error_result(exc: ToolError) -> types.CallToolResult:
    payload = safe_json({"error": exc.to_dict()})
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=_json(payload))],
        structured_content=payload,
        is_error=True,
    )


def build_mcp_server(dispatcher: ToolDispatcher) -> Server[Any]:
    """The low-level SDK server wired to `dispatcher`."""

    async def on_list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return dispatcher.list_result

    async def on_call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        meta = dict(params.meta) if params.meta else None
        return await dispatcher.call(params.name, params.arguments, session=_session_id(ctx), meta=meta)

    return Server(
        "herdr-mcp",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        # Without this the SDK runs tools/list on every call to check Mcp-Param headers.
        get_tool_input_schema=dispatcher.input_schemas.get,
    )


def _session_id(ctx: ServerRequestContext[Any]) -> str | None:
    """The request's Mcp-Session-Id; None where the transport has none (the stateless protocol
    revisions, stdio)."""
    request = ctx.request
    if isinstance(request, Request):
        return request.headers.get("mcp-session-id")
    return None
