"""state.db: creation mode, pragmas, migrations from every earlier schema, fail closed, concurrency."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import stat
import threading
import time
import warnings
from pathlib import Path

import pytest

from herdr_mcp.state import STATE_SCHEMA
from herdr_mcp.state.migrations import MIGRATIONS, Migration
from herdr_mcp.state.store import StateError, StateFileUnsafe, StateSchemaTooNew, StateStore, schema_of

# Rows a test writes into each table it knows, at whatever schema the table first appears.
SEED_ROWS: dict[str, tuple[str, ...]] = {
    "operations": (
        "INSERT INTO operations (op_id, kind, idempotency_key, request_hash, state, result_json, "
        "runtime_instance, created_at, updated_at, expires_at) VALUES "
        "('op_seed', 'exec', 'seed-key-1', 'sha256:00', 'completed', '{}', 'old', 1, 1, 99999999999999)",
    ),
    "exec_sessions": (
        "INSERT INTO exec_sessions (session_id, op_id, command, cwd, pid, runtime_instance, state, "
        "started_at) VALUES ('xseed', 'op_seed', 'true', '/', 1, 'old', 'finished', 1)",
    ),
    "events": (
        "INSERT INTO events (name, workspace_id, data_json, at) VALUES ('seed', 'w1', '{}', 1)",
        "INSERT INTO events (name, workspace_id, data_json, at) VALUES ('seed', NULL, '{}', 2)",
    ),
    "tasks": (
        "INSERT INTO tasks (task_id, turn_id, target, state, submitted_at) "
        "VALUES ('t_seed', 'turn_seed', 'w1:p1', 'submitted', 1)",
    ),
    "inbox": (
        "INSERT INTO inbox (task_id, outcome, summary_json, created_at) "
        "VALUES ('t_seed', 'completed', '{}', 1)",
    ),
}


def user_tables(conn: sqlite3.Connection) -> dict[str, int]:
    """Row count of every ordinary table (not SQLite's own, not FTS shadow tables)."""
    names = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "AND sql NOT LIKE 'CREATE VIRTUAL%'"
        )
    ]
    return {name: conn.execute(f'SELECT COUNT(*) FROM "{name}"').fetchone()[0] for name in names}


def directory_state(path: Path) -> dict[str, bytes]:
    return {entry.name: entry.read_bytes() for entry in sorted(path.iterdir())}


@pytest.mark.parametrize("start", range(len(MIGRATIONS)))
def test_every_earlier_schema_upgrades_keeping_rows(tmp_path: Path, start: int) -> None:
    path = tmp_path / "state.db"
    if start == 0:
        path.touch(mode=0o600)  # schema 0: an empty file
    before: dict[str, int] = {}
    if start > 0:
        old = StateStore.open(path, migrations=MIGRATIONS[:start])
        assert old.schema_version() == start
        with old.transaction() as tx:
            present = user_tables(tx)
            for table, statements in SEED_ROWS.items():
                if table in present:
                    for statement in statements:
                        tx.execute(statement)
            before = user_tables(tx)
        old.close()

    store = StateStore.open(path)
    try:
        assert store.schema_version() == STATE_SCHEMA == len(MIGRATIONS)
        after = user_tables(store.connection())
        for table, count in before.items():
            assert after[table] == count, table
        for table in SEED_ROWS:
            assert table in after
        # Opening an up-to-date database again changes nothing.
        again = StateStore.open(path)
        assert user_tables(again.connection()) == after
        again.close()
    finally:
        store.close()


def test_a_failing_migration_leaves_the_previous_schema(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    StateStore.open(path).close()
    broken = Migration("broken", ("CREATE TABLE half_done (x INTEGER) STRICT", "CREATE TABLE ( nonsense"))
    with pytest.raises(StateError) as error:
        StateStore.open(path, migrations=(*MIGRATIONS, broken))
    assert f"migration {len(MIGRATIONS) + 1} (broken)" in str(error.value)
    store = StateStore.open(path)
    try:
        assert store.schema_version() == len(MIGRATIONS)
        assert "half_done" not in user_tables(store.connection())
    finally:
        store.close()


def make_newer(path: Path) -> None:
    StateStore.open(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(len(MIGRATIONS) + 1),))
    conn.close()


