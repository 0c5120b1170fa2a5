"""The browser plane's mutations are in the audit log like tool calls: `POST /browser/<method>`
that changes something (a binding, the journal, the inbox, an agent's prompt, a pane's input, a
handoff package) writes one record before its answer, with identifiers and an arguments digest
and never the text; reads write nothing; while the log cannot be written a mutation is refused
before it runs (503 `audit_unavailable`). A real runtime on the Unix socket and the simulator."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from herdr_mcp.runtime.audit import AUDIT_FILE_NAME
from herdr_mcp.runtime.browser import AUDITED, READS
from herdr_mcp.runtime.browser.methods import METHODS
from herdr_mcp.sim import SimulatorThread
from tests.support.push_harness import push_runtime, two_agent_config
from tests.support.sim_helpers import run, short_tmp_dir

SCOPE = "chatgpt:conv:audit-0001"
SECRET_TEXT = "the prompt text itself never reaches the audit log"


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


def records(config_dir: Path) -> list[dict[str, Any]]:
    path = config_dir / AUDIT_FILE_NAME
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_every_browser_method_is_either_audited_or_a_read() -> None:
    assert AUDITED.isdisjoint(READS)
    assert set(METHODS) == AUDITED | READS


def test_mutations_are_recorded_reads_are_not_and_an_unwritable_log_refuses_them(tmp_short: Path) -> None:
    config_dir = tmp_short / "config"

    async def body() -> None:
        with SimulatorThread(two_agent_config(tmp_short), tmp_short / "herdr.sock"):
            async with (
                push_runtime(tmp_short / "herdr.sock", config_dir, tmp_short / "ipc" / "r.sock") as rt,
                rt.client("unix") as client,
            ):

                async def call(method: str, params: dict[str, Any]) -> httpx2.Response:
                    return await client.post(f"/browser/{method}", json=params)

                assert (await call("binding.get", {"scope": SCOPE})).status_code == 200
                assert (await call("binding.list", {})).status_code == 200
                assert records(config_dir) == []  # reads are not recorded

                made = await call("binding.set", {"scope": SCOPE, "workspace_id": "w1"})
                assert made.status_code == 200, made.text
                panes = (await call("pane.list", {"workspace_id": "w1"})).json()
                pane = next(p for p in panes["panes"] if p.get("agent"))
                prompted = await call(
                    "agent.prompt",
                    {
                        "pane_id": pane["pane_id"],
                        "workspace_id": "w1",
                        "agent": pane["agent"],
                        "text": SECRET_TEXT,
                        "idempotency_key": "audit-key-0001",
                    },
                )
                assert prompted.status_code == 200, prompted.text
                refused = await call(
                    "pane.send_input",
                    {
                        "pane_id": pane["pane_id"],
                        "workspace_id": "w1",
                        "text": "ls",
                        "idempotency_key": "audit-key-0002",
                    },
                )
                assert refused.status_code == 409 and refused.json()["error"]["code"] == "pane_has_agent"

                kept = [(r["tool"], r["outcome"], r["session"]) for r in records(config_dir)]
                assert kept == [
                    ("browser/binding.set", "ok", SCOPE),
                    ("browser/agent.prompt", "ok", None),
                    ("browser/pane.send_input", "pane_has_agent", None),
                ]
                text = (config_dir / AUDIT_FILE_NAME).read_text()
                assert SECRET_TEXT not in text
                assert all(r["args_sha256"].startswith("sha256:") for r in records(config_dir))

                # The log path now leads elsewhere: the first write fails, then mutations are
                # refused before they run, and the binding stays as it was.
                log_path = config_dir / AUDIT_FILE_NAME
                log_path.rename(tmp_short / "kept.jsonl")
                log_path.symlink_to(tmp_short / "elsewhere.jsonl")
                first = await call("binding.set", {"scope": SCOPE, "workspace_id": "w1", "label": "x"})
                assert first.status_code == 200  # it ran; its answer is not withheld
                second = await call("binding.set", {"scope": SCOPE, "workspace_id": None})
                assert second.status_code == 503
                assert second.json()["error"]["code"] == "audit_unavailable"
                kept_binding = (await call("binding.get", {"scope": SCOPE})).json()["binding"]
                assert kept_binding is not None and kept_binding["workspace_id"] == "w1"
                assert not (tmp_short / "elsewhere.jsonl").exists()

    run(body(), timeout=120)
