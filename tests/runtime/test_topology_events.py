"""Roots proven by the live Herdr session, and the numbered event feed behind herdr_since."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from herdr_mcp.herdr import HerdrClient
from herdr_mcp.runtime.events import EventFeed
from herdr_mcp.runtime.topology import Topology
from herdr_mcp.sim import AgentConfig, PaneConfig, SimConfig, WorkspaceConfig
from herdr_mcp.state.event_log import EventLog
from herdr_mcp.state.store import StateStore
from tests.support.clocks import ManualClock
from tests.support.runtime_harness import make_repo
from tests.support.sim_helpers import run, running_sim, short_tmp_dir
from tests.support.waiting import DEADLINE_S, wait_until_async


def _config(tmp: Path) -> tuple[SimConfig, Path, Path, Path]:
    repo = make_repo(tmp / "home" / "me" / "repo", {"a.txt": b"a\n"})
    (repo / "sub").mkdir()
    plain = tmp / "plain"
    plain.mkdir()
    home = tmp / "home" / "me"
    config = SimConfig(
        (
            WorkspaceConfig(
                cwd=repo,
                label="repo",
                tabs=(),
            ),
            WorkspaceConfig(cwd=plain, label="plain"),
            WorkspaceConfig(cwd=home, label="home"),
        )
    )
    return config, repo, plain, home


def test_roots_are_managed_operational_and_never_home() -> None:
    with short_tmp_dir() as tmp:
        config, repo, plain, home = _config(tmp)

        async def body() -> None:
            async with running_sim(tmp, config) as (sim, client):
                sim.add_pane("w1", PaneConfig(cwd=repo / "sub", agent=AgentConfig("coder")))
                roots = await Topology(client, home=home).roots()
                kinds = {str(root.path): root.kind for root in roots.roots}
                assert kinds == {str(repo.resolve()): "managed", str(plain.resolve()): "operational"}
                assert [item.code for item in roots.excluded] == ["home_or_ancestor"]
                managed = roots.root_for(str(repo))
                assert managed.workspace_ids == frozenset({"w1"})
                assert managed.busy is False

        run(body())


def test_busy_follows_a_working_agent_and_events_invalidate_the_cache() -> None:
    with short_tmp_dir() as tmp:
        config, repo, _, home = _config(tmp)

        async def body() -> None:
            async with running_sim(tmp, config) as (sim, client):
                topology = Topology(client, home=home, ttl=3600)
                log = EventLog(StateStore.open(tmp / "state.db"))
                feed = EventFeed(client, log, on_event=lambda _e: topology.invalidate())
                follower = asyncio.create_task(feed.run())
                try:
                    await wait_until_async(lambda: feed.connected, "the event feed to connect")
                    assert (await topology.roots()).root_for(str(repo)).busy is False
                    pane = sim.add_pane("w1", PaneConfig(agent=AgentConfig("coder")))
                    await wait_until_async(lambda: _has_event(feed, "pane_created"), "pane_created")
                    # The feed opens the new pane's status subscription after it records
                    # pane_created; a change before Herdr takes it is not an event (Herdr sends
                    # status events to subscribers only), so the agent starts working after.
                    await wait_until_async(lambda: pane in feed.status_followed, "the pane's status stream")
                    cursor = feed.last_seq
                    sim.set_agent_status("coder", "working")
                    await wait_until_async(
                        lambda: _has_event(feed, "pane.agent_status_changed"), "pane.agent_status_changed"
                    )
                    assert (await topology.roots()).root_for(str(repo)).busy is True
                    answer = feed.since(cursor, workspace="w1", limit=100)
                    changed = [e for e in answer["events"] if e["event"] == "pane.agent_status_changed"]
                    assert changed[-1]["data"]["pane_id"] == pane
                    assert changed[-1]["data"]["agent_status"] == "working"
                    assert feed.since(cursor, workspace="w2", limit=100)["events"] == []
                finally:
                    follower.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await follower

        run(body())


def test_the_view_is_reused_for_its_ttl_on_the_topologys_clock() -> None:
    """A failing snapshot is not seen while the cached view is fresh; once the clock passes the
    TTL the next call observes again (and degrades to the lists)."""
    with short_tmp_dir() as tmp:
        config, _, _, home = _config(tmp)

        async def body() -> None:
            async with running_sim(tmp, config) as (sim, client):
                clock = ManualClock()
                topology = Topology(client, home=home, ttl=2.0, clock=clock)
                assert (await topology.view()).source == "snapshot"
                sim.inject_fault("session.snapshot")
                clock.advance(1.9)
                assert (await topology.view()).source == "snapshot"
                clock.advance(0.2)
                degraded = await topology.view()
                assert degraded.source == "lists"
                assert degraded.warnings[0]["code"] == "snapshot_failed"

        run(body())


def test_a_fresh_view_is_answered_without_waiting_for_the_lock() -> None:
    """Calls that find the view fresh do not queue on the refresh lock (under load they formed a
    convoy behind it: issue 24); an expired or invalidated view is still refreshed under it, so
    no call answers from a view older than the TTL."""
    with short_tmp_dir() as tmp:
        config, repo, _, home = _config(tmp)

        async def body() -> None:
            async with running_sim(tmp, config) as (_, client):
                clock = ManualClock()
                topology = Topology(client, home=home, ttl=2.0, clock=clock)
                first = await topology.roots()
                async with topology._lock:  # a refresh under way elsewhere
                    assert await asyncio.wait_for(topology.roots(), DEADLINE_S) is first
                    clock.advance(2.1)
                    waiting = asyncio.create_task(topology.roots())
                    for _ in range(20):
                        await asyncio.sleep(0)  # the subject: loop turns a lock-free answer would finish in
                    assert not waiting.done()  # expired: it waits for the lock, then refreshes
                refreshed = await waiting
                assert refreshed is not first and refreshed.roots == first.roots
                topology.invalidate()
                async with topology._lock:
                    waiting = asyncio.create_task(topology.roots())
                    for _ in range(20):
                        await asyncio.sleep(0)  # the subject: loop turns a lock-free answer would finish in
                    assert not waiting.done()
                assert repo in [root.path for root in (await waiting).roots]

        run(body())


def _has_event(feed: EventFeed, name: str) -> bool:
    return any(event["event"] == name for event in feed.since(0, workspace=None, limit=10_000)["events"])


def test_cursors_keep_their_meaning_across_a_restart(tmp_path: Path) -> None:
    store_path = tmp_path / "state.db"
    absent = HerdrClient(Path("/nonexistent/herdr.sock"))
    first = EventFeed(absent, EventLog(StateStore.open(store_path)))
    seen = first.record("pane_created", {"pane": {"pane_id": "w1:p1", "workspace_id": "w1"}})
    cursor = first.since(0, workspace=None, limit=10)["next_cursor"]
    assert cursor == seen.seq
    restarted = EventFeed(absent, EventLog(StateStore.open(store_path)))
    later = restarted.record("pane_closed", {"pane_id": "w1:p1"})
    answer = restarted.since(cursor, workspace="w1", limit=10)
    assert [e["seq"] for e in answer["events"]] == [later.seq]
    assert answer["gap"] is False
    assert answer["feed_connected"] is False


def test_unreachable_herdr_gives_an_unavailable_view_with_warnings() -> None:
    with short_tmp_dir() as tmp:

        async def body() -> None:
            view = await Topology(HerdrClient(tmp / "absent.sock", timeout=0.5), home=tmp).view()
            assert view.source == "unavailable"
            assert [w["code"] for w in view.warnings] == [
                "snapshot_failed",
                "workspaces_unavailable",
                "tabs_unavailable",
                "panes_unavailable",
                "agents_unavailable",
            ]

        run(body())
