"""The link: the stable local MCP endpoint in front of the runtime generations.

`router` is the ASGI app (routing by the active pointer, leases, legacy session pins, failure
semantics: see its docstring); `cli` is `herdr-mcp link`. Its WSS connection to the Edge comes
with the Edge issue.
"""

from __future__ import annotations

from herdr_mcp.link.router import (
    ActivePointer,
    Leases,
    LinkConfig,
    LinkRefusal,
    SessionPins,
    build_link_app,
)

__all__ = ["ActivePointer", "Leases", "LinkConfig", "LinkRefusal", "SessionPins", "build_link_app"]
