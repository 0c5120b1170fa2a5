"""Adding and removing generation specs in `runtime-control.json` (and their status entries).

`register` and `remove` take the store lock themselves; the `*_locked` variants are for a caller
that already holds it (the updater registers, activates and retires under one lock hold of its
own, never while an activation of someone else runs). Both raise `GenerationError` with a stable
code and change nothing when they refuse.
"""

from __future__ import annotations

from dataclasses import replace

from herdr_mcp.generations.control import (
    MAX_GENERATIONS,
    ControlFile,
    Generation,
    GenerationError,
    GenerationStore,
)


def register(store: GenerationStore, spec: Generation) -> ControlFile:
    """Add `spec` (not activated). Refuses `generation_exists`, `endpoint_in_use`,
    `generations_full`. Returns the control file written."""
    with store.locked():
        return register_locked(store, spec)


def register_locked(store: GenerationStore, spec: Generation) -> ControlFile:
    control = store.read_control()
    if any(item.generation == spec.generation for item in control.generations):
        raise GenerationError(
            "generation_exists", f"{spec.generation} is already registered; remove it first or pick a new id"
        )
    if any(item.endpoint == spec.endpoint for item in control.generations):
        raise GenerationError("endpoint_in_use", f"another generation is registered on {spec.endpoint}")
    if len(control.generations) >= MAX_GENERATIONS:
        raise GenerationError(
            "generations_full", f"{MAX_GENERATIONS} generations are registered; remove an old one first"
        )
    return store.write_control_locked(
        replace(control, generations=(*control.generations, spec)), expected_revision=control.revision
    )


def remove(store: GenerationStore, generation: str) -> ControlFile:
    """Forget `generation`. Refuses `generation_unknown`, `generation_active` (activate another
    first) and `generation_last`. Returns the control file written."""
    with store.locked():
        return remove_locked(store, generation)


def remove_locked(store: GenerationStore, generation: str) -> ControlFile:
    control, status = store.read_control(), store.read_status()
    control.find(generation)
    if status.active == generation:
        raise GenerationError(
            "generation_active", f"{generation} is active; activate another generation before removing it"
        )
    remaining = tuple(spec for spec in control.generations if spec.generation != generation)
    if not remaining:
        raise GenerationError("generation_last", f"{generation} is the only registered generation")
    desired = status.active if control.desired_active == generation else control.desired_active
    written = store.write_control_locked(
        replace(control, generations=remaining, desired_active=desired), expected_revision=control.revision
    )
    kept = tuple(entry for entry in status.generations if entry.generation != generation)
    store.write_status_locked(
        replace(
            status,
            generations=kept,
            previous=None if status.previous == generation else status.previous,
            last_good=None if status.last_good == generation else status.last_good,
        )
    )
    return written
