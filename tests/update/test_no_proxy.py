"""Proxy variables: a bearer for a local service never reaches a proxy, the updater's downloads do.

A real recording proxy on loopback (tests/support/logging_proxy.py) is named in HTTP_PROXY, HTTPS_PROXY
and ALL_PROXY (and their lower-case forms). Clients to this machine's runtimes and link
(`herdr_mcp.local_http`, the test harness's MCP client) must send it nothing and work whether it
forwards, fails or is not there. The updater's transport goes through it to a host that is not
loopback (what a user behind a corporate proxy needs; here a name that only the proxy can reach,
tunnelled to the release repository simulator) and straight to loopback hosts. The activation
gate, the link and `generation activate` are covered in test_generation_gate.py and test_link.py;
`dev sync` and `dev rollback` in tests/dev/test_dev_plane.py (run with this proxy in every
proxy variable).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx2
import pytest

from herdr_mcp.local_http import local_async_client, local_client
from herdr_mcp.update.discovery import DiscoveryConfig, NoCandidate, discover
from herdr_mcp.update.errors import UpdateTransportError
from tests.support.logging_proxy import LoggingProxy, closed_port_url, proxy_env
from tests.support.repository_sim import Behavior, ReleaseRepositorySimulator
from tests.support.runtime_harness import RunningRuntime, make_repo, mcp_client, running_runtime
from tests.support.sim_helpers import short_tmp_dir

REPOSITORY = "herdr-mcp/herdr-mcp"
#: A name that resolves nowhere: only a proxy that tunnels it to the simulator can reach it.
FAR_HOST = "api.github.test"

PROXY_MODES = ["forward", "fail", "unreachable"]


@pytest.fixture
def proxy(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[LoggingProxy]:
    """A recording proxy named by every proxy variable of this process (mode: the param)."""
    mode = request.param
    with LoggingProxy("fail" if mode == "fail" else "forward") as running:
        for name, value in proxy_env(closed_port_url() if mode == "unreachable" else running.url).items():
            monkeypatch.setenv(name, value)
        yield running


def _config(sim: ReleaseRepositorySimulator) -> DiscoveryConfig:
    return DiscoveryConfig(
        repository=REPOSITORY, api_base_url=sim.api_base_url, allowed_hosts=sim.hosts, ca_file=sim.ca_file
    )


@pytest.mark.parametrize("proxy", PROXY_MODES, indirect=True)
def test_the_updater_never_sends_loopback_traffic_through_a_proxy(proxy: LoggingProxy) -> None:
    # Both loopback names the simulator answers under: 127.0.0.1 (the index) and, after a
    # redirect, localhost.
    with ReleaseRepositorySimulator(REPOSITORY) as sim:
        sim.api_behavior = Behavior(redirect_host=sim.download_host)
        assert isinstance(discover(_config(sim)), NoCandidate)
        assert {entry.host for entry in sim.log} == {"127.0.0.1", "localhost"}
    assert proxy.requests() == []


def test_the_updater_reaches_a_non_loopback_host_through_the_environments_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The index on a far host goes through HTTPS_PROXY (a CONNECT tunnel, TLS end to end against
    # the simulator's CA); its redirect to localhost goes straight there.
    with ReleaseRepositorySimulator(REPOSITORY, api_host=FAR_HOST) as sim:
        sim.api_behavior = Behavior(redirect_host=sim.download_host)
        with LoggingProxy("forward", tunnel_to=("127.0.0.1", sim.port)) as proxy:
            for name, value in proxy_env(proxy.url).items():
                monkeypatch.setenv(name, value)
            assert isinstance(discover(_config(sim)), NoCandidate)
            assert [seen.request_line for seen in proxy.requests()] == [
                f"CONNECT {FAR_HOST}:{sim.port} HTTP/1.1"
            ]
            assert all(seen.header("authorization") is None for seen in proxy.requests())
        assert [entry.host for entry in sim.log] == [FAR_HOST, "localhost"]


def test_the_updater_honours_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    with (
        ReleaseRepositorySimulator(REPOSITORY, api_host=FAR_HOST) as sim,
        LoggingProxy("forward", tunnel_to=("127.0.0.1", sim.port)) as proxy,
    ):
        for name, value in proxy_env(proxy.url).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("NO_PROXY", ".github.test")
        monkeypatch.setenv("no_proxy", "github.test")
        # Straight to a name that resolves nowhere: it cannot connect, and the proxy saw nothing.
        with pytest.raises(UpdateTransportError) as refused:
            discover(_config(sim))
        assert refused.value.code == "discovery_unreachable"
        assert proxy.requests() == []


@pytest.fixture(scope="module")
def runtime() -> Iterator[RunningRuntime]:
    """One real runtime (`herdr-mcp serve` on a loopback port) for the client tests."""
    from herdr_mcp.sim import SimConfig, SimulatorThread

    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", {"README.md": b"# demo\n"})
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"),
            running_runtime(tmp / "herdr.sock", tmp / "config") as started,
        ):
            yield started


@pytest.mark.parametrize("proxy", PROXY_MODES, indirect=True)
def test_local_clients_ignore_the_proxy_variables(proxy: LoggingProxy, runtime: RunningRuntime) -> None:
    headers = {"Authorization": f"Bearer {runtime.token}"}
    with local_client(timeout=10, headers=headers) as http:
        assert http.get(f"{runtime.base}/health").status_code == 200

    async def health() -> int:
        async with local_async_client(timeout=10, headers=headers) as http:
            return (await http.get(f"{runtime.base}/health")).status_code

    assert asyncio.run(health()) == 200
    assert proxy.requests() == []


@pytest.mark.parametrize("url", ["http://localhost:1/health", "http://192.0.2.1:80/", "https://example.com/"])
def test_local_clients_refuse_hosts_off_loopback_before_connecting(url: str) -> None:
    with LoggingProxy() as proxy:
        with local_client(timeout=10) as http, pytest.raises(httpx2.ConnectError, match="not a loopback"):
            http.get(url, headers={"Authorization": "Bearer secret"})
        assert proxy.requests() == []


@pytest.mark.parametrize("proxy", PROXY_MODES, indirect=True)
def test_the_harness_mcp_client_sends_the_bearer_to_no_proxy(
    proxy: LoggingProxy, runtime: RunningRuntime
) -> None:
    # The MCP SDK's Streamable HTTP client is handed a local client, so it builds none of its own.
    async def call() -> None:
        async with mcp_client(runtime.url, runtime.token) as client:
            assert len((await client.list_tools()).tools) == 18

    asyncio.run(call())
    assert proxy.requests() == []
