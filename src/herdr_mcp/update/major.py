"""`herdr-mcp update major-apply | major-rollback | major-status`: a state-schema step (seed 001).

An ordinary update never changes the state schema (admission step 9). A release that declares a
`state_migration` from this workstation's schema is taken only here, in one job under the update
lock whose phase is kept in `<config>/update/major/job.json` (0600), so that a run killed at any
phase is recovered by the next `major-apply`, `major-status` or `major-rollback`:

1. `installed`: the release is admitted, staged, installed and probed exactly as an ordinary
   update does (update/apply.py), as generation v2; v1 is the active generation, serving on
   `<config>/state.db`.
2. `draining`: `drain.json` tells the link to stop sending v1 mutations (link/drain.py); when a
   link runs (its `link.pid`), the job waits for its acknowledgement that none is in flight.
3. `snapshot`: `state.db` is copied with SQLite's online backup (`sqlite3.Connection.backup`) to
   `update/major/<job>/snapshot.db`: the N-1 rollback material, with v1's runtime dir (its venv:
   the exact previous binary), which is kept.
4. `migrating`: a second backup, of the snapshot, is v2's own state location
   (`runtimes/<v2>/state/state.db`); v2 starts on it (`serve --state-db`), which runs its
   numbered migrations on that copy; its schema must then be the release's `state_schema`.
5. `gating`: the gate's checks (health, version, real tools/list, contract) on v2 running on the
   copy; then v2 stops.
6. `swapping`: v1 stops; v1's database moves to `<job>/v1-final.db` and the migrated copy takes
   its place as `<config>/state.db` (the PROD database stays where every command finds it); a
   copy of it is kept as `<job>/migrated.db`.
7. `activating`: v2 starts on it and is activated through the gate; `activated` ends the job,
   `update/major.json` records the migration (for the rollback guards and `major-rollback`).

Any failure before `activated` puts v1's own file back (untouched since v1 closed it), starts v1
again where it was stopped, ends the drain and ends the job `failed` with the cause.

After a migration, `generation rollback` (and `herdr-mcp rollback`, `dev rollback`) to the
generation at the old schema is refused (`major_rollback_required`, generations/migrated.py): v1
cannot open the migrated database. `major-rollback` stops v2, keeps its database as
`<job>/v2-final.db`, restores the snapshot with the online backup, starts and activates v1, and
reports what is lost: for each table, the rows v2 added, changed and deleted since the
migration, counted against `<job>/migrated.db`, the migrated database as v2 first opened it
(kept at the swap; both at v2's schema, so every column compares).

Codes: `major_not_needed` (the release migrates nothing: use `update`), `major_no_active`,
`major_state_location` (v1 does not run on `<config>/state.db`), `major_drain_timeout`,
`major_migration_failed`, `major_gate_failed`, `major_not_migrated` (no migration to roll back),
`major_rollback_required`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from herdr_mcp.generations.control import Generation, GenerationError
from herdr_mcp.generations.gate import default_token_reader, validate
from herdr_mcp.generations.migrated import JOB_RECORD, MIGRATED_RECORD, job_file, migrated_file
from herdr_mcp.generations.process import (
    read_serve_args,
    recorded_pid,
    runtime_pid,
    start_runtime,
    stop_runtime,
)
from herdr_mcp.layout import LINK_PID_FILE, Layout
from herdr_mcp.link.drain import DRAIN_ACK_FILE, DRAIN_ACK_RECORD, DRAIN_FILE, DRAIN_RECORD
from herdr_mcp.records import FailRule, RecordInvalid, RecordKind
from herdr_mcp.state.backup import backup_database, changes_since, rows_beyond
from herdr_mcp.state.store import schema_of
from herdr_mcp.update.admission import TrustedRelease
from herdr_mcp.update.errors import LocalStateError, UpdateRefused

DONE_RECORD = MIGRATED_RECORD
PENDING_RECORD = RecordKind("major-pending.json", 16 * 1024, FailRule.OPEN, schema_version=1)
PHASES = ("installed", "draining", "snapshot", "migrating", "gating", "swapping", "activating")
TERMINAL = ("activated", "failed", "rolled_back")
#: How long the link may take to finish the mutations in flight when the drain begins.
DRAIN_TIMEOUT_S = 60.0
FAILPOINT_ENV = "HERDR_MCP_MAJOR_FAILPOINT"


class MajorRefused(UpdateRefused):
    """The major-migration path refuses (a stable code; the message says what to do)."""


def major_dir(config_dir: Path) -> Path:
    return Layout(config_dir).update_dir / "major"


def done_file(config_dir: Path) -> Path:
    return migrated_file(config_dir)


def refuse_state_step(config_dir: Path, release: TrustedRelease) -> str:
    """What `update` (and `update auto`) say about a release that migrates the state schema; the
    release is recorded in `update/major-pending.json` for `major-status`."""
    manifest = release.manifest
    step = manifest.state_migration
    schema_from = step.state_schema_from if step is not None else release.local.state_schema
    message = (
        f"herdr-mcp {manifest.version} migrates the state schema from {schema_from} to "
        f"{manifest.state_schema}; an update never does: run `herdr-mcp update major-apply` "
        "(snapshot, migrate a copy, gate, activate; `update major-rollback` restores the snapshot)"
    )
    with contextlib.suppress(OSError):
        PENDING_RECORD.write(
            Layout(config_dir).update_dir / PENDING_RECORD.name,
            {
                "version": manifest.version,
                "state_schema_from": schema_from,
                "state_schema": manifest.state_schema,
                "reason": "major_update_required",
                "at": _now(),
            },
        )
    return message


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class Job:
    """The job record (`update/major/job.json`)."""

    job: str
    phase: str
    version: str
    v1: str
    v2: str
    state_schema_from: int
    state_schema: int
    started_at: str = field(default_factory=_now)
    #: The process running the job (the detached worker of `major-apply`).
    worker_pid: int = field(default_factory=os.getpid)
    error: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    measures: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "phase": self.phase,
            "version": self.version,
            "v1": self.v1,
            "v2": self.v2,
            "state_schema_from": self.state_schema_from,
            "state_schema": self.state_schema,
            "started_at": self.started_at,
            "worker_pid": self.worker_pid,
            "error": self.error,
            "history": self.history,
            "measures": self.measures,
        }

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> Job:
        fields = {key: document[key] for key in document if key != "schema_version"}
        try:
            return cls(**fields)
        except TypeError as exc:
            raise LocalStateError(
                "major_job_invalid", f"the major job record is not one we wrote ({exc})"
            ) from None


def read_job(config_dir: Path) -> Job | None:
    try:
        document = JOB_RECORD.read(job_file(config_dir))
    except RecordInvalid as exc:
        raise LocalStateError(
            "major_job_invalid", f"{exc}; move it aside after checking the job dir"
        ) from None
    return None if document is None else Job.from_dict(document)


def _save(config_dir: Path, job: Job, phase: str, error: str | None = None) -> None:
    job.phase = phase
    job.error = error
    job.history.append({"phase": phase, "at": _now(), **({"error": error} if error else {})})
    JOB_RECORD.write(job_file(config_dir), job.to_dict())


def _failpoint(name: str) -> None:
    if os.environ.get(FAILPOINT_ENV) == name:
        import sys

        print(f"failpoint {name}", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)


# --- paths of one job -----------------------------------------------------------------------------


def _job_dir(config_dir: Path, job: Job) -> Path:
    return major_dir(config_dir) / job.job


def _copy_path(config_dir: Path, generation: str) -> Path:
    return Layout(config_dir).runtimes_dir / generation / "state" / "state.db"


def _sidecars(path: Path) -> list[Path]:
    return [path, Path(f"{path}-wal"), Path(f"{path}-shm")]


def _move_db(source: Path, destination: Path) -> None:
    """Move a closed SQLite database and any sidecar files it left."""
    destination.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    for origin, target in zip(_sidecars(source), _sidecars(destination), strict=True):
        if origin.exists():
            os.replace(origin, target)
        else:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()


def _remove_db(path: Path) -> None:
    for item in _sidecars(path):
        with contextlib.suppress(FileNotFoundError):
            item.unlink()


# --- the drain ------------------------------------------------------------------------------------


#: A link this job does not know of (one the services run) acknowledges within its poll interval;
#: no acknowledgement in this long means no link serves this config dir.
UNKNOWN_LINK_WAIT_S = 2.0


def _link_running(config_dir: Path) -> bool:
    """Whether the detached link of `herdr-mcp start` runs (its `link.pid` names a live process)."""
    return recorded_pid(config_dir / LINK_PID_FILE) is not None


def start_drain(config_dir: Path, generation: str, job: str, *, timeout_s: float = DRAIN_TIMEOUT_S) -> bool:
    """Drain `generation`; True when a link acknowledged it, False when none did (no link runs:
    one the services run answers within `UNKNOWN_LINK_WAIT_S`). Raises
    `major_drain_timeout` (the drain ended again) when a running link does not answer in time."""
    generations = Layout(config_dir).generations_dir
    with contextlib.suppress(FileNotFoundError):
        (generations / DRAIN_ACK_FILE).unlink()
    DRAIN_RECORD.write(generations / DRAIN_FILE, {"generation": generation, "job": job})
    known = _link_running(config_dir)
    deadline = time.monotonic() + (timeout_s if known else UNKNOWN_LINK_WAIT_S)
    while time.monotonic() < deadline:
        ack = DRAIN_ACK_RECORD.read(generations / DRAIN_ACK_FILE)
        if ack is not None and ack.get("generation") == generation and ack.get("job") == job:
            return True
        time.sleep(0.05)
    if not known:
        return False
    end_drain(config_dir)
    raise MajorRefused(
        "major_drain_timeout",
        f"the link did not confirm within {timeout_s:.0f} s that no mutation to {generation} is in "
        "flight; nothing was changed, v1 serves as before: retry when the long calls are done",
    )


def end_drain(config_dir: Path) -> None:
    generations = Layout(config_dir).generations_dir
    for name in (DRAIN_FILE, DRAIN_ACK_FILE):
        with contextlib.suppress(FileNotFoundError):
            (generations / name).unlink()


# --- apply ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """What the ordinary update path produced: v2 installed and probed, not started."""

    release: TrustedRelease
    generation: str
    executable: Path
    provenance: dict[str, Any]


def apply_major(
    config_dir: Path,
    candidate: Candidate,
    *,
    say: Callable[[str], None] = lambda _: None,
    activate_candidate: Callable[[Generation, tuple[str, ...]], Any],
) -> dict[str, Any]:
    """Steps 2-7 of the module docstring, for the installed `candidate`, with the update lock held.
    `activate_candidate(spec, serve_args)` starts, registers and activates v2 (update/apply.py's
    `start_and_activate`) and returns its `ActivationResult`. Returns the report."""
    from herdr_mcp.generations.control import GenerationStore

    store = GenerationStore.in_dir(Layout(config_dir).generations_dir)
    status = store.read_status()
    if status.active is None:
        raise MajorRefused("major_no_active", "no generation is active; a first install takes no migration")
    v1 = store.read_control().find(status.active)
    runtimes = Layout(config_dir).runtimes_dir
    v1_args = read_serve_args(runtimes / v1.generation) or ()
    if any(arg.split("=", 1)[0] == "--state-db" for arg in v1_args):
        raise MajorRefused(
            "major_state_location",
            f"the active generation {v1.generation} runs on its own --state-db, "
            f"not {Layout(config_dir).state_file}",
        )
    manifest = candidate.release.manifest
    step = manifest.state_migration
    assert step is not None
    job = Job(
        job=f"job-{time.time_ns() // 1_000_000}",
        phase="installed",
        version=manifest.version,
        v1=v1.generation,
        v2=candidate.generation,
        state_schema_from=step.state_schema_from,
        state_schema=manifest.state_schema,
    )
    job_dir = _job_dir(config_dir, job)
    job_dir.mkdir(mode=0o700, parents=True)
    _save(config_dir, job, "installed")
    state = Layout(config_dir).state_file
    copy = _copy_path(config_dir, candidate.generation)
    try:
        _save(config_dir, job, "draining")
        _failpoint("draining")
        drain_started = time.monotonic()
        linked = start_drain(config_dir, v1.generation, job.job)
        say("v1 drained (the link confirmed)" if linked else "no link runs: nothing to drain")
        _save(config_dir, job, "snapshot")
        _failpoint("snapshot")
        started = time.monotonic()
        backup_database(state, job_dir / "snapshot.db")
        job.measures["snapshot_s"] = round(time.monotonic() - started, 3)
        say(f"snapshot of {state} taken in {job.measures['snapshot_s']} s")
        backup_database(job_dir / "snapshot.db", copy)
        _save(config_dir, job, "migrating")
        _failpoint("migrating")
        spec = Generation(
            generation=candidate.generation,
            endpoint="http://127.0.0.1:1",
            expected_runtime_version=manifest.version,
            expected_contract=manifest.contract,
            executable=str(candidate.executable),
            provenance=candidate.provenance,
        )
        started_v2 = start_runtime(
            candidate.executable,
            runtimes / candidate.generation,
            config_dir,
            (*v1_args, "--state-db", str(copy)),
        )
        found = schema_of(copy)
        if found != manifest.state_schema:
            raise MajorRefused(
                "major_migration_failed",
                f"v2 left its copy at state schema {found}, not the release's {manifest.state_schema}",
            )
        _save(config_dir, job, "gating")
        _failpoint("gating")
        checked = validate(replace(spec, endpoint=started_v2.endpoint), default_token_reader(store))
        if not checked.ok:
            raise MajorRefused(
                "major_gate_failed", f"v2 on the migrated copy failed the gate ({checked.code})"
            )
        stop_runtime(runtimes / candidate.generation)
        _save(config_dir, job, "swapping")
        _failpoint("swapping")
        stop_runtime(runtimes / v1.generation)
        _move_db(state, job_dir / "v1-final.db")
        _move_db(copy, state)
        # The migrated database as v2 first opens it: major-rollback tells what v2 wrote by it.
        backup_database(state, job_dir / "migrated.db")
        _save(config_dir, job, "activating")
        _failpoint("activating")
        result = activate_candidate(spec, v1_args)
        if not result.ok:
            raise MajorRefused(
                "major_gate_failed", f"v2 was not activated ({result.outcome}): {result.message}"
            )
        job.measures["mutations_stopped_s"] = round(time.monotonic() - drain_started, 3)
        JOB_RECORD.write(job_file(config_dir), job.to_dict())
        _failpoint("activated")
    except BaseException as exc:
        error = f"{getattr(exc, 'code', type(exc).__name__)}: {getattr(exc, 'message', exc)}"
        try:
            _restore_v1(config_dir, job, store)
        except Exception as restore:
            _save(config_dir, job, "failed", f"{error}; then restoring v1 failed: {restore}")
            raise
        _save(config_dir, job, "failed", error)
        raise
    _finish(config_dir, job)
    return {
        "status": "activated",
        "summary": (
            f"herdr-mcp {manifest.version} is active as generation {candidate.generation} on state schema "
            f"{manifest.state_schema}; the snapshot and v1 ({v1.generation}) are kept: "
            "`herdr-mcp update major-rollback` restores them"
        ),
        "job": job.to_dict(),
    }


def _finish(config_dir: Path, job: Job) -> None:
    job_dir = _job_dir(config_dir, job)
    DONE_RECORD.write(
        done_file(config_dir),
        {
            "job": job.job,
            "from_generation": job.v1,
            "to_generation": job.v2,
            "state_schema_from": job.state_schema_from,
            "state_schema": job.state_schema,
            "snapshot": str(job_dir / "snapshot.db"),
            "at": _now(),
        },
    )
    end_drain(config_dir)
    with contextlib.suppress(FileNotFoundError):
        (Layout(config_dir).update_dir / PENDING_RECORD.name).unlink()
    _save(config_dir, job, "activated")


def _restore_v1(config_dir: Path, job: Job, store: Any) -> None:
    """v1 serving on its own untouched database again; v2 stopped and forgotten."""
    from herdr_mcp.generations.registry import remove

    runtimes = Layout(config_dir).runtimes_dir
    stop_runtime(runtimes / job.v2)
    with contextlib.suppress(GenerationError):
        remove(store, job.v2)
    state = Layout(config_dir).state_file
    final = _job_dir(config_dir, job) / "v1-final.db"
    if final.exists():
        _remove_db(state)
        _move_db(final, state)
    shutil.rmtree(runtimes / job.v2, ignore_errors=True)
    if runtime_pid(runtimes / job.v1) is None:
        _restart(config_dir, store, job.v1)
    end_drain(config_dir)


def _restart(config_dir: Path, store: Any, generation: str) -> None:
    """Start `generation`'s runtime again if it is not running (on its registered port, as the
    supervisor does) and activate it through the gate; raises `major_restore_failed` when the
    gate does not take it."""
    from herdr_mcp.generations.gate import activate
    from herdr_mcp.generations.supervisor import _restart as restart_runtime

    runtime_dir = Layout(config_dir).runtimes_dir / generation
    if runtime_pid(runtime_dir) is None:
        restart_runtime(store, config_dir, store.read_control().find(generation), runtime_dir, lambda _: None)
    result = activate(store, generation)
    if not result.ok:
        raise LocalStateError(
            "major_restore_failed",
            f"generation {generation} did not come back ({result.outcome}): {result.message}; "
            "see its runtimes/<id>/runtime.log, then `herdr-mcp generation activate` it",
        )


def recover(config_dir: Path, say: Callable[[str], None] = lambda _: None) -> str | None:
    """Finish or undo a job a kill interrupted (call with the update lock held); what was done."""
    from herdr_mcp.generations.control import GenerationStore

    job = read_job(config_dir)
    if job is None or job.phase in TERMINAL:
        return None
    store = GenerationStore.in_dir(Layout(config_dir).generations_dir)
    status = store.read_status()
    if (
        job.phase == "activating"
        and status.active == job.v2
        and status.outcome in ("activated", "active_unchanged")
    ):
        _finish(config_dir, job)
        line = f"major job {job.job} interrupted after activation: finished, {job.v2} is active"
    else:
        interrupted = job.phase
        _restore_v1(config_dir, job, store)
        _save(config_dir, job, "failed", f"interrupted:{interrupted}")
        line = f"major job {job.job} interrupted at {interrupted}: v1 {job.v1} serves on its own database"
    say(line)
    return line


# --- rollback -------------------------------------------------------------------------------------


def major_rollback(config_dir: Path, *, say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Restore the snapshot and v1 (module docstring); with the update lock held."""
    from herdr_mcp.generations.control import GenerationStore

    recover(config_dir, say)
    try:
        done = DONE_RECORD.read(done_file(config_dir))
    except RecordInvalid as exc:
        raise LocalStateError("major_job_invalid", str(exc)) from None
    if done is None:
        raise MajorRefused("major_not_migrated", "no major migration is recorded: nothing to roll back")
    store = GenerationStore.in_dir(Layout(config_dir).generations_dir)
    runtimes = Layout(config_dir).runtimes_dir
    v1, v2 = str(done["from_generation"]), str(done["to_generation"])
    snapshot = Path(str(done["snapshot"]))
    if not snapshot.is_file():
        raise LocalStateError(
            "major_snapshot_missing", f"the snapshot {snapshot} is gone; nothing was changed"
        )
    store.read_control().find(v1)  # v1 must still be registered (its runtime dir is kept)
    state = Layout(config_dir).state_file
    stop_runtime(runtimes / v2)
    kept = snapshot.parent / "v2-final.db"
    _move_db(state, kept)
    baseline = snapshot.parent / "migrated.db"
    if baseline.is_file():
        changes = changes_since(kept, baseline)
    else:  # a migration recorded before the baseline was kept: added rows only
        changes = {name: {"added": count} for name, count in rows_beyond(kept, snapshot).items()}
    lost = {name: sum(kinds.values()) for name, kinds in changes.items()}
    backup_database(snapshot, state)
    done_path = done_file(config_dir)
    os.replace(done_path, snapshot.parent / "major-rolled-back.json")
    _restart(config_dir, store, v1)
    # v2 would migrate the restored snapshot again: it goes (its database is kept in `kept`).
    from herdr_mcp.generations.registry import remove

    with contextlib.suppress(GenerationError):
        remove(store, v2)
    shutil.rmtree(runtimes / v2, ignore_errors=True)
    total = sum(lost.values())
    kinds = {kind: sum(c.get(kind, 0) for c in changes.values()) for kind in ("added", "changed", "deleted")}
    return {
        "status": "rolled_back",
        "summary": (
            f"generation {v1} is active again on the snapshot "
            f"(state schema {done.get('state_schema_from')}); "
            f"{total} row(s) written since the migration are not in it "
            f"({kinds['added']} added, {kinds['changed']} changed, {kinds['deleted']} deleted; "
            f"v2's database is kept in {kept})"
        ),
        "lost_rows": lost,
        "lost_changes": changes,
        "kept": str(kept),
    }


def major_status(config_dir: Path) -> dict[str, Any]:
    """The job's phase, the recorded migration and a pending major release, if any."""
    job = read_job(config_dir)
    try:
        done = DONE_RECORD.read(done_file(config_dir))
    except RecordInvalid:
        done = None
    pending = PENDING_RECORD.read(Layout(config_dir).update_dir / PENDING_RECORD.name)
    if job is None:
        summary = "no major migration has run"
    else:
        summary = f"major job {job.job}: {job.phase}" + (f" ({job.error})" if job.error else "")
    if pending is not None:
        summary += f"; herdr-mcp {pending.get('version')} needs `herdr-mcp update major-apply`"
    return {
        "status": "none" if job is None else job.phase,
        "summary": summary,
        "job": None if job is None else job.to_dict(),
        "migration": done,
        "pending": pending,
    }
