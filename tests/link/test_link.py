"""The link against REAL runtimes: two `herdr-mcp serve` processes (A and B, each with its own
config dir and token, one simulated Herdr behind both), registered and activated through the
generations API, and `herdr-mcp link` as a subprocess in front of them.

Which generation ran a command is visible in its output: each runtime is started with
`HERDR_LINK_TEST_GENERATION=<A|B>` in its environment and herdr_exec's shell inherits it. Side
effects are counted in files: every call appends one line to a file of its own.

The failure answers (503 not_delivered, 502 delivery_unknown) are driven in process against
stand-ins that refuse or swallow a request; SSE relaying and client disconnects go through a real
link in front of a stand-in generation that streams in steps the test controls.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx2
import pytest

from herdr_mcp.cli.generation import main as generation_main
from herdr_mcp.generations import (
    ControlFile,
    Generation,
    GenerationStore,
    Observation,
    activate,
    rollback,
)
from herdr_mcp.link.pointer import STATUS_POLL_S
from herdr_mcp.link.upstream import UpstreamPool
from tests.support.link_harness import (
    LINK_TOKEN,
    KeepAliveGeneration,
    Link,
    StandIn,
    free_port,
    generation_for,
    in_process_link,
    running_link,
    store_active,
)
from tests.support.logging_proxy import LoggingProxy, closed_port_url, proxy_env
from tests.support.runtime_harness import call_tool
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workstation_harness import MARK, LinkedGenerations, ab_generations

LEGACY_PROTOCOL = "2025-06-18"


World = LinkedGenerations


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with short_tmp_dir() as tmp, ab_generations(tmp) as generations:
        store = generations.store
        with running_link(store.state_dir, tmp / "link-token") as link:
            yield World(generations.a, generations.b, store, tmp, link)
        # Exited cleanly on SIGTERM, and no request broke inside the link along the way.
        assert link.process.returncode == 0
        assert "Traceback" not in link.stderr and "ERROR" not in link.stderr, link.stderr


def link_follows(link: Link, store: GenerationStore) -> dict[str, Any]:
    """Wait until the link has read the status file as it is now (its transition); return the
    link's health then. The link polls the file every STATUS_POLL_S, when a request comes."""
    seq = store.read_status().transition_seq
    return wait_until(
        lambda: (health := link.health())["transition_seq"] == seq and health,
        f"the link to read transition {seq}",
    )


def accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return False
    return True


def exec_args(command: str) -> dict[str, Any]:
    return {"workspace": "w1", "command": command}


@pytest.mark.slow
def test_bearer_health_and_tools_list(world: World) -> None:
    link = world.link
    assert link.token not in (world.a.token, world.b.token)
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in ({}, {"Authorization": f"Bearer {world.a.token}"}):
        refused = httpx2.post(link.url, json=request, headers=headers, timeout=5)
        assert refused.status_code == 401
        assert "link-token" in refused.json()["error_description"]

    health = link.health()
    assert (health["product"], health["active"], health["pointer_error"]) == ("herdr-mcp-link", "A", None)

    async def body() -> tuple[int, str]:
        async with link.client() as client:
            listed = await client.list_tools()
            ran = await call_tool(client, "herdr_exec", exec_args(f'echo "${MARK}"'))
            return len(listed.tools), ran["stdout"]

    assert run(body()) == (18, "A\n")


@dataclass
class Outcome:
    name: str
    generation: str
    finished: float


