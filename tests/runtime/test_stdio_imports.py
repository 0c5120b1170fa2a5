"""What a `herdr-mcp stdio` process imports over a whole session: nothing of the HTTP stack, the
`mcp` SDK, its models or pydantic (issue 24: they were 445 ms of a 590 ms start).

The process runs under `python -X importtime`, which writes one stderr line per module as it is
first imported, so its stderr after exit lists every module the process ever loaded: at start,
for the handshake, in the worker thread that composes the runtime, for tool calls, at shutdown.
No hook in the product is needed and nothing is sampled. The embedded simulator (`--sim`) runs in
the process too, as the other stdio tests run it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.runtime_harness import make_repo
from tests.support.stdio_harness import RawStdio

#: The `_meta` of a 2026-07-28 request.
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
#: Top-level packages the stdio path must never load.
FORBIDDEN = {
    "mcp",
    "mcp_types",
    "pydantic",
    "pydantic_core",
    "starlette",
    "uvicorn",
    "httpx",
    "httpx2",
    "httpcore",
    "anyio",
    "sse_starlette",
    "h11",
    "httptools",
}


def _imported(stderr: bytes) -> set[str]:
    modules = set()
    for line in stderr.decode("utf-8", errors="replace").splitlines():
        if line.startswith("import time:") and "|" in line and "self [us]" not in line:
            modules.add(line.rsplit("|", 1)[1].strip())
    return modules


def test_a_whole_stdio_session_imports_nothing_of_the_http_stack_or_the_sdk(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": b"# demo\n"})
    raw = RawStdio(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "herdr_mcp",
            "stdio",
            "--sim",
            "--sim-root",
            str(repo),
            "--config-dir",
            str(tmp_path / "config"),
        ]
    )
    try:
        raw.initialize()
        assert len(raw.request(1, "tools/list")["result"]["tools"]) == 18
        read = raw.request(
            2, "tools/call", {"name": "herdr_fs_read", "arguments": {"path": str(repo / "README.md")}}
        )
        assert read["result"]["structuredContent"]["content"] == "# demo\n"
        assert raw.request(3, "tools/list", {"_meta": ENVELOPE})["result"]["_meta"]
        assert raw.request(4, "server/discover", {"_meta": ENVELOPE})["result"]["supportedVersions"]
        inspected = raw.request(5, "tools/call", {"name": "herdr_inspect", "arguments": {}})
        assert not inspected["result"]["isError"], inspected
        raw.close_stdin()
        assert raw.rest() == []
        assert raw.wait() == 0
    finally:
        raw.stop()
    modules = _imported(raw.stderr)
    # The list is real: the process's own modules and the tools' are in it.
    assert {"herdr_mcp.runtime.stdio", "herdr_mcp.runtime.dispatcher", "herdr_mcp.sim"} <= modules
    assert sorted(m for m in modules if m.split(".")[0] in FORBIDDEN) == []
