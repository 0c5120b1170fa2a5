"""The link's cost, from one run: the latency it adds over calling the generation directly, on its
local /mcp and on its Edge side, and the longest pause a request sees while the link's active
generation switches.

`herdr-mcp link` runs as in use (its own process, in front of runtime A; runtime B stands by), its
Edge side connected to a WebSocket stand-in of the Edge in this process (a device record written
for it, as `herdr-mcp link pair` would; the stand-in answers `hello` with `hello_ack` and sends the
frames the Edge's Durable Object sends, docs/edge-protocol.md). Every round (`--rounds`, 3 by
default) times, interleaved call by call so drift in load hits all alike, with the raw client
(benchmarks/raw_client.py: one keep-alive HTTP/1.1 connection per target):

1. tools/call of a cheap tool (herdr_methods with a query matching nothing) directly to
   generation A and through the link's local /mcp (both an MCP session). Target: link p50 /
   direct p50 <= 1.15.
2. The link's Edge side: a `tool_request` frame sent on the stand-in's WebSocket until its
   `tool_result` frame is read, next to the same call sent directly to A in the form the link
   sends it (2026-07-28: one POST, no session). Their difference is what the link's Edge side adds
   to every call relayed by the Edge (edge_bench.py measures the whole Edge path).

and, with fewer calls, section 1 over `mcp` SDK sessions (the figure this benchmark printed before
the raw client; the SDK's own cost is in both sides).

3. Once, after the rounds: a client calls through the link back to back while the active
   generation switches A -> B and back (each through the real activation gate, run as
   `herdr-mcp generation activate` / `rollback` processes); the longest call during the switches
   is printed next to the longest call of the same loop before them.

Run from the repository root with the project installed, under the benchmarks' lock:
`flock /tmp/herdr-bench.lock python benchmarks/link_bench.py [--record]` (`--record` writes
benchmarks/results/link_bench.json, the README's rows).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp import Client
from tests.support.link_harness import Link, generation_for, running_link
from tests.support.runtime_harness import RunningRuntime, two_runtimes
from websockets.asyncio.server import ServerConnection, serve

from benchmarks.raw_client import RawError, RawHttp, Spread, interleaved, load_text, percentile
from benchmarks.results import Row, record
from herdr_mcp.generations import ControlFile, GenerationStore, Observation, activate
from herdr_mcp.layout import Layout
from herdr_mcp.link.edge_device import EdgeDevice, write_device

TOOL = "herdr_methods"
ARGUMENTS = {"query": "no-such-method"}
RUNTIME_PROTOCOL = "2026-07-28"
TARGET_RATIO = 1.15
#: How long the stand-in waits for the link to dial it and say hello.
CONNECT_S = 60.0
DEVICE_ID = "dev_linkbench"
DEVICE_SECRET = "b" * 43
DIRECT, VIA_LINK = "directly to A", "through the link's /mcp"
LINKFORM, EDGE_SIDE = "directly to A, the link's form", "the link's Edge side"


class StandInEdge:
    """The Edge's side of the link protocol, as little as the benchmark needs: `hello_ack` to the
    link's `hello`, then `call()` sends a `tool_request` and awaits its `tool_result`."""

    def __init__(self) -> None:
        self.port = 0
        self._connected = asyncio.Event()
        self._ws: ServerConnection | None = None
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._server: Any = None

    async def start(self) -> StandInEdge:
        self._server = await serve(self._serve, "127.0.0.1", 0, compression=None, max_size=None)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, ws: ServerConnection) -> None:
        hello = json.loads(await ws.recv())
        if hello.get("type") != "hello":
            await ws.close(1008, "expected hello")
            return
        ack = {
            "type": "hello_ack",
            "protocol": 1,
            "connection_id": "bench",
            "heartbeat_s": 30,
            "silence_limit_s": 90,
            "max_frame_bytes": 262_144,
        }
        await ws.send(json.dumps(ack))
        self._ws = ws
        self._connected.set()
        async for text in ws:
            frame = json.loads(text)
            waiting = self._pending.pop(frame.get("id", ""), None)
            if waiting is not None and not waiting.done():
                waiting.set_result(frame)

    async def connected(self) -> None:
        await asyncio.wait_for(self._connected.wait(), CONNECT_S)

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """One relayed call, as the Durable Object sends it; its result (RawError on anything else)."""
        assert self._ws is not None
        request_id = f"call-{next(self._ids)}"
        answered: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = answered
        frame = {
            "type": "tool_request",
            "id": request_id,
            "tool": tool,
            "arguments": arguments,
            "deadline_ms": 60_000,
        }
        await self._ws.send(json.dumps(frame))
        answer = await answered
        if answer.get("type") != "tool_result" or answer["result"].get("isError"):
            raise RawError(f"the link answered {json.dumps(answer)[:300]}")
        result: dict[str, Any] = answer["result"]
        return result

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


