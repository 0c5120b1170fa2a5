"""The major-migration path (`update major-apply | major-rollback | major-status`, update/major.py).

Fast parts: the link's drain (link/drain.py) on real files, the online backup and the count of
rows beyond a snapshot (state/backup.py). End to end (slow): v1 (1.0.0, state schema N) installed
from its bundle and active behind a real link; v2 (2.0.0, built from this tree plus one more
numbered migration, declaring `state_migration` from N) published on the repository simulator.
`update` refuses v2 as `major_update_required`; `major-apply` migrates a copy, gates and activates
v2 with the data written before readable after; `generation rollback` to v1 is refused;
`major-rollback` brings v1 back on the snapshot and counts what is lost. Then the job is killed
(SIGKILL) at each phase and the next command (`major-status`) ends serving on a consistent
database every time: the table is printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.errors import EXIT_REFUSED
from herdr_mcp.generations import GenerationStore
from herdr_mcp.link.drain import DRAIN_ACK_FILE, DRAIN_FILE, Drain, may_mutate, read_only_tools
from herdr_mcp.records import atomic_write
from herdr_mcp.release.minisign import keygen
from herdr_mcp.state import STATE_SCHEMA
from herdr_mcp.state.backup import backup_database, changes_since, rows_beyond
from herdr_mcp.state.store import StateStore, schema_of
from herdr_mcp.update.paths import UpdatePaths
from tests.support.link_harness import Link, running_link
from tests.support.release_builder import (
    REPOSITORY,
    REPOSITORY_ID,
    BuiltRelease,
    ReleaseFactory,
    install_active,
    publish,
    stop_all,
)
from tests.support.release_evidence import sigstore_flags
from tests.support.repository_sim import ReleaseRepositorySimulator
from tests.support.runtime_harness import make_repo, mcp_client
from tests.support.sigstore_stack import SigstoreStack
from tests.support.waiting import wait_until

V1 = "r1.0.0-bootstrap"


def _call(name: str, arguments: dict[str, Any] | None = None) -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments or {}},
        }
    ).encode()


# --- the drain ----------------------------------------------------------------------------------


def test_reads_and_mutations_come_from_the_catalog_annotations() -> None:
    reads = read_only_tools()
    assert {"herdr_inspect", "herdr_fs_read", "herdr_since"} <= reads
    assert not {"herdr_exec", "herdr_fs_write", "herdr_call", "herdr_prompt"} & reads
    assert not may_mutate(_call("herdr_inspect"), reads)
    assert may_mutate(_call("herdr_fs_write"), reads)
    assert may_mutate(_call("no_such_tool"), reads)  # unknown: fail closed
    assert may_mutate(b"not json", reads)
    assert not may_mutate(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', reads)
    batch = b"[" + _call("herdr_inspect") + b"," + _call("herdr_exec") + b"]"
    assert may_mutate(batch, reads)


def test_a_drain_refuses_new_mutations_waits_for_those_in_flight_then_acknowledges(tmp_path: Path) -> None:
    drain = Drain(tmp_path, clock=lambda: float(len(calls)))  # every call polls the record again
    calls: list[int] = []

    def tick() -> None:
        calls.append(1)

    tick()
    assert drain.admit("g1", _call("herdr_fs_write"))  # in flight before the drain
    atomic_write(tmp_path / DRAIN_FILE, b'{"generation": "g1", "job": "job-1"}')
    tick()
    assert not drain.admit("g1", _call("herdr_exec"))  # a new mutation: refused, nothing sent
    tick()
    assert drain.admit("g1", _call("herdr_inspect"))  # reads keep flowing
    drain.finished("g1", _call("herdr_inspect"))
    assert drain.admit("g2", _call("herdr_exec"))  # another generation is not drained
    drain.finished("g2", _call("herdr_exec"))
    assert not (tmp_path / DRAIN_ACK_FILE).exists()  # the first write is still in flight
    tick()
    drain.finished("g1", _call("herdr_fs_write"))
    ack = json.loads((tmp_path / DRAIN_ACK_FILE).read_text())
    assert (ack["generation"], ack["job"]) == ("g1", "job-1")
    (tmp_path / DRAIN_FILE).unlink()
    tick()
    assert drain.admit("g1", _call("herdr_exec"))  # the drain ended


# --- the online backup ----------------------------------------------------------------------------


def test_the_backup_of_a_database_being_written_is_one_consistent_state(tmp_path: Path) -> None:
    source = tmp_path / "state.db"
    store = StateStore.open(source)
    stop = threading.Event()
    written: list[int] = []

    def writer() -> None:
        while not stop.is_set():
            with store.transaction() as tx:
                # Two rows per transaction: a consistent copy never holds an odd count.
                for _ in range(2):
                    tx.execute(
                        "INSERT INTO events (name, workspace_id, data_json, at) VALUES ('x', NULL, '{}', 0)"
                    )
            written.append(1)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        wait_until(lambda: len(written) > 50, "the writer to commit", timeout=60)
        backup_database(source, tmp_path / "copy.db")
    finally:
        stop.set()
        thread.join()
    assert (tmp_path / "copy.db").stat().st_mode & 0o777 == 0o600
    assert schema_of(tmp_path / "copy.db") == STATE_SCHEMA
    with sqlite3.connect(tmp_path / "copy.db") as conn:
        (count,) = conn.execute("SELECT count(*) FROM events").fetchone()
    assert count > 0 and count % 2 == 0
    with store.transaction() as tx:
        tx.execute("INSERT INTO events (name, workspace_id, data_json, at) VALUES ('late', NULL, '{}', 0)")
    store.close()
    total = 2 * len(written) + 1
    assert rows_beyond(source, tmp_path / "copy.db") == {"events": total - count}


def test_the_changes_since_a_baseline_count_added_changed_and_deleted_rows(tmp_path: Path) -> None:
    baseline, newer = tmp_path / "baseline.db", tmp_path / "newer.db"
    with contextlib.closing(sqlite3.connect(baseline)) as conn, conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT, tag TEXT)")
        conn.execute("CREATE TABLE kept (x)")
        conn.execute("CREATE TABLE widened (a)")
        conn.executemany("INSERT INTO notes (body, tag) VALUES (?, ?)", [(f"n{i}", None) for i in range(10)])
        conn.executemany("INSERT INTO kept VALUES (?)", [(i,) for i in range(3)])
        conn.executemany("INSERT INTO widened VALUES (?)", [(i,) for i in range(4)])
    backup_database(baseline, newer)
    with contextlib.closing(sqlite3.connect(newer)) as conn, conn:
        conn.execute("INSERT INTO notes (body) VALUES ('new'), ('newer')")
        conn.execute("UPDATE notes SET tag = 'x' WHERE id = 2")  # NULL -> 'x' is a change
        conn.execute("UPDATE notes SET body = body WHERE id = 3")  # written, unchanged: not counted
        conn.execute("DELETE FROM notes WHERE id IN (4, 5, 6)")
        conn.execute("CREATE TABLE fresh (y)")
        conn.execute("INSERT INTO fresh VALUES (1)")
        conn.execute("ALTER TABLE widened ADD COLUMN b")
        conn.execute("INSERT INTO widened VALUES (9, 9)")
    assert changes_since(newer, baseline) == {
        "notes": {"added": 2, "changed": 1, "deleted": 3},
        "fresh": {"added": 1},
        # Columns differ: new rowids are added, every older row counts as changed.
        "widened": {"added": 1, "changed": 4},
    }
    assert changes_since(baseline, baseline) == {}


# --- what the supervisor leaves alone ------------------------------------------------------------


def test_the_supervisor_keeps_its_hands_off_while_state_db_moves_and_after(tmp_path: Path) -> None:
    from herdr_mcp.generations.migrated import JOB_RECORD, MIGRATED_RECORD, hands_off, job_file, migrated_file

    assert hands_off(tmp_path, "g1") is None
    JOB_RECORD.write(job_file(tmp_path), {"job": "job-1", "phase": "snapshot"})
    assert hands_off(tmp_path, "g1") is None  # v1 serves on its own file: restart it if it dies
    for phase in ("swapping", "activating"):
        JOB_RECORD.write(job_file(tmp_path), {"job": "job-1", "phase": phase})
        assert f"swapping state.db ({phase})" in str(hands_off(tmp_path, "g1"))
    JOB_RECORD.write(job_file(tmp_path), {"job": "job-1", "phase": "activated"})
    MIGRATED_RECORD.write(migrated_file(tmp_path), {"from_generation": "g1", "state_schema": 5})
    assert hands_off(tmp_path, "g1") == "g1 predates the migration to state schema 5"
    assert hands_off(tmp_path, "g2") is None
    migrated_file(tmp_path).write_text("{not json")
    assert "unreadable" in str(hands_off(tmp_path, "g2"))  # fail closed


# --- the detached worker -----------------------------------------------------------------------


def test_the_worker_outlives_a_bounded_foreground_wait(tmp_path: Path) -> None:
    """`major-apply`'s foreground waits at most `--wait` seconds; the worker goes on after it."""
    from herdr_mcp.update import major_job
    from herdr_mcp.update.major_job import run_detached

    code = "import sys, time; print('working', file=sys.stderr, flush=True); time.sleep(2); print('done')"
    echoed: list[str] = []
    assert run_detached([sys.executable, "-c", code], tmp_path, 0.2, echo=echoed.append) is None
    outputs = list((tmp_path / "update" / "major").glob("worker-*.out"))
    assert len(outputs) == 1 and outputs[0].stat().st_mode & 0o777 == 0o600
    wait_until(lambda: outputs[0].read_text() == "done\n", "the worker to finish on its own", timeout=60)
    assert major_job._GOING_ON.pop().wait(timeout=30) == 0  # reaped here, the foreground never did
    finished = run_detached([sys.executable, "-c", code], tmp_path, 60, echo=echoed.append)
    assert finished == (0, "done\n")
    assert echoed.count("working\n") == 2


