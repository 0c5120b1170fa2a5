"""Text through the runtime's answers and the journal (docs/runtime.md "Text"): a file literally named
with byte 0xff in a managed root is listed, read and grepped (shown `\\xff` with `path_escaped`,
and named back the same way), Git and exec show such bytes as text, and a turn holding a lone
surrogate is appended and read back as U+FFFD, both through the native host (as the extension
sends it) and straight to the runtime (which must not rely on the host having cleaned it). The push
stream through the host stays open throughout.

Before the fix: fs_list/fs_grep answered `internal_error`, the host died on the turn's frame, and
the runtime answered a bare HTTP 500 to the same body sent to it directly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from herdr_mcp.sim import SimConfig, SimulatorThread
from herdr_mcp.text import parse_name, show_name
from tests.support.native_host_harness import HostProcess, native_host, short_config_dir
from tests.support.runtime_harness import make_repo, running_runtime

PROTOCOL = "2026-07-28"
FFFD = "\ufffd"
SCOPE = "chatgpt:conv:text-1"


@pytest.fixture
def config() -> Iterator[Path]:
    with short_config_dir() as path:
        yield path


def _tool(host: HostProcess, request_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One stateless tools/call through the host; the result's structured content."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "text-test", "version": "1"},
    }
    host.send(
        {
            "id": request_id,
            "method": "POST",
            "path": "/mcp",
            "headers": {"MCP-Protocol-Version": PROTOCOL, "Mcp-Method": "tools/call", "Mcp-Name": name},
            "body": {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": name, "arguments": arguments, "_meta": meta},
            },
        }
    )
    reply = host.message(request_id)
    assert reply["status"] == 200, reply
    result = reply["body"]["result"]
    structured: dict[str, Any] = result["structuredContent"]
    # The text content is the same answer, as JSON text.
    assert json.loads(result["content"][-1]["text"]) == structured
    return structured


def _browser_raw(host: HostProcess, request_id: str, method: str, body: str) -> dict[str, Any]:
    """A /browser frame whose body is written by hand (it may spell lone surrogates)."""
    frame = f'{{"id": "{request_id}", "method": "POST", "path": "/browser/{method}", "body": {body}}}'
    host.send_raw(frame.encode("utf-8"))
    return host.message(request_id)


@pytest.mark.timeout(90)
def test_odd_names_and_text_through_the_runtime_and_the_journal(config: Path) -> None:
    repo = make_repo(config / "repo", {"README.md": b"# demo\n"})
    # The names as the file system has them: bytes 0xff and 0xfe, not UTF-8.
    (repo / os.fsdecode(b"caf\xff.txt")).write_bytes(b"needle one\n")
    (repo / os.fsdecode(b"dir\xfe")).mkdir()
    (repo / os.fsdecode(b"dir\xfe") / "inner.txt").write_bytes(b"needle two\n")
    runtime_config = config / "config"
    with (
        SimulatorThread(SimConfig.for_roots([repo]), config / "herdr.sock"),
        running_runtime(config / "herdr.sock", runtime_config) as runtime,
        native_host(runtime_config) as host,
    ):
        host.send(
            {"id": "s1", "method": "GET", "path": "/push/events", "query": {"after": "0"}, "stream": True}
        )
        assert host.message("s1")["event"] == "hello"

        # -- fs: listed, read, grepped, and named back by what was shown -------------------------
        listing = _tool(host, "list", "herdr_fs_list", {"path": str(repo), "recursive": True})
        entries = {entry["path"]: entry for entry in listing["entries"]}
        assert entries["caf\\xff.txt"]["path_escaped"] is True
        assert entries["dir\\xfe/inner.txt"]["path_escaped"] is True
        assert "path_escaped" not in entries["README.md"]
        read = _tool(host, "read", "herdr_fs_read", {"path": f"{repo}/caf\\xff.txt"})
        assert (read["content"], read["path"], read["path_escaped"]) == (
            "needle one\n",
            f"{repo}/caf\\xff.txt",
            True,
        )
        relative = _tool(host, "read2", "herdr_fs_read", {"path": "dir\\xfe/inner.txt"})
        assert relative["content"] == "needle two\n"
        grep = _tool(host, "grep", "herdr_fs_grep", {"root": str(repo), "pattern": "needle"})
        assert [(m["path"], m["text"], m.get("path_escaped")) for m in grep["matches"]] == [
            ("caf\\xff.txt", "needle one", True),
            ("dir\\xfe/inner.txt", "needle two", True),
        ]
        # A refusal naming such a path encodes too (and says which file).
        missing = _tool(host, "missing", "herdr_fs_read", {"path": f"{repo}/gone\\xff"})
        assert missing["error"]["code"] == "not_found" and "gone\\xff" in missing["error"]["message"]

        # -- git and exec: bytes that are not UTF-8 arrive as text --------------------------------
        status = _tool(host, "git", "herdr_git", {"root": str(repo), "action": "status"})
        files = {entry["path"]: entry for entry in status["files"]}
        assert files["caf\\xff.txt"]["path_escaped"] is True, status
        assert files["dir\\xfe/"]["path_escaped"] is True, status
        ran = _tool(
            host,
            "exec",
            "herdr_exec",
            {"workspace": "w1", "command": "printf 'a\\377b'; ls", "intent": "read_only"},
        )
        assert f"a{FFFD}b" in json.dumps(ran, ensure_ascii=False), ran

        # -- the journal: a lone surrogate appended through the host and read back ----------------
        bound = _browser_raw(host, "bind", "binding.set", json.dumps({"scope": SCOPE, "workspace_id": "w1"}))
        assert bound["status"] == 200, bound
        turn = (
            '{"scope": "' + SCOPE + '", "conversation_id": "text-1", "turn_key": "k1", "role": "user", '
            '"text": "cut through an emoji \\ud83d", "title": "tab \\ude00"}'
        )
        appended = _browser_raw(host, "append", "turn.append", turn)
        assert appended["status"] == 200, appended
        # The same body again is the same turn (the text was stored as U+FFFD, not refused).
        assert _browser_raw(host, "again", "turn.append", turn)["body"]["idempotent_replay"] is True

        # -- straight to the runtime: its own rule, not the host's --------------------------------
        direct = (
            '{"scope": "' + SCOPE + '", "conversation_id": "text-1", "turn_key": "k2", "role": "assistant", '
            '"text": "low \\udcff and \\udbff high"}'
        ).encode()
        with httpx2.Client(base_url=runtime.url.removesuffix("/mcp"), timeout=30) as http:
            headers = {"Authorization": f"Bearer {runtime.token}", "Content-Type": "application/json"}
            answer = http.post("/browser/turn.append", content=direct, headers=headers)
            assert answer.status_code == 200, answer.text
            deep = http.post("/browser/turn.append", content=b"[" * 100_000, headers=headers)
            assert (deep.status_code, deep.json()["error"]["code"]) == (400, "json_too_deep")

        resolved = _browser_raw(
            host,
            "resolve",
            "turn.resolve",
            json.dumps({"scope": SCOPE, "site": "chatgpt", "conversation_id": "text-1"}),
        )
        assert resolved["status"] == 200, resolved
        context = resolved["body"]["context"]
        assert [t["text"] for t in context["recent_turns"]] == [
            f"cut through an emoji {FFFD}",
            f"low {FFFD} and {FFFD} high",
        ]
        assert context["title"] == f"tab {FFFD}"

        # The stream is still open and the host still serves.
        host.send({"id": "s1", "cancel": True})
        assert host.message("s1") == {"id": "s1", "end": True}
        assert host.process.poll() is None

    # The audit log holds the calls, and every line is text a reader can print.
    for line in (runtime_config / "audit.jsonl").read_text(encoding="ascii").splitlines():
        record = json.loads(line)
        json.dumps(record, ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize(
    "name",
    [b"caf\xff.txt", b"a\\xff", b"\\\xff", b"\\x\xff", b"plain", "é\\x5c".encode(), b"\xed\xa0\x80"],
)
def test_a_shown_name_names_the_same_bytes(name: bytes) -> None:
    shown, escaped = show_name(os.fsdecode(name))
    shown.encode("utf-8")
    assert os.fsencode(parse_name(shown)) == name
    assert escaped == (shown != os.fsdecode(name))
