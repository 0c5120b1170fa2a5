"""The push plane across runtimes that share one state.db (A/B generations, a restart): each
transition is recorded once (the push lease), every runtime's streams see it, the seq keeps its
meaning from one runtime to the next, and a settle that happened while no runtime ran is
recorded at the next start and replayed to a client resuming with `?after=`. Real uvicorn, real
Unix sockets, a real simulator, real SQLite; and a generation's runtime started by the real
launcher listens on its own socket, the one `browser_ipc.active_socket` names."""

from __future__ import annotations

import contextlib
import sqlite3
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from herdr_mcp.browser_ipc import active_socket
from herdr_mcp.generations import GenerationStore, StatusFile
from herdr_mcp.generations.process import runtimes_dir, start_runtime, stop_runtime
from herdr_mcp.layout import Layout
from herdr_mcp.sim import SimulatorThread
from herdr_mcp.state.push import DURABLE_EVENTS
from tests.support.push_harness import (
    event_stream,
    is_durable,
    pane_of,
    push_runtime,
    ready,
    two_agent_config,
)
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import wait_until, wait_until_async

BODY_TIMEOUT_S = 120.0


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


def push_rows(config: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(config / "state.db") as conn:
        rows = conn.execute(
            "SELECT seq, name FROM events WHERE name IN (?, ?, ?) ORDER BY seq", DURABLE_EVENTS
        ).fetchall()
    return [(int(seq), str(name)) for seq, name in rows]


def test_two_runtimes_on_one_state_db_record_each_transition_once_and_both_streams_see_it(
    tmp_short: Path,
) -> None:
    async def body() -> None:
        config = tmp_short / "config"
        with SimulatorThread(two_agent_config(tmp_short), tmp_short / "herdr.sock") as sim:
            async with (
                push_runtime(tmp_short / "herdr.sock", config, tmp_short / "ipc" / "a.sock") as a,
                push_runtime(tmp_short / "herdr.sock", config, tmp_short / "ipc" / "b.sock") as b,
                a.unix() as client_a,
                b.unix() as client_b,
                event_stream(client_a) as events_a,
                event_stream(client_b) as events_b,
            ):
                watchers = (a.services.push.watcher, b.services.push.watcher)
                await wait_until_async(lambda: all(w.polls >= 2 for w in watchers), "both watchers polling")
                assert sorted(w.leader for w in watchers) == [False, True]  # one records, one stands by
                await events_a.next()
                await events_b.next()
                sim.set_agent_status("coder", "working")
                sim.set_agent_status("coder", "done")
                seen_a = [
                    await events_a.until(is_durable, "A: working"),
                    await events_a.until(is_durable, "A: done"),
                ]
                seen_b = [
                    await events_b.until(is_durable, "B: working"),
                    await events_b.until(is_durable, "B: done"),
                ]
                assert [e.data for e in seen_a] == [e.data for e in seen_b]
                assert [e.name for e in seen_a] == ["agent_working", "agent_settled"]
                # Each runtime's feed recorded Herdr's events; the transitions were recorded once.
                assert push_rows(config) == [(e.data["seq"], e.name) for e in seen_a]

    run(body(), BODY_TIMEOUT_S)


def test_the_standby_takes_over_and_a_client_resumes_on_it_with_the_seq_of_the_other(tmp_short: Path) -> None:
    async def body() -> None:
        config = tmp_short / "config"
        with SimulatorThread(two_agent_config(tmp_short), tmp_short / "herdr.sock") as sim:
            a_stack = contextlib.AsyncExitStack()
            a = await a_stack.enter_async_context(
                push_runtime(tmp_short / "herdr.sock", config, tmp_short / "ipc" / "a.sock")
            )
            try:
                await ready(a)  # A took the lease first
                async with push_runtime(tmp_short / "herdr.sock", config, tmp_short / "ipc" / "b.sock") as b:
                    await wait_until_async(lambda: b.services.push.watcher.polls >= 1, "B polling")
                    assert not b.services.push.watcher.leader
                    async with a.unix() as client, event_stream(client) as events:
                        await events.next()
                        sim.set_agent_status("coder", "working")
                        handled = await events.until(is_durable, "working, recorded by A")
                    # The A/B switch: A stops (and gives the lease back); B takes over.
                    await a_stack.aclose()
                    await wait_until_async(lambda: b.services.push.watcher.leader, "B to take the lease")
                    sim.set_agent_status("coder", "idle")
                    await wait_until_async(lambda: len(push_rows(config)) == 2, "the settle recorded by B")
                    async with (
                        b.unix() as client,
                        event_stream(client, f"?after={handled.data['seq']}") as events,
                    ):
                        hello = await events.next()
                        assert hello.data["replay"] == {"from": handled.data["seq"], "gap": False}
                        settled = await events.next()
                        assert (settled.name, settled.data["agent"], settled.data["workspace_working"]) == (
                            "agent_settled",
                            "coder",
                            False,
                        )
                        assert settled.data["seq"] > handled.data["seq"]
            finally:
                await a_stack.aclose()

    run(body(), BODY_TIMEOUT_S)


def test_a_settle_while_no_runtime_ran_is_recorded_at_the_next_start_and_replayed(tmp_short: Path) -> None:
    async def body() -> None:
        config = tmp_short / "config"
        with SimulatorThread(two_agent_config(tmp_short), tmp_short / "herdr.sock") as sim:
            async with push_runtime(tmp_short / "herdr.sock", config, tmp_short / "ipc" / "r.sock") as first:
                await ready(first)
                async with first.unix() as client, event_stream(client) as events:
                    await events.next()
                    sim.set_agent_status("tester", "working")
                    handled = await events.until(is_durable, "tester working")
            sim.set_agent_status("tester", "done")  # nobody watches: the browser and the runtime are down
            sim.close_pane(pane_of(sim, "reviewer"))
            async with push_runtime(tmp_short / "herdr.sock", config, tmp_short / "ipc" / "r.sock") as second:
                await wait_until_async(
                    lambda: len(push_rows(config)) == 3, "the missed settle and gone recorded"
                )
                async with (
                    second.unix() as client,
                    event_stream(client, f"?after={handled.data['seq']}") as events,
                ):
                    await events.next()
                    missed = [await events.next(), await events.next()]
                names = sorted((e.name, e.data["agent"]) for e in missed)
                assert names == [("agent_gone", "reviewer"), ("agent_settled", "tester")]
                settle = next(e for e in missed if e.name == "agent_settled")
                assert (settle.data["status"], settle.data["workspace_working"]) == ("done", False)

    run(body(), BODY_TIMEOUT_S)


def test_a_generation_runtime_listens_on_its_own_socket_the_one_active_socket_names(tmp_short: Path) -> None:
    config = tmp_short / "c"
    layout = Layout(config)
    executable = Path(sys.executable).with_name("herdr-mcp")
    assert executable.exists(), executable
    with SimulatorThread(two_agent_config(tmp_short), tmp_short / "herdr.sock"):
        runtime_dir = runtimes_dir(config) / "gen-a"
        started = start_runtime(
            executable, runtime_dir, config, ["--no-sim", "--herdr-socket", str(tmp_short / "herdr.sock")]
        )
        try:
            socket_path = layout.generation_socket("gen-a")
            assert socket_path.is_socket()
            assert stat.S_IMODE(socket_path.stat().st_mode) == 0o600
            assert stat.S_IMODE(layout.ipc_dir.stat().st_mode) == 0o700
            assert not layout.runtime_socket.exists()
            store = GenerationStore.in_dir(layout.generations_dir)
            with store.locked():
                store.write_status_locked(StatusFile(active="gen-a"))
            assert active_socket(layout) == socket_path
            token = layout.token_file.read_text().strip()
            with httpx2.Client(
                transport=httpx2.HTTPTransport(uds=str(active_socket(layout))),
                base_url="http://localhost",
                trust_env=False,
                timeout=30,
            ) as client:
                answer = client.get("/push/state", headers={"Authorization": f"Bearer {token}"})
                assert answer.status_code == 200, answer.text
                assert [w["workspace_id"] for w in answer.json()["workspaces"]] == ["w1", "w2"]
                assert client.get("/push/state").status_code == 401
            assert started.endpoint.startswith("http://127.0.0.1:")
        finally:
            stop_runtime(runtime_dir)
        wait_until(lambda: not socket_path.exists(), "the stopped runtime to remove its socket")
