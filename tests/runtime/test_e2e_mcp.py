"""End to end: the `mcp` SDK client over Streamable HTTP against a real runtime process.

The runtime is `herdr-mcp serve` in a subprocess, connected to a simulator workspace rooted in a
real Git repository; every one of the 18 tools is called for real. The read-only runtime is the
same app served in process (its subject is the mode, not the process).
"""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp_types import CallToolResult
from mcp_types.methods import serialize_server_result
from mcp_types.version import SUPPORTED_PROTOCOL_VERSIONS

from herdr_mcp.contract import contract_identity, identity_of
from herdr_mcp.errors import ToolError
from herdr_mcp.runtime import dispatcher
from herdr_mcp.runtime.tools.fs.image import ImageResult
from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.runtime_harness import (
    RunningRuntime,
    call_tool,
    git,
    in_process_runtime,
    make_repo,
    running_runtime,
)
from tests.support.sim_helpers import short_tmp_dir
from tests.support.waiting import poll_until


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


FILES = {
    "README.md": b"# demo\n\nA demo project.\n",
    "src/app.py": b"def greet(name):\n    return 'hello ' + name\n",
    "docs/notes.txt": b"alpha\nbeta\ngamma\n",
    "logo.png": _png(3, 2),
    ".env": b"API_KEY=do-not-leak\n",
}


@pytest.fixture(scope="module")
def world() -> Iterator[tuple[RunningRuntime, SimulatorThread, Path]]:
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", FILES)
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock") as sim,
            running_runtime(tmp / "herdr.sock", tmp / "config") as runtime,
        ):
            yield runtime, sim, repo


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_tools_list_is_the_frozen_contract(world: tuple[RunningRuntime, SimulatorThread, Path]) -> None:
    runtime, _, _ = world

    async def body() -> list[dict[str, Any]]:
        async with runtime.client() as client:
            listed = await client.list_tools()
        return [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in listed.tools]

    tools = run(body())
    assert len(tools) == 18
    assert identity_of(tools, 5) == contract_identity(5)


def test_every_tool_works(world: tuple[RunningRuntime, SimulatorThread, Path]) -> None:
    runtime, _, repo = world
    root = str(repo.resolve())

    async def body() -> dict[str, dict[str, Any]]:
        seen: dict[str, dict[str, Any]] = {}
        async with runtime.client() as client:

            async def ok(name: str, args: dict[str, Any]) -> dict[str, Any]:
                result = await call_tool(client, name, args)
                assert "error" not in result, (name, result)
                seen[name] = result
                return result

            inspect = await ok("herdr_inspect", {})
            assert [p["root"] for p in inspect["projects"]] == [root]
            assert inspect["projects"][0]["managed"] is True
            assert inspect["warnings"] == []
            workspace = inspect["workspaces"][0]["workspace_id"]

            await ok("herdr_skill", {})
            methods = await ok("herdr_methods", {"query": "skill"})
            assert {m["method"] for m in methods["methods"]} >= {"herdr_mcp.skill.load"}
            loaded = await ok("herdr_call", {"method": "herdr_mcp.skill.load", "params": {"module": "git"}})
            assert "herdr_git" in loaded["result"]["text"]

            read = await ok("herdr_fs_read", {"path": f"{root}/docs/notes.txt", "start_line": 2})
            assert read["content"] == "beta\ngamma\n" and read["total_lines"] == 3
            listing = await ok("herdr_fs_list", {"path": root, "recursive": True})
            assert "src/app.py" in {e["path"] for e in listing["entries"]}
            assert ".env" not in {e["path"] for e in listing["entries"]}
            grep = await ok("herdr_fs_grep", {"root": root, "pattern": "hello"})
            assert grep["matches"][0]["path"] == "src/app.py"
            image = await client.call_tool("herdr_fs_image", {"path": f"{root}/logo.png"})
            assert image.content[0].type == "image" and image.content[0].mime_type == "image/png"
            seen["herdr_fs_image"] = image.structured_content or {}
            assert seen["herdr_fs_image"]["width"] == 3 and seen["herdr_fs_image"]["height"] == 2

            await ok("herdr_fs_write", {"path": f"{root}/src/new.py", "content": "x = 1\n"})
            await ok(
                "herdr_fs_edit",
                {"path": f"{root}/src/app.py", "old_string": "'hello '", "new_string": "'hi '"},
            )
            patch = (
                "*** Begin Patch\n*** Update File: docs/notes.txt\n@@\n alpha\n-beta\n+BETA\n*** End Patch\n"
            )
            await ok("herdr_fs_patch", {"root": root, "patch": patch})
            status = await ok("herdr_git", {"root": root, "action": "status"})
            assert {f["path"] for f in status["files"]} == {"src/app.py", "docs/notes.txt", "src/new.py"}

            done = await ok(
                "herdr_exec", {"workspace": workspace, "command": "echo out; echo err >&2; exit 3"}
            )
            assert (done["exit_code"], done["stdout"], done["stderr"]) == (3, "out\n", "err\n")
            started = await ok("herdr_exec_start", {"root": root, "command": "echo started; sleep 30"})
            session = started["session_id"]

            async def started_output() -> str:
                return str((await ok("herdr_exec_read", {"session_id": session}))["stdout"]["text"])

            assert await poll_until(started_output, "the session's first output") == "started\n"
            killed = await ok("herdr_exec_kill", {"session_id": session, "grace_ms": 500})
            assert killed["running"] is False

            since = await ok("herdr_since", {"cursor": inspect["cursor"]})
            prompt = await ok(
                "herdr_prompt",
                {"target": workspace, "text": "add a test", "wait": {"until": ["done"], "timeout_ms": 10000}},
            )
            assert prompt["task_id"] == prompt["dispatch_id"] and prompt["turn_id"]
            assert prompt["wait"]["reached"] is True and prompt["wait"]["status"] == "done"

            # The wait may see the settle through its own probe before the status event reaches
            # the feed (Herdr polls its subscriptions every 100 ms): the event follows.
            async def statuses() -> list[Any] | None:
                after = await ok("herdr_since", {"cursor": since["next_cursor"]})
                found = [
                    e["data"].get("agent_status")
                    for e in after["events"]
                    if e["event"] == "pane.agent_status_changed"
                ]
                return found if found and found[-1] == "done" else None

            assert "working" in await poll_until(statuses, "the settle in herdr_since")
        return seen

    seen = run(body())
    assert len(seen) == 18, sorted(seen)
    assert (repo / "src/new.py").read_text() == "x = 1\n"
    assert "BETA" in (repo / "docs/notes.txt").read_text()


