"""The peer for latency figures: the same `mcp` SDK serving one trivial echo tool.

Same transport options as the runtime (Streamable HTTP, JSON responses, uvicorn, loopback,
bearer check), so the ratio isolates what herdr-mcp's own work costs.
Usage: python benchmarks/echo_server.py <port> <token>
"""

from __future__ import annotations

import sys
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from starlette.applications import Starlette

from herdr_mcp.runtime.auth import BearerGate

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


def main() -> None:
    port, token = int(sys.argv[1]), sys.argv[2]
    server: Server[Any] = Server("echo", on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    app: Starlette = server.streamable_http_app(json_response=True)
    uvicorn.run(BearerGate(app, token), host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
