"""Handoff packages, the handoff document validator and builder, and `herdr-mcp handoff`."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.errors import ToolError
from herdr_mcp.state.handoff import SECTIONS, HandoffDocument, build_document
from herdr_mcp.state.store import StateStore
from tests.support.journal_helpers import call, refused

PREPARE = "herdr_mcp.browser_handoff.prepare"
SOURCE = "https://chatgpt.com/g/g-p-5e6f-roadmap/c/src-0001"
PARTITION = {"project_ref": "roadmap", "repo_id": "github.com/acme/app", "work_chain_id": "auth"}


def journal(store: StateStore, url: str, texts: list[str], **identity: Any) -> str:
    chain = ""
    for seq, text in enumerate(texts, start=1):
        chain = call(
            store,
            "herdr_mcp.continuity.turn.append",
            conversation_url=url,
            turn_key=f"k{seq}",
            role="user" if seq % 2 else "assistant",
            text=text,
            **identity,
        )["continuity_id"]
    return chain


CONVERSATION = [
    "Add OAuth login to the app; keep the session cookie httpOnly.",
    "I will add an /oauth/callback route in src/auth.py and test it with pytest.",
    "Use the existing Redis session store, not a new table.",
    "Done: callback route added, 12 tests pass. Token refresh is still missing.",
]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    opened = StateStore.open(tmp_path / "state.db")
    yield opened
    opened.close()


@pytest.fixture
def chain(store: StateStore) -> str:
    return journal(store, SOURCE, CONVERSATION, workspace_id="w7", title="OAuth login")


def snapshot(store: StateStore) -> list[list[tuple[Any, ...]]]:
    conn = store.connection()
    return [
        [tuple(row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1")]
        for table in ("continuity_chains", "continuity_bindings", "continuity_turns")
    ]


# --- packages ----------------------------------------------------------------------------------


def test_package_carries_one_message_for_both_deliveries(store: StateStore, chain: str) -> None:
    package = call(store, PREPARE, transfer_id="tr-1", continuity_id=chain, source_url=SOURCE)
    message = package["message"]
    assert package["automatic_delivery"]["params"]["message"].encode() == message.encode()
    assert package["manual_delivery"]["copy_prompt"].encode() == message.encode()
    assert package["continuity_id"] == chain and package["source_url"] == SOURCE
    assert package["work_chain_id"] is None and package["parent_transfer_id"] is None
    assert package["target_context"] == {"site": "chatgpt", "project_id": "g-p-5e6f"}
    assert message.splitlines()[0] == f"[herdr-handoff transfer=tr-1 continuity={chain}]"
    assert SOURCE in message and '"herdr_mcp.continuity.resume"' in message
    assert json.dumps({"continuity_id": chain}) in message
    assert len(message) < 1_000


def test_preparing_a_transfer_twice_returns_the_same_package(store: StateStore, chain: str) -> None:
    before = snapshot(store)
    first = call(store, PREPARE, transfer_id="tr-1", continuity_id=chain, source_url=SOURCE)
    again = call(
        store,
        PREPARE,
        transfer_id="tr-1",
        continuity_id=chain,
        source_url=SOURCE,
        browser_session_ref="tab-9",
    )
    assert json.dumps(again, sort_keys=True) == json.dumps(first, sort_keys=True)
    assert snapshot(store) == before  # the source chain is never changed by a handoff
    (count,) = store.connection().execute("SELECT count(*) FROM continuity_transfers").fetchone()
    assert count == 1
    other = journal(store, "https://chat.z.ai/c/zz-1", ["a", "b"])
    conflict = refused(
        store, PREPARE, transfer_id="tr-1", continuity_id=other, source_url="https://chat.z.ai/c/zz-1"
    )
    assert conflict.code == "handoff_transfer_conflict"


def test_transfers_record_their_parent(store: StateStore, chain: str) -> None:
    call(store, PREPARE, transfer_id="tr-1", continuity_id=chain, source_url=SOURCE)
    second = call(store, PREPARE, transfer_id="tr-2", continuity_id=chain, source_url=SOURCE)
    assert second["parent_transfer_id"] == "tr-1"


def test_package_names_the_work_memory_partition(store: StateStore, chain: str) -> None:
    call(
        store,
        "herdr_mcp.work_memory.checkpoint.put",
        **PARTITION,
        continuity_id=chain,
        expected_revision=0,
        covers_through_seq=4,
        content={"goal": "OAuth login"},
        anchors=[{"kind": "message", "seq": 4, "quote": "Token refresh is still missing."}],
    )
    package = call(
        store, PREPARE, transfer_id="tr-3", continuity_id=chain, source_url=SOURCE, work_chain_id="auth"
    )
    assert package["work_memory"] == PARTITION and package["checkpoint_revision"] == 1
    assert '"herdr_mcp.work_memory.resume"' in package["message"]
    assert json.dumps(PARTITION) in package["message"]
    error = refused(
        store, PREPARE, transfer_id="tr-4", continuity_id=chain, source_url=SOURCE, work_chain_id="billing"
    )
    assert error.code == "work_memory_partition_not_found"


def test_package_needs_the_chain_and_its_own_source(store: StateStore, chain: str) -> None:
    missing = refused(store, PREPARE, transfer_id="tr-1", continuity_id="cont_missing", source_url=SOURCE)
    assert missing.code == "continuity_not_found"
    other_url = "https://chat.z.ai/c/other-1"
    other = journal(store, other_url, ["x", "y"])
    wrong = refused(store, PREPARE, transfer_id="tr-1", continuity_id=chain, source_url=other_url)
    assert wrong.code == "handoff_source_mismatch" and wrong.details["bound_continuity_id"] == other
    unknown = refused(
        store, PREPARE, transfer_id="tr-1", continuity_id=chain, source_url="https://chatgpt.com/c/never"
    )
    assert unknown.code == "handoff_source_mismatch" and unknown.details["bound_continuity_id"] is None
    assert store.connection().execute("SELECT count(*) FROM continuity_transfers").fetchone()[0] == 0


def test_locked_journal_fails_and_keeps_the_source(store: StateStore, chain: str) -> None:
    before = snapshot(store)
    blocker = sqlite3.connect(store.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    store.connection().execute("PRAGMA busy_timeout = 50")
    try:
        error = refused(store, PREPARE, transfer_id="tr-1", continuity_id=chain, source_url=SOURCE)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert error.code == "continuity_journal_unavailable"
    assert snapshot(store) == before
    assert store.connection().execute("SELECT count(*) FROM continuity_transfers").fetchone()[0] == 0


def test_removed_journal_fails_and_is_not_recreated(store: StateStore, chain: str) -> None:
    store.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{store.path}{suffix}").unlink(missing_ok=True)
    error = refused(store, PREPARE, transfer_id="tr-1", continuity_id=chain, source_url=SOURCE)
    assert error.code == "continuity_journal_unavailable"
    assert not store.path.exists()


def test_unreadable_journal_fails_and_is_left_byte_identical(
    tmp_path: Path, store: StateStore, chain: str
) -> None:
    store.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    path = damaged / "state.db"
    shutil.copyfile(store.path, path)
    with path.open("r+b") as handle:  # a torn header: SQLite no longer recognizes the file
        handle.write(b"not a database, just bytes")
    original = path.read_bytes()
    error = refused(StateStore(path), PREPARE, transfer_id="tr-1", continuity_id=chain, source_url=SOURCE)
    assert error.code == "continuity_journal_unavailable"
    assert path.read_bytes() == original


# --- the document validator --------------------------------------------------------------------


def document(*sections: tuple[str, str], preamble: str = "# Handoff: test\n") -> str:
    return preamble + "".join(f"\n## {name}\n\n{body}\n" for name, body in sections)


VALID = [(name, f"Something about {name.lower()}.") for name in SECTIONS]


def invalid(text: str) -> ToolError:
    with pytest.raises(ToolError) as caught:
        HandoffDocument.parse(text)
    return caught.value


def test_a_complete_document_is_valid() -> None:
    parsed = HandoffDocument.parse(document(*VALID))
    assert [name for name, _ in parsed.sections] == list(SECTIONS)
    assert parsed.section("Key Decisions") == "Something about key decisions."


def test_none_is_an_explicit_answer_and_details_may_nest() -> None:
    sections = [*VALID[:3], ("Key Decisions", "None"), *VALID[4:]]
    text = document(*sections).replace(
        "Something about progress.", "### Done\n- a\n\n```bash\n# not a heading\n## Goal\n```\n"
    )
    parsed = HandoffDocument.parse(text)
    assert parsed.section("Key Decisions") == "None"
    assert "# not a heading" in parsed.section("Progress")


def test_lenient_heading_spelling() -> None:
    text = "\n".join(
        [
            "# 1. Goal:",
            "g",
            "# Constraints and Preferences",
            "c",
            "# progress",
            "p",
            "# Key Decisions",
            "k",
            "# Critical Context",
            "x",
            "# NEXT STEPS",
            "n",
        ]
    )
    assert len(HandoffDocument.parse(text).sections) == 6


def test_missing_sections_are_named() -> None:
    error = invalid(document(*[section for section in VALID if section[0] not in ("Goal", "Next Steps")]))
    assert error.code == "handoff_document_invalid"
    assert error.details["missing"] == ["Goal", "Next Steps"]
    assert error.details["out_of_order"] == [] and error.details["empty"] == []
    assert "missing: Goal, Next Steps" in error.message


def test_wrong_order_is_named() -> None:
    error = invalid(document(VALID[0], VALID[2], VALID[1], *VALID[3:]))
    assert error.details["out_of_order"] == ["Constraints & Preferences"]
    assert error.details["missing"] == []


def test_empty_duplicate_and_unexpected_sections_are_named() -> None:
    text = document(
        VALID[0], ("Constraints & Preferences", "  \n"), *VALID[2:], ("Goal", "again"), ("Appendix", "x")
    )
    error = invalid(text)
    assert error.details["empty"] == ["Constraints & Preferences"]
    assert error.details["duplicate"] == ["Goal"]
    assert error.details["unexpected"] == ["Appendix"]


@pytest.mark.parametrize("text", ["", "   \n\t\n"])
def test_empty_output_is_its_own_failure(text: str) -> None:
    error = invalid(text)
    assert error.code == "handoff_document_empty"
    assert "cancel" not in error.code and "not a cancellation" in error.message


def test_no_sections_at_all_is_invalid_not_empty() -> None:
    error = invalid("Here is my summary of the work without any headings.")
    assert error.code == "handoff_document_invalid"
    assert error.details["missing"] == list(SECTIONS)


# --- building a document -----------------------------------------------------------------------


def test_built_document_is_valid_and_records_lineage(store: StateStore, chain: str) -> None:
    call(store, PREPARE, transfer_id="tr-1", continuity_id=chain, source_url=SOURCE)
    call(
        store,
        "herdr_mcp.work_memory.checkpoint.put",
        **PARTITION,
        continuity_id=chain,
        expected_revision=0,
        covers_through_seq=2,
        content={
            "goal": "OAuth login for the app",
            "constraints": ["Session cookie stays httpOnly"],
            "decisions": ["Callback lives in src/auth.py"],
            "next_steps": ["Add token refresh"],
        },
        anchors=[
            {"kind": "message", "seq": 2, "quote": "/oauth/callback route"},
            {"kind": "commit", "ref": "4f5e6d7", "note": "callback route"},
        ],
    )
    built = build_document(store, chain, focus="token refresh")
    parsed = HandoffDocument.parse(built["document"])
    assert built["sections"] == list(SECTIONS)
    assert parsed.section("Goal").startswith("OAuth login for the app")
    assert "Focus for the next session: token refresh" in parsed.section("Goal")
    assert parsed.section("Constraints & Preferences") == "- Session cookie stays httpOnly"
    assert "[message 4] assistant: Done: callback route added" in parsed.section("Progress")
    assert "Evidence, commit: 4f5e6d7 (callback route)" in parsed.section("Critical Context")
    assert "Relevant to the focus, message 4" in parsed.section("Critical Context")
    assert parsed.section("Next Steps").startswith("- Add token refresh")
    lineage = built["lineage"]
    assert lineage["continuity_id"] == chain and lineage["through_seq"] == 4
    assert lineage["raw_turns"] == [3, 4]
    assert lineage["checkpoint"] == {**PARTITION, "revision": 1, "covers_through_seq": 2}
    assert lineage["parent_transfer_id"] == "tr-1"
    assert f"continuity={chain}" in built["document"] and "parent_transfer=tr-1" in built["document"]
    row = (
        store.connection()
        .execute(
            "SELECT through_seq, checkpoint_id, parent_transfer_id, focus, document "
            "FROM continuity_handoff_documents WHERE document_id = ?",
            (built["document_id"],),
        )
        .fetchone()
    )
    assert (row[0], row[2], row[3], row[4]) == (4, "tr-1", "token refresh", built["document"])
    assert row[1] is not None


def test_built_document_without_checkpoint_uses_the_turns(store: StateStore, chain: str) -> None:
    built = build_document(store, chain)
    parsed = HandoffDocument.parse(built["document"])
    assert parsed.section("Goal").startswith("As first asked (message 1): Add OAuth login")
    assert parsed.section("Key Decisions") == "None"
    assert "Carry on from the latest request (message 3)" in parsed.section("Next Steps")
    assert built["lineage"]["checkpoint"] is None


def test_two_partitions_with_checkpoints_need_a_choice(store: StateStore, chain: str) -> None:
    for work_chain in ("auth", "docs"):
        call(
            store,
            "herdr_mcp.work_memory.checkpoint.put",
            **{**PARTITION, "work_chain_id": work_chain},
            continuity_id=chain,
            expected_revision=0,
            covers_through_seq=2,
            content={"goal": work_chain},
            anchors=[{"kind": "message", "seq": 2, "quote": "pytest"}],
        )
    with pytest.raises(ToolError) as caught:
        build_document(store, chain)
    assert caught.value.code == "work_memory_partition_ambiguous"
    chosen = build_document(store, chain, work_chain_id="docs")
    assert HandoffDocument.parse(chosen["document"]).section("Goal") == "docs"


def test_too_few_messages(store: StateStore) -> None:
    lonely = journal(store, "https://chat.z.ai/c/lonely", ["just one"])
    with pytest.raises(ToolError) as caught:
        build_document(store, lonely)
    assert caught.value.code == "handoff_too_few_messages"
    assert caught.value.details["message_count"] == 1


# --- the CLI -----------------------------------------------------------------------------------


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    code = "import sys\nfrom herdr_mcp.cli.handoff import main\nraise SystemExit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        check=False,
    )


def test_cli_refuses_fewer_than_two_messages(tmp_path: Path, store: StateStore) -> None:
    lonely = journal(store, "https://chat.z.ai/c/lonely", ["only message"])
    result = run_cli("--config-dir", str(tmp_path), "--chain", lonely)
    assert result.returncode == 2
    assert "handoff_too_few_messages" in result.stderr and result.stdout == ""
    as_json = run_cli(
        "--config-dir", str(tmp_path), "--conversation-url", "https://chat.z.ai/c/lonely", "--json"
    )
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout)["error"]["code"] == "handoff_too_few_messages"


def test_cli_builds_prints_and_checks(tmp_path: Path, store: StateStore, chain: str) -> None:
    result = run_cli("--config-dir", str(tmp_path), "--conversation-url", SOURCE, "--focus", "token refresh")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("# Handoff: OAuth login")
    assert (
        HandoffDocument.parse(result.stdout)
        .section("Goal")
        .endswith("Focus for the next session: token refresh")
    )
    path = tmp_path / "handoff.md"
    path.write_text(result.stdout.replace("## Key Decisions", "## Decisions we took"), encoding="utf-8")
    check = run_cli("--check", str(path), "--json")
    assert check.returncode == 2
    details = json.loads(check.stdout)["error"]
    assert details["missing"] == ["Key Decisions"] and details["unexpected"] == ["Decisions we took"]
    good = run_cli("--check", "-", stdin=result.stdout)
    assert good.returncode == 0 and good.stdout.startswith("valid: Goal,")
    empty = run_cli("--check", "-", stdin="")
    assert empty.returncode == 2 and "handoff_document_empty" in empty.stderr

    as_json = run_cli("--config-dir", str(tmp_path), "--workspace", "w7", "--json")
    payload = json.loads(as_json.stdout)
    assert as_json.returncode == 0 and payload["continuity_id"] == chain
    assert payload["sections"] == list(SECTIONS)


def test_cli_never_guesses_a_chain(tmp_path: Path, store: StateStore, chain: str) -> None:
    journal(store, "https://chat.z.ai/c/second", ["another task", "reply"], workspace_id="w7")
    result = run_cli("--config-dir", str(tmp_path), "--workspace", "w7")
    assert result.returncode == 2
    assert "continuity_ambiguous" in result.stderr and chain in result.stderr
    missing = run_cli("--config-dir", str(tmp_path / "nowhere"), "--chain", chain)
    assert missing.returncode == 2 and "continuity_journal_unavailable" in missing.stderr
    assert not (tmp_path / "nowhere").exists()
