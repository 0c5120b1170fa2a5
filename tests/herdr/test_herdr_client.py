"""The Herdr socket client, over real Unix sockets: against the simulator, and against scripted
peers that misbehave (never answer, oversized lines, foreign ids, invalid JSON)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.herdr import (
    MAX_LINE_BYTES,
    HerdrClient,
    HerdrError,
    HerdrEvent,
    HerdrProtocolError,
    HerdrRemoteError,
    HerdrRequestTooLarge,
    HerdrTimeout,
    HerdrUnavailable,
    default_socket_path,
)
from herdr_mcp.herdr.reference import SUPPORTED_PROTOCOLS, load
from herdr_mcp.runtime.native import RUNTIME_METHODS
from herdr_mcp.sim import AgentScript, ScriptStep
from tests.support.sim_helpers import fast_script, run, running_sim, short_tmp_dir, two_project_config
from tests.support.waiting import poll_until, wait_until_async

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


# -- socket path -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"HERDR_SOCKET_PATH": "/run/x/h.sock", "XDG_CONFIG_HOME": "/xdg"}, "/run/x/h.sock"),
        ({"XDG_CONFIG_HOME": "/xdg", "HOME": "/home/u"}, "/xdg/herdr/herdr.sock"),
        ({"HOME": "/home/u"}, "/home/u/.config/herdr/herdr.sock"),
        ({"XDG_CONFIG_HOME": "relative/dir", "HOME": "/home/u"}, "/home/u/.config/herdr/herdr.sock"),
        ({"HERDR_SOCKET_PATH": "", "HOME": "/home/u"}, "/home/u/.config/herdr/herdr.sock"),
        ({"HERDR_SESSION": "work", "HOME": "/home/u"}, "/home/u/.config/herdr/sessions/work/herdr.sock"),
        ({"HERDR_SESSION": "../evil", "HOME": "/home/u"}, "/home/u/.config/herdr/herdr.sock"),
    ],
)
def test_default_socket_path_follows_herdr_resolution(env: dict[str, str], expected: str) -> None:
    assert default_socket_path(env) == Path(expected)


# -- against the simulator ---------------------------------------------------------------------


def test_read_methods_return_herdr_shapes(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (_, client):
            pong = await client.call("ping")
            assert pong["type"] == "pong"
            assert pong["protocol"] == 22
            assert isinstance(pong["version"], str)

            snapshot = (await client.call("session.snapshot"))["snapshot"]
            assert {
                "version",
                "protocol",
                "focused_workspace_id",
                "workspaces",
                "tabs",
                "panes",
                "layouts",
            } <= set(snapshot)
            assert [a["name"] for a in snapshot["agents"]] == ["coder", "reviewer"]

            workspaces = await client.call("workspace.list")
            assert workspaces["type"] == "workspace_list"
            assert [w["workspace_id"] for w in workspaces["workspaces"]] == ["w1", "w2"]
            workspace = await client.call("workspace.get", {"workspace_id": "w1"})
            assert workspace["type"] == "workspace_info"
            assert workspace["workspace"]["label"] == "api"

            tabs = await client.call("tab.list", {"workspace_id": "w2"})
            assert [t["tab_id"] for t in tabs["tabs"]] == ["w2:t1"]
            assert (await client.call("tab.get", {"tab_id": "w1:t1"}))["tab"]["pane_count"] == 2

            panes = await client.call("pane.list", {"workspace_id": "w1"})
            assert [p["pane_id"] for p in panes["panes"]] == ["w1:p1", "w1:p2"]
            pane = (await client.call("pane.get", {"pane_id": "w1:p2"}))["pane"]
            assert Path(pane["cwd"]).is_dir()
            assert pane["cwd"] == str((tmp_short / "api" / "src").resolve())

            agents = await client.call("agent.list")
            assert agents["type"] == "agent_list"
            agent = (await client.call("agent.get", {"target": "reviewer"}))["agent"]
            # AgentInfo has no `kind`; the agent's label is `agent` (src/api/schema/agents.rs).
            assert (agent["pane_id"], agent["agent"], agent["agent_status"]) == ("w2:p1", "codex", "idle")

            read = await client.call("pane.read", {"pane_id": "w1:p1", "source": "recent"})
            assert read["type"] == "pane_read"
            assert read["read"]["pane_id"] == "w1:p1"
            agent_read = await client.call("agent.read", {"target": "coder", "source": "visible"})
            assert agent_read["read"]["pane_id"] == "w1:p2"

    run(body())


def test_send_input_is_visible_in_pane_read(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (_, client):
            sent = await client.call(
                "pane.send_input", {"pane_id": "w1:p1", "text": "ls -la", "keys": ["enter"]}
            )
            assert sent == {"type": "ok"}

            async def echoed() -> str | None:
                # The typed text shows once the pane's program echoes it: Herdr's pane.send_input
                # queues the bytes and answers ok at once (src/app/api/panes.rs,
                # handle_pane_send_input: try_send_bytes, then encode_success).
                read = await client.call("pane.read", {"pane_id": "w1:p1", "source": "recent"})
                text = str(read["read"]["text"])
                return text if "ls -la" in text else None

            await poll_until(echoed, "the typed text in the pane")

    run(body())


@pytest.mark.parametrize(
    ("method", "params", "code"),
    [
        # Herdr refuses a line its serde cannot parse with invalid_request (src/api/server.rs);
        # unknown extra params are ignored, so {"pane_id": "w1:p1", "bogus": 1} is no refusal.
        ("no.such_method", {}, "invalid_request"),
        ("pane.read", {"pane_id": "w1:p1"}, "invalid_request"),
        ("pane.get", {"pane_id": "w9:p9"}, "pane_not_found"),
        ("tab.get", {"tab_id": "w1:t9"}, "tab_not_found"),
        ("workspace.get", {"workspace_id": "w9"}, "workspace_not_found"),
        ("agent.get", {"target": "nobody"}, "agent_not_found"),
        ("agent.prompt", {"target": "w1:p1", "text": "hi"}, "agent_not_found"),
    ],
)
def test_herdr_refusals_raise_remote_error_with_herdr_code(
    tmp_short: Path, method: str, params: dict[str, Any], code: str
) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (_, client):
            with pytest.raises(HerdrRemoteError) as caught:
                await client.call(method, params)
            assert caught.value.code == code
            assert caught.value.message
            assert caught.value.method == method
            assert caught.value.request_sent

    run(body())


def test_agent_wait_timeout_is_herdr_remote_timeout_not_client_timeout(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (_, client):
            with pytest.raises(HerdrRemoteError) as caught:
                await client.call("agent.wait", {"target": "coder", "until": ["working"], "timeout_ms": 50})
            assert caught.value.code == "timeout"

    run(body())


def test_long_lived_calls_get_their_own_time_budget(tmp_short: Path) -> None:
    slow = AgentScript((ScriptStep(after_ms=10, state="working"), ScriptStep(after_ms=800, state="done")))

    async def body() -> None:
        # The client's default budget (0.3 s) is shorter than the agent's turn (0.8 s).
        async with running_sim(tmp_short, two_project_config(tmp_short, slow), timeout=0.3) as (_, client):
            prompted = await client.call(
                "agent.prompt",
                {"target": "coder", "text": "go", "wait": {"until": ["done"], "timeout_ms": 3000}},
            )
            assert prompted["agent"]["agent_status"] == "done"
            await client.call("agent.prompt", {"target": "coder", "text": "again"}, timeout=5)
            waited = await client.call(
                "agent.wait", {"target": "coder", "until": ["done"], "timeout_ms": 3000}
            )
            assert waited["agent"]["agent_status"] == "done"
            with pytest.raises(HerdrTimeout):  # an explicit timeout wins over the derived budget
                await client.call("agent.prompt", {"target": "coder", "text": "x", "wait": {}}, timeout=0.05)

    run(body())


def test_subscription_streams_agent_status_changes_after_prompt(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (_, client):
            subscriptions = [{"type": "pane.agent_status_changed", "pane_id": "w1:p2"}]
            async with client.subscribe(subscriptions) as events:
                await client.call("agent.prompt", {"target": "coder", "text": "fix the bug"})
                first, second = await anext(events), await anext(events)
            assert isinstance(first, HerdrEvent)
            assert (first.name, first.data["agent_status"]) == ("pane.agent_status_changed", "working")
            assert (second.name, second.data["agent_status"]) == ("pane.agent_status_changed", "done")
            assert second.data["pane_id"] == "w1:p2"
            assert second.data["workspace_id"] == "w1"

    run(body())


def test_subscription_refused_raises_remote_error(tmp_short: Path) -> None:
    async def body() -> None:
        async with running_sim(tmp_short) as (_, client):
            with pytest.raises(HerdrRemoteError) as caught:
                async with client.subscribe([{"type": "pane.agent_status_changed"}]):
                    pass
            assert caught.value.code == "invalid_request"  # pane_id missing: Herdr's serde refuses

    run(body())


def test_event_stream_closed_by_herdr_raises_unavailable(tmp_short: Path) -> None:
    async def body() -> None:
        async with (
            running_sim(tmp_short) as (simulator, client),
            client.subscribe([{"type": "pane.created"}]) as events,
        ):
            await simulator.stop()
            with pytest.raises(HerdrUnavailable):
                await anext(events)

    run(body())


def test_missing_socket_is_unavailable(tmp_short: Path) -> None:
    client = HerdrClient(tmp_short / "absent.sock")
    with pytest.raises(HerdrUnavailable) as caught:
        run(client.call("ping"))
    assert caught.value.code == "herdr_unavailable"
    assert "HERDR_SOCKET_PATH" in caught.value.message
    assert not caught.value.request_sent


def test_stale_socket_is_unavailable(tmp_short: Path) -> None:
    path = tmp_short / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(str(path))  # bound, never listening: connect is refused
        with pytest.raises(HerdrUnavailable, match="Nothing is listening"):
            run(HerdrClient(path).call("ping"))


def test_request_over_the_line_limit_is_refused_before_sending(tmp_short: Path) -> None:
    client = HerdrClient(tmp_short / "absent.sock")
    with pytest.raises(HerdrRequestTooLarge) as caught:
        run(client.call("pane.send_input", {"pane_id": "w1:p1", "text": "x" * MAX_LINE_BYTES}))
    assert not caught.value.request_sent


# -- against misbehaving peers ------------------------------------------------------------------

Reply = Callable[[dict[str, Any], asyncio.StreamWriter], Awaitable[None]]


class ScriptedPeer:
    """A Unix-socket peer that reads one request per connection and lets `reply` answer it."""

    def __init__(self, path: Path, reply: Reply) -> None:
        self.path = path
        self.requests: list[dict[str, Any]] = []
        self.closed_by_client = 0
        self.release = asyncio.Event()
        self._reply = reply
        self._tasks: set[asyncio.Task[Any]] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            self.requests.append(json.loads(await reader.readline()))
            await self._reply(self.requests[-1], writer)
            await writer.drain()
            if await reader.read() == b"":
                self.closed_by_client += 1
        except (ConnectionError, BrokenPipeError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    async def hang(self) -> None:
        await self.release.wait()

    async def wait_idle(self) -> None:
        self.release.set()
        await wait_until_async(lambda: not self._tasks, "the peer's connections to end")


@contextlib.asynccontextmanager
async def scripted_peer(path: Path, reply: Reply) -> AsyncIterator[ScriptedPeer]:
    peer = ScriptedPeer(path, reply)
    server = await asyncio.start_unix_server(peer.handle, path=str(path))
    try:
        yield peer
    finally:
        server.close()
        await peer.wait_idle()
        await server.wait_closed()


def _answer_with(build: Callable[[dict[str, Any]], bytes]) -> Reply:
    async def reply(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        data = build(request)
        writer.write(data)
        if not data.endswith(b"\n"):
            writer.write_eof()  # nothing more is coming: an unanswered or cut-off response

    return reply


def _line(message: object) -> bytes:
    return json.dumps(message).encode() + b"\n"


@pytest.mark.parametrize(
    ("build", "detail"),
    [
        (lambda r: _line({"id": "someone-else", "result": {"type": "pong"}}), "not our request id"),
        (lambda r: b"{this is not json\n", "not valid JSON"),
        (lambda r: _line(["a", "list"]), "not an object"),
        (lambda r: _line({"id": r["id"]}), "neither or both"),
        (
            lambda r: _line({"id": r["id"], "result": {"type": "pong"}, "error": {"code": "x"}}),
            "neither or both",
        ),
        (lambda r: _line({"id": r["id"], "result": {"no": "type"}}), "string `type`"),
        (lambda r: _line({"id": r["id"], "error": {"message": "no code"}}), "`code`"),
        (lambda r: b"", "without answering"),
        (lambda r: b'{"id": "half a line', "middle of a line"),
    ],
)
def test_invalid_answers_are_protocol_errors(
    tmp_short: Path, build: Callable[[dict[str, Any]], bytes], detail: str
) -> None:
    async def body() -> None:
        async with scripted_peer(tmp_short / "peer.sock", _answer_with(build)) as peer:
            with pytest.raises(HerdrProtocolError, match=detail) as caught:
                await HerdrClient(peer.path, timeout=5).call("ping")
            assert caught.value.code == "herdr_protocol_error"
            assert caught.value.request_sent

    run(body())


def test_unparsed_request_error_with_empty_id_is_herdrs_answer(tmp_short: Path) -> None:
    reply = _answer_with(
        lambda r: _line({"id": "", "error": {"code": "invalid_request", "message": "bad line"}})
    )

    async def body() -> None:
        async with scripted_peer(tmp_short / "peer.sock", reply) as peer:
            with pytest.raises(HerdrRemoteError) as caught:
                await HerdrClient(peer.path).call("ping")
            assert (caught.value.code, caught.value.message) == ("invalid_request", "bad line")

    run(body())


def test_peer_that_never_answers_times_out_within_budget(tmp_short: Path) -> None:
    async def body() -> None:
        async def never(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
            await peer.hang()

        async with scripted_peer(tmp_short / "peer.sock", never) as peer:
            started = time.monotonic()
            with pytest.raises(HerdrTimeout) as caught:
                await HerdrClient(peer.path, timeout=0.3).call("ping")
            assert 0.3 <= time.monotonic() - started < 5
            assert caught.value.request_sent
            assert caught.value.code == "herdr_timeout"

    run(body())


def test_oversized_line_is_refused_without_reading_it_all(tmp_short: Path) -> None:
    outcome: dict[str, bool] = {}

    async def flood(request: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        try:
            for _ in range(32):  # 2 MiB with no newline, in 64 KiB writes
                writer.write(b"a" * (64 * 1024))
                await writer.drain()
            outcome["sent_everything"] = True
        except (ConnectionError, BrokenPipeError):
            outcome["sent_everything"] = False

    async def body() -> None:
        async with scripted_peer(tmp_short / "peer.sock", flood) as peer:
            # A client that waited for the whole line would time out instead.
            with pytest.raises(HerdrProtocolError, match="longer than"):
                await HerdrClient(peer.path, timeout=10).call("ping")
        assert outcome == {"sent_everything": False}

    run(body())


def test_each_call_uses_its_own_connection_with_a_unique_id_and_closes_it(tmp_short: Path) -> None:
    reply = _answer_with(
        lambda r: _line({"id": r["id"], "result": {"type": "pong", "version": "x", "protocol": 22}})
    )

    async def body() -> None:
        async with scripted_peer(tmp_short / "peer.sock", reply) as peer:
            client = HerdrClient(peer.path)
            for _ in range(5):
                assert (await client.call("ping"))["type"] == "pong"
            await wait_until_async(lambda: peer.closed_by_client == 5, "the peer to see 5 connections closed")
            ids = [r["id"] for r in peer.requests]
            assert len(set(ids)) == 5
            assert all(isinstance(i, str) and i for i in ids)
            assert peer.requests[0]["params"] == {}
            assert peer.closed_by_client == 5

    run(body())


def test_error_codes_are_stable_and_messages_actionable() -> None:
    samples: list[HerdrError] = [
        HerdrUnavailable("x"),
        HerdrTimeout("x"),
        HerdrProtocolError("x"),
        HerdrRequestTooLarge("x"),
    ]
    assert [e.code for e in samples] == [
        "herdr_unavailable",
        "herdr_timeout",
        "herdr_protocol_error",
        "herdr_request_too_large",
    ]
    remote = HerdrRemoteError("agent_blocked", "agent is blocked", method="agent.prompt")
    assert remote.to_dict() == {
        "code": "agent_blocked",
        "message": "agent is blocked",
        "method": "agent.prompt",
        "request_sent": True,
    }
    assert str(remote) == "agent_blocked: agent is blocked"


@pytest.mark.parametrize("protocol", SUPPORTED_PROTOCOLS)
def test_every_method_the_runtime_sends_is_in_real_herdrs_schema(protocol: int) -> None:
    reference = load(protocol)
    assert set(reference.methods) >= RUNTIME_METHODS
    assert reference.methods["agent.prompt"].method_class == "mutating"
    assert reference.methods["pane.send_input"].method_class == "mutating"
    assert reference.methods["events.subscribe"].method_class == "streaming"


def test_fast_script_helper_is_valid() -> None:
    assert fast_script().steps[-1].state == "done"
