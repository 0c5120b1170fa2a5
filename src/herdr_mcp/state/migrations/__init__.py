"""The numbered, append-only migrations of `state.db`.

Migration N brings the schema from N-1 to N. Never edit or reorder a migration that has shipped:
add a new one. `STATE_SCHEMA` (what manifests call `state_schema`) is the number of migrations.
Each migration is a tuple of single SQL statements run in one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    name: str
    statements: tuple[str, ...]


def _load() -> tuple[Migration, ...]:
    from herdr_mcp.state.migrations import m0001_core, m0002_tasks, m0003_continuity, m0004_browser

    return (m0001_core.MIGRATION, m0002_tasks.MIGRATION, m0003_continuity.MIGRATION, m0004_browser.MIGRATION)


MIGRATIONS: tuple[Migration, ...] = _load()
