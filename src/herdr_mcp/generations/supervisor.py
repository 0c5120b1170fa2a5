"""`herdr-mcp generation up`: keep the active and previous generations' runtimes running.

The runtime service (systemd --user, launchd) runs this instead of a single `serve` once the
workstation has generations installed by `herdr-mcp update` or `dev sync` ("managed"
generations: their executable is inside `<config>/runtimes/<id>/`). Every `interval` seconds:

1. an activation whose activator died while observing is undone (only when the generations lock
   is free at that moment: a held lock is a live activator, which is left alone);
2. for the active and the previous generation, if managed and their runtime is not running
   (after a reboot, a crash, a kill), it is started again with its own `launch.json` arguments,
   on the port it was registered with, so its endpoint stays what the gate validated. If that port
   is taken, it starts on a free one and its registered endpoint is updated (compare-and-swap on
   the control revision), which the link follows.

Generations registered by hand (an executable elsewhere) are never started or stopped here. On
SIGTERM (the service stops) the loop ends and, with `stop_on_exit`, the runtimes it keeps are
stopped. The gate still decides which generation takes traffic; this only keeps processes alive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from herdr_mcp.generations.control import Generation, GenerationError, GenerationStore
from herdr_mcp.generations.gate import OBSERVING, recover_abandoned
from herdr_mcp.generations.migrated import hands_off
from herdr_mcp.generations.process import (
    is_managed,
    read_serve_args,
    runtime_pid,
    runtimes_dir,
    start_runtime,
    stop_runtime,
)

log = logging.getLogger(__name__)
DEFAULT_INTERVAL_S = 2.0


def ensure_running(
    store: GenerationStore, config_dir: Path, say: Callable[[str], None] = log.info
) -> list[str]:
    """One pass of the module docstring; returns the generations it (re)started."""
    if store.read_status().outcome == OBSERVING:
        repaired = recover_abandoned(store)
        if repaired is not None:
            say(f"undid an interrupted activation; {repaired.active} is active again")
    status = store.read_status()
    control = store.read_control()
    started = []
    for name in (status.active, status.previous):
        if name is None:
            continue
        try:
            spec = control.find(name)
        except GenerationError:
            continue
        runtime_dir = runtimes_dir(config_dir) / name
        if not is_managed(config_dir, spec) or runtime_pid(runtime_dir) is not None:
            continue
        reason = hands_off(config_dir, name)
        if reason is not None:
            say(f"not restarting {name}: {reason}")
            continue
        _restart(store, config_dir, spec, runtime_dir, say)
        started.append(name)
    return started


def _restart(
    store: GenerationStore, config_dir: Path, spec: Generation, runtime_dir: Path, say: Callable[[str], None]
) -> None:
    assert spec.executable is not None  # is_managed
    args = read_serve_args(runtime_dir) or ()
    port = urlsplit(spec.endpoint).port or 0
    try:
        started = start_runtime(Path(spec.executable), runtime_dir, config_dir, args, port=port)
    except GenerationError as first:
        if port == 0:
            raise
        say(
            f"{spec.generation} could not listen on its port {port} again ({first.message}); using a free one"
        )
        started = start_runtime(Path(spec.executable), runtime_dir, config_dir, args)
    say(f"started {spec.generation} at {started.endpoint} (pid {started.pid})")
    if started.endpoint == spec.endpoint:
        return
    with store.locked():
        control = store.read_control()
        moved = tuple(
            replace(item, endpoint=started.endpoint) if item.generation == spec.generation else item
            for item in control.generations
        )
        store.write_control_locked(replace(control, generations=moved), expected_revision=control.revision)


class Stopping(Protocol):
    """What `supervise` waits on: a `threading.Event`, or the process's `StopSignals`."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


def supervise(
    store: GenerationStore,
    config_dir: Path,
    stop: Stopping,
    *,
    interval_s: float = DEFAULT_INTERVAL_S,
    stop_on_exit: bool = True,
    say: Callable[[str], None] = log.info,
) -> None:
    """Run `ensure_running` until `stop` is set; a failed pass is logged and retried."""
    kept: set[str] = set()
    while not stop.is_set():
        try:
            ensure_running(store, config_dir, say)
            status = store.read_status()
            kept |= {name for name in (status.active, status.previous) if name is not None}
        except GenerationError as exc:
            say(f"generation up: {exc.code}: {exc.message}; retrying")
        stop.wait(interval_s)
    if stop_on_exit:
        for name in sorted(kept):
            if stop_runtime(runtimes_dir(config_dir) / name):
                say(f"stopped {name}")
