"""proxies.proxy_for: the one rule for connections that leave the workstation (the updater's
downloads, pairing with the Edge, the link's WebSocket), and pairing through a real proxy."""

from __future__ import annotations

import pytest

from herdr_mcp.errors import LocalFault
from herdr_mcp.link.edge_device import pair
from herdr_mcp.proxies import is_loopback_host, no_proxy_exempts, proxy_for
from tests.support.logging_proxy import LoggingProxy, proxy_env

ENV = {"https": "http://proxy.corp:3128", "http": "proxy.corp:8080", "no": "internal.corp,.lan"}


@pytest.mark.parametrize(
    ("scheme", "host", "expected"),
    [
        ("https", "edge.example.com", "http://proxy.corp:3128"),
        ("wss", "edge.example.com", "http://proxy.corp:3128"),  # a WebSocket takes its TLS sibling's
        ("http", "edge.example.com", "http://proxy.corp:8080"),  # no scheme: http:// as curl reads it
        ("ws", "edge.example.com", "http://proxy.corp:8080"),
        ("https", "127.0.0.1", None),  # loopback never goes through a proxy
        ("https", "127.8.9.10", None),
        ("wss", "[::1]", None),
        ("https", "localhost", None),
        ("https", "internal.corp", None),  # NO_PROXY: the name and its subdomains
        ("https", "git.internal.corp", None),
        ("https", "box.lan", None),
        ("https", "notinternal.corp", "http://proxy.corp:3128"),
    ],
)
def test_which_proxy_a_connection_takes(scheme: str, host: str, expected: str | None) -> None:
    assert proxy_for(scheme, host, ENV) == expected


def test_all_proxy_is_the_fallback_and_nothing_set_means_direct() -> None:
    assert proxy_for("wss", "edge.example.com", {"all": "socks5://s:1080"}) == "socks5://s:1080"
    assert proxy_for("https", "edge.example.com", {}) is None
    assert proxy_for("https", "edge.example.com", {"https": "http://p:1", "no": "*"}) is None
    assert is_loopback_host("LOCALHOST") and not is_loopback_host("localhost.example.com")
    assert no_proxy_exempts("a.b.c", " .b.c ") and not no_proxy_exempts("ab.c", "b.c")


def test_pairing_goes_through_the_environment_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """`link pair` with an https Edge behind a proxy: the proxy is asked for a CONNECT tunnel to
    the Edge's host (the code and the answer travel inside it). The proxy here refuses, so the
    pairing fails as unreachable, and the attempt is what the proxy recorded."""
    with LoggingProxy("fail") as proxy:
        for name, value in proxy_env(proxy.url).items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        with pytest.raises(LocalFault) as refused:
            pair("https://edge.invalid", "123456", "test-host", timeout_s=10)
        assert refused.value.code == "edge_unreachable"
        assert [seen.request_line.split(" ")[:2] for seen in proxy.requests()] == [
            ["CONNECT", "edge.invalid:443"]
        ]
        assert "123456" not in repr(proxy.requests())
