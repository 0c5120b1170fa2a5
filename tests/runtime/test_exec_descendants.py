"""Exec sessions own their descendants.

A command can leave processes behind: in its process group (`(server &)` with its output
redirected), or out of it (`setsid`, a double fork into a new session). herdr_exec and
herdr_exec_read say so (`descendants_running`, `descendant_pids`), herdr_exec_kill stops them
even when the shell itself has finished, and so does the runtime's shutdown. Everything here
runs real `bash`/`sleep` processes and checks by pid; every pid a test learns is killed in a
`finally` if it is still alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.exec_sessions import ExecSessions
from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.runtime_harness import call_tool, make_repo, running_runtime
from tests.support.sim_helpers import short_tmp_dir
from tests.support.waiting import poll_until, wait_until, wait_until_async

pytestmark = pytest.mark.usefixtures("quiet_login_shell")

# A child left in the session's process group, its output redirected: the shell and the pipes
# are done at once, the child is not. It prints its pid first.
GROUP_CHILD = "(sleep 3012 >/dev/null 2>&1 & echo $!); echo started"
# A child that left the process group and the session (setsid without a fork: a background job
# of a non-interactive shell is not a group leader).
SETSID_CHILD = "setsid sleep 3013 >/dev/null 2>&1 </dev/null & echo $!"
# A double fork into a new session (setsid -f); the grandchild writes its own pid to a file.
DOUBLE_FORK = (
    "setsid -f sh -c 'echo $$ > escaped.pid; exec sleep 3014' >/dev/null 2>&1 </dev/null; echo forked"
)


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie nobody reaped yet counts as gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return text[text.rfind(")") + 2 :].split()[0] not in ("Z", "X")


@contextlib.contextmanager
def killed_at_end() -> Iterator[list[int]]:
    """A list to put every learned pid in; whatever is still alive at the end gets SIGKILL."""
    pids: list[int] = []
    try:
        yield pids
    finally:
        for pid in pids:
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def drive(spool: Path, body: Callable[[ExecSessions], Awaitable[None]], **options: Any) -> None:
    async def main() -> None:
        sessions = ExecSessions(spool, **options)
        try:
            await body(sessions)
        finally:
            await sessions.shutdown(grace_ms=500)

    asyncio.run(main())


def escaped_pid(workdir: Path) -> int:
    path = workdir / "escaped.pid"
    wait_until(lambda: path.is_file() and path.read_text().endswith("\n"), "the double-forked pid")
    return int(path.read_text())


def test_a_child_left_in_the_group_is_reported_and_killed(tmp_path: Path, workdir: Path) -> None:
    with killed_at_end() as pids:

        async def body(sessions: ExecSessions) -> None:
            result = await sessions.run(workdir, GROUP_CHILD, 10_000)
            child = int(result["stdout"].split()[0])
            pids.append(child)
            assert (result["completed"], result["exit_code"]) == (True, 0)
            assert (result["descendants_running"], result["descendant_pids"]) == (True, [child])
            assert "herdr_exec_kill" in result["message"]
            state = sessions.read(result["session_id"])
            assert (state["running"], state["exit_code"]) == (False, 0)
            assert (state["descendants_running"], state["descendant_pids"]) == (True, [child])

            killed = await sessions.kill(result["session_id"], grace_ms=5000)
            assert (killed["already_finished"], killed["escalated"]) == (False, False)
            assert (killed["exit_code"], killed["signal"], killed["descendants_running"]) == (0, None, False)
            assert not alive(child)
            after = sessions.read(result["session_id"])
            assert after["descendants_running"] is False
            assert "descendant_pids" not in after
            again = await sessions.kill(result["session_id"])
            assert again["already_finished"] is True

        drive(tmp_path / "spool", body)


@pytest.mark.parametrize("command", [SETSID_CHILD, DOUBLE_FORK], ids=["setsid", "double-fork"])
def test_children_that_left_the_group_are_found_and_killed(
    tmp_path: Path, workdir: Path, command: str
) -> None:
    with killed_at_end() as pids:

        async def body(sessions: ExecSessions) -> None:
            result = await sessions.run(workdir, command, 10_000)
            child = escaped_pid(workdir) if command == DOUBLE_FORK else int(result["stdout"])
            pids.append(child)
            # `echo $!` may print before the child has called setsid: wait for it to leave the group.
            shell = shell_pid(tmp_path / "spool", result["session_id"])
            await wait_until_async(lambda: os.getpgid(child) != shell, "the child to leave the shell's group")
            assert result["completed"] is True
            await wait_until_async(
                lambda: sessions.read(result["session_id"]).get("descendant_pids") == [child],
                "the escaped child to be reported",
            )
            killed = await sessions.kill(result["session_id"], grace_ms=5000)
            assert (killed["already_finished"], killed["descendants_running"]) == (False, False)
            assert not alive(child)

        drive(tmp_path / "spool", body)


def shell_pid(spool: Path, session_id: str) -> int:
    """The pid of a session's shell (the leader of its process group), from its metadata."""
    pid: int = json.loads((spool / session_id / "metadata.json").read_text())["pid"]
    return pid


