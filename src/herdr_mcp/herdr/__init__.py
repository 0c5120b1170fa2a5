"""Herdr socket client: the protocol and its errors. What real Herdr's methods are, per protocol,
is `herdr_mcp.herdr.reference` (from Herdr's published schemas)."""

from herdr_mcp.herdr.client import (
    DEFAULT_LONG_CALL_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    MAX_LINE_BYTES,
    HerdrClient,
    HerdrEvent,
    default_socket_path,
)
from herdr_mcp.herdr.errors import (
    HerdrError,
    HerdrProtocolError,
    HerdrRemoteError,
    HerdrRequestTooLarge,
    HerdrTimeout,
    HerdrUnavailable,
)

__all__ = [
    "DEFAULT_LONG_CALL_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "MAX_LINE_BYTES",
    "HerdrClient",
    "HerdrError",
    "HerdrEvent",
    "HerdrProtocolError",
    "HerdrRemoteError",
    "HerdrRequestTooLarge",
    "HerdrTimeout",
    "HerdrUnavailable",
    "default_socket_path",
]
