"""The native host as Chrome runs it, and a runtime stand-in on the Unix socket, for the native host's tests.

`HostProcess`: `herdr-mcp native-host <origin>` as a subprocess, frames written to its stdin and
read from its stdout by a thread that also reassembles chunked messages (as the extension does)
and keeps every raw byte the host wrote, so a test can search them for the bearer.

`StubRuntime`: a small Starlette app served by a real uvicorn on `<config dir>/ipc/runtime.sock`
(where the host looks), answering the paths of docs/browser-protocol.md section 2 behind the same
bearer check as the runtime: enough to test the host's framing, forwarding and streams against a
real socket and real HTTP before the runtime listens there itself. Its answers are the test's:
`/browser/inbox.read` returns `{"pad": <fill * size>}` for the size asked, `/browser/turn.resolve`
waits until the test releases it, `/push/events` relays what the test pushes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from herdr_mcp.tokens import load_or_create_token
from tests.support.waiting import wait_until

ORIGIN = "chrome-extension://abcdefghijklmnopabcdefghijklmnop/"
LENGTH = struct.Struct("=I")
MIB = 1024 * 1024


@contextlib.contextmanager
def short_config_dir() -> Iterator[Path]:
    """A config dir with a short path: a Unix socket's path must stay under 108 bytes, and
    pytest's tmp_path of a parametrized test can be longer than that."""
    path = Path(tempfile.mkdtemp(prefix="nh-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def socket_of(config_dir: Path) -> Path:
    return config_dir / "ipc" / "runtime.sock"


@dataclass
class Received:
    """One message from the host: the frames it took (1, or its chunk count) and their sizes."""

    message: dict[str, Any]
    frame_sizes: list[int]


@dataclass
class HostProcess:
    """A running `herdr-mcp native-host`; see the module docstring."""

    process: subprocess.Popen[bytes]
    config_dir: Path
    raw: bytearray = field(default_factory=bytearray)
    inbox: queue.Queue[Received | None] = field(default_factory=queue.Queue)
    held: list[Received] = field(default_factory=list)

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(json.dumps(message).encode("utf-8"))

    def send_raw(self, payload: bytes) -> None:
        self.send_bytes(LENGTH.pack(len(payload)) + payload)

    def send_bytes(self, data: bytes) -> None:
        """Write `data` to the host's stdin; a host that already exited (as it does after
        refusing a frame's header) leaves the rest unwritten."""
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.write(data)
            self.process.stdin.flush()

    def close_stdin(self) -> None:
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()

    def receive(self, request_id: str | None, timeout: float = 30.0) -> Received:
        """The next message for `request_id` (others that arrive meanwhile are kept for later)."""
        for index, kept in enumerate(self.held):
            if kept.message.get("id") == request_id:
                return self.held.pop(index)
        while True:
            try:
                item = self.inbox.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no message for {request_id!r} within {timeout:g} s") from None
            if item is None:
                # Put back: every later wait sees the end too.
                self.inbox.put(None)
                raise AssertionError(f"the host's stdout closed before a message for {request_id!r}")
            if item.message.get("id") == request_id:
                return item
            self.held.append(item)

    def message(self, request_id: str | None) -> dict[str, Any]:
        return self.receive(request_id).message

    def wait_exit(self, timeout: float = 30.0) -> tuple[int, resource.struct_rusage]:
        """Wait for the host to exit; its exit status and resource usage (`ru_maxrss` in KiB)."""
        rusage: list[resource.struct_rusage] = []

        def reaped() -> bool:
            pid, status, usage = os.wait4(self.process.pid, os.WNOHANG)
            if pid == 0:
                return False
            self.process.returncode = os.waitstatus_to_exitcode(status)
            rusage.append(usage)
            return True

        wait_until(reaped, "the native host to exit", timeout)
        return self.process.returncode, rusage[0]


def _read_frames(host: HostProcess) -> None:
    """The host's stdout, frame by frame, chunked messages joined (the extension's job)."""
    stdout = host.process.stdout
    assert stdout is not None
    chunks: dict[object, list[str]] = {}
    sizes: dict[object, list[int]] = {}
    while True:
        header = stdout.read(LENGTH.size)
        if len(header) < LENGTH.size:
            host.inbox.put(None)
            return
        (length,) = LENGTH.unpack(header)
        body = stdout.read(length)
        host.raw += header + body
        message = json.loads(body)
        chunk = message.get("chunk")
        if chunk is None:
            host.inbox.put(Received(message, [length]))
            continue
        key = message["id"]
        pieces = chunks.setdefault(key, [])
        assert chunk["index"] == len(pieces), f"chunk {chunk['index']} of {key} out of order"
        pieces.append(chunk["data"])
        sizes.setdefault(key, []).append(length)
        if len(pieces) == chunk["count"]:
            whole = json.loads("".join(chunks.pop(key)))
            host.inbox.put(Received(whole, sizes.pop(key)))


#: Runs a command as a child of a small process, with its address space capped, and writes the
#: child's peak RSS (KiB) to the file named first: a child started straight from pytest would
#: report pytest's own size (Linux keeps the peak of the memory it was forked from across exec).
_MEASURED = """
import os, resource, sys
pid = os.fork()
if pid == 0:
    limit = int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.execv(sys.argv[3], sys.argv[3:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


@contextlib.contextmanager
def native_host(
    config_dir: Path,
    *args: str,
    origin: str | None = ORIGIN,
    measure: tuple[Path, int] | None = None,
    launcher: Path | None = None,
) -> Iterator[HostProcess]:
    """`herdr-mcp native-host [origin] --config-dir <config_dir> *args`, killed after the test.

    With `measure=(file, bytes)` the host runs with its address space capped at `bytes` and its
    peak RSS in KiB is written to `file` when it exits. With `launcher`, that executable is
    started as Chrome starts it: the origin its only argument, from another directory, without
    HERDR_MCP_CONFIG_DIR in the environment."""
    command = [sys.executable, "-m", "herdr_mcp", "native-host", *([origin] if origin else [])]
    command += ["--config-dir", str(config_dir), *args]
    env = None
    if launcher is not None:
        command = [str(launcher), *([origin] if origin else [])]
        env = {name: value for name, value in os.environ.items() if name != "HERDR_MCP_CONFIG_DIR"}
    if measure is not None:
        command = [sys.executable, "-c", _MEASURED, str(measure[0]), str(measure[1]), *command]
    process = subprocess.Popen(
        command,
        cwd="/",
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    host = HostProcess(process, config_dir)
    reader = threading.Thread(target=_read_frames, args=(host,), daemon=True)
    reader.start()
    try:
        yield host
    finally:
        if process.returncode is None and process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        reader.join(timeout=30)
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


class StubRuntime:
    """See the module docstring. `seen` lists (method, path, bearer ok) of every request."""

    def __init__(self, config_dir: Path, socket: Path | None = None, token_file: Path | None = None) -> None:
        self.config_dir = config_dir
        self.socket = socket or socket_of(config_dir)
        self.token = load_or_create_token(token_file or config_dir / "token")
        self.seen: list[tuple[str, str, bool]] = []
        self.subscribers: list[asyncio.Queue[dict[str, Any] | None]] = []
        self.streams_closed = 0
        self.held = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._release: asyncio.Event | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    # -- the app ---------------------------------------------------------------------------------

    def _authorized(self, request: Request) -> bool:
        ok = request.headers.get("authorization") == f"Bearer {self.token}"
        self.seen.append((request.method, request.url.path, ok))
        return ok

    @staticmethod
    def _unauthorized() -> JSONResponse:
        return JSONResponse(
            {"error": {"code": "unauthorized", "message": "bearer required"}}, status_code=401
        )

    async def _events(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._unauthorized()
        subscriber: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.subscribers.append(subscriber)
        after = request.query_params.get("after", "")

        async def stream() -> Any:
            try:
                yield b": keepalive\n\n"
                yield f"event: hello\nid: 0\ndata: {json.dumps({'protocol': 1, 'after': after})}\n\n".encode()
                while (item := await subscriber.get()) is not None:
                    data = json.dumps(item["data"])
                    yield f"event: {item['event']}\nid: {item['seq']}\ndata: {data}\n\n".encode()
            finally:
                self.subscribers.remove(subscriber)
                self.streams_closed += 1

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def _state(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._unauthorized()
        return JSONResponse({"seq": 7, "workspaces": []})

    async def _echo(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._unauthorized()
        return JSONResponse({"echo": await request.json(), "path": request.url.path})

    async def _pad(self, request: Request) -> Response:
        """`{"size": n, "fill": c}` -> a body `{"pad": c * n}` (compact JSON)."""
        if not self._authorized(request):
            return self._unauthorized()
        asked = await request.json()
        body = json.dumps({"pad": asked.get("fill", "x") * asked["size"]}, separators=(",", ":"))
        return Response(body, media_type="application/json")

    async def _held(self, request: Request) -> Response:
        """Answers only after `release()`: a slow call that must not hold up the others."""
        if not self._authorized(request):
            return self._unauthorized()
        assert self._release is not None
        self.held += 1
        await self._release.wait()
        return JSONResponse({"released": True})

    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            self._loop = asyncio.get_running_loop()
            self._release = asyncio.Event()
            yield

        return Starlette(
            routes=[
                Route("/push/events", self._events, methods=["GET"]),
                Route("/push/state", self._state, methods=["GET"]),
                Route("/browser/binding.get", self._echo, methods=["POST"]),
                Route("/mcp", self._echo, methods=["POST"]),
                Route("/browser/inbox.read", self._pad, methods=["POST"]),
                Route("/browser/turn.resolve", self._held, methods=["POST"]),
            ],
            lifespan=lifespan,
        )

    # -- control from the test thread ------------------------------------------------------------

    def start(self) -> StubRuntime:
        self.socket.parent.mkdir(mode=0o700, exist_ok=True)
        config = uvicorn.Config(self.app(), uds=str(self.socket), log_level="error", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        wait_until(lambda: self._server is not None and self._server.started, "the stub runtime to listen")
        return self

    def stop(self) -> None:
        """Stop serving: held calls are released and open streams ended first, since uvicorn
        waits for the requests in progress."""
        if self._server is not None and self._thread is not None:
            if self._loop is not None:
                self.release()
                self.end_streams()
            self._server.should_exit = True
            self._thread.join(timeout=30)
            self._server = None

    def _call(self, callback: Any, *args: Any) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(callback, *args)

    def push(self, event: str, seq: int, data: dict[str, Any]) -> None:
        """An event to every open /push/events stream."""
        for subscriber in list(self.subscribers):
            self._call(subscriber.put_nowait, {"event": event, "seq": seq, "data": data})

    def end_streams(self) -> None:
        for subscriber in list(self.subscribers):
            self._call(subscriber.put_nowait, None)

    def release(self) -> None:
        assert self._release is not None
        self._call(self._release.set)


@contextlib.contextmanager
def stub_runtime(
    config_dir: Path, socket: Path | None = None, token_file: Path | None = None
) -> Iterator[StubRuntime]:
    """A `StubRuntime` on `socket` (default `<config dir>/ipc/runtime.sock`) expecting the token
    in `token_file` (default `<config dir>/token`, created when missing)."""
    runtime = StubRuntime(config_dir, socket, token_file).start()
    try:
        yield runtime
    finally:
        runtime.stop()