def test_a_child_that_ignores_sigterm_gets_sigkill(tmp_path: Path, workdir: Path) -> None:
    command = "(trap '' TERM; sleep 3015 >/dev/null 2>&1 </dev/null & echo $!); echo started"
    with killed_at_end() as pids:

        async def body(sessions: ExecSessions) -> None:
            result = await sessions.run(workdir, command, 10_000)
            pids.append(int(result["stdout"].split()[0]))
            killed = await sessions.kill(result["session_id"], grace_ms=300)
            assert (killed["already_finished"], killed["escalated"], killed["descendants_running"]) == (
                False,
                True,
                False,
            )
            assert not alive(pids[0])

        drive(tmp_path / "spool", body)


def test_shutdown_stops_what_finished_sessions_left_running(tmp_path: Path, workdir: Path) -> None:
    with killed_at_end() as pids:

        async def main() -> None:
            sessions = ExecSessions(tmp_path / "spool")
            grouped = await sessions.run(workdir, GROUP_CHILD, 10_000)
            pids.append(int(grouped["stdout"].split()[0]))
            escaped = await sessions.run(workdir, DOUBLE_FORK, 10_000)
            pids.append(escaped_pid(workdir))
            assert grouped["completed"] and escaped["completed"]
            assert all(alive(pid) for pid in pids)
            await sessions.shutdown(grace_ms=2000)
            assert not any(alive(pid) for pid in pids)

        asyncio.run(main())


def test_descendants_that_end_by_themselves_are_no_longer_reported(tmp_path: Path, workdir: Path) -> None:
    # The child waits for a file the test creates, so nothing depends on timing.
    command = "(while [ ! -e stop ]; do sleep 0.05; done >/dev/null 2>&1 & echo $!); echo started"
    with killed_at_end() as pids:

        async def body(sessions: ExecSessions) -> None:
            result = await sessions.run(workdir, command, 10_000)
            pids.append(int(result["stdout"].split()[0]))
            shell = shell_pid(tmp_path / "spool", result["session_id"])
            assert result["descendants_running"] is True
            (workdir / "stop").touch()
            await wait_until_async(
                lambda: sessions.read(result["session_id"])["descendants_running"] is False,
                "the child to end",
            )
            # The shell is no zombie of the runtime once nothing of the session is left.
            assert not Path(f"/proc/{shell}").exists()
            killed = await sessions.kill(result["session_id"])
            assert killed["already_finished"] is True

        drive(tmp_path / "spool", body)


