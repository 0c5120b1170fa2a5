"""`herdr-mcp serve`: run one runtime generation on loopback.

Herdr selection (`cli/herdr_selection.py`, shared with `stdio`): `--sim` always embeds the
simulator, `--no-sim` never does, and the default embeds it only when no Herdr answers a ping on
the configured socket, so a new user can try everything without Herdr installed.

The listening socket is bound before uvicorn starts, so `--port 0` works and the first line on
stdout (`herdr-mcp serving http://127.0.0.1:<port>/mcp`) names the real port.

The same app is served on a Unix socket for the native host (docs/browser-protocol.md 1,
`runtime/ipc.py`): `--ipc-socket PATH`, else `$HERDR_MCP_IPC_SOCKET` (set by a generation's
launcher to `<config dir>/ipc/<generation>.sock`), else `<config dir>/ipc/runtime.sock`;
`--no-ipc-socket` serves none. A socket that cannot be set up stops the start, except that a
default or launcher-given path too long for a socket address only leaves the runtime without one
(with a warning on stderr): an explicit `--ipc-socket` that is too long is refused.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp

from herdr_mcp.cli.herdr_selection import herdr_connection
from herdr_mcp.errors import LocalFault
from herdr_mcp.layout import GENERATION_TAG_ENV, IPC_SOCKET_ENV, LOOPBACK_HOSTS, Layout
from herdr_mcp.loopback import StartStopped, StopSignals, bind_loopback, freeze_startup_heap, stop_signals
from herdr_mcp.runtime.app import build_app
from herdr_mcp.runtime.config import RuntimeConfig
from herdr_mcp.runtime.grep.children import stop_searches
from herdr_mcp.runtime.http_limits import KEEP_ALIVE_S, LimitedHttpToolsProtocol
from herdr_mcp.runtime.ipc import IpcError, IpcSocket, bind_ipc_socket
from herdr_mcp.runtime.services import Services
from herdr_mcp.tokens import load_or_create_token

#: Calls in flight at SIGTERM get this long to finish on their own; then the commands and
#: searches they wait on are stopped, so they answer (a killed command, `runtime_stopping`).
CALLS_GRACE_S = 2.0
#: uvicorn cancels what still runs this long after the signal (unanswered); with the exec
#: sessions' own TERM-then-KILL the runtime is gone within 5 s of the signal.
GRACEFUL_SHUTDOWN_S = 3


def serve(args: argparse.Namespace) -> int:
    """Run the runtime until SIGTERM or SIGINT (exit 0 either way, whenever it arrives)."""
    from herdr_mcp.cli import UsageError

    stop = stop_signals()
    if args.host not in LOOPBACK_HOSTS:
        hosts = ", ".join(LOOPBACK_HOSTS)
        raise UsageError("host_not_loopback", f"--host {args.host} is not loopback; pass one of {hosts}")
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return asyncio.run(_serve(args, stop))
    except StartStopped:  # asked to stop while starting: nothing served, nothing to undo
        return 0
    finally:
        stop.exiting()


async def _serve(args: argparse.Namespace, stop: StopSignals) -> int:
    layout = Layout.of(args.config_dir)
    token = load_or_create_token(layout.token_file)
    # Until the socket is bound a stop ends the start at the next module import (the simulator's,
    # the runtime's: they load while it is composed) or at the checks below.
    starting = contextlib.ExitStack()
    starting.enter_context(stop.imports_end_the_start())
    with starting:
        return await _compose_and_serve(args, stop, layout, token, starting)


async def _compose_and_serve(
    args: argparse.Namespace, stop: StopSignals, layout: Layout, token: str, starting: contextlib.ExitStack
) -> int:
    config_dir = layout.config_dir
    async with herdr_connection(args) as (herdr_socket, herdr_source):
        if stop.is_set():  # asked to stop while starting: leave before serving anything
            return 0
        config = RuntimeConfig(
            config_dir=config_dir,
            herdr_socket=herdr_socket,
            host=args.host,
            port=args.port,
            read_only=args.read_only,
            write_roots=tuple(path.resolve() for path in args.write_root) if args.write_root else None,
            allow_herdr_classes=frozenset(args.allow_herdr_class or ()),
            state_db=args.state_db,
        )
        services = Services.create(config)
        app = build_app(services, token)
        starting.close()  # from here a stop lets calls in flight finish, whatever they import
        if stop.is_set():
            services.state.close()
            return 0
        sock = _bind(config.host, config.port)
        ipc = _bind_ipc(args, layout)
        port = sock.getsockname()[1]
        host = f"[{config.host}]" if ":" in config.host else config.host
        print(f"herdr-mcp serving http://{host}:{port}/mcp", flush=True)
        print(f"  herdr: {herdr_source}", file=sys.stderr)
        if ipc is not None:
            print(f"  ipc socket: {ipc.path}", file=sys.stderr)
        print(f"  bearer token file: {config.token_file}", file=sys.stderr, flush=True)
        server = _Server(server_config(app, args.log_level))
        relay = asyncio.create_task(_stop_on_signal(server, services, stop))
        freeze_startup_heap()
        try:
            await server.serve(sockets=[sock] if ipc is None else [sock, ipc.sock])
        finally:
            relay.cancel()
            if ipc is not None:
                ipc.close()
    return 0


def server_config(app: ASGIApp, log_level: str) -> uvicorn.Config:
    """How uvicorn serves the runtime, on loopback and the ipc socket alike."""
    return uvicorn.Config(
        app,
        log_level=log_level,
        lifespan="on",
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        # Head size and time, body stalls, keep-alive: runtime/http_limits.py.
        http=LimitedHttpToolsProtocol,
        timeout_keep_alive=KEEP_ALIVE_S,
    )


def _bind_ipc(args: argparse.Namespace, layout: Layout) -> IpcSocket | None:
    """The Unix socket `serve` also listens on (module docstring), or None."""
    # Meant for this process only: commands it runs (herdr_exec) must not inherit it.
    given = os.environ.pop(IPC_SOCKET_ENV, None)
    os.environ.pop(GENERATION_TAG_ENV, None)  # /proc still shows it for this process, not for them
    if args.no_ipc_socket:
        return None
    explicit: Path | None = args.ipc_socket
    path = explicit or (Path(given) if given else layout.runtime_socket)
    try:
        return bind_ipc_socket(path)
    except IpcError as exc:
        if exc.code == "ipc_socket_path_too_long" and explicit is None:
            print(f"  warning: no ipc socket: {exc.message}", file=sys.stderr, flush=True)
            return None
        raise


def _bind(host: str, port: int) -> socket.socket:
    try:
        return bind_loopback(host, port)
    except OSError as exc:
        raise LocalFault(
            "port_unavailable",
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); stop what uses that port, "
            "or pass --port 0 for a free one",
        ) from None


class _Server(uvicorn.Server):
    """uvicorn without signal handlers of its own: `StopSignals` covers the whole life of the
    process, before `serve` and after it too, and uvicorn's second Ctrl-C (`force_exit`) skipped
    the lifespan shutdown, which stops the exec sessions. A second signal changes nothing here:
    calls in flight get at most `timeout_graceful_shutdown` anyway."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _stop_on_signal(server: uvicorn.Server, services: Services, stop: StopSignals) -> None:
    await stop.wait_async()
    server.should_exit = True
    services.push.hub.close()  # open /push/events streams end now, not at the graceful deadline
    # Still running after the grace (this task is cancelled once `serve` returns): stop what
    # the calls wait on so they end with an answer instead of being cancelled without one.
    await asyncio.sleep(CALLS_GRACE_S)
    stop_searches()
    await services.sessions.shutdown()
