"""Exec sessions across runtime restarts: finished sessions stay readable from state.db and the
spool, sessions of a killed runtime become lost (output kept, process stopped only when it is
certainly theirs), and retention removes rows together with files."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.exec_sessions import ExecSessions
from herdr_mcp.state.ledger import Ledger, Started, request_hash
from herdr_mcp.state.store import StateStore
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.usefixtures("quiet_login_shell")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    StateStore.open(path).close()
    return path


def row(store: StateStore, session_id: str) -> dict[str, Any] | None:
    found = (
        store.connection()
        .execute("SELECT * FROM exec_sessions WHERE session_id = ?", (session_id,))
        .fetchone()
    )
    return None if found is None else dict(found)


def is_gone(pid: int) -> bool:
    """True when `pid` no longer runs (absent, or a zombie nobody reaped yet)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return text[text.rfind(")") + 2 :].split()[0] in ("Z", "X")


async def wait_finished(sessions: ExecSessions, session_id: str) -> None:
    await wait_until_async(
        lambda: not sessions.read(session_id, max_bytes=1)["running"], "the session to finish"
    )


def test_a_finished_session_is_readable_after_a_restart(tmp_path: Path, workdir: Path, db_path: Path) -> None:
    spool = tmp_path / "spool"
    text = "héllo wörld 日本語 🎉\n" * 30
    (workdir / "text").write_text(text, encoding="utf-8")
    before: dict[str, Any] = {}

    async def first_runtime() -> None:
        store = StateStore.open(db_path)
        ledger = Ledger(store, "rt-a")
        started = ledger.begin("exec", "key-00001", request_hash({"command": "cat text"}))
        assert isinstance(started, Started)
        sessions = ExecSessions(spool, store=store, runtime_instance="rt-a")
        before["run"] = await sessions.run(
            workdir, "cat text; echo err >&2; exit 3", 10_000, op_id=started.op_id
        )
        background = sessions.start(workdir, "echo bg")
        await wait_finished(sessions, background["session_id"])
        before["background"] = background["session_id"]
        before["op_id"] = started.op_id
        before["read"] = sessions.read(before["run"]["session_id"], stdout_offset=5, max_bytes=40)
        before["result_of"] = sessions.result_of(before["run"]["session_id"], max_bytes=100)
        await sessions.shutdown()
        store.close()

    asyncio.run(first_runtime())
    session_id = before["run"]["session_id"]

    async def second_runtime() -> None:
        store = StateStore.open(db_path)
        sessions = ExecSessions(spool, store=store, runtime_instance="rt-b")
        assert sessions.read(session_id, stdout_offset=5, max_bytes=40) == before["read"]
        full = sessions.read(session_id, max_bytes=100_000)
        assert (full["running"], full["exit_code"], full["signal"]) == (False, 3, None)
        assert "lost" not in full
        assert full["stdout"]["text"] == text
        assert full["stderr"] == {
            "text": "err\n",
            "offset": 0,
            "next_offset": 4,
            "total_bytes": 4,
            "dropped_bytes": 0,
            "eof": True,
        }
        # The replay answer is what run() answered, from the row and the spool (but for the
        # login-environment report, which is not stored: a loaded machine may capture slowly).
        replay = sessions.result_of(session_id)
        assert replay is not None
        unstored = {"duration_ms", "login_environment"}
        assert {k: v for k, v in replay.items() if k not in unstored} == {
            k: v for k, v in before["run"].items() if k not in unstored
        }
        assert abs(replay["duration_ms"] - before["run"]["duration_ms"]) <= 5
        small = sessions.result_of(session_id, max_bytes=100)
        assert small is not None and before["result_of"] is not None
        assert small | {"duration_ms": 0} == before["result_of"] | {"duration_ms": 0}
        assert sessions.read(before["background"])["stdout"]["text"] == "bg\n"
        assert sessions.session_of_operation(before["op_id"]) == session_id
        assert sessions.session_of_operation("op_unknown") is None
        killed = await sessions.kill(session_id)
        assert (killed["already_finished"], killed["escalated"], killed["running"]) == (True, False, False)
        assert (killed["stdout_total_bytes"], killed["stderr_total_bytes"]) == (len(text.encode()), 4)
        stored = row(store, session_id)
        assert stored is not None
        assert (stored["state"], stored["runtime_instance"], stored["exit_code"]) == ("finished", "rt-a", 3)
        store.close()

    asyncio.run(second_runtime())


def test_a_cut_off_stream_keeps_its_totals_after_a_restart(
    tmp_path: Path, workdir: Path, db_path: Path
) -> None:
    spool = tmp_path / "spool"

    async def runtimes() -> None:
        store = StateStore.open(db_path)
        first = ExecSessions(spool, store=store, runtime_instance="rt-a", max_output_bytes=10)
        result = await first.run(workdir, "printf '%050d' 0", 10_000, durable=True)
        expected = first.read(result["session_id"])
        await first.shutdown()
        second = ExecSessions(spool, store=store, runtime_instance="rt-b")
        answer = second.read(result["session_id"])
        assert answer == expected
        assert (answer["stdout"]["total_bytes"], answer["stdout"]["dropped_bytes"]) == (50, 40)
        store.close()

    asyncio.run(runtimes())


