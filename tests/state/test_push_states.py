"""The durable half of the push plane on a real state.db (state/push.py): which statuses make a
transition, `workspace_working`, gone, reading ranges with gap and paging, and the push lease;
and what counts as new output between two pane reads (runtime/push/output.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from herdr_mcp.runtime.push.output import clip, new_output
from herdr_mcp.state.push import AgentStates
from herdr_mcp.state.store import StateStore


@pytest.fixture
def states(tmp_path: Path) -> Iterator[AgentStates]:
    store = StateStore.open(tmp_path / "state.db")
    try:
        yield AgentStates(store)
    finally:
        store.close()


def test_only_moves_between_working_and_not_working_are_transitions(states: AgentStates) -> None:
    assert states.observe("w1:p1", "w1", "coder", "idle") is None  # first sight: no news
    working = states.observe("w1:p1", "w1", "coder", "working")
    assert working is not None and working.name == "agent_working"
    assert set(working.data) == {"seq", "workspace_id", "pane_id", "agent", "at"}
    assert states.observe("w1:p1", "w1", "coder", "working") is None
    settled = states.observe("w1:p1", "w1", "coder", "done")
    assert settled is not None and settled.name == "agent_settled"
    assert (settled.data["status"], settled.data["workspace_working"]) == ("done", False)
    assert states.observe("w1:p1", "w1", "coder", "idle") is None  # done -> idle: still settled
    assert states.known()["w1:p1"].status == "idle"
    assert settled.seq > working.seq == working.data["seq"]


def test_workspace_working_counts_the_other_agents_of_the_workspace(states: AgentStates) -> None:
    states.observe("w1:p1", "w1", "coder", "working")
    states.observe("w1:p2", "w1", "tester", "working")
    states.observe("w2:p1", "w2", "reviewer", "working")
    first = states.observe("w1:p1", "w1", "coder", "blocked")
    assert first is not None and first.data["workspace_working"] is True
    lost = states.observe("w1:p2", "w1", "tester", "unknown")  # Herdr no longer sees an agent
    assert lost is not None and (lost.data["status"], lost.data["workspace_working"]) == ("unknown", False)
    gone = states.gone("w2:p1")
    assert gone is not None and gone.name == "agent_gone" and gone.data["workspace_working"] is False
    assert states.gone("w2:p1") is None and states.gone("w9:p9") is None
    assert "w2:p1" not in states.known()


def test_read_pages_and_reports_gaps(states: AgentStates) -> None:
    recorded = []
    for _ in range(3):
        for status in ("working", "idle"):
            event = states.observe("w1:p1", "w1", "coder", status)
            assert event is not None
            recorded.append(event.seq)
    page = states.read(0, limit=4)
    assert [e.seq for e in page.events] == recorded[:4] and page.more and page.upto == recorded[3]
    rest = states.read(page.upto)
    assert [e.seq for e in rest.events] == recorded[4:] and not rest.more and not rest.gap
    assert states.read(recorded[1], upto=recorded[3]).events[-1].seq == recorded[3]
    unknown = states.read(recorded[-1] + 100)
    assert unknown.unknown and unknown.gap and [e.seq for e in unknown.events] == recorded


def test_one_lease_holder_at_a_time(states: AgentStates) -> None:
    assert states.hold_lease("a", 60)
    assert not states.hold_lease("b", 60)  # a is alive and its lease runs
    assert states.hold_lease("a", 60)  # renewal
    states.release_lease("a")
    assert states.hold_lease("b", 60)
    # A holder whose process is gone loses the lease at once.
    states.release_lease("b")
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert states.hold_lease("c", 60, pid=dead.pid)
    assert states.hold_lease("d", 60)
    assert not states.hold_lease("c", 60)  # and d's is alive
    # An expired lease is taken over even while its process lives.
    assert states.hold_lease("d", 0)
    assert states.hold_lease("e", 60)


@pytest.mark.parametrize(
    ("previous", "current", "added"),
    [
        ("", "", ""),
        ("a\nb", "a\nb", ""),
        ("", "hello", "hello"),
        ("a\nb", "a\nb\nc", "\nc"),
        ("a\nhalf", "a\nhalf done\nnext", " done\nnext"),
        ("1\n2\n3", "2\n3\n4\n5", "\n4\n5"),  # the window scrolled by two lines
        ("x\ny", "p\nq", "p\nq"),  # nothing in common: all of it is new
        ("a\na\na", "a\na\na\na", "\na"),
    ],
)
def test_new_output_is_what_follows_the_overlap(previous: str, current: str, added: str) -> None:
    assert new_output(previous, current) == added


def test_clip_keeps_the_newest_characters() -> None:
    assert clip("abc", 5) == ("abc", False)
    assert clip("abcdefg", 3) == ("efg", True)
