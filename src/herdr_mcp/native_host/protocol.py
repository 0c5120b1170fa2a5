"""The one parse boundary for frames from the browser, and the allowlist of what the host forwards.

A frame's body is a JSON object, one of (docs/browser-protocol.md section 4):

    {"id", "method", "path", "body"?, "query"?, "headers"?}   a request, answered by one reply
    {"id", "method": "GET", "path": "/push/events", "query"?: {"after"}, "stream": true}
    {"id", "cancel": true}                               ends the stream `id`

`parse` turns it into a `Forward` or a `Cancel`, or raises `Refused` with the code the host
answers (`invalid_request`, `path_not_allowed`) and the frame's id when one could be read. The
allowlist is the table of section 2; any other path, or another method on a listed path, is
`path_not_allowed`. `headers` is taken on `POST /mcp` only, and only the MCP headers of
`MCP_HEADERS` (the stateless 2026-07-28 protocol needs `MCP-Protocol-Version` on each request,
and frames have no other way to carry it); never `Authorization`, `Host` or a session id. A value
that exists here is well-formed; the host forwards it as it is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from herdr_mcp.native_host.framing import MAX_INCOMING_BYTES
from herdr_mcp.strict_json import JsonLimitExceeded, JsonLimits, loads_bounded
from herdr_mcp.text import clean_json, decode

#: What a frame's JSON may hold (docs/runtime.md "Parse boundaries"): its size is capped by the
#: framing already; a request is a path, a few ids and at most one handoff or MCP message.
FRAME_LIMITS = JsonLimits(max_bytes=MAX_INCOMING_BYTES, max_items=50_000)
#: A request id: what the extension correlates replies with. Bounded so a frame cannot make every
#: reply to it large.
REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
#: `after` of /push/events: a seq, a decimal number (section 3).
SEQ = re.compile(r"^[0-9]{1,19}$")
#: The request headers a frame may carry to `POST /mcp` (lower case): the protocol revision and
#: the 2026-07-28 routing headers, which name the method and the tool. Nothing that
#: authenticates, addresses or keeps state (no `Mcp-Session-Id`: the bridge is stateless).
MCP_HEADERS = frozenset({"mcp-protocol-version", "mcp-method", "mcp-name"})
#: A header value from a frame: printable ASCII without separators that could split a header.
HEADER_VALUE = re.compile(r"^[A-Za-z0-9._/:@+-]{1,128}$")


@dataclass(frozen=True)
class Route:
    """What one allowlisted method and path may carry."""

    stream: bool = False
    query_keys: frozenset[str] = frozenset()
    header_keys: frozenset[str] = frozenset()


#: Section 2's table: the only (method, path) pairs forwarded.
ROUTES: dict[tuple[str, str], Route] = {
    ("GET", "/push/events"): Route(stream=True, query_keys=frozenset({"after"})),
    ("GET", "/push/state"): Route(),
    ("POST", "/browser/handoff.prepare"): Route(),
    ("POST", "/browser/binding.get"): Route(),
    ("POST", "/browser/binding.set"): Route(),
    ("POST", "/browser/binding.list"): Route(),
    ("POST", "/browser/turn.append"): Route(),
    ("POST", "/browser/turn.resolve"): Route(),
    ("POST", "/browser/inbox.read"): Route(),
    ("POST", "/browser/inbox.ack"): Route(),
    ("POST", "/browser/inbox.move"): Route(),
    ("POST", "/browser/pane.list"): Route(),
    ("POST", "/browser/pane.read"): Route(),
    ("POST", "/browser/agent.prompt"): Route(),
    ("POST", "/browser/pane.send_input"): Route(),
    ("POST", "/mcp"): Route(header_keys=MCP_HEADERS),
}

_REQUEST_FIELDS = {"id", "method", "path", "body", "query", "stream", "headers"}
_CANCEL_FIELDS = {"id", "cancel"}


class Refused(Exception):
    """A frame the host answers itself with `{"id", "error": {"code", "message"}}`."""

    def __init__(self, code: str, message: str, request_id: str | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.request_id = request_id

    def reply(self) -> dict[str, Any]:
        return {"id": self.request_id, "error": {"code": self.code, "message": self.message}}


@dataclass(frozen=True)
class Forward:
    """A request to forward: `body` is the JSON to send (None for a GET)."""

    id: str
    method: str
    path: str
    stream: bool = False
    query: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Cancel:
    """End the stream `id` (nothing happens when no such stream is open any more)."""

    id: str


def parse(payload: bytes) -> Forward | Cancel:
    """The request or cancel in one frame body; raises `Refused`.

    Text (section 4, "Text"): bytes that are not UTF-8 are read as U+FFFD, and every lone
    surrogate the JSON spells (`"\\ud800"`, which Chrome passes through) becomes U+FFFD, so
    what is forwarded always encodes. JSON past `FRAME_LIMITS` is `json_too_deep` or
    `json_too_many_items`.
    """
    try:
        message = loads_bounded(decode(payload), FRAME_LIMITS)
    except JsonLimitExceeded as exc:
        raise Refused(exc.code, f"a frame must be one JSON object: {exc.message}") from None
    except ValueError as exc:
        raise Refused("invalid_request", f"a frame must be one UTF-8 JSON object: {exc}") from None
    message = clean_json(message)
    if not isinstance(message, dict):
        raise Refused("invalid_request", "a frame must be a JSON object")
    request_id = _request_id(message.get("id"))
    if "cancel" in message:
        _only(message, _CANCEL_FIELDS, request_id)
        if message["cancel"] is not True:
            raise Refused("invalid_request", '"cancel" must be true', request_id)
        return Cancel(request_id)
    _only(message, _REQUEST_FIELDS, request_id)
    method, path = message.get("method"), message.get("path")
    if not isinstance(method, str) or not isinstance(path, str):
        raise Refused("invalid_request", '"method" and "path" must be strings', request_id)
    route = ROUTES.get((method, path))
    if route is None:
        raise Refused(
            "path_not_allowed",
            f"{method[:16]} {path[:200]} is not forwarded; the host forwards only "
            "the paths of docs/browser-protocol.md section 2",
            request_id,
        )
    stream = message.get("stream", False)
    if stream is not route.stream:
        what = "needs" if route.stream else "cannot take"
        raise Refused("invalid_request", f'{method} {path} {what} "stream": true', request_id)
    return Forward(
        id=request_id,
        method=method,
        path=path,
        stream=route.stream,
        query=_query(message.get("query"), route, request_id),
        body=_body(message, method, request_id),
        headers=_headers(message.get("headers"), route, request_id),
    )


def _request_id(value: object) -> str:
    if not isinstance(value, str) or not REQUEST_ID.match(value):
        raise Refused("invalid_request", '"id" must be a string of 1-128 characters [A-Za-z0-9._:-]')
    return value


def _only(message: dict[str, Any], allowed: set[str], request_id: str) -> None:
    unknown = sorted(set(message) - allowed)
    if unknown:
        raise Refused("invalid_request", f"unknown fields {unknown}; allowed: {sorted(allowed)}", request_id)


def _query(value: object, route: Route, request_id: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Refused("invalid_request", '"query" must be an object', request_id)
    query: dict[str, str] = {}
    for key, item in value.items():
        if key not in route.query_keys:
            raise Refused("invalid_request", f"query parameter {key[:64]!r} is not accepted here", request_id)
        text = str(item) if isinstance(item, int) and not isinstance(item, bool) else item
        if not isinstance(text, str) or not SEQ.match(text):
            raise Refused("invalid_request", f"query {key!r} must be a seq (a decimal number)", request_id)
        query[key] = text
    return query


def _headers(value: object, route: Route, request_id: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Refused("invalid_request", '"headers" must be an object', request_id)
    headers: dict[str, str] = {}
    for key, item in value.items():
        name = key.lower()
        if name not in route.header_keys:
            allowed = sorted(route.header_keys) or "none on this path"
            raise Refused(
                "invalid_request", f"header {key[:64]!r} is not accepted here; allowed: {allowed}", request_id
            )
        if name in headers:
            raise Refused("invalid_request", f"header {name!r} is given twice", request_id)
        if not isinstance(item, str) or not HEADER_VALUE.match(item):
            raise Refused(
                "invalid_request", f"header {name!r} must be 1-128 characters [A-Za-z0-9._/:@+-]", request_id
            )
        headers[name] = item
    return headers


def _body(message: dict[str, Any], method: str, request_id: str) -> bytes | None:
    if method == "GET":
        if message.get("body") is not None:
            raise Refused("invalid_request", "a GET carries no body", request_id)
        return None
    body = message.get("body", {})
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
