"""`herdr-mcp stdio`: the epoch-5 contract over stdin/stdout, driven for real.

The SDK's client launches the real command (as Claude Desktop, Cursor or Codex would); the raw
tests write JSON-RPC lines to its stdin and read its stdout, for what a well-behaved client never
sends (bad JSON, unknown methods, cancellations, overlong lines) and for what must never reach
stdout.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import sqlite3
import struct
import subprocess
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from herdr_mcp import __version__
from herdr_mcp.contract import contract_identity
from herdr_mcp.runtime.stdio import MAX_MESSAGE_BYTES
from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.revision_clients import REVISIONS, Wire, check_list_and_call, negotiated, session_at
from tests.support.runtime_harness import make_repo, mcp_client, running_runtime
from tests.support.stdio_harness import DEADLINE_S, RawStdio, stdio_command


def _params(repo: Path, config_dir: Path) -> StdioServerParameters:
    command = stdio_command(repo, config_dir)
    return StdioServerParameters(command=command[0], args=command[1:])


def contract_hash(tools: list[dict[str, Any]]) -> str:
    """The contract identity's hash of a tools/list answer (JCS of the tools sorted by name)."""
    ordered = sorted(tools, key=lambda tool: str(tool["name"]))
    return "sha256:" + hashlib.sha256(rfc8785.dumps(ordered)).hexdigest()


def _wire_tools(result: Any) -> list[dict[str, Any]]:
    return [tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in result.tools]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"README.md": b"# demo\n", "four.txt": b"0123456789abcde\n" * 256})


@pytest.fixture
def raw(repo: Path, tmp_path: Path) -> Iterator[RawStdio]:
    stdio = RawStdio(stdio_command(repo, tmp_path / "config"))
    try:
        yield stdio
    finally:
        stdio.stop()


def test_tools_list_over_stdio_has_the_http_runtimes_contract_identity(repo: Path, tmp_path: Path) -> None:
    """Both at 2026-07-28 (the SDK client's default finds it on both): the same tools and the
    same server/discover answer (versions, capabilities, instructions, identity, cache hints)."""

    def discovered(client: Client) -> dict[str, Any]:
        result = client.session.discover_result
        assert result is not None, "the client fell back to initialize"
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def both() -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp_path / "herdr.sock"),
            running_runtime(tmp_path / "herdr.sock", tmp_path / "http-config") as runtime,
        ):
            async with mcp_client(runtime.url, runtime.token) as http:
                over_http = _wire_tools(await http.list_tools())
                http_discover = discovered(http)
        async with Client(_params(repo, tmp_path / "config")) as stdio:
            over_stdio = _wire_tools(await stdio.list_tools())
            stdio_discover = discovered(stdio)
        return over_http, over_stdio, http_discover, stdio_discover

    over_http, over_stdio, http_discover, stdio_discover = asyncio.run(both())
    identity = contract_identity()
    assert len(over_stdio) == identity.tool_count == 18
    assert contract_hash(over_stdio) == contract_hash(over_http) == identity.hash
    assert stdio_discover == http_discover
    assert stdio_discover["supportedVersions"] == ["2026-07-28"]


def test_sdk_client_initializes_lists_and_calls(repo: Path, tmp_path: Path) -> None:
    async def session() -> None:
        async with Client(_params(repo, tmp_path / "config")) as client:
            assert client.server_info is not None and client.server_info.name == "herdr-mcp"
            assert client.instructions and "herdr_inspect" in client.instructions
            # The SDK client probes server/discover first; answered, it speaks 2026-07-28.
            assert client.protocol_version == "2026-07-28"
            read = await client.call_tool("herdr_fs_read", {"path": str(repo / "four.txt")})
            assert not read.is_error and read.structured_content is not None
            assert read.structured_content["content"] == "0123456789abcde\n" * 256
            unknown = await client.call_tool("herdr_nope", {})
            assert unknown.is_error and unknown.structured_content == {
                "error": {"code": "unknown_tool", "message": unknown.structured_content["error"]["message"]}
            }
            invalid = await client.call_tool("herdr_fs_read", {"path": 7})
            assert invalid.is_error and invalid.structured_content is not None
            assert invalid.structured_content["error"]["code"] == "invalid_arguments"
            secret = await client.call_tool(
                "herdr_fs_write", {"path": str(repo / ".env"), "content": "X=1\n"}
            )
            assert secret.is_error and secret.structured_content is not None
            assert secret.structured_content["error"]["code"] == "secret_path"
            # Calls run concurrently and each gets its own answer.
            reads = await asyncio.gather(
                *(client.call_tool("herdr_fs_read", {"path": str(repo / "README.md")}) for _ in range(8))
            )
            assert all(r.structured_content and r.structured_content["content"] == "# demo\n" for r in reads)

    asyncio.run(session())
    # The same state and audit log as the HTTP runtime: one record per call, no session id.
    records = [json.loads(line) for line in (tmp_path / "config" / "audit.jsonl").read_text().splitlines()]
    assert [record["outcome"] for record in records[:4]] == [
        "ok",
        "unknown_tool",
        "invalid_arguments",
        "secret_path",
    ]
    assert all(record["session"] is None for record in records)


