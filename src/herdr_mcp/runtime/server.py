"""The MCP server over Streamable HTTP: the `mcp` SDK's low-level server wired to the dispatcher.

The tool list is served byte-for-byte from the frozen catalog of the current epoch, so what a
client receives hashes to the contract identity in `herdr-mcp version`; tools/call goes to the
`ToolDispatcher` (`runtime.dispatcher`), whose plain JSON answer is validated into the SDK's
result here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from starlette.requests import Request

from herdr_mcp import __version__
from herdr_mcp.runtime.dispatcher import INSTRUCTIONS, ToolDispatcher


def list_tools_result(catalog: Sequence[Any]) -> types.ListToolsResult:
    """tools/list's result: the frozen catalog, each tool as the SDK models it."""
    return types.ListToolsResult(tools=[types.Tool.model_validate(tool) for tool in catalog])


def build_mcp_server(dispatcher: ToolDispatcher) -> Server[Any]:
    """The low-level SDK server wired to `dispatcher`."""
    list_result = list_tools_result(dispatcher.catalog)

    async def on_list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return list_result

    async def on_call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        meta = dict(params.meta) if params.meta else None
        answer = await dispatcher.call(params.name, params.arguments, session=_session_id(ctx), meta=meta)
        # The plain answer as it is: the SDK's runner takes a dict from a handler (its
        # `HandlerResult`) and validates it into the protocol version's CallToolResult before it
        # goes out (`mcp_types.methods.serialize_server_result`), as it does a model's dump. A
        # model built here was validated, dumped and validated again: 40-50 us of a 4 KiB
        # herdr_fs_read (issue 24). tests/runtime/test_e2e_mcp.py checks the wire is the same.
        return cast(types.CallToolResult, answer)

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
