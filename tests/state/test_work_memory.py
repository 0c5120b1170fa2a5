"""Work Memory checkpoints (CAS, evidence partitions, verification), resume and reclaim."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.errors import ToolError
from herdr_mcp.state.store import StateStore
from tests.support.journal_helpers import call, refused

PUT = "herdr_mcp.work_memory.checkpoint.put"
PARTITION = {"project_ref": "proj-billing", "repo_id": "github.com/acme/billing", "work_chain_id": "invoices"}


def journal(store: StateStore, url: str, count: int) -> str:
    """Append `count` turns "message N ..." to the conversation at `url`; returns the chain."""
    chain = ""
    for seq in range(1, count + 1):
        chain = call(
            store,
            "herdr_mcp.continuity.turn.append",
            conversation_url=url,
            turn_key=f"k{seq}",
            role="user" if seq % 2 else "assistant",
            text=f"message {seq} about invoice rounding step{seq}",
        )["continuity_id"]
    return chain


def anchor(seq: int) -> dict[str, Any]:
    return {"kind": "message", "seq": seq, "quote": f"message {seq} about"}


def put(
    store: StateStore,
    expected: int,
    covers: int,
    anchors: list[dict[str, Any]],
    *,
    partition: dict[str, str] = PARTITION,
    goal: str = "Fix invoice rounding",
    **extra: Any,
) -> dict[str, Any]:
    return call(
        store,
        PUT,
        **partition,
        expected_revision=expected,
        covers_through_seq=covers,
        content={"goal": goal, "progress": [f"covered {covers}"], "next_steps": ["run the tests"]},
        anchors=anchors,
        **extra,
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    opened = StateStore.open(tmp_path / "state.db")
    yield opened
    opened.close()


@pytest.fixture
def chain(store: StateStore) -> str:
    return journal(store, "https://chat.z.ai/c/main-1", 15)


def body(store: StateStore, chain: str, seq: int) -> str:
    row = (
        store.connection()
        .execute("SELECT body FROM continuity_turns WHERE continuity_id = ? AND seq = ?", (chain, seq))
        .fetchone()
    )
    return str(row[0])


def test_first_checkpoint_names_its_chain(store: StateStore, chain: str) -> None:
    error = refused(store, PUT, **PARTITION, expected_revision=0, covers_through_seq=3, content={"goal": "x"})
    assert error.code == "work_memory_chain_required"
    first = put(store, 0, 3, [anchor(3)], continuity_id=chain)
    assert (first["revision"], first["verified"], first["problems"]) == (1, True, [])
    assert first["continuity_id"] == chain and len(first["evidence_ids"]) == 1
    assert refused(
        store, PUT, **PARTITION, expected_revision=0, covers_through_seq=3, content={"goal": "x"}
    ).code == ("checkpoint_revision_conflict")


def test_revision_compare_and_swap(store: StateStore, chain: str) -> None:
    put(store, 0, 3, [anchor(3)], continuity_id=chain)
    put(store, 1, 5, [anchor(5)])
    stale = refused(
        store,
        PUT,
        **PARTITION,
        expected_revision=1,
        covers_through_seq=6,
        content={"goal": "a stale writer"},
        anchors=[anchor(6)],
    )
    assert stale.code == "checkpoint_revision_conflict"
    assert stale.details["current_revision"] == 2
    assert call(store, "herdr_mcp.work_memory.resume", **PARTITION)["current_revision"] == 2
    assert put(store, 2, 6, [anchor(6)])["revision"] == 3


def test_concurrent_puts_at_one_revision_have_one_winner(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    setup = StateStore.open(path)
    chain = journal(setup, "https://chat.z.ai/c/race", 8)
    put(setup, 0, 2, [anchor(2)], continuity_id=chain)
    setup.close()
    outcomes: list[str] = []
    barrier = threading.Barrier(6)

    def writer(number: int) -> None:
        own = StateStore(path)
        barrier.wait()
        try:
            put(own, 1, 3 + number % 5, [anchor(3 + number % 5)], goal=f"writer {number}")
            outcomes.append("won")
        except ToolError as exc:
            outcomes.append(exc.code)
        own.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["checkpoint_revision_conflict"] * 5 + ["won"]


def test_a_repeated_put_is_answered_again(store: StateStore, chain: str) -> None:
    first = put(
        store,
        0,
        4,
        [anchor(4), {"kind": "commit", "ref": "1a2b3c", "note": "rounding fix"}],
        continuity_id=chain,
    )
    again = put(
        store,
        0,
        4,
        [anchor(4), {"kind": "commit", "ref": "1a2b3c", "note": "rounding fix"}],
        continuity_id=chain,
    )
    assert again == {**first, "idempotent_replay": True}
    (count,) = store.connection().execute("SELECT count(*) FROM work_memory_checkpoints").fetchone()
    assert count == 1


def test_evidence_from_another_partition_is_refused(store: StateStore, chain: str) -> None:
    other_chain = journal(store, "https://chat.z.ai/c/other-2", 4)
    other = {**PARTITION, "work_chain_id": "exports"}
    foreign = put(
        store,
        0,
        4,
        [anchor(4), {"kind": "file", "ref": "src/export.py"}],
        partition=other,
        continuity_id=other_chain,
    )
    put(store, 0, 3, [anchor(3)], continuity_id=chain)
    before = store.connection().execute("SELECT count(*) FROM work_memory_evidence").fetchone()[0]

    cross_message = {"kind": "message", "seq": 2, "quote": "message 2", "continuity_id": other_chain}
    error = refused(
        store,
        PUT,
        **PARTITION,
        expected_revision=1,
        covers_through_seq=5,
        content={"goal": "g"},
        anchors=[anchor(5), cross_message],
    )
    assert error.code == "evidence_partition_mismatch"
    cross_evidence = {"kind": "evidence", "evidence_id": foreign["evidence_ids"][1]}
    error = refused(
        store,
        PUT,
        **PARTITION,
        expected_revision=1,
        covers_through_seq=5,
        content={"goal": "g"},
        anchors=[anchor(5), cross_evidence],
    )
    assert error.code == "evidence_partition_mismatch"
    same_chain_other_repo = {**PARTITION, "repo_id": "github.com/acme/other"}
    error = refused(
        store,
        PUT,
        **same_chain_other_repo,
        expected_revision=0,
        covers_through_seq=5,
        continuity_id=chain,
        content={"goal": "g"},
        anchors=[{"kind": "evidence", "evidence_id": foreign["evidence_ids"][0]}],
    )
    assert error.code == "evidence_partition_mismatch"

    missing = refused(
        store,
        PUT,
        **PARTITION,
        expected_revision=1,
        covers_through_seq=5,
        content={"goal": "g"},
        anchors=[anchor(99)],
    )
    assert missing.code == "evidence_anchor_not_found"
    after = store.connection().execute("SELECT count(*) FROM work_memory_evidence").fetchone()[0]
    assert after == before
    assert call(store, "herdr_mcp.work_memory.resume", **PARTITION)["current_revision"] == 1
    error = refused(store, "herdr_mcp.work_memory.resume", **same_chain_other_repo)
    assert error.code == "work_memory_partition_not_found"


def test_coverage_must_stay_inside_the_journal_and_move_forward(store: StateStore, chain: str) -> None:
    assert (
        refused(
            store,
            PUT,
            **PARTITION,
            expected_revision=0,
            covers_through_seq=16,
            continuity_id=chain,
            content={"goal": "g"},
        ).code
        == "checkpoint_coverage_invalid"
    )
    put(store, 0, 8, [anchor(8)], continuity_id=chain)
    error = refused(
        store,
        PUT,
        **PARTITION,
        expected_revision=1,
        covers_through_seq=7,
        content={"goal": "g"},
        anchors=[anchor(7)],
    )
    assert error.code == "checkpoint_coverage_invalid"
    assert error.details == {"argument": "covers_through_seq", "minimum": 8, "maximum": 15}


@pytest.mark.parametrize(
    ("anchors", "problem"),
    [
        ([], "message 6, the last one covered, is not anchored"),
        (
            [{"kind": "message", "seq": 6, "quote": "not what it said"}],
            "the quote given for message 6 is not in its text",
        ),
        ([anchor(6), anchor(7)], "message 7 is after the covered range 1..6"),
        ([anchor(5)], "message 6, the last one covered, is not anchored"),
        ([{"kind": "note", "ref": "CI is green"}], "message 6, the last one covered, is not anchored"),
    ],
)
def test_unverified_checkpoints_are_kept_but_never_resumed(
    store: StateStore, chain: str, anchors: list[dict[str, Any]], problem: str
) -> None:
    put(store, 0, 4, [anchor(4)], continuity_id=chain)
    draft = put(store, 1, 6, anchors, goal="draft")
    assert draft["verified"] is False and draft["revision"] == 2
    assert any(item.startswith(problem) for item in draft["problems"])
    resumed = call(store, "herdr_mcp.work_memory.resume", **PARTITION)
    assert resumed["checkpoint"]["revision"] == 1
    assert resumed["checkpoint"]["goal"] == "Fix invoice rounding"
    assert resumed["current_revision"] == 2 and resumed["newer_unverified_revisions"] == 1
    assert resumed["raw_tail"]["after_seq"] == 4


def test_reused_message_evidence_can_pin_the_coverage_end(store: StateStore, chain: str) -> None:
    first = put(store, 0, 6, [anchor(6)], continuity_id=chain)
    again = put(
        store,
        1,
        6,
        [{"kind": "evidence", "evidence_id": first["evidence_ids"][0]}],
        goal="same coverage, new words",
    )
    assert again["verified"] is True and again["evidence_ids"] == first["evidence_ids"]


def test_resume_shape(store: StateStore, chain: str) -> None:
    put(
        store,
        0,
        9,
        [anchor(9), {"kind": "command", "ref": "pytest -q", "note": "48 passed"}],
        continuity_id=chain,
    )
    resumed = call(store, "herdr_mcp.work_memory.resume", **PARTITION, max_turns=4)
    assert resumed["partition"] == {**PARTITION, "continuity_id": chain}
    checkpoint = resumed["checkpoint"]
    assert set(checkpoint) == {
        "revision", "covers_through_seq", "verified", "created_at", "goal", "constraints",
        "progress", "decisions", "critical_context", "next_steps", "evidence",
    }  # fmt: skip
    assert [item["kind"] for item in checkpoint["evidence"]] == ["message", "command"]
    assert checkpoint["evidence"][0]["seq"] == 9 and checkpoint["evidence"][1]["note"] == "48 passed"
    tail = resumed["raw_tail"]
    assert tail["after_seq"] == 9
    assert [turn["seq"] for turn in tail["turns"]] == [12, 13, 14, 15]
    assert tail["omitted_turns"] == 2
    assert "not live state" in resumed["notice"]


def test_resume_without_a_verified_checkpoint_starts_at_the_first_turn(store: StateStore, chain: str) -> None:
    put(store, 0, 3, [], continuity_id=chain)
    resumed = call(store, "herdr_mcp.work_memory.resume", **PARTITION, max_turns=100)
    assert resumed["checkpoint"] is None
    assert resumed["raw_tail"]["after_seq"] == 0 and len(resumed["raw_tail"]["turns"]) == 15


def reclaim(store: StateStore, chain: str, **params: Any) -> dict[str, Any]:
    return call(store, "herdr_mcp.work_memory.reclaim", continuity_id=chain, **params)


def test_reclaim_waits_for_a_verified_checkpoint(store: StateStore, chain: str) -> None:
    assert reclaim(store, chain)["reclaimed"] == 0
    put(store, 0, 10, [], continuity_id=chain)  # stored, not verified
    assert reclaim(store, chain)["reclaimed"] == 0
    assert all(body(store, chain, seq) for seq in range(1, 16))


def test_reclaim_only_what_the_verified_replacement_covers(store: StateStore, chain: str) -> None:
    put(store, 0, 10, [anchor(10), anchor(4)], continuity_id=chain)
    put(store, 1, 15, [], goal="newer but unverified")
    dry = reclaim(store, chain, dry_run=True)
    assert (dry["reclaimable"], dry["reclaimed"], dry["covered_through_seq"]) == (8, 0, 10)
    assert body(store, chain, 1)

    done = reclaim(store, chain, max_turns=5)
    assert (done["reclaimed"], done["more"]) == (5, True)
    rest = reclaim(store, chain)
    assert (rest["reclaimed"], rest["more"]) == (3, False)
    blank = [seq for seq in range(1, 16) if not body(store, chain, seq)]
    assert blank == [1, 2, 3, 5, 6, 7, 8, 9]  # 4 and 10 are anchored evidence; 11..15 uncovered
    kept = (
        store.connection()
        .execute(
            "SELECT body_sha256, body_chars, reclaimed_by FROM continuity_turns "
            "WHERE continuity_id = ? AND seq = 1",
            (chain,),
        )
        .fetchone()
    )
    assert len(kept["body_sha256"]) == 64 and kept["body_chars"] > 0 and kept["reclaimed_by"] is not None

    search = call(store, "herdr_mcp.continuity.search", query="step3")
    assert search["hits"] == []
    kept_hits = call(store, "herdr_mcp.continuity.search", query="step11", continuity_id=chain)["hits"]
    assert [hit["seq"] for hit in kept_hits] == [11]
    # Every turn says "about": the index must hold it for exactly the 7 turns still journaled.
    (indexed,) = (
        store.connection()
        .execute("SELECT count(*) FROM continuity_turns_fts WHERE continuity_turns_fts MATCH 'body : about'")
        .fetchone()
    )
    assert indexed == 7
    checkpoints = call(store, "herdr_mcp.continuity.search", query="rounding")["checkpoint_hits"]
    assert [hit["revision"] for hit in checkpoints] == [1]
    context = call(store, "herdr_mcp.continuity.resume", continuity_id=chain, max_turns=100)
    assert [turn["reclaimed"] for turn in context["recent_turns"]].count(True) == 8

    late = put(store, 2, 12, [{"kind": "message", "seq": 12, "quote": "message 12"}, anchor(2)])
    assert late["verified"] is False
    assert "message 2 was reclaimed, so its quote cannot be checked" in late["problems"]


def test_every_partition_of_the_chain_must_cover_a_turn(store: StateStore, chain: str) -> None:
    put(store, 0, 10, [anchor(10)], continuity_id=chain)
    second = {**PARTITION, "work_chain_id": "docs"}
    put(store, 0, 6, [], partition=second, continuity_id=chain)
    assert reclaim(store, chain)["reclaimed"] == 0
    put(store, 1, 6, [anchor(6)], partition=second)
    result = reclaim(store, chain)
    assert result["covered_through_seq"] == 6
    assert [seq for seq in range(1, 16) if not body(store, chain, seq)] == [1, 2, 3, 4, 5]


def test_search_shows_only_the_latest_verified_checkpoint(store: StateStore, chain: str) -> None:
    put(store, 0, 4, [anchor(4)], continuity_id=chain, goal="Investigate flaky rounding")
    put(store, 1, 6, [anchor(6)], goal="Ship banker's rounding")
    put(store, 2, 8, [], goal="Draft about something unverified")
    flaky = call(store, "herdr_mcp.continuity.search", query="flaky")["checkpoint_hits"]
    assert flaky == []
    shipped = call(store, "herdr_mcp.continuity.search", query="banker")["checkpoint_hits"]
    assert [(hit["work_chain_id"], hit["revision"]) for hit in shipped] == [("invoices", 2)]
    assert call(store, "herdr_mcp.continuity.search", query="unverified")["checkpoint_hits"] == []
