"""MCP through the native host: the stateless 2026-07-28 protocol on the runtime's /mcp, with the
MCP headers a frame may carry (docs/browser-protocol.md section 4). The bridge in the extension
lists tools and calls them this way; a header off the allowlist, or headers on another path, are
refused by the host and never reach the runtime."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.native_host_harness import StubRuntime, native_host, short_config_dir, stub_runtime
from tests.support.runtime_harness import make_repo, running_runtime

PROTOCOL = "2026-07-28"


@pytest.fixture
def config() -> Iterator[Path]:
    with short_config_dir() as path:
        yield path


def _mcp(request_id: str, method: str, params: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "test-bridge", "version": "1"},
    }
    headers = {"MCP-Protocol-Version": PROTOCOL, "Mcp-Method": method}
    if name is not None:
        headers["Mcp-Name"] = name
    return {
        "id": request_id,
        "method": "POST",
        "path": "/mcp",
        "headers": headers,
        "body": {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}},
    }


@pytest.mark.slow
def test_stateless_tools_list_and_call_through_the_real_runtime(config: Path) -> None:
    repo = make_repo(config / "repo", {"README.md": b"# demo\n"})
    runtime_config = config / "config"
    with (
        SimulatorThread(SimConfig.for_roots([repo]), config / "herdr.sock"),
        running_runtime(config / "herdr.sock", runtime_config),
        native_host(runtime_config) as host,
    ):
        host.send(_mcp("list", "tools/list", {}))
        listed = host.message("list")
        assert listed["status"] == 200, listed
        tools = {tool["name"]: tool for tool in listed["body"]["result"]["tools"]}
        assert "herdr_inspect" in tools and "inputSchema" in tools["herdr_inspect"]
        host.send(_mcp("call", "tools/call", {"name": "herdr_inspect", "arguments": {}}, "herdr_inspect"))
        called = host.message("call")
        assert called["status"] == 200, called
        assert called["body"]["result"].get("isError") is not True, called
        # Without the protocol header the same call is the runtime's to refuse (a session is wanted).
        bare = _mcp("bare", "tools/list", {})
        del bare["headers"]
        host.send(bare)
        assert host.message("bare")["status"] != 200


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/mcp", {"Authorization": "Bearer x"}),
        ("/mcp", {"Mcp-Session-Id": "abc"}),
        ("/mcp", {"Host": "evil"}),
        ("/mcp", {"mcp-protocol-version": "2026-07-28\r\nX: y"}),
        ("/mcp", {"mcp-protocol-version": "a", "MCP-Protocol-Version": "b"}),
        ("/mcp", ["mcp-protocol-version"]),
        ("/browser/binding.get", {"mcp-protocol-version": "2026-07-28"}),
    ],
    ids=["authorization", "session", "host", "crlf", "twice", "not-object", "other-path"],
)
def test_headers_off_the_allowlist_are_refused_and_never_forwarded(
    config: Path, path: str, headers: Any
) -> None:
    with stub_runtime(config) as runtime, native_host(config) as host:
        host.send({"id": "r1", "method": "POST", "path": path, "body": {"scope": "x"}, "headers": headers})
        refused = host.message("r1")
        assert refused["error"]["code"] == "invalid_request", refused
        assert _seen(runtime) == []


def _seen(runtime: StubRuntime) -> list[Any]:
    return list(runtime.seen)
