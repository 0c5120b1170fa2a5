"""The updater's HTTPS transport: one client recipe and one hand-followed redirect loop.

Every updater download goes through here so the transport rules live in one place: HTTPS only,
the trust anchor is the configured CA file or httpx2's default store (never the environment's
netrc or SSL_CERT_FILE), redirects are followed by hand, at most `max_redirects`, and only
to HTTPS URLs on the allowed hosts (host names, any port), and one deadline bounds the whole
transfer.

Proxies: a request to a host that is not loopback goes through the proxy the environment names
for its scheme (`HTTPS_PROXY`, else `ALL_PROXY`; lower-case forms win, as in urllib), unless
`NO_PROXY` exempts the host; that is what a workstation behind a corporate proxy needs, and TLS
runs end to end through the tunnel, verified as without a proxy. A request to a loopback host
(127.0.0.0/8, ::1, `localhost`) never goes through a proxy, whatever the environment says. The
updater sends no credentials, so a proxy sees host names and the bytes of signed releases.

Bodies are read by the caller from `iter_raw()` so it can enforce its own cap while the bytes
arrive; `Accept-Encoding: identity` makes the bytes counted the bytes held.

Error codes are `<prefix>_<rule>`, so each step keeps its own vocabulary (`download_timeout`).
`stream_get` raises `UpdateTransportError` with `_not_https` (a redirect to http),
`_redirect_refused`, `_too_many_redirects`, `_http_error`, `_unreachable` and `_timeout`;
`check_https_url` raises `UpdateUsageError` with `_url_invalid`, `_not_https` and `_host_refused`
(the caller chose the URL); `open_client` raises `UpdateUsageError("update_config_invalid")` for a
CA file that cannot be loaded.

Discovery uses it with prefix "discovery", staging with prefix "download".
"""

from __future__ import annotations

import contextlib
import ssl
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2

from herdr_mcp import __version__
from herdr_mcp.proxies import proxy_for
from herdr_mcp.release.manifest import MAX_URL_LENGTH
from herdr_mcp.update.errors import UpdateTransportError, UpdateUsageError

_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class TransportRules:
    """What a transfer may do: the hosts a redirect may lead to, the trust anchor, the limits.

    `prefix` names the step in error codes (`download` gives `download_timeout`).
    """

    prefix: str
    allowed_hosts: frozenset[str]
    ca_file: Path | None
    max_redirects: int
    connect_timeout: float
    read_timeout: float


