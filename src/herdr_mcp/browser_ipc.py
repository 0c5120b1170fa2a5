"""Which Unix socket the native host talks to: the active runtime's (docs/browser-protocol.md 1).

Every runtime listens on a Unix socket under `<config dir>/ipc/` (0700 dir, 0600 socket) besides
its loopback port: `runtime.sock` for a runtime started without generations (`herdr-mcp serve`),
`<generation>.sock` for a generation's runtime (the launcher in `generations/process.py` names it
through `HERDR_MCP_IPC_SOCKET`). The native host calls `active_socket` for every new request and
stream, so an A/B activation is followed without restarting the browser.

The active generation is the one `runtime-status.json` names (`active`), the same pointer the
link follows. A hand-registered generation (one not started by `generation up`, `update` or
`dev sync`) listens on `<generation>.sock` only if its `serve` was given
`--ipc-socket <config dir>/ipc/<generation>.sock`; this module does not guess another socket,
since a request sent to a runtime that is not the active one would act on the wrong generation.
"""

from __future__ import annotations

from pathlib import Path

from herdr_mcp.generations.control import GenerationStore
from herdr_mcp.layout import Layout

__all__ = ["active_socket"]


def active_socket(layout: Layout) -> Path:
    """The Unix socket path of the runtime the native host should forward to.

    `layout.generation_socket(<active>)` when `runtime-status.json` names an active generation,
    else `layout.runtime_socket` (no generations on this workstation, or none activated yet).
    The path may not exist (no runtime running): the caller reports `runtime_unavailable` when a
    connect fails. Raises `GenerationStateError` (a `LocalFault`; `code` `status_invalid` or
    `state_unreadable`) when the status file exists but cannot be read or parsed: forwarding to a
    guessed runtime would be worse than refusing.
    """
    status = GenerationStore.in_dir(layout.generations_dir).read_status()
    if status.active is None:
        return layout.runtime_socket
    return layout.generation_socket(status.active)
