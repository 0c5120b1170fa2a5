"""The drain of a generation: the link stops sending it mutations while reads keep flowing.

`herdr-mcp update major-apply` (update/major.py) drains the active generation before it takes the
snapshot of `state.db`: it writes `drain.json` (`{"generation", "job"}`) into the generations
dir, and from the next poll (at most `DRAIN_POLL_S` later) the link

- refuses every new request to that generation that may mutate, before sending anything: 503,
  `data.code` `not_delivered`, `data.reason` `generation_draining` (nothing ran: the client may
  resend, and will reach the migrated generation once it is active);
- sends everything else as before (reads, `initialize`, `tools/list`, notifications);
- once none of the mutations it sent that generation is still in flight, writes `drain-ack.json`
  (`{"generation", "job", "at"}`): the migration waits for it, so no mutation the link carried
  commits after the snapshot.

What may mutate is read from the tool catalog's own annotations: a `tools/call` is a read only
when its tool is `readOnlyHint: true` in a frozen catalog this link knows (the current epoch's
and any other it carries); an unknown tool, a body that is not JSON, and a batch holding any call
that is not known to be a read count as mutations (fail closed). Removing `drain.json` ends the
drain (the migration does, on success and on every failure, and its recovery after a kill).

A record that cannot be read counts as no drain only when the file is absent; a present but
malformed one drains nothing and is logged (only the migration writes it).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from herdr_mcp.contract import CURRENT_EPOCH, ContractError, load_catalog
from herdr_mcp.records import FailRule, RecordInvalid, RecordKind
from herdr_mcp.strict_json import MESSAGE_LIMITS, loads_bounded

log = logging.getLogger("herdr_mcp.link")

DRAIN_FILE = "drain.json"
DRAIN_ACK_FILE = "drain-ack.json"
DRAIN_RECORD = RecordKind(DRAIN_FILE, 4096, FailRule.OPEN)
DRAIN_ACK_RECORD = RecordKind(DRAIN_ACK_FILE, 4096, FailRule.OPEN)
#: How stale the link's view of the drain may be.
DRAIN_POLL_S = 0.1
DRAINING_REASON = "generation_draining"


def read_only_tools() -> frozenset[str]:
    """The tools whose frozen-catalog annotations say `readOnlyHint: true`, over every epoch this
    code carries around the current one (a name read-only in one and not another is not a read)."""
    reads: set[str] = set()
    others: set[str] = set()
    for epoch in (CURRENT_EPOCH - 1, CURRENT_EPOCH, CURRENT_EPOCH + 1):
        try:
            tools = load_catalog(epoch)
        except ContractError:
            continue
        for tool in tools:
            annotations = tool.get("annotations")
            if isinstance(annotations, dict) and annotations.get("readOnlyHint") is True:
                reads.add(str(tool.get("name")))
            else:
                others.add(str(tool.get("name")))
    return frozenset(reads - others)


def _mutates(message: object, reads: frozenset[str]) -> bool:
    if not isinstance(message, dict):
        return True
    if message.get("method") != "tools/call":
        return False
    params = message.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    return not (isinstance(name, str) and name in reads)


def may_mutate(body: bytes, reads: frozenset[str]) -> bool:
    """Whether the JSON-RPC `body` (one message or a batch) may carry a mutation."""
    try:
        message = loads_bounded(body, MESSAGE_LIMITS, strict=False)
    except ValueError:  # not JSON or past the bounds: assumed to mutate
        return True
    if isinstance(message, list):
        return any(_mutates(item, reads) for item in message) if message else False
    return _mutates(message, reads)


class Drain:
    """The link's side of a drain (module docstring). Shared by the connection threads."""

    def __init__(self, generations_dir: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self._path = generations_dir / DRAIN_FILE
        self._ack = generations_dir / DRAIN_ACK_FILE
        self._clock = clock
        self._lock = threading.Lock()
        self._checked = float("-inf")
        self._draining: tuple[str, str] | None = None  # (generation, job)
        self._acked: tuple[str, str] | None = None
        self._mutations: dict[str, int] = {}
        self.reads = read_only_tools()

    def _poll(self) -> tuple[str, str] | None:
        now = self._clock()
        if now - self._checked < DRAIN_POLL_S:
            return self._draining
        self._checked = now
        try:
            document = DRAIN_RECORD.read(self._path)
        except RecordInvalid:
            document = None
        if document is None:
            self._draining = None
        else:
            generation, job = document.get("generation"), document.get("job")
            if isinstance(generation, str) and isinstance(job, str):
                self._draining = (generation, job)
            else:
                log.warning("%s is not {generation, job}; draining nothing", self._path)
                self._draining = None
        return self._draining

    def admit(self, generation: str, body: bytes, mutation: bool | None = None) -> bool:
        """Whether a request to `generation` may be sent; counts it as an in-flight mutation when
        it may mutate (then `finished` must follow). False: refuse it, nothing was counted.
        `mutation`: whether it may mutate when the caller knows (it built `body` from one tool
        name); by default it is read from `body`."""
        if mutation is None:
            mutation = may_mutate(body, self.reads)
        with self._lock:
            draining = self._poll()
            if mutation and draining is not None and draining[0] == generation:
                self._acknowledge_locked(draining)
                return False
            if mutation:
                self._mutations[generation] = self._mutations.get(generation, 0) + 1
        return True

    def finished(self, generation: str, body: bytes, mutation: bool | None = None) -> None:
        """A request `admit` let through ended (answered, failed or abandoned); `mutation` as
        `admit` was given it."""
        if not (may_mutate(body, self.reads) if mutation is None else mutation):
            self.check()
            return
        with self._lock:
            left = self._mutations.get(generation, 0) - 1
            if left > 0:
                self._mutations[generation] = left
            else:
                self._mutations.pop(generation, None)
            draining = self._poll()
            if draining is not None:
                self._acknowledge_locked(draining)

    def check(self) -> None:
        """Poll the drain record and acknowledge it when nothing of it is in flight (the link
        calls this from a timer too, so an idle link acknowledges a drain)."""
        with self._lock:
            draining = self._poll()
            if draining is not None:
                self._acknowledge_locked(draining)

    def _acknowledge_locked(self, draining: tuple[str, str]) -> None:
        if self._acked == draining or self._mutations.get(draining[0], 0) > 0:
            return
        document = {"generation": draining[0], "job": draining[1], "at": time.time_ns() // 1_000_000}
        with contextlib.suppress(OSError):
            DRAIN_ACK_RECORD.write(self._ack, document)
            self._acked = draining

    def run_checks(self, stop: threading.Event) -> None:
        """The timer loop: `check` every `DRAIN_POLL_S` until `stop` is set."""
        while not stop.wait(DRAIN_POLL_S):
            self.check()
