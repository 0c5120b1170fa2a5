"""Stdio figures from one run: herdr_fs_read of a 4 KiB file through `herdr-mcp stdio`, next to
the reference filesystem server from npm (`@modelcontextprotocol/server-filesystem`, tool
read_text_file of the same file) and the `mcp` SDK's own low-level server echoing 4 KiB over
the SDK's stdio transport (`benchmarks/stdio_echo_server.py`).

All three are launched and driven by the same Python SDK client (`mcp.Client` over stdio) in one
event loop, and their calls are interleaved (herdr, reference, echo, herdr, ...) so drift in
machine load hits them alike. Target: herdr_fs_read p50 <= 1.2 x the reference server's.

Run from the repository root with the project installed: `.venv/bin/python
benchmarks/stdio_bench.py` (`--calls` to change the count; npm installs the reference server
into .tools/ on first use). Prints a table; exits 0 (figures, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.npm_tools import FILESYSTEM_SERVER, npm_program
from tests.support.runtime_harness import make_repo

from benchmarks.timing import interleaved, percentile

BENCHMARKS = Path(__file__).resolve().parent
TARGET_RATIO = 1.2
CONTENT = b"0123456789abcde\n" * 256  # 4 KiB


async def measure(args: argparse.Namespace, repo: Path, config_dir: Path) -> None:
    herdr_mcp = Path(sys.executable).with_name("herdr-mcp")
    servers = {
        "herdr-mcp stdio": StdioServerParameters(
            command=str(herdr_mcp),
            args=["stdio", "--sim", "--sim-root", str(repo), "--config-dir", str(config_dir)],
        ),
        "reference (npm)": StdioServerParameters(
            command=str(npm_program(*FILESYSTEM_SERVER)), args=[str(repo)]
        ),
        "SDK echo": StdioServerParameters(
            command=sys.executable, args=[str(BENCHMARKS / "stdio_echo_server.py")]
        ),
    }
    path = str(repo / "file4k.txt")
    text = CONTENT.decode()
    calls: dict[str, tuple[str, dict[str, Any]]] = {
        "herdr-mcp stdio": ("herdr_fs_read", {"path": path, "max_bytes": 8192}),
        "reference (npm)": ("read_text_file", {"path": path}),
        "SDK echo": ("echo", {"text": text}),
    }
    async with contextlib.AsyncExitStack() as stack:
        clients = {name: await stack.enter_async_context(Client(params)) for name, params in servers.items()}

        def call(name: str) -> Callable[[], Awaitable[None]]:
            tool, arguments = calls[name]

            async def once() -> None:
                result = await clients[name].call_tool(tool, arguments)
                if result.is_error:
                    raise RuntimeError(f"{name} {tool} failed: {result.content}")

            return once

        names = list(servers)
        samples = await interleaved([call(name) for name in names], args.calls, args.warmup)
    p50 = {name: statistics.median(bucket) for name, bucket in zip(names, samples, strict=True)}
    print(
        f"== tools/call over stdio, same SDK client ({args.calls} calls each after {args.warmup} warm-up, ms)"
    )
    print(f"{'server':<18}{'call':<24}{'p50':>8}{'p95':>8}")
    for name, bucket in zip(names, samples, strict=True):
        print(f"{name:<18}{calls[name][0] + ' 4KiB':<24}{p50[name]:>8.3f}{percentile(bucket, 0.95):>8.3f}")
    ratio = p50["herdr-mcp stdio"] / p50["reference (npm)"]
    print(f"herdr_fs_read / reference read_text_file p50: {ratio:.2f} (target <= {TARGET_RATIO})")
    print(f"herdr_fs_read / SDK echo p50:                 {p50['herdr-mcp stdio'] / p50['SDK echo']:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hm-stdio-bench-", dir="/tmp") as tmp:
        repo = make_repo(Path(tmp) / "repo", {"file4k.txt": CONTENT})
        asyncio.run(measure(args, repo.resolve(), Path(tmp) / "config"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
