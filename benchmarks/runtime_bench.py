"""Runtime figures from one run, each next to a peer measured in the same run.

1. tools/call latency (p50/p95) of herdr_fs_read (a 4 KiB file) and herdr_fs_list through the
   runtime, against the same `mcp` SDK serving a trivial echo tool (4 KiB argument) over the same
   transport (Streamable HTTP, JSON responses, uvicorn, loopback, bearer). Target ratio <= 1.3.
2. herdr_fs_grep through the runtime over a generated tree of 20,000 files, against ripgrep run
   directly on the same tree. Target ratio <= 1.5.
3. Resident memory of the runtime process idle and after 2,000 calls. Target growth < 10%.

Run from the repository root with the project installed: `python benchmarks/runtime_bench.py`
(`--calls`, `--files` to change the sizes). Prints a table; exits 0 (figures, not a test).
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.runtime_harness import make_repo, running_runtime

from benchmarks.timing import interleaved, percentile
from herdr_mcp.local_http import local_async_client
from herdr_mcp.sim import SimConfig, SimulatorThread

NEEDLE = "needle_7f3a"


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


async def _timed(call: Callable[[], Awaitable[Any]], count: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        await call()
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


async def _client_session(stack: contextlib.AsyncExitStack, url: str, token: str) -> Client:
    http = await stack.enter_async_context(
        local_async_client(headers={"Authorization": f"Bearer {token}"}, timeout=120)
    )
    return await stack.enter_async_context(Client(streamable_http_client(url, http_client=http)))


async def measure(
    args: argparse.Namespace, runtime_url: str, token: str, echo_url: str, repo: Path, pid: int
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        runtime = await _client_session(stack, runtime_url, token)
        echo = await _client_session(stack, echo_url, token)
        await _measure(args, runtime, echo, repo, pid)


async def _measure(args: argparse.Namespace, runtime: Client, echo: Client, repo: Path, pid: int) -> None:
    root = str(repo.resolve())
    payload = "x" * 4096

    async def ok(client: Client, name: str, arguments: dict[str, Any]) -> None:
        result = await client.call_tool(name, arguments)
        if result.is_error:
            raise RuntimeError(f"{name} failed: {result.structured_content}")

    read_args = {"path": f"{root}/file4k.txt", "max_bytes": 8192}
    list_args = {"path": f"{root}/listing"}
    await ok(runtime, "herdr_fs_read", read_args)
    await ok(runtime, "herdr_fs_list", list_args)
    idle_rss = _rss_kib(pid)

    rows = []
    echo_samples, read_samples, list_samples = await interleaved(
        [
            lambda: ok(echo, "echo", {"text": payload}),
            lambda: ok(runtime, "herdr_fs_read", read_args),
            lambda: ok(runtime, "herdr_fs_list", list_args),
        ],
        args.calls,
        50,
    )
    echo_p50 = statistics.median(echo_samples)
    for name, samples in (("echo (peer)", echo_samples), ("herdr_fs_read 4KiB", read_samples),
                          ("herdr_fs_list", list_samples)):  # fmt: skip
        rows.append(
            (
                name,
                statistics.median(samples),
                percentile(samples, 0.95),
                statistics.median(samples) / echo_p50,
            )
        )
    print(f"\n== tools/call latency over Streamable HTTP ({args.calls} calls each, ms)")
    print(f"{'call':<22}{'p50':>9}{'p95':>9}{'p50 / echo':>13}")
    for name, p50, p95, ratio in rows:
        print(f"{name:<22}{p50:>9.2f}{p95:>9.2f}{ratio:>13.2f}")

    grep_args = {"root": root, "pattern": NEEDLE, "path": f"{root}/tree", "max_matches": 1000}
    await ok(runtime, "herdr_fs_grep", grep_args)
    tool_grep = await _timed(lambda: ok(runtime, "herdr_fs_grep", grep_args), 7, 1)
    rg = shutil.which("rg")
    if rg is None:
        raise RuntimeError("ripgrep (rg) is needed for the peer figure: apt-get install ripgrep")
    command = [rg, "--json", "-F", "-n", "--", NEEDLE, str(repo / "tree")]
    direct = []
    for _ in range(8):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        direct.append((time.perf_counter() - start) * 1000)
    direct = direct[1:]
    print(f"\n== herdr_fs_grep over {args.files} files (ms, median of 7)")
    print(f"rg directly            {statistics.median(direct):>9.1f}")
    print(f"herdr_fs_grep via MCP  {statistics.median(tool_grep):>9.1f}")
    print(f"ratio                  {statistics.median(tool_grep) / statistics.median(direct):>9.2f}")

    for index in range(2000):
        if index % 2:
            await ok(runtime, "herdr_fs_read", read_args)
        else:
            await ok(runtime, "herdr_fs_list", list_args)
    after_rss = _rss_kib(pid)
    print("\n== runtime resident memory (KiB)")
    print(f"idle (after warm-up)   {idle_rss:>9}")
    print(f"after 2,000 more calls {after_rss:>9}")
    print(f"growth                 {(after_rss - idle_rss) / idle_rss * 100:>8.1f}%")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--files", type=int, default=20_000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hm-bench-", dir="/tmp"))
    try:
        repo = make_repo(tmp / "repo", {"file4k.txt": (b"0123456789abcde\n" * 256)})
        (repo / "listing").mkdir()
        for index in range(40):
            (repo / "listing" / f"entry{index:02d}.txt").write_text("x\n")
        started = time.perf_counter()
        _tree(repo / "tree", args.files)
        print(f"generated {args.files} files in {time.perf_counter() - started:.1f}s under {repo / 'tree'}")
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
                asyncio.run(
                    measure(
                        args,
                        runtime.url,
                        runtime.token,
                        f"http://127.0.0.1:{port}/mcp",
                        repo,
                        runtime.process.pid,
                    )
                )
            finally:
                echo_process.terminate()
                echo_process.wait(timeout=10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _wait_port(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("echo server did not start")


if __name__ == "__main__":
    sys.exit(main())
