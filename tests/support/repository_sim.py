"""A release repository simulator: GitHub's releases API and asset downloads on loopback HTTPS.

Tests point the updater at it instead of api.github.com and github.com; the updater talks to it
exactly as it talks to GitHub (same paths, same JSON shapes, real TLS), so nothing in the updater
knows it is being tested (the python-tuf RepositorySimulator idea, STYLE.md). It is a test
fixture, not part of the shipped package (it needs the test-only `trustme`).

Hosts. One server listens on 127.0.0.1 (a free port) and answers under two host names that
resolve to loopback everywhere without touching /etc/hosts: `api_host` "127.0.0.1" (the API,
like api.github.com) and `download_host` "localhost" (asset downloads, like github.com). Its
certificate, from a fresh `trustme` CA, names both. Clients trust the CA through `ca_file` (a PEM
file, also for subprocesses), `ca_pem` or `client_ssl_context()`. A redirect "to another host"
is a redirect to the other name: allow one name and not the other in the client's host allowlist
and the log shows whether the refused name was contacted. A name that does not resolve can be
used as a redirect target too (`Behavior(redirect_host="evil.invalid")`); a client that followed
it would fail to connect rather than show up in the log.

Endpoints:

- `GET /repos/{owner}/{repo}/releases?per_page=N&page=M`: newest-added first, drafts included,
  `per_page` 1..100 (default 30), as GitHub lists them to a maintainer.
- `GET /repos/{owner}/{repo}/releases/latest`: the newest-added non-draft, non-prerelease one.
- `GET /{owner}/{repo}/releases/download/{tag}/{name}`: an asset (`browser_download_url`, on the
  download host), and `GET /objects/{asset_id}`: the same bytes where a redirect of it leads.

Everything is programmable per release, per asset or for the API: drafts, prereleases, any tag
(malformed ones included), missing manifests, bodies from bytes or files, and a `Behavior`
(HTTP status, redirect to a host and scheme, throttled streaming, a lying Content-Length,
chunked transfer without a length, extra bytes beyond the listed size, a raw body override).
Every request is logged (`log`, `downloads()`) so a test can prove what was and was not fetched.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, unquote, urlsplit

import trustme

API_HOST = "127.0.0.1"
DOWNLOAD_HOST = "localhost"
_OBJECTS_PREFIX = "/objects/"
# A handler waits this long for the next request on a kept-alive connection (and for a TLS
# handshake) before it gives up; stop() ends idle connections sooner by shutting them down.
_IDLE_TIMEOUT = 5.0


@dataclass(frozen=True)
class Behavior:
    """How the simulator answers one kind of request (the default: 200 with the real body).

    - `status`: an HTTP status other than 200 answers with a short JSON error body.
    - `redirect_host`, `redirect_scheme`, `redirect_status`: answer with a redirect to the same
      resource on that host (assets: to `/objects/<id>`), e.g. to `download_host`, to a name
      outside the client's allowlist, or to `http`.
    - `chunk_size`, `chunk_delay`: stream the body in chunks with a pause after each (slow body).
    - `declared_length`: send this Content-Length whatever the body's size (a lie either way).
    - `chunked`: send no Content-Length, use chunked transfer encoding.
    - `extra_bytes`: append this many zero bytes (more than the asset's listed size).
    - `body`: serve these bytes instead of the resource (a malformed index, say).
    """

    status: int = 200
    redirect_host: str | None = None
    redirect_scheme: Literal["https", "http"] = "https"
    redirect_status: int = 302
    chunk_size: int = 64 * 1024
    chunk_delay: float = 0.0
    declared_length: int | None = None
    chunked: bool = False
    extra_bytes: int = 0
    body: bytes | None = None


@dataclass(frozen=True)
class LoggedRequest:
    """One request the simulator received: `path` without the query, `host` without the port,
    `time` from `time.time()` when the request arrived."""

    method: str
    host: str
    path: str
    query: str
    status: int
    time: float


@dataclass
class SimAsset:
    """A release asset: bytes in memory or a file streamed from disk."""

    id: int
    name: str
    source: bytes | Path
    content_type: str
    behavior: Behavior
    listed_size: int | None = None

    @property
    def size(self) -> int:
        """The size the index lists (`listed_size` if set, else the real size)."""
        return self.listed_size if self.listed_size is not None else self.real_size()

    def read(self, chunk_size: int) -> Iterator[bytes]:
        if isinstance(self.source, bytes):
            for start in range(0, len(self.source), chunk_size):
                yield self.source[start : start + chunk_size]
            return
        with self.source.open("rb") as stream:
            while chunk := stream.read(chunk_size):
                yield chunk

    def real_size(self) -> int:
        return len(self.source) if isinstance(self.source, bytes) else self.source.stat().st_size


@dataclass
class SimRelease:
    """A release in the index. Add assets with `add_asset`; fields may be changed in place."""

    simulator: ReleaseRepositorySimulator = field(repr=False)
    id: int
    tag: str
    name: str
    draft: bool
    prerelease: bool
    body: str
    published_at: str | None
    assets: list[SimAsset] = field(default_factory=list)

    def add_asset(
        self,
        name: str,
        source: bytes | Path,
        *,
        content_type: str = "application/octet-stream",
        listed_size: int | None = None,
        behavior: Behavior | None = None,
    ) -> SimAsset:
        """Publish `source` (bytes, or a file read on each download) as asset `name`."""
        asset = SimAsset(
            id=self.simulator._next_id(),
            name=name,
            source=source,
            content_type=content_type,
            behavior=behavior or Behavior(),
            listed_size=listed_size,
        )
        with self.simulator._lock:
            self.assets.append(asset)
        return asset

    def download_path(self, name: str) -> str:
        return f"/{self.simulator.repository}/releases/download/{self.tag}/{name}"

    def to_json(self) -> dict[str, Any]:
        sim = self.simulator
        return {
            "id": self.id,
            "tag_name": self.tag,
            "name": self.name,
            "draft": self.draft,
            "prerelease": self.prerelease,
            "published_at": self.published_at,
            "body": self.body,
            "assets": [
                {
                    "id": asset.id,
                    "name": asset.name,
                    "size": asset.size,
                    "state": "uploaded",
                    "content_type": asset.content_type,
                    "browser_download_url": sim.url(self.download_path(asset.name), host=sim.download_host),
                }
                for asset in self.assets
            ],
        }


class ReleaseRepositorySimulator:
    """GitHub releases for one repository, served over HTTPS on 127.0.0.1 in a background thread.

    Use as a context manager (`with ReleaseRepositorySimulator() as sim:`); the server and its
    connections stop on exit and the CA file is removed.
    """

    def __init__(
        self,
        repository: str = "herdr/herdr-mcp",
        *,
        api_host: str = API_HOST,
        download_host: str = DOWNLOAD_HOST,
    ) -> None:
        self.repository = repository
        self.api_host = api_host
        self.download_host = download_host
        self.api_behavior = Behavior()
        self._lock = threading.Lock()
        self._ids = 1000
        self._releases: list[SimRelease] = []
        self._log: list[LoggedRequest] = []
        self._ca = trustme.CA()
        self._server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._ca.issue_cert(api_host, download_host).configure_cert(self._server_context)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._tmp: Path | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Listen on a free port of 127.0.0.1 and serve in a background thread."""
        self._tmp = Path(tempfile.mkdtemp(prefix="herdr-release-sim-"))
        (self._tmp / "ca.pem").write_bytes(self.ca_pem)
        self._server = _Server(self, self._server_context)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="release-sim", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving, end open connections, join the threads and remove the CA file."""
        if self._server is not None:
            self._server.stopping.set()
            self._server.shutdown()
            self._server.close_connections()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> ReleaseRepositorySimulator:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- what clients need -------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the simulator is not running")
        return int(self._server.server_address[1])

    @property
    def ca_pem(self) -> bytes:
        """The CA certificate (PEM) that signed the server certificate."""
        return self._ca.cert_pem.bytes()

    @property
    def ca_file(self) -> Path:
        """A PEM file holding the CA, for clients and subprocesses (removed on stop)."""
        if self._tmp is None:
            raise RuntimeError("the simulator is not running")
        return self._tmp / "ca.pem"

    def client_ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts only this simulator's CA."""
        context = ssl.create_default_context()
        self._ca.configure_trust(context)
        return context

    def update_flags(self, repository_id: int) -> list[str]:
        """The `herdr-mcp update` flags that point discovery and downloads here."""
        return [
            "--repository", self.repository, "--repository-id", str(repository_id),
            "--api-url", self.api_base_url, "--ca-file", str(self.ca_file),
            *(f"--allowed-host={host}" for host in sorted(self.hosts)),
        ]  # fmt: skip

    @property
    def hosts(self) -> frozenset[str]:
        return frozenset({self.api_host, self.download_host})

    @property
    def api_base_url(self) -> str:
        """What to use instead of https://api.github.com."""
        return f"https://{self.api_host}:{self.port}"

    def url(self, path: str, *, host: str | None = None, scheme: str = "https") -> str:
        """An absolute URL of `path` on `host` (default: the API host) at the simulator's port."""
        return f"{scheme}://{host or self.api_host}:{self.port}{path}"

    # --- programming the repository -----------------------------------------------------------

    def add_release(
        self,
        tag: str,
        *,
        draft: bool = False,
        prerelease: bool | None = None,
        name: str | None = None,
        body: str = "",
        published_at: str | None = None,
    ) -> SimRelease:
        """Add a release (listed before every earlier one). `prerelease` defaults to whether the
        tag has a '-' (as the release workflow publishes it); drafts have no `published_at`."""
        release = SimRelease(
            simulator=self,
            id=self._next_id(),
            tag=tag,
            name=name if name is not None else tag,
            draft=draft,
            prerelease="-" in tag if prerelease is None else prerelease,
            body=body,
            published_at=None if draft else (published_at or "2026-01-01T00:00:00Z"),
        )
        with self._lock:
            self._releases.append(release)
        return release

    def releases(self) -> list[SimRelease]:
        with self._lock:
            return list(self._releases)

    # --- the request log -----------------------------------------------------------------------

    @property
    def log(self) -> list[LoggedRequest]:
        """Every request so far, oldest first."""
        with self._lock:
            return list(self._log)

    def clear_log(self) -> None:
        with self._lock:
            self._log.clear()

    def downloads(self) -> list[LoggedRequest]:
        """The requests for asset bytes (download URLs and the objects they redirect to)."""
        return [entry for entry in self.log if _is_download_path(entry.path, self.repository)]

    # --- internals -----------------------------------------------------------------------------

    def _next_id(self) -> int:
        with self._lock:
            self._ids += 1
            return self._ids

    def _record(self, entry: LoggedRequest) -> None:
        with self._lock:
            self._log.append(entry)

    def _find_asset(self, path: str) -> SimAsset | None:
        with self._lock:
            releases = list(self._releases)
        for release in releases:
            for asset in release.assets:
                if path in (release.download_path(asset.name), f"{_OBJECTS_PREFIX}{asset.id}"):
                    return asset
        return None


def _is_download_path(path: str, repository: str) -> bool:
    return path.startswith(_OBJECTS_PREFIX) or path.startswith(f"/{repository}/releases/download/")


class _Server(ThreadingHTTPServer):
    # Handler threads are joined on server_close(); stop() shuts their sockets down first.
    daemon_threads = False
    block_on_close = True

    def __init__(self, simulator: ReleaseRepositorySimulator, context: ssl.SSLContext) -> None:
        self.simulator = simulator
        self.context = context
        self.stopping = threading.Event()
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        raw, address = self.socket.accept()
        # The handshake happens in the handler's thread, so a silent client cannot stall accept().
        wrapped = self.context.wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
        with self.connections_lock:
            self.connections.add(wrapped)
        return wrapped, address

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self.connections_lock:
            connections = list(self.connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up mid-body are part of the tests; nothing to report."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = _IDLE_TIMEOUT
    server: _Server

    def handle(self) -> None:
        try:
            self.request.do_handshake()
        except (OSError, ssl.SSLError):
            return
        try:
            super().handle()
        except (OSError, ssl.SSLError):
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        """Requests go to the simulator's log, not to stderr."""

    def _unsupported(self) -> None:
        """Any other method is logged and answered 405, as the endpoints here are read-only."""
        host, path, query = self._target()
        self.server.simulator._record(LoggedRequest(self.command, host, path, query, 405, time.time()))
        self.close_connection = True
        self.send_response(405)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _unsupported

    def _target(self) -> tuple[str, str, str]:
        """The request's host (from the Host header, without the port), path and query."""
        split = urlsplit(self.path)
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0].lower()
        return host, unquote(split.path), split.query

    def do_GET(self) -> None:
        sim = self.server.simulator
        host, path, query = self._target()
        api_prefix = f"/repos/{sim.repository}/releases"
        if path in (api_prefix, f"{api_prefix}/latest"):
            behavior = sim.api_behavior if host == sim.api_host else Behavior()
            if path == api_prefix:
                status, body = self._index(sim, parse_qs(query))
            else:
                status, body = self._latest(sim)
            self._answer(host, path, query, behavior, status, body, "application/json; charset=utf-8")
            return
        asset = sim._find_asset(path)
        if asset is None:
            self._answer(host, path, query, Behavior(), 404, _error_body("Not Found"), "application/json")
            return
        behavior = asset.behavior
        if path.startswith(_OBJECTS_PREFIX) and behavior.redirect_host is not None:
            behavior = replace(behavior, redirect_host=None)
        self._answer(host, path, query, behavior, 200, asset, asset.content_type)

    # --- the API ----------------------------------------------------------------------------------

    @staticmethod
    def _index(sim: ReleaseRepositorySimulator, query: dict[str, list[str]]) -> tuple[int, bytes]:
        try:
            per_page = min(max(int(query.get("per_page", ["30"])[0]), 1), 100)
            page = max(int(query.get("page", ["1"])[0]), 1)
        except ValueError:
            return 400, _error_body("Bad Request")
        listed = list(reversed(sim.releases()))[(page - 1) * per_page : page * per_page]
        return 200, json.dumps([release.to_json() for release in listed]).encode()

    @staticmethod
    def _latest(sim: ReleaseRepositorySimulator) -> tuple[int, bytes]:
        for release in reversed(sim.releases()):
            if not release.draft and not release.prerelease:
                return 200, json.dumps(release.to_json()).encode()
        return 404, _error_body("Not Found")

    # --- answering -------------------------------------------------------------------------------

    def _answer(
        self,
        host: str,
        path: str,
        query: str,
        behavior: Behavior,
        status: int,
        content: bytes | SimAsset,
        content_type: str,
    ) -> None:
        sim = self.server.simulator
        if status == 200 and behavior.redirect_host is not None:
            status = behavior.redirect_status
        elif status == 200 and behavior.status != 200:
            status = behavior.status
        sim._record(LoggedRequest("GET", host, path, query, status, time.time()))
        if status in (301, 302, 303, 307, 308):
            target = f"{_OBJECTS_PREFIX}{content.id}" if isinstance(content, SimAsset) else path
            if query and not isinstance(content, SimAsset):
                target += f"?{query}"
            self.send_response(status)
            self.send_header(
                "Location", sim.url(target, host=behavior.redirect_host, scheme=behavior.redirect_scheme)
            )
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if status != 200:
            content, content_type = _error_body(f"HTTP {status}"), "application/json"
        if behavior.body is not None and status == 200:
            content = behavior.body
        self._stream(status, content, content_type, behavior)

    def _stream(self, status: int, content: bytes | SimAsset, content_type: str, behavior: Behavior) -> None:
        real = len(content) if isinstance(content, bytes) else content.real_size()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if behavior.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            declared = behavior.declared_length
            self.send_header(
                "Content-Length", str(real + behavior.extra_bytes if declared is None else declared)
            )
            if declared is not None:
                # The framing is a lie: this connection cannot carry another request.
                self.send_header("Connection", "close")
                self.close_connection = True
        self.end_headers()
        for chunk in self._chunks(content, behavior):
            if self.server.stopping.is_set():
                self.close_connection = True
                return
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" if behavior.chunked else chunk)
            self.wfile.flush()
            if behavior.chunk_delay and self.server.stopping.wait(behavior.chunk_delay):
                self.close_connection = True
                return
        if behavior.chunked:
            self.wfile.write(b"0\r\n\r\n")

    @staticmethod
    def _chunks(content: bytes | SimAsset, behavior: Behavior) -> Iterator[bytes]:
        size = max(behavior.chunk_size, 1)
        if isinstance(content, bytes):
            for start in range(0, len(content), size):
                yield content[start : start + size]
        else:
            yield from content.read(size)
        remaining = behavior.extra_bytes
        while remaining > 0:
            yield bytes(min(size, remaining))
            remaining -= size


def _error_body(message: str) -> bytes:
    return json.dumps({"message": message, "documentation_url": "https://docs.github.com/rest"}).encode()