class RoutedRaw(RawHttp):
    """The raw client sending a 2026-07-28 request's routing headers (no session)."""

    def _head(self, method: str, path: str, length: int) -> bytes:
        routing = (
            f"MCP-Protocol-Version: {RUNTIME_PROTOCOL}\r\nMcp-Method: tools/call\r\nMcp-Name: {TOOL}\r\n"
        )
        return super()._head(method, path, length)[:-2] + routing.encode() + b"\r\n"


def _linkform_body() -> bytes:
    """What the link sends a generation for a tool_request (link/edge.py)."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": RUNTIME_PROTOCOL,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "link-bench", "version": "0"},
    }
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": TOOL, "arguments": ARGUMENTS, "_meta": meta},
    }
    return json.dumps(message).encode()


async def _post_ok(raw: RawHttp, body: bytes) -> None:
    status, _, data = await raw.request("POST", raw.path, body)
    answer = json.loads(data) if status == 200 else {}
    if status != 200 or "error" in answer or answer.get("result", {}).get("isError"):
        raise RawError(f"HTTP {status}: {data[:300]!r}")


@dataclass
class RoundResult:
    p50: dict[str, float]
    p95: dict[str, float]
    load: str
    sdk: dict[str, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.p50[VIA_LINK] / self.p50[DIRECT]

    @property
    def edge_side(self) -> float:
        return self.p50[EDGE_SIDE] - self.p50[LINKFORM]


async def _raw_round(
    direct: RunningRuntime, link: Link, edge: StandInEdge, calls: int, warmup: int
) -> RoundResult:
    connections: list[RawHttp] = []
    try:
        to_a = await RawHttp(direct.url, direct.token).connect()
        connections.append(to_a)
        via_link = await RawHttp(link.url, link.token).connect()
        connections.append(via_link)
        linkform = await RoutedRaw(direct.url, direct.token).connect(mcp=False)
        connections.append(linkform)
        body = _linkform_body()
        labelled: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            (DIRECT, lambda: to_a.call_tool(TOOL, ARGUMENTS)),
            (VIA_LINK, lambda: via_link.call_tool(TOOL, ARGUMENTS)),
            (LINKFORM, lambda: _post_ok(linkform, body)),
            (EDGE_SIDE, lambda: edge.call(TOOL, ARGUMENTS)),
        ]
        samples = await interleaved([call for _, call in labelled], calls, warmup)
    finally:
        for raw in connections:
            await raw.close()
    labels = [label for label, _ in labelled]
    return RoundResult(
        {label: statistics.median(values) for label, values in zip(labels, samples, strict=True)},
        {label: percentile(values, 0.95) for label, values in zip(labels, samples, strict=True)},
        load_text(),
    )


async def _sdk_round(direct: RunningRuntime, link: Link, calls: int, warmup: int) -> dict[str, float]:
    async with direct.client() as to_a, link.client() as via_link:
        samples = await interleaved([_sdk_caller(to_a), _sdk_caller(via_link)], calls, warmup)
    return {"direct": statistics.median(samples[0]), "link": statistics.median(samples[1])}


def _sdk_caller(client: Client) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        result = await client.call_tool(TOOL, ARGUMENTS)
        if result.is_error:
            raise RuntimeError(result.structured_content)

    return call


async def _rounds(
    direct: RunningRuntime, link: Link, args: argparse.Namespace, edge: StandInEdge
) -> list[RoundResult]:
    await edge.connected()
    results = []
    for index in range(1, args.rounds + 1):
        result = await _raw_round(direct, link, edge, args.calls, warmup=30)
        result.sdk = await _sdk_round(direct, link, args.sdk_calls, warmup=20)
        print(f"\n== round {index}: raw client, interleaved (ms); {result.load}")
        print(f"{'path':<34}{'p50':>9}{'p95':>9}")
        for label, p50 in result.p50.items():
            print(f"{label:<34}{p50:>9.2f}{result.p95[label]:>9.2f}")
        print(f"ratio link /mcp / direct {result.ratio:.3f} (target <= {TARGET_RATIO}); "
              f"the link's Edge side adds {result.edge_side:.2f} ms")  # fmt: skip
        sdk = result.sdk
        print(f"mcp SDK sessions: direct {sdk['direct']:.2f}, through the link {sdk['link']:.2f} ms, "
              f"ratio {sdk['link'] / sdk['direct']:.3f}")  # fmt: skip
        results.append(result)
    return results


async def _measure(
    direct: RunningRuntime, link_of: Callable[[int], Any], args: argparse.Namespace
) -> list[RoundResult]:
    edge = await StandInEdge().start()
    try:
        with link_of(edge.port) as link:
            return await _rounds(direct, link, args, edge)
    finally:
        await edge.close()


async def _pauses(link: Link, store: GenerationStore, switches: int) -> tuple[float, float, float, int]:
    raw = await RawHttp(link.url, link.token).connect()

    async def call() -> float:
        start = time.perf_counter()
        await raw.call_tool(TOOL, ARGUMENTS)
        return (time.perf_counter() - start) * 1000

    try:
        before = [await call() for _ in range(200)]
        done = threading.Event()

        def switch() -> None:
            # As in use: `herdr-mcp generation activate|rollback` run as their own processes (a
            # gate in this process would hold the GIL the measuring client needs).
            command = [sys.executable, "-m", "herdr_mcp", "generation", "--state-dir", str(store.state_dir)]
            try:
                for _ in range(switches):
                    for step in (["activate", "B"], ["rollback"]):
                        subprocess.run([*command, *step], check=True, capture_output=True, timeout=60)
            finally:
                done.set()

        thread = threading.Thread(target=switch)
        thread.start()
        during = []
        while not done.is_set():
            during.append(await call())
        thread.join()
    finally:
        await raw.close()
    print(f"\n== calls through the link while the active generation switched {2 * switches} times")
    print(f"longest call before the switches  {max(before):>8.2f} ms  (p50 {statistics.median(before):.2f})")
    print(f"longest call during the switches  {max(during):>8.2f} ms  ({len(during)} calls, none failed)")
    return max(before), statistics.median(before), max(during), len(during)


def _rows(rounds: list[RoundResult], pauses: tuple[float, float, float, int], switches: int) -> list[Row]:
    def spread(values: list[float]) -> Spread:
        return Spread(tuple(values))

    def p50(label: str) -> float:
        return statistics.median(r.p50[label] for r in rounds)

    ratio = spread([r.ratio for r in rounds])
    sdk_ratio = spread([r.sdk["link"] / r.sdk["direct"] for r in rounds])
    edge_side = spread([r.edge_side for r in rounds])
    longest_before, p50_before, longest_during, count = pauses
    return [
        Row(
            figure="tools/call p50 through the link's local /mcp, raw client (herdr_methods)",
            measured=f"p50 {p50(VIA_LINK):.2f} ms",
            floor=f"generation directly, raw client: p50 {p50(DIRECT):.2f} ms",
            ratio=ratio.text(3),
            target=f"<= {TARGET_RATIO}",
            met=ratio.median <= TARGET_RATIO,
        ),
        Row(
            figure="the same with the mcp SDK client on both sides",
            measured=f"p50 {statistics.median(r.sdk['link'] for r in rounds):.2f} ms",
            floor=f"generation directly: p50 {statistics.median(r.sdk['direct'] for r in rounds):.2f} ms",
            ratio=sdk_ratio.text(3),
            target=f"<= {TARGET_RATIO}",
            met=sdk_ratio.median <= TARGET_RATIO,
        ),
        Row(
            figure="the link's Edge side: tool_request -> tool_result on its WebSocket (an Edge stand-in)",
            measured=f"p50 {p50(EDGE_SIDE):.2f} ms",
            floor=f"the same call in the link's form, directly: p50 {p50(LINKFORM):.2f} ms",
            ratio=f"+{edge_side.text(2, ' ms')}",
            target="",
            met=None,
        ),
        Row(
            figure=f"longest call through the link while the active generation switched {2 * switches} times",
            measured=f"{longest_during:.1f} ms over {count} calls, none failed",
            floor=f"longest of 200 calls before: {longest_before:.1f} ms (p50 {p50_before:.2f} ms)",
            ratio="",
            target="",
            met=None,
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=500, help="raw calls per target per round")
    parser.add_argument("--sdk-calls", type=int, default=200, help="SDK calls per target per round")
    parser.add_argument("--switches", type=int, default=3)
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/link_bench.json")
    args = parser.parse_args()
    print(f"before anything starts: {load_text()}")
    tmp = Path(tempfile.mkdtemp(prefix="hm-lbench-", dir="/tmp"))
    try:
        with two_runtimes(tmp) as (a, b):
            store = GenerationStore.in_dir(tmp / "generations")
            store.write_control(
                ControlFile(
                    generations=(generation_for("A", a), generation_for("B", b)),
                    observation=Observation(2, 50),
                ),
                expected_revision=0,
            )
            activate(store, "A")

            @contextlib.contextmanager
            def link_of(port: int) -> Iterator[Link]:
                device = EdgeDevice(
                    f"http://127.0.0.1:{port}", DEVICE_ID, DEVICE_SECRET, "bench", "2026-12-01T00:00:00Z"
                )
                device_file = Layout(store.state_dir.parent).edge_device_file
                write_device(device_file, device)
                try:
                    with running_link(store.state_dir, tmp / "link-token") as link:
                        yield link
                finally:
                    device_file.unlink()  # the pauses below are the local path's

            rounds = asyncio.run(_measure(a, link_of, args))
            with running_link(store.state_dir, tmp / "link-token") as link:
                pauses = asyncio.run(_pauses(link, store, args.switches))
        _summary(rounds)
        print(f"\nat the end: {load_text()}")
        if args.record:
            details = {
                "rounds": [
                    {"p50_ms": r.p50, "p95_ms": r.p95, "sdk_p50_ms": r.sdk, "load": r.load} for r in rounds
                ],
                "calls": args.calls,
                "sdk_calls": args.sdk_calls,
            }
            rows = _rows(rounds, pauses, args.switches)
            path = record(
                "link_bench", rows, command="python benchmarks/link_bench.py --record", details=details
            )
            print(f"recorded {path}")
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
    return 0


def _summary(rounds: list[RoundResult]) -> None:
    print(f"\n== over {len(rounds)} rounds (min/median/max)")
    ratio = Spread(tuple(r.ratio for r in rounds))
    verdict = "met" if ratio.median <= TARGET_RATIO else "not met"
    print(f"ratio link /mcp / direct, raw client  {ratio.text(3)} (target <= {TARGET_RATIO}: {verdict})")
    sdk = Spread(tuple(r.sdk["link"] / r.sdk["direct"] for r in rounds))
    print(f"ratio link /mcp / direct, mcp SDK     {sdk.text(3)}")
    print(
        f"the link's Edge side adds             +{Spread(tuple(r.edge_side for r in rounds)).text(2, ' ms')}"
    )


if __name__ == "__main__":
    sys.exit(main())
