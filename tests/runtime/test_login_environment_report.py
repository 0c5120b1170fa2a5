"""The login environment reported where a planner and an operator look: herdr_exec's and
herdr_exec_start's answers and `/health`, on a real runtime (`herdr-mcp serve` as a subprocess,
the `mcp` SDK client) whose HOME is a temporary directory with a real login profile.

bash -l reads the first of ~/.bash_profile, ~/.bash_login, ~/.profile; the runtime's capture
starts from the runtime's own environment, so HOME given to the runtime picks the profile.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx2

from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.runtime_harness import RunningRuntime, call_tool, make_repo, running_runtime
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import poll_until

#: How much later than its own bound a call may answer on a loaded 2-core machine.
SLACK_S = 4.0
# Waits for a file the test creates, so the test decides when the capture ends.
GATED = 'while [ ! -e "$HOME/go" ]; do sleep 0.02; done\nexport HM_VAR=from-profile\n'
COMMAND = 'echo "[$HM_VAR]"'


async def health(runtime: RunningRuntime) -> dict[str, Any]:
    async with httpx2.AsyncClient(timeout=30) as http:
        answer = await http.get(f"{runtime.base}/health")
    assert answer.status_code == 200
    document: dict[str, Any] = answer.json()
    return document


async def login_state(runtime: RunningRuntime, state: str) -> dict[str, Any] | None:
    report: dict[str, Any] = (await health(runtime))["login_environment"]
    return report if report["state"] == state else None


def test_the_login_environment_is_reported_in_answers_and_health() -> None:
    with short_tmp_dir() as tmp:
        home = tmp / "home"
        home.mkdir()
        profile = home / ".bash_profile"
        profile.write_text(GATED)
        repo = make_repo(tmp / "repo", {"README.md": b"# demo\n"})
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"),
            running_runtime(tmp / "herdr.sock", tmp / "config", env={"HOME": str(home)}) as runtime,
        ):
            run(_exercise(runtime, home, profile, str(repo.resolve())), timeout=180)


async def _exercise(runtime: RunningRuntime, home: Path, profile: Path, root: str) -> None:
    assert (await health(runtime))["login_environment"] == {"state": "not_captured", "captures": 0}
    exec_args = {"workspace": "w1", "command": COMMAND, "timeout_ms": 1000}
    async with runtime.client() as client:
        # 1. The profile hangs: the call answers within its own timeout, the command ran without
        #    the profile, and both the answer and /health say so.
        asked = time.monotonic()
        slow = await call_tool(client, "herdr_exec", exec_args)
        assert time.monotonic() - asked < 1.0 + SLACK_S
        assert (slow["completed"], slow["exit_code"], slow["stdout"]) == (True, 0, "[]\n"), slow
        assert slow["login_environment"]["state"] == "capturing"
        assert "still running after" in slow["login_environment"]["reason"]
        capturing = await health(runtime)
        assert capturing["login_environment"]["state"] == "capturing"
        # 2. The profile finishes: /health says captured, commands get what it exported.
        (home / "go").touch()
        captured = await poll_until(lambda: login_state(runtime, "captured"), "the capture")
        assert captured["captures"] == 1
        used = await call_tool(client, "herdr_exec", exec_args)
        assert (used["stdout"], "login_environment" in used) == ("[from-profile]\n", False)
        # 3. The profile now exits 1: the command still runs, with the base environment, and
        #    the answers (herdr_exec and herdr_exec_start) and /health say why.
        profile.write_text("echo giving up >&2\nexit 1\n")
        failed = await call_tool(client, "herdr_exec", exec_args)
        assert (failed["exit_code"], failed["stdout"], failed["stderr"]) == (0, "[]\n", "")
        assert failed["login_environment"]["state"] == "failed"
        assert "exited with status 1: 'giving up'" in failed["login_environment"]["reason"]
        started = await call_tool(client, "herdr_exec_start", {"root": root, "command": COMMAND})
        assert started["login_environment"]["state"] == "failed"
    status = (await health(runtime))["login_environment"]
    assert (status["state"], status["captures"]) == ("failed", 2)
    assert "exited with status 1" in status["reason"]
    assert 0 < status["retry_in_s"] <= 60
