"""The link: the stable local MCP endpoint in front of the runtime generations.

`server` is its HTTP/1.1 server (a thread per client connection), `router` the request handler
(routing and failure semantics: see its docstring), `pointer` where requests go (the active
pointer, leases, legacy session pins), `upstream` its client to the generations. `edge` is its
outbound connection to the Edge, `edge_frames` that protocol's frames, `edge_device` pairing and
the device record. Its command line (`herdr-mcp link`, `connector`) is `cli/link.py`.
"""

from __future__ import annotations

from herdr_mcp.link.pointer import ActivePointer, Leases, SessionPins
from herdr_mcp.link.router import LinkConfig, LinkHandler, LinkRefusal
from herdr_mcp.link.server import LinkServer

__all__ = ["ActivePointer", "Leases", "LinkConfig", "LinkHandler", "LinkRefusal", "LinkServer", "SessionPins"]