def _png(size: int) -> bytes:
    """A valid PNG header (1x1) followed by `size` bytes of an ancillary chunk, so the file is big."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
    pixels = chunk(b"IDAT", zlib.compress(b"\x00\x00"))
    return b"\x89PNG\r\n\x1a\n" + header + chunk(b"zzZz", os.urandom(size)) + pixels + chunk(b"IEND", b"")


def test_large_answers_and_arguments_cross_the_pipes_whole(repo: Path, tmp_path: Path) -> None:
    image = _png(6 * 1024 * 1024)
    (repo / "big.png").write_bytes(image)
    content = "é" * (1024 * 1024)  # 2 MiB of UTF-8 in one argument

    async def session() -> None:
        async with Client(_params(repo, tmp_path / "config")) as client:
            answer = await client.call_tool(
                "herdr_fs_image", {"path": str(repo / "big.png"), "max_bytes": 10485760}
            )
            assert not answer.is_error, answer.content
            assert answer.content[0].type == "image"
            import base64

            assert base64.b64decode(answer.content[0].data) == image
            wrote = await client.call_tool(
                "herdr_fs_write", {"path": str(repo / "wide.txt"), "content": content}
            )
            assert not wrote.is_error, wrote.content

    asyncio.run(session())
    assert (repo / "wide.txt").read_text(encoding="utf-8") == content


def test_protocol_errors_get_json_rpc_answers_and_the_session_goes_on(raw: RawStdio) -> None:
    raw.initialize()
    raw.send_raw(b"this is not json\n")
    assert raw.receive() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": raw_message(raw)},
    }
    assert raw.request(1, "resources/list")["error"]["code"] == -32601
    # A 2026-07-28 client's probe is answered, after a handshake as before one.
    discovered = raw.request(2, "server/discover", {"_meta": ENVELOPE})
    assert discovered["result"]["supportedVersions"] == ["2026-07-28"], discovered
    raw.send([{"jsonrpc": "2.0", "id": 3, "method": "ping"}])
    batch = raw.receive()
    assert batch["id"] is None and batch["error"]["code"] == -32600
    bad_call = raw.request(4, "tools/call", {"arguments": {}})
    assert bad_call["id"] == 4 and bad_call["error"]["code"] == -32602
    assert raw.request(5, "ping") == {"jsonrpc": "2.0", "id": 5, "result": {}}
    # A client's response (we send no requests) and unknown notifications need no answer.
    raw.send({"jsonrpc": "2.0", "id": 99, "result": {}})
    raw.send({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
    tools = raw.request("six", "tools/list")  # type: ignore[arg-type]
    assert tools["id"] == "six" and len(tools["result"]["tools"]) == 18


#: The `_meta` of a 2026-07-28 request (basic/index.mdx, "Per-request protocol fields").
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
}


def test_2026_07_28_requests_are_checked_and_answered_next_to_the_handshake(
    raw: RawStdio, repo: Path
) -> None:
    """No initialize first: each request carries its revision. Then the handshake on the same
    process, and both eras answered side by side (each request by its own envelope)."""
    discovered = raw.request(1, "server/discover", {"_meta": ENVELOPE})["result"]
    assert discovered["supportedVersions"] == ["2026-07-28"]
    assert discovered["resultType"] == "complete"
    assert discovered["capabilities"] == {"tools": {"listChanged": False}}
    assert discovered["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "herdr-mcp"
    assert "herdr_inspect" in discovered["instructions"]
    tools = raw.request(2, "tools/list", {"_meta": ENVELOPE})["result"]
    assert len(tools["tools"]) == 18 and tools["resultType"] == "complete"
    assert tools["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "herdr-mcp"
    read = raw.request(
        3,
        "tools/call",
        {"name": "herdr_fs_read", "arguments": {"path": str(repo / "README.md")}, "_meta": ENVELOPE},
    )["result"]
    assert read["structuredContent"]["content"] == "# demo\n" and read["resultType"] == "complete"
    assert read["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "herdr-mcp"
    # The envelope's required pair: without capabilities the request is malformed (-32602).
    half = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    malformed = raw.request(4, "tools/list", {"_meta": half})["error"]
    assert malformed["code"] == -32602 and "clientCapabilities" in malformed["message"]
    # A revision not served: -32022 naming every one that is, both eras, and the one asked.
    future = {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    unsupported = raw.request(5, "tools/list", {"_meta": future})["error"]
    assert unsupported["code"] == -32022
    assert unsupported["data"] == {
        "supported": ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"],
        "requested": "2099-01-01",
    }
    # ping left MCP in 2026-07-28; server/discover without the envelope is no 2026 request.
    assert raw.request(6, "ping", {"_meta": ENVELOPE})["error"]["code"] == -32601
    assert raw.request(7, "server/discover")["error"]["code"] == -32601
    raw.initialize()
    assert raw.request(8, "ping") == {"jsonrpc": "2.0", "id": 8, "result": {}}
    handshake_tools = raw.request(9, "tools/list")["result"]
    assert "_meta" not in handshake_tools and len(handshake_tools["tools"]) == 18
    assert raw.request(10, "tools/list", {"_meta": ENVELOPE})["result"]["_meta"]


@pytest.mark.parametrize("revision", REVISIONS)
def test_the_sdk_client_held_to_each_revision_lists_and_calls(
    repo: Path, tmp_path: Path, revision: str
) -> None:
    """The SDK's stdio client launching `herdr-mcp stdio`, held to one revision: what it sent
    shows no fallback (2026-07-28 pinned sends neither server/discover nor initialize; the
    default probe gets its DiscoverResult; the handshake revisions initialize at theirs)."""
    wire = Wire()

    async def session() -> tuple[str | None, Any, Any]:
        transport = stdio_client(_params(repo, tmp_path / "config"))
        async with session_at(transport, revision, wire) as client:
            tools = await client.list_tools()
            read = await client.call_tool("herdr_fs_read", {"path": str(repo / "README.md")})
            return client.protocol_version, tools, read

    version, tools, read = asyncio.run(session())
    methods = wire.methods()
    print(f"\nstdio {revision}: protocol {version}; sent {methods}; errors {wire.errors()}")
    assert version == negotiated(revision)
    check_list_and_call(wire, revision)
    assert contract_hash(_wire_tools(tools)) == contract_identity().hash
    assert not read.is_error and read.structured_content["content"] == "# demo\n"
    stamp = {"name": "herdr-mcp", "version": __version__}
    for answer in wire.received:
        meta = answer["result"].get("_meta", {})
        if version == "2026-07-28":
            assert answer["result"]["resultType"] == "complete"
            assert meta["io.modelcontextprotocol/serverInfo"] == stamp
        else:
            assert "io.modelcontextprotocol/serverInfo" not in meta
    for request in wire.sent:
        sent_meta = request.get("params", {}).get("_meta", {})
        assert sent_meta.get("io.modelcontextprotocol/protocolVersion") == (
            "2026-07-28" if version == "2026-07-28" else None
        ), request


def raw_message(raw: RawStdio) -> Any:
    """Match any message text (the parser's words are not ours to fix)."""
    return _Anything()


class _Anything:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and bool(other)


def test_an_overlong_line_is_refused_and_the_next_one_answered(raw: RawStdio) -> None:
    raw.initialize()
    raw.send_raw(
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"'
        + b"x" * (MAX_MESSAGE_BYTES + 10)
        + b'"}}\n'
    )
    refused = raw.receive()
    assert refused["id"] is None and refused["error"]["code"] == -32600
    assert str(MAX_MESSAGE_BYTES) in refused["error"]["message"]
    assert raw.request(2, "ping")["result"] == {}


def test_a_cancelled_call_is_not_answered(raw: RawStdio, repo: Path) -> None:
    raw.initialize()
    command = "echo started; sleep 30"
    raw.send(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {
                "name": "herdr_exec",
                "arguments": {"workspace": "w1", "command": command, "timeout_ms": 40000},
            },
        }
    )
    # Once the call is running (the audit log has not recorded it yet), cancel it.
    raw.send(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "test"}}
    )
    assert raw.request(8, "ping") == {"jsonrpc": "2.0", "id": 8, "result": {}}
    raw.close_stdin()
    assert all(message.get("id") != 7 for message in raw.rest())
    assert raw.wait() == 0


