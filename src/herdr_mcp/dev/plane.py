"""The DEV plane: a generation built from a source checkout, on top of a pinned PROD generation.

PROD is a generation installed from a signed release; DEV is one built from a Git checkout with
its source provenance. They are the same generation mechanism (runtime dirs, the control and
status files, the activation gate); the plane is a fact recorded next to them:

`<config dir>/dev-plane.json` (0600; its presence means "this workstation runs DEV", and
`update auto` skips while it exists):

    {"schema_version": 1,
     "pinned_prod": {"generation", "executable", "version", "contract", "checksum"} | null,
     "dev_generation": "<id of the DEV generation last synced>",
     "source": {"path", "commit", "dirty", "describe"},
     "synced_at": "<UTC>"}

`sync` (`herdr-mcp dev sync`):

1. under the update lock (an update and a sync never interleave), refused while the update fence
   is set, after the same clean-up an update does;
2. pins PROD: on the first sync, the active generation, which must be a PROD one (not built from
   a checkout), with the sha256 of its installed `herdr_mcp` RECORD (the list of every installed
   file with its own hash) as its checksum; a later sync keeps the existing pin;
3. builds the checkout's wheel (the release toolchain's `build`, SOURCE_DATE_EPOCH from its HEAD
   commit) in the build venv kept in `<config>/dev-build/` while it is what a new one would be
   (`dev/build_env.py`), bundles it for this machine and installs it into a new generation venv with no
   network as an update installs a release, but as an `UnsafeLocalBundle`: no release signed it,
   so only `install_unsafe_local_bundle` takes it;
4. probes it (`version --json`); its contract must be the pinned PROD contract (`dev_contract_changed`
   otherwise: a contract change goes through a release with a contract_migration), and its state
   schema must be the one PROD uses (below);
5. writes the marker, then starts the generation and activates it through the same gate. If the
   gate refuses, the DEV generation is removed, and the marker is put back as it was (removed on
   a first sync): PROD stays active.

A checkout-only workstation (no PROD generation was ever installed: `herdr-mcp start` run from a
checkout, `start_checkout`) is a DEV plane with no PROD pin (`pinned_prod` null): the same
build, install and gate as `sync`, with no pinned contract to keep; `update auto` skips on it as
on any DEV plane, interactive `update` refuses (`plane_not_prod`), a later `sync` keeps it
unpinned, and `rollback` refuses with `dev_no_prod_pin`: there is nothing to return to.

`rollback` (`herdr-mcp dev rollback`) re-activates the pinned PROD generation through the gate
without building anything: its checksum must still be the pinned one (`dev_pin_mismatch`), its
runtime is started again if it is not running; on `activated` or `active_unchanged` the marker is
removed and the workstation is PROD again.

The DEV plane never changes PROD's database. Every generation opens the one `<config>/state.db`
and migrates it forward to its own schema when it starts, so a DEV generation at another schema
must never start. The schema a build uses is the `state_schema` its probe reports (`version
--json` prints a constant and opens no database), so the check runs after the install and before
the marker is written or any process of the build starts:

- with a PROD pin, the build's schema must be the one the pinned executable reports (asked the
  same way) and, when `state.db` exists, the one it is at; with no pin (`start_checkout`, an
  unpinned `sync`), the one `state.db` is at, when it exists (none: the build creates it).
  Otherwise `dev_state_schema_differs`, naming the schemas, `update major-apply` (the one way a
  schema change reaches a workstation) and, to develop a migration, a config dir of its own
  (`HERDR_MCP_CONFIG_DIR=<dir> herdr-mcp start --source <checkout>`: its own `state.db`). The
  build is removed; what was active stays active; the database was not opened;
- with a PROD pin, a `state.db` at a schema above the pinned one (what a DEV sync did before this
  check: PROD can no longer open it) is refused `dev_state_schema_ahead` before anything is built,
  and by `rollback` before anything is started or activated (PROD could not serve on it). The
  message says how to return to PROD (stop, move the database aside, `dev rollback`): there is no
  snapshot to restore, only the moved file keeps its data. A successful `rollback` also stops
  and removes DEV generations at another schema than PROD's (not one the installed services run
  from), so that nothing (`generation up`,
  `start`, the previous generation's restart) opens the database with them again.

The database's schema is read without writing a byte (`state/store.py`, `schema_of`).

Errors: `DevPlaneError` (`dev_plane_invalid`, `dev_not_prod`, `dev_no_active_generation`,
`dev_pin_missing`, `dev_pin_mismatch`, `dev_contract_changed`, `dev_source_invalid`,
`dev_not_dev`, `dev_no_prod_pin`, `dev_state_schema_differs`, `dev_state_schema_ahead`,
`dev_state_unreadable`, `dev_active_unreadable` in `status`'s notes), plus the updater's and
the release toolchain's own errors.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from herdr_mcp.dev.build_env import build_environment
from herdr_mcp.dev.marker import DevPlane, DevPlaneError, PinnedProd, marker_path, read_plane, write_plane
from herdr_mcp.generations.control import Generation, GenerationError
from herdr_mcp.generations.fence import check_fence
from herdr_mcp.generations.gate import ActivationResult
from herdr_mcp.generations.installed import services_executable
from herdr_mcp.generations.migrated import check_activation_target
from herdr_mcp.generations.process import in_runtime_dir, is_managed
from herdr_mcp.layout import CONFIG_DIR_ENV, Layout, default_config_dir
from herdr_mcp.release.build import BuildSystem, build, commit_time
from herdr_mcp.release.bundle import bundle, load_release_config
from herdr_mcp.state.store import StateError, schema_of
from herdr_mcp.update.apply import (
    PROBE_TIMEOUT_S,
    host_target,
    start_and_activate,
    update_lock,
)
from herdr_mcp.update.errors import UpdateError
from herdr_mcp.update.housekeeping import clean_up, discard
from herdr_mcp.update.install import UnsafeLocalBundle, install_unsafe_local_bundle
from herdr_mcp.update.paths import UpdatePaths
from herdr_mcp.update.probe import ProbeResult, ask_version


def installed_checksum(executable: Path) -> str:
    """sha256 of the `herdr_mcp` RECORD in the venv that holds `executable` (bin/herdr-mcp)."""
    venv = executable.parent.parent
    records = sorted(venv.glob("lib/python*/site-packages/herdr_mcp-*.dist-info/RECORD"))
    if len(records) != 1:
        raise DevPlaneError(
            "dev_pin_mismatch", f"{venv} does not hold exactly one installed herdr_mcp (found {len(records)})"
        )
    return "sha256:" + hashlib.sha256(records[0].read_bytes()).hexdigest()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _git(source: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=source, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise DevPlaneError("dev_source_invalid", f"git {' '.join(args)} in {source}: {done.stderr.strip()}")
    return done.stdout.strip()


def source_provenance(source: Path) -> dict[str, Any]:
    """Where a DEV build comes from: the checkout, its HEAD commit, whether it has local changes."""
    top = Path(_git(source, "rev-parse", "--show-toplevel"))
    return {
        "path": str(top),
        "commit": _git(top, "rev-parse", "HEAD"),
        "dirty": bool(_git(top, "status", "--porcelain", "--untracked-files=normal")),
        "describe": _git(top, "describe", "--always", "--dirty", "--tags"),
    }


def _pin_active(paths: UpdatePaths) -> PinnedProd:
    store = paths.generations
    active = store.read_status().active
    if active is None:
        raise DevPlaneError(
            "dev_no_active_generation",
            "no generation is active: install a release first (`herdr-mcp update`); it is pinned as PROD",
        )
    spec = store.read_control().find(active)
    if (spec.provenance or {}).get("plane") == "dev":
        raise DevPlaneError(
            "dev_not_prod",
            f"the active generation {active} was built from a checkout; it cannot be PROD",
        )
    if spec.executable is None or spec.expected_contract is None or spec.expected_runtime_version is None:
        raise DevPlaneError(
            "dev_not_prod",
            f"the active generation {active} records no executable, version and contract to pin",
        )
    return PinnedProd(
        active,
        spec.executable,
        spec.expected_runtime_version,
        spec.expected_contract,
        installed_checksum(Path(spec.executable)),
    )


def _probe_build(executable: Path) -> ProbeResult:
    try:
        return ask_version(executable, timeout=PROBE_TIMEOUT_S)
    except UpdateError as exc:
        raise DevPlaneError("dev_source_invalid", f"the DEV build does not run: {exc.message}") from None


def database_schema(config_dir: Path) -> int | None:
    """The schema `<config_dir>/state.db` is at (None: no file yet), read without writing to it."""
    try:
        return schema_of(Layout(config_dir).state_file)
    except StateError as exc:
        raise DevPlaneError("dev_state_unreadable", exc.message) from None


def prod_schema(pin: PinnedProd) -> int:
    """The state schema the pinned PROD executable reports (`version --json`)."""
    try:
        return ask_version(Path(pin.executable), timeout=PROBE_TIMEOUT_S).state_schema
    except UpdateError as exc:
        raise DevPlaneError(
            "dev_pin_mismatch", f"the pinned PROD generation {pin.generation} does not run: {exc.message}"
        ) from None


def _with_config_dir(config_dir: Path) -> str:
    """How the commands a message names reach this config dir when it is not the default one."""
    if config_dir.absolute() == default_config_dir().absolute():
        return ""
    return f" (each with {CONFIG_DIR_ENV}={config_dir})"


def _check_database_for_prod(paths: UpdatePaths, pin: PinnedProd, prod: int, active: str | None) -> None:
    """`major_rollback_required` when a major migration left the pinned PROD behind, else
    `dev_state_schema_ahead` when `state.db` is at a schema the pinned PROD cannot open."""
    try:
        check_activation_target(paths.config_dir, pin.generation)
    except GenerationError as exc:
        raise DevPlaneError(exc.code, f"{exc.message}; nothing was changed") from None
    found = database_schema(paths.config_dir)
    if found is None or found <= prod:
        return
    database = Layout(paths.config_dir).state_file
    stays = f"; generation {active} stays active" if active is not None else ""
    raise DevPlaneError(
        "dev_state_schema_ahead",
        f"{database} is at state schema {found}, and the pinned PROD generation {pin.generation} "
        f"({pin.version}) opens schema {prod} at most: PROD cannot start on it (a DEV build at schema "
        f"{found} migrated it; no copy at schema {prod} was kept). Nothing was changed{stays}. Keep "
        f"working on a DEV build at schema {found}, or return to PROD with a new, empty database: "
        "`herdr-mcp stop` (and `herdr-mcp service uninstall` when the user services run), move "
        f"{database} and its -wal and -shm files aside, then `herdr-mcp dev rollback` and "
        f"`herdr-mcp start`{_with_config_dir(paths.config_dir)}; the moved file keeps the data, "
        f"which only a build at schema {found} can read",
    )


def _check_build_schema(
    paths: UpdatePaths, top: Path, build_schema: int, pin: PinnedProd | None, prod: int | None
) -> None:
    """`dev_state_schema_differs` when the build would open `state.db` at another schema than
    PROD uses (module docstring): it must not start."""
    database = Layout(paths.config_dir).state_file
    found = database_schema(paths.config_dir)
    uses: list[str] = []
    if pin is not None and prod is not None and prod != build_schema:
        uses.append(f"the pinned PROD generation {pin.generation} ({pin.version}) uses schema {prod}")
    if found is not None and found != build_schema:
        uses.append(f"{database} is at schema {found}")
    if not uses:
        return
    active = paths.generations.read_status().active
    stays = f"generation {active} stays active" if active is not None else "nothing was activated"
    raise DevPlaneError(
        "dev_state_schema_differs",
        f"the checkout's build uses state schema {build_schema}, and {' and '.join(uses)}: the DEV plane "
        f"never changes PROD's database, so the build was not started (it is removed; {stays}; the "
        "database was not opened). A state-schema change reaches a workstation only as a release, "
        "through `herdr-mcp update major-apply`. To develop a migration, run the checkout on a config "
        f"dir of its own, which holds its own state.db: `{CONFIG_DIR_ENV}=<a new dir> herdr-mcp start "
        f"--source {top} --link-port <a free port>`",
    )


def sync(
    paths: UpdatePaths,
    source: Path,
    *,
    serve_args: Sequence[str] | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> tuple[ActivationResult, DevPlane]:
    """`herdr-mcp dev sync` (module docstring). Returns the gate's result and the plane written
    (on a refusal: the plane as it is now, which may be None-equivalent to PROD)."""
    with _prepared(paths, say):
        before = read_plane(paths.config_dir)
        pin = before.pinned_prod if before is not None else _pin_active(paths)
        return _build_and_activate(paths, source, pin, before, serve_args, say)


def start_checkout(
    paths: UpdatePaths,
    source: Path,
    *,
    serve_args: Sequence[str] | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> tuple[ActivationResult, DevPlane]:
    """What `herdr-mcp start` does from a checkout on a workstation where no generation is
    active: build `source` and activate it as a DEV generation in its own runtime dir, on a DEV
    plane with no PROD pin (module docstring). Refuses `dev_generation_active` when a generation
    became active meanwhile (`dev sync` is then the way to run the checkout)."""
    with _prepared(paths, say):
        active = paths.generations.read_status().active
        if active is not None:
            raise DevPlaneError(
                "dev_generation_active",
                f"generation {active} is active; run `herdr-mcp dev sync` to run this checkout on top of it",
            )
        before = read_plane(paths.config_dir)
        pin = before.pinned_prod if before is not None else None
        return _build_and_activate(paths, source, pin, before, serve_args, say)


@contextlib.contextmanager
def _prepared(paths: UpdatePaths, say: Callable[[str], None]) -> Iterator[None]:
    """Steps 1 of `sync`: refused while fenced; the update lock held; a killed run cleaned up."""
    check_fence(paths.config_dir)
    with update_lock(paths):
        for line in clean_up(paths):
            say(f"cleaned up: {line}")
        yield


def _build_and_activate(
    paths: UpdatePaths,
    source: Path,
    pin: PinnedProd | None,
    before: DevPlane | None,
    serve_args: Sequence[str] | None,
    say: Callable[[str], None],
) -> tuple[ActivationResult, DevPlane]:
    """Steps 3-5 of `sync` (module docstring), under the update lock the caller holds."""
    prod = None if pin is None else prod_schema(pin)
    if pin is not None and prod is not None:
        _check_database_for_prod(paths, pin, prod, paths.generations.read_status().active)
    provenance = source_provenance(source)
    top = Path(provenance["path"])
    commit_time(top)  # a checkout with a commit, or BuildError now
    target_name = host_target()
    target = load_release_config(top / "release" / "config.toml").target(target_name)
    generation_id = f"dev-{provenance['commit'][:12]}-{time.time_ns() // 1_000_000}"
    with tempfile.TemporaryDirectory(prefix="herdr-mcp-dev-") as scratch_name:
        scratch = Path(scratch_name)
        # The venv with the checkout's pinned build requirements, kept between syncs while it is
        # what a new one would be (dev/build_env.py).
        requires = BuildSystem.from_pyproject(top).requires
        environment = build_environment(Layout(paths.config_dir).dev_build_dir, requires, say=say)
        say(f"building {top} at {provenance['describe']}")
        _, wheel = build(top, scratch / "dist", environment=environment)
        say(f"bundling {wheel.name} for {target_name}")
        archive = bundle(wheel, scratch / "bundle", target=target)
        say(f"installing it as generation {generation_id}")
        # Built here from the checkout, signed by no release: the explicitly unsafe install.
        installed = install_unsafe_local_bundle(
            UnsafeLocalBundle(archive, scratch), paths.runtimes, generation_id
        )
        wheel_sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
    try:
        found = _probe_build(installed.herdr_mcp)
        if pin is not None and found.contract != pin.contract:
            raise DevPlaneError(
                "dev_contract_changed",
                f"the checkout serves contract epoch {found.contract.epoch} ({found.contract.hash}), the "
                f"pinned PROD epoch {pin.contract.epoch} ({pin.contract.hash}); a contract change ships "
                "as a release with a contract_migration, not as a DEV sync",
            )
        _check_build_schema(paths, top, found.state_schema, pin, prod)
    except BaseException:
        shutil.rmtree(installed.path, ignore_errors=True)
        raise
    plane = DevPlane(pin, generation_id, {**provenance, "wheel_sha256": wheel_sha256}, _now())
    write_plane(paths.config_dir, plane)
    result = start_and_activate(
        paths,
        Generation(
            generation=generation_id,
            endpoint="http://127.0.0.1:1",  # replaced by the endpoint the runtime announces
            expected_runtime_version=found.version,
            expected_contract=found.contract,
            executable=str(installed.herdr_mcp),
            provenance={
                "plane": "dev",
                "source": "checkout",
                "path": provenance["path"],
                "commit": provenance["commit"],
                "dirty": "true" if provenance["dirty"] else "false",
                "describe": provenance["describe"],
                "wheel_sha256": wheel_sha256,
            },
        ),
        serve_args,
        keep=() if pin is None else (pin.generation,),
        say=say,
    )
    if not result.ok:
        write_plane(paths.config_dir, before)
        return result, before if before is not None else plane
    return result, plane


def rollback(
    paths: UpdatePaths, *, say: Callable[[str], None] = lambda _: None
) -> tuple[ActivationResult, PinnedProd]:
    """`herdr-mcp dev rollback` (module docstring)."""
    with update_lock(paths):
        plane = read_plane(paths.config_dir)
        if plane is None:
            raise DevPlaneError("dev_not_dev", "this workstation is on PROD already (no DEV plane marker)")
        pin = plane.pinned_prod
        if pin is None:
            raise DevPlaneError(
                "dev_no_prod_pin",
                "nothing to return to: this DEV plane has no pinned PROD generation (it was made by "
                "`herdr-mcp start` from a checkout on a workstation without a release); `herdr-mcp dev "
                "sync` rebuilds the checkout; to run a release instead, remove "
                f"{marker_path(paths.config_dir)} and run `herdr-mcp update`",
            )
        control = paths.generations.read_control()
        if not any(spec.generation == pin.generation for spec in control.generations):
            raise DevPlaneError(
                "dev_pin_missing",
                f"the pinned PROD generation {pin.generation} is no longer registered; "
                "run `herdr-mcp update` to install a release instead",
            )
        spec = control.find(pin.generation)
        checksum = installed_checksum(Path(pin.executable))
        if spec.executable != pin.executable or checksum != pin.checksum:
            raise DevPlaneError(
                "dev_pin_mismatch",
                f"the pinned PROD generation {pin.generation} is not what was pinned (checksum {checksum}, "
                f"pinned {pin.checksum}); refusing to activate it",
            )
        prod = prod_schema(pin)
        _check_database_for_prod(paths, pin, prod, paths.generations.read_status().active)
        say(f"returning to the pinned PROD generation {pin.generation} ({pin.version})")
        result = start_and_activate(paths, spec, None, keep=(pin.generation,), say=say)
        if result.ok:
            write_plane(paths.config_dir, None)
            for gone in _retire_other_schemas(paths, prod):
                say(f"removed DEV generation {gone} (another state schema than PROD's {prod})")
        return result, pin


def _retire_other_schemas(paths: UpdatePaths, prod: int) -> list[str]:
    """Stop and remove our DEV generations (not the active one, nor the one whose venv the
    installed services run from) whose build reports another state schema than `prod`: kept as the
    previous generation, one would be started again (`generation up`, `start`) and migrate the
    database PROD serves on. Call with the update lock held."""
    store = paths.generations
    active = store.read_status().active
    services = services_executable(paths.config_dir)
    removed = []
    for spec in store.read_control().generations:
        dev = (spec.provenance or {}).get("plane") == "dev"
        if spec.generation == active or not dev or not is_managed(paths.config_dir, spec):
            continue
        if services is not None and in_runtime_dir(paths.config_dir, spec.generation, services):
            continue
        assert spec.executable is not None  # is_managed
        try:
            schema: int | None = ask_version(Path(spec.executable), timeout=PROBE_TIMEOUT_S).state_schema
        except UpdateError:
            schema = None  # a build that no longer runs opens no database either; leave it
        if schema is None or schema == prod:
            continue
        if discard(paths, spec.generation):
            removed.append(spec.generation)
    return removed


def status(paths: UpdatePaths) -> dict[str, Any]:
    """What `herdr-mcp dev status` prints: the plane, the pin, the active generation, and the
    state schemas: `state.db`'s, the pinned PROD's and the active generation's (None where there
    is no such thing or it cannot be read; `state_schema_notes` says why)."""
    plane = read_plane(paths.config_dir)
    store = paths.generations
    active = store.read_status().active
    spec: Generation | None = None
    if active is not None:
        try:
            spec = store.read_control().find(active)
        except GenerationError:
            spec = None
    out: dict[str, Any] = {
        "plane": "dev" if plane is not None else "prod",
        "active": active,
        "active_provenance": dict(spec.provenance) if spec is not None and spec.provenance else None,
    }
    if plane is not None:
        out["pinned_prod"] = None if plane.pinned_prod is None else plane.pinned_prod.to_dict()
        out["dev_generation"] = plane.dev_generation
        out["source"] = plane.source
        out["synced_at"] = plane.synced_at
    notes: list[str] = []

    def noted(ask: Callable[[], int | None]) -> int | None:
        try:
            return ask()
        except DevPlaneError as exc:
            notes.append(f"{exc.code}: {exc.message}")
            return None

    def active_schema() -> int | None:
        if spec is None or spec.executable is None:
            return None
        try:
            return ask_version(Path(spec.executable), timeout=PROBE_TIMEOUT_S).state_schema
        except UpdateError as exc:
            raise DevPlaneError("dev_active_unreadable", f"generation {active}: {exc.message}") from None

    pin = plane.pinned_prod if plane is not None else None
    out["state_db"] = str(Layout(paths.config_dir).state_file)
    out["state_schema"] = {
        "database": noted(lambda: database_schema(paths.config_dir)),
        "pinned_prod": None if pin is None else noted(lambda: prod_schema(pin)),
        "active": noted(active_schema),
    }
    out["state_schema_notes"] = notes
    return out
