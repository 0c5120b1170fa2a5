"""HTTP bounds of the runtime and the link: the request head's size, how long a head may take,
a body that stalls, keep-alive (runtime/http_limits.py, link/server.py; issue 23).

The 64 MiB head goes to real processes (`herdr-mcp serve` and `herdr-mcp link`), whose memory is
read from /proc. The timing bounds are checked on the same servers in this process, with their
bounds shortened: uvicorn configured by `serve.server_config` (what `herdr-mcp serve` runs) around
a small Starlette app, and `LinkServer` around a small handler. Clients are raw loopback sockets,
each with a timeout, so a failure never hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request as StarletteRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from herdr_mcp.cli import serve
from herdr_mcp.link import LinkServer, server
from herdr_mcp.link.server import ClientConnection, Request
from herdr_mcp.loopback import bind_loopback
from herdr_mcp.runtime import http_limits
from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.link_harness import running_link
from tests.support.runtime_harness import make_repo, running_runtime
from tests.support.sim_helpers import short_tmp_dir
from tests.support.waiting import wait_until

#: The shortened bounds of the in-process servers.
SHORT_S = 0.5
#: How much later than a bound a server may act on a loaded 2-core machine.
SLACK_S = 5.0
MIB = 1 << 20


# -- a raw client ----------------------------------------------------------------------------


class Raw:
    """One loopback connection; `answer()` reads one Content-Length framed answer."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=SLACK_S * 4)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        self.buffer += data
        return bool(data)

    def answer(self) -> tuple[int, bytes] | None:
        """(status, body) of the next answer, or None when the server closed without one."""
        while b"\r\n\r\n" not in self.buffer:
            if not self._fill():
                return None
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = next(int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length"))
        while len(rest) < length:
            if not self._fill():
                return None
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
        self.buffer = rest[length:]
        return int(lines[0].split()[1]), rest[:length]

    def closed(self) -> bool:
        """The server closed the connection (EOF or reset); blocks until it does or times out."""
        return not self.buffer and not self._fill()

    def close(self) -> None:
        self.sock.close()


def head(path: str = "/health", *extra: str, method: str = "GET") -> bytes:
    return "\r\n".join([f"{method} {path} HTTP/1.1", "host: 127.0.0.1", *extra, "", ""]).encode()


def status(answer: tuple[int, bytes] | None) -> int | None:
    return None if answer is None else answer[0]


def refusal(answer: tuple[int, bytes] | None) -> tuple[int, str]:
    assert answer is not None, "closed without an answer"
    return answer[0], json.loads(answer[1])["error"]


# -- the 64 MiB head, real processes ------------------------------------------------------------


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field}")


def _send_huge_head(port: int) -> tuple[int, bytes] | None:
    client = Raw(port)
    try:
        client.send(b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nx-big: ")
        with contextlib.suppress(OSError):  # the server may stop reading once it has refused
            for _ in range(64):
                client.send(b"a" * MIB)
            client.send(b"\r\n\r\n")
        return client.answer()
    finally:
        client.close()


def _head_of(port: int, size: int) -> tuple[int, bytes] | None:
    client = Raw(port)
    try:
        client.send(head("/health", "x-pad: " + "p" * size))
        return client.answer()
    finally:
        client.close()


@pytest.fixture(scope="module")
def processes() -> Iterator[tuple[tuple[int, int], tuple[int, int]]]:
    """A runtime and a link, real processes: ((runtime port, pid), (link port, pid))."""
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", {"README.md": b"# demo\n"})
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"),
            running_runtime(tmp / "herdr.sock", tmp / "config") as runtime,
            running_link(tmp / "link-state", tmp / "link-token") as link,
        ):
            yield (
                (int(runtime.base.rsplit(":", 1)[1]), runtime.process.pid),
                (int(link.base.rsplit(":", 1)[1]), link.process.pid),
            )


