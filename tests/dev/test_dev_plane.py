"""`herdr-mcp dev status|sync|rollback` on a real workstation layout.

PROD is release 1.0.0 installed from its bundle; the DEV checkout is a snapshot of this tree
(version 0.1.0) in its own Git repository. `dev sync` pins PROD, builds the checkout, activates
the DEV generation through the gate (a real MCP call through the link reaches it); `update` and
`update auto` refuse or skip on DEV; a second sync keeps the pin; `dev rollback` refuses a
pinned generation whose installed files changed and otherwise re-activates PROD (restarting its
runtime, which was stopped) without building anything. The first sync and the rollback run with
a recording proxy (tests/support/logging_proxy.py) in every proxy variable: nothing for this
machine and no bearer goes through it (the other local clients: tests/update/test_no_proxy.py).

The state schema (docs/updater.md, "The DEV plane and the state schema"): a second checkout adds
migration N+1 the way the code registers one (a numbered module under `state/migrations/`,
appended to `MIGRATIONS`, so `STATE_SCHEMA` is N+1). Its `dev sync` is refused
`dev_state_schema_differs` before any process of the build starts (PROD's database keeps its
schema, tables and rows; `dev status` shows the three schemas), and `dev rollback` then leaves
PROD serving on that database. A database migrated to N+1 (what a DEV sync did before the check)
makes `dev sync` and `dev rollback` refuse `dev_state_schema_ahead` instead of reporting success
while PROD cannot start, and the way the message gives brings PROD back. `herdr-mcp start
--source <the migration checkout>` on a config dir whose state.db is at N is refused the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from herdr_mcp.contract import contract_identity
from herdr_mcp.dev.build_env import build_environment
from herdr_mcp.errors import EXIT_REFUSED
from herdr_mcp.generations import Generation, GenerationStore
from herdr_mcp.generations.process import runtime_pid, stop_runtime
from herdr_mcp.layout import Layout
from herdr_mcp.release.build import BuildSystem, build
from herdr_mcp.release.bundle import bundle
from herdr_mcp.release.minisign import keygen
from herdr_mcp.state import STATE_SCHEMA
from herdr_mcp.state.migrations import Migration
from herdr_mcp.state.store import StateStore, schema_of
from herdr_mcp.update.apply import DEV_PLANE_MARKER, start_and_activate
from herdr_mcp.update.install import UnsafeLocalBundle, install_unsafe_local_bundle
from herdr_mcp.update.paths import UpdatePaths
from tests.support.link_harness import Link, running_link
from tests.support.logging_proxy import LoggingProxy, proxy_env
from tests.support.release_builder import (
    ROOT,
    BuiltRelease,
    ReleaseFactory,
    host_target,
    install_active,
    snapshot_tree,
    stop_all,
)
from tests.support.runtime_harness import make_repo, mcp_client

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]
PROD_ID = "r1.0.0-prod"


@pytest.fixture(scope="module")
def prod_release(tmp_path_factory: pytest.TempPathFactory) -> BuiltRelease:
    work = tmp_path_factory.mktemp("prod")
    keygen(work / "release.pub", work / "release.key")
    return ReleaseFactory(work, work / "release.key").release("1.0.0", epoch=5)


@dataclass
class Workstation:
    paths: UpdatePaths
    link: Link
    checkout: Path

    @property
    def store(self) -> GenerationStore:
        return self.paths.generations

    def dev(self, *args: str, proxy: LoggingProxy | None = None) -> subprocess.CompletedProcess[str]:
        """`herdr-mcp dev ARGS`; with `proxy`, every proxy variable names that recording proxy."""
        command = [
            sys.executable,
            "-m",
            "herdr_mcp",
            "dev",
            "--config-dir",
            str(self.paths.config_dir),
            *args,
        ]
        env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        if proxy is not None:
            env |= proxy_env(proxy.url)
        return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)

    def active_version(self) -> str:
        status = self.store.read_status()
        assert status.active is not None
        endpoint = self.store.read_control().find(status.active).endpoint
        version: str = httpx2.get(f"{endpoint}/health", timeout=10).json()["version"]
        return version


def _commit(checkout: Path, message: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.invalid"}
    env |= {"GIT_COMMITTER_NAME": "dev", "GIT_COMMITTER_EMAIL": "dev@example.invalid"}
    subprocess.run(["git", "add", "-A"], cwd=checkout, check=True, env=env)
    subprocess.run(["git", "commit", "--quiet", "-m", message], cwd=checkout, check=True, env=env)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=checkout, check=True, capture_output=True, text=True
    ).stdout.strip()


@contextlib.contextmanager
def _prod_workstation(prod_release: BuiltRelease, work: Path) -> Iterator[Workstation]:
    """PROD 1.0.0 active on a fresh config dir under `work` over the Herdr simulator, the link,
    and the DEV checkout: a snapshot of this tree in its own repository."""
    from herdr_mcp.sim import SimConfig, SimulatorThread

    config = work / "config"
    config.mkdir(mode=0o700)
    paths = UpdatePaths(config)
    checkout = work / "checkout"
    snapshot_tree(ROOT, checkout)
    subprocess.run(["git", "init", "--quiet", "--initial-branch=main"], cwd=checkout, check=True)
    _commit(checkout, "the DEV checkout")
    repo = make_repo(work / "repo", {"README.md": b"# demo\n"})
    socket = work / "herdr.sock"
    with SimulatorThread(SimConfig.for_roots([repo]), socket):
        try:
            serve_args = ["--no-sim", "--herdr-socket", str(socket)]
            install_active(paths, prod_release, PROD_ID, serve_args, work / "bootstrap-job")
            with running_link(config / "generations", config / "link-token") as link:
                yield Workstation(paths, link, checkout)
        finally:
            stop_all(paths)


@pytest.fixture
def workstation(prod_release: BuiltRelease, tmp_path: Path) -> Iterator[Workstation]:
    with _prod_workstation(prod_release, tmp_path) as ws:
        yield ws


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


async def _inspect_through(link: Link) -> None:
    async with mcp_client(link.url, link.token) as client:
        result = await client.call_tool("herdr_inspect", {})
        assert not result.is_error, result


def test_dev_sync_pins_prod_and_dev_rollback_returns_to_it_without_building(workstation: Workstation) -> None:
    ws = workstation
    status = _json(ws.dev("--json", "status"))
    assert (status["plane"], status["active"]) == ("prod", PROD_ID)
    assert _refused(ws.dev("rollback")) == "dev_not_dev"

    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ws.checkout, capture_output=True, text=True
    ).stdout
    # The first sync (build, install, probe, start, activate through the gate) and the rollback
    # run with a recording proxy in every proxy variable, as behind a corporate proxy: the build
    # fetches its build requirements from PyPI through it, as a user's would; nothing for this
    # machine and no bearer goes that way.
    with LoggingProxy("forward") as proxy:
        first_sync = ws.dev("--json", "sync", "--source", str(ws.checkout), proxy=proxy)
    assert [seen for seen in proxy.requests() if seen.to_this_machine or seen.header("authorization")] == []
    synced = _json(first_sync)
    assert synced["outcome"] == "activated"
    kept_env = ws.paths.config_dir / "dev-build"
    assert f"creating the build environment {kept_env}/env-" in first_sync.stderr, first_sync.stderr
    first_dev = synced["generation"]
    plane = synced["plane"]
    assert plane["pinned_prod"]["generation"] == PROD_ID
    assert plane["pinned_prod"]["checksum"].startswith("sha256:")
    assert (plane["source"]["commit"], plane["source"]["dirty"]) == (head.strip(), False)
    spec = ws.store.read_control().find(first_dev)
    assert spec.provenance is not None
    assert (spec.provenance["plane"], spec.provenance["commit"]) == ("dev", head.strip())
    assert ws.active_version() == "0.1.0"  # the checkout, not PROD's 1.0.0
    asyncio.run(_inspect_through(ws.link))
    assert (ws.paths.config_dir / DEV_PLANE_MARKER).exists()

    # Updates leave a DEV plane alone.
    update = [sys.executable, "-m", "herdr_mcp", "update", "--config-dir", str(ws.paths.config_dir)]
    auto = subprocess.run([*update, "auto", "--json"], capture_output=True, text=True)
    assert json.loads(auto.stdout)["reason"] == "plane_not_prod", auto.stderr
    interactive = subprocess.run(
        [*update, "--repository", "o/r", "--repository-id", "1"], capture_output=True, text=True
    )
    assert _refused(interactive) == "plane_not_prod"

    # A second sync keeps the pin, and the pinned PROD stays registered.
    (ws.checkout / "docs" / "dev-note.md").write_text("a DEV change\n")
    second_head = _commit(ws.checkout, "a DEV change")
    second_sync = ws.dev("--json", "sync", "--source", str(ws.checkout))
    again = _json(second_sync)
    assert again["outcome"] == "activated"
    # The build venv the first sync made, reused once pip found the same wheels for the pins.
    assert f"reusing the build environment {kept_env}/env-" in second_sync.stderr, second_sync.stderr
    assert "creating the build environment" not in second_sync.stderr
    assert again["plane"]["pinned_prod"] == plane["pinned_prod"]
    assert again["plane"]["source"]["commit"] == second_head
    registered = [item.generation for item in ws.store.read_control().generations]
    assert PROD_ID in registered and again["generation"] in registered
    dev_status = _json(ws.dev("--json", "status"))
    assert (dev_status["plane"], dev_status["active"]) == ("dev", again["generation"])

    # A pinned generation whose installed files changed is refused.
    prod_dir = ws.paths.runtimes / PROD_ID
    (record,) = prod_dir.glob("venv/lib/python*/site-packages/herdr_mcp-*.dist-info/RECORD")
    original = record.read_bytes()
    record.write_bytes(original + b"tampered.py,,\n")
    assert _refused(ws.dev("rollback")) == "dev_pin_mismatch"
    record.write_bytes(original)

    # Rollback: PROD again, its stopped runtime started again, nothing built.
    stop_runtime(prod_dir)
    assert runtime_pid(prod_dir) is None
    before = sorted(path.name for path in ws.paths.runtimes.iterdir())
    with LoggingProxy("forward") as proxy:
        rolled = _json(ws.dev("--json", "rollback", proxy=proxy))
    assert proxy.requests() == []
    assert (rolled["outcome"], rolled["active"]) == ("activated", PROD_ID)
    assert runtime_pid(prod_dir) is not None
    assert ws.active_version() == "1.0.0"
    asyncio.run(_inspect_through(ws.link))
    assert not (ws.paths.config_dir / DEV_PLANE_MARKER).exists()
    after = sorted(path.name for path in ws.paths.runtimes.iterdir())
    assert set(after) <= set(before), "dev rollback built or installed something"
    assert _json(ws.dev("--json", "status"))["plane"] == "prod"


def _refused(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == EXIT_REFUSED, (done.stdout, done.stderr)
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("herdr-mcp: error: "), done.stderr
    return line.removeprefix("herdr-mcp: error: ").split(":", 1)[0]


# The state schema.

NEW_SCHEMA = STATE_SCHEMA + 1
#: The checkout's migration N+1.
PROBE_MIGRATION = Migration("dev_probe", ("CREATE TABLE dev_probe (id INTEGER PRIMARY KEY) STRICT",))
MIGRATION_MODULE = f'''"""Schema {NEW_SCHEMA}: a table only this DEV checkout knows (test_dev_plane.py)."""

from herdr_mcp.state.migrations import Migration

MIGRATION = Migration({PROBE_MIGRATION.name!r}, {PROBE_MIGRATION.statements!r})
'''
SEEDED_ROWS = 3


@dataclass
class SchemaWorkstation:
    ws: Workstation
    migration: Path  # a clone of `ws.checkout` with one more commit: migration N+1


def _add_migration(checkout: Path) -> str:
    """Commit migration N+1 in `checkout`: its module, registered after the others."""
    package = checkout / "src" / "herdr_mcp" / "state" / "migrations"
    name = f"m{NEW_SCHEMA:04d}_dev_probe"
    (package / f"{name}.py").write_text(MIGRATION_MODULE)
    with (package / "__init__.py").open("a") as registry:
        registry.write(
            f"\n\nfrom herdr_mcp.state.migrations import {name}  # noqa: E402\n\n"
            f"MIGRATIONS = (*MIGRATIONS, {name}.MIGRATION)\n"
        )
    return _commit(checkout, f"state schema {NEW_SCHEMA}: the dev_probe table")


def _database(config: Path) -> dict[str, Any]:
    """What PROD's database holds: its schema, its tables and the rows of the seeded one."""
    path = Layout(config).state_file
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        tables = sorted(row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        rows = conn.execute("SELECT count(*) FROM browser_bindings").fetchone()[0]
    return {"schema": schema_of(path), "tables": len(tables), "browser_bindings_rows": rows}


def _seed(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.executemany(
            "INSERT INTO browser_bindings (scope, workspace_id, created_at, updated_at) VALUES (?, ?, 1, 1)",
            [(f"scope-{n}", f"w{n}") for n in range(SEEDED_ROWS)],
        )


def _error(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert done.returncode == EXIT_REFUSED, (done.returncode, done.stdout, done.stderr)
    error: dict[str, str] = json.loads(done.stdout)["error"]
    return error


def _runtime_dirs(ws: Workstation) -> list[str]:
    return sorted(path.name for path in ws.paths.runtimes.iterdir())


@pytest.fixture(scope="module")
def schema_workstation(
    prod_release: BuiltRelease, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SchemaWorkstation]:
    """`_prod_workstation` with `SEEDED_ROWS` rows in PROD's database, and a clone of the DEV
    checkout with migration N+1."""
    work = tmp_path_factory.mktemp("devschema")
    with _prod_workstation(prod_release, work) as ws:
        migration = work / "migration"
        subprocess.run(["git", "clone", "--quiet", str(ws.checkout), str(migration)], check=True)
        _add_migration(migration)
        _seed(Layout(ws.paths.config_dir).state_file)
        yield SchemaWorkstation(ws, migration)


def test_dev_sync_of_a_new_migration_is_refused_and_dev_rollback_always_leaves_prod_serving(
    schema_workstation: SchemaWorkstation,
) -> None:
    ws, migration = schema_workstation.ws, schema_workstation.migration
    config = ws.paths.config_dir
    database = Layout(config).state_file
    before = _database(config)
    assert (before["schema"], before["browser_bindings_rows"]) == (STATE_SCHEMA, SEEDED_ROWS)
    print(f"\nPROD database before: {before}")

    # On DEV first: the checkout at PROD's schema syncs as before.
    first = _json(ws.dev("--json", "sync", "--source", str(ws.checkout)))
    assert first["outcome"] == "activated"
    dev_id = first["generation"]
    marker = (config / DEV_PLANE_MARKER).read_bytes()

    runtimes_before = _runtime_dirs(ws)
    refused = ws.dev("--json", "sync", "--source", str(migration))
    error = _error(refused)
    print(f"dev sync of the migration: {error['code']}: {error['message']}")
    assert error["code"] == "dev_state_schema_differs"
    message = error["message"]
    assert f"state schema {NEW_SCHEMA}" in message
    assert f"{PROD_ID} (1.0.0) uses schema {STATE_SCHEMA}" in message
    assert f"{database} is at schema {STATE_SCHEMA}" in message
    assert "update major-apply" in message and "HERDR_MCP_CONFIG_DIR=" in message
    # The build was installed and probed, then removed; no process of it ran. Its build venv was
    # the one the first sync kept (the same pins).
    assert "installing it as generation" in refused.stderr and "starting generation" not in refused.stderr
    assert "reusing the build environment" in refused.stderr, refused.stderr
    assert _runtime_dirs(ws) == runtimes_before
    assert ws.store.read_status().active == dev_id
    assert _database(config) == before

    status = _json(ws.dev("--json", "status"))
    same = {"database": STATE_SCHEMA, "pinned_prod": STATE_SCHEMA, "active": STATE_SCHEMA}
    assert (status["state_schema"], status["state_db"]) == (same, str(database))
    text = ws.dev("status").stdout
    assert f"state schema: state.db {STATE_SCHEMA}, PROD {STATE_SCHEMA}, DEV {STATE_SCHEMA}" in text
    print(f"dev status: {text.strip()}")

    rolled = _json(ws.dev("--json", "rollback"))
    assert (rolled["outcome"], rolled["active"]) == ("activated", PROD_ID)
    assert ws.active_version() == "1.0.0"
    asyncio.run(_inspect_through(ws.link))
    after = _database(config)
    print(f"dev rollback: {rolled['outcome']} {rolled['active']}; PROD database after: {after}")
    assert after == before

    # A database PROD cannot open: what `dev sync` of the migration did before the check (the
    # same install, start and gate, and the marker naming the build), done here by hand.
    defect_id = "dev-schema-next"
    _old_dev_sync(ws, migration, defect_id, json.loads(marker))
    assert ws.store.read_status().active == defect_id
    assert schema_of(database) == NEW_SCHEMA  # the build's runtime migrated it when it started
    status = _json(ws.dev("--json", "status"))
    ahead = {"database": NEW_SCHEMA, "pinned_prod": STATE_SCHEMA, "active": NEW_SCHEMA}
    assert status["state_schema"] == ahead
    print(f"dev status after the old defect: {ws.dev('status').stdout.strip()}")

    sync = ws.dev("--json", "sync", "--source", str(ws.checkout))
    assert _error(sync)["code"] == "dev_state_schema_ahead"
    assert "building" not in sync.stderr  # refused before anything was built
    refused = ws.dev("--json", "rollback")
    error = _error(refused)
    print(f"dev rollback on a schema-{NEW_SCHEMA} database: {error['code']}: {error['message']}")
    assert error["code"] == "dev_state_schema_ahead"
    for step in ("herdr-mcp stop", f"move {database}", "herdr-mcp dev rollback", "herdr-mcp start"):
        assert step in error["message"], step
    assert f"HERDR_MCP_CONFIG_DIR={config}" in error["message"]
    assert _refused(ws.dev("rollback")) == "dev_state_schema_ahead"
    assert ws.store.read_status().active == defect_id and (config / DEV_PLANE_MARKER).exists()

    # The way the message gives.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    stop = [sys.executable, "-m", "herdr_mcp", "stop", "--config-dir", str(config)]
    subprocess.run(stop, check=True, capture_output=True, env=env, timeout=120)
    aside = config.parent / "moved-aside"
    aside.mkdir()
    for path in config.glob("state.db*"):
        shutil.move(path, aside / path.name)
    way = ws.dev("--json", "rollback")
    rolled = _json(way)
    assert (rolled["outcome"], rolled["active"]) == ("activated", PROD_ID)
    assert ws.active_version() == "1.0.0"
    asyncio.run(_inspect_through(ws.link))
    assert schema_of(database) == STATE_SCHEMA
    # The schema-N+1 build is gone: nothing starts it again on PROD's new database.
    assert f"removed DEV generation {defect_id}" in way.stderr
    assert defect_id not in {spec.generation for spec in ws.store.read_control().generations}
    assert not (ws.paths.runtimes / defect_id).exists()
    assert schema_of(aside / "state.db") == NEW_SCHEMA  # the moved file keeps its data
    print(f"after the way given: {rolled['active']} serving on a new database {_database(config)}")


def _old_dev_sync(ws: Workstation, checkout: Path, generation: str, marker: dict[str, Any]) -> None:
    """Build, bundle and install `checkout` as `generation`, start and activate it over the pinned
    PROD, and record it in the DEV plane marker: `dev sync` without its schema check."""
    scratch = ws.paths.config_dir.parent / f"build-{generation}"
    # The build venv the syncs before kept (the same pins), as that `dev sync` would have used.
    requires = BuildSystem.from_pyproject(checkout).requires
    environment = build_environment(Layout(ws.paths.config_dir).dev_build_dir, requires)
    _, wheel = build(checkout, scratch / "dist", environment=environment)
    archive = bundle(wheel, scratch / "bundle", target=host_target())
    installed = install_unsafe_local_bundle(
        UnsafeLocalBundle(archive, scratch), ws.paths.runtimes, generation
    )
    spec = Generation(
        generation,
        "http://127.0.0.1:1",  # replaced by the endpoint the runtime announces
        expected_runtime_version="0.1.0",
        expected_contract=contract_identity(),
        executable=str(installed.herdr_mcp),
        provenance={"plane": "dev", "source": "checkout", "path": str(checkout)},
    )
    assert start_and_activate(ws.paths, spec, None, keep=(PROD_ID,)).outcome == "activated"
    marker["dev_generation"] = generation
    (ws.paths.config_dir / DEV_PLANE_MARKER).write_text(json.dumps(marker))


def test_start_from_a_checkout_at_another_schema_than_the_state_db_is_refused(
    schema_workstation: SchemaWorkstation, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    config.mkdir(mode=0o700)
    database = Layout(config).state_file
    StateStore.open(database).close()
    _seed(database)
    before = _database(config)
    command = [
        sys.executable, "-m", "herdr_mcp", "start", "--json", "--config-dir", str(config),
        "--source", str(schema_workstation.migration), "--link-port", "0", "--sim",
    ]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == EXIT_REFUSED, (done.stdout, done.stderr)
    line = done.stderr.strip().splitlines()[-1]
    print(f"\nstart from the migration checkout: {line}")
    assert line.startswith("herdr-mcp: error: dev_state_schema_differs: ")
    assert f"{database} is at schema {STATE_SCHEMA}" in line
    paths = UpdatePaths(config)
    assert paths.generations.read_status().active is None
    assert not paths.runtimes.exists() or not any(paths.runtimes.iterdir())
    assert _database(config) == before
