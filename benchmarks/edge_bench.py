"""The Edge's cost, from one run: the latency a call through the public Edge adds over calling the
runtime directly, where that latency goes, and 200 concurrent calls through the relay.

The Edge is the real Worker under workerd (`wrangler dev --local`, tests/support/edge_harness.py) on
loopback. `wrangler dev` runs two workerd processes: its proxy worker on the public port (it holds
requests while the Worker reloads and forwards each with fetch() to the other one) and the Worker
itself, with its Durable Objects and KV, on a socket of its own. A deployed Worker has no such
proxy in front of it. So every Edge figure is taken at two entries of the same `wrangler dev`:

- "wrangler dev": the public port, as `wrangler dev` serves it; the client and the link both go
  through the proxy worker;
- "workerd": the Worker's own socket (found among the listening sockets of wrangler's process
  group: the one whose GET /health answers as the Edge's), sent the `MF-Original-URL` header that
  the proxy worker itself sets, so the Worker sees the public URL (the token is bound to
  `<public origin>/mcp`); a second workstation's link dials this socket.

Each entry has its own workstation: `herdr-mcp link` paired with it by `herdr-mcp link pair` (its
own device), its connector approved by `herdr-mcp connector approve`, as in use; both links serve
from runtime A. A call through the Edge goes client -> /mcp (Worker: the OAuth provider checks
the token) -> the device's Durable Object -> the link's WebSocket -> the link's router ->
runtime A, and back.

1. tools/call latency (p50/p95) of a cheap read-only tool (herdr_methods with a query matching
   nothing) sent directly to runtime A, through the link's local /mcp (the link's own share) and
   through the Edge at both entries, interleaved round by round, each over an `mcp` SDK
   Streamable HTTP session. Target: added p50 (Edge minus direct) <= 3 ms on loopback; it is
   printed for both entries.
2. Where the time goes: the same call as raw JSON-RPC POSTs from a minimal client (http.client,
   one keep-alive connection per target, so the client's own cost is small and alike), next to
   GET /health (the Worker answering by itself) and /mcp `ping` (the token check and the /mcp
   handler, no relay) at both entries, interleaved. The differences name each layer's share.
3. 200 tools/calls sent at once through the Edge under `wrangler dev` (one JSON-RPC POST each,
   200 connections); an error is a non-200 answer, a JSON-RPC error or a result with isError.
   Target: zero.

The 1-minute load average is printed before anything starts, once everything runs, and at the
end: on a loaded machine every hop (five processes on the Edge path under `wrangler dev`) waits
for a core, and the figures grow with the load. An edit under edge/src while this runs makes
`wrangler dev` rebuild the Worker on a new workerd and port: run it on a quiet tree.

Run from the repository root with the project installed: `python benchmarks/edge_bench.py`.
wrangler runs with the harness's OFFLINE_ENV, so nothing leaves loopback; to show it, run it as
`scripts/netns-run --trace /tmp/bench.trace python benchmarks/edge_bench.py` (a loopback-only
network namespace under strace; it lists anything off loopback and any DNS lookup).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from tests.support.edge_harness import Edge, running_edge
from tests.support.edge_relay_harness import Connector, begin_authorization, finish_authorization
from tests.support.link_harness import Link, generation_for, running_link
from tests.support.runtime_harness import RunningRuntime, two_runtimes
from tests.support.waiting import wait_until

from benchmarks.timing import interleaved, percentile
from herdr_mcp.generations import ControlFile, GenerationStore, Observation, activate

TOOL = "herdr_methods"
ARGUMENTS = {"query": "no-such-method"}
CLI = [sys.executable, "-m", "herdr_mcp"]
#: A loaded machine starts workerd and the link slowly; a broken one never gets there.
READY_S = 120.0
#: The header wrangler's proxy worker sets on what it forwards: the URL the Worker is to see.
ORIGINAL_URL = "MF-Original-URL"
#: The protocol revision the link speaks to a generation (one POST, no session), for the raw call.
RUNTIME_PROTOCOL = "2026-07-28"
TARGET_MS = 3.0


def _cli(*argv: str) -> dict[str, Any]:
    done = subprocess.run([*CLI, *argv, "--json"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"herdr-mcp {' '.join(argv)}: exit {done.returncode}: {done.stdout}{done.stderr}")
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def workerd_entry(edge: Edge) -> str:
    """The base URL of the Worker's own socket in `edge`'s `wrangler dev` (module docstring): a
    listening socket of a workerd in wrangler's process group, other than the public port, whose
    GET /health answers as the Edge's. Raises RuntimeError when there is none (another wrangler
    layout than 4.86.0's)."""
    public = int(edge.base.rsplit(":", 1)[1])
    expected = edge.get("/health").json()
    for process in Path("/proc").glob("[0-9]*"):
        try:
            argv = (process / "cmdline").read_bytes().split(b"\0")
            stat = (process / "stat").read_text()
        except OSError:
            continue
        process_group = int(stat[stat.rfind(")") + 2 :].split()[2])
        if process_group != edge.process_group or not argv[0].endswith(b"/workerd"):
            continue
        for port in _listening_ports(process):
            base = f"http://127.0.0.1:{port}"
            if port != public and _answers_as_edge(base, edge.base, expected):
                return base
    raise RuntimeError(f"no workerd socket of the Worker in wrangler's process group {edge.process_group}")