def test_stdout_carries_only_json_rpc_even_when_children_write_to_our_fds(raw: RawStdio) -> None:
    raw.initialize()
    # The exec shell's parent is the runtime: writing to the runtime's fd 1 and reading its fd 0
    # must reach neither the wire nor the requests.
    command = "echo leaked-to-fd1 > /proc/$PPID/fd/1; cat /proc/$PPID/fd/0; echo done"
    answer = raw.request(
        1, "tools/call", {"name": "herdr_exec", "arguments": {"workspace": "w1", "command": command}}
    )
    result = answer["result"]["structuredContent"]
    assert result["stdout"] == "done\n", result
    assert raw.request(2, "ping")["result"] == {}
    raw.close_stdin()
    assert raw.rest() == []
    assert raw.wait() == 0
    assert b"leaked-to-fd1" in raw.stderr


def test_closing_stdin_answers_the_calls_in_flight_then_exits_zero(raw: RawStdio) -> None:
    raw.initialize()
    raw.send(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "herdr_exec",
                "arguments": {"workspace": "w1", "command": "sleep 0.5; echo late"},
            },
        }
    )
    raw.close_stdin()
    (answer,) = raw.rest()
    assert answer["id"] == 1 and answer["result"]["structuredContent"]["stdout"] == "late\n"
    assert raw.wait() == 0


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_ends_a_long_call_with_an_answer_and_exits_zero(raw: RawStdio, signum: int) -> None:
    raw.initialize()
    raw.send(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "herdr_exec",
                "arguments": {"workspace": "w1", "command": "echo begun; sleep 50", "timeout_ms": 60000},
            },
        }
    )
    # The call has been read (requests are read in order) before the signal.
    assert raw.request(2, "ping")["result"] == {}
    started = time.monotonic()
    raw.process.send_signal(signum)
    (answer,) = raw.rest()
    assert answer["id"] == 1 and "result" in answer, answer
    assert raw.wait() == 0
    assert time.monotonic() - started < 10


