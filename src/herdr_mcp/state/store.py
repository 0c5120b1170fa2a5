"""`state.db`: the runtime's one SQLite database, opened safely and migrated forward.

- The file lives in the config dir with mode 0600 (created so, never widened), in WAL mode with
  foreign keys on and a busy timeout, so several processes (the runtime, the CLI) can share it.
- The schema version lives in `meta(key='schema_version')`. Migrations are numbered, append-only
  and each runs in one `BEGIN IMMEDIATE` transaction together with the version bump, so a crash
  leaves the database at the previous version, never between two.
- Fail closed: a database whose version is newer than this code knows is refused with
  `StateSchemaTooNew` before anything is written to it (it is first read through a read-only
  connection, so the file stays byte-identical).

Connections are per thread (`sqlite3` objects must not cross threads); `transaction()` gives a
`BEGIN IMMEDIATE` block that commits on success and rolls back on any exception.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from herdr_mcp.state.migrations import MIGRATIONS, Migration

#: Milliseconds a writer waits for another writer before SQLite gives up with "database is locked".
BUSY_TIMEOUT_MS = 10_000
STATE_FILE_NAME = "state.db"


class StateError(Exception):
    """The state database cannot be used; `code` is stable, the message says what to do."""

    code = "state_unavailable"


class StateSchemaTooNew(StateError):
    code = "state_schema_too_new"


class StateFileUnsafe(StateError):
    code = "state_file_unsafe"


def _version_read_only(path: Path) -> int:
    """The schema version of an existing file, read without writing a byte to it."""
    uri = f"file:{path}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
            has_meta = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
            ).fetchone()
            if not has_meta:
                return 0
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.DatabaseError as exc:
        raise StateError(f"{path} is not a readable SQLite database ({exc}); move it aside") from exc
    return int(row[0]) if row else 0


def _create_private(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def _check_private(path: Path) -> None:
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise StateFileUnsafe(f"{path} is not a regular file; move it aside")
    if info.st_mode & 0o077:
        raise StateFileUnsafe(
            f"{path} is readable by other users (mode {stat.S_IMODE(info.st_mode):o}); chmod 600 it"
        )


class StateStore:
    """The opened, migrated `state.db`. Create with `StateStore.open(path)`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()

    @classmethod
    def open(cls, path: Path, *, migrations: tuple[Migration, ...] = MIGRATIONS) -> StateStore:
        """Open (creating if missing) and migrate `path` to the newest schema this code knows.

        Raises StateSchemaTooNew (nothing written), StateFileUnsafe, StateError.
        """
        if path.exists():
            _check_private(path)
            found = _version_read_only(path)
            if found > len(migrations):
                raise StateSchemaTooNew(
                    f"{path} has state schema {found} but this herdr-mcp knows only up to "
                    f"{len(migrations)}; run the newer herdr-mcp (or roll back to it) instead"
                )
        else:
            _create_private(path)
        store = cls(path)
        store._migrate(migrations)
        return store

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (autocommit; use `transaction()` for writes)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=True)
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            self._local.conn = conn
        return conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """`BEGIN IMMEDIATE` ... `COMMIT`, rolled back on any exception."""
        conn = self.connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def schema_version(self) -> int:
        row = self.connection().execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _migrate(self, migrations: tuple[Migration, ...]) -> None:
        conn = self.connection()
        conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT")
        for number, migration in enumerate(migrations, start=1):
            with self.transaction() as tx:
                current = tx.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                version = int(current[0]) if current else 0
                if version > len(migrations):
                    raise StateSchemaTooNew(
                        f"{self.path} was upgraded to schema {version} by a newer herdr-mcp meanwhile"
                    )
                if version >= number:
                    continue
                for statement in migration.statements:
                    tx.execute(statement)
                tx.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(number),),
                )
