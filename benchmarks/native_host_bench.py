"""The native host's added latency per request: the same request sent directly on the runtime's
Unix socket and as a native messaging frame through `herdr-mcp native-host`, interleaved.

Both sides are driven by a raw client written for the benchmark, so the difference is the host's
own cost and not a client library's: directly, one keep-alive HTTP/1.1 connection on the socket
(benchmarks/raw_client.py's `RawHttp`, connected to the Unix socket, the bearer in the header);
through the host, a real `herdr-mcp native-host` subprocess with frames written to its stdin and
read from its stdout as Chrome does (a 4-byte native-endian length, then JSON). What the host does
for a request (its own HTTP client to the socket, the token read, the JSON and the framing) is all
on the host's side of the difference.

Against `herdr-mcp serve` on the Herdr simulator: `GET /push/state` (which asks Herdr) and `POST
/browser/binding.get` (which reads state.db). Against the runtime stand-in of
tests/support/native_host_harness.py (uvicorn on the socket): a reply of 1 MiB + 1 byte, which the
host sends as three chunk frames. Each of `--rounds` rounds (default 3) times `--count` requests
each way per kind; printed: each round's p50 both ways and the p50 added, and min/median/max of
the added p50 over the rounds, with the load average.

Run from the repository root with the project installed, under the shared lock:
`flock /tmp/herdr-bench.lock python benchmarks/native_host_bench.py [--record]`; `--record`
writes benchmarks/results/native_host_bench.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.native_host_harness import MIB, ORIGIN, short_config_dir, socket_of, stub_runtime
from tests.support.runtime_harness import make_repo, running_runtime

from benchmarks.raw_client import RawError, RawHttp, Spread, interleaved, load_text, percentile
from benchmarks.results import Row, record
from herdr_mcp.sim import SimConfig, SimulatorThread

LENGTH = struct.Struct("=I")
#: The runtime's answer to the SDK's Host check wants a loopback host with a port, as the host sends.
UDS_URL = "http://127.0.0.1:8772/"


class RawUnixHttp(RawHttp):
    """`RawHttp` on a Unix socket: the same request bytes and answer reading, another transport."""

    def __init__(self, socket_path: Path, token: str) -> None:
        super().__init__(UDS_URL, token)
        self.socket_path = socket_path

    async def connect(self, *, mcp: bool = False) -> RawUnixHttp:
        self._reader, self._writer = await asyncio.open_unix_connection(str(self.socket_path))
        return self


class HostClient:
    """The browser's side of one native host process: frames in, frames out."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.sent = 0

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.sent += 1
        request_id = f"b{self.sent}"
        payload = json.dumps({**message, "id": request_id}).encode()
        self.process.stdin.write(LENGTH.pack(len(payload)) + payload)
        await self.process.stdin.drain()
        pieces: list[str] = []
        while True:
            (length,) = LENGTH.unpack(await self.process.stdout.readexactly(LENGTH.size))
            frame = json.loads(await self.process.stdout.readexactly(length))
            if frame["id"] != request_id:
                raise RuntimeError(f"unexpected frame {frame}")
            if "chunk" not in frame:
                return dict(frame)
            pieces.append(frame["chunk"]["data"])
            if len(pieces) == frame["chunk"]["count"]:
                whole: dict[str, Any] = json.loads("".join(pieces))
                return whole


@dataclass(frozen=True)
class Request:
    """One request timed both ways."""

    what: str
    method: str
    path: str
    body: Any = None
    #: Requests each way per round, as a share of `--count` (the 1 MiB reply: a tenth).
    share: float = 1.0


@dataclass
class Figures:
    """One request's figures over the rounds: p50 directly, through the host, and added (ms)."""

    request: Request
    direct: list[float] = field(default_factory=list)
    host: list[float] = field(default_factory=list)

    @property
    def added(self) -> Spread:
        return Spread(tuple(host - direct for host, direct in zip(self.host, self.direct, strict=True)))