def test_refusals_over_mcp(world: tuple[RunningRuntime, SimulatorThread, Path]) -> None:
    runtime, _, repo = world
    root = str(repo.resolve())

    async def body() -> list[str]:
        codes = []
        cases: list[tuple[str, dict[str, Any]]] = [
            ("herdr_fs_read", {"path": f"{root}/.env"}),
            ("herdr_fs_read", {"path": f"{root}/../outside.txt"}),
            ("herdr_fs_read", {"path": "/etc/passwd"}),
            ("herdr_call", {"method": "no.such.method"}),
            ("herdr_call", {"method": "pane.read", "params": {"bogus": 1}}),
            ("herdr_git", {"root": root, "action": "diff", "path": "--output=/tmp/pwned"}),
            ("herdr_fs_read", {"path": f"{root}/README.md", "max_bytes": 0}),
            ("herdr_prompt", {"target": "nobody", "text": "hi"}),
            ("herdr_exec_read", {"session_id": "xdeadbeef"}),
        ]
        async with runtime.client() as client:
            for name, args in cases:
                codes.append((await call_tool(client, name, args))["error"]["code"])
        return codes

    assert run(body()) == [
        "secret_path",
        "path_outside_root",
        "path_outside_root",
        "unknown_method",
        "invalid_params",
        "argument_looks_like_option",
        "invalid_arguments",
        "agent_not_found",
        "session_not_found",
    ]
    assert not Path("/tmp/pwned").exists()


def test_bearer_is_required_and_health_is_open(world: tuple[RunningRuntime, SimulatorThread, Path]) -> None:
    runtime, _, _ = world
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    with httpx2.Client(timeout=10) as http:
        assert http.post(runtime.url, json=body).status_code == 401
        wrong = http.post(runtime.url, json=body, headers={"Authorization": "Bearer wrong"})
        assert wrong.status_code == 401
        health = http.get(f"{runtime.base}/health").json()
    assert health["contract"] == contract_identity().to_dict()
    assert health["herdr"]["reachable"] is True and health["herdr"]["protocol"] == 22
    assert (runtime.config_dir / "token").stat().st_mode & 0o777 == 0o600


