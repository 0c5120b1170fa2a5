"""Where the runtime keeps its files and what it is allowed to do.

The config dir holds the local bearer token (`token`, 0600), `state.db` and the audit log; where
it is and the name of every file in it are `layout.py`. Nothing here is a secret except the
token file's content.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from herdr_mcp.layout import DEFAULT_PORT, Layout
from herdr_mcp.runtime.push.settings import PushSettings


@dataclass(frozen=True)
class RuntimeConfig:
    """Everything `herdr-mcp serve` was told at start-up; frozen for the process lifetime."""

    config_dir: Path
    herdr_socket: Path
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    read_only: bool = False
    write_roots: tuple[Path, ...] | None = None
    #: Classes of Herdr methods herdr_call refuses by default but may run (runtime/native.py).
    allow_herdr_classes: frozenset[str] = frozenset()
    home: Path = field(default_factory=Path.home)
    #: The push plane's timing and bounds (docs/browser-protocol.md; tests shorten them).
    push: PushSettings = field(default_factory=PushSettings)
    #: `--state-db`: another state database than the config dir's (a generation's own state
    #: location, docs/updater.md "Major migrations"); None: `<config dir>/state.db`.
    state_db: Path | None = None

    @property
    def state_file(self) -> Path:
        return self.state_db if self.state_db is not None else Layout(self.config_dir).state_file

    @property
    def token_file(self) -> Path:
        return Layout(self.config_dir).token_file

    @property
    def spool_dir(self) -> Path:
        return Layout(self.config_dir).exec_spool_dir
