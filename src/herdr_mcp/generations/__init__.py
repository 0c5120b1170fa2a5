"""Runtime A/B generations: the control and status files and the activation gate.

A generation is a running `herdr-mcp serve` on a loopback port. `control` owns the two files
(`runtime-control.json`, `runtime-status.json`); `gate` decides whether a generation may take
traffic and records the switch (`herdr-mcp generation ...` is `cli/generation.py`); `fence` is
the update fence and `installed` the record of the executable the services run (both written by
`service`, read by the updater and the DEV plane). Starting the processes is
someone else's job: the gate only talks to what already runs.
"""

from __future__ import annotations

from herdr_mcp.generations.control import (
    ControlFile,
    Generation,
    GenerationError,
    GenerationStatus,
    GenerationStore,
    Observation,
    StatusFile,
    Validation,
)
from herdr_mcp.generations.gate import (
    ActivationResult,
    TokenReader,
    activate,
    default_token_reader,
    recover_interrupted,
    rollback,
)

__all__ = [
    "ActivationResult",
    "ControlFile",
    "Generation",
    "GenerationError",
    "GenerationStatus",
    "GenerationStore",
    "Observation",
    "StatusFile",
    "TokenReader",
    "Validation",
    "activate",
    "default_token_reader",
    "recover_interrupted",
    "rollback",
]