def test_a_newer_schema_is_refused_and_left_byte_identical(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    make_newer(path)
    before = directory_state(tmp_path)
    assert set(before) == {"state.db"}  # cleanly closed: no -wal or -shm left
    with pytest.raises(StateSchemaTooNew) as error:
        StateStore.open(path)
    assert error.value.code == "state_schema_too_new"
    assert "newer herdr-mcp" in str(error.value)
    assert directory_state(tmp_path) == before


def test_schema_of_reads_the_version_without_writing(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    assert schema_of(path) is None  # no file: nothing created either
    assert not path.exists()
    make_newer(path)
    before = directory_state(tmp_path)
    assert schema_of(path) == len(MIGRATIONS) + 1
    assert directory_state(tmp_path) == before  # no byte written, no -wal or -shm made
    # In use with a commit still in the write-ahead log: read through the log, unchanged.
    StateStore.open(tmp_path / "other.db").close()
    other = tmp_path / "other.db"
    holder = sqlite3.connect(other, isolation_level=None)
    try:
        holder.execute("PRAGMA journal_mode = WAL")
        holder.execute("PRAGMA wal_autocheckpoint = 0")
        holder.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
        wal_before = Path(f"{other}-wal").read_bytes()
        assert schema_of(other) == 99
        assert Path(f"{other}-wal").read_bytes() == wal_before
    finally:
        holder.close()
    (tmp_path / "garbage.db").write_bytes(b"not a database" * 100)
    with pytest.raises(StateError, match="not a readable SQLite database"):
        schema_of(tmp_path / "garbage.db")


def test_a_newer_schema_in_use_by_another_connection_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    make_newer(path)
    # The newer runtime holds the file open with a commit still in its write-ahead log.
    newer = sqlite3.connect(path, isolation_level=None)
    try:
        newer.execute("PRAGMA journal_mode = WAL")
        newer.execute("PRAGMA wal_autocheckpoint = 0")
        newer.execute("INSERT INTO meta (key, value) VALUES ('marker', 'x')")
        main_before = path.read_bytes()
        wal_before = Path(f"{path}-wal").read_bytes()
        with pytest.raises(StateSchemaTooNew):
            StateStore.open(path)
        assert path.read_bytes() == main_before
        assert Path(f"{path}-wal").read_bytes() == wal_before
    finally:
        newer.close()


def test_file_mode_and_pragmas(tmp_path: Path) -> None:
    path = tmp_path / "config" / "state.db"
    store = StateStore.open(path)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        conn = store.connection()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000
        with store.transaction() as tx:
            tx.execute("INSERT INTO events (name, data_json, at) VALUES ('e', '{}', 1)")
        for suffix in ("-wal", "-shm"):
            assert stat.S_IMODE(Path(f"{path}{suffix}").stat().st_mode) == 0o600
        # Each thread gets its own connection with the same settings.
        seen: list[int] = []
        worker = threading.Thread(
            target=lambda: seen.append(store.connection().execute("PRAGMA foreign_keys").fetchone()[0])
        )
        worker.start()
        worker.join()
        assert seen == [1]
    finally:
        store.close()


def test_foreign_keys_are_enforced(tmp_path: Path) -> None:
    store = StateStore.open(tmp_path / "state.db")
    try:
        with pytest.raises(sqlite3.IntegrityError), store.transaction() as tx:
            tx.execute(
                "INSERT INTO inbox (task_id, outcome, summary_json, created_at) "
                "VALUES ('no_such_task', 'completed', '{}', 1)"
            )
        assert not store.connection().in_transaction
    finally:
        store.close()


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_file_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "state.db"
    StateStore.open(path).close()
    path.chmod(mode)
    before = path.read_bytes()
    with pytest.raises(StateFileUnsafe) as error:
        StateStore.open(path)
    assert "chmod 600" in str(error.value)
    assert path.read_bytes() == before


def test_a_symlink_or_garbage_file_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.db"
    StateStore.open(real).close()
    link = tmp_path / "state.db"
    link.symlink_to(real)
    with pytest.raises(StateFileUnsafe):
        StateStore.open(link)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database, it is a text file of some length" * 20)
    garbage.chmod(0o600)
    with pytest.raises(StateError) as error:
        StateStore.open(garbage)
    assert "not a readable SQLite database" in str(error.value)


def test_close_closes_every_threads_connection(tmp_path: Path) -> None:
    store = StateStore.open(tmp_path / "state.db")
    opened: list[sqlite3.Connection] = []
    worker = threading.Thread(target=lambda: opened.append(store.connection()))
    worker.start()
    worker.join()
    store.close()
    with pytest.raises(sqlite3.ProgrammingError):
        opened[0].execute("SELECT 1")
    # The store stays usable: a fresh connection is opened on demand.
    assert store.schema_version() == STATE_SCHEMA
    store.close()


def open_at_once(path: str, start: threading.Barrier) -> None:
    start.wait(30)
    StateStore.open(Path(path)).close()


def test_many_processes_opening_a_fresh_file_at_once_all_succeed(tmp_path: Path) -> None:
    # SQLite answers a racing journal-mode switch with "database is locked" without waiting on
    # the busy timeout; before the store retried it, about one open in twenty failed here.
    context = multiprocessing.get_context("fork")
    for round_number in range(15):
        path = tmp_path / f"round-{round_number}" / "state.db"
        path.parent.mkdir()
        start = context.Barrier(6)
        workers = [context.Process(target=open_at_once, args=(str(path), start)) for _ in range(6)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        assert [worker.exitcode for worker in workers] == [0] * 6, f"round {round_number}"
        store = StateStore.open(path)
        try:
            assert store.schema_version() == STATE_SCHEMA
            assert store.connection().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            store.close()


INSERTS_PER_PROCESS = 500


def insert_events(
    path: str, label: str, start: threading.Barrier, spans: multiprocessing.Queue[tuple[float, float]]
) -> None:
    store = StateStore.open(Path(path))
    try:
        start.wait(30)
        began = time.time()
        for index in range(INSERTS_PER_PROCESS):
            with store.transaction() as tx:
                tx.execute(
                    "INSERT INTO events (name, workspace_id, data_json, at) VALUES (?, ?, '{}', ?)",
                    (label, label, index),
                )
                if index % 50 == 0:
                    time.sleep(0.002)  # the subject: hold the write lock, the other writer must wait
        spans.put((began, time.time()))
    finally:
        store.close()


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    # Both processes also race to create and migrate the file.
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(2)
    spans: multiprocessing.Queue[tuple[float, float]] = context.Queue()
    workers = [
        context.Process(target=insert_events, args=(str(path), f"p{n}", start, spans)) for n in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [worker.exitcode for worker in workers] == [0, 0]  # no "database is locked"
    (first_began, first_ended), (second_began, second_ended) = spans.get(), spans.get()
    assert first_began < second_ended and second_began < first_ended, "the writers did not overlap"
    store = StateStore.open(path)
    try:
        counts = dict(
            store.connection().execute("SELECT name, COUNT(*) FROM events GROUP BY name").fetchall()
        )
        assert counts == {"p0": INSERTS_PER_PROCESS, "p1": INSERTS_PER_PROCESS}
        assert store.schema_version() == STATE_SCHEMA
    finally:
        store.close()


def test_a_forked_child_opens_its_own_connection(tmp_path: Path) -> None:
    store = StateStore.open(tmp_path / "state.db")
    parent_conn = store.connection()
    read, write = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns about fork() in a process with threads; the child only uses SQLite.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: must not reuse the parent's handle
        try:
            ok = store.connection() is not parent_conn and store.schema_version() == STATE_SCHEMA
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"1"
    store.close()
