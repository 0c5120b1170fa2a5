"""Which proxy, if any, a connection to a host outside this machine goes through.

One rule for every client of herdr-mcp that leaves the workstation (the updater's downloads, the
link's WebSocket to the Edge and its pairing request): the proxy the environment names for the
scheme (`HTTPS_PROXY` for https and wss, `HTTP_PROXY` for http and ws, else `ALL_PROXY`; the
lower-case forms win, as urllib reads them), unless `NO_PROXY` exempts the host. A loopback host
(127.0.0.0/8, ::1, `localhost`) never goes through a proxy, whatever the environment says: the
tests' and the runtime's own loopback traffic must not leave the machine. Clients that talk only
to this machine's services do not ask (`local_http` takes no proxy at all).

A proxy given without a scheme (`HTTPS_PROXY=proxy:3128`) means `http://proxy:3128`, as curl and
httpx read it.
"""

from __future__ import annotations

import ipaddress
import urllib.request
from collections.abc import Mapping

__all__ = ["is_loopback_host", "no_proxy_exempts", "proxy_for"]

#: The proxy variable a scheme reads (WebSockets take their TLS sibling's).
_SCHEME_PROXY = {"https": "https", "wss": "https", "http": "http", "ws": "http"}


def proxy_for(scheme: str, host: str, proxies: Mapping[str, str] | None = None) -> str | None:
    """The proxy URL for a connection to `host` over `scheme`, or None to go direct.

    `proxies` is urllib's reading of the environment (scheme -> proxy URL, "no" -> the
    `NO_PROXY` list); by default the environment is read now.
    """
    if proxies is None:
        proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(_SCHEME_PROXY.get(scheme.lower(), scheme.lower())) or proxies.get("all")
    if not proxy or is_loopback_host(host) or no_proxy_exempts(host, proxies.get("no", "")):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def is_loopback_host(host: str) -> bool:
    """`localhost`, or an address in 127.0.0.0/8 or ::1 (brackets allowed)."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def no_proxy_exempts(host: str, no_proxy: str) -> bool:
    """Whether `NO_PROXY` (as curl and urllib read it: `*`, or names that match themselves and
    their subdomains, a leading dot ignored) exempts `host`."""
    host = host.strip("[]").lower()
    for entry in no_proxy.split(","):
        name = entry.strip().lstrip(".").lower()
        if name == "*" or (name and (host == name or host.endswith(f".{name}"))):
            return True
    return False
