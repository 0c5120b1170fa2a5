"""One raw MCP client for the benchmarks, so a ratio measures the servers and not a client.

The `mcp` SDK's client costs about 1.2 ms a call over Streamable HTTP and 0.35 ms over stdio, in
the numerator and the denominator alike, which pulls every ratio towards 1. This client does as
little as a client can: a request's bytes are built once per call from a template, sent on a
keep-alive HTTP/1.1 connection (or as one line on a child's stdin), and the answer is read by its
Content-Length (or as one line) and parsed once. Both sides of every ratio are driven by it.

- `RawHttp`: one keep-alive connection to a Streamable HTTP endpoint that answers JSON
  (`json_response=True`, as the runtime and the echo peer do; an SSE answer is read too). It
  initializes an MCP session (`Mcp-Session-Id`) unless `mcp=False` (plain HTTP).
- `RawStdio`: a server started as a child with newline-delimited JSON-RPC on stdin/stdout;
  `started_at` is taken before the spawn, so `launch_to_tools_list` is the whole cold start.
- `rounds()`: repeat a measurement, print min/median/max over rounds with the load average.
- `throughput()`: N clients each calling in a loop for a fixed time; calls/s and p50.

Timing is `time.perf_counter()` around the socket write and the read of the last byte; nothing
polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

PROTOCOL_VERSION = "2025-06-18"

_HEAD_END = b"\r\n\r\n"


class RawError(RuntimeError):
    """A server answered something a benchmark cannot use (an HTTP error, a JSON-RPC error)."""


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages (printed next to every figure)."""
    return os.getloadavg()


def load_text() -> str:
    one, five, fifteen = load_average()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cpus"


def percentile(samples: Sequence[float], q: float) -> float:
    """The `q` quantile of `samples` (nearest rank)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": name, "arguments": arguments}}


class RawHttp:
    """A keep-alive HTTP/1.1 connection speaking MCP's Streamable HTTP (JSON answers)."""

    def __init__(self, url: str, token: str | None = None) -> None:
        rest = url.split("://", 1)[1]
        hostport, _, path = rest.partition("/")
        host, _, port = hostport.partition(":")
        self.host, self.port, self.path = host, int(port or 80), "/" + path
        self.token = token
        self.session_id: str | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._next_id = 0

    async def connect(self, *, mcp: bool = True) -> RawHttp:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        if mcp:
            _answer, headers = await self._exchange(
                {
                    "jsonrpc": "2.0",
                    "method": "initialize",
                    "params": {
                        "protocolVersion": PROTOCOL_VERSION,
                        "capabilities": {},
                        "clientInfo": {"name": "raw-bench", "version": "1"},
                    },
                }
            )
            self.session_id = headers.get("mcp-session-id")
            await self.notify("notifications/initialized")
        return self

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self._writer.wait_closed()
            self._writer = None

    def _head(self, method: str, path: str, length: int) -> bytes:
        lines = [
            f"{method} {path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            "Accept: application/json, text/event-stream",
            "Content-Type: application/json",
            f"Content-Length: {length}",
        ]
        if self.token:
            lines.append(f"Authorization: Bearer {self.token}")
        if self.session_id:
            lines.append(f"Mcp-Session-Id: {self.session_id}")
            lines.append(f"Mcp-Protocol-Version: {PROTOCOL_VERSION}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
        """One HTTP request on the kept-alive connection: (status, lower-cased headers, body)."""
        assert self._reader is not None, "connect() first"
        assert self._writer is not None, "connect() first"
        self._writer.write(self._head(method, path, len(body)) + body)
        head = await self._reader.readuntil(_HEAD_END)
        status_line, *header_lines = head[:-4].decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        headers: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            data = await self._reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            data = await self._read_chunked()
        else:
            data = b""
        return status, headers, data

    async def _read_chunked(self) -> bytes:
        assert self._reader is not None
        parts: list[bytes] = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
            if size == 0:
                await self._reader.readuntil(b"\r\n")
                return b"".join(parts)
            parts.append(await self._reader.readexactly(size))
            await self._reader.readexactly(2)

    async def _exchange(self, message: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        self._next_id += 1
        message = {**message, "id": self._next_id}
        status, headers, data = await self.request("POST", self.path, json.dumps(message).encode())
        if status != 200:
            raise RawError(f"HTTP {status}: {data[:300]!r}")
        if headers.get("content-type", "").startswith("text/event-stream"):
            data = _last_sse_data(data)
        answer = json.loads(data)
        if "error" in answer:
            raise RawError(f"JSON-RPC error: {answer['error']}")
        return answer, headers

    async def notify(self, method: str) -> None:
        body = json.dumps({"jsonrpc": "2.0", "method": method}).encode()
        status, _, data = await self.request("POST", self.path, body)
        if status not in (200, 202):
            raise RawError(f"HTTP {status} to {method}: {data[:300]!r}")

    async def rpc(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        answer, _ = await self._exchange(message)
        return dict(answer["result"])

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """tools/call; raises RawError when the tool answered isError (a benchmark times successes)."""
        answer, _ = await self._exchange(_tool_call(name, arguments))
        result = dict(answer["result"])
        if result.get("isError"):
            raise RawError(f"{name} failed: {json.dumps(result)[:400]}")
        return result


def _last_sse_data(data: bytes) -> bytes:
    payload = b""
    for line in data.split(b"\n"):
        if line.startswith(b"data:"):
            payload = line[5:].strip()
    return payload


@dataclass
class RawStdio:
    """A server speaking newline-delimited JSON-RPC on a child's stdin/stdout."""

    argv: Sequence[str]
    env: dict[str, str] | None = None
    cwd: str | None = None
    started_at: float = 0.0
    _process: asyncio.subprocess.Process | None = field(default=None, repr=False)
    _next_id: int = 0

    async def start(self) -> RawStdio:
        self.started_at = time.perf_counter()
        self._process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.env,
            cwd=self.cwd,
            limit=64 * 1024 * 1024,
        )
        return self

    async def send(self, message: dict[str, Any]) -> None:
        assert self._process is not None
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(message).encode() + b"\n")
        await self._process.stdin.drain()

    async def _answer(self, request_id: int) -> dict[str, Any]:
        assert self._process is not None
        assert self._process.stdout is not None
        while True:
            line = await self._process.stdout.readline()
            if not line:
                raise RawError(f"{self.argv[0]} closed its stdout (exit {await self._process.wait()})")
            message = json.loads(line)
            if message.get("id") == request_id and ("result" in message or "error" in message):
                if "error" in message:
                    raise RawError(f"JSON-RPC error: {message['error']}")
                return dict(message["result"])

    async def rpc(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return await self._answer(self._next_id)

    async def initialize(self) -> dict[str, Any]:
        result = await self.rpc(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "raw-bench", "version": "1"},
            },
        )
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return result

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await self.rpc("tools/call", {"name": name, "arguments": arguments})
        if result.get("isError"):
            raise RawError(f"{name} failed: {json.dumps(result)[:400]}")
        return result

    async def launch_to_tools_list(self) -> float:
        """Start, initialize, list the tools: ms from before the spawn to the tools/list answer."""
        await self.start()
        await self.initialize()
        tools = await self.rpc("tools/list")
        elapsed = (time.perf_counter() - self.started_at) * 1000
        if not tools.get("tools"):
            raise RawError(f"{self.argv[0]} listed no tools")
        return elapsed

    async def close(self) -> None:
        if self._process is None:
            return
        if self._process.stdin is not None and not self._process.stdin.is_closing():
            self._process.stdin.close()
        try:
            await asyncio.wait_for(self._process.wait(), 10)
        except TimeoutError:
            self._process.kill()
            await self._process.wait()
        self._process = None


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await call()
    return (time.perf_counter() - start) * 1000


