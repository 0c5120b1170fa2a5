"""HTTP clients to this machine's own services (a runtime generation, the link): never proxied.

What such a client carries is a bearer that grants a shell on this workstation, so it must never
reach a proxy named by the environment (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, their
lower-case forms), whose owner would see it in clear, and a proxy that is down must not make a
local service unreachable. httpx2 reads those variables (and netrc, and `SSL_CERT_FILE`) unless
`trust_env=False`; every client to a loopback service is made here so no caller can forget.

The clients also refuse, before connecting, any request whose host is not a loopback address:
a URL that names another host (or a name that might resolve elsewhere) is a bug or an attack,
and the bearer stays on this machine either way. The refusal is an `httpx2.ConnectError`, so a
caller maps it with its other "could not connect" failures.

The link's own client to the generations (`link/upstream.py`) writes HTTP on raw sockets and
consults no environment at all; its endpoints are loopback by `check_endpoint`.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import httpx2

from herdr_mcp.strict_json import JsonLimits, loads_bounded


def is_loopback_address(host: str) -> bool:
    """Whether `host` is an IP address literal in 127.0.0.0/8 or ::1 (brackets allowed)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _LoopbackOnly(httpx2.HTTPTransport):
    """A direct (proxy-less) transport that refuses every request off loopback."""

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        _check_loopback(request)
        return super().handle_request(request)


class _AsyncLoopbackOnly(httpx2.AsyncHTTPTransport):
    """The asyncio twin of `_LoopbackOnly`."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        _check_loopback(request)
        return await super().handle_async_request(request)


def _check_loopback(request: httpx2.Request) -> None:
    if not is_loopback_address(request.url.host):
        raise httpx2.ConnectError(
            f"{request.url.host!r} is not a loopback address; a local client never leaves this machine",
            request=request,
        )


def local_client(*, timeout: float | httpx2.Timeout, headers: dict[str, str] | None = None) -> httpx2.Client:
    """A client for a service on this machine's loopback: no proxy, netrc or CA from the
    environment, no redirect followed, and no request to a non-loopback host."""
    return httpx2.Client(
        transport=_LoopbackOnly(),
        trust_env=False,
        follow_redirects=False,
        timeout=timeout,
        headers=headers,
    )


def local_async_client(
    *, timeout: float | httpx2.Timeout, headers: dict[str, str] | None = None
) -> httpx2.AsyncClient:
    """`local_client` for asyncio, e.g. the `http_client` of the MCP SDK's Streamable HTTP client
    (which otherwise builds its own client that honours the proxy variables)."""
    return httpx2.AsyncClient(
        transport=_AsyncLoopbackOnly(),
        trust_env=False,
        follow_redirects=False,
        timeout=timeout,
        headers=headers,
    )


#: What an answer of a local service is read within (docs/runtime.md "Parse boundaries"): a
#: /health document or an /edge/control answer is a few hundred bytes.
LOCAL_ANSWER_LIMITS = JsonLimits(max_bytes=1024 * 1024, max_items=10_000)


def answer_object(answer: httpx2.Response) -> dict[str, Any] | None:
    """The answer's body as a JSON object within `LOCAL_ANSWER_LIMITS`, or None when it is
    another JSON value. Raises ValueError when it is not JSON or passes the bounds (whatever
    listens on the port may answer anything)."""
    document = loads_bounded(answer.content, LOCAL_ANSWER_LIMITS, strict=False)
    return document if isinstance(document, dict) else None
