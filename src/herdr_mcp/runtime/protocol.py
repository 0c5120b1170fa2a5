"""MCP's wire vocabulary for the stdio loop, without the `mcp` SDK (which costs the stdio start
about 0.4 s to import: pydantic and the models of two protocol eras).

What is here is the SDK's own, written down: the protocol revisions of both eras, the reserved
`_meta` keys and error codes (mcp_types), the 2026-07-28 envelope ladder without headers (the
SDK's `classify_inbound_request`, which the HTTP app runs), and a check of `initialize` params
that accepts only what the SDK's `InitializeRequestParams` accepts and leaves anything else to
it. tests/runtime/test_stdio_protocol.py holds each against the SDK: the constants equal, the
envelope ladder answering alike over generated envelopes, every params the check accepts
accepted by the SDK's model with the same revision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Revisions reachable by the initialize handshake, oldest first (mcp_types.version).
HANDSHAKE_PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_HANDSHAKE_VERSION = HANDSHAKE_PROTOCOL_VERSIONS[-1]
#: Revisions of the stateless per-request envelope.
MODERN_PROTOCOL_VERSIONS = ("2026-07-28",)
LATEST_MODERN_VERSION = MODERN_PROTOCOL_VERSIONS[-1]

#: The reserved `_meta` keys of a 2026-07-28 request and result.
PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_META_KEY = "io.modelcontextprotocol/clientInfo"
SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo"

# JSON-RPC 2.0 error codes (section 5.1) and MCP's own.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
UNSUPPORTED_PROTOCOL_VERSION = -32022


@dataclass(frozen=True)
class EnvelopeRejection:
    """The first rung of the envelope ladder a request failed, as JSON-RPC error fields."""

    code: int
    message: str
    data: Any = None


def check_envelope(params: Mapping[str, Any]) -> EnvelopeRejection | str:
    """The 2026-07-28 envelope of a request's `params`: its protocol version when every rung
    passes, else the first rung that failed, in the SDK's words (`classify_inbound_request`
    without headers): `_meta` an object carrying the protocol version and the client's
    capabilities (-32602), the version a string (-32602) that is served (-32022)."""
    meta = params.get("_meta")
    if not isinstance(meta, Mapping):
        return EnvelopeRejection(
            INVALID_PARAMS,
            "params._meta must be an object carrying the required "
            f"{PROTOCOL_VERSION_META_KEY!r} and {CLIENT_CAPABILITIES_META_KEY!r} envelope keys",
        )
    missing = [key for key in (PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY) if key not in meta]
    if missing:
        return EnvelopeRejection(
            INVALID_PARAMS, f"params._meta is missing the required envelope key(s): {', '.join(missing)}"
        )
    version = meta[PROTOCOL_VERSION_META_KEY]
    if not isinstance(version, str):
        return EnvelopeRejection(INVALID_PARAMS, "the protocol-version envelope value must be a string")
    if version not in MODERN_PROTOCOL_VERSIONS:
        return EnvelopeRejection(
            UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            {"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": version},
        )
    return version


#: What `handshake_version` reads in `capabilities`: each member's own members and their checks.
_CAPABILITY_MEMBERS: dict[str, dict[str, type]] = {
    "roots": {"listChanged": bool},
    "sampling": {"context": dict, "tools": dict},
    "elicitation": {"form": dict, "url": dict},
}
#: Members whose value is an object of objects.
_CAPABILITY_MAPS = ("experimental", "extensions")
_CLIENT_INFO_TEXT = ("title", "description", "websiteUrl")


def handshake_version(params: Mapping[str, Any]) -> str | None:
    """The `protocolVersion` of `initialize` params plainly valid (the shapes clients send: the
    three members under their wire names, capabilities among roots, sampling, elicitation,
    experimental and extensions with members of the right types, clientInfo with a string name
    and version); None for anything else, which only the SDK's `InitializeRequestParams`
    decides (it also takes field names, `_meta`, icons, tasks, nulls...)."""
    if params.keys() != {"protocolVersion", "capabilities", "clientInfo"}:
        return None
    version, capabilities, info = params["protocolVersion"], params["capabilities"], params["clientInfo"]
    if not (isinstance(version, str) and isinstance(capabilities, dict) and isinstance(info, dict)):
        return None
    for name, value in capabilities.items():
        if name in _CAPABILITY_MAPS:
            if not (isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())):
                return None
        elif name in _CAPABILITY_MEMBERS:
            members = _CAPABILITY_MEMBERS[name]
            if not isinstance(value, dict) or not value.keys() <= members.keys():
                return None
            if not all(type(member) is members[key] for key, member in value.items()):
                return None
        else:
            return None
    if not (isinstance(info.get("name"), str) and isinstance(info.get("version"), str)):
        return None
    if not info.keys() <= {"name", "version", *_CLIENT_INFO_TEXT}:
        return None
    if not all(isinstance(info[key], str) for key in _CLIENT_INFO_TEXT if key in info):
        return None
    return version
