"""What an update leaves behind, and its clean-up: `retire` stops, forgets and deletes the
generations of ours that are no longer needed; `clean_up` undoes what a killed run left (step 1
of `apply.py`'s docstring: an interrupted activation, staging jobs, half-made generations and
their processes, failed and rejected generations); `discard` is one generation's removal.
`protected` names what is never removed: the active and previous generations and the one whose
venv the installed services run from."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Sequence
from typing import TYPE_CHECKING

from herdr_mcp.generations.control import MAX_GENERATIONS, GenerationError
from herdr_mcp.generations.gate import recover_interrupted
from herdr_mcp.generations.installed import services_executable
from herdr_mcp.generations.process import (
    START_MARKER,
    in_runtime_dir,
    is_managed,
    stop_runtime,
    tagged_generations,
)
from herdr_mcp.generations.registry import remove
from herdr_mcp.update.staging import JOB_PREFIX

if TYPE_CHECKING:
    from herdr_mcp.update.paths import UpdatePaths


def discard(paths: UpdatePaths, generation: str) -> bool:
    """Stop one generation's runtime, forget it and delete its directory; False (the directory
    kept) when the control file would not let it go. Not checked against what must be kept: the
    caller decides."""
    stop_runtime(paths.runtimes / generation)
    try:
        remove(paths.generations, generation)
    except GenerationError:
        return False
    shutil.rmtree(paths.runtimes / generation, ignore_errors=True)
    return True


def forget(paths: UpdatePaths, generation: str) -> None:
    with contextlib.suppress(GenerationError):
        remove(paths.generations, generation)


def retire(paths: UpdatePaths, keep: Sequence[str] = ()) -> list[str]:
    """Stop, forget and delete our generations that are neither active nor previous nor in
    `keep`, nor the one whose venv the installed services run from (`generations/installed.py`)."""
    store = paths.generations
    kept = protected(paths) | set(keep)
    retired = []
    for spec in store.read_control().generations:
        if spec.generation in kept or not is_managed(paths.config_dir, spec):
            continue
        if discard(paths, spec.generation):
            retired.append(spec.generation)
    return retired


def protected(paths: UpdatePaths) -> set[str | None]:
    """The generations never retired or cleaned up: active, previous, and the one whose venv the
    installed services run from."""
    store = paths.generations
    status = store.read_status()
    protected: set[str | None] = {status.active, status.previous}
    services = services_executable(paths.config_dir)
    if services is not None:
        protected |= {
            spec.generation
            for spec in store.read_control().generations
            if in_runtime_dir(paths.config_dir, spec.generation, services)
        }
    return protected


def make_room(paths: UpdatePaths) -> None:
    if len(paths.generations.read_control().generations) >= MAX_GENERATIONS:
        retire(paths)


def clean_up(paths: UpdatePaths) -> list[str]:
    """Undo what a killed run left (step 1 of the module docstring); what was done, one line each.
    Call with the update lock held."""
    done: list[str] = []
    store = paths.generations
    recovered = recover_interrupted(store)
    if recovered is not None:
        done.append(f"interrupted activation undone; {recovered.active} is active again")
    if paths.jobs.is_dir():
        for job in sorted(paths.jobs.iterdir()):
            if job.name.startswith(JOB_PREFIX):
                shutil.rmtree(job, ignore_errors=True)
                done.append(f"removed staging job {job.name}")
    status = store.read_status()
    control = store.read_control()
    registered = {spec.generation: spec for spec in control.generations}
    if paths.runtimes.is_dir():
        for runtime_dir in sorted(paths.runtimes.iterdir()):
            spec = registered.get(runtime_dir.name)
            if spec is not None and is_managed(paths.config_dir, spec):
                continue
            interrupted_start = (runtime_dir / START_MARKER).exists()
            try:
                stopped = stop_runtime(runtime_dir)  # its recorded pid and its tagged processes
            except GenerationError as exc:
                done.append(f"kept half-made generation {runtime_dir.name}: {exc.message}")
                continue
            shutil.rmtree(runtime_dir, ignore_errors=True)
            done.append(
                f"removed half-made generation {runtime_dir.name}"
                + (" (its start was interrupted)" if interrupted_start else "")
                + (" (its runtime stopped)" if stopped else "")
            )
    done += _stop_orphans(
        paths, {name for name, spec in registered.items() if is_managed(paths.config_dir, spec)}
    )
    keep = protected(paths)
    for entry in status.generations:
        spec = registered.get(entry.generation)
        if spec is None or entry.generation in keep or not is_managed(paths.config_dir, spec):
            continue
        interrupted = entry.validation is not None and entry.validation.code == "activation_interrupted"
        if entry.phase in ("failed", "rejected") and not interrupted and discard(paths, entry.generation):
            done.append(f"removed {entry.phase} generation {entry.generation}")
    return done


def _stop_orphans(paths: UpdatePaths, known: set[str]) -> list[str]:
    """Stop the tagged processes of generations under `runtimes/` that are not registered, whose
    directory is already gone (`generations/process.py::tagged_generations`)."""
    done = []
    for name, pids in sorted(tagged_generations(paths.runtimes).items()):
        if name in known or (paths.runtimes / name).exists():
            continue
        try:
            stop_runtime(paths.runtimes / name)
        except GenerationError as exc:
            done.append(f"could not stop the processes of removed generation {name}: {exc.message}")
            continue
        done.append(f"stopped processes {', '.join(map(str, pids))} of removed generation {name}")
    return done