def _listening_ports(process: Path) -> list[int]:
    """The IPv4 TCP ports `process` listens on (its socket inodes matched in /proc/net/tcp)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in (process / "fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
    ports = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
            ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _answers_as_edge(base: str, public: str, expected: dict[str, Any]) -> bool:
    try:
        answer = httpx2.get(base + "/health", headers={ORIGINAL_URL: public + "/health"}, timeout=5)
        return answer.status_code == 200 and answer.json() == expected
    except (httpx2.HTTPError, ValueError):
        return False


class Entry:
    """One way into the Edge (module docstring) and the workstation whose link dials it."""

    def __init__(self, name: str, base: str, public: str, link: Link, connector: Connector) -> None:
        self.name = name
        self.base = base
        #: The public base URL, sent as MF-Original-URL when `base` is not it.
        self.original = None if base == public else public
        self.link = link
        self.connector = connector

    def headers(self, path: str) -> dict[str, str]:
        return {ORIGINAL_URL: self.original + path} if self.original is not None else {}


@contextlib.contextmanager
def workstation(
    config: Path, runtime: RunningRuntime, edge: Edge, dial: str
) -> Iterator[tuple[Link, Connector]]:
    """A workstation in `config` serving from `runtime`: `herdr-mcp link` paired with the Edge at
    `dial` (`herdr-mcp link pair`), connected, and a connector approved through it."""
    store = GenerationStore.in_dir(config / "generations")
    store.write_control(
        ControlFile(generations=(generation_for("A", runtime),), observation=Observation(2, 50)),
        expected_revision=0,
    )
    activate(store, "A")
    code = edge.start_pairing()["code"]
    _cli("link", "pair", "--edge", dial, "--code", code, "--config-dir", str(config))
    with running_link(store.state_dir, config / "link-token") as link:
        connected = lambda: link.health()["edge"]["state"] == "connected"  # noqa: E731 - polled
        wait_until(connected, "the link to connect to the Edge", READY_S)
        authorization = begin_authorization(edge)
        port = link.base.rsplit(":", 1)[1]
        _cli(
            "connector", "approve", authorization.request_id, "--code", authorization.code,
            "--config-dir", str(config), "--link-port", port,
        )  # fmt: skip
        yield link, finish_authorization(edge, authorization)


async def _call(client: Client) -> None:
    result = await client.call_tool(TOOL, ARGUMENTS)
    if result.is_error:
        raise RuntimeError(result.structured_content)


def _row(label: str, samples: list[float]) -> None:
    print(f"{label:<52}{statistics.median(samples):>9.2f}{percentile(samples, 0.95):>9.2f}")


async def _latency(direct: RunningRuntime, entries: list[Entry], calls: int) -> None:
    async with contextlib.AsyncExitStack() as stack:
        to_a = await stack.enter_async_context(direct.client())
        via_link = await stack.enter_async_context(entries[0].link.client())
        via_edge = []
        for entry in entries:
            headers = {"Authorization": f"Bearer {entry.connector.token}", **entry.headers("/mcp")}
            http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=60))
            session = Client(streamable_http_client(entry.base + "/mcp", http_client=http))
            via_edge.append(await stack.enter_async_context(session))
        # Warm-up: connections, the Worker's and the links' first calls.
        samples = await interleaved(
            [_caller(client) for client in (to_a, via_link, *via_edge)], calls, warmup=30
        )
    direct_ms, link_ms, *edge_ms = samples
    print(f"\n== tools/call {TOOL} over an mcp SDK session ({calls} calls each, interleaved, ms)")
    print(f"{'path':<52}{'p50':>9}{'p95':>9}")
    _row("directly to runtime A", direct_ms)
    _row("the link's local /mcp -> runtime A", link_ms)
    for entry, samples_ms in zip(entries, edge_ms, strict=True):
        _row(f"Edge ({entry.name}) -> DO -> link -> runtime A", samples_ms)
    for entry, samples_ms in zip(entries, edge_ms, strict=True):
        added = statistics.median(samples_ms) - statistics.median(direct_ms)
        verdict = "met" if added <= TARGET_MS else "not met"
        print(f"added p50 by the Edge ({entry.name}): {added:.2f} ms (target <= {TARGET_MS:g} ms: {verdict})")


def _caller(client: Client) -> Callable[[], Awaitable[None]]:
    return lambda: _call(client)


class Raw:
    """One keep-alive HTTP/1.1 connection (http.client): a client whose own cost is small and the
    same for every target, for the layer table."""

    def __init__(self, base: str, headers: dict[str, str], original: str | None = None) -> None:
        host, port = base.removeprefix("http://").rsplit(":", 1)
        self._connection = http.client.HTTPConnection(host, int(port), timeout=60)
        self._headers = headers
        self._original = original

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> None:
        """One request; raises RuntimeError unless it is answered 200 without an error."""
        headers = dict(self._headers)
        if self._original is not None:
            headers[ORIGINAL_URL] = self._original + path
        self._connection.request(method, path, None if body is None else json.dumps(body), headers)
        answer = self._connection.getresponse()
        data = answer.read()
        document = json.loads(data) if answer.status == 200 else {}
        if answer.status != 200 or "error" in document or document.get("result", {}).get("isError"):
            raise RuntimeError(f"{method} {path}: HTTP {answer.status}: {data[:300]!r}")

    def close(self) -> None:
        self._connection.close()


def _rpc(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}


def _layers(direct: RunningRuntime, entries: list[Entry], calls: int) -> None:
    """Section 2 of the module docstring."""
    call = _rpc("tools/call", {"name": TOOL, "arguments": ARGUMENTS})
    # What the link sends a generation for a tool_request (link/edge.py), with its own bearer.
    meta = {
        "io.modelcontextprotocol/protocolVersion": RUNTIME_PROTOCOL,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "edge-bench", "version": "0"},
    }
    runtime_call = _rpc("tools/call", {"name": TOOL, "arguments": ARGUMENTS, "_meta": meta})
    json_headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    runtime_headers = {"MCP-Protocol-Version": RUNTIME_PROTOCOL, "Mcp-Method": "tools/call", "Mcp-Name": TOOL}
    runtime = Raw(direct.base, {**json_headers, **runtime_headers, "Authorization": f"Bearer {direct.token}"})
    raws = [runtime]
    labelled: list[tuple[str, Callable[[], None]]] = [
        ("runtime A directly: tools/call", lambda: runtime.request("POST", "/mcp", runtime_call))
    ]
    for entry in entries:
        raw = Raw(
            entry.base, {**json_headers, "Authorization": f"Bearer {entry.connector.token}"}, entry.original
        )
        raws.append(raw)
        labelled += [
            (f"{entry.name}: GET /health", partial(raw.request, "GET", "/health")),
            (f"{entry.name}: /mcp ping", partial(raw.request, "POST", "/mcp", _rpc("ping"))),
            (f"{entry.name}: /mcp tools/call", partial(raw.request, "POST", "/mcp", call)),
        ]
    try:
        timed = interleaved([_blocking(run) for _, run in labelled], calls, warmup=30)
        samples = dict(zip((label for label, _ in labelled), asyncio.run(timed), strict=True))
    finally:
        for raw in raws:
            raw.close()
    p50 = {label: statistics.median(values) for label, values in samples.items()}
    print(f"\n== where the time goes: raw JSON-RPC POSTs from http.client ({calls} each, interleaved, ms)")
    print(f"{'request':<52}{'p50':>9}{'p95':>9}")
    for label, values in samples.items():
        _row(label, values)
    direct_ms = p50["runtime A directly: tools/call"]
    shares: list[tuple[str, Callable[[str], float]]] = [
        ("the Worker answering by itself (GET /health)", lambda n: p50[f"{n}: GET /health"]),
        (
            "token check and /mcp handler (ping - /health)",
            lambda n: p50[f"{n}: /mcp ping"] - p50[f"{n}: GET /health"],
        ),
        (
            "relay via DO and link, less runtime A's own time",
            lambda n: p50[f"{n}: /mcp tools/call"] - p50[f"{n}: /mcp ping"] - direct_ms,
        ),
        ("added p50 by the Edge (tools/call - direct)", lambda n: p50[f"{n}: /mcp tools/call"] - direct_ms),
    ]
    print(f"{'share, from the p50s above (ms)':<52}" + "".join(f"{entry.name:>14}" for entry in entries))
    for label, share in shares:
        print(f"{label:<52}" + "".join(f"{share(entry.name):>14.2f}" for entry in entries))


def _blocking(run: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    """`run` as the awaitable `interleaved` times (nothing else runs on the loop meanwhile)."""

    async def once() -> None:
        run()

    return once


async def _concurrent(connector: Connector, count: int) -> None:
    headers = {
        "Authorization": f"Bearer {connector.token}",
        "Accept": "application/json, text/event-stream",
    }
    limits = httpx2.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx2.AsyncClient(headers=headers, timeout=120, limits=limits) as http:

        async def one(request_id: int) -> str | None:
            message = {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": TOOL, "arguments": ARGUMENTS},
            }
            try:
                answer = await http.post(connector.edge.base + "/mcp", json=message)
            except httpx2.HTTPError as exc:
                return f"transport: {exc!r}"
            if answer.status_code != 200:
                return f"HTTP {answer.status_code}: {answer.text[:200]}"
            body = answer.json()
            if "error" in body or body["result"].get("isError"):
                return json.dumps(body)[:300]
            return None

        start = time.perf_counter()
        outcomes = await asyncio.gather(*(one(i) for i in range(1, count + 1)))
        took = time.perf_counter() - start
    errors = [outcome for outcome in outcomes if outcome is not None]
    print(f"\n== {count} concurrent tools/call {TOOL} through the Edge")
    print(f"errors {len(errors)} of {count} (target 0), all answered in {took * 1000:.0f} ms")
    for error in errors[:5]:
        print(f"  {error}")


def _load() -> str:
    return f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--concurrent", type=int, default=200)
    args = parser.parse_args()
    print(f"before anything starts: {_load()}")
    tmp = Path(tempfile.mkdtemp(prefix="hm-ebench-", dir="/tmp"))
    try:
        with two_runtimes(tmp) as (a, _b), running_edge(tmp / "edge") as edge:
            inner = workerd_entry(edge)
            with (
                workstation(tmp / "via-wrangler", a, edge, edge.base) as (link, connector),
                workstation(tmp / "via-workerd", a, edge, inner) as (inner_link, inner_connector),
            ):
                entries = [
                    Entry("wrangler dev", edge.base, edge.base, link, connector),
                    Entry("workerd", inner, edge.base, inner_link, inner_connector),
                ]
                print(f"Edge: wrangler dev at {edge.base}; the Worker's own workerd socket at {inner}")
                print(f"once the Edge and both links run: {_load()}")
                asyncio.run(_latency(a, entries, args.calls))
                _layers(a, entries, args.calls)
                asyncio.run(_concurrent(connector, args.concurrent))
                print(f"\nat the end: {_load()}")
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
