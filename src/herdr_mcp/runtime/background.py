"""The runtime's background work while a transport serves, shared by `serve` (the HTTP app's
lifespan) and `stdio`; it imports nothing of the HTTP stack."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from herdr_mcp.runtime.grep.children import stop_searches
from herdr_mcp.runtime.services import Services


@contextlib.asynccontextmanager
async def running(services: Services) -> AsyncIterator[None]:
    """The runtime's background work for as long as a transport serves (HTTP or stdio): follow
    Herdr events (herdr_since, task settles) and reconcile open tasks; on the way out stop the
    searches and exec sessions still running."""
    background = [
        asyncio.create_task(services.events.run(), name="herdr-event-feed"),
        asyncio.create_task(services.tasks.run_reconciler(), name="task-reconciler"),
        asyncio.create_task(services.push.run(), name="push-plane"),
    ]
    try:
        yield
    finally:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        # A grep in flight holds a worker thread (waiting on its child) that the process
        # would otherwise wait for, up to the grep's 20 s deadline.
        stop_searches()
        await services.sessions.shutdown()
