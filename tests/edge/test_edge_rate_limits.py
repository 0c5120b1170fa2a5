"""Rate limits of the Edge's open endpoints, against the real Worker under workerd
(tests/support/edge_harness.py; edge/README.md, "Rate limits"; docs/edge-protocol.md):

- per client address, on Cloudflare's Workers Rate Limiting binding (wrangler.jsonc: 60 requests
  per 60 s per route and address; under `wrangler dev` the binding counts in memory, in windows
  aligned to the minute): /register, /authorize, /token, /pair and /link/pair answer 429
  `rate_limited` with Retry-After once an address is over, in the error shape of the endpoint;
  other addresses are untouched. The address is the `CF-Connecting-IP` header Cloudflare sets;
  on loopback the tests set it, a different one per test;
- across all pairings and addresses, in the registry: at most N wrong pairing codes per window
  (20 an hour; this module's Edge sets N = 7 through PAIRING_WRONG_CODES_MAX), after which no
  code is checked until the oldest wrong one leaves the window.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import pytest

from tests.support.edge_harness import Edge, running_edge

pytestmark = pytest.mark.slow

#: wrangler.jsonc `ratelimits`: the binding's limit and period.
LIMIT = 60
PERIOD_S = 60
#: This module's cap on wrong pairing codes (the default is 20 per 3600 s).
WRONG_CODES_MAX = 7
WRONG_CODES_WINDOW_S = 3600

_addresses = itertools.count(1)


def fresh_address() -> str:
    """A client address no other request of this module used (TEST-NET-2, RFC 5737)."""
    number = next(_addresses)
    return f"198.51.{100 + number // 250}.{number % 250 + 1}"


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    variables = {"PAIRING_WRONG_CODES_MAX": str(WRONG_CODES_MAX)}
    with running_edge(tmp_path_factory.mktemp("edge-rate-limits"), extra_vars=variables) as running:
        yield running


@pytest.fixture
def clock(edge: Edge) -> Iterator[Edge]:
    """The registry clock back at real time after the test (the instance is shared)."""
    yield edge
    edge.shift_clock(0)


def _register(edge: Edge, address: str) -> httpx2.Response:
    return edge.post("/register", json={}, headers={"CF-Connecting-IP": address})


def _authorize(edge: Edge, address: str) -> httpx2.Response:
    return edge.get("/authorize?client_id=nobody", headers={"CF-Connecting-IP": address})


def _token(edge: Edge, address: str) -> httpx2.Response:
    return edge.post(
        "/token", data={"grant_type": "authorization_code"}, headers={"CF-Connecting-IP": address}
    )


def _pair(edge: Edge, address: str) -> httpx2.Response:
    return edge.get("/pair", headers={"CF-Connecting-IP": address, "Authorization": "Bearer wrong"})


def _link_pair(edge: Edge, address: str) -> httpx2.Response:
    return edge.post("/link/pair", json={"code": "x"}, headers={"CF-Connecting-IP": address})


ROUTES: dict[str, Callable[[Edge, str], httpx2.Response]] = {
    "register": _register,
    "authorize": _authorize,
    "token": _token,
    "pair": _pair,
    "link-pair": _link_pair,
}


def until_limited(send: Callable[[], httpx2.Response]) -> tuple[int, httpx2.Response]:
    """Send until the first 429: how many were answered before it, and the 429. A window may
    turn over during the run (windows are aligned to the minute), so up to two windows' worth."""
    for answered in range(2 * LIMIT + 1):
        answer = send()
        if answer.status_code == 429:
            return answered, answer
    raise AssertionError(f"no 429 after {2 * LIMIT + 1} requests")


