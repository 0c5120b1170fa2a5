"""Owners the structure promises, checked on the source so they stay so (issue 23, item 7).

- The `events` table of state.db has one owner, `state/event_log.py`: no other module has a
  statement on it (the push plane's agent transitions used to insert and select rows themselves,
  beside the feed's own log).
- The contract identity `{epoch, hash, tool_count}` is built from outside data in `contract/`
  only: no other module constructs a `ContractIdentity` from parsed fields.
- The command line lives in `cli/`: no other package holds a `cli` module, and the import
  contracts excuse none.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "herdr_mcp"
#: A SQL statement naming the events table (or its AUTOINCREMENT counter).
EVENTS_SQL = re.compile(
    r"\b(?:INSERT\s+(?:OR\s+\w+\s+)?INTO|FROM|UPDATE|DELETE\s+FROM|JOIN)\s+events\b|sqlite_sequence\s+WHERE\s+name\s*=\s*'events'",
    re.IGNORECASE,
)


def _sources() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts)


def _string_constants(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_the_pattern_finds_every_statement_on_the_events_table() -> None:
    for statement in (
        "INSERT INTO events (name) VALUES (?)",
        "SELECT MIN(seq) FROM events",
        "DELETE FROM events WHERE seq <= ?",
        "SELECT seq FROM sqlite_sequence WHERE name = 'events'",
    ):
        assert EVENTS_SQL.search(statement), statement
    assert not EVENTS_SQL.search("SELECT * FROM push_agents")
    assert not EVENTS_SQL.search('Route("/push/events")')


def test_only_the_event_log_touches_the_events_table() -> None:
    touching = {
        str(path.relative_to(PACKAGE))
        for path in _sources()
        if "migrations" not in path.parts and any(EVENTS_SQL.search(text) for text in _string_constants(path))
    }
    assert touching == {"state/event_log.py"}


def test_only_contract_builds_an_identity_from_fields() -> None:
    """`ContractIdentity(...)` is called in `contract/` only (readers call `parse_identity`)."""
    building = set()
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ContractIdentity":
                building.add(str(path.relative_to(PACKAGE)))
    assert building == {"contract/__init__.py"}


def test_the_command_line_is_in_cli_only() -> None:
    stray = [str(path.relative_to(PACKAGE)) for path in PACKAGE.glob("*/cli.py")]
    assert stray == []
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    assert [contract["name"] for contract in contracts if contract.get("ignore_imports")] == []
