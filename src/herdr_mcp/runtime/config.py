"""Where the runtime keeps its files and what it is allowed to do.

The config dir holds the local bearer token (`token`, 0600) and, later, `state.db`. It is
`$HERDR_MCP_CONFIG_DIR` when set, else the platform's user config dir for "herdr-mcp"
(`~/.config/herdr-mcp` on Linux). Nothing here is a secret except the token file's content.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

DEFAULT_PORT = 8772
#: Only loopback: the runtime is reached through the link or the native host, never directly.
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


def default_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """`$HERDR_MCP_CONFIG_DIR`, else the user config dir for herdr-mcp."""
    env = os.environ if env is None else env
    override = env.get("HERDR_MCP_CONFIG_DIR")
    if override:
        return Path(override)
    return Path(platformdirs.user_config_dir("herdr-mcp", appauthor=False))


@dataclass(frozen=True)
class RuntimeConfig:
    """Everything `herdr-mcp serve` was told at start-up; frozen for the process lifetime."""

    config_dir: Path
    herdr_socket: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    read_only: bool = False
    write_roots: tuple[Path, ...] | None = None
    home: Path = field(default_factory=Path.home)

    @property
    def token_file(self) -> Path:
        return self.config_dir / "token"

    @property
    def spool_dir(self) -> Path:
        return self.config_dir / "exec"
