"""Copies of `state.db` for a major migration (update/major.py): SQLite's online backup.

`backup_database` copies a database that other processes may be writing with
`sqlite3.Connection.backup` (the online backup API): the copy is one consistent committed state,
written to a new 0600 file beside its final name and moved into place. `rows_beyond` counts,
per table, the rows of one database whose rowid is above the highest rowid of the same table in
another (what was added since a snapshot; changed older rows are not counted); `changes_since`
counts, per table, the rows added, changed and deleted between two databases of one schema.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

from herdr_mcp.state.store import BUSY_TIMEOUT_MS, StateError

#: Pages copied per step: small steps let the writers of the source go on between them.
BACKUP_PAGES = 4096


def backup_database(source: Path, destination: Path) -> None:
    """Copy `source` to `destination` (replaced atomically, 0600). Raises `StateError`."""
    destination.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    try:
        with contextlib.closing(sqlite3.connect(f"file:{quote(str(source))}?mode=ro", uri=True)) as src:
            src.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            with contextlib.closing(sqlite3.connect(partial)) as dst:
                src.backup(dst, pages=BACKUP_PAGES)
                dst.execute("PRAGMA journal_mode = WAL")
        with open(partial, "rb") as stream:
            os.fsync(stream.fileno())
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{destination}{suffix}")
        os.replace(partial, destination)
    except sqlite3.Error as exc:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        raise StateError(f"cannot copy {source} to {destination} ({exc})") from exc
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        raise


def _connect_ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)


def _rowid_tables(conn: sqlite3.Connection) -> dict[str, int]:
    """Each ordinary table with a rowid, and its highest rowid (0 when empty)."""
    found: dict[str, int] = {}
    for name in _rowid_tables_in(conn, "main"):
        quoted = '"' + name.replace('"', '""') + '"'
        try:
            # A table name from sqlite_master, quoted as an identifier: not user input.
            row = conn.execute(f"SELECT coalesce(max(rowid), 0) FROM {quoted}").fetchone()  # noqa: S608
        except sqlite3.OperationalError:
            continue
        found[name] = int(row[0])
    return found


def rows_beyond(newer: Path, snapshot: Path) -> dict[str, int]:
    """Per table of `newer`, how many rows have a rowid above `snapshot`'s highest (tables only
    `newer` has count every row); tables with none are left out."""
    with contextlib.closing(_connect_ro(snapshot)) as conn:
        before = _rowid_tables(conn)
    counts: dict[str, int] = {}
    with contextlib.closing(_connect_ro(newer)) as conn:
        for name in _rowid_tables(conn):
            quoted = '"' + name.replace('"', '""') + '"'
            (count,) = conn.execute(
                f"SELECT count(*) FROM {quoted} WHERE rowid > ?",  # noqa: S608 (an identifier, quoted)
                (before.get(name, 0),),
            ).fetchone()
            if count:
                counts[name] = int(count)
    return counts


def _columns(conn: sqlite3.Connection, schema: str, table: str) -> list[str]:
    quoted = '"' + table.replace('"', '""') + '"'
    return [str(row[1]) for row in conn.execute(f"PRAGMA {schema}.table_info({quoted})").fetchall()]


def changes_since(newer: Path, baseline: Path) -> dict[str, dict[str, int]]:
    """Per table, the rows of `newer` added, changed and deleted since `baseline` (rows matched by
    rowid, every column compared, NULLs equal); tables without a change are left out. A table only
    `newer` has counts all its rows as added; one whose columns differ counts its rows whose
    rowid is new as added and the rest of `newer`'s rows as changed."""
    counts: dict[str, dict[str, int]] = {}
    with contextlib.closing(_connect_ro(newer)) as conn:
        conn.execute("ATTACH DATABASE ? AS base", (f"file:{quote(str(baseline))}?mode=ro",))
        old_tables = set(_rowid_tables_in(conn, "base"))
        for name in _rowid_tables_in(conn, "main"):
            quoted = '"' + name.replace('"', '""') + '"'
            table = f"main.{quoted}"
            if name not in old_tables:
                (added,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()  # noqa: S608
                changed = deleted = 0
            else:
                old = f"base.{quoted}"
                # Identifiers from sqlite_master, quoted: not user input.
                new_rows = f"SELECT count(*) FROM {table} WHERE rowid NOT IN (SELECT rowid FROM {old})"  # noqa: S608
                gone_rows = f"SELECT count(*) FROM {old} WHERE rowid NOT IN (SELECT rowid FROM {table})"  # noqa: S608
                (added,) = conn.execute(new_rows).fetchone()
                (deleted,) = conn.execute(gone_rows).fetchone()
                if _columns(conn, "main", name) == _columns(conn, "base", name):
                    differ = f"SELECT rowid, * FROM {table} EXCEPT SELECT rowid, * FROM {old}"  # noqa: S608
                    (count,) = conn.execute(f"SELECT count(*) FROM ({differ})").fetchone()  # noqa: S608
                    changed = int(count) - int(added)
                else:
                    (total,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()  # noqa: S608
                    changed = int(total) - int(added)
            found = {"added": int(added), "changed": int(changed), "deleted": int(deleted)}
            if any(found.values()):
                counts[name] = {kind: count for kind, count in found.items() if count}
    return counts


def _rowid_tables_in(conn: sqlite3.Connection, schema: str) -> list[str]:
    """The ordinary tables with a rowid of one attached database."""
    names = []
    for name, sql in conn.execute(
        f"SELECT name, sql FROM {schema}.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"  # noqa: S608
    ).fetchall():
        text = str(sql or "").upper()
        if text.startswith("CREATE VIRTUAL") or "WITHOUT ROWID" in text:
            continue
        names.append(str(name))
    return names