async def interleaved(
    calls: Sequence[Callable[[], Awaitable[Any]]], count: int, warmup: int
) -> list[list[float]]:
    """Time the calls in turn, round after round, so drift in load hits all alike (ms)."""
    for _ in range(warmup):
        for call in calls:
            await call()
    samples: list[list[float]] = [[] for _ in calls]
    for _ in range(count):
        for call, bucket in zip(calls, samples, strict=True):
            bucket.append(await timed(call))
    return samples


@dataclass(frozen=True)
class Throughput:
    clients: int
    calls: int
    seconds: float
    p50_ms: float
    p95_ms: float

    @property
    def per_second(self) -> float:
        return self.calls / self.seconds


async def throughput(
    clients: Sequence[Callable[[], Awaitable[Any]]], seconds: float, warmup_s: float = 0.3
) -> Throughput:
    """Each callable is one client (its own connection), calling in a loop; counted after warm-up."""
    latencies: list[float] = []
    calls = 0
    counting = False
    stop_at = 0.0

    async def worker(call: Callable[[], Awaitable[Any]]) -> None:
        nonlocal calls
        while True:
            start = time.perf_counter()
            if start >= stop_at and counting:
                return
            await call()
            end = time.perf_counter()
            if counting and end <= stop_at:
                calls += 1
                latencies.append((end - start) * 1000)

    stop_at = time.perf_counter() + warmup_s + seconds + 3600
    tasks = [asyncio.create_task(worker(call)) for call in clients]
    await asyncio.sleep(warmup_s)  # warm-up: every client's first calls are not counted
    began = time.perf_counter()
    stop_at = began + seconds
    counting = True
    await asyncio.gather(*tasks)
    return Throughput(len(clients), calls, seconds, percentile(latencies, 0.5), percentile(latencies, 0.95))


@dataclass(frozen=True)
class Spread:
    """A figure over repeated rounds."""

    values: tuple[float, ...]

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def max(self) -> float:
        return max(self.values)

    def text(self, digits: int = 2, unit: str = "") -> str:
        f = f"{{:.{digits}f}}"
        return f"{f.format(self.min)}/{f.format(self.median)}/{f.format(self.max)}{unit} (min/median/max)"

    def to_json(self) -> dict[str, Any]:
        return {"min": self.min, "median": self.median, "max": self.max, "rounds": list(self.values)}