RUNTIME_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path
    from herdr_mcp.runtime.exec_sessions import ExecSessions
    from herdr_mcp.state.store import StateStore

    async def main():
        store = StateStore.open(Path(sys.argv[1]))
        sessions = ExecSessions(Path(sys.argv[2]), store=store, runtime_instance="rt-killed")
        started = sessions.start(Path(sys.argv[3]), "echo partial; echo partial-err >&2; sleep 30")
        while sessions.read(started["session_id"])["stderr"]["text"] != "partial-err\\n":
            await asyncio.sleep(0.01)
        print(json.dumps(started), flush=True)
        await asyncio.sleep(60)

    asyncio.run(main())
    """
)


def run_and_kill_runtime(db_path: Path, spool: Path, workdir: Path) -> dict[str, Any]:
    """A runtime in its own process starts a long session and is SIGKILLed while it runs."""
    runtime = subprocess.Popen(
        [sys.executable, "-c", RUNTIME_SCRIPT, str(db_path), str(spool), str(workdir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert runtime.stdout is not None
        started: dict[str, Any] = json.loads(runtime.stdout.readline())
    finally:
        runtime.send_signal(signal.SIGKILL)
        runtime.wait(10)
        if runtime.stdout is not None:
            runtime.stdout.close()
    return started


def test_a_session_of_a_killed_runtime_is_lost_but_readable(
    tmp_path: Path, workdir: Path, db_path: Path
) -> None:
    spool = tmp_path / "spool"
    started = run_and_kill_runtime(db_path, spool, workdir)
    session_id, pid = started["session_id"], started["pid"]
    assert not is_gone(pid), "the session outlived its runtime"

    async def next_runtime() -> None:
        store = StateStore.open(db_path)
        sessions = ExecSessions(spool, store=store, runtime_instance="rt-next")
        stored = row(store, session_id)
        assert stored is not None and stored["state"] == "lost"
        answer = sessions.read(session_id)
        assert (answer["running"], answer["lost"], answer["exit_code"], answer["signal"]) == (
            False,
            True,
            None,
            None,
        )
        assert (answer["stdout"]["text"], answer["stdout"]["eof"]) == ("partial\n", True)
        assert (answer["stderr"]["text"], answer["stderr"]["total_bytes"]) == ("partial-err\n", 12)
        assert sessions.result_of(session_id) is None

        killed = await sessions.kill(session_id, grace_ms=2000)
        assert (killed["kill_result"], killed["running"], killed["lost"]) == ("terminated", False, True)
        assert (killed["already_finished"], killed["escalated"]) == (False, False)
        assert "SIGTERM" in killed["message"]
        assert is_gone(pid)
        again = await sessions.kill(session_id)
        assert (again["kill_result"], again["already_finished"]) == ("already_gone", True)
        store.close()

    asyncio.run(next_runtime())


LEAVING_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path
    from herdr_mcp.runtime.exec_sessions import ExecSessions
    from herdr_mcp.state.store import StateStore

    async def main():
        store = StateStore.open(Path(sys.argv[1]))
        sessions = ExecSessions(Path(sys.argv[2]), store=store, runtime_instance="rt-crashed")
        command = (
            "(sleep 3021 >/dev/null 2>&1 & echo $!); "
            "setsid sleep 3022 >/dev/null 2>&1 </dev/null & echo $!"
        )
        result = await sessions.run(Path(sys.argv[3]), command, 10_000)
        print(json.dumps(result), flush=True)
        await asyncio.sleep(60)

    asyncio.run(main())
    """
)


