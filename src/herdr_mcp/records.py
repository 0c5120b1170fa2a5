"""Small records on the workstation: read capped and strict, written atomically as 0600.

Every small JSON file herdr-mcp keeps under the config dir (the generation control and status
files, the update fence, `services.json`, the settings, the highest-seen version, the DEV plane
marker, the service rollback record) is read and written here, so each one gets the same rules:

- read: never through a symlink, at most `cap` bytes (more is "too large", not read on);
- parse: strict JSON (`strict_json.unique_keys`: a key named twice is refused; no NaN or
  Infinity), an object, and, where the record has one, the expected `schema_version`;
- write: a temp file in the same directory (0600, `O_EXCL`, never through a symlink), fsync,
  `os.replace`, fsync of the directory: a reader sees the old record or the new one, never half.

What a record that is present but bad means is a choice made per record, where it is defined,
as a `FailRule`: `CLOSED` (the reader raises; nothing that depends on the record proceeds: the
fence still fences, `services.json` still protects, a corrupt control file stops the gate) or
`OPEN` (the reader treats it as absent: only where that is safe, as for `runtime.pid`, whose loss
means the supervisor starts the runtime again). docs/updater.md lists the records and their rules.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herdr_mcp.errors import LocalFault
from herdr_mcp.strict_json import JsonLimitExceeded, JsonLimits, loads_bounded

#: What a record may hold (docs/runtime.md "Parse boundaries"): each kind caps its own size
#: (at most 256 KiB today); a record is a few fields and lists of generations or services.
RECORD_LIMITS = JsonLimits(max_bytes=1024 * 1024, max_items=10_000)


class FailRule(enum.Enum):
    """What a present but unreadable or malformed record means to its reader."""

    #: The reader raises `RecordInvalid`: whatever depends on the record refuses.
    CLOSED = "closed"
    #: The reader sees no record.
    OPEN = "open"


class RecordInvalid(LocalFault, ValueError):
    """A record file is unreadable, too large, not strict JSON, or of another schema version.

    Each record's owner turns it into its own code (`services_record_invalid`, ...); one that
    escapes is still a local fault with a code, never a traceback."""

    def __init__(self, message: str) -> None:
        super().__init__("record_invalid", message)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class RecordKind:
    """One kind of record: its file name, its size cap, its schema version (None: the record
    has no `schema_version` field) and its fail rule."""

    name: str
    max_bytes: int
    fail: FailRule
    schema_version: int | None = None

    def read(self, path: Path) -> dict[str, Any] | None:
        """The record's JSON object, or None when there is no file (or, under `FailRule.OPEN`,
        when it is bad). Raises `RecordInvalid` for a bad file under `FailRule.CLOSED`."""
        try:
            data = read_capped(path, self.max_bytes)
            return None if data is None else self.parse(data)
        except (OSError, RecordInvalid) as exc:
            if self.fail is FailRule.OPEN:
                return None
            if isinstance(exc, OSError):
                raise RecordInvalid(f"cannot read {path}: {exc.strerror or exc}") from exc
            raise RecordInvalid(f"{path}: {exc}") from exc

    def parse(self, data: bytes) -> dict[str, Any]:
        """`data` as this record's JSON object; raises `RecordInvalid`."""
        if len(data) > self.max_bytes:
            raise RecordInvalid(f"larger than {self.max_bytes} bytes")
        document = load_strict(data)
        if self.schema_version is not None:
            version = document.get("schema_version")
            if isinstance(version, bool) or version != self.schema_version:
                raise RecordInvalid(f"schema_version must be {self.schema_version}")
        return document

    def write(self, path: Path, document: dict[str, Any]) -> None:
        """Write `document` (with this kind's `schema_version` when it has one) atomically."""
        if self.schema_version is not None:
            document = {"schema_version": self.schema_version, **document}
        atomic_write(path, dump(document))


def load_strict(data: bytes, limits: JsonLimits = RECORD_LIMITS) -> dict[str, Any]:
    """`data` as a strict JSON object (UTF-8, every key once, no NaN/Infinity) within `limits`;
    raises `RecordInvalid`."""
    try:
        document = loads_bounded(data, limits)
    except JsonLimitExceeded as exc:
        raise RecordInvalid(f"{exc.code}: {exc.message}") from exc
    except ValueError as exc:
        raise RecordInvalid(f"not JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise RecordInvalid("not a JSON object")
    return document


def dump(document: dict[str, Any]) -> bytes:
    """The bytes a record is written as: sorted, indented JSON and a final newline."""
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")


def read_capped(path: Path, cap: int) -> bytes | None:
    """At most `cap` + 1 bytes of `path` (more than `cap` tells the caller it is too large),
    never through a symlink; None when there is no such file. Other failures raise `OSError`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read(cap + 1)


def atomic_write(path: Path, payload: bytes, *, mode: int = 0o600, create_parent: bool = True) -> None:
    """Write `payload` to `path` as `mode` (0600 unless a public file says otherwise): temp file
    in the same dir, fsync, `os.replace`, fsync dir.

    The parent is created 0700 when missing (unless not `create_parent`). Raises `OSError`; the
    temp file never stays behind.
    """
    if create_parent:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            if mode != 0o600:
                os.fchmod(handle.fileno(), mode)
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
