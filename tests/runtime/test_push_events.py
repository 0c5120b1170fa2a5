"""`GET /push/events` and `GET /push/state` (docs/browser-protocol.md, section 3) against a real
uvicorn on loopback TCP and on the runtime's Unix socket, a real Herdr simulator and a real
state.db: the hello, transitions with `workspace_working`, new output only, resume with
`?after=` (durable events once, output never), the gap flag, keepalive, back-pressure."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from herdr_mcp import __version__
from herdr_mcp.contract import contract_identity
from herdr_mcp.runtime.push import PushSettings
from herdr_mcp.sim import (
    SimulatorThread,
)
from herdr_mcp.state.event_log import EventLog
from tests.support.push_harness import (
    TOKEN,
    event_stream,
    is_durable,
    pane_of,
    push_runtime,
    pushed,
    ready,
    two_agent_config,
)
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import wait_until_async

TRANSPORTS = ["tcp", "unix"]
BODY_TIMEOUT_S = 90.0


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


@pytest.mark.parametrize("via", TRANSPORTS)
def test_hello_first_then_working_and_settled_with_workspace_working(tmp_short: Path, via: str) -> None:
    async def body() -> None:
        with SimulatorThread(two_agent_config(tmp_short), tmp_short / "herdr.sock") as sim:
            async with (
                push_runtime(
                    tmp_short / "herdr.sock", tmp_short / "config", tmp_short / "ipc" / "r.sock"
                ) as rt,
                rt.client(via) as client,
                event_stream(client) as events,
            ):
                await ready(rt)
                hello = await events.next()
                assert hello.name == "hello"
                assert hello.data == {
                    "protocol": 1,
                    "seq": hello.data["seq"],
                    "runtime": {"version": __version__, "contract": contract_identity().to_dict()},
                    "replay": {"from": None, "gap": False},
                }
                assert hello.id == str(hello.data["seq"])
                coder, tester = pane_of(sim, "coder"), pane_of(sim, "tester")

                sim.set_agent_status("coder", "working")
                working = await events.until(is_durable, "coder working")
                assert (working.name, working.data["pane_id"], working.data["agent"]) == (
                    "agent_working",
                    coder,
                    "coder",
                )
                assert working.data["workspace_id"] == "w1" and working.data["seq"] > hello.data["seq"]
                assert working.id == str(working.data["seq"])
                sim.set_agent_status("tester", "working")
                assert (await events.until(is_durable, "tester working")).data["pane_id"] == tester

                # One of two settles: the workspace still works.
                sim.set_agent_status("tester", "done")
                partial = await events.until(is_durable, "tester settled")
                assert partial.name == "agent_settled"
                assert (partial.data["pane_id"], partial.data["status"]) == (tester, "done")
                assert partial.data["workspace_working"] is True

                sim.set_agent_status("coder", "blocked")
                last = await events.until(is_durable, "coder settled")
                assert (last.name, last.data["status"], last.data["workspace_working"]) == (
                    "agent_settled",
                    "blocked",
                    False,
                )
                assert set(last.data) == {
                    "seq", "workspace_id", "pane_id", "agent", "status", "workspace_working", "at", "inbox",
                }  # fmt: skip
                # The settle that ends the workspace's turn carries its bound scopes' inboxes (none here).
                assert last.data["inbox"] == {}
                assert "inbox" not in partial.data
                assert last.data["seq"] > partial.data["seq"] > working.data["seq"]

                # idle -> done is no transition: nothing is sent; the next event is the next one.
                sim.set_agent_status("tester", "idle")
                sim.set_agent_status("reviewer", "working")
                after = await events.until(is_durable, "reviewer working")
                assert (after.name, after.data["agent"], after.data["workspace_id"]) == (
                    "agent_working",
                    "reviewer",
                    "w2",
                )

    run(body(), BODY_TIMEOUT_S)


def test_agent_gone_when_a_pane_closes_says_whether_the_workspace_still_works(tmp_short: Path) -> None:
    async def body() -> None:
        with SimulatorThread(two_agent_config(tmp_short), tmp_short / "herdr.sock") as sim:
            async with (
                push_runtime(
                    tmp_short / "herdr.sock", tmp_short / "config", tmp_short / "ipc" / "r.sock"
                ) as rt,
                rt.unix() as client,
                event_stream(client) as events,
            ):
                await ready(rt)
                await events.next()  # hello
                sim.set_agent_status("coder", "working")
                await events.until(lambda e: e.name == "agent_working", "coder working")
                sim.close_pane(pane_of(sim, "coder"))
                gone = await events.until(is_durable, "coder gone")
                assert gone.name == "agent_gone"
                assert (gone.data["agent"], gone.data["workspace_working"]) == ("coder", False)
                sim.close_pane(pane_of(sim, "tester"))
                assert (await events.until(is_durable, "tester gone")).data["agent"] == "tester"

    run(body(), BODY_TIMEOUT_S)


def test_agent_output_is_only_new_nonempty_text_of_working_agents(tmp_short: Path) -> None:
    settings = PushSettings(poll_interval=0.1, lease_ttl=2.0, tail_interval=0.05, output_chars=50)

    async def body() -> None:
        with SimulatorThread(two_agent_config(tmp_short), tmp_short / "herdr.sock") as sim:
            coder, tester = pane_of(sim, "coder"), pane_of(sim, "tester")
            sim.append_output(coder, "old text from before\n")
            async with (
                push_runtime(
                    tmp_short / "herdr.sock", tmp_short / "config", tmp_short / "ipc" / "r.sock", settings
                ) as rt,
                rt.tcp() as client,
                event_stream(client) as events,
            ):
                await ready(rt)
                await events.next()  # hello
                sim.set_agent_status("coder", "working")
                await events.until(lambda e: e.name == "agent_working", "coder working")
                sim.append_output(coder, "step one\n")
                first = await events.until(lambda e: e.name == "agent_output", "first output")
                assert first.data["text"] == "step one" and first.data["truncated"] is False
                assert (first.data["pane_id"], first.data["agent"], first.data["workspace_id"]) == (
                    coder,
                    "coder",
                    "w1",
                )
                assert first.id is None  # not a durable event: no id to resume from
                sim.append_output(coder, "step two\n")
                second = await events.until(lambda e: e.name == "agent_output", "second output")
                assert second.data["text"] == "step two"  # only what is new

                # An idle agent's output is not sent; whitespace is not output.
                sim.append_output(tester, "idle chatter\n")
                sim.append_output(coder, "\n\n")
                sim.append_output(coder, "x" * 60 + "END\n")
                long = await events.until(lambda e: e.name == "agent_output", "long output")
                assert long.data["pane_id"] == coder
                assert long.data["truncated"] is True and len(long.data["text"]) == 50
                assert long.data["text"].endswith("END")  # the newest characters

    run(body(), BODY_TIMEOUT_S)


def test_resume_replays_the_missed_transitions_once_and_never_output(tmp_short: Path) -> None:
    async def body() -> None:
        with SimulatorThread(two_agent_config(tmp_short), tmp_short / "herdr.sock") as sim:
            async with push_runtime(
                tmp_short / "herdr.sock", tmp_short / "config", tmp_short / "ipc" / "r.sock"
            ) as rt:
                await ready(rt)
                async with rt.unix() as client:
                    async with event_stream(client) as events:
                        await events.next()  # hello
                        sim.set_agent_status("coder", "working")
                        handled = await events.until(is_durable, "coder working")
                    # Offline: the agent writes output, settles, another starts.
                    sim.append_output(pane_of(sim, "coder"), "written while offline\n")
                    sim.set_agent_status("coder", "done")
                    sim.set_agent_status("reviewer", "working")
                    offline = [("agent_settled", "coder"), ("agent_working", "reviewer")]
                    await pushed(rt, handled.data["seq"], offline, "the offline transitions")
                    async with event_stream(client, f"?after={handled.data['seq']}") as events:
                        hello = await events.next()
                        assert hello.data["replay"] == {"from": handled.data["seq"], "gap": False}
                        replayed = [await events.next(), await events.next()]
                        assert [(e.name, e.data["agent"]) for e in replayed] == [
                            ("agent_settled", "coder"),
                            ("agent_working", "reviewer"),
                        ]
                        assert replayed[0].data["workspace_working"] is False
                        # The replay ends at the hello's seq (Herdr events recorded in the same
                        # log may take seqs after the last push event: they are not replayed).
                        assert replayed[-1].data["seq"] <= hello.data["seq"]
                        # Live from here: the next transition arrives once, after the replay.
                        sim.set_agent_status("reviewer", "idle")
                        live = await events.next()
                        assert (live.name, live.data["agent"]) == ("agent_settled", "reviewer")
                        assert live.data["seq"] > hello.data["seq"]
                    last = live.data["seq"]
                    # Resuming from the newest seq replays nothing; from 0, everything kept, in order.
                    async with event_stream(client, f"?after={last}") as events:
                        assert (await events.next()).data["seq"] == last
                        sim.set_agent_status("tester", "working")
                        assert (await events.next()).data["agent"] == "tester"
                    async with event_stream(client, "?after=0") as events:
                        await events.next()
                        everything = [await events.next() for _ in range(5)]
                        assert [e.name for e in everything] == [
                            "agent_working",
                            "agent_settled",
                            "agent_working",
                            "agent_settled",
                            "agent_working",
                        ]
                        seqs = [e.data["seq"] for e in everything]
                        assert seqs == sorted(seqs) and len(set(seqs)) == 5

    run(body(), BODY_TIMEOUT_S)


def test_a_resume_from_before_what_was_pruned_says_gap(tmp_short: Path) -> None:
    async def body() -> None:
        with SimulatorThread(two_agent_config(tmp_short), tmp_short / "herdr.sock") as sim:
            async with push_runtime(
                tmp_short / "herdr.sock", tmp_short / "config", tmp_short / "ipc" / "r.sock"
            ) as rt:
                await ready(rt)
                for status in ("working", "idle", "working", "idle"):
                    sim.set_agent_status("coder", status)
                hub = rt.services.push.hub
                await wait_until_async(
                    lambda: len(rt.services.push.states.read(0).events) == 4, "four transitions"
                )
                first = rt.services.push.states.read(0).events[0].seq
                EventLog(rt.services.state, keep=3).prune()  # the log keeps only its newest 3 rows
                kept = rt.services.push.states.read(0).events
                assert first not in [event.seq for event in kept]
                async with rt.unix() as client:
                    # Resuming from just before the first transition: it was pruned, so a gap.
                    async with event_stream(client, f"?after={first - 1}") as events:
                        hello = await events.next()
                        assert hello.data["replay"] == {"from": first - 1, "gap": True}
                        sim.set_agent_status("reviewer", "working")
                        seen = await events.collect_until(lambda e: e.data.get("agent") == "reviewer")
                        assert [e.data["seq"] for e in seen[:-1]] == [e.seq for e in kept]
                    # A seq beyond anything ever given (another, older state.db): gap, from the start.
                    async with event_stream(client, "?after=999999") as events:
                        hello = await events.next()
                        assert hello.data["replay"] == {"from": 999999, "gap": True}
                        # (Herdr events recorded in the same log may move the cursor on since.)
                        assert hello.data["seq"] <= hub.cursor
                        replayed = await events.collect_until(lambda e: e.data.get("agent") == "reviewer")
                        expected = [*(e.seq for e in kept), seen[-1].data["seq"]]
                        assert [e.data["seq"] for e in replayed] == expected

    run(body(), BODY_TIMEOUT_S)


def test_a_keepalive_comment_while_nothing_happens(tmp_short: Path) -> None:
    settings = PushSettings(poll_interval=0.1, lease_ttl=2.0, tail_interval=0.05, keepalive=0.2)

    async def body() -> None:
        with SimulatorThread(two_agent_config(tmp_short), tmp_short / "herdr.sock") as sim:
            async with (
                push_runtime(
                    tmp_short / "herdr.sock", tmp_short / "config", tmp_short / "ipc" / "r.sock", settings
                ) as rt,
                rt.unix() as client,
                event_stream(client) as events,
            ):
                await ready(rt)
                await events.next()  # hello
                pending = asyncio.create_task(events.next())
                await wait_until_async(lambda: events.comments.count("keepalive") >= 2, "two keepalives")
                assert not pending.done()  # a comment is not an event
                sim.set_agent_status("coder", "working")
                assert (await pending).name == "agent_working"

    run(body(), BODY_TIMEOUT_S)


@pytest.mark.parametrize("via", TRANSPORTS)
def test_bad_requests_are_refused_with_codes(tmp_short: Path, via: str) -> None:
    async def body() -> None:
        with SimulatorThread(two_agent_config(tmp_short), tmp_short / "herdr.sock"):
            async with push_runtime(
                tmp_short / "herdr.sock", tmp_short / "config", tmp_short / "ipc" / "r.sock"
            ) as rt:
                async with rt.client(via) as client:
                    for query in (
                        "?after=-1",
                        "?after=abc",
                        f"?after={2**53}",
                        "?after=1&after=2",
                        "?since=3",
                    ):
                        answer = await client.get("/push/events" + query)
                        assert answer.status_code == 400, query
                        assert answer.json()["error"]["code"] == "invalid_argument", query
                    answer = await client.post("/push/events")
                    assert (answer.status_code, answer.json()["error"]["code"]) == (405, "method_not_allowed")
                    answer = await client.get("/push/state?x=1")
                    assert answer.json()["error"]["code"] == "invalid_argument"
                for path in ("/push/events", "/push/state"):
                    for headers in ({}, {"Authorization": "Bearer wrong"}):
                        async with rt.client(via) as client:
                            if not headers:
                                client.headers.pop("Authorization")
                            else:
                                client.headers.update(headers)
                            answer = await client.get(path)
                            assert answer.status_code == 401, (path, headers)
                            assert answer.json()["error"]["code"] == "unauthorized"
                            assert TOKEN not in answer.text

    run(body(), BODY_TIMEOUT_S)


@pytest.mark.parametrize("via", TRANSPORTS)
def test_push_state_lists_agents_per_workspace(tmp_short: Path, via: str) -> None:
    async def body() -> None:
        with SimulatorThread(two_agent_config(tmp_short), tmp_short / "herdr.sock") as sim:
            async with push_runtime(
                tmp_short / "herdr.sock", tmp_short / "config", tmp_short / "ipc" / "r.sock"
            ) as rt:
                await ready(rt)
                sim.set_agent_status("tester", "working")
                working = await pushed(rt, 0, [("agent_working", "tester")], "the transition published")
                async with rt.client(via) as client:
                    state = (await client.get("/push/state")).json()
                # The hub's cursor when the state was read: Herdr events recorded in the same log
                # may move it on afterwards.
                assert working <= state["seq"] <= rt.services.push.hub.cursor
                assert state["workspaces"] == [
                    {
                        "workspace_id": "w1",
                        "label": "api",
                        "working": True,
                        "agents": [
                            {"pane_id": pane_of(sim, "coder"), "agent": "coder", "status": "idle"},
                            {"pane_id": pane_of(sim, "tester"), "agent": "tester", "status": "working"},
                        ],
                    },
                    {
                        "workspace_id": "w2",
                        "label": "web",
                        "working": False,
                        "agents": [
                            {"pane_id": pane_of(sim, "reviewer"), "agent": "reviewer", "status": "idle"}
                        ],
                    },
                ]
                sim.inject_fault("workspace.list", code="internal_error")
                async with rt.client(via) as client:
                    answer = await client.get("/push/state")
                assert (answer.status_code, answer.json()["error"]["code"]) == (503, "herdr_unavailable")

    run(body(), BODY_TIMEOUT_S)


def test_a_stream_that_falls_behind_ends_with_overflow_and_resumes_with_after(tmp_short: Path) -> None:
    settings = PushSettings(poll_interval=0.1, lease_ttl=2.0, tail_interval=0.05, queue_size=4)

    async def body() -> None:
        with SimulatorThread(two_agent_config(tmp_short), tmp_short / "herdr.sock") as sim:
            async with push_runtime(
                tmp_short / "herdr.sock", tmp_short / "config", tmp_short / "ipc" / "r.sock", settings
            ) as rt:
                await ready(rt)
                states, hub = rt.services.push.states, rt.services.push.hub
                coder = pane_of(sim, "coder")
                async with rt.unix() as client, event_stream(client) as events:
                    hello = await events.next()
                    # Another runtime sharing state.db records 30 transitions at once; this one's
                    # hub publishes them in one go, more than the stream may have waiting.
                    for _ in range(15):
                        states.observe(coder, "w1", "coder", "working")
                        states.observe(coder, "w1", "coder", "idle")
                    hub.poke()
                    seen = await events.collect_until(lambda e: e.name == "end")
                end = seen[-1]
                assert end.data["reason"] == "overflow"
                delivered = [e for e in seen if is_durable(e)]
                assert len(delivered) < 30
                assert end.data["seq"] == (delivered[-1].data["seq"] if delivered else hello.data["seq"])
                async with rt.unix() as client, event_stream(client, f"?after={end.data['seq']}") as events:
                    await events.next()  # hello
                    rest = [await events.next() for _ in range(30 - len(delivered))]
                assert [e.name for e in delivered + rest] == ["agent_working", "agent_settled"] * 15
                assert rest[-1].data["seq"] <= hub.cursor  # Herdr events may follow in the log

    run(body(), BODY_TIMEOUT_S)


def test_a_client_that_stops_reading_holds_no_growing_queue(tmp_short: Path) -> None:
    settings = PushSettings(
        poll_interval=0.1, lease_ttl=2.0, tail_interval=0.05, queue_size=8, send_timeout=1.0
    )

    async def body() -> None:
        with SimulatorThread(two_agent_config(tmp_short), tmp_short / "herdr.sock"):
            async with push_runtime(
                tmp_short / "herdr.sock", tmp_short / "config", tmp_short / "ipc" / "r.sock", settings
            ) as rt:
                hub = rt.services.push.hub
                stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                stalled.connect(str(rt.socket_path))
                request = (
                    f"GET /push/events HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
                )
                stalled.sendall(request.encode())
                await wait_until_async(lambda: hub.subscriber_count == 1, "the stalled stream to subscribe")
                subscriber = hub.subscribers[0]
                # 2,000-character outputs until the socket is full and the stream's queue with it.
                deepest = 0
                published = 0
                while not subscriber.ended:
                    hub.publish_output({"pane_id": "w1:p1", "text": "y" * 2000, "truncated": False})
                    published += 1
                    deepest = max(deepest, subscriber.queue.qsize())
                    await asyncio.sleep(0)  # the subject: let the stream write what the socket takes
                    assert published < 100_000, "the stream never fell behind"
                assert deepest <= 8
                assert subscriber.queue.qsize() == 1  # only the end is kept for it
                # The stream gives up on the client after send_timeout and leaves the hub.
                await wait_until_async(lambda: hub.subscriber_count == 0, "the stalled stream to end")
                stalled.close()

    run(body(), BODY_TIMEOUT_S)
