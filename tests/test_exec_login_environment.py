"""The login environment of exec sessions: captured once from a real `bash -l`, again when the
profile changes, `bash -lc` when the capture fails. Real bash, a private HOME per test."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.runtime.exec_sessions import ExecSessions
from herdr_mcp.runtime.exec_sessions.login_environment import LoginEnvironment
from herdr_mcp.runtime.exec_sessions.processes import SESSION_ENV
from tests.waiting import wait_until_async

Body = Callable[[ExecSessions], Awaitable[None]]


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


def test_a_capture_past_its_deadline_falls_back_to_bash_lc(tmp_path: Path, home: Path) -> None:
    # Slow the first time only: the capture is killed at its deadline, the fallback login shell
    # that runs the command then reads a quick profile.
    profile = home / ".profile"
    profile.write_text(
        '[ -e "$HOME/warm" ] || { touch "$HOME/warm"; sleep 30; }\n'
        'echo x >> "$HOME/count"\nexport HM_VAR=from-profile\n'
    )
    login = LoginEnvironment((SESSION_ENV,), timeout_seconds=1.0)

    async def body(sessions: ExecSessions) -> None:
        command = 'echo "$HM_VAR"; shopt -q login_shell && echo login'
        first = await run(sessions, tmp_path, command)
        assert first["stdout"] == "from-profile\nlogin\n"
        second = await run(sessions, tmp_path, command)
        assert second["stdout"] == "from-profile\nlogin\n"
        assert login.captures == 1  # the failure is remembered, not retried on every call
        assert lines(home / "count") == 2  # the fallback reads the profile on every call
        profile.write_text(profile.read_text() + "# edited\n")
        third = await run(sessions, tmp_path, command)
        assert third["stdout"] == "from-profile\n"  # captured this time: plain bash -c
        assert login.captures == 2

    drive(tmp_path, body, login)


def test_a_profile_that_exits_fails_the_command_as_bash_lc_did(tmp_path: Path, home: Path) -> None:
    (home / ".profile").write_text("echo leaving >&2\nexit 4\n")

    async def body(sessions: ExecSessions) -> None:
        result = await run(sessions, tmp_path, "echo never")
        assert (result["exit_code"], result["stdout"], result["stderr"]) == (4, "", "leaving\n")

    drive(tmp_path, body)


async def wait_finished(sessions: ExecSessions, session_id: str) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        state = sessions.read(session_id)
        return None if state["running"] else state

    return await wait_until_async(finished, "the session to finish")
