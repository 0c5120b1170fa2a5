"""The long-lived parts a tool handler may use, composed once at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from herdr_mcp.herdr import HerdrClient
from herdr_mcp.runtime.boundary import Policy
from herdr_mcp.runtime.config import RuntimeConfig
from herdr_mcp.runtime.events import EventFeed
from herdr_mcp.runtime.exec_sessions import ExecSessions
from herdr_mcp.runtime.topology import Topology


@dataclass(frozen=True)
class Services:
    config: RuntimeConfig
    herdr: HerdrClient
    topology: Topology
    events: EventFeed
    sessions: ExecSessions
    policy: Policy

    @classmethod
    def create(cls, config: RuntimeConfig) -> Services:
        herdr = HerdrClient(config.herdr_socket)
        topology = Topology(herdr, home=config.home)
        events = EventFeed(herdr, on_event=lambda _event: topology.invalidate())
        return cls(
            config=config,
            herdr=herdr,
            topology=topology,
            events=events,
            sessions=ExecSessions(config.spool_dir),
            policy=Policy(read_only=config.read_only, write_roots=config.write_roots),
        )
