"""A real runtime for end-to-end tests, two ways.

`running_runtime`: `herdr-mcp serve` as a subprocess on a loopback port, for tests whose subject
is the transport or the process (serve, signals, restarts, the link). `in_process_runtime`: the
same ASGI app (`build_app`) served in the test's event loop through httpx's ASGI transport, its
lifespan run as uvicorn runs it, for tests about what the tools do: no process start, no socket.

The simulator runs in the test process (a `SimulatorThread`) so tests can script agents and
inject faults; the runtime talks to it over its Unix socket exactly as it would to Herdr, and
tests talk to the runtime with the `mcp` SDK's client over Streamable HTTP. One client (one MCP
session) per test where the test is not about sessions: `async with runtime.client() as client`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.types import ASGIApp, Message

from herdr_mcp.local_http import local_async_client
from herdr_mcp.runtime.app import build_app
from herdr_mcp.runtime.config import RuntimeConfig
from herdr_mcp.runtime.dispatcher import ToolDispatcher
from herdr_mcp.runtime.services import Services

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
}
START_TIMEOUT_S = 30.0


def path_without_rg(tmp: Path) -> str:
    """A PATH holding only git (a link in `tmp/bin`): the runtime has no ripgrep there and uses
    its Python grep engine."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    git_program = shutil.which("git")
    assert git_program is not None
    (bin_dir / "git").symlink_to(git_program)
    assert shutil.which("rg", path=str(bin_dir)) is None
    return str(bin_dir)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
        timeout=30,
    ).stdout


def make_repo(path: Path, files: dict[str, bytes]) -> Path:
    """A real Git repository at `path` with `files` committed."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    for name, data in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


@dataclass
class RunningRuntime:
    url: str
    token: str
    process: subprocess.Popen[str]
    config_dir: Path

    @property
    def base(self) -> str:
        return self.url.removesuffix("/mcp")

    def client(self) -> contextlib.AbstractAsyncContextManager[Client]:
        return mcp_client(self.url, self.token)

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call one tool; return its structured result, or `{"error": ...}` for a refusal."""
        async with self.client() as client:
            return await call_tool(client, name, arguments)


