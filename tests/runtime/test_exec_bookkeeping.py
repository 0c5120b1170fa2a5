"""The per-command bookkeeping of exec sessions made cheap: the process table read after a command
leaves out processes known to be older than its shell and the shells of other sessions (without
losing what left them), the last pid handed out proves a quiet shell left nothing, and the spool
of a session replaced at the limit is removed off the event loop. Real processes, real files."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from herdr_mcp.runtime.exec_sessions import ExecSessions
from herdr_mcp.runtime.exec_sessions.processes import (
    SESSION_ENV,
    ProcessTable,
    last_pid,
    own_shells,
    process_identity,
    reap_shell,
    shell_started,
    start_ticks,
)
from tests.support.waiting import wait_until, wait_until_async


def _sleeper(session_id: str | None = None) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if session_id is not None:
        env[SESSION_ENV] = session_id
    process = subprocess.Popen(["sleep", "300"], env=env, start_new_session=True)
    if session_id is not None and sys.platform == "linux":
        # Popen returns once exec has closed the error pipe, which the kernel does before it lays
        # out the new environment: for a moment /proc/<pid>/environ reads empty (seen under load).
        marker = f"{SESSION_ENV}={session_id}".encode()
        wait_until(lambda: marker in Path(f"/proc/{process.pid}/environ").read_bytes(), "the exec to finish")
    return process


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()  # reaped: an unwaited Popen warns "still running" when collected
        process.wait()


def _ticks(pid: int) -> int:
    ticks = start_ticks(process_identity(pid))
    assert ticks is not None
    return ticks


def _sleeper_after(
    older: subprocess.Popen[bytes], session_id: str, processes: list[subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    """A sleeper of `session_id` started at least a clock tick (10 ms) after `older`, so that
    "started since" tells the two apart (kept in `processes`, so the fixture ends it)."""
    deadline = time.monotonic() + 30
    while True:
        newer = _sleeper(session_id)
        processes.append(newer)
        if _ticks(newer.pid) > _ticks(older.pid):
            return newer
        assert time.monotonic() < deadline, "no clock tick between two starts"
        newer.kill()
        newer.wait()


def test_since_leaves_out_older_processes_and_finds_newer_ones(
    processes: list[subprocess.Popen[bytes]],
) -> None:
    if sys.platform != "linux":  # no /proc: only the process group is looked at
        assert ProcessTable.read(0) is None
        return
    older = _sleeper("xolder")
    processes.append(older)
    full = ProcessTable.read()
    assert full is not None and older.pid in {entry.pid for entry in full.entries}
    newer = _sleeper_after(older, "xnewer", processes)
    since = _ticks(newer.pid)
    table = ProcessTable.read(since)
    assert table is not None
    pids = {entry.pid for entry in table.entries}
    assert older.pid not in pids  # known from the first look, older than `since`
    assert newer.pid in pids  # new since the last look: read
    assert table.marked("xnewer", since) == {newer.pid}
    assert table.group(newer.pid) == {newer.pid}
    # Without `since` everything is there again.
    again = ProcessTable.read()
    assert again is not None and {older.pid, newer.pid} <= {entry.pid for entry in again.entries}


NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")


def _sleeper_at_pid(pid: int, session_id: str) -> subprocess.Popen[bytes] | None:
    """A sleeper of `session_id` started under `pid` (free again), through ns_last_pid, the way
    checkpoint/restore tools pick a pid; None when another process took it first."""
    NS_LAST_PID.write_text(str(pid - 1))
    process = _sleeper(session_id)
    if process.pid == pid:
        return process
    process.kill()
    process.wait()
    return None


def test_a_reused_pid_is_read_again_and_not_taken_for_the_older_process(
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """The shortcut of `ProcessTable.read(since)` skips a pid whose /proc inode it has seen with an
    older start. A new process under the same pid has a new inode, so it is read and found: the
    kernel's pid handed out again (through ns_last_pid, which needs root in the pid namespace)."""
    if sys.platform != "linux":  # no /proc: only the process group is looked at
        assert ProcessTable.read(0) is None
        return
    if os.geteuid() != 0:  # CI and the README's test command run as root: there it always runs
        pytest.skip(f"{NS_LAST_PID} takes root in the pid namespace to hand a pid out again")
    older = _sleeper("xreused-old")
    first = ProcessTable.read()
    assert first is not None and older.pid in {entry.pid for entry in first.entries}
    since = _ticks(_sleeper_after(older, "xmarker", processes).pid)
    deadline = time.monotonic() + 30
    reused_pid = older.pid
    older.kill()
    older.wait()  # reaped: its pid is free
    reused = None
    while reused is None:  # another process may take the pid between the write and the spawn
        assert time.monotonic() < deadline, f"pid {reused_pid} could not be handed out again"
        reused = _sleeper_at_pid(reused_pid, "xreused-new")
    processes.append(reused)
    table = ProcessTable.read(since)
    assert table is not None
    assert reused_pid in {entry.pid for entry in table.entries}, (
        "the reused pid was skipped as the old process"
    )
    assert table.marked("xreused-new", since) == {reused_pid}


