"""The runtime's `POST /browser/*` methods served for a test, for tests/runtime/test_browser_methods.py,
test_control_center.py, test_browser_inbox_move.py, test_browser_handoff.py (and the audit log
read by tests/extension/test_extension_bridge.py).

- `browser_api(base, config, via)`: a Herdr simulator thread on `base/herdr.sock` with `config`,
  the runtime served on loopback TCP and on a Unix socket (tests/support/push_harness.py), and a client
  over `via` ("tcp" or "unix"); yields `(sim, rt, client)`.
- `call(client, method, body)`: one `/browser/<method>` request, its status and JSON answer.
- `dispatch(rt, scope, target)`: a task dispatched to an agent through the real MCP endpoint,
  tagged with a browser scope (its outcome lands in that scope's inbox).
- `audited(config_dir, tool)`: the runtime's audit records of one tool.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2

from herdr_mcp.layout import Layout
from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.push_harness import ServedRuntime, push_runtime
from tests.support.runtime_harness import call_tool, mcp_client

TRANSPORTS = ["tcp", "unix"]


@contextlib.asynccontextmanager
async def browser_api(
    base: Path, config: SimConfig, via: str
) -> AsyncIterator[tuple[SimulatorThread, ServedRuntime, httpx2.AsyncClient]]:
    """The simulator, the runtime on it (state under `base/config`) and a client over `via`."""
    with SimulatorThread(config, base / "herdr.sock") as sim:
        async with (
            push_runtime(base / "herdr.sock", base / "config", base / "ipc" / "r.sock") as rt,
            rt.client(via) as client,
        ):
            yield sim, rt, client


async def call(client: httpx2.AsyncClient, method: str, body: Any) -> tuple[int, dict[str, Any]]:
    answer = await client.post(f"/browser/{method}", json=body)
    return answer.status_code, answer.json()


async def dispatch(rt: ServedRuntime, scope: str, target: str) -> dict[str, Any]:
    async with mcp_client(rt.tcp_base + "/mcp", rt.token) as session:
        result = await call_tool(
            session,
            "herdr_call",
            {
                "method": "herdr_mcp.agent.task.dispatch",
                "params": {"target": target, "text": "run the tests", "browser_session_ref": scope},
            },
        )
    assert "error" not in result, result
    return result


def audited(config_dir: Path, tool: str) -> list[dict[str, Any]]:
    path = Layout(config_dir).audit_file
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [record for line in lines if line.strip() and (record := json.loads(line)).get("tool") == tool]
