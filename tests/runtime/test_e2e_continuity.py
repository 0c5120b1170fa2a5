"""The continuity journal, Work Memory and handoff through the runtime over MCP, and the CLI.

The runtime is served in process (tests/runtime_harness.in_process_session), one MCP session per
test; the handoff CLI runs as a process on its config dir.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.runtime_harness import ToolSession, in_process_session, make_repo
from tests.support.sim_helpers import short_tmp_dir

URL = "https://chatgpt.com/c/6a1f0c2e-0000-4000-8000-000000000001"


@pytest.fixture
def runtime() -> Iterator[ToolSession]:
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", {"a.txt": b"a\n"})
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"),
            in_process_session(tmp / "herdr.sock", tmp / "config") as session,
        ):
            yield session


def _call(runtime: ToolSession, method: str, params: dict[str, Any]) -> dict[str, Any]:
    answer = runtime.call("herdr_call", {"method": method, "params": params})
    assert "error" not in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def test_journal_resolve_search_and_handoff(runtime: ToolSession) -> None:
    turns = [
        ("m1", "user", "Please migrate the login service to the new token format."),
        ("m2", "assistant", "Plan: update token parsing in auth/tokens.py, then run the auth tests."),
        ("m2", "assistant", "Plan: update token parsing in auth/tokens.py, then run the auth tests."),
    ]
    appended = [
        _call(
            runtime,
            "herdr_mcp.continuity.turn.append",
            {"conversation_url": URL, "turn_key": k, "role": r, "text": t},
        )
        for k, r, t in turns
    ]
    chain = appended[0]["continuity_id"]
    assert [a["continuity_id"] for a in appended] == [chain] * 3
    assert [a["idempotent_replay"] for a in appended] == [False, False, True]

    resolved = _call(runtime, "herdr_mcp.continuity.resolve", {"conversation_url": URL})
    assert resolved["status"] == "resolved"
    by_text = _call(runtime, "herdr_mcp.continuity.resolve", {"text": "token format"})
    assert by_text["status"] == "needs_confirmation", "text-only matches always need confirmation"
    hits = _call(runtime, "herdr_mcp.continuity.search", {"query": "token parsing"})["hits"]
    assert hits and all(hit["continuity_id"] == chain for hit in hits)

    package = _call(
        runtime,
        "herdr_mcp.browser_handoff.prepare",
        {"transfer_id": "transfer-0001", "continuity_id": chain, "source_url": URL},
    )
    assert package["automatic_delivery"]["params"]["message"] == package["manual_delivery"]["copy_prompt"]
    again = _call(
        runtime,
        "herdr_mcp.browser_handoff.prepare",
        {"transfer_id": "transfer-0001", "continuity_id": chain, "source_url": URL},
    )
    assert again["message"] == package["message"]

    document = subprocess.run(
        [
            sys.executable,
            "-m",
            "herdr_mcp",
            "handoff",
            "--config-dir",
            str(runtime.config_dir),
            "--chain",
            chain,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert document.returncode == 0, document.stderr
    headings = [line for line in document.stdout.splitlines() if line.startswith("## ")]
    assert headings == [
        "## Goal",
        "## Constraints & Preferences",
        "## Progress",
        "## Key Decisions",
        "## Critical Context",
        "## Next Steps",
    ]


def test_handoff_cli_refuses_a_chain_with_one_message(runtime: ToolSession) -> None:
    url = "https://chatgpt.com/c/6a1f0c2e-0000-4000-8000-000000000002"
    one = _call(
        runtime,
        "herdr_mcp.continuity.turn.append",
        {"conversation_url": url, "turn_key": "only", "role": "user", "text": "hi"},
    )
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "herdr_mcp",
            "handoff",
            "--config-dir",
            str(runtime.config_dir),
            "--chain",
            one["continuity_id"],
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert "two" in refused.stderr or "2" in refused.stderr