# --- end to end -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Releases:
    v1: BuiltRelease
    v2: BuiltRelease
    keys: Path
    sigstore: list[str]


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory, sigstore_stack: SigstoreStack) -> Releases:
    work = tmp_path_factory.mktemp("major-releases")
    keys = work / "keys"
    keys.mkdir()
    keygen(keys / "release.pub", work / "release.key")
    factory = ReleaseFactory(work, work / "release.key", sigstore_stack)
    return Releases(
        v1=factory.release("1.0.0"),
        v2=factory.release("2.0.0", state_step=True),
        keys=keys,
        sigstore=sigstore_flags(sigstore_stack, work, REPOSITORY),
    )


@dataclass
class Workstation:
    config: Path
    sim: ReleaseRepositorySimulator
    link: Link
    v1_herdr_mcp: Path
    releases: Releases

    @property
    def store(self) -> GenerationStore:
        return GenerationStore.in_dir(self.config / "generations")

    @property
    def state(self) -> Path:
        return self.config / "state.db"

    def command(self, *extra: str) -> list[str]:
        return [
            str(self.v1_herdr_mcp), "update", *extra, "--json", *self.releases.sigstore,
            *self.sim.update_flags(REPOSITORY_ID), "--keys", str(self.releases.keys),
            "--config-dir", str(self.config),
        ]  # fmt: skip

    def run(self, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(*extra), capture_output=True, text=True, timeout=600, env=_env())

    def marker_rows(self) -> int:
        with sqlite3.connect(f"file:{self.state}?mode=ro", uri=True) as conn:
            (count,) = conn.execute("SELECT count(*) FROM events WHERE name = 'major_marker'").fetchone()
        return int(count)

    def serves(self) -> bool:
        """A real read through the link is answered (by whichever generation is active)."""
        return asyncio.run(_inspect(self.link))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("HERDR_MCP_MAJOR_FAILPOINT", None)
    return env


