"""The Edge's cost, from one run: the latency a call through the public Edge adds over calling the
runtime directly, and 200 concurrent calls through the relay.

The Edge is the real Worker under workerd (`wrangler dev --local`, tests/edge_harness.py) on
loopback; `herdr-mcp link` is paired with it by `herdr-mcp link pair` and the connector approved
by `herdr-mcp connector approve`, as in use. A call through the Edge goes
client -> /mcp (Worker) -> the device's Durable Object -> the link's WebSocket -> the link's
router -> runtime A, and back.

1. tools/call latency (p50/p95) of a cheap read-only tool (herdr_methods with a query matching
   nothing) sent directly to runtime A, through the link's local /mcp (the link's own share) and
   through the Edge, interleaved round by round, each over an `mcp` SDK Streamable HTTP session.
   Target: added p50 (Edge minus direct) <= 3 ms on loopback. GET /health on the Edge is printed
   beside them: what wrangler dev and workerd cost a request before the Worker relays anything.
2. 200 tools/calls sent at once through the Edge (one JSON-RPC POST each, 200 connections); an
   error is a non-200 answer, a JSON-RPC error or a result with isError. Target: zero.

Run from the repository root with the project installed: `python benchmarks/edge_bench.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from tests.edge_harness import running_edge
from tests.edge_relay_harness import Connector, begin_authorization, finish_authorization
from tests.link_harness import Link, generation_for, running_link
from tests.runtime_harness import RunningRuntime, two_runtimes
from tests.waiting import wait_until

from herdr_mcp.generations import ControlFile, GenerationStore, Observation, activate

TOOL = "herdr_methods"
ARGUMENTS = {"query": "no-such-method"}
CLI = [sys.executable, "-m", "herdr_mcp"]
#: A loaded machine starts workerd and the link slowly; a broken one never gets there.
READY_S = 120.0


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _cli(*argv: str) -> dict[str, Any]:
    done = subprocess.run([*CLI, *argv, "--json"], capture_output=True, text=True, timeout=120, check=True)
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


async def _call(client: Client) -> float:
    start = time.perf_counter()
    result = await client.call_tool(TOOL, ARGUMENTS)
    if result.is_error:
        raise RuntimeError(result.structured_content)
    return (time.perf_counter() - start) * 1000


async def _latency(direct: RunningRuntime, link: Link, connector: Connector, calls: int) -> None:
    headers = {"Authorization": f"Bearer {connector.token}"}
    async with (
        direct.client() as to_a,
        link.client() as via_link,
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(connector.edge.base + "/mcp", http_client=http)) as via_edge,
    ):
        for _ in range(30):  # warm-up: connections, the Worker's and the link's first calls
            await _call(to_a)
            await _call(via_link)
            await _call(via_edge)
        direct_ms, link_ms, edge_ms = [], [], []
        for _ in range(calls):
            direct_ms.append(await _call(to_a))
            link_ms.append(await _call(via_link))
            edge_ms.append(await _call(via_edge))
        health_ms = []
        for _ in range(calls):  # the Worker under wrangler dev alone: no DO, no link
            start = time.perf_counter()
            (await http.get(connector.edge.base + "/health")).raise_for_status()
            health_ms.append((time.perf_counter() - start) * 1000)
    added = statistics.median(edge_ms) - statistics.median(direct_ms)
    print(f"\n== tools/call {TOOL} ({calls} calls each, interleaved, ms)")
    print(f"{'path':<40}{'p50':>9}{'p95':>9}")
    print(f"{'directly to runtime A':<40}{statistics.median(direct_ms):>9.2f}{_p(direct_ms, 0.95):>9.2f}")
    local = "the link's local /mcp -> runtime A"
    print(f"{local:<40}{statistics.median(link_ms):>9.2f}{_p(link_ms, 0.95):>9.2f}")
    edge_path = "Edge -> DO -> link -> runtime A"
    print(f"{edge_path:<40}{statistics.median(edge_ms):>9.2f}{_p(edge_ms, 0.95):>9.2f}")
    only = "GET /health on the Edge (Worker only)"
    print(f"{only:<40}{statistics.median(health_ms):>9.2f}{_p(health_ms, 0.95):>9.2f}")
    print(f"added p50 by the Edge                   {added:>9.2f}  (target <= 3 ms)")


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--concurrent", type=int, default=200)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hm-ebench-", dir="/tmp"))
    try:
        with two_runtimes(tmp) as (a, _b), running_edge(tmp / "edge") as edge:
            store = GenerationStore.in_dir(tmp / "generations")
            store.write_control(
                ControlFile(generations=(generation_for("A", a),), observation=Observation(2, 50)),
                expected_revision=0,
            )
            activate(store, "A")
            code = edge.start_pairing()["code"]
            _cli("link", "pair", "--edge", edge.base, "--code", code, "--config-dir", str(tmp))
            with running_link(store.state_dir, tmp / "link-token") as link:
                connected = lambda: link.health()["edge"]["state"] == "connected"  # noqa: E731 - polled
                wait_until(connected, "the link to connect to the Edge", READY_S)
                authorization = begin_authorization(edge)
                port = link.base.rsplit(":", 1)[1]
                approve = ("connector", "approve", authorization.request_id)
                _cli(*approve, "--config-dir", str(tmp), "--link-port", port)
                connector = finish_authorization(edge, authorization)
                asyncio.run(_latency(a, link, connector, args.calls))
                asyncio.run(_concurrent(connector, args.concurrent))
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