def test_what_a_finished_session_left_is_stopped_after_its_runtime_died(
    tmp_path: Path, workdir: Path, db_path: Path
) -> None:
    # The shell finished (its row says so), the runtime was SIGKILLed, and the processes the
    # shell left (one in its group, one that called setsid) live on: the next runtime sees them
    # by the session's variable and kill stops them.
    spool = tmp_path / "spool"
    children: list[int] = []
    runtime = subprocess.Popen(
        [sys.executable, "-c", LEAVING_SCRIPT, str(db_path), str(spool), str(workdir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert runtime.stdout is not None
        result: dict[str, Any] = json.loads(runtime.stdout.readline())
        children.extend(int(word) for word in result["stdout"].split())
        runtime.send_signal(signal.SIGKILL)
        runtime.wait(10)
        assert result["completed"] is True and len(children) == 2
        assert not any(is_gone(pid) for pid in children)

        async def next_runtime() -> None:
            store = StateStore.open(db_path)
            sessions = ExecSessions(spool, store=store, runtime_instance="rt-next")
            answer = sessions.read(result["session_id"])
            assert (answer["running"], answer["exit_code"], "lost" in answer) == (False, 0, False)
            assert (answer["descendants_running"], answer["descendant_pids"]) == (True, sorted(children))
            killed = await sessions.kill(result["session_id"], grace_ms=5000)
            assert (killed["kill_result"], killed["already_finished"], killed["descendants_running"]) == (
                "terminated",
                False,
                False,
            )
            assert all(is_gone(pid) for pid in children)
            again = await sessions.kill(result["session_id"])
            assert (again["already_finished"], "kill_result" in again) == (True, False)
            store.close()

        asyncio.run(next_runtime())
    finally:
        if runtime.poll() is None:
            runtime.kill()
            runtime.wait(10)
        if runtime.stdout is not None:
            runtime.stdout.close()
        for pid in children:
            if not is_gone(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def test_a_lost_session_never_signals_a_process_it_cannot_vouch_for(
    tmp_path: Path, workdir: Path, db_path: Path
) -> None:
    spool = tmp_path / "spool"
    bystander = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:

        async def runtimes() -> None:
            store = StateStore.open(db_path)
            first = ExecSessions(spool, store=store, runtime_instance="rt-a")
            ids = [first.start(workdir, "sleep 30")["session_id"] for _ in range(2)]
            await first.shutdown(grace_ms=200)
            # Pretend both were left running by a dead runtime whose pids now name the bystander.
            with store.transaction() as tx:
                tx.execute(
                    "UPDATE exec_sessions SET state = 'running', pid = ?, pid_start = 'other-boot:1' "
                    "WHERE session_id = ?",
                    (bystander.pid, ids[0]),
                )
                tx.execute(
                    "UPDATE exec_sessions SET state = 'running', pid = ?, pid_start = NULL "
                    "WHERE session_id = ?",
                    (bystander.pid, ids[1]),
                )
            second = ExecSessions(spool, store=store, runtime_instance="rt-b")
            reused = await second.kill(ids[0], grace_ms=100)
            assert (reused["kill_result"], reused["running"]) == ("already_gone", False)
            unknown = await second.kill(ids[1], grace_ms=100)
            assert unknown["kill_result"] == "unverified"
            assert "nothing was sent" in unknown["message"]
            assert bystander.poll() is None
            store.close()

        asyncio.run(runtimes())
    finally:
        bystander.kill()
        bystander.wait()


def test_the_owner_finishing_wins_over_lost(tmp_path: Path, workdir: Path, db_path: Path) -> None:
    spool = tmp_path / "spool"

    async def runtimes() -> None:
        store = StateStore.open(db_path)
        owner = ExecSessions(spool, store=store, runtime_instance="rt-owner")
        started = owner.start(workdir, "sleep 0.3; echo late")
        # Another runtime starting meanwhile takes the session for lost...
        other = ExecSessions(spool, store=store, runtime_instance="rt-other")
        assert other.read(started["session_id"])["lost"] is True
        # ...until its owner records how it ended.
        await wait_finished(owner, started["session_id"])
        answer = other.read(started["session_id"])
        assert (answer["running"], answer["exit_code"], answer["stdout"]["text"]) == (False, 0, "late\n")
        assert "lost" not in answer
        store.close()

    asyncio.run(runtimes())


def test_retention_removes_rows_and_spool_files(tmp_path: Path, workdir: Path, db_path: Path) -> None:
    spool = tmp_path / "spool"
    lost = run_and_kill_runtime(db_path, spool, workdir)

    async def runtimes() -> None:
        store = StateStore.open(db_path)
        first = ExecSessions(spool, store=store, runtime_instance="rt-a")
        kept = await first.run(workdir, "echo kept", 10_000)
        await first.kill(lost["session_id"])  # the orphaned sleep from the killed runtime
        await first.shutdown()
        assert row(store, lost["session_id"]) is not None

        # A later runtime with a short retention forgets everything that ended before it started.
        second = ExecSessions(spool, store=store, runtime_instance="rt-b", retention_seconds=0)
        for session_id in (kept["session_id"], lost["session_id"]):
            assert row(store, session_id) is None
            assert not (spool / session_id).exists()
            with pytest.raises(ToolError) as error:
                second.read(session_id)
            assert error.value.code == "session_not_found"
        # Its own sessions leave no row behind either once pruned.
        own = await second.run(workdir, "echo own", 10_000)
        with pytest.raises(ToolError):
            second.read(own["session_id"])
        assert row(store, own["session_id"]) is None
        assert sorted(os.listdir(spool)) == []
        store.close()

    asyncio.run(runtimes())


def test_unknown_or_malformed_ids_are_not_found(tmp_path: Path, db_path: Path) -> None:
    async def body() -> None:
        store = StateStore.open(db_path)
        sessions = ExecSessions(tmp_path / "spool", store=store)
        for session_id in ("x0123456789abcdef", "../state.db", "x0123456789ABCDEF"):
            with pytest.raises(ToolError) as error:
                sessions.read(session_id)
            assert error.value.code == "session_not_found"
            assert sessions.result_of(session_id) is None
        assert sessions.runtime_instance.split("-", 1)[0] == str(os.getpid())
        store.close()

    asyncio.run(body())
