"""The login environment of exec sessions: captured once from a real `bash -l`, again when the
profile changes; when the capture is slow or fails, the command runs without it (`bash -c` in the
runtime's environment) and the answer says so. Real bash, a private HOME per test."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.runtime.exec_sessions import ExecSessions, login_environment
from herdr_mcp.runtime.exec_sessions.login_environment import LoginEnvironment
from herdr_mcp.runtime.exec_sessions.processes import SESSION_ENV
from tests.support.waiting import wait_until, wait_until_async

Body = Callable[[ExecSessions], Awaitable[None]]
#: How much later than its own bound a call may answer on a loaded 2-core machine.
SLACK_S = 4.0


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    return path


def drive(tmp_path: Path, body: Body, login: LoginEnvironment | None = None) -> None:
    async def main() -> None:
        sessions = ExecSessions(tmp_path / "spool", login_environment=login)
        try:
            await body(sessions)
        finally:
            await sessions.shutdown(grace_ms=200)

    asyncio.run(main())


async def run(sessions: ExecSessions, cwd: Path, command: str) -> dict[str, Any]:
    result = await sessions.run(cwd, command, 30_000)
    assert result["completed"], result
    return result


def edit(path: Path, text: str) -> None:
    """Rewrite a profile file so that its size (hence its key) changes, whatever the clock does."""
    path.write_text(text)


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_profile_path_additions_and_exports_reach_commands(tmp_path: Path, home: Path) -> None:
    tools = home / "bin"
    tools.mkdir()
    (tools / "hm-tool").write_text("#!/bin/sh\necho tool-ran\n")
    (tools / "hm-tool").chmod(0o755)
    (home / ".bash_profile").write_text('export PATH="$HOME/bin:$PATH"\nexport HM_GREETING="hello there"\n')

    async def body(sessions: ExecSessions) -> None:
        result = await run(sessions, tmp_path, 'hm-tool; echo "$HM_GREETING"; echo "$HERDR_MCP_EXEC_SESSION"')
        assert result["stdout"] == f"tool-ran\nhello there\n{result['session_id']}\n"

    drive(tmp_path, body)


def test_the_profile_is_read_once_and_again_after_it_changes(tmp_path: Path, home: Path) -> None:
    count = home / "count"
    profile = home / ".profile"
    edit(profile, 'echo x >> "$HOME/count"\nexport HM_VERSION=1\n')

    async def body(sessions: ExecSessions) -> None:
        for _ in range(5):
            assert (await run(sessions, tmp_path, 'echo "$HM_VERSION"'))["stdout"] == "1\n"
        await sessions.prepare()
        started = sessions.start(tmp_path, 'echo "$HM_VERSION"')
        assert lines(count) == 1
        edit(profile, 'echo x >> "$HOME/count"\nexport HM_VERSION=22\n')
        assert (await run(sessions, tmp_path, 'echo "$HM_VERSION"'))["stdout"] == "22\n"
        assert lines(count) == 2
        for _ in range(3):
            await run(sessions, tmp_path, "true")
        assert lines(count) == 2
        finished = await wait_finished(sessions, started["session_id"])
        assert finished["stdout"]["text"] == "1\n"

    drive(tmp_path, body)


def test_a_new_file_in_a_watched_place_counts_as_a_change(tmp_path: Path, home: Path) -> None:
    count = home / "count"
    (home / ".profile").write_text('echo x >> "$HOME/count"\n[ -f "$HOME/.bashrc" ] && . "$HOME/.bashrc"\n')

    async def body(sessions: ExecSessions) -> None:
        await run(sessions, tmp_path, "true")
        (home / ".bashrc").write_text("export HM_FROM_BASHRC=yes\n")
        assert (await run(sessions, tmp_path, 'echo "$HM_FROM_BASHRC"'))["stdout"] == "yes\n"
        assert lines(count) == 2

    drive(tmp_path, body)


def test_commands_get_the_shell_state_a_login_shell_gave_them(tmp_path: Path, home: Path) -> None:
    """SHLVL and PWD as bash -lc had them, the profile's umask, and no profile output."""
    (home / ".profile").write_text("echo welcome\necho warning >&2\numask 027\n")
    command = 'echo "$SHLVL $PWD"; umask'
    login = subprocess.run(
        ["bash", "-lc", command], cwd=tmp_path, capture_output=True, text=True, check=True, env=os.environ
    )
    assert login.stdout.startswith("welcome\n")  # what every command printed before

    async def body(sessions: ExecSessions) -> None:
        result = await run(sessions, tmp_path, command)
        assert result["stdout"] == login.stdout.removeprefix("welcome\n")
        assert result["stdout"].endswith("0027\n")
        assert result["stderr"] == ""

    drive(tmp_path, body)


# A profile that waits for a file the test creates: the test decides when the capture ends.
WAIT_FOR_GO = 'while [ ! -e "$HOME/go" ]; do sleep 0.02; done\nexport HM_VAR=from-profile\n'
GATED = 'echo "$$" > "$HOME/capture.pid"\n' + WAIT_FOR_GO
PROFILE_VAR = 'echo "[$HM_VAR]"'


def without(report: dict[str, Any] | None, state: str, *phrases: str) -> None:
    """`report` says the command ran without the login environment, in `state`, naming `phrases`."""
    assert report is not None
    assert (report["used"], report["state"]) == (False, state), report
    for phrase in phrases:
        assert phrase in report["reason"], report


