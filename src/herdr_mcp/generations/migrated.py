"""The record of the last major migration (`<config>/update/major.json`, written by
`herdr-mcp update major-apply`, update/major.py) and the rollback guard it implies; and what the
supervisor leaves alone while a major job runs (`hands_off`).

A generation from before a migration runs an older state schema than `state.db` now has, so it
cannot open it: the gate refuses to activate it (`major_rollback_required`, naming
`herdr-mcp update major-rollback`, which restores the snapshot and that generation together).
`generation rollback`, `generation activate`, `herdr-mcp rollback` and `dev rollback` all reach
the gate, so all of them are refused the same way. The record fails closed: an unreadable one
refuses every activation until it is repaired or moved aside.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from herdr_mcp.generations.control import GenerationError, GenerationStateError
from herdr_mcp.layout import Layout
from herdr_mcp.records import FailRule, RecordInvalid, RecordKind

MIGRATED_RECORD = RecordKind("major.json", 64 * 1024, FailRule.CLOSED, schema_version=1)
#: The running job's record (`update/major/job.json`, written by update/major.py).
JOB_RECORD = RecordKind("job.json", 64 * 1024, FailRule.CLOSED, schema_version=1)
#: The phases in which the job itself stops and starts runtimes and moves `state.db`.
SWAP_PHASES = frozenset({"swapping", "activating"})


def migrated_file(config_dir: Path) -> Path:
    return Layout(config_dir).update_dir / MIGRATED_RECORD.name


def read_migrated(config_dir: Path) -> dict[str, Any] | None:
    try:
        return MIGRATED_RECORD.read(migrated_file(config_dir))
    except RecordInvalid as exc:
        raise GenerationStateError(
            "major_record_invalid", f"{exc}; check it (update major-status) or move it aside"
        ) from None


def check_activation_target(config_dir: Path, generation: str | None) -> None:
    """Raise `major_rollback_required` when `generation` predates the recorded migration."""
    done = read_migrated(config_dir)
    if done is None or generation is None or generation != done.get("from_generation"):
        return
    raise GenerationError(
        "major_rollback_required",
        f"generation {generation} runs state schema {done.get('state_schema_from')}, and state.db was "
        f"migrated to {done.get('state_schema')}; `herdr-mcp update major-rollback` restores its "
        "snapshot and that generation together",
    )


def job_file(config_dir: Path) -> Path:
    return Layout(config_dir).update_dir / "major" / JOB_RECORD.name


def hands_off(config_dir: Path, generation: str) -> str | None:
    """Why the supervisor (`generation up`) must not restart `generation` now, or None: a major
    job is moving `state.db` (it starts and stops the runtimes itself), or the generation predates
    the recorded migration (it cannot open the migrated database). An unreadable record: hands
    off too (fail closed)."""
    try:
        job = JOB_RECORD.read(job_file(config_dir))
        done = MIGRATED_RECORD.read(migrated_file(config_dir))
    except RecordInvalid as exc:
        return f"a major-migration record is unreadable ({exc})"
    if job is not None and job.get("phase") in SWAP_PHASES:
        return f"major job {job.get('job')} is swapping state.db ({job.get('phase')})"
    if done is not None and done.get("from_generation") == generation:
        return f"{generation} predates the migration to state schema {done.get('state_schema')}"
    return None
