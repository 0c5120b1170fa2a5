"""Where an update keeps its files (`UpdatePaths`), apart from the steps that use them, so that
apply.py and housekeeping.py both read it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from herdr_mcp.generations.control import GenerationStore
from herdr_mcp.generations.process import runtimes_dir
from herdr_mcp.layout import Layout


@dataclass(frozen=True)
class UpdatePaths:
    """Where an update keeps its files, all under the config dir (`layout.py`)."""

    config_dir: Path

    @property
    def generations(self) -> GenerationStore:
        return GenerationStore.in_dir(Layout(self.config_dir).generations_dir)

    @property
    def runtimes(self) -> Path:
        return runtimes_dir(self.config_dir)

    @property
    def jobs(self) -> Path:
        return Layout(self.config_dir).update_dir / "jobs"

    @property
    def lock(self) -> Path:
        return Layout(self.config_dir).update_dir / "update.lock"

    @property
    def highest_seen(self) -> Path:
        return Layout(self.config_dir).highest_seen_file
