"""Runtime figures, each next to its floor measured in the same run, over repeated rounds.

1. tools/call over Streamable HTTP (uvicorn, loopback, bearer, JSON answers) of herdr_fs_read
   (a 4 KiB file) and herdr_fs_list (a directory of 40 entries) through `herdr-mcp serve`,
   against the floor: the bare `mcp` SDK serving one echo tool with a 4 KiB argument
   (`benchmarks/echo_server.py`). Both sides are driven by one raw client
   (`benchmarks/raw_client.py`: keep-alive HTTP/1.1, each request's bytes written once, the answer
   read by its Content-Length), so the ratio is the servers' and not a client's. Figures: p50 at
   1 client (the three calls interleaved, so drift in load hits all alike); calls/s and p50 with
   32 clients (and 128, for information), each client its own connection and MCP session, calling
   in a loop for `--seconds` in all, in slices taken in turn with the echo's (load drift hits
   both alike). Targets: fs_read and fs_list <= 1.3x the echo at 1 and 32 clients,
   p50 and throughput (the throughput ratio is the echo's calls/s over ours). The p50 with the
   `mcp` SDK's client on both sides is printed beside it (the figure the benchmark used to give).
2. herdr_fs_grep over a generated tree of `--files` files against `rg` run directly with the
   flags the tool passes it (`runtime/grep/rg.py` builds both commands). Target <= 1.5.
3. The runtime's resident memory after warm-up and after 2,000 more calls. Target growth < 10%.

Every figure is measured in each of `--rounds` rounds and printed min/median/max with the load
average; a target counts as met when the median round meets it. `--record` writes
benchmarks/results/runtime_bench.json (`benchmarks.results.record`).

Run from the repository root with the project installed: `python benchmarks/runtime_bench.py`
(under `flock /tmp/herdr-bench.lock` on a shared machine). Exits 0 (figures, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.runtime_harness import make_repo, running_runtime

from benchmarks.raw_client import RawHttp, Spread, interleaved, load_text, throughput
from benchmarks.results import Row, record
from herdr_mcp.local_http import local_async_client
from herdr_mcp.runtime.boundary import RootCandidate, RootSet
from herdr_mcp.runtime.grep.query import GrepQuery
from herdr_mcp.runtime.grep.rg import _rg_command
from herdr_mcp.sim import SimConfig, SimulatorThread

NEEDLE = "needle_7f3a"
TARGET = 1.3
GREP_TARGET = 1.5
MEMORY_TARGET_PCT = 10.0
MEMORY_CALLS = 2000
LIST_ENTRIES = 40
COMMAND = "python benchmarks/runtime_bench.py"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _tree(root: Path, files: int) -> None:
    per_dir = 100
    for index in range(files):
        directory = root / f"d{index // per_dir:04d}"
        if index % per_dir == 0:
            directory.mkdir(parents=True)
        body = "".join(f"line {n} of file {index} with some ordinary words\n" for n in range(12))
        if index % 200 == 0:
            body += f"the {NEEDLE} is here\n"
        (directory / f"f{index:05d}.txt").write_text(body)


@dataclass(frozen=True)
class Target:
    """One server under test: where it listens and what call is timed on it."""

    label: str
    url: str
    token: str
    tool: str
    arguments: dict[str, Any]


@contextlib.asynccontextmanager
async def raw_clients(target: Target, count: int) -> AsyncIterator[list[RawHttp]]:
    """`count` raw connections with an MCP session each (opened per phase: uvicorn closes a
    connection idle for 5 s)."""
    clients = [await RawHttp(target.url, target.token).connect() for _ in range(count)]
    try:
        yield clients
    finally:
        for client in clients:
            await client.close()


def _caller(client: RawHttp, target: Target) -> Callable[[], Awaitable[Any]]:
    return lambda: client.call_tool(target.tool, target.arguments)


@contextlib.asynccontextmanager
async def sdk_client(url: str, token: str) -> AsyncIterator[Client]:
    async with (
        local_async_client(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def _sdk_caller(client: Client, target: Target) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        result = await client.call_tool(target.tool, target.arguments)
        if result.is_error:
            raise RuntimeError(f"{target.tool} failed: {result.structured_content}")

    return call


@dataclass
class Figures:
    """Every figure of one server, one value per round."""

    p50_1: list[float]
    sdk_p50_1: list[float]
    per_second: dict[int, list[float]]
    p50_n: dict[int, list[float]]


async def _serial(targets: Sequence[Target], calls: int, figures: Sequence[Figures]) -> None:
    async with contextlib.AsyncExitStack() as stack:
        callers = []
        for target in targets:
            (client,) = await stack.enter_async_context(raw_clients(target, 1))
            callers.append(_caller(client, target))
        samples = await interleaved(callers, calls, warmup=30)
    for bucket, figure in zip(samples, figures, strict=True):
        figure.p50_1.append(statistics.median(bucket))


async def _serial_sdk(targets: Sequence[Target], calls: int, figures: Sequence[Figures]) -> None:
    async with contextlib.AsyncExitStack() as stack:
        callers = []
        for target in targets:
            client = await stack.enter_async_context(sdk_client(target.url, target.token))
            callers.append(_sdk_caller(client, target))
        samples = await interleaved(callers, calls, warmup=20)
    for bucket, figure in zip(samples, figures, strict=True):
        figure.sdk_p50_1.append(statistics.median(bucket))


#: Each throughput figure is measured in this many slices, the targets' slices in turn (echo,
#: fs_read, fs_list, echo, ...), so drift in the machine's load hits all three alike.
SLICES = 3


async def _loaded(
    targets: Sequence[Target], clients: int, seconds: float, figures: Sequence[Figures]
) -> None:
    """calls/s and p50 of each target with `clients` connections calling in a loop: `seconds`
    in all, in SLICES slices taken in turn; the first calls of each slice are warm-up."""
    calls = [0] * len(targets)
    spent = [0.0] * len(targets)
    latencies: list[list[float]] = [[] for _ in targets]
    async with contextlib.AsyncExitStack() as stack:
        pools = [await stack.enter_async_context(raw_clients(target, clients)) for target in targets]
        for _ in range(SLICES):
            for index, (target, pool) in enumerate(zip(targets, pools, strict=True)):
                result = await throughput([_caller(c, target) for c in pool], seconds / SLICES, warmup_s=0.2)
                calls[index] += result.calls
                spent[index] += result.seconds
                latencies[index].append(result.p50_ms)
    for index, figure in enumerate(figures):
        figure.per_second.setdefault(clients, []).append(calls[index] / spent[index])
        # The slices are of equal length: the p50 of the figure is the median of theirs.
        figure.p50_n.setdefault(clients, []).append(statistics.median(latencies[index]))


def _rg_direct_command(repo: Path, tree: Path, max_matches: int) -> list[str]:
    """rg with the flags herdr_fs_grep passes it (`runtime/grep/rg.py`), on the same tree."""
    rg = shutil.which("rg")
    if rg is None:
        raise RuntimeError("ripgrep (rg) is needed for the floor: apt-get install ripgrep")
    roots = RootSet.build([RootCandidate(repo, "managed")], home=Path("/nonexistent-home"))
    root = roots.roots[0]
    target = roots.resolve(str(tree), for_write=False)
    query = GrepQuery(
        root=root,
        target=target,
        base=target.relative,
        pattern=NEEDLE,
        regex=False,
        case_insensitive=False,
        glob=None,
    )
    # The tool's first run is this unsorted one; it runs again with `--sort path` only when the
    # caps cut the answer short, which 100 matches under max_matches 1000 never do.
    return _rg_command(rg, query, max_matches, sort=False)


async def _grep(
    runtime: RawHttp, arguments: dict[str, Any], command: list[str], cwd: Path, runs: int
) -> tuple[float, float]:
    await runtime.call_tool("herdr_fs_grep", arguments)
    subprocess.run(command, check=True, capture_output=True, cwd=cwd)
    tool, direct = [], []
    for _ in range(runs):
        start = time.perf_counter()
        await runtime.call_tool("herdr_fs_grep", arguments)
        tool.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, cwd=cwd)
        direct.append((time.perf_counter() - start) * 1000)
    return statistics.median(tool), statistics.median(direct)


def _ratio_text(values: Sequence[float]) -> str:
    spread = Spread(tuple(values))
    return f"{spread.min:.2f}/{spread.median:.2f}/{spread.max:.2f}"


async def measure(
    args: argparse.Namespace, echo: Target, read: Target, listing: Target, pid: int, repo: Path
) -> int:
    targets = (echo, read, listing)
    figures = [Figures([], [], {}, {}) for _ in targets]
    grep_tool: list[float] = []
    grep_rg: list[float] = []
    root = str(repo.resolve())
    grep_args = {"root": root, "pattern": NEEDLE, "path": f"{root}/tree", "max_matches": 1000}
    rg_command = _rg_direct_command(repo.resolve(), repo.resolve() / "tree", 1000)
    print(f"rg floor: {' '.join(rg_command)}")

    # Memory: after warm-up, then after 2,000 more calls (fs_read and fs_list in turn).
    async with raw_clients(read, 1) as (client,):
        for _ in range(100):
            await client.call_tool(read.tool, read.arguments)
            await client.call_tool(listing.tool, listing.arguments)
        idle_rss = _rss_kib(pid)
        for index in range(MEMORY_CALLS):
            target = read if index % 2 else listing
            await client.call_tool(target.tool, target.arguments)
        after_rss = _rss_kib(pid)
    growth = (after_rss - idle_rss) / idle_rss * 100

    loads: list[str] = []
    for round_index in range(args.rounds):
        print(f"round {round_index + 1}/{args.rounds}: {load_text()}", flush=True)
        loads.append(load_text())
        await _serial(targets, args.calls, figures)
        await _serial_sdk(targets, args.sdk_calls, figures)
        for clients in args.clients:
            await _loaded(targets, clients, args.seconds, figures)
        async with raw_clients(read, 1) as (client,):
            tool_ms, rg_ms = await _grep(client, grep_args, rg_command, repo.resolve(), args.grep_runs)
        grep_tool.append(tool_ms)
        grep_rg.append(rg_ms)
    loads.append(load_text())

    echo_figures = figures[0]
    rows: list[Row] = []
    print(f"\n== tools/call over Streamable HTTP, raw client; {args.rounds} rounds, min/median/max")
    print(f"{'figure':<34}{'echo (floor)':>28}{'herdr_fs_read 4 KiB':>28}{'herdr_fs_list 40':>28}")

    def line(name: str, values: Sequence[Sequence[float]], digits: int = 2, unit: str = "") -> None:
        cells = "".join(f"{Spread(tuple(v)).text(digits, unit).split(' (')[0]:>28}" for v in values)
        print(f"{name:<34}{cells}")

    line("p50, 1 client (ms)", [f.p50_1 for f in figures])
    line("p50, 1 client, SDK client (ms)", [f.sdk_p50_1 for f in figures])
    for clients in args.clients:
        line(f"calls/s, {clients} clients", [f.per_second[clients] for f in figures], 0)
        line(f"p50, {clients} clients (ms)", [f.p50_n[clients] for f in figures])

    print("\nratios to the echo floor (min/median/max over rounds; throughput: echo calls/s / ours)")
    for target, figure in zip(targets[1:], figures[1:], strict=True):
        name = target.tool
        p50_ratio = [ours / floor for ours, floor in zip(figure.p50_1, echo_figures.p50_1, strict=True)]
        sdk_ratio = [
            ours / floor for ours, floor in zip(figure.sdk_p50_1, echo_figures.sdk_p50_1, strict=True)
        ]
        print(f"  {name} p50 1 client: {_ratio_text(p50_ratio)}   (SDK client: {_ratio_text(sdk_ratio)})")
        rows.append(
            Row(
                f"{name} ({target.label}) p50, 1 client, raw client",
                f"p50 {statistics.median(figure.p50_1):.2f} ms",
                f"echo server p50 {statistics.median(echo_figures.p50_1):.2f} ms",
                _ratio_text(p50_ratio),
                f"<= {TARGET}",
                statistics.median(p50_ratio) <= TARGET,
            )
        )
        for clients in args.clients:
            rate = [
                floor / ours
                for ours, floor in zip(
                    figure.per_second[clients], echo_figures.per_second[clients], strict=True
                )
            ]
            p50 = [
                ours / floor
                for ours, floor in zip(figure.p50_n[clients], echo_figures.p50_n[clients], strict=True)
            ]
            judged = clients in args.targeted
            print(f"  {name} {clients} clients: calls/s {_ratio_text(rate)}, p50 {_ratio_text(p50)}")
            rows.append(
                Row(
                    f"{name} ({target.label}) calls/s, {clients} clients, raw client",
                    f"{statistics.median(figure.per_second[clients]):.0f} calls/s",
                    f"echo server {statistics.median(echo_figures.per_second[clients]):.0f} calls/s",
                    _ratio_text(rate) + " (echo's calls/s / ours)",
                    f"<= {TARGET}" if judged else "",
                    statistics.median(rate) <= TARGET if judged else None,
                )
            )
            rows.append(
                Row(
                    f"{name} ({target.label}) p50, {clients} clients, raw client",
                    f"p50 {statistics.median(figure.p50_n[clients]):.2f} ms",
                    f"echo server p50 {statistics.median(echo_figures.p50_n[clients]):.2f} ms",
                    _ratio_text(p50),
                    f"<= {TARGET}" if judged else "",
                    statistics.median(p50) <= TARGET if judged else None,
                )
            )
        rows.append(
            Row(
                f"{name} ({target.label}) p50, 1 client, mcp SDK client",
                f"p50 {statistics.median(figure.sdk_p50_1):.2f} ms",
                f"echo server p50 {statistics.median(echo_figures.sdk_p50_1):.2f} ms",
                _ratio_text(sdk_ratio),
            )
        )

    grep_ratio = [tool / direct for tool, direct in zip(grep_tool, grep_rg, strict=True)]
    print(f"\n== herdr_fs_grep over {args.files} files (median of {args.grep_runs} per round, ms)")
    print(f"rg directly, the tool's flags   {Spread(tuple(grep_rg)).text(1)}")
    print(f"herdr_fs_grep via MCP (raw)     {Spread(tuple(grep_tool)).text(1)}")
    print(f"ratio                           {_ratio_text(grep_ratio)}")
    rows.append(
        Row(
            f"herdr_fs_grep over {args.files:,} files",
            f"{statistics.median(grep_tool):.1f} ms",
            f"rg with the tool's flags {statistics.median(grep_rg):.1f} ms",
            _ratio_text(grep_ratio),
            f"<= {GREP_TARGET}",
            statistics.median(grep_ratio) <= GREP_TARGET,
        )
    )

    print("\n== runtime resident memory (KiB)")
    print(f"after warm-up                   {idle_rss:>9}")
    print(f"after {MEMORY_CALLS:,} more calls        {after_rss:>9}")
    print(f"growth                          {growth:>8.1f}%")
    rows.append(
        Row(
            f"runtime resident memory after {MEMORY_CALLS:,} calls",
            f"{after_rss / 1024:.1f} MiB",
            f"{idle_rss / 1024:.1f} MiB after warm-up",
            f"+{growth:.1f}%",
            f"< {MEMORY_TARGET_PCT:.0f}%",
            growth < MEMORY_TARGET_PCT,
        )
    )
    print(f"\n{load_text()}")

    if args.record:
        details = {
            "loads": loads,
            "rounds": args.rounds,
            "calls_per_round": args.calls,
            "seconds_per_throughput_run": args.seconds,
            "rg_command": rg_command,
            "figures": {
                target.label: {
                    "p50_1_client_ms": Spread(tuple(f.p50_1)).to_json(),
                    "sdk_p50_1_client_ms": Spread(tuple(f.sdk_p50_1)).to_json(),
                    **{
                        f"calls_per_s_{n}_clients": Spread(tuple(f.per_second[n])).to_json()
                        for n in args.clients
                    },
                    **{f"p50_{n}_clients_ms": Spread(tuple(f.p50_n[n])).to_json() for n in args.clients},
                }
                for target, f in zip(targets, figures, strict=True)
            },
            "grep_ms": {"tool": Spread(tuple(grep_tool)).to_json(), "rg": Spread(tuple(grep_rg)).to_json()},
            "rss_kib": {"after_warmup": idle_rss, "after_calls": after_rss},
        }
        path = record("runtime_bench", rows, command=COMMAND, details=details)
        print(f"recorded {path}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=400, help="serial calls of each kind per round")
    parser.add_argument(
        "--sdk-calls", type=int, default=150, help="serial calls with the SDK client per round"
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each throughput run")
    parser.add_argument("--clients", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--targeted", type=int, nargs="+", default=[32], help="client counts with a target")
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--grep-runs", type=int, default=5)
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/runtime_bench.json")
    args = parser.parse_args()
    print(load_text())
    tmp = Path(tempfile.mkdtemp(prefix="hm-bench-", dir="/tmp"))
    try:
        repo = make_repo(tmp / "repo", {"file4k.txt": (b"0123456789abcde\n" * 256)})
        (repo / "listing").mkdir()
        for index in range(LIST_ENTRIES):
            (repo / "listing" / f"entry{index:02d}.txt").write_text("x\n")
        started = time.perf_counter()
        _tree(repo / "tree", args.files)
        print(f"generated {args.files} files in {time.perf_counter() - started:.1f}s under {repo / 'tree'}")
        root = str(repo.resolve())
        port = _free_port()
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"),
            running_runtime(tmp / "herdr.sock", tmp / "config") as runtime,
        ):
            echo_process = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("echo_server.py")), str(port), runtime.token],
                env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
            )
            try:
                _wait_port(port)
                echo = Target(
                    "echo", f"http://127.0.0.1:{port}/mcp", runtime.token, "echo", {"text": "x" * 4096}
                )
                read = Target(
                    "4 KiB",
                    runtime.url,
                    runtime.token,
                    "herdr_fs_read",
                    {"path": f"{root}/file4k.txt", "max_bytes": 8192},
                )
                listing = Target(
                    f"{LIST_ENTRIES} entries",
                    runtime.url,
                    runtime.token,
                    "herdr_fs_list",
                    {"path": f"{root}/listing"},
                )
                return asyncio.run(measure(args, echo, read, listing, runtime.process.pid, repo))
            finally:
                echo_process.terminate()
                echo_process.wait(timeout=10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _wait_port(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)  # polling the echo server's port until it listens
    raise RuntimeError("echo server did not start")


if __name__ == "__main__":
    sys.exit(main())