@pytest.mark.slow
def test_activation_and_rollback_under_load(world: World) -> None:
    """In-flight calls finish where they entered, new ones follow `active`, none fails or runs twice."""
    link, store, counters = world.link, world.store, world.tmp / "counters"
    outcomes: list[Outcome] = []

    async def call(name: str, command: str) -> None:
        async with link.client() as client:
            result = await call_tool(client, "herdr_exec", exec_args(command))
        assert "error" not in result and result["exit_code"] == 0, (name, result)
        outcomes.append(Outcome(name, result["stdout"].strip(), time.monotonic()))

    def held(name: str, release: Path) -> asyncio.Task[None]:
        """A call that runs until the test creates `release` (in flight for as long as it needs)."""
        hold = f"until [ -e {release} ]; do sleep 0.01; done"
        command = f'touch {counters}/started-{name}; {hold}; echo "${MARK}" >> {counters}/{name}'
        return asyncio.ensure_future(call(name, f'echo "${MARK}"; {command}'))

    def fast(name: str) -> asyncio.Task[None]:
        return asyncio.ensure_future(call(name, f'echo "${MARK}"; echo "${MARK}" >> {counters}/{name}'))

    async def started(names: list[str]) -> None:
        await wait_until_async(
            lambda: all((counters / f"started-{name}").exists() for name in names), f"{names} to start"
        )

    async def background(stop: asyncio.Event) -> int:
        count = 0
        while not stop.is_set():
            await asyncio.gather(*(fast(f"bg-{count + i}") for i in range(3)))
            count += 3
        return count

    async def body() -> tuple[float, float, dict[str, Any], int]:
        stop = asyncio.Event()
        load = asyncio.ensure_future(background(stop))
        wave1 = [f"w1-{i}" for i in range(12)]
        tasks = [held(name, world.tmp / "release-w1") for name in wave1]
        await started(wave1)
        # Switch to B while all of wave 1 runs on A.
        switch_at = time.monotonic()
        assert (await asyncio.to_thread(activate, store, "B")).outcome == "activated"
        during = await asyncio.to_thread(link_follows, link, store)
        (world.tmp / "release-w1").touch()
        wave2 = [f"w2-{i}" for i in range(8)]
        tasks += [held(name, world.tmp / "release-w2") for name in wave2]
        await started(wave2)
        back_at = time.monotonic()
        assert (await asyncio.to_thread(rollback, store)).outcome == "activated"
        await asyncio.to_thread(link_follows, link, store)
        (world.tmp / "release-w2").touch()
        tasks += [fast(f"w3-{i}") for i in range(6)]
        await asyncio.gather(*tasks)
        stop.set()
        return switch_at, back_at, during, await load

    switch_at, back_at, during, background_calls = run(body(), timeout=60)

    # Zero failed calls (`call` asserts each one), and every side effect happened exactly once.
    names = {outcome.name for outcome in outcomes}
    assert len(outcomes) == len(names) == 26 + background_calls >= 30
    for outcome in outcomes:
        assert (counters / outcome.name).read_text() == f"{outcome.generation}\n", outcome
    assert {path.name for path in counters.iterdir() if not path.name.startswith("started-")} == names

    by_name = {outcome.name: outcome for outcome in outcomes}
    # Wave 1 entered A, was still running on A after B became active, and finished on A.
    assert during["active"] == "B" and during["in_flight"].get("A", 0) >= 12, during
    for name in (f"w1-{i}" for i in range(12)):
        assert by_name[name].generation == "A" and by_name[name].finished > switch_at
    # Wave 2 entered B after the switch and finished on B although A was active again meanwhile.
    for name in (f"w2-{i}" for i in range(8)):
        assert by_name[name].generation == "B" and by_name[name].finished > back_at
    # New calls after the rollback went to A.
    assert {by_name[f"w3-{i}"].generation for i in range(6)} == {"A"}
    # Nothing stays leased once the load is over.
    health = world.link.health()
    assert health["active"] == "A"
    assert set(health["in_flight"].values()) == {0}


