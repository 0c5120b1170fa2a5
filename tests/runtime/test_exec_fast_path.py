"""The fast path of herdr_exec (issue 24, item 3): a short command without an idempotency key runs
in memory (no spool directory, no metadata.json, no state.db row), and every promise the
durable path kept still holds whenever it matters: output beyond the memory buffer stays
readable, a command that outlives its timeout becomes a background session with nothing lost,
processes left behind are owned (also by the next runtime) and killed, a caller that goes away
leaves a background session, a keyed call stays durable and replays after a restart, and every
call has its audit record. What a short command leaves behind is found by the next runtime
after this one was SIGKILLed: tests/runtime/test_exec_persistence.py
(test_what_a_finished_session_left_is_stopped_after_its_runtime_died runs its command without an
operation, so through this path). Real bash, real SQLite, no timing asserts: commands that must
still run when the test looks wait for a file the test creates.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.audit import read_records
from herdr_mcp.runtime.config import RuntimeConfig
from herdr_mcp.runtime.exec_sessions import DEFAULT_READ_BYTES, ExecSessions
from herdr_mcp.sim import SimConfig, SimulatorThread
from herdr_mcp.state.store import StateStore
from tests.support.runtime_harness import call_tool, in_process_runtime, make_repo
from tests.support.sim_helpers import short_tmp_dir
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.usefixtures("quiet_login_shell")

# Waits for `go` in its working directory (the test decides when it may finish).
WAIT_FOR_GO = "while [ ! -e go ]; do sleep 0.02; done"


def row(store: StateStore, session_id: str) -> dict[str, Any] | None:
    found = (
        store.connection()
        .execute("SELECT * FROM exec_sessions WHERE session_id = ?", (session_id,))
        .fetchone()
    )
    return None if found is None else dict(found)


def _leads_its_session(pid: int) -> bool:
    return os.getsid(pid) == pid


def alive(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return text[text.rfind(")") + 2 :].split()[0] not in ("Z", "X")


def drive(
    tmp_path: Path, body: Callable[[ExecSessions, StateStore], Awaitable[None]], **options: Any
) -> None:
    async def main() -> None:
        store = StateStore.open(tmp_path / "state.db")
        sessions = ExecSessions(tmp_path / "spool", store=store, runtime_instance="rt-a", **options)
        try:
            await body(sessions, store)
        finally:
            await sessions.shutdown(grace_ms=500)
            store.close()

    asyncio.run(main())


def restarted(tmp_path: Path, check: Callable[[ExecSessions], Awaitable[None]]) -> None:
    """`check` against the sessions a later runtime on the same state.db and spool sees."""

    async def main() -> None:
        store = StateStore.open(tmp_path / "state.db")
        sessions = ExecSessions(tmp_path / "spool", store=store, runtime_instance="rt-b")
        try:
            await check(sessions)
        finally:
            await sessions.shutdown(grace_ms=500)
            store.close()

    asyncio.run(main())


def test_a_short_command_leaves_nothing_on_disk_and_is_readable_while_the_runtime_runs(
    tmp_path: Path, workdir: Path
) -> None:
    spool = tmp_path / "spool"
    seen: dict[str, Any] = {}

    async def body(sessions: ExecSessions, store: StateStore) -> None:
        result = await sessions.run(workdir, "echo out; echo err >&2; exit 3", 10_000)
        assert (result["completed"], result["exit_code"], result["stdout"], result["stderr"]) == (
            True,
            3,
            "out\n",
            "err\n",
        )
        assert (result["truncated"], result["descendants_running"]) == (False, False)
        assert not (spool / result["session_id"]).exists()
        assert row(store, result["session_id"]) is None
        read = sessions.read(result["session_id"])
        assert (read["running"], read["exit_code"]) == (False, 3)
        assert (read["stdout"]["text"], read["stdout"]["eof"], read["stderr"]["text"]) == (
            "out\n",
            True,
            "err\n",
        )
        replay = sessions.result_of(result["session_id"])
        assert replay is not None
        assert replay["stdout"] == "out\n"
        seen["session_id"] = result["session_id"]

    drive(tmp_path, body)

    async def check(sessions: ExecSessions) -> None:
        # Not across a restart (docs/runtime.md): nothing of it was written anywhere.
        with pytest.raises(ToolError) as error:
            sessions.read(seen["session_id"])
        assert error.value.code == "session_not_found"

    restarted(tmp_path, check)


def test_output_beyond_the_memory_buffer_makes_the_session_durable(tmp_path: Path, workdir: Path) -> None:
    spool = tmp_path / "spool"
    size = 3 * DEFAULT_READ_BYTES + 17
    command = f"head -c {size} /dev/zero | tr '\\0' a; printf tail >&2"
    seen: dict[str, Any] = {}

    async def body(sessions: ExecSessions, store: StateStore) -> None:
        result = await sessions.run(workdir, command, 30_000)
        assert (result["completed"], result["exit_code"]) == (True, 0)
        assert (result["stdout_total_bytes"], result["truncated"]) == (size, True)
        assert result["stdout"] == "a" * DEFAULT_READ_BYTES
        assert (result["stderr"], result["stdout_next_offset"]) == ("tail", DEFAULT_READ_BYTES)
        directory = spool / result["session_id"]
        assert (directory / "stdout").stat().st_size == size
        assert (directory / "stderr").read_bytes() == b"tail"
        assert (directory / "metadata.json").is_file()
        stored = row(store, result["session_id"])
        assert stored is not None
        assert (stored["state"], stored["stdout_total"], stored["stdout_dropped"]) == ("finished", size, 0)
        rest = sessions.read(
            result["session_id"], stream="stdout", stdout_offset=result["stdout_next_offset"]
        )
        assert rest["stdout"]["total_bytes"] == size
        assert rest["stdout"]["next_offset"] == 2 * DEFAULT_READ_BYTES
        seen["session_id"] = result["session_id"]

    drive(tmp_path, body)

    async def check(sessions: ExecSessions) -> None:
        tail = sessions.read(seen["session_id"], stream="stdout", stdout_offset=size - 5)
        assert (tail["stdout"]["text"], tail["stdout"]["eof"], tail["exit_code"]) == ("aaaaa", True, 0)

    restarted(tmp_path, check)


def test_a_command_that_outlives_its_timeout_becomes_a_background_session_losing_nothing(
    tmp_path: Path, workdir: Path
) -> None:
    spool = tmp_path / "spool"
    command = f"echo first; echo early >&2; {WAIT_FOR_GO}; echo second; echo late >&2"
    seen: dict[str, Any] = {}

    async def body(sessions: ExecSessions, store: StateStore) -> None:
        result = await sessions.run(workdir, command, 300)
        assert (result["completed"], result["running"]) == (False, True)
        assert "herdr_exec_read" in result["message"]
        session_id = result["session_id"]
        directory = spool / session_id
        # What it wrote while in memory is in its spool files now (it may write more meanwhile).
        assert (directory / "metadata.json").is_file()
        stored = row(store, session_id)
        assert stored is not None
        assert stored["state"] == "running"
        await wait_until_async(
            lambda: (directory / "stderr").read_bytes() == b"early\n", "the early stderr in the spool file"
        )
        assert (directory / "stdout").read_bytes() == b"first\n"
        (workdir / "go").touch()

        def finished() -> dict[str, Any] | None:
            state = sessions.read(session_id)
            return None if state["running"] else state

        final = await wait_until_async(finished, "the background session to finish")
        assert (final["exit_code"], final["stdout"]["text"], final["stderr"]["text"]) == (
            0,
            "first\nsecond\n",
            "early\nlate\n",
        )
        stored = row(store, session_id)
        assert stored is not None
        assert (stored["state"], stored["exit_code"], stored["stdout_total"]) == ("finished", 0, 13)
        seen["session_id"] = session_id

    drive(tmp_path, body)

    async def check(sessions: ExecSessions) -> None:
        later = sessions.read(seen["session_id"])
        assert (later["stdout"]["text"], later["stderr"]["text"]) == ("first\nsecond\n", "early\nlate\n")

    restarted(tmp_path, check)


def test_a_descendant_of_a_short_command_is_killed_with_its_session(tmp_path: Path, workdir: Path) -> None:
    children: list[int] = []
    try:

        async def body(sessions: ExecSessions, store: StateStore) -> None:
            result = await sessions.run(
                workdir, "(sleep 3033 >/dev/null 2>&1 & echo $!); echo started", 10_000
            )
            children.append(int(result["stdout"].split()[0]))
            assert (result["descendants_running"], result["descendant_pids"]) == (True, children)
            # Owned like any session's: on disk and in state.db, so a later runtime finds it too.
            assert (tmp_path / "spool" / result["session_id"] / "metadata.json").is_file()
            stored = row(store, result["session_id"])
            assert stored is not None
            assert stored["state"] == "finished"
            killed = await sessions.kill(result["session_id"], grace_ms=5000)
            assert (killed["already_finished"], killed["descendants_running"]) == (False, False)
            assert not alive(children[0])

        drive(tmp_path, body)
    finally:
        for pid in children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_many_at_once_each_session_owns_exactly_what_it_left(tmp_path: Path, workdir: Path) -> None:
    # Looks taken together (one scan for several exits, other sessions' shells left out): each
    # session still finds its own child, in its group or escaped with setsid, and nothing else.
    grouped = "(sleep 3034 >/dev/null 2>&1 & echo $!); echo grouped"
    escaped = "setsid sleep 3035 >/dev/null 2>&1 </dev/null & echo $!"
    commands = [grouped, "echo plain", escaped, "echo plain", grouped, escaped, "true", "echo plain"]
    children: list[int] = []
    try:

        async def body(sessions: ExecSessions, store: StateStore) -> None:
            answers = await asyncio.gather(*(sessions.run(workdir, command, 30_000) for command in commands))
            for command, answer in zip(commands, answers, strict=True):
                assert (answer["completed"], answer["exit_code"]) == (True, 0)
                if command in (grouped, escaped):
                    child = int(answer["stdout"].split()[0])
                    children.append(child)
                    if command == escaped:
                        # `echo $!` may print before the child has called setsid; the child is
                        # the session's either way, by its group or by its variable.
                        await wait_until_async(partial(_leads_its_session, child), "the child to call setsid")
                    state = sessions.read(answer["session_id"])
                    assert (state["descendants_running"], state["descendant_pids"]) == (True, [child])
                    assert row(store, answer["session_id"]) is not None
                else:
                    assert answer["descendants_running"] is False
                    assert row(store, answer["session_id"]) is None
            for answer in answers:
                await sessions.kill(answer["session_id"], grace_ms=5000)
            assert not any(alive(pid) for pid in children)

        drive(tmp_path, body)
    finally:
        for pid in children:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_run_whose_caller_goes_away_leaves_a_durable_background_session(
    tmp_path: Path, workdir: Path
) -> None:
    spool = tmp_path / "spool"

    async def body(sessions: ExecSessions, store: StateStore) -> None:
        waiting = asyncio.create_task(
            sessions.run(workdir, f"echo started > started; {WAIT_FOR_GO}; echo done", 60_000)
        )
        await wait_until_async(lambda: (workdir / "started").exists(), "the command to start")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

        def made_durable() -> list[str] | None:
            return sorted(os.listdir(spool)) if spool.is_dir() else None

        (session_id,) = await wait_until_async(made_durable, "the session's spool directory")
        assert row(store, session_id) is not None
        (workdir / "go").touch()

        def finished() -> dict[str, Any] | None:
            state = sessions.read(session_id)
            return None if state["running"] else state

        final = await wait_until_async(finished, "the abandoned command to finish")
        assert (final["exit_code"], final["stdout"]["text"]) == (0, "done\n")

    drive(tmp_path, body)


def test_sessions_in_memory_that_still_run_do_not_count_against_the_limit(
    tmp_path: Path, workdir: Path
) -> None:
    async def body(sessions: ExecSessions, store: StateStore) -> None:
        runs = [
            asyncio.create_task(
                sessions.run(workdir, f"touch ran{index}; {WAIT_FOR_GO}; echo {index}", 60_000)
            )
            for index in range(3)
        ]
        await wait_until_async(
            lambda: all((workdir / f"ran{index}").exists() for index in range(3)), "all three commands to run"
        )
        (workdir / "go").touch()
        answers = await asyncio.gather(*runs)
        assert [answer["stdout"] for answer in answers] == ["0\n", "1\n", "2\n"]
        # A background session still counts: with it running, a new command is refused.
        background = sessions.start(workdir, "exec sleep 30")
        with pytest.raises(ToolError) as refused:
            await sessions.run(workdir, "true", 10_000)
        assert refused.value.code == "too_many_sessions"
        await sessions.kill(background["session_id"], grace_ms=200)

    drive(tmp_path, body, max_sessions=1)


def test_unkeyed_and_keyed_exec_through_the_runtime_audit_and_restart() -> None:
    """Through MCP: an unkeyed call writes nothing to the spool, a keyed one is durable (its row
    names its ledger operation); both have their audit record; after a restart the keyed call
    replays from the ledger, the unkeyed call's session is gone."""
    keyed = {
        "workspace": "w1",
        "command": "echo once >> effects.log; echo keyed",
        "intent": "non_idempotent_write",
        "idempotency_key": "key-fast-path-0001",
    }
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", {"a.txt": b"a\n"})
        config_dir = tmp / "config"
        spool = RuntimeConfig(config_dir=config_dir, herdr_socket=tmp / "herdr.sock").spool_dir
        with SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"):

            async def first() -> tuple[dict[str, Any], dict[str, Any]]:
                async with (
                    in_process_runtime(tmp / "herdr.sock", config_dir) as runtime,
                    runtime.client() as client,
                ):
                    plain = await call_tool(
                        client, "herdr_exec", {"workspace": "w1", "command": "echo plain"}
                    )
                    once = await call_tool(client, "herdr_exec", keyed)
                    return plain, once

            plain, once = asyncio.run(asyncio.wait_for(first(), 90))
            assert (plain["stdout"], once["stdout"], once["idempotent_replay"]) == (
                "plain\n",
                "keyed\n",
                False,
            )
            assert not (spool / plain["session_id"]).exists()
            assert (spool / once["session_id"] / "metadata.json").is_file()
            store = StateStore.open(config_dir / "state.db")
            try:
                keyed_row = row(store, once["session_id"])
                assert keyed_row is not None
                assert keyed_row["op_id"] is not None
                assert row(store, plain["session_id"]) is None
            finally:
                store.close()
            records = [record for record in read_records(config_dir) if isinstance(record, dict)]
            exec_records = [record for record in records if record.get("tool") == "herdr_exec"]
            assert [record["outcome"] for record in exec_records] == ["ok", "ok"]

            async def second() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
                async with (
                    in_process_runtime(tmp / "herdr.sock", config_dir) as runtime,
                    runtime.client() as client,
                ):
                    replay = await call_tool(client, "herdr_exec", keyed)
                    gone = await call_tool(client, "herdr_exec_read", {"session_id": plain["session_id"]})
                    kept = await call_tool(client, "herdr_exec_read", {"session_id": once["session_id"]})
                    return replay, gone, kept

            replay, gone, kept = asyncio.run(asyncio.wait_for(second(), 90))
            assert (replay["idempotent_replay"], replay["stdout"]) == (True, "keyed\n")
            assert gone["error"]["code"] == "session_not_found"
            assert (kept["stdout"]["text"], kept["running"]) == ("keyed\n", False)
            assert (repo / "effects.log").read_text() == "once\n"
            records = [record for record in read_records(config_dir) if isinstance(record, dict)]
            assert [
                record["tool"] for record in records if record.get("tool", "").startswith("herdr_exec")
            ] == [
                "herdr_exec",
                "herdr_exec",
                "herdr_exec",
                "herdr_exec_read",
                "herdr_exec_read",
            ]