async def _measure(
    config: Path, token: str, requests: list[Request], count: int, warmup: int, rounds: int
) -> list[Figures]:
    """Time each request directly on `config`'s runtime socket and through a native host on it."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "herdr_mcp", "native-host", ORIGIN, "--config-dir", str(config),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=4 * MIB,
    )  # fmt: skip
    host = HostClient(process)
    direct_client = await RawUnixHttp(socket_of(config), token).connect()
    figures = [Figures(request) for request in requests]
    try:
        for round_index in range(rounds):
            for figure in figures:
                request = figure.request
                body = b"" if request.body is None else json.dumps(request.body).encode()

                async def direct(request: Request = request, body: bytes = body) -> None:
                    status, _, data = await direct_client.request(request.method, request.path, body)
                    if status != 200:
                        raise RawError(f"{request.what}: HTTP {status} {data[:200]!r}")

                async def through_host(request: Request = request) -> None:
                    message: dict[str, Any] = {"method": request.method, "path": request.path}
                    if request.body is not None:
                        message["body"] = request.body
                    reply = await host.request(message)
                    if reply.get("status") != 200:
                        raise RawError(f"{request.what}: {str(reply)[:200]}")

                calls: list[Callable[[], Awaitable[None]]] = [direct, through_host]
                times = max(10, int(count * request.share))
                direct_ms, host_ms = await interleaved(calls, times, warmup if round_index == 0 else 0)
                figure.direct.append(percentile(direct_ms, 0.5))
                figure.host.append(percentile(host_ms, 0.5))
                print(
                    f"round {round_index + 1}, {request.what} ({times} each way): directly p50 "
                    f"{figure.direct[-1]:.2f} ms, through the host p50 {figure.host[-1]:.2f} ms, "
                    f"added +{figure.host[-1] - figure.direct[-1]:.2f} ms; {load_text()}"
                )
    finally:
        await direct_client.close()
        assert process.stdin is not None
        process.stdin.close()
        await process.wait()
    return figures


async def _run(count: int, warmup: int, rounds: int) -> list[Figures]:
    figures: list[Figures] = []
    with short_config_dir() as base:
        repo = make_repo(base / "repo", {"README.md": b"# demo\n"})
        config = base / "config"
        with (
            SimulatorThread(SimConfig.for_roots([repo]), base / "herdr.sock"),
            running_runtime(base / "herdr.sock", config) as runtime,
        ):
            scope = {"scope": "chatgpt:conv:bench"}
            real = [
                Request("the runtime, GET /push/state", "GET", "/push/state"),
                Request("the runtime, POST /browser/binding.get", "POST", "/browser/binding.get", scope),
            ]
            figures += await _measure(config, runtime.token, real, count, warmup, rounds)
    with short_config_dir() as config, stub_runtime(config) as stub:
        empty = {"id": "b1", "status": 200, "body": {"pad": ""}}
        size = MIB + 1 - len(json.dumps(empty, separators=(",", ":")))
        large = [
            Request(
                "a stand-in answering 1 MiB + 1 byte (3 chunk frames)",
                "POST",
                "/browser/inbox.read",
                {"size": size},
                share=0.1,
            )
        ]
        figures += await _measure(config, stub.token, large, count, warmup, rounds)
    return figures


def report(figures: list[Figures], rounds: int) -> None:
    print(f"the native host's added p50 over {rounds} rounds; {load_text()}")
    for figure in figures:
        direct, host = Spread(tuple(figure.direct)), Spread(tuple(figure.host))
        print(f"  {figure.request.what}")
        print(f"    directly on the socket (raw HTTP/1.1): p50 {direct.text(unit=' ms')}")
        print(f"    through the native host (raw frames):  p50 {host.text(unit=' ms')}")
        print(f"    added by the host:                     p50 {figure.added.text(unit=' ms')}")


def write_record(figures: list[Figures], rounds: int, count: int, command: str) -> Path:
    rows = []
    for figure in figures:
        direct, host, added = Spread(tuple(figure.direct)), Spread(tuple(figure.host)), figure.added
        rows.append(
            Row(
                figure=f"a request through the native host: {figure.request.what} ({rounds} rounds)",
                measured=f"p50 {host.median:.2f} ms ({host.min:.2f}-{host.max:.2f})",
                floor=f"the same request on the Unix socket, raw HTTP/1.1: p50 {direct.median:.2f} ms",
                ratio=f"+{added.min:.2f}/+{added.median:.2f}/+{added.max:.2f} ms added",
            )
        )
    details: dict[str, Any] = {
        figure.request.what: {
            "direct_p50_ms": Spread(tuple(figure.direct)).to_json(),
            "host_p50_ms": Spread(tuple(figure.host)).to_json(),
            "added_p50_ms": figure.added.to_json(),
        }
        for figure in figures
    }
    details["count"] = {"requests_each_way_per_round": count}
    return record("native_host_bench", rows, command=command, details=details)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=300, help="requests each way per round (default 300)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed requests first (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument(
        "--record", action="store_true", help="write benchmarks/results/native_host_bench.json"
    )
    args = parser.parse_args()
    rounds = max(1, args.rounds)
    figures = asyncio.run(_run(args.count, args.warmup, rounds))
    report(figures, rounds)
    if args.record:
        command = f"python benchmarks/native_host_bench.py --count {args.count} --rounds {rounds}"
        print(f"recorded {write_record(figures, rounds, args.count, command)}")


if __name__ == "__main__":
    main()
