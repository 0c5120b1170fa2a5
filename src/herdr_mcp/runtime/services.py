"""The long-lived parts a tool handler may use, composed once at start-up.

The parts' modules are imported by `Services.create`, not with this one: `herdr-mcp stdio`
answers a client's handshake before it composes them (cli/stdio.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from herdr_mcp.herdr import HerdrClient
    from herdr_mcp.runtime.boundary import Policy
    from herdr_mcp.runtime.config import RuntimeConfig
    from herdr_mcp.runtime.events import EventFeed
    from herdr_mcp.runtime.exec_sessions import ExecSessions
    from herdr_mcp.runtime.idempotency import Idempotency
    from herdr_mcp.runtime.native import NativeMethods
    from herdr_mcp.runtime.push import PushPlane
    from herdr_mcp.runtime.tasks import TaskTracker
    from herdr_mcp.runtime.topology import Topology
    from herdr_mcp.state.store import StateStore


@dataclass(frozen=True)
class Services:
    config: RuntimeConfig
    herdr: HerdrClient
    topology: Topology
    events: EventFeed
    sessions: ExecSessions
    policy: Policy
    state: StateStore
    tasks: TaskTracker
    idempotency: Idempotency
    runtime_instance: str
    push: PushPlane
    native: NativeMethods

    @classmethod
    def create(cls, config: RuntimeConfig, state: StateStore | None = None) -> Services:
        """The parts of a runtime with `config`; `state` is its state database when the caller
        already opened it (else it is opened here)."""
        from herdr_mcp.herdr import HerdrClient
        from herdr_mcp.runtime.boundary import Policy
        from herdr_mcp.runtime.events import LEASE_NAME as EVENTS_LEASE
        from herdr_mcp.runtime.events import EventFeed, FeedEvent
        from herdr_mcp.runtime.exec_sessions import ExecSessions
        from herdr_mcp.runtime.idempotency import Idempotency
        from herdr_mcp.runtime.native import NativeMethods
        from herdr_mcp.runtime.push import PushPlane
        from herdr_mcp.runtime.tasks import TaskTracker
        from herdr_mcp.runtime.topology import Topology
        from herdr_mcp.state.event_log import EventLog
        from herdr_mcp.state.leases import Lease
        from herdr_mcp.state.ledger import Ledger
        from herdr_mcp.state.store import StateStore, new_runtime_instance
        from herdr_mcp.state.tasks import TaskStore

        herdr = HerdrClient(config.herdr_socket)
        state = state if state is not None else StateStore.open(config.state_file)
        instance = new_runtime_instance()
        topology = Topology(herdr, home=config.home)
        tasks = TaskTracker(herdr, TaskStore(state))
        push = PushPlane.create(herdr, state, instance, config.push)

        def on_event(event: FeedEvent) -> None:
            topology.invalidate()
            tasks.on_event(event)
            push.watcher.on_event(event)

        return cls(
            config=config,
            herdr=herdr,
            topology=topology,
            events=EventFeed(
                herdr, EventLog(state), on_event=on_event, lease=Lease(state, EVENTS_LEASE), owner=instance
            ),
            sessions=ExecSessions(config.spool_dir, store=state, runtime_instance=instance),
            policy=Policy(read_only=config.read_only, write_roots=config.write_roots),
            state=state,
            tasks=tasks,
            idempotency=Idempotency(Ledger(state, instance)),
            runtime_instance=instance,
            push=push,
            native=NativeMethods(herdr, allowed_classes=config.allow_herdr_classes),
        )
