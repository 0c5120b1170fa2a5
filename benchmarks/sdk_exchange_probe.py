"""A probe, not a benchmark with a target: what the `mcp` SDK's Streamable HTTP exchange costs a
tools/call of the runtime, for the decision issue 24 leaves open.

The runtime answers every tools/call over HTTP through the SDK's server (session manager,
transport, memory streams, the low-level server's request task, the result's validation and
serialisation). Its own work is the `ToolDispatcher` (`runtime/dispatcher.py`), which the stdio
loop already drives without the SDK. This probe serves the same dispatcher, built the way
`herdr-mcp serve` builds it, from a bare ASGI function on uvicorn (httptools, as the runtime):
the bearer compared, the body parsed, `initialize` answered with a session id, `tools/call`
handed to the dispatcher, its plain answer written as the JSON-RPC result. Nothing else of MCP:
no session table, no protocol version checks, no cancellation, no SSE, no body bounds. So the
lane's figure is a lower bound for an exchange of our own, not a server to ship.

Measured in one run, the three servers side by side (the SDK echo of `echo_server.py`, the real
runtime, the lane), driven by the raw client of `raw_client.py`: p50 of 400 interleaved calls at
1 client, and calls/s and p50 at 32 clients (2 s each, the servers in turn, `--rounds` times):
herdr_fs_read of 4 KiB against the echo of 4 KiB, and herdr_exec `echo ok` against `bash -c`
spawned directly (`exec_bench.spawn_direct`, 32 threads for the throughput floor).

Run from the repository root: `python benchmarks/sdk_exchange_probe.py` (`--rounds`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.runtime_harness import make_repo, running_runtime

from benchmarks.exec_bench import spawn_direct, spawn_throughput
from benchmarks.raw_client import RawHttp, interleaved, load_text, percentile, throughput
from benchmarks.runtime_bench import _free_port, _wait_port
from herdr_mcp.sim import SimConfig, SimulatorThread

_CLIENTS = 32
_SECONDS = 2.0
_CALLS = 400
_WARMUP_CALLS = 50


def serve_lane(herdr_socket: Path, config_dir: Path, port: int, token: str) -> None:
    """The lane (module docstring): the runtime's dispatcher behind a bare ASGI function."""
    import uvicorn

    from herdr_mcp.runtime.config import RuntimeConfig
    from herdr_mcp.runtime.dispatcher import ToolDispatcher
    from herdr_mcp.runtime.services import Services

    config = RuntimeConfig(config_dir=config_dir, herdr_socket=herdr_socket, host="127.0.0.1", port=port)
    dispatcher = ToolDispatcher(Services.create(config))
    bearer = f"Bearer {token}".encode()
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

    async def answer(send: Callable[[dict[str, Any]], Awaitable[None]], status: int, body: bytes) -> None:
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if status == 200:
            headers.append((b"mcp-session-id", b"lane"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def app(
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[dict[str, Any]]],
        send: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            return
        if dict(scope["headers"]).get(b"authorization") != bearer:
            await answer(send, 401, b"")
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        request = json.loads(b"".join(chunks))
        if "id" not in request:
            await answer(send, 202, b"")
            return
        result: dict[str, Any] = {}
        if request["method"] == "initialize":
            result = {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "lane", "version": "0"},
            }
        elif request["method"] == "tools/call":
            params = request["params"]
            result = await dispatcher.call(params["name"], params.get("arguments"), session="lane")
        await answer(send, 200, dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}).encode())

    uvicorn.run(app, host="127.0.0.1", port=port, http="httptools", lifespan="off", log_level="warning")


Target = tuple[str, str, dict[str, Any]]  # url, tool, arguments


async def _measure(targets: dict[str, Target], token: str) -> dict[str, dict[str, Any]]:
    singles = {name: await RawHttp(url, token).connect() for name, (url, _, _) in targets.items()}
    calls = [_caller(singles[name], tool, arguments) for name, (_, tool, arguments) in targets.items()]
    samples = await interleaved(calls, _CALLS, _WARMUP_CALLS)
    figures: dict[str, dict[str, Any]] = {
        name: {"p50_1": percentile(timings, 0.5)} for name, timings in zip(targets, samples, strict=True)
    }
    for client in singles.values():
        await client.close()
    for name, (url, tool, arguments) in targets.items():
        clients = [await RawHttp(url, token).connect() for _ in range(_CLIENTS)]
        run = await throughput([_caller(client, tool, arguments) for client in clients], _SECONDS)
        figures[name].update(per_second=run.per_second, p50_n=run.p50_ms)
        for client in clients:
            await client.close()
    return figures


