"""herdr_exec of `echo ok` through a real runtime, against spawning the same shell directly.

The runtime is a real `herdr-mcp serve` (Streamable HTTP on loopback, the simulator as Herdr),
driven by the raw keep-alive client of `benchmarks/raw_client.py`. The floor is `bash -c 'echo ok'`
spawned directly from Python the way the runtime spawns it (`subprocess.Popen`, stdin from
/dev/null, stdout and stderr captured through pipes, a new session) and read to its end.

- Serially: herdr_exec (raw client), the floor, herdr_exec through the `mcp` SDK's client, and
  (for the split, no target) herdr_exec_read of an unknown session (session_not_found), what a
  call costs without a spawn; interleaved call by call so that drift in load hits all alike; p50 of each.
- Throughput at 1, 8, 32 and 128 clients: N raw clients, each its own keep-alive connection and
  MCP session, calling in a loop; against N threads, each spawning in a loop. Threads are the
  floor because they are the fastest way this Python spawns concurrently: `asyncio`'s own
  subprocesses (Python 3.11) start a watcher thread per child and measured 0.4-0.5x the threads
  at 32 and 128 (476 and 354/s against 1123 and 806/s), so they would flatter the runtime.
  The runtime's process and the floor's threads each have the same 2 cores to share with their
  shells.

Each round measures everything once; three rounds by default, each figure printed as
min/median/max over the rounds with the load average. Targets (issue 24, item 3): herdr_exec
p50 <= 1.5x the floor serially; throughput >= 0.7x the floor's at 32 and 128 clients.

Run from the repository root: `python benchmarks/exec_bench.py` (`--rounds`, `--calls`,
`--seconds`, `--clients`; `--record` writes benchmarks/results/exec_bench.json). Exits 0
(figures, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.runtime_harness import RunningRuntime, make_repo, running_runtime

from benchmarks.raw_client import (
    RawError,
    RawHttp,
    Spread,
    Throughput,
    interleaved,
    load_text,
    percentile,
    throughput,
)
from benchmarks.results import Row, record
from herdr_mcp.sim import SimConfig, SimulatorThread

_ARGS = {"workspace": "w1", "command": "echo ok"}
_NO_SESSION = {"session_id": "no-such-session", "max_bytes": 1}  # not an id: no state.db lookup
_WARMUP_CALLS = 10
_WARMUP_S = 0.5
_SERIAL_TARGET = 1.5
_THROUGHPUT_TARGET = 0.7
_THROUGHPUT_TARGET_CLIENTS = (32, 128)
_SDK_TARGET_MS = 15.0


def spawn_direct(bash: str) -> None:
    """The floor: `bash -c 'echo ok'` as the runtime spawns it, both pipes read to their end."""
    process = subprocess.Popen(
        [bash, "-c", "echo ok"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    out, _ = process.communicate()
    if out != b"ok\n" or process.returncode != 0:
        raise RuntimeError(f"bash -c 'echo ok' printed {out!r}, exit {process.returncode}")


def spawn_throughput(bash: str, clients: int, seconds: float) -> Throughput:
    """`clients` threads each spawning in a loop; counted as `raw_client.throughput` counts (calls
    that start after the warm-up and end before the stop)."""
    counting_from = time.perf_counter() + _WARMUP_S
    stop_at = counting_from + seconds
    latencies: list[list[float]] = [[] for _ in range(clients)]
    failures: list[BaseException] = []

    def worker(bucket: list[float]) -> None:
        try:
            while True:
                start = time.perf_counter()
                if start >= stop_at:
                    return
                spawn_direct(bash)
                end = time.perf_counter()
                if start >= counting_from and end <= stop_at:
                    bucket.append((end - start) * 1000)
        except BaseException as exc:  # reported after the join
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(bucket,), daemon=True) for bucket in latencies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    every = [value for bucket in latencies for value in bucket]
    return Throughput(clients, len(every), seconds, percentile(every, 0.5), percentile(every, 0.95))


def _check(result: dict[str, Any]) -> None:
    structured = result.get("structuredContent") or {}
    if structured.get("stdout") != "ok\n" or structured.get("exit_code") != 0:
        raise RawError(f"herdr_exec answered {structured}")


async def exec_throughput(runtime: RunningRuntime, clients: int, seconds: float) -> Throughput:
    """`clients` raw clients (one connection and MCP session each) calling herdr_exec in a loop."""
    connections = [await RawHttp(runtime.url, runtime.token).connect() for _ in range(clients)]
    try:

        def caller(connection: RawHttp) -> Any:
            async def call() -> None:
                _check(await connection.call_tool("herdr_exec", _ARGS))

            return call

        return await throughput([caller(c) for c in connections], seconds, warmup_s=_WARMUP_S)
    finally:
        for connection in connections:
            await connection.close()


@dataclass
class Round:
    serial_raw: float = 0.0
    serial_floor: float = 0.0
    serial_sdk: float = 0.0
    serial_base: float = 0.0
    exec_tp: dict[int, Throughput] = field(default_factory=dict)
    floor_tp: dict[int, Throughput] = field(default_factory=dict)
    load: str = ""


async def one_round(
    runtime: RunningRuntime, bash: str, calls: int, clients: list[int], seconds: float
) -> Round:
    figures = Round()
    raw = await RawHttp(runtime.url, runtime.token).connect()
    try:
        async with runtime.client() as sdk:

            async def via_raw() -> None:
                _check(await raw.call_tool("herdr_exec", _ARGS))

            async def floor() -> None:
                spawn_direct(bash)

            async def via_sdk() -> None:
                result = await sdk.call_tool("herdr_exec", _ARGS)
                structured: Any = result.structured_content
                if result.is_error or structured["stdout"] != "ok\n":
                    raise RawError(f"herdr_exec (SDK) answered {structured}")

            async def base() -> None:
                # What every call costs without a spawn: the HTTP exchange, the MCP SDK's server,
                # the dispatcher and the audit record, around a lookup that finds nothing (a
                # finished session would be replaced at the session limit during the rounds).
                answer = await raw.rpc("tools/call", {"name": "herdr_exec_read", "arguments": _NO_SESSION})
                if answer["structuredContent"]["error"]["code"] != "session_not_found":
                    raise RawError(f"herdr_exec_read answered {answer}")

            raw_ms, floor_ms, sdk_ms, base_ms = await interleaved(
                [via_raw, floor, via_sdk, base], calls, _WARMUP_CALLS
            )
    finally:
        await raw.close()
    figures.serial_raw = percentile(raw_ms, 0.5)
    figures.serial_floor = percentile(floor_ms, 0.5)
    figures.serial_sdk = percentile(sdk_ms, 0.5)
    figures.serial_base = percentile(base_ms, 0.5)
    for count in clients:
        figures.exec_tp[count] = await exec_throughput(runtime, count, seconds)
        figures.floor_tp[count] = spawn_throughput(bash, count, seconds)
    figures.load = load_text()
    return figures


def _print_round(index: int, figures: Round) -> None:
    print(f"\n-- round {index + 1} ({figures.load})")
    ratio = figures.serial_raw / figures.serial_floor
    print(
        f"serial p50: herdr_exec raw {figures.serial_raw:.2f} ms, bash -c direct "
        f"{figures.serial_floor:.2f} ms, herdr_exec SDK {figures.serial_sdk:.2f} ms, herdr_exec_read "
        f"(no spawn, not found) raw {figures.serial_base:.2f} ms; ratio raw/floor {ratio:.2f}"
    )
    for count, mine in figures.exec_tp.items():
        floor = figures.floor_tp[count]
        print(
            f"{count:>4} clients: herdr_exec {mine.per_second:7.1f}/s p50 {mine.p50_ms:7.2f} ms | "
            f"spawn threads {floor.per_second:7.1f}/s p50 {floor.p50_ms:7.2f} ms | "
            f"ratio {mine.per_second / floor.per_second:.2f}"
        )


def summarize(rounds: list[Round], clients: list[int]) -> tuple[list[Row], dict[str, Any]]:
    def spread(values: list[float]) -> Spread:
        return Spread(tuple(values))

    raw = spread([r.serial_raw for r in rounds])
    floor = spread([r.serial_floor for r in rounds])
    sdk = spread([r.serial_sdk for r in rounds])
    base = spread([r.serial_base for r in rounds])
    serial_ratio = spread([r.serial_raw / r.serial_floor for r in rounds])
    sdk_ratio = spread([r.serial_sdk / r.serial_floor for r in rounds])
    print(f"\n== herdr_exec 'echo ok' over {len(rounds)} rounds (min/median/max; {load_text()})")
    print(f"serial p50 herdr_exec, raw client    {raw.text(2, ' ms')}")
    print(f"serial p50 bash -c spawned directly  {floor.text(2, ' ms')}")
    print(f"serial p50 herdr_exec, mcp SDK client {sdk.text(2, ' ms')}")
    print(f"serial p50 herdr_exec_read, no spawn {base.text(2, ' ms')}")
    print(f"ratio raw / floor                    {serial_ratio.text()}   target <= {_SERIAL_TARGET}")
    print(f"ratio SDK / floor                    {sdk_ratio.text()}")
    rows = [
        Row(
            figure="herdr_exec `echo ok` p50, serial, raw client",
            measured=f"p50 {raw.median:.2f} ms",
            floor=f"`bash -c` spawned directly p50 {floor.median:.2f} ms",
            ratio=serial_ratio.text().split(" ")[0],
            target=f"<= {_SERIAL_TARGET}",
            met=serial_ratio.median <= _SERIAL_TARGET,
        )
    ]
    details: dict[str, Any] = {
        "serial_p50_ms": {
            "herdr_exec_read_no_spawn_raw": base.to_json(),
            "herdr_exec_raw": raw.to_json(),
            "bash_direct": floor.to_json(),
            "herdr_exec_sdk": sdk.to_json(),
        },
        "serial_ratio": serial_ratio.to_json(),
        "throughput": {},
        "round_loads": [r.load for r in rounds],
    }
    for count in clients:
        mine = spread([r.exec_tp[count].per_second for r in rounds])
        theirs = spread([r.floor_tp[count].per_second for r in rounds])
        p50 = spread([r.exec_tp[count].p50_ms for r in rounds])
        ratio = spread([r.exec_tp[count].per_second / r.floor_tp[count].per_second for r in rounds])
        targeted = count in _THROUGHPUT_TARGET_CLIENTS
        print(
            f"{count:>4} clients: herdr_exec {mine.text(0, '/s')}, p50 {p50.text(1, ' ms')}; "
            f"spawn threads {theirs.text(0, '/s')}; ratio {ratio.text()}"
            + (f"   target >= {_THROUGHPUT_TARGET}" if targeted else "")
        )
        details["throughput"][str(count)] = {
            "herdr_exec_per_s": mine.to_json(),
            "herdr_exec_p50_ms": p50.to_json(),
            "spawn_threads_per_s": theirs.to_json(),
            "ratio": ratio.to_json(),
        }
        rows.append(
            Row(
                figure=f"herdr_exec `echo ok` throughput, {count} raw clients",
                measured=f"{mine.median:.0f} calls/s (p50 {p50.median:.1f} ms)",
                floor=f"{count} threads spawning `bash -c` {theirs.median:.0f}/s",
                ratio=ratio.text().split(" ")[0],
                target=f">= {_THROUGHPUT_TARGET}" if targeted else "",
                met=(ratio.median >= _THROUGHPUT_TARGET) if targeted else None,
            )
        )
    rows.append(
        Row(
            figure="herdr_exec `echo ok` p50, serial, mcp SDK client",
            measured=f"p50 {sdk.median:.2f} ms",
            floor=f"`bash -c` spawned directly p50 {floor.median:.2f} ms",
            ratio=sdk_ratio.text().split(" ")[0],
            target=f"<= {_SDK_TARGET_MS:g} ms",
            met=sdk.median <= _SDK_TARGET_MS,
        )
    )
    return rows, details


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=150, help="serial calls of each kind per round")
    parser.add_argument("--seconds", type=float, default=2.0, help="counted seconds per throughput figure")
    parser.add_argument("--clients", default="1,8,32,128", help="comma-separated client counts")
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/exec_bench.json")
    args = parser.parse_args()
    clients = [int(text) for text in args.clients.split(",")]
    bash = shutil.which("bash")
    if bash is None:
        raise SystemExit("bash is needed")
    tmp = Path(tempfile.mkdtemp(prefix="hm-ebench-", dir="/tmp"))
    print(f"herdr_exec benchmark, pid {os.getpid()}, {load_text()}")
    try:
        repo = make_repo(tmp / "repo", {"a.txt": b"a\n"})
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"),
            running_runtime(tmp / "herdr.sock", tmp / "config") as runtime,
        ):
            print(f"runtime pid {runtime.process.pid}", flush=True)
            rounds = []
            for index in range(args.rounds):
                figures = asyncio.run(one_round(runtime, bash, args.calls, clients, args.seconds))
                _print_round(index, figures)
                rounds.append(figures)
        rows, details = summarize(rounds, clients)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.record:
        command = "python benchmarks/exec_bench.py " + " ".join(sys.argv[1:])
        path = record("exec_bench", rows, command=command.strip(), details=details)
        print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