def test_dns_rebinding_host_is_refused(world: tuple[RunningRuntime, SimulatorThread, Path]) -> None:
    runtime, _, _ = world
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {
        "Authorization": f"Bearer {runtime.token}",
        "Host": "attacker.example",
        "Accept": "application/json, text/event-stream",
    }
    with httpx2.Client(timeout=10) as http:
        answer = http.post(runtime.url, json=body, headers=headers)
    assert answer.status_code in (403, 421), answer.status_code


def test_inspect_degrades_when_the_snapshot_fails(
    world: tuple[RunningRuntime, SimulatorThread, Path],
) -> None:
    runtime, sim, repo = world
    sim.inject_fault("session.snapshot")
    try:

        async def degraded() -> dict[str, Any]:
            async with runtime.client() as client:

                async def inspect() -> dict[str, Any] | None:
                    answer = await call_tool(client, "herdr_inspect")
                    return answer if answer["herdr"]["source"] == "lists" else None

                # The runtime's cached view is fresh for VIEW_TTL_SECONDS: the first inspect past it.
                return await poll_until(inspect, "herdr_inspect to observe the failing snapshot")

        result = run(degraded())
    finally:
        sim.clear_faults()
    assert result["herdr"]["source"] == "lists"
    assert result["warnings"][0]["code"] == "snapshot_failed"
    assert [p["root"] for p in result["projects"]] == [str(repo.resolve())]
    assert result["agents"], "agents still come from agent.list"


def test_read_only_runtime_refuses_writes_and_changes_nothing() -> None:
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", {"a.txt": b"a\n"})
        root = str(repo.resolve())
        writes = [
            ("herdr_fs_write", {"path": f"{root}/b.txt", "content": "b"}),
            ("herdr_fs_edit", {"path": f"{root}/a.txt", "old_string": "a", "new_string": "b"}),
            ("herdr_exec_start", {"root": root, "command": "touch c.txt"}),
        ]

        async def body() -> list[dict[str, Any]]:
            async with (
                in_process_runtime(tmp / "herdr.sock", tmp / "config", read_only=True) as runtime,
                runtime.client() as client,
            ):
                return [await call_tool(client, name, arguments) for name, arguments in writes]

        with SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"):
            results = run(body())
        assert [r["error"]["code"] for r in results] == ["read_only_mode"] * 3
        assert git(repo, "status", "--porcelain") == ""
        assert (repo / "a.txt").read_text() == "a\n"


def test_exec_timeout_becomes_a_readable_background_session(
    world: tuple[RunningRuntime, SimulatorThread, Path],
) -> None:
    runtime, _, _ = world

    async def body() -> tuple[dict[str, Any], dict[str, Any]]:
        async with runtime.client() as client:
            first = await call_tool(
                client,
                "herdr_exec",
                {"workspace": "w1", "command": "echo early; sleep 1; echo late >&2", "timeout_ms": 200},
            )

            async def finished() -> dict[str, Any]:
                read = await call_tool(client, "herdr_exec_read", {"session_id": first["session_id"]})
                return {} if read["running"] else read

            return first, await poll_until(finished, "the session to finish")

    first, final = run(body())
    assert (first["completed"], first["running"]) == (False, True)
    assert final["exit_code"] == 0
    assert final["stdout"]["text"] == "early\n"
    assert final["stderr"]["text"] == "late\n"


@pytest.mark.parametrize("version", sorted(SUPPORTED_PROTOCOL_VERSIONS))
def test_the_dispatchers_answer_goes_out_as_a_validated_call_tool_result_did(version: str) -> None:
    """runtime/server.py hands the dispatcher's plain answer to the SDK's runner, which validates
    a handler's dict into the version's CallToolResult (issue 24: a model built first was
    validated, dumped and validated again). Every kind of answer goes out as the model's did."""
    answers = [
        dispatcher._ok_result({"path": "a\udcff.txt", "entries": [{"size": 1, "type": "file"}], "n": None}),
        dispatcher._ok_result({"text": "ascii", "nested": {"list": [1, 2.5, True]}}),
        dispatcher._ok_result(ImageResult(b"\x89PNG....", "image/png", {"width": 1, "height": 1})),
        dispatcher._error_result(ToolError("not_found", "a.txt does not exist", path="a.txt")),
    ]
    for answer in answers:
        as_model = CallToolResult.model_validate(answer).model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
        assert serialize_server_result("tools/call", version, answer) == serialize_server_result(
            "tools/call", version, as_model
        )
