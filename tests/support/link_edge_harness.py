"""A link in this process (its HTTP server and its side of the Edge) in front of a stand-in
generation, connected to the Edge stand-in (tests/support/edge_standin.py): for tests/link/test_link_edge.py
and tests/runtime/test_parse_bounds.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herdr_mcp.generations import Generation, GenerationStore
from herdr_mcp.link import LinkConfig, LinkHandler, LinkServer
from herdr_mcp.link.edge import EdgeLink, Reconnect
from herdr_mcp.link.edge_device import EdgeDevice
from herdr_mcp.loopback import bind_loopback
from tests.support.edge_standin import DEVICE_ID, DEVICE_SECRET, EdgeStandIn, ToolGeneration
from tests.support.link_harness import LINK_TOKEN, store_active
from tests.support.waiting import wait_until

#: Reconnects within a test's patience.
FAST = Reconnect(first_s=0.05, max_s=0.4, refused_s=0.2)


@dataclass
class Linked:
    edge: EdgeStandIn
    link: EdgeLink
    handler: LinkHandler
    store: GenerationStore
    port: int
    config_dir: Path


def device_of(edge: EdgeStandIn, secret: str = DEVICE_SECRET, edge_url: str | None = None) -> EdgeDevice:
    return EdgeDevice(edge_url or edge.url, DEVICE_ID, secret, "test-host", "2026-12-01T00:00:00Z")


@contextlib.contextmanager
def linked(
    tmp_path: Path,
    edge: EdgeStandIn,
    generation: ToolGeneration | None,
    *,
    reconnect: Reconnect | None = None,
    draw: Any = None,
    secret: str = DEVICE_SECRET,
    edge_url: str | None = None,
) -> Iterator[Linked]:
    """A link in this process (its HTTP server and its Edge side) in front of `generation`."""
    if generation is None:
        store = GenerationStore.in_dir(tmp_path / "generations")  # nothing registered, nothing active
    else:
        store = store_active(tmp_path / "generations", Generation("G", generation.endpoint), active="G")
    handler = LinkHandler(
        LinkConfig(store, LINK_TOKEN, tmp_path / "link-token", token_reader=lambda _: "y" * 32)
    )
    (tmp_path / "link-token").write_text(LINK_TOKEN)
    (tmp_path / "link-token").chmod(0o600)
    link = EdgeLink(
        device_of(edge, secret, edge_url),
        handler.forwarder,
        reconnect=reconnect or FAST,
        draw=draw or (lambda: 0.5),
    )
    handler.edge = link
    server = LinkServer(bind_loopback("127.0.0.1", 0), handler).start()
    link.start()
    try:
        yield Linked(edge, link, handler, store, server.port, tmp_path)
    finally:
        link.stop()
        server.close()
        handler.close()


def connected(link: EdgeLink) -> dict[str, Any]:
    return wait_until(
        lambda: (status := link.status())["state"] == "connected" and status, "the link to connect"
    )
