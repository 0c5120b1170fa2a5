"""The durable event log behind herdr_since: paging, workspace filter, pruning gaps, restarts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.errors import ToolError
from herdr_mcp.state.event_log import EventLog
from herdr_mcp.state.store import StateStore

AT = 1_700_000_000.25  # 2023-11-14T22:13:20.250Z


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    opened = StateStore.open(tmp_path / "state.db")
    yield opened
    opened.close()


def fill(log: EventLog, count: int, workspace: str | None = "w1") -> list[int]:
    return [log.append("agent.status", workspace, {"n": index}, AT + index) for index in range(count)]


def seqs(answer: dict[str, Any]) -> list[int]:
    return [event["seq"] for event in answer["events"]]


def test_an_empty_log(store: StateStore) -> None:
    log = EventLog(store)
    assert log.last_seq() == 0
    assert log.since(0, workspace=None, limit=10) == {
        "events": [],
        "next_cursor": 0,
        "more": False,
        "gap": False,
    }


def test_events_come_oldest_first_in_pages(store: StateStore) -> None:
    log = EventLog(store)
    numbers = fill(log, 7)
    assert numbers == list(range(1, 8))
    assert log.last_seq() == 7

    first = log.since(0, workspace=None, limit=3)
    assert first["events"][0] == {
        "seq": 1,
        "event": "agent.status",
        "data": {"n": 0},
        "at": "2023-11-14T22:13:20.250Z",
    }
    assert (seqs(first), first["next_cursor"], first["more"], first["gap"]) == ([1, 2, 3], 3, True, False)
    second = log.since(first["next_cursor"], workspace=None, limit=3)
    assert (seqs(second), second["next_cursor"], second["more"]) == ([4, 5, 6], 6, True)
    third = log.since(second["next_cursor"], workspace=None, limit=3)
    assert (seqs(third), third["next_cursor"], third["more"]) == ([7], 7, False)
    caught_up = log.since(7, workspace=None, limit=3)
    assert caught_up == {"events": [], "next_cursor": 7, "more": False, "gap": False}


def test_workspace_filter_skips_other_workspaces_for_good(store: StateStore) -> None:
    log = EventLog(store)
    log.append("pane.created", "w1", {"pane_id": "w1:p1"}, AT)
    log.append("pane.created", "w2", {"pane_id": "w2:p1"}, AT)
    log.append("workspace.created", None, {}, AT)
    log.append("agent.status", "w1", {"status": "working"}, AT)
    log.append("agent.status", "w2", {"status": "idle"}, AT)

    answer = log.since(0, workspace="w1", limit=10)
    assert (seqs(answer), answer["next_cursor"], answer["more"]) == ([1, 4], 5, False)
    paged = log.since(0, workspace="w2", limit=1)
    assert (seqs(paged), paged["next_cursor"], paged["more"]) == ([2], 2, True)
    rest = log.since(2, workspace="w2", limit=1)
    assert (seqs(rest), rest["next_cursor"], rest["more"]) == ([5], 5, False)
    assert seqs(log.since(0, workspace="w9", limit=10)) == []
    assert log.since(0, workspace="w9", limit=10)["next_cursor"] == 5


def test_pruning_keeps_the_newest_and_reports_gaps(store: StateStore) -> None:
    log = EventLog(store, keep=10)
    fill(log, 25)
    count, oldest = store.connection().execute("SELECT COUNT(*), MIN(seq) FROM events").fetchone()
    assert (count, oldest) == (10, 16)
    # A cursor right before the oldest kept event missed nothing.
    assert log.since(15, workspace=None, limit=100)["gap"] is False
    assert seqs(log.since(15, workspace=None, limit=100)) == list(range(16, 26))
    # An older one did: events 6..15 are gone.
    behind = log.since(5, workspace=None, limit=4)
    assert (seqs(behind), behind["gap"], behind["more"], behind["next_cursor"]) == (
        [16, 17, 18, 19],
        True,
        True,
        19,
    )
    # Cursor 0 means "from whatever is kept", never a gap.
    assert log.since(0, workspace=None, limit=100)["gap"] is False


def test_a_cursor_from_a_deleted_database_restarts_with_a_gap(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = StateStore.open(path)
    fill(EventLog(store), 30)
    store.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)

    store = StateStore.open(path)
    try:
        log = EventLog(store)
        fill(log, 3)
        answer = log.since(30, workspace=None, limit=10)
        assert (seqs(answer), answer["gap"], answer["next_cursor"], answer["more"]) == (
            [1, 2, 3],
            True,
            3,
            False,
        )
        # So is a cursor of the in-memory feed that numbered from its start time.
        assert log.since(1_700_000_000_000_000, workspace=None, limit=10)["gap"] is True
    finally:
        store.close()


def test_cursors_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = StateStore.open(path)
    log = EventLog(store, keep=1000)
    fill(log, 5)
    cursor = log.since(0, workspace=None, limit=3)["next_cursor"]
    store.close()

    reopened = StateStore.open(path)
    try:
        log = EventLog(reopened, keep=1000)
        assert log.last_seq() == 5
        assert log.append("after.restart", "w1", {}, AT) == 6
        answer = log.since(cursor, workspace=None, limit=10)
        assert (seqs(answer), answer["gap"], answer["next_cursor"]) == ([4, 5, 6], False, 6)
    finally:
        reopened.close()


def test_numbers_are_never_reused_after_pruning(store: StateStore) -> None:
    log = EventLog(store, keep=1)
    fill(log, 3)
    store.connection().execute("DELETE FROM events")  # even with nothing left
    assert log.last_seq() == 3
    assert log.append("next", None, {}, AT) == 4
    assert log.since(3, workspace=None, limit=5)["gap"] is False


def test_bad_arguments(store: StateStore) -> None:
    log = EventLog(store)
    for cursor, limit in ((-1, 10), (0, 0)):
        with pytest.raises(ToolError) as error:
            log.since(cursor, workspace=None, limit=limit)
        assert error.value.code == "invalid_arguments"
    with pytest.raises(ValueError, match="keep"):
        EventLog(store, keep=0)
    with pytest.raises(ValueError, match="not JSON compliant"):
        log.append("bad", None, {"x": float("inf")}, AT)


def test_append_throughput(store: StateStore) -> None:
    log = EventLog(store, keep=500)
    began = time.perf_counter()
    fill(log, 2000)
    elapsed = time.perf_counter() - began
    # One transaction per event: typically 30-60 µs each on a local disk. The bound only catches
    # a regression to synchronous fsyncs or full-table pruning.
    assert elapsed < 4.0, f"2000 appends took {elapsed:.2f}s"
    assert store.connection().execute("SELECT COUNT(*) FROM events").fetchone()[0] <= 500 + 50
