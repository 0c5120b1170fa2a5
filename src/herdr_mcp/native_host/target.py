"""Which runtime a forwarded request goes to: its Unix socket and the token file of its bearer.

Resolved again for every request and every new stream (docs/browser-protocol.md section 1), so
an A/B activation is picked up without restarting the browser. The socket is
`browser_ipc.active_socket`'s (the active generation's own, else `<config dir>/ipc/runtime.sock`
when no generation is active or the runtime listening there is the active generation's).
The bearer is the one the gate uses for that generation: its registered `token_file`, else the
config dir's token. The token itself is read when a request is forwarded and kept nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from herdr_mcp.browser_ipc import active_socket
from herdr_mcp.generations.control import GenerationStore
from herdr_mcp.layout import Layout


@dataclass(frozen=True)
class RuntimeTarget:
    """Where to forward: the runtime's socket and the file holding the bearer it expects."""

    socket: Path
    token_file: Path


def active_target(layout: Layout) -> RuntimeTarget:
    """The runtime the host forwards to now. Raises what `active_socket` raises (a
    `GenerationStateError` for an unreadable status file) and `GenerationError` for a control
    file that cannot be read: the host answers both `runtime_unavailable`."""
    socket = active_socket(layout)
    store = GenerationStore.in_dir(layout.generations_dir)
    active = store.read_status().active
    if active is None:
        return RuntimeTarget(socket, layout.token_file)
    # Read apart from the socket: a switch in between costs one request a 401, never a wrong runtime.
    spec = next((g for g in store.read_control().generations if g.generation == active), None)
    token_file = Path(spec.token_file) if spec is not None and spec.token_file else layout.token_file
    return RuntimeTarget(socket, token_file)