@pytest.mark.parametrize("which", ["runtime", "link"])
def test_a_64_mib_head_is_refused_without_being_held(
    processes: tuple[tuple[int, int], tuple[int, int]], which: str
) -> None:
    # Found: the runtime buffered it whole and answered 200 (RSS 73 -> 175 MB, peak 204 MB).
    port, pid = processes[0] if which == "runtime" else processes[1]
    before = _kib(pid, "VmRSS")
    assert refusal(_send_huge_head(port)) == (431, "head_too_large")
    peak = _kib(pid, "VmHWM")  # the most the process ever held, its start included
    assert peak - before < 16 * 1024, (before, peak)
    # A head under the bound is served; one over it in a single piece is refused as well.
    assert status(_head_of(port, 60 * 1024)) == 200
    assert refusal(_head_of(port, 70 * 1024)) == (431, "head_too_large")


# -- the runtime's timing bounds, in process -------------------------------------------------


async def _slow(request: StarletteRequest) -> Response:
    await asyncio.sleep(SHORT_S * 3)  # the subject: an answer slower than the head timeout
    return JSONResponse({"slow": True})


async def _echo(request: StarletteRequest) -> Response:
    return JSONResponse({"length": len(await request.body())})


async def _stream(request: StarletteRequest) -> Response:
    async def ticks() -> AsyncIterator[bytes]:
        while True:
            yield b"tick\n"
            await asyncio.sleep(SHORT_S / 5)  # the stream's pace: a tick five times a bound

    return StreamingResponse(ticks(), media_type="text/plain")


async def _health(request: StarletteRequest) -> Response:
    return JSONResponse({"status": "ok"})


APP = Starlette(
    routes=[
        Route("/health", _health),
        Route("/slow", _slow),
        Route("/echo", _echo, methods=["POST"]),
        Route("/stream", _stream),
    ]
)


@pytest.fixture
def runtime_port(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """uvicorn as `herdr-mcp serve` configures it, the bounds shortened, in a thread."""
    monkeypatch.setattr(http_limits, "HEAD_TIMEOUT_S", SHORT_S)
    monkeypatch.setattr(http_limits, "BODY_IDLE_TIMEOUT_S", SHORT_S)
    config = serve.server_config(APP, "warning")
    assert (config.http, config.timeout_keep_alive) == (http_limits.LimitedHttpToolsProtocol, 5)
    config.timeout_keep_alive = 1
    sock = bind_loopback("127.0.0.1", 0)
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: uv.started, "uvicorn to start")
    try:
        yield sock.getsockname()[1]
    finally:
        uv.should_exit = True
        thread.join(30)
        sock.close()