def test_sessions_with_live_descendants_are_neither_pruned_nor_replaced(
    tmp_path: Path, workdir: Path
) -> None:
    command = "(while [ ! -e stop ]; do sleep 0.05; done >/dev/null 2>&1 & echo $!); echo started"
    with killed_at_end() as pids:

        async def body(sessions: ExecSessions) -> None:
            result = await sessions.run(workdir, command, 10_000)
            pids.append(int(result["stdout"].split()[0]))
            # Retention is zero, yet the session stays while its child runs...
            assert sessions.read(result["session_id"])["descendants_running"] is True
            # ...and it is not the finished session that makes room for a new one.
            with pytest.raises(ToolError) as error:
                sessions.start(workdir, "true")
            assert error.value.code == "too_many_sessions"
            assert "still running" in error.value.message
            (workdir / "stop").touch()
            await wait_until_async(lambda: not alive(pids[0]), "the child to end")

            def pruned() -> bool:
                try:
                    sessions.read(result["session_id"])
                except ToolError as exc:
                    return exc.code == "session_not_found"
                return False

            await wait_until_async(pruned, "the session to be pruned")

        drive(tmp_path / "spool", body, retention_seconds=0, max_sessions=1)


def test_a_session_still_running_reports_no_descendants_yet(tmp_path: Path, workdir: Path) -> None:
    async def body(sessions: ExecSessions) -> None:
        started = sessions.start(workdir, "sleep 30")
        state = sessions.read(started["session_id"])
        assert (state["running"], state["descendants_running"]) == (True, None)
        killed = await sessions.kill(started["session_id"], grace_ms=2000)
        assert (killed["signal"], killed["descendants_running"]) == ("SIGTERM", False)

    drive(tmp_path / "spool", body)


def test_runtime_shutdown_stops_descendants_of_exec_sessions() -> None:
    """The defect as found: a real runtime, herdr_exec, herdr_exec_read, herdr_exec_start and
    herdr_exec_kill through MCP, then SIGTERM to the runtime; every process the sessions left
    behind is gone afterwards. (The answers are checked last, so that on a runtime without the
    fix the failure shows what survived.)"""
    answers: dict[str, dict[str, Any]] = {}
    with killed_at_end() as pids, short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", {"README.md": b"# demo\n"})
        with SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"):
            with running_runtime(tmp / "herdr.sock", tmp / "config") as runtime:

                async def body() -> None:
                    async with runtime.client() as client:
                        inspect = await call_tool(client, "herdr_inspect", {})
                        workspace = inspect["workspaces"][0]["workspace_id"]
                        command = f"{GROUP_CHILD}; {SETSID_CHILD}"
                        done = await call_tool(
                            client, "herdr_exec", {"workspace": workspace, "command": command}
                        )
                        answers["exec"] = done
                        pids.extend(int(word) for word in done["stdout"].split() if word.isdigit())
                        answers["read"] = await call_tool(
                            client, "herdr_exec_read", {"session_id": done["session_id"]}
                        )
                        # herdr_exec_kill on a session whose shell has finished.
                        root = str(repo.resolve())
                        started = await call_tool(
                            client, "herdr_exec_start", {"root": root, "command": GROUP_CHILD}
                        )
                        session = started["session_id"]

                        async def finished() -> dict[str, Any] | None:
                            state = await call_tool(client, "herdr_exec_read", {"session_id": session})
                            return None if state["running"] else state

                        state = await poll_until(finished, "the session's shell to finish")
                        pids.append(int(state["stdout"]["text"].split()[0]))
                        answers["kill"] = await call_tool(client, "herdr_exec_kill", {"session_id": session})
                        answers["after_kill"] = {"alive": alive(pids[-1])}

                asyncio.run(asyncio.wait_for(body(), 60))
                assert len(pids) == 3
                assert alive(pids[0]) and alive(pids[1])
            # running_runtime has sent SIGTERM and waited for the runtime to exit.
            assert runtime.process.returncode == 0
            wait_until(lambda: not any(alive(pid) for pid in pids), "the runtime's shutdown to stop them")
    grouped, escaped = pids[:2]
    done = answers["exec"]
    assert (done["completed"], done["exit_code"]) == (True, 0)
    assert (done["descendants_running"], done["descendant_pids"]) == (True, sorted([grouped, escaped]))
    assert (answers["read"]["running"], answers["read"]["descendants_running"]) == (False, True)
    assert (answers["kill"]["already_finished"], answers["kill"]["descendants_running"]) == (False, False)
    assert answers["after_kill"] == {"alive": False}