def test_a_start_failure_is_one_json_error_under_json_and_nothing_else_on_stdout(
    repo: Path, tmp_path: Path
) -> None:
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    with sqlite3.connect(config_dir / "state.db") as db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('schema_version', '9999')")
    (config_dir / "state.db").chmod(0o600)
    for as_json in (True, False):
        done = subprocess.run(
            [*stdio_command(repo, config_dir), *(["--json"] if as_json else [])],
            input=b"",
            capture_output=True,
            timeout=DEADLINE_S,
        )
        assert done.returncode == 4, done  # a state error is a local fault
        if as_json:
            assert json.loads(done.stdout)["error"]["code"] == "state_schema_too_new"
        else:
            assert done.stdout == b""
            assert b"state_schema_too_new" in done.stderr


def test_requests_from_a_file_and_answers_to_a_file(repo: Path, tmp_path: Path) -> None:
    """epoll refuses regular files and /dev/null: they are read by a thread, written directly."""
    requests = tmp_path / "requests.jsonl"
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "herdr_fs_read", "arguments": {"path": str(repo / "README.md")}},
        },
    ]
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    answers = tmp_path / "answers.jsonl"
    with requests.open("rb") as stdin, answers.open("wb") as stdout:
        done = subprocess.run(
            stdio_command(repo, tmp_path / "config"), stdin=stdin, stdout=stdout, timeout=DEADLINE_S
        )
    assert done.returncode == 0
    ping, read = (json.loads(line) for line in answers.read_text().splitlines())
    assert ping == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert read["id"] == 2 and read["result"]["structuredContent"]["content"] == "# demo\n"
    with open(os.devnull, "rb") as null:
        quiet = subprocess.run(
            stdio_command(repo, tmp_path / "config"), stdin=null, capture_output=True, timeout=DEADLINE_S
        )
    assert quiet.returncode == 0 and quiet.stdout == b""
    assert b"Traceback" not in quiet.stderr