async def _inspect(link: Link) -> bool:
    async with mcp_client(link.url, link.token) as client:
        result = await client.call_tool("herdr_inspect", {})
        return not result.is_error


def _answer(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@pytest.fixture
def workstation(releases: Releases, tmp_path: Path) -> Iterator[Workstation]:
    from herdr_mcp.sim import SimConfig, SimulatorThread

    config = tmp_path / "config"
    config.mkdir(mode=0o700)
    repo = make_repo(tmp_path / "repo", {"README.md": b"# demo\n"})
    paths = UpdatePaths(config)
    socket = tmp_path / "herdr.sock"
    with SimulatorThread(SimConfig.for_roots([repo]), socket), ReleaseRepositorySimulator(REPOSITORY) as sim:
        try:
            install_active(
                paths, releases.v1, V1, ["--no-sim", "--herdr-socket", str(socket)], tmp_path / "job"
            )
            v1 = paths.runtimes / V1 / "venv" / "bin" / "herdr-mcp"
            with running_link(config / "generations", config / "link-token") as link:
                # The link is known to the job as the detached link of `herdr-mcp start` is.
                record = {"pid": link.process.pid, "executable": sys.executable}
                atomic_write(config / "link.pid", json.dumps(record).encode())
                ws = Workstation(config, sim, link, v1, releases)
                with sqlite3.connect(ws.state) as conn:
                    conn.execute(
                        "INSERT INTO events (name, workspace_id, data_json, at) "
                        "VALUES ('major_marker', NULL, '{\"written\": \"before\"}', 1)"
                    )
                publish(sim, releases.v2)
                yield ws
        finally:
            stop_all(paths)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_major_apply_migrates_a_copy_activates_v2_and_major_rollback_restores_v1(
    workstation: Workstation,
) -> None:
    ws = workstation
    assert schema_of(ws.state) == STATE_SCHEMA

    # An ordinary update and its check tell the release apart and point to major-apply.
    checked = _answer(ws.run("--check"))
    assert (checked["status"], checked["major"], checked["state_schema"]) == (
        "admitted",
        True,
        STATE_SCHEMA + 1,
    )
    refused = ws.run()
    assert refused.returncode == EXIT_REFUSED, refused.stderr
    assert "major_update_required" in refused.stderr and "major-apply" in refused.stderr, refused.stderr
    assert [path.name for path in (ws.config / "runtimes").iterdir()] == [V1]  # nothing installed
    # The daily job never applies it, and says why; major-status shows the release pending.
    auto = ws.run("auto")
    assert auto.returncode == EXIT_REFUSED, auto.stderr
    decision = json.loads(auto.stdout)
    print("update auto:", decision["action"], decision["reason"])
    assert (decision["action"], decision["reason"]) == ("refused", "major_update_required")
    pending = _answer(ws.run("major-status"))["pending"]
    assert (pending["version"], pending["state_schema"]) == ("2.0.0", STATE_SCHEMA + 1)
    assert [path.name for path in (ws.config / "runtimes").iterdir()] == [V1]
    assert ws.store.read_status().active == V1

    # The foreground command is killed as soon as its worker speaks: the job goes on without it.
    foreground = subprocess.Popen(
        ws.command("major-apply"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    assert foreground.stderr is not None and foreground.stdout is not None
    # Killed once the worker holds the update lock (it says so by admitting the release), so
    # the major-status polls below never take the lock from under it.
    first = ""
    for line in foreground.stderr:
        if line.startswith("admitted herdr-mcp"):
            first = line
            break
    foreground.kill()
    foreground.wait(timeout=30)
    foreground.stdout.close()
    foreground.stderr.close()
    print("killed the foreground major-apply after its worker said:", first.strip())
    assert first, "the worker never spoke"
    assert not (ws.config / "update" / "major.json").exists()  # not migrated when it was killed
    wait_until(
        lambda: _answer(ws.run("major-status"))["status"] == "activated",
        "the worker to finish the job on its own",
        timeout=900,
        every=1.0,  # each poll starts v1's herdr-mcp: not back to back beside the worker
    )
    logs = sorted((ws.config / "update" / "major").glob("worker-*.log"))
    outs = sorted((ws.config / "update" / "major").glob("worker-*.out"))
    assert len(logs) == len(outs) == 1
    applied = json.loads(outs[0].read_text())
    assert "v1 drained (the link confirmed)" in logs[0].read_text()  # the link's own ack
    print("major-apply:", applied["summary"], applied["job"]["measures"])
    assert applied["status"] == "activated"
    v2 = applied["job"]["v2"]
    status = ws.store.read_status()
    assert (status.active, status.previous) == (v2, V1)
    assert schema_of(ws.state) == STATE_SCHEMA + 1
    assert ws.marker_rows() == 1  # written before, readable after
    assert ws.serves()
    job_dir = ws.config / "update" / "major" / applied["job"]["job"]
    assert schema_of(job_dir / "snapshot.db") == STATE_SCHEMA
    assert (ws.config / "runtimes" / V1 / "venv" / "bin" / "herdr-mcp").is_file()  # the exact v1 kept
    assert not (ws.config / "generations" / DRAIN_FILE).exists()  # the drain ended

    # The ordinary rollback to the generation at the old schema is refused, pointing on.
    rolled = subprocess.run(
        [str(ws.v1_herdr_mcp), "generation", "--state-dir", str(ws.config / "generations"), "rollback"],
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert rolled.returncode != 0
    assert "major_rollback_required" in rolled.stderr and "major-rollback" in rolled.stderr, rolled.stderr
    assert ws.store.read_status().active == v2
    # So is `dev rollback` of a DEV plane whose pinned PROD is v1 (its marker from before the
    # migration): the way back is the snapshot, not v1 on the migrated database.
    from herdr_mcp.contract import contract_identity
    from herdr_mcp.dev.marker import DevPlane, PinnedProd, marker_path, write_plane
    from herdr_mcp.dev.plane import installed_checksum

    pin = PinnedProd(
        V1, str(ws.v1_herdr_mcp), "1.0.0", contract_identity(), installed_checksum(ws.v1_herdr_mcp)
    )
    write_plane(ws.config, DevPlane(pin, None, {}, "2026-12-01T00:00:00Z"))
    dev_back = subprocess.run(
        [str(ws.v1_herdr_mcp), "dev", "--config-dir", str(ws.config), "rollback"],
        capture_output=True,
        text=True,
        env=_env(),
    )
    print("dev rollback after the migration:", dev_back.returncode, dev_back.stderr.strip())
    assert dev_back.returncode != 0
    assert "major_rollback_required" in dev_back.stderr and "major-rollback" in dev_back.stderr
    assert ws.store.read_status().active == v2 and ws.serves()
    marker_path(ws.config).unlink()

    # Written on v2 after the migration: lost by major-rollback, and counted by kind.
    with contextlib.closing(sqlite3.connect(ws.state)) as conn, conn:
        conn.execute("INSERT INTO events (name, workspace_id, data_json, at) VALUES ('after', NULL, '{}', 2)")
        conn.execute("UPDATE events SET data_json = '{\"written\": \"on v2\"}' WHERE name = 'major_marker'")
    back = _answer(ws.run("major-rollback"))
    print("major-rollback:", back["summary"], back["lost_changes"])
    assert back["status"] == "rolled_back"
    assert back["lost_changes"]["events"].get("added", 0) >= 1
    assert back["lost_changes"]["events"].get("changed") == 1  # the marker row, changed on v2
    assert ws.store.read_status().active == V1
    assert schema_of(ws.state) == STATE_SCHEMA
    assert ws.marker_rows() == 1
    assert v2 not in {spec.generation for spec in ws.store.read_control().generations}
    assert ws.serves()


PHASES = [
    ("before the snapshot", "snapshot"),
    ("during the migration", "migrating"),
    ("during the gate", "gating"),
    ("v1 stopped, databases swapped", "activating"),
    ("after activation", "activated"),
]


def _killed_at(ws: Workstation, failpoint: str) -> None:
    process = subprocess.Popen(
        ws.command("major-apply"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**_env(), "HERDR_MCP_MAJOR_FAILPOINT": failpoint},
    )
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if line.strip() == f"failpoint {failpoint}":
            break
    else:
        raise AssertionError(f"major-apply never reached {failpoint}: {''.join(seen)}")
    # The job runs in the detached worker (it would survive the foreground): kill that.
    worker = json.loads((ws.config / "update" / "major" / "job.json").read_text())["worker_pid"]
    assert worker != process.pid
    os.kill(worker, signal.SIGKILL)
    process.wait(timeout=30)  # the foreground sees its worker end
    process.stderr.close()
    wait_until(lambda: not _alive(worker), f"the worker {worker} to be gone", timeout=30)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_kill_at_each_phase_ends_serving_on_a_consistent_database(workstation: Workstation) -> None:
    ws = workstation
    rows = []
    for label, failpoint in PHASES:
        _killed_at(ws, failpoint)
        status = _answer(ws.run("major-status"))
        active = ws.store.read_status().active
        schema = schema_of(ws.state)
        serving = ws.serves()
        drained = (ws.config / "generations" / DRAIN_FILE).exists()
        rows.append(
            (label, status["status"], "v1" if active == V1 else "v2", schema, ws.marker_rows(), serving)
        )
        expected_v2 = failpoint == "activated"
        assert (active == V1) is not expected_v2, (label, status)
        assert schema == (STATE_SCHEMA + 1 if expected_v2 else STATE_SCHEMA), label
        assert ws.marker_rows() == 1 and serving and not drained, label
        assert status["status"] == ("activated" if expected_v2 else "failed"), status
    print()
    print(f"{'killed':34} {'job after recovery':20} {'serving':8} {'schema':7} {'marker rows':12} answers")
    for label, phase, who, schema, marker, serving in rows:
        print(f"{label:34} {phase:20} {who:8} {schema:<7} {marker:<12} {serving}")
