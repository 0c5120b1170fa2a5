"""npm programs the tests and benchmarks run for real, installed on first use into the ignored
`.tools/` (or `$HERDR_MCP_TOOLS_DIR`), one directory per pinned package and version.

An install happens once per checkout: later runs find the program in place, so they need no
network. Concurrent first uses (pytest-xdist, a benchmark beside the tests) are serialised by an
flock on the package's directory.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS = Path(os.environ.get("HERDR_MCP_TOOLS_DIR", ROOT / ".tools"))

#: The MCP Inspector: v2 is the maintained line and its CLI takes `--header` (checked with
#: 2.12.0). Its package asks for Node >= 22.19; its CLI runs on the Node 20 Debian ships.
INSPECTOR = ("@modelcontextprotocol/inspector", "2.12.0", "mcp-inspector")
#: The reference filesystem server (the peer of the stdio benchmark).
FILESYSTEM_SERVER = ("@modelcontextprotocol/server-filesystem", "2026.8.31", "mcp-server-filesystem")
#: A first install downloads a few hundred packages.
INSTALL_TIMEOUT_S = 600


def npm_program(package: str, version: str, program: str) -> Path:
    """The path of `program` from npm's `package@version`, installing it on first use."""
    directory = TOOLS / "npm" / f"{package.replace('/', '+')}@{version}"
    executable = directory / "node_modules" / ".bin" / program
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not executable.exists():
            subprocess.run(
                [
                    "npm",
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--silent",
                    "--prefix",
                    str(directory),
                    f"{package}@{version}",
                ],
                check=True,
                timeout=INSTALL_TIMEOUT_S,
                stdout=subprocess.DEVNULL,
            )
    return executable