@pytest.mark.slow
def test_legacy_session_stays_on_its_generation(world: World) -> None:
    link, store = world.link, world.store
    headers = {
        "Authorization": f"Bearer {link.token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LEGACY_PROTOCOL,
    }

    def start_session(http: httpx2.Client) -> tuple[str, str]:
        initialize = {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": LEGACY_PROTOCOL, "capabilities": {},
                       "clientInfo": {"name": "legacy", "version": "1"}},
        }  # fmt: skip
        answer = http.post(link.url, json=initialize, headers=headers)
        assert answer.status_code == 200, answer.text
        session = answer.headers["mcp-session-id"]
        done = http.post(
            link.url,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers={**headers, "mcp-session-id": session},
        )
        assert done.status_code == 202
        return session, answer.headers["herdr-mcp-generation"]

    def whoami(http: httpx2.Client, session: str) -> tuple[int, str, str]:
        call = {
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "herdr_exec", "arguments": exec_args(f'echo "${MARK}"')},
        }  # fmt: skip
        answer = http.post(link.url, json=call, headers={**headers, "mcp-session-id": session})
        if answer.status_code != 200:
            return answer.status_code, answer.headers.get("herdr-mcp-generation", "link"), answer.text
        result = answer.json()["result"]["structuredContent"]
        return 200, answer.headers["herdr-mcp-generation"], result["stdout"]

    with httpx2.Client(timeout=30) as http:
        on_a, where = start_session(http)
        assert where == "A"
        assert activate(store, "B").outcome == "activated"
        link_follows(link, store)
        assert whoami(http, on_a) == (200, "A", "A\n")
        on_b, where = start_session(http)
        assert (where, whoami(http, on_b)) == ("B", (200, "B", "B\n"))
        # A session the link never saw goes to the active generation, which does not know it.
        assert whoami(http, "0123456789abcdef")[:2] == (404, "B")

        assert rollback(store).outcome == "activated"
        link_follows(link, store)
        assert whoami(http, on_b) == (200, "B", "B\n")
        ended = http.delete(link.url, headers={**headers, "mcp-session-id": on_a})
        assert (ended.status_code, ended.headers["herdr-mcp-generation"]) == (200, "A")
        pinned = link.health()["pinned_sessions"]

        # Removing B ends the sessions that lived in it: 404 tells the client to start over.
        assert generation_main(["--state-dir", str(store.state_dir), "remove", "B"]) == 0

        # The link reads the control file at its next poll; until then the session still runs on B.
        def refused_on_b() -> tuple[int, str, str] | None:
            answer = whoami(http, on_b)
            return None if answer[0] == 200 else answer

        status, where, text = wait_until(refused_on_b, "the link to read B's removal")
        assert (status, where, json.loads(text)["error"]["data"]["code"]) == (404, "link", "session_ended")
        assert link.health()["pinned_sessions"] == pinned - 1
        control = store.read_control()
        store.write_control(
            replace(control, generations=(*control.generations, generation_for("B", world.b))),
            expected_revision=control.revision,
        )


