"""A link for tests: `herdr-mcp link` as a subprocess (`running_link`), a link in this process
(`in_process_link`), and loopback stand-ins for a generation (`StandIn`, `KeepAliveGeneration`)
that read requests byte by byte (`read_request`)."""

from __future__ import annotations

import abc
import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client

from herdr_mcp.generations import ControlFile, Generation, GenerationStore, StatusFile
from herdr_mcp.link import LinkConfig, LinkHandler, LinkServer
from herdr_mcp.loopback import bind_loopback
from tests.support.runtime_harness import RunningRuntime, close_pipes, mcp_client, stop_process

LINK_TOKEN = "link-token-" + "x" * 20


@dataclass
class Link:
    url: str
    token: str
    process: subprocess.Popen[str]
    stderr: str = ""

    @property
    def base(self) -> str:
        return self.url.removesuffix("/mcp")

    def client(self) -> contextlib.AbstractAsyncContextManager[Client]:
        return mcp_client(self.url, self.token)

    def health(self) -> dict[str, Any]:
        answer = httpx2.get(f"{self.base}/health", timeout=5)
        assert answer.status_code == 200
        document: dict[str, Any] = answer.json()
        return document


def generation_for(name: str, runtime: RunningRuntime) -> Generation:
    """The generation record of a test runtime: its base URL and its own token file."""
    return Generation(name, runtime.base, token_file=str(runtime.config_dir / "token"))


@contextlib.contextmanager
def running_link(state_dir: Path, token_file: Path, env: dict[str, str] | None = None) -> Iterator[Link]:
    """`herdr-mcp link --port 0` through its `main` (the subcommand is wired by the CLI), with
    `env` over this process's environment."""
    command = [
        sys.executable, "-c", "import sys; from herdr_mcp.cli.link import main; sys.exit(main(sys.argv[1:]))",
        "--state-dir", str(state_dir), "--token-file", str(token_file), "--port", "0",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}
    )
    link: Link | None = None
    try:
        found: list[str] = []
        reader = threading.Thread(
            target=lambda: found.append(process.stdout.readline() if process.stdout else "")
        )
        reader.start()
        reader.join(30)
        prefix = "herdr-mcp link serving "
        if not found or not found[0].startswith(prefix):
            process.kill()
            raise RuntimeError(f"link did not start: {found!r}")
        link = Link(found[0][len(prefix) :].strip(), token_file.read_text().strip(), process)
        yield link
    finally:
        stop_process(process)
        if link is not None and process.stderr is not None:
            link.stderr = process.stderr.read()
        close_pipes(process)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class StandIn(abc.ABC):
    """A loopback TCP stand-in for a generation: `_serve` runs in a thread from the start (set
    what it uses before calling `__init__`); `close()` stops it."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self.endpoint = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @abc.abstractmethod
    def _serve(self) -> None: ...

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
        self._sock.close()
        self._thread.join(5)


def read_request(connection: socket.socket, buffer: bytearray) -> tuple[bytes, bytes] | None:
    """The next request off `connection` (bytes already received wait in `buffer`): its head with
    the blank line, and its body by Content-Length; None when the connection ends first."""
    while b"\r\n\r\n" not in buffer:
        data = connection.recv(65536)
        if not data:
            return None
        buffer += data
    end = buffer.index(b"\r\n\r\n") + 4
    head = bytes(buffer[:end])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(buffer) < end + length:
        data = connection.recv(65536)
        if not data:
            return None
        buffer += data
    body = bytes(buffer[end : end + length])
    del buffer[: end + length]
    return head, body


@contextlib.contextmanager
def in_process_link(store: GenerationStore) -> Iterator[str]:
    """A link (its server and handler, in this process) on a free loopback port; yields its /mcp URL."""
    link = LinkHandler(LinkConfig(store, LINK_TOKEN, store.state_dir / "t", token_reader=lambda _: "y" * 32))
    server = LinkServer(bind_loopback("127.0.0.1", 0), link).start()
    try:
        yield f"http://127.0.0.1:{server.port}/mcp"
    finally:
        server.close()
        link.close()


def store_active(state_dir: Path, *specs: Generation, active: str | None) -> GenerationStore:
    store = GenerationStore.in_dir(state_dir)
    store.write_control(ControlFile(generations=specs), expected_revision=0)
    with store.locked():
        store.write_status_locked(StatusFile(active=active))
    return store


_TCP_CLOSE_WAIT = "08"


def saw_fin_from(port: int) -> bool:
    """Whether a loopback TCP connection to `port` has received its peer's FIN (is in CLOSE_WAIT),
    from /proc/net/tcp: the moment a FIN has crossed loopback, without sleeping for it."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table, encoding="ascii") as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if fields[2].rsplit(":", 1)[1] == f"{port:04X}" and fields[3] == _TCP_CLOSE_WAIT:
                    return True
    return False


class KeepAliveGeneration(StandIn):
    """A stand-in generation answering HTTP/1.1 keep-alive, which closes a connection once it was
    idle for `idle_close_s` after an answer (0: at once, without saying `Connection: close`).
    `closed` counts the connections it has closed (after `close()` returned)."""

    def __init__(self, idle_close_s: float) -> None:
        self.idle_close_s = idle_close_s
        self.requests = 0
        self.connections = 0
        self.closed = 0
        self._closed_lock = threading.Lock()
        super().__init__()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = self._sock.accept()
                self.connections += 1
                threading.Thread(target=self._handle, args=(connection,), daemon=True).start()

    def _handle(self, connection: socket.socket) -> None:
        try:
            self._exchange(connection)
        finally:
            with self._closed_lock:
                self.closed += 1

    def _exchange(self, connection: socket.socket) -> None:
        with connection, contextlib.suppress(OSError):
            buffer = bytearray()
            answered = 0
            while True:
                idle = not buffer and answered > 0
                if idle and not select.select([connection], [], [], self.idle_close_s)[0]:
                    return  # idle too long: close, as uvicorn does after its keep-alive timeout
                if read_request(connection, buffer) is None:
                    return
                self.requests += 1
                answered += 1
                answer = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"n": self.requests}}).encode()
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(answer), answer)
                )
