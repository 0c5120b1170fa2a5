"""The Continuity Journal through its herdr_call methods, on a real state.db in a tmp dir."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.tools.continuity_methods import CONTINUITY_METHODS
from herdr_mcp.state import STATE_SCHEMA
from herdr_mcp.state.continuity_identity import parse_conversation_url
from herdr_mcp.state.store import StateStore
from tests.support.journal_helpers import METHODS, call, refused

URL_A = "https://chatgpt.com/g/g-p-0a1b2c-launch-plan/c/aaaa-1111"
URL_B = "https://chat.z.ai/c/bbbb-2222"


def append(store: StateStore, key: str, text: str, role: str = "user", **identity: Any) -> dict[str, Any]:
    return call(store, "herdr_mcp.continuity.turn.append", turn_key=key, role=role, text=text, **identity)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    opened = StateStore.open(tmp_path / "state.db")
    yield opened
    opened.close()


def test_schema_and_method_table(store: StateStore) -> None:
    assert store.schema_version() == STATE_SCHEMA >= 3
    tables = {
        row[0] for row in store.connection().execute("SELECT name FROM sqlite_master WHERE type='table'")
    }
    assert {"continuity_chains", "continuity_turns", "continuity_turns_fts", "continuity_transfers"} <= tables
    assert set(METHODS) == {
        "herdr_mcp.continuity.turn.append",
        "herdr_mcp.continuity.resolve",
        "herdr_mcp.continuity.search",
        "herdr_mcp.continuity.resume",
        "herdr_mcp.work_memory.checkpoint.put",
        "herdr_mcp.work_memory.resume",
        "herdr_mcp.work_memory.reclaim",
        "herdr_mcp.browser_handoff.prepare",
    }
    for spec in CONTINUITY_METHODS:
        Draft202012Validator.check_schema(spec.params_schema)
        assert spec.params_schema["additionalProperties"] is False
        assert spec.summary
    writers = {spec.name for spec in CONTINUITY_METHODS if spec.mutates}
    assert "herdr_mcp.continuity.resolve" not in writers
    assert "herdr_mcp.continuity.turn.append" in writers


def test_append_is_idempotent_per_turn(store: StateStore) -> None:
    first = append(store, "m1", "Plan the launch", conversation_url=URL_A)
    again = append(store, "m1", "Plan the launch", conversation_url=URL_A)
    assert first["idempotent_replay"] is False and again["idempotent_replay"] is True
    assert {**first, "idempotent_replay": True} == again
    second = append(
        store, "m2", "Here is a plan", role="assistant", site="chatgpt", conversation_id="aaaa-1111"
    )
    assert second["continuity_id"] == first["continuity_id"] and second["seq"] == 2
    (count,) = store.connection().execute("SELECT count(*) FROM continuity_turns").fetchone()
    assert count == 2

    conflict = refused(
        store,
        "herdr_mcp.continuity.turn.append",
        turn_key="m1",
        role="user",
        text="Other",
        conversation_url=URL_A,
    )
    assert conflict.code == "continuity_turn_conflict"
    assert conflict.details["seq"] == 1


def test_concurrent_duplicate_appends_write_one_turn(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    StateStore.open(path).close()
    answers: list[dict[str, Any]] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        own = StateStore(path)
        barrier.wait()
        answers.append(append(own, "m1", "same turn", conversation_url=URL_B))
        own.close()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 8
    assert sum(not answer["idempotent_replay"] for answer in answers) == 1
    assert len({(a["continuity_id"], a["seq"], a["appended_at"]) for a in answers}) == 1
    check = StateStore(path)
    (count,) = check.connection().execute("SELECT count(*) FROM continuity_turns").fetchone()
    check.close()
    assert count == 1


def test_new_conversation_in_a_bound_project_joins_its_chain(store: StateStore) -> None:
    first = append(store, "m1", "Start", conversation_url=URL_A)
    later = append(store, "n1", "继续", conversation_url="https://chatgpt.com/g/g-p-0a1b2c/c/cccc-3333")
    assert later["continuity_id"] == first["continuity_id"] and later["seq"] == 2
    found = call(store, "herdr_mcp.continuity.resolve", site="chatgpt", conversation_id="cccc-3333")
    assert found["status"] == "resolved"
    assert found["context"]["matched_by"] == "conversation_id"


def test_a_conversation_never_moves_to_another_chain(store: StateStore) -> None:
    a = append(store, "m1", "one", conversation_url=URL_A)
    b = append(store, "m1", "two", conversation_url=URL_B)
    error = refused(
        store,
        "herdr_mcp.continuity.turn.append",
        turn_key="m2",
        role="user",
        text="x",
        conversation_url=URL_B,
        continuity_id=a["continuity_id"],
    )
    assert error.code == "continuity_binding_conflict"
    assert error.details["bound_continuity_id"] == b["continuity_id"]


@pytest.mark.parametrize(
    ("url", "site", "conversation", "project"),
    [
        ("https://chatgpt.com/c/abc-123", "chatgpt", "abc-123", None),
        (
            "https://chatgpt.com/g/g-p-0a1b2c-my-notes/c/abc-123?model=x#end",
            "chatgpt",
            "abc-123",
            "g-p-0a1b2c",
        ),
        ("https://chatgpt.com/g/g-p-0a1b2c/project", "chatgpt", None, "g-p-0a1b2c"),
        ("https://chat.openai.com/c/abc-123/", "chatgpt", "abc-123", None),
        ("https://chat.z.ai/c/1b2c-3d", "zai", "1b2c-3d", None),
        ("https://chat.deepseek.com/a/chat/s/9f8e-7d", "deepseek", "9f8e-7d", None),
    ],
)
def test_conversation_urls_parse(url: str, site: str, conversation: str | None, project: str | None) -> None:
    location = parse_conversation_url(url)
    assert (location.site, location.conversation_id, location.project_id) == (site, conversation, project)


@pytest.mark.parametrize(
    "url",
    [
        "http://chatgpt.com/c/abc",
        "https://evil.example/c/abc",
        "https://chatgpt.com/",
        "https://chatgpt.com/share/abc",
        "https://chat.z.ai/s/abc",
        "https://chatgpt.com/c/../../etc",
        "https://user@chatgpt.com/c/abc",
    ],
)
def test_unrecognized_urls_are_refused(store: StateStore, url: str) -> None:
    with pytest.raises(ToolError) as caught:  # the parser itself, past the schema's https check
        METHODS["herdr_mcp.continuity.resume"].run(store, {"conversation_url": url})
    assert caught.value.code == "conversation_url_unrecognized"


def test_url_and_explicit_identity_must_agree(store: StateStore) -> None:
    error = refused(
        store, "herdr_mcp.continuity.resume", conversation_url=URL_A, site="chatgpt", conversation_id="zzzz"
    )
    assert error.code == "continuity_identity_conflict"


def _two_chains_on_one_workspace(store: StateStore) -> tuple[str, str]:
    a = append(
        store,
        "m1",
        "Refactor the billing service",
        conversation_url=URL_A,
        workspace_id="w1",
        title="Billing",
    )
    append(store, "m2", "Split invoices from payments", role="assistant", conversation_url=URL_A)
    b = append(store, "m1", "Write the release notes", conversation_url=URL_B, workspace_id="w1")
    return a["continuity_id"], b["continuity_id"]


@pytest.mark.parametrize(
    ("identity", "matched_by"),
    [
        ({"conversation_url": URL_A}, "conversation_id"),
        ({"site": "chatgpt", "conversation_id": "aaaa-1111"}, "conversation_id"),
        ({"site": "chatgpt", "project_id": "g-p-0a1b2c"}, "project_id"),
        ({"workspace_id": "w2"}, "workspace_id"),
        ({"site": "chatgpt", "conversation_id": "never-seen", "project_id": "g-p-0a1b2c"}, "project_id"),
    ],
)
def test_resolve_by_a_stable_identity_resumes(
    store: StateStore, identity: dict[str, Any], matched_by: str
) -> None:
    chain = append(store, "m1", "Ship the feature", conversation_url=URL_A, workspace_id="w2")[
        "continuity_id"
    ]
    append(store, "m1", "Unrelated", conversation_url=URL_B, workspace_id="w3")
    answer = call(store, "herdr_mcp.continuity.resolve", **identity)
    assert answer["status"] == "resolved"
    assert answer["context"]["continuity_id"] == chain
    assert answer["context"]["matched_by"] == matched_by
    assert answer["context"]["recent_turns"][-1]["text"] == "Ship the feature"
    by_id = call(store, "herdr_mcp.continuity.resolve", continuity_id=chain)
    assert by_id["status"] == "resolved" and by_id["context"]["matched_by"] == "continuity_id"


def test_text_match_needs_confirmation_even_with_one_candidate(store: StateStore) -> None:
    chain, _ = _two_chains_on_one_workspace(store)
    answer = call(store, "herdr_mcp.continuity.resolve", text="invoices payments")
    assert answer["status"] == "needs_confirmation"
    assert "context" not in answer
    assert [c["continuity_id"] for c in answer["candidates"]] == [chain]
    assert answer["candidates"][0]["matched_by"] == "text"
    assert "invoices" in answer["candidates"][0]["match_excerpt"]


def test_ambiguous_identity_lists_bounded_candidates(store: StateStore) -> None:
    first, second = _two_chains_on_one_workspace(store)
    for number in range(4):
        append(
            store,
            "m1",
            f"More work {number}",
            conversation_url=f"https://chat.z.ai/c/extra-{number}",
            workspace_id="w1",
        )
    answer = call(store, "herdr_mcp.continuity.resolve", workspace_id="w1", limit=3)
    assert answer["status"] == "ambiguous"
    assert answer["candidate_count"] == 6
    assert len(answer["candidates"]) == 3
    for entry in answer["candidates"]:
        assert set(entry) >= {"continuity_id", "title", "workspace_ids", "updated_at", "recent_summary"}
        assert entry["workspace_ids"] == ["w1"]
        assert entry["updated_at"].endswith("Z")
        assert entry["recent_summary"]
    full = call(store, "herdr_mcp.continuity.resolve", workspace_id="w1", limit=10)
    titles = {entry["continuity_id"]: entry["title"] for entry in full["candidates"]}
    assert titles[first] == "Billing"
    assert titles[second] == "Write the release notes"

    error = refused(store, "herdr_mcp.continuity.resume", workspace_id="w1")
    assert error.code == "continuity_ambiguous"
    assert error.details["candidate_count"] == 6


def test_no_match_is_never_a_guess(store: StateStore) -> None:
    _two_chains_on_one_workspace(store)
    nothing = call(store, "herdr_mcp.continuity.resolve", site="zai", conversation_id="unknown-1")
    assert nothing == {"status": "not_found", "candidate_count": 0, "candidates": []}
    no_text = call(store, "herdr_mcp.continuity.resolve", text="kubernetes")
    assert no_text["status"] == "not_found"
    continuing = call(store, "herdr_mcp.continuity.resolve", text="继续")
    assert continuing["status"] == "not_found"
    error = refused(store, "herdr_mcp.continuity.resolve")
    assert error.code == "continuity_identity_required"
    missing = refused(store, "herdr_mcp.continuity.resume", conversation_url="https://chat.z.ai/c/never")
    assert missing.code == "continuity_not_found"


def test_resume_by_full_url_and_bounds(store: StateStore) -> None:
    for number in range(1, 31):
        role = "user" if number % 2 else "assistant"
        append(store, f"m{number}", f"turn {number} " + "x" * 100, role=role, conversation_url=URL_A)
    variant = URL_A + "/?utm=1#bottom"
    context = call(store, "herdr_mcp.continuity.resume", conversation_url=variant, max_turns=5)
    assert [turn["seq"] for turn in context["recent_turns"]] == [26, 27, 28, 29, 30]
    assert context["omitted_turns"] == 25
    assert context["turn_count"] == 30
    assert "not live state" in context["notice"]
    tight = call(store, "herdr_mcp.continuity.resume", conversation_url=URL_A, max_chars=250)
    assert sum(len(turn["text"]) for turn in tight["recent_turns"]) <= 250
    assert tight["recent_turns"][-1]["seq"] == 30
    assert tight["recent_turns"][0]["truncated"] is True


def test_search_ranks_and_bounds(store: StateStore) -> None:
    chain_a = append(store, "m1", "deploy pipeline", conversation_url=URL_A)["continuity_id"]
    filler = " ".join(f"word{n}" for n in range(80))
    append(store, "m2", f"{filler} deploy {filler}", role="assistant", conversation_url=URL_A)
    for number in range(20):
        append(store, f"z{number}", f"deploy attempt {number} failed", conversation_url=URL_B)
    answer = call(store, "herdr_mcp.continuity.search", query="deploy pipeline")
    assert answer["match"] == "all"
    assert [hit["seq"] for hit in answer["hits"]] == [1]
    bounded = call(store, "herdr_mcp.continuity.search", query="deploy", limit=5)
    assert len(bounded["hits"]) == 5 and bounded["truncated"] is True
    ranked = call(store, "herdr_mcp.continuity.search", query="deploy", limit=50)
    assert ranked["hits"][-1]["seq"] == 2  # the long message mentions it once among 160 words
    either = call(store, "herdr_mcp.continuity.search", query="pipeline kubernetes")
    assert either["match"] == "any" and [hit["seq"] for hit in either["hits"]] == [1]
    scoped = call(store, "herdr_mcp.continuity.search", query="deploy", continuity_id=chain_a, limit=50)
    assert {hit["seq"] for hit in scoped["hits"]} == {1, 2}


def test_search_finds_cjk_inside_sentences(store: StateStore) -> None:
    append(store, "m1", "我们继续修复登录模块的测试。", conversation_url=URL_B)
    append(store, "m2", "登出功能已经完成", role="assistant", conversation_url=URL_B)
    hits = call(store, "herdr_mcp.continuity.search", query="登录")["hits"]
    assert [hit["seq"] for hit in hits] == [1]
    assert call(store, "herdr_mcp.continuity.search", query="录登")["hits"] == []


@pytest.mark.parametrize(
    "query",
    [
        '"unbalanced',
        "deploy AND OR NOT",
        "deploy*",
        "body:deploy",
        "(((deploy",
        "NEAR(deploy pipeline, 2)",
        "'; DROP TABLE continuity_turns; --",
        "^deploy",
        "- deploy +",
        "{body} : deploy",
        "deploy\x00pipeline",
    ],
)
def test_search_query_syntax_is_plain_text(store: StateStore, query: str) -> None:
    append(store, "m1", "deploy pipeline", conversation_url=URL_A)
    answer = call(store, "herdr_mcp.continuity.search", query=query)
    assert isinstance(answer["hits"], list)
    assert store.connection().execute("SELECT count(*) FROM continuity_turns").fetchone()[0] == 1


@pytest.mark.parametrize("query", ['"', "***", '""', "- + ^", "()", "\x00"])
def test_search_without_words_is_refused(store: StateStore, query: str) -> None:
    error = refused(store, "herdr_mcp.continuity.search", query=query)
    assert error.code == "continuity_query_unsearchable"


def test_unavailable_journal_is_reported_and_not_recreated(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = StateStore.open(path)
    append(store, "m1", "hello", conversation_url=URL_A)
    store.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    error = refused(store, "herdr_mcp.continuity.search", query="hello")
    assert error.code == "continuity_journal_unavailable"
    assert not path.exists()


@pytest.mark.slow
def test_search_over_thousands_of_turns_stays_bounded(store: StateStore) -> None:
    """A smaller real case of the 100,000-turn benchmark (benchmarks/continuity_bench.py)."""
    vocabulary = [f"term{n}" for n in range(400)]
    chains = []
    for chain in range(26):
        url = f"https://chat.z.ai/c/load-{chain}"
        for turn in range(200):
            words = " ".join(vocabulary[(chain * 7 + turn * 13 + k * 31) % 400] for k in range(12))
            role = "user" if turn % 2 else "assistant"
            answer = append(store, f"t{turn}", f"common {words}", role=role, conversation_url=url)
        chains.append(answer["continuity_id"])
    timings = []
    for number in range(40):
        started = time.perf_counter()
        answer = call(
            store, "herdr_mcp.continuity.search", query=f"{vocabulary[number * 9]} {vocabulary[number]}"
        )
        timings.append(time.perf_counter() - started)
        assert len(answer["hits"]) <= 10 and answer["ranked_within_newest"] is None
    assert statistics.quantiles(timings, n=20)[-1] < 0.5

    # 5,200 turns say "common": ranking looks at the newest 5,000 of them only.
    common = call(store, "herdr_mcp.continuity.search", query="common", limit=50)
    assert len(common["hits"]) == 50 and common["truncated"] is True
    assert common["ranked_within_newest"] == 5_000
    assert chains[0] not in {hit["continuity_id"] for hit in common["hits"]}
    scoped = call(store, "herdr_mcp.continuity.search", query="common", continuity_id=chains[0], limit=50)
    assert {hit["continuity_id"] for hit in scoped["hits"]} == {chains[0]}
    assert len(scoped["hits"]) == 50 and scoped["ranked_within_newest"] is None
