"""The push plane's timing and bounds, apart from the parts they time: `runtime.config` holds
them (`PushSettings`) without importing the watcher, the hub or the stream (the HTTP stack), so
`herdr-mcp stdio` reads its configuration without them."""

from __future__ import annotations

from dataclasses import dataclass

from herdr_mcp.runtime.push.output import MAX_OUTPUT_CHARS

#: How often agents are listed (transitions repaired, output read; `watcher`).
POLL_INTERVAL_S = 2.0
#: How long the push lease lasts without renewal (renewed at every poll).
LEASE_TTL_S = 10.0
#: How often the event log is read for transitions recorded by another runtime (`hub`).
TAIL_INTERVAL_S = 0.5
#: Events a stream may have waiting for its client before it is ended with `overflow`.
QUEUE_SIZE = 512
#: A stream idle this long gets a keepalive comment (`stream`).
KEEPALIVE_S = 15.0
#: A client that takes nothing for this long is gone: its stream ends.
SEND_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class StreamSettings:
    keepalive: float = KEEPALIVE_S
    send_timeout: float = SEND_TIMEOUT_S


@dataclass(frozen=True)
class PushSettings:
    """The push plane's timing and bounds (tests shorten them)."""

    poll_interval: float = POLL_INTERVAL_S
    lease_ttl: float = LEASE_TTL_S
    tail_interval: float = TAIL_INTERVAL_S
    keepalive: float = KEEPALIVE_S
    send_timeout: float = SEND_TIMEOUT_S
    queue_size: int = QUEUE_SIZE
    output_chars: int = MAX_OUTPUT_CHARS