def open_client(
    rules: TransportRules, *, accept: str = "application/octet-stream", headers: dict[str, str] | None = None
) -> httpx2.Client:
    """An httpx2 client that follows no redirect by itself and trusts only `rules.ca_file` if set.

    Raises `UpdateUsageError("update_config_invalid")` when the CA file cannot be loaded.
    """
    verify: ssl.SSLContext | bool = True
    if rules.ca_file is not None:
        try:
            verify = ssl.create_default_context(cafile=str(rules.ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise UpdateUsageError(
                "update_config_invalid", f"cannot load CA certificates from {rules.ca_file}: {exc}"
            ) from None
    return httpx2.Client(
        transport=_ProxyRouting(verify, urllib.request.getproxies_environment()),
        timeout=httpx2.Timeout(rules.read_timeout, connect=rules.connect_timeout),
        follow_redirects=False,
        trust_env=False,
        headers={
            "Accept": accept,
            "User-Agent": f"herdr-mcp-updater/{__version__}",
            "Accept-Encoding": "identity",
            **(headers or {}),
        },
    )


class _ProxyRouting(httpx2.BaseTransport):
    """Straight to loopback and `NO_PROXY` hosts, through the environment's proxy to the rest
    (module docstring). `proxies` is urllib's reading of the environment: scheme -> proxy URL,
    and "no" -> the `NO_PROXY` list."""

    def __init__(self, verify: ssl.SSLContext | bool, proxies: dict[str, str]) -> None:
        self._verify = verify
        self._proxies = proxies
        self._direct = httpx2.HTTPTransport(verify=verify, trust_env=False)
        self._via: dict[str, httpx2.HTTPTransport] = {}

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        return self._transport_for(request).handle_request(request)

    def _transport_for(self, request: httpx2.Request) -> httpx2.HTTPTransport:
        proxy = proxy_for(request.url.scheme, request.url.host, self._proxies)
        if proxy is None:
            return self._direct
        transport = self._via.get(proxy)
        if transport is None:
            try:
                transport = httpx2.HTTPTransport(verify=self._verify, trust_env=False, proxy=proxy)
            except (ValueError, ImportError, httpx2.InvalidURL) as exc:
                raise httpx2.ProxyError(
                    f"the proxy the environment names ({proxy}) cannot be used: {exc}; fix or unset it",
                    request=request,
                ) from None
            self._via[proxy] = transport
        return transport

    def close(self) -> None:
        self._direct.close()
        for transport in self._via.values():
            transport.close()


def check_https_url(url: str, rules: TransportRules) -> httpx2.URL:
    """`url` parsed, if it is an HTTPS URL on an allowed host.

    Raises `UpdateUsageError` (`<prefix>_url_invalid`, `<prefix>_not_https`, `<prefix>_host_refused`).
    """
    try:
        parsed = httpx2.URL(url)
    except (httpx2.InvalidURL, TypeError):
        raise UpdateUsageError(f"{rules.prefix}_url_invalid", f"{url!r} is not a URL") from None
    if parsed.scheme != "https":
        raise UpdateUsageError(
            f"{rules.prefix}_not_https", f"{url} is not HTTPS; the updater only downloads over HTTPS"
        )
    if parsed.host not in rules.allowed_hosts:
        raise UpdateUsageError(
            f"{rules.prefix}_host_refused",
            f"{url} is on host {parsed.host!r}, not one of the allowed hosts "
            f"({', '.join(sorted(rules.allowed_hosts))})",
        )
    return parsed


@contextlib.contextmanager
def stream_get(
    client: httpx2.Client, url: str, rules: TransportRules, deadline: float
) -> Iterator[httpx2.Response]:
    """GET `url`, following allowed redirects by hand, and yield the 200 response unread.

    The caller reads `iter_raw()` and must check `deadline` (a `time.monotonic()` value) while it
    does; a timeout raised while it reads becomes `<prefix>_timeout` here. Raises
    `UpdateTransportError` (codes in the module docstring).
    """
    prefix = rules.prefix
    try:
        for _ in range(rules.max_redirects + 1):
            if time.monotonic() > deadline:
                raise timeout_error(url, rules)
            with client.stream("GET", url) as response:
                if response.status_code in _REDIRECT_STATUSES:
                    url = _redirect_target(response, rules)
                    continue
                if response.status_code != 200:
                    error = UpdateTransportError(
                        f"{prefix}_http_error",
                        f"GET {url} answered HTTP {response.status_code}; try again later",
                    )
                    error.http_status = response.status_code
                    raise error
                encoding = response.headers.get("content-encoding", "identity").strip().lower()
                if encoding != "identity":
                    raise UpdateTransportError(
                        f"{prefix}_http_error",
                        f"GET {url} answered with Content-Encoding {encoding!r}, asked for identity",
                    )
                yield response
                return
    except httpx2.TimeoutException:
        raise timeout_error(url, rules) from None
    except httpx2.TransportError as exc:
        raise UpdateTransportError(
            f"{prefix}_unreachable", f"GET {url} failed: {exc or type(exc).__name__}; check the network"
        ) from None
    raise UpdateTransportError(
        f"{prefix}_too_many_redirects", f"more than {rules.max_redirects} redirects, the last to {url}"
    )


def declared_length(response: httpx2.Response) -> int | None:
    """The response's Content-Length if it is a plain decimal number, else None."""
    declared = response.headers.get("content-length")
    return int(declared) if declared is not None and declared.isdigit() else None


def timeout_error(url: str, rules: TransportRules) -> UpdateTransportError:
    return UpdateTransportError(
        f"{rules.prefix}_timeout",
        f"GET {url} did not finish in time (read timeout {rules.read_timeout} s or the overall "
        "deadline passed); try again later",
    )


def _redirect_target(response: httpx2.Response, rules: TransportRules) -> str:
    location = response.headers.get("location")
    target = None
    if location and len(location) <= MAX_URL_LENGTH:
        try:
            target = response.url.join(location)
        except httpx2.InvalidURL:
            target = None
    if target is None:
        raise UpdateTransportError(
            f"{rules.prefix}_redirect_refused", f"{response.url} redirected without a usable Location"
        )
    if target.scheme != "https":
        raise UpdateTransportError(
            f"{rules.prefix}_not_https",
            f"{response.url} redirected to {target}, which is not HTTPS; not followed",
        )
    if target.host not in rules.allowed_hosts:
        raise UpdateTransportError(
            f"{rules.prefix}_redirect_refused",
            f"{response.url} redirected to host {target.host!r}, which is not one of the allowed hosts "
            f"({', '.join(sorted(rules.allowed_hosts))}); not followed",
        )
    return str(target)
