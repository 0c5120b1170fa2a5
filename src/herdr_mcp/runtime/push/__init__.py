"""The runtime's push plane (docs/browser-protocol.md, sections 1 and 3): agent transitions
recorded in state.db (`state/push.py`), watched from Herdr (`watcher`), fanned out to streams
(`hub`), served as `/push/events` and `/push/state` (`stream`, `routes`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from herdr_mcp.runtime.push.settings import PushSettings, StreamSettings

if TYPE_CHECKING:
    from herdr_mcp.herdr import HerdrClient
    from herdr_mcp.runtime.push.hub import PushHub
    from herdr_mcp.runtime.push.watcher import AgentWatcher
    from herdr_mcp.state.push import AgentStates
    from herdr_mcp.state.store import StateStore


@dataclass(frozen=True)
class PushPlane:
    states: AgentStates
    hub: PushHub
    watcher: AgentWatcher
    stream: StreamSettings
    #: workspace -> {scope: inbox.read's answer} for the scopes bound to it (stream.with_inbox).
    inboxes: Callable[[str], dict[str, Any]]

    @classmethod
    def create(cls, herdr: HerdrClient, store: StateStore, owner: str, settings: PushSettings) -> PushPlane:
        from herdr_mcp.runtime.push.hub import PushHub
        from herdr_mcp.runtime.push.watcher import AgentWatcher
        from herdr_mcp.state.bindings import BindingStore
        from herdr_mcp.state.push import AgentStates
        from herdr_mcp.state.tasks import TaskStore

        bindings, tasks = BindingStore(store), TaskStore(store)

        def inboxes(workspace_id: str) -> dict[str, Any]:
            return {scope: tasks.inbox(scope) for scope in bindings.scopes_for(workspace_id)}

        states = AgentStates(store)
        hub = PushHub(states, tail_interval=settings.tail_interval, queue_size=settings.queue_size)
        watcher = AgentWatcher(
            herdr,
            states,
            hub,
            owner,
            poll_interval=settings.poll_interval,
            lease_ttl=settings.lease_ttl,
            output_chars=settings.output_chars,
        )
        return cls(states, hub, watcher, StreamSettings(settings.keepalive, settings.send_timeout), inboxes)

    async def run(self) -> None:
        """Watch Herdr and tail the log until cancelled; streams end (`shutdown`) on the way out."""
        try:
            await asyncio.gather(self.hub.run(), self.watcher.run())
        finally:
            self.hub.close()


__all__ = ["PushPlane", "PushSettings"]
