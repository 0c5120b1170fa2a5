"""`herdr-mcp stdio`: the runtime for one MCP client that launched it, over stdin and stdout.

The same contract, boundary, state (the config dir's state.db and audit log) and Herdr
selection as `serve` (`--sim`, `--no-sim`, `--sim-root`, `--herdr-socket`, `--read-only`,
`--write-root`); no bearer, since only the process that started us holds the pipes. stdout
carries JSON-RPC and nothing else; logs go to stderr. It ends when stdin closes or on SIGTERM
or SIGINT (exit 0 either way): calls in flight get the same grace as under `serve`.

Start-up, in order: the wire is claimed, Herdr is selected, the state database is opened (and
migrated) and the frozen catalog read; what fails there fails before anything is served (one
error line, or one JSON object under `--json`, and nothing on the wire). Then the session
answers the client at once (initialize, server/discover and tools/list need only the catalog),
while a worker thread composes the rest of the runtime (the services and the dispatcher, with
the modules of every tool); a tools/call waits for that, and the runtime's background work
(`runtime.background.running`) starts as soon as it is there. Nothing of the HTTP stack or of
the `mcp` SDK is imported on this path (tests/runtime/test_stdio_imports.py).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import TYPE_CHECKING

from herdr_mcp.cli.herdr_selection import herdr_connection
from herdr_mcp.contract import load_catalog
from herdr_mcp.layout import Layout
from herdr_mcp.loopback import StopSignals, freeze_startup_heap, stop_signals
from herdr_mcp.runtime.background import running
from herdr_mcp.runtime.config import RuntimeConfig
from herdr_mcp.runtime.grep.children import stop_searches
from herdr_mcp.runtime.stdio import StdioSession, claimed_stdio
from herdr_mcp.state.store import StateStore

if TYPE_CHECKING:
    from herdr_mcp.runtime.dispatcher import ToolDispatcher


def stdio(args: argparse.Namespace) -> int:
    """Serve MCP over stdio until stdin closes or a stop signal arrives (exit 0)."""
    stop = stop_signals()
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return asyncio.run(_stdio(args, stop))
    finally:
        stop.exiting()


def _compose(config: RuntimeConfig, state: StateStore) -> ToolDispatcher:
    """The runtime's services and its dispatcher (run in a worker thread: module docstring)."""
    from herdr_mcp.runtime.dispatcher import ToolDispatcher
    from herdr_mcp.runtime.services import Services

    return ToolDispatcher(Services.create(config, state))


async def _stdio(args: argparse.Namespace, stop: StopSignals) -> int:
    config_dir = Layout.of(args.config_dir).config_dir
    # The wire is claimed first, so nothing said while starting (the simulator, a library) can
    # reach stdout.
    async with claimed_stdio() as wire, herdr_connection(args) as (herdr_socket, herdr_source):
        if stop.is_set():
            return 0
        config = RuntimeConfig(
            config_dir=config_dir,
            herdr_socket=herdr_socket,
            read_only=args.read_only,
            write_roots=tuple(path.resolve() for path in args.write_root) if args.write_root else None,
            allow_herdr_classes=frozenset(args.allow_herdr_class or ()),
            state_db=args.state_db,
        )
        state = StateStore.open(config.state_file)
        catalog = load_catalog()
        print(f"herdr-mcp stdio: herdr: {herdr_source}", file=sys.stderr, flush=True)
        composing = asyncio.ensure_future(asyncio.to_thread(_compose, config, state))
        session = StdioSession(catalog, composing, wire)
        reading = asyncio.create_task(session.serve(), name="stdio-reader")
        stopping = asyncio.create_task(stop.wait_async(), name="stdio-stop")
        try:
            # A thread cannot be stopped: a stop or the end of stdin meanwhile waits for it too.
            dispatcher = await composing
        except BaseException:
            for task in (reading, stopping):
                task.cancel()
            await asyncio.gather(reading, stopping, return_exceptions=True)
            raise
        services = dispatcher.services

        async def stop_work() -> None:
            stop_searches()
            await services.sessions.shutdown()

        async with running(services):
            freeze_startup_heap()
            await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
            for task in (reading, stopping):
                task.cancel()
            await asyncio.gather(reading, stopping, return_exceptions=True)
            failure = None if reading.cancelled() else reading.exception()
            await session.finish(stop_work)
            if failure is not None:
                raise failure
    return 0
