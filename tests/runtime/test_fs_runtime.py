"""fs tools through a real runtime: grep stays bounded and the runtime stays responsive; herdr_inspect
reports what mutations would really answer.

The grep tests start `herdr-mcp serve` as a subprocess on loopback (tests/support/runtime_harness.py): the
runtime's process and its answers while a search runs are their subject. The others serve the same
app in process. All talk to it with the `mcp` SDK client, as a planner would.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from typing import Any

import httpx2
import pytest

from herdr_mcp.runtime.grep.query import GREP_TIMEOUT_S
from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.runtime_harness import (
    call_tool,
    in_process_runtime,
    make_repo,
    path_without_rg,
    running_runtime,
)
from tests.support.sim_helpers import run, short_tmp_dir

# On a loaded 2-core machine the runtime may answer a little after the deadline it enforced.
DEADLINE_SLACK_S = 10.0
# A /health answer slower than this during a grep means the grep starves the server.
HEALTH_ANSWER_S = 5.0


@pytest.mark.slow
def test_python_grep_ends_at_its_deadline_and_health_answers_meanwhile() -> None:
    # Found: `(a+)+$` on one 100,000-character line never returned without rg, and /health timed
    # out for every other client while it ran.
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", {"big.txt": b"a" * 100_000 + b"b\n", "small.txt": b"needle\n"})
        root = str(repo.resolve())
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"),
            running_runtime(
                tmp / "herdr.sock", tmp / "config", env={"PATH": path_without_rg(tmp)}
            ) as runtime,
        ):

            async def body() -> tuple[dict[str, Any], float, list[float], dict[str, Any]]:
                async with httpx2.AsyncClient(timeout=HEALTH_ANSWER_S) as http:
                    health = (await http.get(f"{runtime.base}/health")).json()
                    async with runtime.client() as client:
                        started = time.monotonic()
                        grep = asyncio.create_task(
                            call_tool(
                                client, "herdr_fs_grep", {"root": root, "pattern": "(a+)+$", "regex": True}
                            )
                        )
                        answers: list[float] = []
                        while not grep.done():
                            asked = time.monotonic()
                            reply = await http.get(f"{runtime.base}/health")
                            assert reply.status_code == 200
                            answers.append(time.monotonic() - asked)
                            await asyncio.wait({grep}, timeout=0.5)
                        result = await grep
                        elapsed = time.monotonic() - started
                        after = await call_tool(client, "herdr_fs_grep", {"root": root, "pattern": "needle"})
                return result, elapsed, answers, {"health": health, "after": after}

            result, elapsed, answers, other = run(body(), timeout=GREP_TIMEOUT_S + 60)
    assert other["health"]["grep"] == {"engine": "python"}
    assert result["error"]["code"] == "grep_timeout", result
    assert result["error"]["timeout_s"] == GREP_TIMEOUT_S
    assert GREP_TIMEOUT_S - 1 <= elapsed <= GREP_TIMEOUT_S + DEADLINE_SLACK_S
    assert len(answers) >= 5 and max(answers) < HEALTH_ANSWER_S
    assert other["after"]["engine"] == "python"
    assert other["after"]["matches"] == [{"path": "small.txt", "line": 1, "text": "needle"}]


@pytest.mark.slow
def test_sigterm_during_a_grep_stops_the_runtime_long_before_the_grep_deadline() -> None:
    # Without stopping the search child at shutdown, the runtime waited for the worker thread
    # blocked on it: 18 s after SIGTERM, at the grep's deadline.
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", {"big.txt": b"a" * 100_000 + b"b\n"})
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"),
            running_runtime(
                tmp / "herdr.sock", tmp / "config", env={"PATH": path_without_rg(tmp)}
            ) as runtime,
        ):

            async def body() -> float:
                async with runtime.client() as client, httpx2.AsyncClient(timeout=HEALTH_ANSWER_S) as http:
                    grep = asyncio.create_task(
                        call_tool(
                            client,
                            "herdr_fs_grep",
                            {"root": str(repo.resolve()), "pattern": "(a+)+$", "regex": True},
                        )
                    )
                    # The search is running once the runtime has had it for a moment and still
                    # answers /health (the grep cannot finish: it ends only at its deadline).
                    await asyncio.wait({grep}, timeout=1.0)
                    assert not grep.done()
                    assert (await http.get(f"{runtime.base}/health")).status_code == 200
                    signalled = time.monotonic()
                    runtime.process.terminate()
                    await asyncio.to_thread(runtime.process.wait)
                    grep.cancel()
                    return time.monotonic() - signalled

            took = run(body(), timeout=GREP_TIMEOUT_S + 30)
            assert runtime.process.returncode == 0
    assert took < GREP_TIMEOUT_S / 2


def test_health_names_the_grep_engine_in_use() -> None:
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", {"a.txt": b"a\n"})

        async def body() -> dict[str, Any]:
            async with (
                in_process_runtime(tmp / "herdr.sock", tmp / "config") as runtime,
                runtime.http() as http,
            ):
                document: dict[str, Any] = (await http.get("/health")).json()
                return document

        with SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"):
            health = run(body())
    assert shutil.which("rg", path=os.environ.get("PATH")) is not None, "the test command installs rg"
    assert health["grep"] == {"engine": "rg"}


def test_inspect_reports_the_mutations_the_gates_would_answer() -> None:
    # Found: herdr_inspect said `mutations: "allowed"` next to `read_only: true`.
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", {"a.txt": b"a\n"})
        other = make_repo(tmp / "other", {"b.txt": b"b\n"})
        root = str(repo.resolve())
        answers = {}

        async def inspect_and_write(name: str, **options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
            async with (
                in_process_runtime(tmp / "herdr.sock", tmp / f"config-{name}", **options) as runtime,
                runtime.client() as client,
            ):
                inspect = await call_tool(client, "herdr_inspect")
                write = await call_tool(client, "herdr_fs_write", {"path": f"{root}/new.txt", "content": "x"})
                return inspect, write

        with SimulatorThread(SimConfig.for_roots([repo, other]), tmp / "herdr.sock"):
            cases: dict[str, dict[str, Any]] = {
                "default": {},
                "read_only": {"read_only": True},
                "write_roots": {"write_roots": (other.resolve(),)},
            }
            for name, options in cases.items():
                inspect, write = run(inspect_and_write(name, **options))
                projects = {p["root"]: p["mutations"] for p in inspect["projects"]}
                answers[name] = (projects[root], write.get("error", {}).get("code", "allowed"))
    assert answers == {
        "default": ("allowed", "allowed"),
        "read_only": ("read_only_mode", "read_only_mode"),
        "write_roots": ("write_root_not_allowed", "write_root_not_allowed"),
    }
