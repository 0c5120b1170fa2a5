"""Which Unix socket the native host talks to: the active runtime's (docs/browser-protocol.md 1).

Every runtime listens on a Unix socket under `<config dir>/ipc/` (0700 dir, 0600 socket) besides
its loopback port: `runtime.sock` for a runtime started without generations (`herdr-mcp serve`,
`./scripts/serve`), `<generation>.sock` for a generation's runtime (the launcher in
`generations/process.py` names it through `HERDR_MCP_IPC_SOCKET`). The native host calls
`active_socket` for every new request and stream, so an A/B activation is followed without
restarting the browser.

The active generation is the one `runtime-status.json` names (`active`), the same pointer the
link follows. Its socket is `<generation>.sock` when that exists. When it does not (a generation
registered by hand whose `serve` was started without generations, so it listens on
`runtime.sock`; a runtime too old to know `HERDR_MCP_IPC_SOCKET`), `runtime.sock` is taken only
if the process listening on it is the process listening on the generation's registered endpoint:
on Linux the socket's peer (`SO_PEERCRED`) holds the endpoint's listening TCP socket among its
file descriptors (`/proc/net/tcp*`, `/proc/<pid>/fd`). Anything else would send a request to a
runtime that is not the active one, which would act on the wrong generation; elsewhere (macOS)
no such check is made and the generation's own socket is named (the host then answers
`runtime_unavailable`, naming it).
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import sys
from pathlib import Path
from urllib.parse import urlsplit

from herdr_mcp.generations.control import GenerationError, GenerationStore
from herdr_mcp.layout import Layout

__all__ = ["active_socket", "same_runtime"]

#: TCP state LISTEN in /proc/net/tcp.
_LISTEN = "0A"
#: How long a connect to a Unix socket may take before it counts as "nobody there".
_CONNECT_TIMEOUT_S = 1.0


def active_socket(layout: Layout) -> Path:
    """The Unix socket path of the runtime the native host should forward to.

    `layout.runtime_socket` when no generation is active (no generations on this workstation, or
    none activated yet); else `layout.generation_socket(<active>)`, or `layout.runtime_socket`
    when the generation has no socket of its own and `same_runtime` proves the runtime on
    `runtime.sock` is the generation's (module docstring). The path may not exist (no runtime
    running): the caller reports `runtime_unavailable` when a connect fails. Raises
    `GenerationStateError` (a `LocalFault`; `code` `status_invalid` or `state_unreadable`) when
    the status file exists but cannot be read or parsed: forwarding to a guessed runtime would be
    worse than refusing.
    """
    store = GenerationStore.in_dir(layout.generations_dir)
    status = store.read_status()
    if status.active is None:
        return layout.runtime_socket
    own = layout.generation_socket(status.active)
    if own.exists() or not layout.runtime_socket.exists():
        return own
    try:
        endpoint = store.read_control().find(status.active).endpoint
    except GenerationError:
        return own
    return layout.runtime_socket if same_runtime(layout.runtime_socket, endpoint) else own


def same_runtime(unix_socket: Path, endpoint: str) -> bool:
    """Whether the process serving `unix_socket` also listens on `endpoint`'s loopback port
    (Linux; False elsewhere and whenever it cannot be told)."""
    if not sys.platform.startswith("linux"):
        return False
    port = urlsplit(endpoint).port
    pid = _peer_pid(unix_socket)
    if port is None or pid is None:
        return False
    inodes = _listening_inodes(port)
    if not inodes:
        return False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return True
    return False


def _peer_pid(path: Path) -> int | None:
    """The pid of the process that accepted our connection to `path` (SO_PEERCRED), or None."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(_CONNECT_TIMEOUT_S)
        try:
            probe.connect(str(path))
            credentials = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            return None
    pid, _, _ = struct.unpack("3i", credentials)
    return pid if pid > 0 else None


def _listening_inodes(port: int) -> set[str]:
    """The inodes of the TCP sockets listening on `port` (IPv4 and IPv6)."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table, encoding="ascii") as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if len(fields) > 9 and fields[3] == _LISTEN and fields[1].rsplit(":", 1)[1] == f"{port:04X}":
                    found.add(fields[9])
    return found