@pytest.mark.parametrize("route", list(ROUTES))
def test_an_address_over_the_limit_is_answered_429_rate_limited(edge: Edge, route: str) -> None:
    send = ROUTES[route]
    address = fresh_address()
    answered, refused = until_limited(lambda: send(edge, address))
    assert LIMIT <= answered <= 2 * LIMIT
    assert refused.headers["retry-after"] == str(PERIOD_S)
    assert refused.headers["cache-control"] == "no-store"
    if route in ("register", "token"):
        # RFC 6749 error JSON, as OAuth clients read it.
        assert refused.json()["error"] == "rate_limited"
        assert "try again" in refused.json()["error_description"]
    elif route == "authorize":
        assert refused.headers["content-type"].startswith("text/html")
        assert refused.headers["x-error-code"] == "rate_limited"
    else:
        error = refused.json()["error"]
        assert error["code"] == "rate_limited" and "try again" in error["message"]
    # Another address, and the same address on another route, are counted apart.
    assert send(edge, fresh_address()).status_code != 429
    other_route = ROUTES["register" if route != "register" else "token"]
    assert other_route(edge, address).status_code != 429


def test_an_ipv6_client_is_counted_by_its_64(edge: Edge) -> None:
    """Every address of one /64 counts as one client; the next /64 is another."""
    addresses = itertools.cycle(
        ["2001:db8:7:1::1", "2001:db8:7:1:ffff:ffff:ffff:fffe", "2001:DB8:7:1:0:0:0:42"]
    )
    answered, _ = until_limited(lambda: _register(edge, next(addresses)))
    assert LIMIT <= answered <= 2 * LIMIT
    assert _register(edge, "2001:db8:7:2::1").status_code != 429


def test_a_real_connector_and_owner_stay_well_below_the_limits(edge: Edge) -> None:
    """A pairing and a connector's registration, authorization and token requests from one
    address: a handful of requests, answered as without limits."""
    address = {"CF-Connecting-IP": fresh_address()}
    ticket = edge.get("/pair", headers={**edge.admin_headers(), **address})
    assert ticket.status_code == 200
    paired = edge.post("/link/pair", json={"code": ticket.json()["code"], "name": "ws"}, headers=address)
    assert paired.status_code == 200, paired.text
    registered = edge.post(
        "/register",
        json={
            "client_name": "c",
            "redirect_uris": ["http://127.0.0.1:9/cb"],
            "token_endpoint_auth_method": "none",
        },
        headers=address,
    )
    assert registered.status_code == 201, registered.text


def _wrong(code: str) -> str:
    return f"{(int(code) + 1) % 1_000_000:06d}"


def _redeem(edge: Edge, code: str) -> httpx2.Response:
    """A pairing attempt from an address of its own: the cap counts across all of them."""
    return edge.post(
        "/link/pair", json={"code": code, "name": "ws"}, headers={"CF-Connecting-IP": fresh_address()}
    )


def test_wrong_codes_across_all_pairings_are_capped_per_window(clock: Edge) -> None:
    first = clock.start_pairing()["code"]
    for _ in range(5):
        assert _redeem(clock, _wrong(first)).json()["error"]["code"] == "pairing_code_wrong"
    assert _redeem(clock, first).json()["error"]["code"] == "pairing_locked"
    # A new pairing: its own five tries, but only two wrong codes are left in the window.
    second = clock.start_pairing()["code"]
    for _ in range(WRONG_CODES_MAX - 5):
        assert _redeem(clock, _wrong(second)).json()["error"]["code"] == "pairing_code_wrong"
    for guess in (_wrong(second), second):
        refused = _redeem(clock, guess)
        assert refused.status_code == 429
        error: dict[str, Any] = refused.json()["error"]
        assert error["code"] == "rate_limited" and "paused" in error["message"]
        assert 0 < int(refused.headers["retry-after"]) <= WRONG_CODES_WINDOW_S
    # Once the window has passed, pairing works again.
    clock.shift_clock(WRONG_CODES_WINDOW_S + 1)
    third = clock.start_pairing()["code"]
    assert _redeem(clock, _wrong(third)).json()["error"]["code"] == "pairing_code_wrong"
    assert _redeem(clock, third).status_code == 200
