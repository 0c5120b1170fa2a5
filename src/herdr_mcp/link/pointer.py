"""Where the link sends a request: the active pointer, the leases and the legacy session pins.

The link's connection threads (link/server.py) and its Edge side (link/edge.py) share these, each
behind its own lock: `ActivePointer` follows `runtime-status.json` (which generation is active)
and `runtime-control.json` (their endpoints); `Leases` count the requests in flight per
generation (a request that entered A finishes on A); `SessionPins` keep a legacy MCP session on
the generation that created it. `runtime_identity` is the active generation's identity as the
link announces it to the Edge. The routing rules themselves: link/router.py.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herdr_mcp import __version__
from herdr_mcp.contract import FROZEN_EPOCHS, ContractError, contract_identity
from herdr_mcp.generations import ControlFile, GenerationError, GenerationStore, StatusFile
from herdr_mcp.generations.gate import OBSERVING, recover_abandoned

log = logging.getLogger("herdr_mcp.link")

#: How stale the active pointer may be: the status file is stat()ed at most this often.
STATUS_POLL_S = 0.1
#: The SDK's default session cap per runtime, for two generations.
MAX_PINNED_SESSIONS = 2 * 10_000


# -- the active pointer -----------------------------------------------------------------------


@dataclass(frozen=True)
class Pointer:
    """What the link last read: the status (with `active`) and the control file (endpoints)."""

    control: ControlFile
    status: StatusFile
    error: str | None = None


def runtime_identity(pointer: Pointer) -> dict[str, Any]:
    """The active generation's identity as the link knows it (docs/edge-protocol.md, `runtime`).

    Version, contract hash and tool count are what the gate validated (the status file); the
    epoch is the registered expected contract's when the hashes agree, else the frozen catalog's
    of this installation with that hash. With no active (or no validated) generation, the link's
    own package's identity stands in, with `generation: null`: calls are then `not_delivered`.
    """
    active = pointer.status.active
    validation = pointer.status.status_of(active).validation if active is not None else None
    if (
        active is None
        or validation is None
        or validation.contract_hash is None
        or validation.runtime_version is None
    ):
        return {"generation": active, "version": __version__, "contract": contract_identity().to_dict()}
    epoch: int | None = None
    with contextlib.suppress(Exception):
        expected = pointer.control.find(active).expected_contract
        if expected is not None and expected.hash == validation.contract_hash:
            epoch = expected.epoch
    for frozen in FROZEN_EPOCHS:
        with contextlib.suppress(ContractError):
            if epoch is None and contract_identity(frozen).hash == validation.contract_hash:
                epoch = frozen
    contract = {"epoch": epoch, "hash": validation.contract_hash, "tool_count": validation.tool_count}
    return {"generation": active, "version": validation.runtime_version, "contract": contract}


def _file_identity(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_mtime_ns, info.st_size


class ActivePointer:
    """Follows `runtime-status.json` (and `runtime-control.json` for endpoints).

    Both files are replaced atomically by their writers, so a changed inode, mtime or size means
    a new version. They are stat()ed at most every `STATUS_POLL_S` and read only when one changed.
    A file that fails to parse leaves the last good pointer in place (and `error` set): the
    writers never write what they would not read back, so this is someone else's edit.

    An interrupted activation. While the status says `outcome: observing`, each poll asks the gate
    to repair an abandoned one (`recover_abandoned`: it takes the generations lock without
    waiting, so a live activator, which holds it for the whole activation, is left alone and a
    request never waits on the lock). A repair means the activator died mid-observation: new
    requests go to the generation it put back at once. The repair is one small file write, done
    once per interrupted activation.
    """

    def __init__(self, store: GenerationStore, clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._clock = clock
        self._checked_at: float | None = None
        self._identity: tuple[object, object] | None = None
        self._pointer = Pointer(ControlFile(), StatusFile())
        self._lock = threading.Lock()

    def current(self) -> Pointer:
        with self._lock:
            return self._current()

    def _current(self) -> Pointer:
        now = self._clock()
        if self._checked_at is not None and now - self._checked_at < STATUS_POLL_S:
            return self._pointer
        self._checked_at = now
        identity = (_file_identity(self._store.status_path), _file_identity(self._store.control_path))
        if identity != self._identity:
            self._identity = identity
            try:
                self._pointer = Pointer(self._store.read_control(), self._store.read_status())
            except GenerationError as exc:
                self._pointer = Pointer(self._pointer.control, self._pointer.status, exc.code)
                log.warning("keeping the last good active pointer: %s", exc)
        if self._pointer.status.outcome == OBSERVING:
            self._check_interrupted()
        return self._pointer

    def _check_interrupted(self) -> None:
        try:
            repaired = recover_abandoned(self._store)
        except GenerationError as exc:
            log.warning("cannot check for an interrupted activation: %s", exc)
            return
        if repaired is None:
            return
        log.warning(
            "an activation was interrupted (no process held the generations lock); rolled back to %s",
            repaired.active,
        )
        self._pointer = Pointer(self._pointer.control, repaired, self._pointer.error)
        self._identity = None  # re-read the files at the next poll


# -- leases and sessions ----------------------------------------------------------------------


class Leases:
    """In-flight requests per generation."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def take(self, generation: str) -> None:
        with self._lock:
            self._counts[generation] = self._counts.get(generation, 0) + 1

    def give_back(self, generation: str) -> None:
        with self._lock:
            self._counts[generation] -= 1

    def in_flight(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._counts.items()))


class SessionPins:
    """Legacy MCP session id -> the generation that created it (oldest forgotten past the cap)."""

    def __init__(self, cap: int = MAX_PINNED_SESSIONS) -> None:
        self._pins: OrderedDict[str, str] = OrderedDict()
        self._cap = cap
        self._lock = threading.Lock()

    def pin(self, session: str, generation: str) -> None:
        with self._lock:
            self._pins[session] = generation
            self._pins.move_to_end(session)
            while len(self._pins) > self._cap:
                self._pins.popitem(last=False)

    def generation_of(self, session: str) -> str | None:
        with self._lock:
            return self._pins.get(session)

    def forget(self, session: str) -> None:
        with self._lock:
            self._pins.pop(session, None)

    def __len__(self) -> int:
        return len(self._pins)
