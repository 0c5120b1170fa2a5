"""`herdr-mcp stdio` as a subprocess with our own hands on its pipes (tests/runtime/test_stdio.py,
tests/runtime/test_parse_bounds.py): the command line of an embedded-simulator stdio server, and RawStdio,
newline-delimited JSON-RPC in and out."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

#: Generous: a loaded 2-core machine starts a Python runtime in well under this.
DEADLINE_S = 60.0
HERDR_MCP = Path(sys.executable).with_name("herdr-mcp")


def stdio_command(repo: Path, config_dir: Path, *extra: str) -> list[str]:
    return [
        str(HERDR_MCP),
        "stdio",
        "--sim",
        "--sim-root",
        str(repo),
        "--config-dir",
        str(config_dir),
        *extra,
    ]


class RawStdio:
    """`herdr-mcp stdio` with our own hands on its pipes: lines in, lines out."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stderr = b""
        self._threads = [
            threading.Thread(target=self._pump, daemon=True),
            threading.Thread(target=self._drain_stderr, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr += line

    def send(self, message: Any) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def send_raw(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def receive(self) -> dict[str, Any]:
        """The next line on stdout, which must be one JSON-RPC message."""
        line = self.lines.get(timeout=DEADLINE_S)
        assert line is not None, f"stdout ended; stderr: {self.stderr.decode(errors='replace')}"
        message = json.loads(line)
        assert isinstance(message, dict) and message["jsonrpc"] == "2.0", line
        return message

    def request(self, request_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.send(
            {"jsonrpc": "2.0", "id": request_id, "method": method, **({"params": params} if params else {})}
        )
        return self.receive()

    def initialize(self) -> None:
        answer = self.request(
            0,
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        )
        assert answer["result"]["protocolVersion"] == "2025-06-18", answer
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def close_stdin(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    def rest(self) -> list[dict[str, Any]]:
        """Every message until stdout ends (the process closed it)."""
        messages = []
        while (line := self.lines.get(timeout=DEADLINE_S)) is not None:
            messages.append(json.loads(line))
        return messages

    def wait(self) -> int:
        return self.process.wait(timeout=DEADLINE_S)

    def stop(self) -> None:
        """Kill the process if it still runs and close our ends of its pipes."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=DEADLINE_S)
        for thread in self._threads:
            thread.join(timeout=DEADLINE_S)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None and not stream.closed:
                stream.close()