def test_a_slow_capture_is_not_waited_for_past_half_the_timeout(tmp_path: Path, home: Path) -> None:
    # Found: a profile that hangs made herdr_exec with timeout_ms 1000 answer after 11 s (a 10 s
    # capture, then `bash -lc` reading the profile again inside the command).
    (home / ".bash_profile").write_text(GATED)

    async def body(sessions: ExecSessions) -> None:
        asked = time.monotonic()
        first = await sessions.run(tmp_path, PROFILE_VAR, 1000)
        elapsed = time.monotonic() - asked
        assert (first["completed"], first["stdout"]) == (True, "[]\n"), first
        without(first.get("login_environment"), "capturing", "still running after", "at most 0.5 s")
        assert elapsed < 1.0 + SLACK_S, elapsed
        assert sessions.login_status()["state"] == "capturing"
        (home / "go").touch()
        await wait_until_async(lambda: sessions.login_status()["state"] == "captured", "the capture")
        second = await run(sessions, tmp_path, PROFILE_VAR)
        assert (second["stdout"], "login_environment" in second) == ("[from-profile]\n", False)

    drive(tmp_path, body)


def test_a_capture_past_its_deadline_is_remembered_and_the_command_runs_without_it(
    tmp_path: Path, home: Path
) -> None:
    profile = home / ".profile"
    slow_once = '[ -e "$HOME/warm" ] || { touch "$HOME/warm"; sleep 30; }\n'
    profile.write_text(slow_once + 'echo x >> "$HOME/count"\n' + WAIT_FOR_GO)
    (home / "go").touch()
    login = LoginEnvironment((SESSION_ENV,), timeout_seconds=1.0)

    async def body(sessions: ExecSessions) -> None:
        command = PROFILE_VAR + "; shopt -q login_shell && echo login"
        first = await run(sessions, tmp_path, command)
        assert first["stdout"] == "[]\n"  # bash -c, the runtime's environment: not a login shell
        without(first["login_environment"], "failed", "ran longer than 1 s")
        second = await run(sessions, tmp_path, command)
        assert second["stdout"] == "[]\n"
        without(second["login_environment"], "failed", "ran longer than 1 s", "Tried again after 60 s")
        assert login.captures == 1  # the failure is remembered, not retried on every call
        assert lines(home / "count") == 0  # and the profile is not read by every command either
        profile.write_text(profile.read_text() + "# edited\n")
        third = await run(sessions, tmp_path, command)
        assert (third["stdout"], "login_environment" in third) == ("[from-profile]\n", False)
        assert login.captures == 2

    drive(tmp_path, body, login)


def test_a_profile_that_exits_never_stands_in_for_the_command(tmp_path: Path, home: Path) -> None:
    # Found: with a profile ending in `exit 4`, every command answered exit 4 and never ran.
    (home / ".profile").write_text("echo leaving >&2\nexit 4\n")

    async def body(sessions: ExecSessions) -> None:
        result = await run(sessions, tmp_path, "echo ran")
        assert (result["exit_code"], result["stdout"], result["stderr"]) == (0, "ran\n", "")
        without(result["login_environment"], "failed", "exited with status 4", "leaving", "bash -c")
        shell = await sessions.prepare()
        started = sessions.start(tmp_path, "echo started", shell=shell)
        without(started["login_environment"], "failed", "exited with status 4")
        assert (await wait_finished(sessions, started["session_id"]))["stdout"]["text"] == "started\n"
        status = sessions.login_status()
        assert (status["state"], status["captures"]) == ("failed", 1)
        assert "exited with status 4" in status["reason"]

    drive(tmp_path, body)


def test_a_failed_capture_is_tried_again_in_the_background(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(login_environment, "RETRY_FAILED_SECONDS", 0.3)
    (home / ".profile").write_text('[ -e "$HOME/mended" ] || exit 3\nexport HM_VAR=from-profile\n')

    async def body(sessions: ExecSessions) -> None:
        without((await run(sessions, tmp_path, PROFILE_VAR))["login_environment"], "failed", "status 3")
        (home / "mended").touch()  # not a watched file: only the retry can notice
        await wait_until_async(lambda: sessions.login_status().get("retry_in_s") == 0, "the retry time")
        retried = await run(sessions, tmp_path, PROFILE_VAR)  # starts the retry, does not wait for it
        without(retried["login_environment"], "failed", "status 3")
        await wait_until_async(lambda: sessions.login_status()["state"] == "captured", "the retry")
        assert sessions.login_status()["captures"] == 2
        mended = await run(sessions, tmp_path, PROFILE_VAR)
        assert (mended["stdout"], "login_environment" in mended) == ("[from-profile]\n", False)

    drive(tmp_path, body)


def test_shutdown_kills_a_capture_in_flight(tmp_path: Path, home: Path) -> None:
    (home / ".bash_profile").write_text(GATED)
    pid_file = home / "capture.pid"

    async def body(sessions: ExecSessions) -> None:
        result = await sessions.run(tmp_path, "true", 200)
        without(result["login_environment"], "capturing")
        await wait_until_async(lambda: pid_file.exists() and pid_file.read_text().strip(), "its pid")

    drive(tmp_path, body)
    pid = int(pid_file.read_text())
    wait_until(lambda: not alive(pid), "the capture's login shell to be gone")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes (its parent, the capture thread, reaps it).
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return False


async def wait_finished(sessions: ExecSessions, session_id: str) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        state = sessions.read(session_id)
        return None if state["running"] else state

    return await wait_until_async(finished, "the session to finish")