@contextlib.asynccontextmanager
async def mcp_client(url: str, token: str) -> AsyncIterator[Client]:
    """An `mcp` SDK client over Streamable HTTP to `url`, sending `token` as the bearer."""
    async with (
        local_async_client(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


@contextlib.contextmanager
def two_runtimes(
    tmp: Path, *, env_a: dict[str, str] | None = None, env_b: dict[str, str] | None = None
) -> Iterator[tuple[RunningRuntime, RunningRuntime]]:
    """A simulator workspace (a real Git repository under `tmp`) and two runtimes A and B on it,
    each with its own config dir (`tmp/config-a`, `tmp/config-b`) and so its own token."""
    from herdr_mcp.sim import SimConfig, SimulatorThread

    repo = make_repo(tmp / "repo", {"README.md": b"# demo\n"})
    with (
        SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"),
        running_runtime(tmp / "herdr.sock", tmp / "config-a", env=env_a) as a,
        running_runtime(tmp / "herdr.sock", tmp / "config-b", env=env_b) as b,
    ):
        yield a, b


async def call_tool(client: Client, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    result = await client.call_tool(name, arguments or {})
    structured = result.structured_content
    assert isinstance(structured, dict), result
    assert ("error" in structured) == bool(result.is_error), structured
    return structured


@contextlib.contextmanager
def running_runtime(
    herdr_socket: Path, config_dir: Path, extra: Sequence[str] = (), env: dict[str, str] | None = None
) -> Iterator[RunningRuntime]:
    """Start `herdr-mcp serve --no-sim` on a free port; stop it (SIGTERM, then SIGKILL) after."""
    command = [
        sys.executable, "-m", "herdr_mcp", "serve", "--no-sim", "--port", "0",
        "--herdr-socket", str(herdr_socket), "--config-dir", str(config_dir), *extra,
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        line = _first_line(process)
        prefix = "herdr-mcp serving "
        if not line.startswith(prefix):
            process.kill()
            raise RuntimeError(
                f"runtime did not start: {line!r} {process.stderr.read() if process.stderr else ''}"
            )
        token = (config_dir / "token").read_text(encoding="utf-8").strip()
        yield RunningRuntime(
            url=line[len(prefix) :].strip(), token=token, process=process, config_dir=config_dir
        )
    finally:
        stop_process(process)
        close_pipes(process)


#: The runtime's own answer to the SDK's Host check (DNS-rebinding protection): loopback with a port.
IN_PROCESS_URL = "http://127.0.0.1:8765/mcp"
IN_PROCESS_TOKEN = "in-process-" + "t" * 32


@dataclass
class InProcessRuntime:
    """The runtime app in this event loop; `client()`, `call()` and `base` as `RunningRuntime`."""

    app: ASGIApp
    services: Services
    config_dir: Path
    token: str = IN_PROCESS_TOKEN
    url: str = IN_PROCESS_URL

    @property
    def base(self) -> str:
        return self.url.removesuffix("/mcp")

    def http(self, **headers: str) -> httpx2.AsyncClient:
        """An HTTP client to the app (bearer included; `headers` override)."""
        return httpx2.AsyncClient(
            transport=httpx2.ASGITransport(self.app),
            base_url=self.base,
            headers={"Authorization": f"Bearer {self.token}", **headers},
            timeout=60,
        )

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[Client]:
        async with self.http() as http, Client(streamable_http_client(self.url, http_client=http)) as client:
            yield client

    async def call(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call one tool in a session of its own; tests that call more use one `client()`."""
        async with self.client() as client:
            return await call_tool(client, name, arguments)


@contextlib.asynccontextmanager
async def in_process_runtime(
    herdr_socket: Path,
    config_dir: Path,
    *,
    read_only: bool = False,
    write_roots: tuple[Path, ...] | None = None,
    allow_herdr_classes: frozenset[str] = frozenset(),
) -> AsyncIterator[InProcessRuntime]:
    """The runtime `herdr-mcp serve --no-sim` would serve, composed by `build_app` and served in
    this event loop: its lifespan runs (session manager, event feed, task reconciler) for as long
    as the block; on the way out the lifespan shutdown, then the audit log and state close."""
    config = RuntimeConfig(
        config_dir=config_dir,
        herdr_socket=herdr_socket,
        read_only=read_only,
        write_roots=write_roots,
        allow_herdr_classes=allow_herdr_classes,
    )
    services = Services.create(config)
    dispatcher = ToolDispatcher(services)
    app = build_app(services, IN_PROCESS_TOKEN, dispatcher)
    try:
        async with _lifespan(app):
            yield InProcessRuntime(app, services, config_dir)
    finally:
        dispatcher.audit.close()
        services.state.close()


class ToolSession:
    """One MCP session to an in-process runtime for a synchronous test: the runtime and the
    client live in an event loop on a thread of their own; `call` waits for each answer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, client: Client, runtime: InProcessRuntime) -> None:
        self._loop = loop
        self._client = client
        self.runtime = runtime

    @property
    def config_dir(self) -> Path:
        return self.runtime.config_dir

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call one tool in this session; its structured result, or `{"error": ...}`."""
        answer = asyncio.run_coroutine_threadsafe(call_tool(self._client, name, arguments), self._loop)
        return answer.result(timeout=START_TIMEOUT_S * 4)


@contextlib.contextmanager
def in_process_session(herdr_socket: Path, config_dir: Path, **options: Any) -> Iterator[ToolSession]:
    """`in_process_runtime` (with `options`) and one client to it, for a synchronous test."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="in-process-runtime", daemon=True)
    thread.start()
    ready: concurrent.futures.Future[ToolSession] = concurrent.futures.Future()
    stop = asyncio.Event()

    async def hold() -> None:
        # One task enters and leaves the runtime and the client (anyio's scopes require it).
        try:
            async with (
                in_process_runtime(herdr_socket, config_dir, **options) as runtime,
                runtime.client() as client,
            ):
                ready.set_result(ToolSession(loop, client, runtime))
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    held = asyncio.run_coroutine_threadsafe(hold(), loop)
    try:
        yield ready.result(timeout=START_TIMEOUT_S)
    finally:
        loop.call_soon_threadsafe(stop.set)
        try:
            held.result(timeout=START_TIMEOUT_S)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(START_TIMEOUT_S)
            loop.close()


@contextlib.asynccontextmanager
async def _lifespan(app: ASGIApp) -> AsyncIterator[None]:
    """Run the ASGI lifespan protocol as a server does: startup before the block, shutdown after."""
    to_app: asyncio.Queue[Message] = asyncio.Queue()
    from_app: asyncio.Queue[Message] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}

    async def serve() -> None:
        await app(scope, to_app.get, from_app.put)

    task = asyncio.create_task(serve())
    await to_app.put({"type": "lifespan.startup"})
    started = await from_app.get()
    if started["type"] != "lifespan.startup.complete":
        await task
        raise RuntimeError(f"the runtime did not start: {started}")
    try:
        yield
    finally:
        await to_app.put({"type": "lifespan.shutdown"})
        stopped = await from_app.get()
        await task
        assert stopped["type"] == "lifespan.shutdown.complete", stopped


def stop_process(process: subprocess.Popen[str]) -> None:
    """SIGTERM, and SIGKILL if it is still running 15 s later."""
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


def close_pipes(process: subprocess.Popen[str]) -> None:
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def _first_line(process: subprocess.Popen[str]) -> str:
    found: list[str] = []
    reader = threading.Thread(
        target=lambda: found.append(process.stdout.readline() if process.stdout else "")
    )
    reader.start()
    reader.join(START_TIMEOUT_S)
    if not found:
        process.kill()
        raise RuntimeError("runtime printed nothing within the start timeout")
    return found[0]


def text_of(result: dict[str, Any]) -> str:
    return json.dumps(result, sort_keys=True)
