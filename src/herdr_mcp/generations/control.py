"""The two generation files: `runtime-control.json` (what the operator asked for) and
`runtime-status.json` (what the gate did about it).

Both live in the generations state dir, are 0600, are written atomically (temp file, fsync,
`os.replace`) and hold no secrets: a generation names an optional `token_file` path, never a
token. Each has one parse boundary (`ControlFile.from_json`, `StatusFile.from_json`) that refuses
unknown fields and raises `GenerationError("control_invalid" | "status_invalid", ...)`; a value
that exists is well-formed.

Writes of the control file are compare-and-swap on `revision`: a writer names the revision it
read and the write fails with `control_revision_conflict` when the file moved on meanwhile. The
read-compare-write runs under an exclusive `flock` on `generations.lock`, which the gate also
holds for a whole activation so two activations never interleave.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from herdr_mcp.contract import ContractIdentity, ContractIdentityInvalid, parse_identity
from herdr_mcp.errors import LocalFault, UsageFault
from herdr_mcp.records import RecordInvalid, atomic_write, load_strict, read_capped

SCHEMA_VERSION = 1
CONTROL_FILE = "runtime-control.json"
STATUS_FILE = "runtime-status.json"
LOCK_FILE = "generations.lock"
#: A/B plus history: more than a handful of live venvs is a leak, not a feature (original: 8).
MAX_GENERATIONS = 8
#: Observation bounds of the original: at least one check, at most 20.
MIN_CHECKS, MAX_CHECKS, DEFAULT_CHECKS = 1, 20, 3
DEFAULT_INTERVAL_MS = 500
#: An observation interval longer than a minute would stall an activation for up to 20 minutes.
MAX_INTERVAL_MS = 60_000
#: The control and status files are a few KiB; anything larger is not ours.
MAX_FILE_BYTES = 256 * 1024
#: How long a writer waits for another writer (an activation takes checks * interval).
LOCK_TIMEOUT_S = 30.0
GENERATION_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
PHASES = ("registered", "active", "standby", "rejected", "failed")


class GenerationError(UsageFault):
    """A generation command cannot be carried out as asked (an unknown or active generation, a
    bad id or endpoint): a stable `code` and an actionable `message`."""


class GenerationStateError(LocalFault, GenerationError):
    """The generations state on this workstation is unusable (an unreadable or corrupt control
    or status file, the lock held, a token file or runtime that cannot be used)."""


def check_generation_id(value: object) -> str:
    """`value` if it is a valid generation id, else `GenerationError("generation_id_invalid")`."""
    if not isinstance(value, str) or not GENERATION_ID.match(value):
        raise GenerationError(
            "generation_id_invalid", f"generation id {value!r} must match {GENERATION_ID.pattern}"
        )
    return value


def check_endpoint(value: object) -> str:
    """`value` if it is `http://127.0.0.1:<port>` or `http://[::1]:<port>` (no path), else refuse.

    Generations are reached only over loopback: a name (even `localhost`) could resolve elsewhere.
    """
    refuse = GenerationError(
        "endpoint_not_loopback",
        f"endpoint {value!r} is not a loopback endpoint: use http://127.0.0.1:<port> or http://[::1]:<port>",
    )
    if not isinstance(value, str):
        raise refuse
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise refuse from exc
    if parts.scheme != "http" or port is None or parts.path not in ("", "/"):
        raise refuse
    if parts.query or parts.fragment or parts.username or parts.password:
        raise refuse
    try:
        address = ipaddress.ip_address(parts.hostname or "")
    except ValueError as exc:
        raise refuse from exc
    if address not in (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")):
        raise refuse
    return value.rstrip("/")


@dataclass(frozen=True)
class Observation:
    """How many healthy `/health` answers, how far apart, a new active generation must give."""

    checks: int = DEFAULT_CHECKS
    interval_ms: int = DEFAULT_INTERVAL_MS

    def to_dict(self) -> dict[str, Any]:
        return {"checks": self.checks, "interval_ms": self.interval_ms}


@dataclass(frozen=True)
class Generation:
    """One runtime generation: where it listens and what it must prove before taking traffic."""

    generation: str
    endpoint: str
    expected_runtime_version: str | None = None
    expected_contract: ContractIdentity | None = None
    executable: str | None = None
    token_file: str | None = None
    provenance: Mapping[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"generation": self.generation, "endpoint": self.endpoint}
        if self.expected_runtime_version is not None:
            out["expected_runtime_version"] = self.expected_runtime_version
        if self.expected_contract is not None:
            out["expected_contract"] = self.expected_contract.to_dict()
        if self.executable is not None:
            out["executable"] = self.executable
        if self.token_file is not None:
            out["token_file"] = self.token_file
        if self.provenance is not None:
            out["provenance"] = dict(self.provenance)
        return out


@dataclass(frozen=True)
class ControlFile:
    """`runtime-control.json`: the operator's desired state, versioned by `revision`."""

    revision: int = 0
    desired_active: str | None = None
    generations: tuple[Generation, ...] = ()
    observation: Observation = field(default_factory=Observation)

    def find(self, generation: str) -> Generation:
        """The generation named `generation`, else `GenerationError("generation_unknown")`."""
        for spec in self.generations:
            if spec.generation == generation:
                return spec
        raise GenerationError(
            "generation_unknown", f"no generation {generation!r} is registered; see `generation status`"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "revision": self.revision,
            "desired_active": self.desired_active,
            "generations": [spec.to_dict() for spec in self.generations],
            "observation": self.observation.to_dict(),
        }

    @classmethod
    def from_json(cls, data: bytes) -> ControlFile:
        """Parse `runtime-control.json`; raises `GenerationError("control_invalid")`."""
        try:
            return _parse_control(_load_object(data))
        except (_Invalid, GenerationError) as exc:
            detail = exc.message if isinstance(exc, GenerationError) else str(exc)
            raise GenerationStateError("control_invalid", f"{CONTROL_FILE}: {detail}") from exc


