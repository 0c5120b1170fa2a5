"""The floor for stdio figures: the `mcp` SDK's own low-level `Server` serving one echo tool over
the SDK's stdio transport (`mcp.server.stdio.stdio_server`).

Usage: python benchmarks/stdio_echo_server.py
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

ECHO = types.Tool(
    name="echo",
    description="Return the text argument.",
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)


async def on_list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[ECHO])


async def on_call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    text = str((params.arguments or {}).get("text", ""))
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content={"text": text}
    )


async def serve() -> None:
    server: Server[Any] = Server("echo", on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(serve)
