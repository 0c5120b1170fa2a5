"""No Herdr event is recorded twice in the event log behind herdr_since.

- Herdr 0.8.2 (protocol 20) replays its retained lifecycle history to every new subscriber, so
  each reconnect of the runtime's feed starts with events it already recorded; they are
  recognised (runtime/replay.py) and dropped, across any number of reconnects. Protocol 22 sends
  live events only, and nothing of them is dropped.
- Two runtimes (generations) sharing one state.db record each event once (the `events` lease).
- A pane that closed between `pane.list` and the status subscription costs the other panes
  nothing (Herdr refuses the whole batch, naming the gone pane's index in the error's id).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from herdr_mcp.herdr import HerdrClient
from herdr_mcp.runtime.events import EventFeed
from herdr_mcp.runtime.replay import STALE_SECONDS, KindAligner
from herdr_mcp.sim import Simulator
from herdr_mcp.state.event_log import EventLog
from herdr_mcp.state.leases import Lease
from herdr_mcp.state.store import StateStore
from tests.support.sim_helpers import one_workspace_config, run, short_tmp_dir
from tests.support.waiting import wait_until_async

# -- the aligner on its own -------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _feed(aligner: KindAligner[str], items: list[str]) -> list[str]:
    out: list[str] = []
    for item in items:
        out.extend(aligner.push(item, item))
    return out


def test_a_replay_of_a_suffix_of_what_was_recorded_is_dropped() -> None:
    aligner: KindAligner[str] = KindAligner(["a", "b", "c", "d"])
    assert _feed(aligner, ["c", "d", "e", "f"]) == ["e", "f"]
    assert aligner.skipped == 2


def test_a_replay_with_older_history_before_what_was_recorded_is_dropped() -> None:
    aligner: KindAligner[str] = KindAligner(["c", "d"])
    assert _feed(aligner, ["a", "b", "c", "d", "e"]) == ["e"]
    assert aligner.skipped == 4


def test_genuine_repeats_are_told_apart_by_position() -> None:
    """A focus going back and forth: recorded x y x; the replay x y x, then live x x y."""
    clock = _Clock()
    aligner: KindAligner[str] = KindAligner(["x", "y", "x"], clock=clock)
    assert _feed(aligner, ["x", "y", "x", "x", "x", "y"]) == []  # a longer replay is still possible
    clock.now += STALE_SECONDS + 0.1
    assert aligner.flush_if_stale() == ["x", "x", "y"]


def test_a_replay_that_ends_on_a_repeated_event_drops_it_once() -> None:
    aligner: KindAligner[str] = KindAligner(["x"])
    assert _feed(aligner, ["x", "x", "y"]) == ["x", "y"]


def test_a_stream_that_is_not_a_replay_is_released_in_order_once_it_pauses() -> None:
    clock = _Clock()
    aligner: KindAligner[str] = KindAligner(["a", "b", "c"], clock=clock)
    assert _feed(aligner, ["b", "q"]) == []  # "b" could have begun a replay; "q" breaks it
    assert aligner.flush_if_stale() == []
    clock.now += STALE_SECONDS + 0.1
    assert aligner.flush_if_stale() == ["b", "q"]
    assert _feed(aligner, ["r"]) == ["r"]


def test_nothing_recorded_means_nothing_is_held() -> None:
    aligner: KindAligner[str] = KindAligner([])
    assert _feed(aligner, ["a", "b"]) == ["a", "b"]


# -- against the simulator --------------------------------------------------------------------


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


@contextlib.asynccontextmanager
async def _following(feed: EventFeed) -> AsyncIterator[None]:
    task = asyncio.create_task(feed.run())
    try:
        await wait_until_async(lambda: feed.connected or None, "the feed to connect", timeout=20)
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _lifecycle_counts(log: EventLog) -> Counter[str]:
    events = log.since(0, workspace=None, limit=10_000)["events"]
    return Counter(e["event"] for e in events if not e["event"].startswith(("feed_", "pane.agent")))


@pytest.mark.parametrize("protocol", [20, 22])
def test_reconnects_never_record_an_event_twice(tmp_short: Path, protocol: int) -> None:
    """Three panes made and one closed while connected, one more made while away, then three
    reconnects: every event is in the log exactly once (before: at protocol 20 each reconnect
    added the whole retained history again)."""

    async def body() -> None:
        simulator = Simulator(one_workspace_config(tmp_short, protocol=protocol), tmp_short / "herdr.sock")
        await simulator.start()
        state = StateStore.open(tmp_short / "state.db")
        log = EventLog(state)
        client = HerdrClient(simulator.socket_path)
        try:
            async with _following(EventFeed(client, log)):
                made = [simulator.add_pane("w1") for _ in range(3)]
                simulator.close_pane(made[0])
                # Herdr sends one event of a kind per 100 ms poll: the closes may come first.
                await wait_until_async(
                    lambda: (
                        _lifecycle_counts(log)["pane_created"] == 3
                        and _lifecycle_counts(log)["pane_closed"] == 1
                    ),
                    "the three creations and the close",
                )
            simulator.add_pane("w1")  # while no feed follows: only a replay brings it
            made_in_all = 4 if protocol == 20 else 3
            expected: Counter[str] | None = None
            for _round in range(3):
                feed = EventFeed(client, log)
                async with _following(feed):
                    await wait_until_async(
                        lambda: _lifecycle_counts(log)["pane_created"] == made_in_all or None,
                        "the panes made",
                    )
                    # Herdr replays one event per kind per 100 ms: let a whole replay go by.
                    await asyncio.sleep(1.5)  # the subject: a window in which a re-recorded replay would show
                counts = _lifecycle_counts(log)
                expected = expected or counts
                assert counts == expected, (counts, expected)
            assert expected is not None
            assert expected["pane_created"] == made_in_all and expected["pane_closed"] == 1, expected
        finally:
            state.close()
            await simulator.stop()

    run(body(), timeout=90)


def test_two_runtimes_sharing_a_log_record_each_event_once(tmp_short: Path) -> None:
    async def body() -> None:
        simulator = Simulator(one_workspace_config(tmp_short), tmp_short / "herdr.sock")
        await simulator.start()
        state_a = StateStore.open(tmp_short / "state.db")
        state_b = StateStore.open(tmp_short / "state.db")
        seen_by_b: list[str] = []
        first = EventFeed(
            HerdrClient(simulator.socket_path), EventLog(state_a), lease=Lease(state_a, "events"), owner="a"
        )
        second = EventFeed(
            HerdrClient(simulator.socket_path),
            EventLog(state_b),
            lease=Lease(state_b, "events"),
            owner="b",
            on_event=lambda event: seen_by_b.append(event.name),
        )
        try:
            async with _following(first), _following(second):
                for _ in range(3):
                    simulator.add_pane("w1")
                await wait_until_async(
                    lambda: seen_by_b.count("pane_created") == 3 or None, "the second runtime's events"
                )
                log = EventLog(state_a)
                await wait_until_async(lambda: _lifecycle_counts(log)["pane_created"] >= 3 or None, "the log")
                await asyncio.sleep(0.3)  # the subject: a window in which a second record would show
                assert _lifecycle_counts(log)["pane_created"] == 3
        finally:
            state_a.close()
            state_b.close()
            await simulator.stop()

    run(body(), timeout=60)


def test_a_gone_pane_costs_the_other_panes_their_status_events_nothing(tmp_short: Path) -> None:
    async def body() -> None:
        simulator = Simulator(one_workspace_config(tmp_short), tmp_short / "herdr.sock")
        await simulator.start()
        state = StateStore.open(tmp_short / "state.db")
        log = EventLog(state)
        feed = EventFeed(HerdrClient(simulator.socket_path), log)
        try:
            follower = asyncio.create_task(feed._follow_status(["w1:p9", "w1:p2"]))
            await asyncio.sleep(0.3)  # the refusal and the retry's subscribe: a change before is no event
            simulator.set_agent_status("coder", "working")
            await wait_until_async(
                lambda: (
                    any(
                        e["event"] == "pane.agent_status_changed" and e["data"].get("pane_id") == "w1:p2"
                        for e in log.since(0, workspace=None, limit=100)["events"]
                    )
                    or None
                ),
                "w1:p2's status event",
            )
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
        finally:
            state.close()
            await simulator.stop()

    run(body(), timeout=30)