@pytest.mark.usefixtures("quiet_login_shell")
def test_a_session_replaced_at_the_limit_has_its_files_removed(tmp_path: Path) -> None:
    spool = tmp_path / "spool"

    async def main() -> None:
        sessions = ExecSessions(spool, max_sessions=1)
        try:
            # Durable sessions (a keyed herdr_exec's, herdr_exec_start's) have files to remove.
            first = await sessions.run(tmp_path, "echo first", 30_000, durable=True)
            second = await sessions.run(tmp_path, "echo second", 30_000, durable=True)
            assert second["stdout"] == "second\n"
            gone = spool / first["session_id"]
            await wait_until_async(lambda: not gone.exists(), "the replaced session's files to go")
            assert sorted(path.name for path in spool.iterdir()) == [second["session_id"]]
        finally:
            await sessions.shutdown(grace_ms=200)

    asyncio.run(main())


@pytest.mark.skipif(sys.platform != "linux", reason="/proc")
def test_other_shells_are_left_out_but_what_escaped_them_is_found(
    processes: list[subprocess.Popen[bytes]],
) -> None:
    # Two shells of ours (leaders of their own POSIX sessions) and a process that carries the
    # first one's variable but made a POSIX session of its own (setsid): a look at the first
    # session reads neither shell, and still finds the escaped process by its variable.
    first, other = _sleeper("xfirst-shell"), _sleeper("xother-shell")
    escaped = _sleeper_after(first, "xfirst-shell", processes)
    processes.extend([first, other])
    for shell in (first, other):
        shell_started(shell.pid)
    try:
        shells = own_shells()
        table = ProcessTable.read(_ticks(first.pid), shells=shells)
        assert table is not None
        listed = {entry.pid for entry in table.entries}
        assert first.pid not in listed and other.pid not in listed
        assert escaped.pid in listed
        assert table.own_sessions >= {first.pid, other.pid}
        assert table.marked("xfirst-shell", _ticks(first.pid), first.pid) == {escaped.pid}
        # A process in another shell's POSIX session is that shell's, whatever it carries.
        assert table.marked("xother-shell", _ticks(first.pid), other.pid) == set()
    finally:
        for shell in (first, other):
            shell.kill()
            reap_shell(shell)
    assert not own_shells() & {first.pid, other.pid}
    # Reaped: no longer left out (its pid may name another process now).
    table = ProcessTable.read(None, shells=frozenset({first.pid}))
    assert table is not None
    assert table.own_sessions == frozenset()


@pytest.mark.skipif(sys.platform != "linux", reason="/proc")
def test_a_shell_that_created_anything_never_passes_for_one_that_left_nothing() -> None:
    # The proof of looks.Looks.look: the last pid handed out is still the exited shell's only
    # when nothing was created after it. A shell that forked (even a child it waited for) took
    # a pid after its own, so it is always looked for in /proc.
    forked = subprocess.Popen(["bash", "-c", "true & wait; true & wait"])
    forked.wait()
    assert last_pid() != forked.pid
    later = subprocess.Popen(["true"])
    later.wait()
    assert last_pid() != forked.pid
