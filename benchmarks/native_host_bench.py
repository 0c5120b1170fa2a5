"""The native host's added latency per request, from one run.

A request to the runtime's Unix socket sent directly (an httpx2 client on the socket, bearer in
the header) and the same request sent as a native messaging frame through `herdr-mcp native-host`
(a real subprocess, frames on its stdin/stdout as Chrome writes them), interleaved round by round.
Against `herdr-mcp serve` on the Herdr simulator: `GET /push/state` and `POST
/browser/binding.get`. Against the runtime stand-in of tests/support/native_host_harness.py (uvicorn on the
socket): a reply of 1 MiB + 1 byte, which the host sends as three chunk frames.

Run from the repository root with the project installed: `python benchmarks/native_host_bench.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx2
from tests.support.native_host_harness import MIB, ORIGIN, short_config_dir, socket_of, stub_runtime
from tests.support.runtime_harness import make_repo, running_runtime

from benchmarks.timing import interleaved, percentile
from herdr_mcp.sim import SimConfig, SimulatorThread

LENGTH = struct.Struct("=I")


class HostClient:
    """The browser's side of one native host process."""

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


#: (what, method, path, body) of one request timed both ways.
Request = tuple[str, str, str, Any]


async def _measure(config: Path, token: str, requests: list[Request], count: int, warmup: int) -> None:
    """Time each request directly on `config`'s runtime socket and through a native host on it."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "herdr_mcp", "native-host", ORIGIN, "--config-dir", str(config),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=4 * MIB,
    )  # fmt: skip
    host = HostClient(process)
    transport = httpx2.AsyncHTTPTransport(uds=str(socket_of(config)))
    async with httpx2.AsyncClient(
        transport=transport,
        base_url="http://127.0.0.1:8772",
        headers={"Authorization": f"Bearer {token}"},
        trust_env=False,
    ) as client:
        for what, method, path, body in requests:

            async def direct(method: str = method, path: str = path, body: Any = body) -> None:
                (await client.request(method, path, json=body)).raise_for_status()

            async def through_host(
                method: str = method, path: str = path, body: Any = body, what: str = what
            ) -> None:
                message = {"method": method, "path": path, **({"body": body} if body is not None else {})}
                reply = await host.request(message)
                if reply.get("status") != 200:
                    raise RuntimeError(f"{what}: {str(reply)[:200]}")

            calls: list[Callable[[], Awaitable[None]]] = [direct, through_host]
            direct_ms, host_ms = await interleaved(calls, count, warmup)
            direct_p50, host_p50 = percentile(direct_ms, 0.5), percentile(host_ms, 0.5)
            print(f"{what}: {count} requests each way")
            print(
                f"  directly on the socket: p50 {direct_p50:.2f} ms, p95 {percentile(direct_ms, 0.95):.2f} ms"
            )
            print(f"  through the native host: p50 {host_p50:.2f} ms, p95 {percentile(host_ms, 0.95):.2f} ms")
            print(f"  added by the host: p50 +{host_p50 - direct_p50:.2f} ms")
    assert process.stdin is not None
    process.stdin.close()
    await process.wait()


async def _run(count: int, warmup: int) -> None:
    with short_config_dir() as base:
        repo = make_repo(base / "repo", {"README.md": b"# demo\n"})
        config = base / "config"
        with (
            SimulatorThread(SimConfig.for_roots([repo]), base / "herdr.sock"),
            running_runtime(base / "herdr.sock", config) as runtime,
        ):
            scope = {"scope": "chatgpt:conv:bench"}
            real: list[Request] = [
                ("the runtime, GET /push/state", "GET", "/push/state", None),
                ("the runtime, POST /browser/binding.get", "POST", "/browser/binding.get", scope),
            ]
            await _measure(config, runtime.token, real, count, warmup)
    with short_config_dir() as config, stub_runtime(config) as stub:
        empty = {"id": "b1", "status": 200, "body": {"pad": ""}}
        size = MIB + 1 - len(json.dumps(empty, separators=(",", ":")))
        large: list[Request] = [
            (
                "a stand-in answering 1 MiB + 1 byte (3 chunk frames)",
                "POST",
                "/browser/inbox.read",
                {"size": size},
            )
        ]
        await _measure(config, stub.token, large, max(count // 10, 20), warmup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=300, help="requests each way (default 300)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed rounds first (default 20)")
    args = parser.parse_args()
    asyncio.run(_run(args.count, args.warmup))


if __name__ == "__main__":
    main()
