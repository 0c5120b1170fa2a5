"""The MCP server: the frozen catalog on tools/list and one dispatcher on tools/call.

The tool list is served byte-for-byte from the frozen catalog of the current epoch, so what a
client receives hashes to the contract identity in `herdr-mcp version`. Arguments are validated
against the catalog's own JSON schema before a handler runs; a handler returns a dict (the
structured result) or an `ImageResult`, or raises `ToolError`.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from jsonschema import Draft202012Validator
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from herdr_mcp import __version__
from herdr_mcp.contract import CURRENT_EPOCH, load_catalog
from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.services import Services
from herdr_mcp.runtime.tools import HANDLERS
from herdr_mcp.runtime.tools.fs import ImageResult

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "herdr-mcp controls a developer workstation managed by Herdr. Start with herdr_inspect, read "
    "herdr_skill once, and re-inspect before repeating any mutation whose answer was lost. "
    "herdr_exec is a real shell as the workstation user, not a sandbox."
)


class ToolDispatcher:
    """Validates arguments against the frozen schemas and runs the matching handler."""

    def __init__(self, services: Services, epoch: int = CURRENT_EPOCH) -> None:
        self.services = services
        self.catalog = load_catalog(epoch)
        missing = {tool["name"] for tool in self.catalog} - set(HANDLERS)
        if missing:
            raise RuntimeError(f"catalog tools without a handler: {sorted(missing)}")
        self._validators = {tool["name"]: Draft202012Validator(tool["inputSchema"]) for tool in self.catalog}
        self.input_schemas: dict[str, Mapping[str, Any]] = {
            tool["name"]: tool["inputSchema"] for tool in self.catalog
        }
        self.list_result = types.ListToolsResult(
            tools=[types.Tool.model_validate(tool) for tool in self.catalog]
        )

    async def call(self, name: str, arguments: Mapping[str, Any] | None) -> types.CallToolResult:
        try:
            output = await self._run(name, dict(arguments or {}))
        except ToolError as exc:
            return _error_result(exc)
        except Exception:
            log.exception("tool %s failed unexpectedly", name)
            return _error_result(
                ToolError("internal_error", f"{name} failed inside the runtime; see the runtime log")
            )
        if isinstance(output, ImageResult):
            encoded = base64.b64encode(output.data).decode("ascii")
            info = dict(output.info)
            return types.CallToolResult(
                content=[
                    types.ImageContent(type="image", data=encoded, mime_type=output.mime_type),
                    types.TextContent(type="text", text=_json(info)),
                ],
                structured_content=info,
            )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=_json(output))], structured_content=output
        )

    async def _run(self, name: str, arguments: dict[str, Any]) -> dict[str, Any] | ImageResult:
        validator = self._validators.get(name)
        if validator is None:
            raise ToolError("unknown_tool", f"no tool named {name!r}; tools/list shows the 18 tools")
        problem = next(iter(sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))), None)
        if problem is not None:
            where = "/".join(str(part) for part in problem.absolute_path) or "(arguments)"
            raise ToolError("invalid_arguments", f"{where}: {problem.message}", tool=name)
        return await HANDLERS[name](self.services, arguments)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _error_result(exc: ToolError) -> types.CallToolResult:
    payload = {"error": exc.to_dict()}
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
        return await dispatcher.call(params.name, params.arguments)

    return Server(
        "herdr-mcp",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        # Without this the SDK runs tools/list on every call to check Mcp-Param headers.
        get_tool_input_schema=dispatcher.input_schemas.get,
    )