def _caller(client: RawHttp, tool: str, arguments: dict[str, Any]) -> Callable[[], Awaitable[Any]]:
    return lambda: client.call_tool(tool, arguments)


def _spawn_floor(bash: str) -> dict[str, Any]:
    async def one() -> None:
        spawn_direct(bash)

    (samples,) = asyncio.run(interleaved([one], _CALLS, _WARMUP_CALLS))
    run = spawn_throughput(bash, _CLIENTS, _SECONDS)
    return {"p50_1": percentile(samples, 0.5), "per_second": run.per_second, "p50_n": run.p50_ms}


def main() -> int:
    if sys.argv[1:2] == ["--lane"]:
        serve_lane(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    bash = shutil.which("bash")
    if bash is None:
        raise SystemExit("bash is not on PATH")
    tmp = Path(tempfile.mkdtemp(prefix="hm-probe-", dir="/tmp"))
    print(f"SDK exchange probe, {load_text()}")
    rounds: list[dict[str, dict[str, Any]]] = []
    try:
        repo = make_repo(tmp / "repo", {"file4k.txt": (b"0123456789abcde\n" * 256)})
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"),
            running_runtime(tmp / "herdr.sock", tmp / "config") as runtime,
        ):
            echo_port, lane_port = _free_port(), _free_port()
            here = Path(__file__).resolve()
            environment = {**os.environ, "PYTHONPATH": str(here.parents[1])}
            lane_argv = [str(tmp / "herdr.sock"), str(tmp / "lane-config"), str(lane_port), runtime.token]
            children = [
                subprocess.Popen(
                    [sys.executable, str(here.with_name("echo_server.py")), str(echo_port), runtime.token],
                    env=environment,
                ),
                subprocess.Popen([sys.executable, str(here), "--lane", *lane_argv], env=environment),
            ]
            try:
                _wait_port(echo_port)
                _wait_port(lane_port)
                read = {"path": f"{repo.resolve()}/file4k.txt", "max_bytes": 8192}
                command = {"workspace": "w1", "command": "echo ok"}
                lane = f"http://127.0.0.1:{lane_port}/mcp"
                targets: dict[str, Target] = {
                    "echo (SDK)": (f"http://127.0.0.1:{echo_port}/mcp", "echo", {"text": "x" * 4096}),
                    "fs_read, runtime (SDK)": (runtime.url, "herdr_fs_read", read),
                    "fs_read, lane (no SDK)": (lane, "herdr_fs_read", read),
                    "exec, runtime (SDK)": (runtime.url, "herdr_exec", command),
                    "exec, lane (no SDK)": (lane, "herdr_exec", command),
                }
                for index in range(args.rounds):
                    figures = asyncio.run(_measure(targets, runtime.token))
                    figures["bash -c spawned directly"] = _spawn_floor(bash)
                    rounds.append(figures)
                    print(f"-- round {index + 1} done ({load_text()})")
            finally:
                for child in children:
                    child.terminate()
                    child.wait(timeout=10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _report(rounds)
    print(load_text())
    return 0


def _report(rounds: list[dict[str, dict[str, Any]]]) -> None:
    def spread(name: str, key: str, floor: str | None = None) -> str:
        values = []
        for figures in rounds:
            value = figures[name][key]
            if floor is not None:
                value = value / figures[floor][key]
            values.append(value)
        low, mid, high = min(values), statistics.median(values), max(values)
        digits = 0 if floor is None and key == "per_second" else 2
        return f"{low:.{digits}f}/{mid:.{digits}f}/{high:.{digits}f}"

    head = ("p50 1 client ms", "calls/s 32", "p50 32 ms")
    print(f"\n{'server':26}  {head[0]:>20}  {head[1]:>20}  {head[2]:>20}  (min/median/max)")
    for name in rounds[0]:
        columns = (spread(name, "p50_1"), spread(name, "per_second"), spread(name, "p50_n"))
        print(f"{name:26}  {columns[0]:>20}  {columns[1]:>20}  {columns[2]:>20}")
    pairs = [
        ("fs_read, runtime (SDK)", "echo (SDK)"),
        ("fs_read, lane (no SDK)", "echo (SDK)"),
        ("exec, runtime (SDK)", "bash -c spawned directly"),
        ("exec, lane (no SDK)", "bash -c spawned directly"),
    ]
    print(f"\n{'ratio (calls/s: ours / the floor)':50}  {'p50 1 client':>16}  {'calls/s 32':>16}")
    for name, floor in pairs:
        label = f"{name} / {floor}"
        print(f"{label:50}  {spread(name, 'p50_1', floor):>16}  {spread(name, 'per_second', floor):>16}")


if __name__ == "__main__":
    raise SystemExit(main())