@dataclass(frozen=True)
class Validation:
    """What the gate last learned about a generation."""

    ok: bool
    code: str | None = None
    runtime_version: str | None = None
    contract_hash: str | None = None
    tool_count: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "code": self.code,
            "runtime_version": self.runtime_version,
            "contract_hash": self.contract_hash,
            "tool_count": self.tool_count,
        }


@dataclass(frozen=True)
class GenerationStatus:
    generation: str
    phase: str = "registered"
    validation: Validation | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "phase": self.phase,
            "validation": None if self.validation is None else self.validation.to_dict(),
        }


@dataclass(frozen=True)
class StatusFile:
    """`runtime-status.json`: the active pointer the link follows, and how it got there."""

    processed_revision: int = 0
    outcome: str | None = None
    active: str | None = None
    previous: str | None = None
    last_good: str | None = None
    transition_seq: int = 0
    last_transition: str | None = None
    generations: tuple[GenerationStatus, ...] = ()

    def status_of(self, generation: str) -> GenerationStatus:
        for entry in self.generations:
            if entry.generation == generation:
                return entry
        return GenerationStatus(generation)

    def with_generation(self, entry: GenerationStatus) -> StatusFile:
        """A copy where `entry` replaces the entry of the same generation (or is appended)."""
        others = tuple(item for item in self.generations if item.generation != entry.generation)
        return replace(self, generations=(*others, entry))

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "processed_revision": self.processed_revision,
            "outcome": self.outcome,
            "active": self.active,
            "previous": self.previous,
            "last_good": self.last_good,
            "transition_seq": self.transition_seq,
            "last_transition": self.last_transition,
            "generations": [entry.to_dict() for entry in self.generations],
        }

    @classmethod
    def from_json(cls, data: bytes) -> StatusFile:
        """Parse `runtime-status.json`; raises `GenerationError("status_invalid")`."""
        try:
            return _parse_status(_load_object(data))
        except (_Invalid, GenerationError) as exc:
            detail = exc.message if isinstance(exc, GenerationError) else str(exc)
            raise GenerationStateError("status_invalid", f"{STATUS_FILE}: {detail}") from exc


# -- parsing ---------------------------------------------------------------------------------


class _Invalid(ValueError):
    """A field breaks the schema (turned into control_invalid / status_invalid at the boundary)."""


