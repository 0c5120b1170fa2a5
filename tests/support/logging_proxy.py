"""A real HTTP proxy on loopback that records every request it receives, for proxy-leak tests.

`LoggingProxy(mode)` listens on 127.0.0.1 (a free port) in a thread. Each connection's request
line and headers are recorded in `seen` (a `Seen` per request, the Authorization and
Proxy-Authorization headers included, which is what a leak test looks for), then:

- `mode="forward"`: behaves like a proxy. `CONNECT host:port` is answered 200 and tunnelled to
  the target, or to `tunnel_to` when set (so a test can send a name that does not resolve, say
  api.github.com, to a loopback server); an absolute-form request (`GET http://host:port/path`)
  is sent on to the target in origin form with `Connection: close` and the answer relayed.
- `mode="fail"`: answers 502 and closes, as a proxy that cannot reach anything does.

`proxy_env(url)` is the set of proxy variables (upper and lower case) pointing at a proxy, for
the environment of a subprocess or `monkeypatch.setenv`. `closed_port_url()` is a proxy URL on
a loopback port nothing listens on (an unreachable proxy).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from dataclasses import dataclass
from typing import Literal

from herdr_mcp.local_http import is_loopback_address

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


@dataclass(frozen=True)
class Seen:
    """One request the proxy received: its request line and headers (names lower-cased)."""

    request_line: str
    headers: tuple[tuple[str, str], ...]

    def header(self, name: str) -> str | None:
        return next((value for key, value in self.headers if key == name), None)

    @property
    def host(self) -> str:
        """The host the request was for (`CONNECT host:port` or `GET http://host:port/...`)."""
        target = self.request_line.split(" ")[1]
        authority = target.split("://", 1)[-1].split("/", 1)[0]
        return authority.rpartition(":")[0].strip("[]") if ":" in authority else authority

    @property
    def to_this_machine(self) -> bool:
        """Whether the request was for a loopback host (127.0.0.0/8, ::1, localhost)."""
        return self.host == "localhost" or is_loopback_address(self.host)


def proxy_env(url: str) -> dict[str, str]:
    """HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and their lower-case forms, all set to `url`; NO_PROXY
    and no_proxy emptied so nothing in the caller's environment exempts loopback."""
    env = {name: url for variable in PROXY_VARIABLES for name in (variable, variable.lower())}
    return env | {"NO_PROXY": "", "no_proxy": ""}


def closed_port_url() -> str:
    """`http://127.0.0.1:<port>` with nothing listening on the port (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class LoggingProxy:
    """The recording proxy of the module docstring; a context manager that stops it on exit."""

    def __init__(
        self, mode: Literal["forward", "fail"] = "forward", tunnel_to: tuple[str, int] | None = None
    ):
        self.mode = mode
        self.tunnel_to = tunnel_to
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def __enter__(self) -> LoggingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def requests(self) -> list[Seen]:
        """What the proxy received so far."""
        with self._lock:
            return list(self.seen)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
        self._listener.close()
        self._accepting.join(5)
        for thread in self._threads:
            thread.join(5)

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._handle, args=(connection,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _handle(self, connection: socket.socket) -> None:
        with connection, contextlib.suppress(OSError):
            connection.settimeout(30)
            request = _read_request(connection)
            if request is None:
                return
            head, body = request
            lines = head.decode("latin-1").split("\r\n")
            headers = []
            for line in lines[1:]:
                name, colon, value = line.partition(":")
                if colon:
                    headers.append((name.strip().lower(), value.strip()))
            with self._lock:
                self.seen.append(Seen(lines[0], tuple(headers)))
            if self.mode == "fail":
                connection.sendall(
                    b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                )
                return
            method, target, _ = lines[0].split(" ", 2)
            if method == "CONNECT":
                self._tunnel(connection, target)
            else:
                self._forward(connection, method, target, headers, body)

    def _tunnel(self, connection: socket.socket, target: str) -> None:
        host, _, port = target.rpartition(":")
        address = self.tunnel_to or (host.strip("[]"), int(port))
        with socket.create_connection(address, timeout=30) as upstream:
            connection.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            _pipe(connection, upstream)

    def _forward(
        self, connection: socket.socket, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> None:
        rest = target.split("://", 1)[1]
        authority, _, path = rest.partition("/")
        host, _, port = authority.rpartition(":")
        kept = [
            (name, value) for name, value in headers if not name.startswith("proxy-") and name != "connection"
        ]
        head = f"{method} /{path} HTTP/1.1\r\n" + "".join(f"{name}: {value}\r\n" for name, value in kept)
        with socket.create_connection((host.strip("[]"), int(port or 80)), timeout=30) as upstream:
            upstream.sendall(head.encode("latin-1") + b"connection: close\r\n\r\n" + body)
            while data := upstream.recv(65536):
                connection.sendall(data)


def _read_request(connection: socket.socket) -> tuple[bytes, bytes] | None:
    """The request head (without the blank line) and its body by Content-Length; None when the
    connection ends first."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        data = connection.recv(65536)
        if not data:
            return None
        buffer += data
    head, _, body = buffer.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        data = connection.recv(65536)
        if not data:
            return None
        body += data
    return head, body


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    sockets = [a, b]
    while True:
        readable, _, _ = select.select(sockets, [], [], 30)
        if not readable:
            return
        for source in readable:
            data = source.recv(65536)
            if not data:
                return
            (b if source is a else a).sendall(data)
