"""`POST /browser/inbox.move` (docs/browser-protocol.md, section 2): a handoff's cutover moves a
conversation scope's unacknowledged inbox entries, and its tasks still waiting for a settle, to the
new conversation's scope. The store on a real state.db (an acknowledged entry and a settled task
stay; a task settling after the move lands in the new scope; moving again moves nothing), then the
method over a real runtime on loopback and on the Unix socket with a real simulator (a dispatched
task's outcome read, moved, read and acknowledged under the new scope; the call audited; bad
requests refused with stable codes)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from herdr_mcp.layout import Layout
from herdr_mcp.sim import SimulatorThread
from herdr_mcp.state.store import StateStore
from herdr_mcp.state.tasks import TaskStore
from tests.push_harness import ServedRuntime, push_runtime, two_agent_config
from tests.runtime_harness import call_tool, mcp_client
from tests.sim_helpers import fast_script, run, short_tmp_dir
from tests.waiting import poll_until

OLD, NEW = "chatgpt:conv:old-1", "chatgpt:conv:new-2"
BODY_TIMEOUT_S = 90.0


def _task(tasks: TaskStore, task_id: str, pane: str, scope: str) -> None:
    agent = {"pane_id": pane, "workspace_id": "w1", "name": task_id, "agent_status": "idle"}
    tasks.create(
        task_id=task_id, turn_id=f"turn-{task_id}", target=task_id, agent=agent, browser_session_ref=scope
    )
    tasks.mark_submitted(task_id)


def _settle(tasks: TaskStore, pane: str) -> None:
    tasks.observe(pane, "working")
    tasks.observe(pane, "done")


def test_the_store_moves_open_entries_and_waiting_tasks_once(tmp_path: Path) -> None:
    tasks = TaskStore(StateStore.open(tmp_path / "state.db"))
    _task(tasks, "acked", "w1:p1", OLD)
    _task(tasks, "open", "w1:p2", OLD)
    _task(tasks, "later", "w1:p3", OLD)
    _task(tasks, "elsewhere", "w1:p4", "zai:conv:other")
    for pane in ("w1:p1", "w1:p2", "w1:p4"):
        _settle(tasks, pane)
    acked = tasks.inbox(OLD)["items"][0]["inbox_id"]
    assert tasks.ack(OLD, [acked])["acked"] == [acked]
    (entry,) = tasks.inbox(OLD)["items"]
    assert entry["task_id"] == "open"

    assert tasks.move(OLD, NEW) == {"moved": [entry["inbox_id"]], "tasks_moved": ["later"]}
    assert tasks.inbox(OLD)["items"] == []
    assert [item["task_id"] for item in tasks.inbox(NEW)["items"]] == ["open"]
    assert [item["task_id"] for item in tasks.inbox("zai:conv:other")["items"]] == ["elsewhere"]
    # The task that was still working settles after the cutover: its outcome is the new scope's.
    _settle(tasks, "w1:p3")
    assert [item["task_id"] for item in tasks.inbox(NEW)["items"]] == ["open", "later"]
    assert tasks.inbox(OLD)["items"] == []
    assert tasks.move(OLD, NEW) == {"moved": [], "tasks_moved": []}
    # An acknowledgement names the scope the entry is under now.
    assert tasks.ack(OLD, [entry["inbox_id"]])["acked"] == []
    assert tasks.ack(NEW, [entry["inbox_id"]])["acked"] == [entry["inbox_id"]]


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


async def call(client: httpx2.AsyncClient, method: str, body: Any) -> tuple[int, dict[str, Any]]:
    answer = await client.post(f"/browser/{method}", json=body)
    return answer.status_code, answer.json()


async def dispatch(rt: ServedRuntime, scope: str, target: str) -> None:
    async with mcp_client(rt.tcp_base + "/mcp", rt.token) as session:
        result = await call_tool(
            session,
            "herdr_call",
            {
                "method": "herdr_mcp.agent.task.dispatch",
                "params": {"target": target, "text": "run the tests", "browser_session_ref": scope},
            },
        )
    assert "error" not in result, result


def audited(config_dir: Path, tool: str) -> list[dict[str, Any]]:
    path = Layout(config_dir).audit_file
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [record for line in lines if line.strip() and (record := json.loads(line)).get("tool") == tool]


@pytest.mark.parametrize("via", ["tcp", "unix"])
def test_inbox_move_over_the_runtime(tmp_short: Path, via: str) -> None:
    async def body() -> None:
        with SimulatorThread(two_agent_config(tmp_short, fast_script()), tmp_short / "herdr.sock"):
            async with (
                push_runtime(
                    tmp_short / "herdr.sock", tmp_short / "config", tmp_short / "ipc" / "r.sock"
                ) as rt,
                rt.client(via) as client,
            ):
                await dispatch(rt, OLD, "coder")

                async def unread(scope: str) -> list[dict[str, Any]] | None:
                    items: list[dict[str, Any]] = (await call(client, "inbox.read", {"scope": scope}))[1][
                        "items"
                    ]
                    return items or None

                (entry,) = await poll_until(lambda: unread(OLD), "the coder's outcome in the old scope")
                status, answer = await call(client, "inbox.move", {"from_scope": OLD, "to_scope": NEW})
                assert status == 200, answer
                assert answer == {
                    "from_scope": OLD,
                    "to_scope": NEW,
                    "moved": [entry["inbox_id"]],
                    "tasks_moved": [],
                }
                assert await unread(OLD) is None
                assert [item["inbox_id"] for item in await unread(NEW) or []] == [entry["inbox_id"]]
                status, acked = await call(
                    client, "inbox.ack", {"scope": NEW, "inbox_ids": [entry["inbox_id"]]}
                )
                assert acked == {"acked": [entry["inbox_id"]], "not_acked": []}
                status, again = await call(client, "inbox.move", {"from_scope": OLD, "to_scope": NEW})
                assert (status, again["moved"]) == (200, [])
                (first, second) = audited(tmp_short / "config", "browser/inbox.move")
                assert first["outcome"] == second["outcome"] == "ok"

                for bad in (
                    {"from_scope": OLD, "to_scope": OLD},
                    {"from_scope": "chatgpt:root:tab-1", "to_scope": NEW},
                    {"from_scope": OLD},
                    {"from_scope": OLD, "to_scope": NEW, "extra": 1},
                    {"from_scope": "not a scope", "to_scope": NEW},
                ):
                    status, answer = await call(client, "inbox.move", bad)
                    assert (status, answer["error"]["code"]) == (400, "invalid_argument"), bad

    run(body(), BODY_TIMEOUT_S)
