"""`POST /browser/inbox.move` (docs/browser-protocol.md, section 2): a handoff's cutover moves a
conversation scope's unacknowledged inbox entries, and its tasks still waiting for a settle, to the
new conversation's scope. The store on a real state.db (an acknowledged entry and a settled task
stay; a task settling after the move lands in the new scope; moving again moves nothing), then the
method over a real runtime on loopback and on the Unix socket with a real simulator (a dispatched
task's outcome read, moved, read and acknowledged under the new scope; the call audited; bad
requests refused with stable codes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.state.store import StateStore
from herdr_mcp.state.tasks import TaskStore
from tests.support.browser_methods_harness import TRANSPORTS, audited, browser_api, call, dispatch
from tests.support.push_harness import two_agent_config
from tests.support.sim_helpers import fast_script, run, short_tmp_dir
from tests.support.waiting import poll_until

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


@pytest.mark.parametrize("via", TRANSPORTS)
def test_inbox_move_over_the_runtime(tmp_short: Path, via: str) -> None:
    async def body() -> None:
        config = two_agent_config(tmp_short, fast_script())
        async with browser_api(tmp_short, config, via) as (_sim, rt, client):
            await dispatch(rt, OLD, "coder")

            async def unread(scope: str) -> list[dict[str, Any]] | None:
                items: list[dict[str, Any]] = (await call(client, "inbox.read", {"scope": scope}))[1]["items"]
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
            status, acked = await call(client, "inbox.ack", {"scope": NEW, "inbox_ids": [entry["inbox_id"]]})
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
