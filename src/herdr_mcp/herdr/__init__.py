"""Herdr socket client: the protocol, its errors, and the table of native methods we know."""

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
from herdr_mcp.herdr.methods import NATIVE_METHODS, NativeMethod

__all__ = [
    "DEFAULT_LONG_CALL_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "MAX_LINE_BYTES",
    "NATIVE_METHODS",
    "HerdrClient",
    "HerdrError",
    "HerdrEvent",
    "HerdrProtocolError",
    "HerdrRemoteError",
    "HerdrRequestTooLarge",
    "HerdrTimeout",
    "HerdrUnavailable",
    "NativeMethod",
    "default_socket_path",
]