def _load_object(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_FILE_BYTES:
        raise _Invalid(f"larger than {MAX_FILE_BYTES} bytes")
    try:
        return load_strict(data)
    except RecordInvalid as exc:
        raise _Invalid(str(exc)) from exc


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Invalid(f"{where} must be an object")
    return value


def _fields(value: dict[str, Any], where: str, required: set[str], optional: set[str]) -> None:
    unknown = set(value) - required - optional
    if unknown:
        raise _Invalid(f"unknown field(s) in {where}: {', '.join(sorted(unknown))}")
    missing = required - set(value)
    if missing:
        raise _Invalid(f"missing field(s) in {where}: {', '.join(sorted(missing))}")


def _int(value: object, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _Invalid(f"{where} must be an integer in {low}..{high}")
    return value


def _str(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise _Invalid(f"{where} must be a non-empty string")
    return value


def _opt_str(value: object, where: str) -> str | None:
    return None if value is None else _str(value, where)


def _opt_id(value: object) -> str | None:
    return None if value is None else check_generation_id(value)


def _schema(value: dict[str, Any]) -> None:
    if value["schema_version"] != SCHEMA_VERSION or isinstance(value["schema_version"], bool):
        raise _Invalid(f"schema_version must be {SCHEMA_VERSION}")


def parse_contract(value: object, where: str) -> ContractIdentity:
    """A contract identity as `contract.parse_identity` reads it; raises `ValueError` otherwise."""
    try:
        return parse_identity(value, where)
    except ContractIdentityInvalid as exc:
        raise _Invalid(str(exc)) from None


def _parse_generation(value: object, index: int) -> Generation:
    where = f"generations[{index}]"
    raw = _object(value, where)
    _fields(
        raw,
        where,
        {"generation", "endpoint"},
        {"expected_runtime_version", "expected_contract", "executable", "token_file", "provenance"},
    )
    provenance: dict[str, str] | None = None
    if raw.get("provenance") is not None:
        items = _object(raw["provenance"], f"{where}.provenance")
        provenance = {key: _str(item, f"{where}.provenance.{key}") for key, item in items.items()}
    contract = raw.get("expected_contract")
    return Generation(
        generation=check_generation_id(raw["generation"]),
        endpoint=check_endpoint(raw["endpoint"]),
        expected_runtime_version=_opt_str(
            raw.get("expected_runtime_version"), f"{where}.expected_runtime_version"
        ),
        expected_contract=None
        if contract is None
        else parse_contract(contract, f"{where}.expected_contract"),
        executable=_opt_str(raw.get("executable"), f"{where}.executable"),
        token_file=_opt_str(raw.get("token_file"), f"{where}.token_file"),
        provenance=provenance,
    )


def _parse_control(raw: dict[str, Any]) -> ControlFile:
    _fields(
        raw, "document", {"schema_version", "revision", "desired_active", "generations", "observation"}, set()
    )
    _schema(raw)
    listed = raw["generations"]
    if not isinstance(listed, list) or not 1 <= len(listed) <= MAX_GENERATIONS:
        raise _Invalid(f"generations must be a list of 1..{MAX_GENERATIONS} entries")
    generations = tuple(_parse_generation(item, index) for index, item in enumerate(listed))
    _check_unique(generations)
    observation = _object(raw["observation"], "observation")
    _fields(observation, "observation", {"checks", "interval_ms"}, set())
    control = ControlFile(
        revision=_int(raw["revision"], "revision", 0, 2**53 - 1),
        desired_active=_opt_id(raw["desired_active"]),
        generations=generations,
        observation=Observation(
            checks=_int(observation["checks"], "observation.checks", MIN_CHECKS, MAX_CHECKS),
            interval_ms=_int(observation["interval_ms"], "observation.interval_ms", 0, MAX_INTERVAL_MS),
        ),
    )
    if control.desired_active is not None:
        control.find(control.desired_active)
    return control


def _check_unique(generations: tuple[Generation, ...]) -> None:
    ids = [spec.generation for spec in generations]
    if len(set(ids)) != len(ids):
        raise _Invalid("generation ids must be unique")
    endpoints = [spec.endpoint for spec in generations]
    if len(set(endpoints)) != len(endpoints):
        raise _Invalid("two generations cannot share an endpoint")


def _parse_validation(value: object, where: str) -> Validation | None:
    if value is None:
        return None
    raw = _object(value, where)
    _fields(raw, where, {"ok", "code", "runtime_version", "contract_hash", "tool_count"}, set())
    if not isinstance(raw["ok"], bool):
        raise _Invalid(f"{where}.ok must be a boolean")
    count = raw["tool_count"]
    return Validation(
        ok=raw["ok"],
        code=_opt_str(raw["code"], f"{where}.code"),
        runtime_version=_opt_str(raw["runtime_version"], f"{where}.runtime_version"),
        contract_hash=_opt_str(raw["contract_hash"], f"{where}.contract_hash"),
        tool_count=None if count is None else _int(count, f"{where}.tool_count", 0, 10_000),
    )


def _parse_status(raw: dict[str, Any]) -> StatusFile:
    _fields(
        raw,
        "document",
        {
            "schema_version", "processed_revision", "outcome", "active", "previous", "last_good",
            "transition_seq", "last_transition", "generations",
        },
        set(),
    )  # fmt: skip
    _schema(raw)
    listed = raw["generations"]
    if not isinstance(listed, list) or len(listed) > MAX_GENERATIONS:
        raise _Invalid(f"generations must be a list of at most {MAX_GENERATIONS} entries")
    entries: list[GenerationStatus] = []
    for index, item in enumerate(listed):
        where = f"generations[{index}]"
        entry = _object(item, where)
        _fields(entry, where, {"generation", "phase", "validation"}, set())
        if entry["phase"] not in PHASES:
            raise _Invalid(f"{where}.phase must be one of {', '.join(PHASES)}")
        entries.append(
            GenerationStatus(
                generation=check_generation_id(entry["generation"]),
                phase=entry["phase"],
                validation=_parse_validation(entry["validation"], f"{where}.validation"),
            )
        )
    return StatusFile(
        processed_revision=_int(raw["processed_revision"], "processed_revision", 0, 2**53 - 1),
        outcome=_opt_str(raw["outcome"], "outcome"),
        active=_opt_id(raw["active"]),
        previous=_opt_id(raw["previous"]),
        last_good=_opt_id(raw["last_good"]),
        transition_seq=_int(raw["transition_seq"], "transition_seq", 0, 2**53 - 1),
        last_transition=_opt_str(raw["last_transition"], "last_transition"),
        generations=tuple(entries),
    )


# -- the state dir ---------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerationStore:
    """The two files and the lock (`generations.lock`, next to the control file) that serializes
    their writers."""

    control_path: Path
    status_path: Path

    @classmethod
    def in_dir(cls, state_dir: Path) -> GenerationStore:
        """The store of a generations state dir (`runtime-control.json`, `runtime-status.json`)."""
        return cls(state_dir / CONTROL_FILE, state_dir / STATUS_FILE)

    @property
    def state_dir(self) -> Path:
        return self.control_path.parent

    def read_control(self) -> ControlFile:
        """The control file, or an empty one (revision 0) when none was written yet."""
        data = _read_capped(self.control_path)
        return ControlFile() if data is None else ControlFile.from_json(data)

    def read_status(self) -> StatusFile:
        """The status file, or an empty one when no activation ran yet."""
        data = _read_capped(self.status_path)
        return StatusFile() if data is None else StatusFile.from_json(data)

    @contextlib.contextmanager
    def locked(self, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
        """Hold the exclusive writer lock; `GenerationError("control_locked")` after `timeout_s`."""
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise GenerationStateError(
                            "control_locked",
                            "another generation command (an activation?) holds the lock; retry when done",
                        ) from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)

    def write_control(self, control: ControlFile, *, expected_revision: int) -> ControlFile:
        """Write `control` as revision `expected_revision + 1` if the file is still at
        `expected_revision`, else raise `GenerationError("control_revision_conflict")`. Takes the
        lock (not reentrant: inside `locked()` use `write_control_locked`). Returns what was
        written."""
        with self.locked():
            return self.write_control_locked(control, expected_revision=expected_revision)

    def write_control_locked(self, control: ControlFile, *, expected_revision: int) -> ControlFile:
        """`write_control` for a caller that already holds `locked()`."""
        current = self.read_control().revision
        if current != expected_revision:
            raise GenerationError(
                "control_revision_conflict",
                f"{CONTROL_FILE} is at revision {current}, not {expected_revision}: "
                "another command changed it; read it again and retry",
            )
        written = replace(control, revision=expected_revision + 1)
        # Round-trip through the parse boundary: we never write what we would refuse to read.
        payload = _dump(written.to_dict())
        ControlFile.from_json(payload)
        atomic_write(self.control_path, payload)
        return written

    def write_status_locked(self, status: StatusFile) -> None:
        """Replace the status file (only the lock holder writes it)."""
        payload = _dump(status.to_dict())
        StatusFile.from_json(payload)
        atomic_write(self.status_path, payload)


def _dump(document: dict[str, Any]) -> bytes:
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _read_capped(path: Path) -> bytes | None:
    try:
        return read_capped(path, MAX_FILE_BYTES)
    except OSError as exc:
        raise GenerationStateError("state_unreadable", f"cannot open {path}: {exc.strerror}") from exc
