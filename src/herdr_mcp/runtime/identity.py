"""What the runtime says of itself to an MCP client, over HTTP (the SDK's server,
`runtime.server`) and over stdio (`runtime.stdio`) alike; imports nothing."""

from __future__ import annotations

SERVER_NAME = "herdr-mcp"

INSTRUCTIONS = (
    "herdr-mcp controls a developer workstation managed by Herdr. Start with herdr_inspect, read "
    "herdr_skill once, and re-inspect before repeating any mutation whose answer was lost. "
    "herdr_exec is a real shell as the workstation user, not a sandbox."
)
