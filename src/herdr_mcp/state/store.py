"""`state.db`: the runtime's one SQLite database, opened safely and migrated forward.

- The file lives in the config dir with mode 0600 (created so, never widened), in WAL mode with
  foreign keys on and a busy timeout, so several processes (the runtime, the CLI) can share it.
- The schema version lives in `meta(key='schema_version')`. Migrations are numbered, append-only
  and each runs in one `BEGIN IMMEDIATE` transaction together with the version bump, so a crash
  or a failing statement leaves the database at the previous version, never between two.
- Fail closed: a database whose version is newer than this code knows is refused with
  `StateSchemaTooNew` before anything is written to it. The version is first read without
  writing a byte: through an immutable connection when no write-ahead log exists (so not even
  `-wal`/`-shm` files appear), otherwise read-only through the existing log, which may hold
  the newest commits.

Connections are per thread (`sqlite3` objects must not cross threads) and per process (a forked
child opens its own). `transaction()` gives a `BEGIN IMMEDIATE` block that commits on success and
rolls back on any exception; `snapshot()` gives a read transaction that sees one consistent state.

Durability: `synchronous = NORMAL` in WAL mode. A commit survives the process being killed at any
point (the runtime restart case); an OS crash or power loss may lose the last few commits, never
corrupt the file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

from herdr_mcp.errors import LocalFault
from herdr_mcp.layout import STATE_FILE
from herdr_mcp.state.migrations import MIGRATIONS, Migration

#: Milliseconds a writer waits for another writer before SQLite gives up with "database is locked".
#: Write transactions here last well under a millisecond; ten seconds only matters when a disk stalls.
BUSY_TIMEOUT_MS = 10_000
STATE_FILE_NAME = STATE_FILE


class StateError(LocalFault):
    """The state database cannot be used; `code` is stable, the message says what to do."""

    code = "state_unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(self.code, message)

    def __str__(self) -> str:
        return self.message


class StateSchemaTooNew(StateError):
    code = "state_schema_too_new"


class StateFileUnsafe(StateError):
    code = "state_file_unsafe"


def _version_read_only(path: Path) -> int:
    """The schema version of an existing file, read without writing a byte to it."""
    location = quote(str(path))
    if not Path(f"{path}-wal").exists():
        # Nobody has the file open in WAL mode. An immutable read creates no -wal/-shm files; if
        # a writer checkpoints into the file at this very moment, the plain read-only read below
        # sees a consistent state through the log.
        with contextlib.suppress(sqlite3.DatabaseError):
            return _read_version(f"file:{location}?mode=ro&immutable=1")
    try:
        return _read_version(f"file:{location}?mode=ro")
    except sqlite3.DatabaseError as exc:
        raise StateError(f"{path} is not a readable SQLite database ({exc}); move it aside") from exc


def schema_of(path: Path) -> int | None:
    """The schema version of the database at `path` (None when there is no file), read without
    writing a byte to it: what a process that has not opened the database may ask (`dev status`,
    the DEV plane's schema check). Raises StateError for a file that is not a SQLite database."""
    if not path.exists():
        return None
    return _version_read_only(path)


def _read_version(uri: str) -> int:
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
        has_meta = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
        ).fetchone()
        if not has_meta:
            return 0
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
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


def _enter_wal(conn: sqlite3.Connection) -> None:
    """Switch `conn`'s database to WAL (persistent, so a no-op once any process has done it).

    SQLite does not call the busy handler for a journal-mode change in every lock state: when two
    processes open a fresh file at once, one of them gets "database is locked" at once although
    the other holds the lock only for a moment. So the switch is retried here, within the same
    bound as the busy timeout, and only for that error.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.001
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
            continue
        if mode is not None and str(mode[0]).lower() == "wal":
            return
        raise StateError(f"SQLite refused WAL journal mode (got {mode[0] if mode else None!r})")


def new_runtime_instance() -> str:
    """A fresh name for this runtime process, stored with the rows it owns (operations, exec
    sessions) so that a later runtime can tell them from its own: `<pid>-<random>`, so that a
    reader can also check whether that process still exists."""
    return f"{os.getpid()}-{secrets.token_hex(6)}"


class StateStore:
    """The opened, migrated `state.db`. Create with `StateStore.open(path)`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._opened: list[sqlite3.Connection] = []

    @classmethod
    def open(cls, path: Path, *, migrations: tuple[Migration, ...] = MIGRATIONS) -> StateStore:
        """Open (creating if missing) and migrate `path` to the newest schema `migrations` reach.

        Raises StateSchemaTooNew (nothing written), StateFileUnsafe, StateError (unreadable
        file, or a migration failed: the database then stays at the version before it).
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
        try:
            store._migrate(migrations)
        except BaseException:
            store.close()
            raise
        return store

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (autocommit; use `transaction()` for writes)."""
        if os.getpid() != self._pid:
            # A forked child must never touch the parent's SQLite handles.
            self._pid = os.getpid()
            self._local = threading.local()
            self._opened = []
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            # check_same_thread is off only so that close() can close every thread's connection;
            # each connection is still used by the one thread that opened it.
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA foreign_keys = ON")
            _enter_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")
            self._local.conn = conn
            with self._lock:
                self._opened.append(conn)
        return conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """`BEGIN IMMEDIATE` ... `COMMIT` (writers queue on the busy timeout), rolled back on any
        exception, including a failed COMMIT."""
        conn = self.connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # SQLite may already have rolled back (e.g. disk full)
                conn.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every query inside sees the same committed state."""
        conn = self.connection()
        conn.execute("BEGIN DEFERRED")
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    def schema_version(self) -> int:
        row = self.connection().execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        """Close every connection of this store, in every thread.

        Call it when no other thread is using the store; a later call to `connection()` opens a
        fresh one.
        """
        with self._lock:
            opened, self._opened = self._opened, []
            self._local = threading.local()
        for conn in opened:
            conn.close()

    def _migrate(self, migrations: tuple[Migration, ...]) -> None:
        conn = self.connection()
        has_meta = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
        ).fetchone()
        if has_meta and self.schema_version() == len(migrations):
            return
        for number, migration in enumerate(migrations, start=1):
            try:
                with self.transaction() as tx:
                    self._apply(tx, number, migration, len(migrations))
            except sqlite3.Error as exc:
                raise StateError(
                    f"{self.path}: migration {number} ({migration.name}) failed ({exc}); the database "
                    f"stays at schema {number - 1}. Report this with the herdr-mcp version."
                ) from exc

    def _apply(self, tx: sqlite3.Connection, number: int, migration: Migration, known: int) -> None:
        """Run one migration and its version bump inside the caller's transaction."""
        tx.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT")
        current = tx.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(current[0]) if current else 0
        if version > known:
            raise StateSchemaTooNew(
                f"{self.path} was upgraded to schema {version} by a newer herdr-mcp meanwhile"
            )
        if version >= number:
            return
        for statement in migration.statements:
            tx.execute(statement)
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(number),),
        )