@pytest.fixture
def link_port(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The link's server with its head timeout shortened, around a handler answering 200."""
    monkeypatch.setattr(server, "HEAD_TIMEOUT_S", SHORT_S)

    def handler(request: Request, client: ClientConnection) -> None:
        client.answer(200, json.dumps({"path": request.path.decode()}).encode())

    link = LinkServer(bind_loopback("127.0.0.1", 0), handler).start()
    try:
        yield link.port
    finally:
        link.close()


@pytest.fixture(params=["runtime", "link"])
def any_port(request: pytest.FixtureRequest) -> int:
    port: int = request.getfixturevalue(f"{request.param}_port")
    return port


def test_connections_that_send_nothing_or_half_a_head_are_closed(any_port: int) -> None:
    # Found: 50 such connections stayed open as long as their clients liked, on both servers.
    silent = [Raw(any_port) for _ in range(20)]
    halves = [Raw(any_port) for _ in range(20)]
    for client in halves:
        client.send(b"GET /health HTTP/1.1\r\nhost: 1")
    started = time.monotonic()
    try:
        assert all(client.closed() for client in silent)  # no request, so no answer: just closed
        assert [refusal(client.answer()) for client in halves] == [(408, "head_timeout")] * 20
        elapsed = time.monotonic() - started
    finally:
        for client in silent + halves:
            client.close()
    assert SHORT_S * 0.8 <= elapsed < SHORT_S + SLACK_S, elapsed


def test_a_head_sent_byte_by_byte_is_cut_at_the_head_timeout(any_port: int) -> None:
    # Found: one byte every half second kept a connection open indefinitely (each byte restarted
    # the link's idle timeout; the runtime had none).
    client = Raw(any_port)
    data = head("/health", "x-slow: " + "s" * 400)
    sent = 0
    started = time.monotonic()
    try:
        with contextlib.suppress(OSError):  # the server closes once it has answered
            while sent < len(data) and not select.select([client.sock], [], [], SHORT_S / 10)[0]:
                client.send(data[sent : sent + 1])  # the client's pace: one byte a 20th of a second
                sent += 1
        assert refusal(client.answer()) == (408, "head_timeout")
    finally:
        client.close()
    assert sent < len(data)
    assert time.monotonic() - started < SHORT_S + SLACK_S


def test_a_head_in_pieces_within_the_bound_is_served(any_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Bounds a loaded machine cannot overrun between two sends of the test's.
    monkeypatch.setattr(http_limits, "HEAD_TIMEOUT_S", SLACK_S * 2)
    monkeypatch.setattr(server, "HEAD_TIMEOUT_S", SLACK_S * 2)
    client = Raw(any_port)
    try:
        data = head("/health")
        client.send(data[:10])
        time.sleep(SHORT_S)  # the client pauses between two pieces of one head
        client.send(data[10:])
        assert status(client.answer()) == 200
        client.send(head("/health"))  # and the next request on the kept-alive connection
        assert status(client.answer()) == 200
    finally:
        client.close()


def _answered_once(port: int) -> tuple[Raw, float]:
    """A connection that has had one answer, and when it came."""
    client = Raw(port)
    client.send(head("/health"))
    assert status(client.answer()) == 200
    return client, time.monotonic()


def test_a_kept_alive_link_connection_waits_for_its_next_request_longer_than_a_head(link_port: int) -> None:
    client, answered = _answered_once(link_port)
    try:
        wait_until(lambda: time.monotonic() - answered > SHORT_S * 3, "three head timeouts to pass")
        client.send(head("/health"))  # the idle timeout (75 s) applies between requests, not the head's
        assert status(client.answer()) == 200
    finally:
        client.close()


def test_the_runtime_closes_a_kept_alive_connection_after_the_keep_alive(runtime_port: int) -> None:
    client, answered = _answered_once(runtime_port)
    try:
        assert client.closed()
        assert 0.8 <= time.monotonic() - answered < 1 + SLACK_S  # timeout_keep_alive, set to 1 s
    finally:
        client.close()


def test_a_stalled_body_ends_the_connection_a_long_answer_does_not(runtime_port: int) -> None:
    stalled, streaming = Raw(runtime_port), Raw(runtime_port)
    try:
        stalled.send(head("/echo", "content-length: 100", method="POST") + b"0123456789")
        streaming.send(head("/stream"))
        started = time.monotonic()
        assert stalled.closed()
        assert time.monotonic() - started < SHORT_S + SLACK_S
        # The stream has been answering all that time and still is, past every bound.
        wait_until(lambda: time.monotonic() - started > SHORT_S * 4, "four bounds to pass")
        streaming.buffer = b""
        assert streaming._fill() and b"tick" in streaming.buffer
        whole = Raw(runtime_port)
        whole.send(head("/echo", "content-length: 10", method="POST") + b"0123456789")
        answer = whole.answer()
        whole.close()
        assert answer is not None and json.loads(answer[1]) == {"length": 10}
    finally:
        stalled.close()
        streaming.close()


def test_a_pipelined_head_is_not_cut_while_the_answer_before_it_is_written(runtime_port: int) -> None:
    client = Raw(runtime_port)
    try:
        client.send(head("/slow") + b"GET /health HTTP/1.1\r\nhost: 1")  # the second head unfinished
        first = client.answer()
        assert first is not None and first[0] == 200 and json.loads(first[1]) == {"slow": True}
        assert refusal(client.answer()) == (408, "head_timeout")  # then, its own bound
    finally:
        client.close()