@pytest.mark.slow
def test_interrupted_activation_is_undone_by_the_link(world: World) -> None:
    """An activator SIGKILLed mid-observation leaves `observing` with B active: while it lives the
    link leaves B in place; once it is dead (the lock is free) new requests go back to A and the
    status file records the rollback."""
    link, store = world.link, world.store
    activator = subprocess.Popen(
        [
            sys.executable, "-c",
            "import sys, time\n"
            "from pathlib import Path\n"
            "from herdr_mcp.generations import GenerationStore, activate\n"
            "def hang(seconds):\n"
            "    print('observing', flush=True)\n"
            "    time.sleep(600)\n"
            "activate(GenerationStore.in_dir(Path(sys.argv[1])), 'B', sleep=hang)\n",
            str(store.state_dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip

    async def where() -> str:
        async with link.client() as client:
            ran = await call_tool(client, "herdr_exec", exec_args(f'echo "${MARK}"'))
        return str(ran["stdout"]).strip()

    try:
        assert activator.stdout is not None and activator.stdout.readline() == "observing\n"
        assert store.read_status().outcome == "observing"
        # A live activator holds the lock: the link routes to the candidate, as the gate set it.
        wait_until(lambda: link.health()["outcome"] == "observing", "the link to read `observing`")
        for _ in range(3):
            assert run(where()) == "B"
            time.sleep(STATUS_POLL_S * 1.2)  # the subject: the link checks again, the activator lives
        assert (store.read_status().outcome, store.read_status().active) == ("observing", "B")
        assert link.health()["outcome"] == "observing"
    finally:
        os.kill(activator.pid, signal.SIGKILL)
        activator.wait(10)
        if activator.stdout is not None:
            activator.stdout.close()
    wait_until(lambda: run(where()) == "A", "new requests to go back to A")
    wait_until(
        lambda: store.read_status().outcome == "rolled_back:activation_interrupted",
        "the status file to record the rollback",
    )
    status = store.read_status()
    assert (status.active, status.status_of("B").phase) == ("A", "failed")
    assert run(where()) == "A"
    assert (link.health()["active"], link.health()["outcome"]) == ("A", "rolled_back:activation_interrupted")


@pytest.mark.slow
@pytest.mark.parametrize("proxy_mode", ["forward", "fail", "unreachable"])
def test_activations_and_calls_through_the_link_send_nothing_through_a_proxy(
    world: World, tmp_path: Path, proxy_mode: str
) -> None:
    """Every proxy variable (both cases) names a recording proxy, one that fails, or a closed
    port, in the environment of `generation activate` and of `herdr-mcp link`: the generations'
    bearers go straight to them, activations succeed, calls through the link reach the active one."""
    store = GenerationStore.in_dir(tmp_path / "generations")
    store.write_control(
        ControlFile(
            generations=(generation_for("A", world.a), generation_for("B", world.b)),
            observation=Observation(2, 50),
        ),
        expected_revision=0,
    )
    with LoggingProxy("fail" if proxy_mode == "fail" else "forward") as proxy:
        env = proxy_env(closed_port_url() if proxy_mode == "unreachable" else proxy.url)

        def activate_in_a_process(name: str) -> None:
            command = [sys.executable, "-m", "herdr_mcp", "generation", "--state-dir", str(store.state_dir)]
            done = subprocess.run(
                [*command, "activate", name],
                capture_output=True,
                text=True,
                timeout=120,
                env={**os.environ, **env},
            )
            assert (done.returncode, done.stdout.split(":")[0]) == (0, "activated"), done.stderr

        activate_in_a_process("A")
        with running_link(store.state_dir, tmp_path / "link-token", env=env) as link:

            async def where() -> str:
                async with link.client() as client:
                    assert len((await client.list_tools()).tools) == 18
                    ran = await call_tool(client, "herdr_exec", exec_args(f'echo "${MARK}"'))
                return str(ran["stdout"]).strip()

            assert run(where()) == "A"
            activate_in_a_process("B")
            assert run(where()) == "B"
        assert proxy.requests() == []


# -- the failure answers, in process --------------------------------------------------------


class Swallower(StandIn):
    """A TCP server that reads one HTTP request, counts it, and closes after sending `answer`
    (nothing by default)."""

    def __init__(self, answer: bytes = b"") -> None:
        self.requests = 0
        self.answer = answer
        super().__init__()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = self._sock.accept()
                with connection:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = connection.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    self.requests += data.count(b"POST /mcp")
                    if self.answer:
                        connection.sendall(self.answer)


def in_process_post(store: GenerationStore, body: dict[str, Any], token: str = LINK_TOKEN) -> httpx2.Response:
    with in_process_link(store) as url:
        return httpx2.post(url, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=20)


def error_of(answer: httpx2.Response) -> tuple[int, object, str, str | None]:
    document = answer.json()
    data = document["error"]["data"]
    return answer.status_code, document["id"], data["code"], data.get("reason")


CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "herdr_inspect"}}


def test_nothing_sent_is_not_delivered(tmp_path: Path) -> None:
    dead = Generation("dead", f"http://127.0.0.1:{free_port()}")
    assert error_of(in_process_post(store_active(tmp_path / "a", dead, active="dead"), CALL)) == (
        503, 7, "not_delivered", "ConnectError",
    )  # fmt: skip
    assert error_of(in_process_post(store_active(tmp_path / "b", dead, active=None), CALL)) == (
        503, 7, "not_delivered", "no_active_generation",
    )  # fmt: skip
    assert (
        in_process_post(store_active(tmp_path / "c", dead, active="dead"), CALL, "wrong").status_code == 401
    )


def test_sent_but_unanswered_is_delivery_unknown_and_never_retried(tmp_path: Path) -> None:
    swallower = Swallower()
    try:
        store = store_active(tmp_path, Generation("mute", swallower.endpoint), active="mute")
        assert error_of(in_process_post(store, CALL))[:3] == (502, 7, "delivery_unknown")
    finally:
        swallower.close()
    assert swallower.requests == 1


@pytest.mark.parametrize("bad", [b"a\rb", b"a\nb", b"a\x00b"], ids=["bare-cr", "bare-lf", "nul"])
def test_an_answer_head_the_link_cannot_relay_safely_is_delivery_unknown(tmp_path: Path, bad: bytes) -> None:
    # Relayed as is, a bare CR or a NUL in a header could split or corrupt the head the client gets.
    answer = b"HTTP/1.1 200 OK\r\nX-Bad: " + bad + b"\r\nContent-Length: 2\r\n\r\n{}"
    generation = Swallower(answer)
    try:
        store = store_active(tmp_path, Generation("odd", generation.endpoint), active="odd")
        assert error_of(in_process_post(store, CALL))[:3] == (502, 7, "delivery_unknown")
    finally:
        generation.close()
    assert generation.requests == 1


@pytest.mark.slow
def test_generation_refusing_the_links_bearer_is_not_delivered(world: World, tmp_path: Path) -> None:
    wrong = replace(generation_for("A", world.a), token_file=None)
    store = store_active(tmp_path, wrong, active="A")
    assert error_of(in_process_post(store, CALL)) == (503, 7, "not_delivered", "generation_unauthorized")


def in_process_posts(store: GenerationStore, count: int, pause_s: float) -> list[httpx2.Response]:
    """`count` calls through one in-process link, `pause_s` apart."""
    answers = []
    with in_process_link(store) as url, httpx2.Client(timeout=20) as http:
        for _ in range(count):
            answers.append(http.post(url, json=CALL, headers={"Authorization": f"Bearer {LINK_TOKEN}"}))
            time.sleep(pause_s)  # the subject: the pooled connection idles (past the generation's limit)
    return answers


@pytest.mark.parametrize(("idle_close_s", "pause_s"), [(0.0, 0.05), (0.05, 0.2)])
def test_generation_closing_idle_keepalive_connections_is_not_a_failure(
    tmp_path: Path, idle_close_s: float, pause_s: float
) -> None:
    """A pooled connection the generation closed is found closed before anything is written on it,
    so the call goes on a new connection: every call answered, each one received exactly once."""
    upstream = KeepAliveGeneration(idle_close_s)
    try:
        store = store_active(tmp_path, Generation("idle", upstream.endpoint), active="idle")
        answers = in_process_posts(store, 4, pause_s)
    finally:
        upstream.close()
    assert [answer.status_code for answer in answers] == [200] * 4
    assert [answer.json()["result"]["n"] for answer in answers] == [1, 2, 3, 4]
    assert (upstream.requests, upstream.connections) == (4, 4)


def test_closed_pooled_connection_is_detected_before_writing(tmp_path: Path) -> None:
    """The generation's FIN reached the pooled socket after the first exchange: the pre-write check
    (MSG_PEEK) finds the connection closed, so the second request goes on a new connection."""
    upstream = KeepAliveGeneration(0.0)
    pool = UpstreamPool()
    statuses = []
    try:
        for _ in range(2):
            answer = pool.request(upstream.endpoint, b"POST", b"/mcp", [], b"{}")
            while not answer.done:
                answer.read()
            answer.close()
            statuses.append(answer.status)
            assert pool.idle_count() == 1  # pooled: nothing has noticed the close yet
            # The generation closed its side (its FIN is on the pooled socket once close() returned).
            wait_until(lambda: upstream.closed == len(statuses), "the generation to close the connection")
    finally:
        pool.close()
        upstream.close()
    assert statuses == [200, 200]
    assert (upstream.requests, upstream.connections) == (2, 2)


def test_keepalive_connection_is_reused(tmp_path: Path) -> None:
    upstream = KeepAliveGeneration(5.0)
    try:
        store = store_active(tmp_path, Generation("warm", upstream.endpoint), active="warm")
        answers = in_process_posts(store, 5, 0.0)
    finally:
        upstream.close()
    assert [answer.status_code for answer in answers] == [200] * 5
    assert (upstream.requests, upstream.connections) == (5, 1)


# -- streaming, through a real link ---------------------------------------------------------


class EventStreamGeneration(http.server.ThreadingHTTPServer):
    """A stand-in generation whose /mcp answers an SSE stream in steps the test controls."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _EventStreamHandler)
        self.release = threading.Event()
        self.closed = threading.Event()
        self.endpoint = f"http://127.0.0.1:{self.server_address[1]}"


class _EventStreamHandler(http.server.BaseHTTPRequestHandler):
    server: EventStreamGeneration

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        try:
            self._event("data: one")
            if self.headers.get("x-test-mode") == "hold":
                while True:  # until the link closes the connection
                    time.sleep(0.05)  # the subject: a stream that keeps sending, slowly
                    self._event(": ping")
            # Generous: under load the test may take many seconds to release the second event,
            # and a stand-in that gave up would end the stream with "buffered" instead.
            released = self.server.release.wait(120)
            self._event("data: two" if released else "data: buffered")
        except OSError:
            self.server.closed.set()

    def _event(self, line: str) -> None:
        self.wfile.write(f"{line}\n\n".encode())
        self.wfile.flush()

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def streaming(tmp_path: Path) -> Iterator[tuple[Link, EventStreamGeneration]]:
    upstream = EventStreamGeneration()
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    token_file = tmp_path / "sse-token"
    token_file.write_text("z" * 32)
    token_file.chmod(0o600)
    store = store_active(
        tmp_path / "generations",
        Generation("sse", upstream.endpoint, token_file=str(token_file)),
        active="sse",
    )
    try:
        with running_link(store.state_dir, tmp_path / "link-token") as link:
            yield link, upstream
    finally:
        upstream.release.set()  # no handler keeps waiting for a release that will not come
        upstream.shutdown()
        upstream.server_close()
        thread.join(5)


def test_event_stream_is_relayed_as_it_arrives(streaming: tuple[Link, EventStreamGeneration]) -> None:
    link, upstream = streaming
    headers = {"Authorization": f"Bearer {link.token}", "Accept": "text/event-stream"}
    events: list[str] = []
    with (
        httpx2.Client(timeout=20) as http,
        http.stream("POST", link.url, json=CALL, headers=headers) as answer,
    ):
        assert answer.headers["content-type"] == "text/event-stream"
        assert answer.headers["herdr-mcp-generation"] == "sse"
        for line in answer.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                # The second event is produced only after the first one came through the link.
                upstream.release.set()
    assert events == ["one", "two"]


def test_client_leaving_ends_the_upstream_exchange_and_its_lease(
    streaming: tuple[Link, EventStreamGeneration],
) -> None:
    link, upstream = streaming
    headers = {"Authorization": f"Bearer {link.token}", "Accept": "text/event-stream", "x-test-mode": "hold"}
    with (
        httpx2.Client(timeout=20) as http,
        http.stream("POST", link.url, json=CALL, headers=headers) as answer,
    ):
        lines = answer.iter_lines()
        assert (next(lines), next(lines), next(lines)) == ("data: one", "", ": ping")
        assert link.health()["in_flight"] == {"sse": 1}
    assert upstream.closed.wait(10)
    wait_until(lambda: link.health()["in_flight"] == {"sse": 0}, "the lease to end")


def test_sigterm_lets_a_call_in_flight_finish_then_exits_cleanly(
    streaming: tuple[Link, EventStreamGeneration],
) -> None:
    """SIGTERM (a service manager's stop): no new connections, the call in flight is answered to
    its end, then exit 0."""
    link, upstream = streaming
    headers = {"Authorization": f"Bearer {link.token}", "Accept": "text/event-stream"}
    port = int(link.base.rsplit(":", 1)[1])
    with (
        httpx2.Client(timeout=20) as http,
        http.stream("POST", link.url, json=CALL, headers=headers) as answer,
    ):
        lines = answer.iter_lines()
        assert next(lines) == "data: one"
        link.process.send_signal(signal.SIGTERM)
        wait_until(lambda: not accepts(port), "the link to stop accepting connections after SIGTERM")
        assert link.process.poll() is None  # still answering the call in flight
        upstream.release.set()
        rest = [line for line in lines if line]
    assert rest == ["data: two"]
    assert link.process.wait(timeout=60) == 0
