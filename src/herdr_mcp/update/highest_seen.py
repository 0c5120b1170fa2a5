"""The persisted highest-seen release version: this workstation's protection against downgrades.

A small JSON file, `{"version": "1.2.3"}`, mode 0600. It is raised only by `record_admitted`,
which takes a `TrustedRelease` (so only a release that passed admission can raise it), and never
lowered. Writes are atomic (`records.atomic_write`: temp file in the same directory, fsync,
`os.replace`, fsync of the directory) and serialized by an exclusive `flock` on a sibling
`.lock` file, so two updaters racing cannot lower it either.

A missing file means nothing was recorded yet (None). A file that exists but cannot be read or
parsed is an error, never None (`FailRule.CLOSED`): silently forgetting the floor would re-open
downgrades.

Errors are the local disk's fault: `HighestSeenError` (a `LocalStateError`) with the codes
`highest_seen_unreadable`, `highest_seen_corrupt` and `highest_seen_unwritable`.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from packaging.version import InvalidVersion, Version

from herdr_mcp.layout import HIGHEST_SEEN_FILE
from herdr_mcp.records import FailRule, RecordInvalid, RecordKind, atomic_write
from herdr_mcp.update.admission import TrustedRelease
from herdr_mcp.update.errors import LocalStateError

#: The file holds one short version string; anything larger is not ours.
MAX_HIGHEST_SEEN_BYTES = 4096
HIGHEST_SEEN_RECORD = RecordKind(HIGHEST_SEEN_FILE, MAX_HIGHEST_SEEN_BYTES, FailRule.CLOSED)


class HighestSeenError(LocalStateError):
    """The highest-seen file cannot be read, parsed or written; `code` is stable."""


def read_highest_seen(path: Path) -> Version | None:
    """The recorded highest-seen version, or None when no file exists yet.

    Raises `HighestSeenError` (`highest_seen_unreadable`, `highest_seen_corrupt`).
    """
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_HIGHEST_SEEN_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise HighestSeenError("highest_seen_unreadable", f"cannot read {path}: {exc.strerror}") from None
    return _parse(data, path)


def record_admitted(path: Path, release: TrustedRelease) -> Version:
    """Raise the highest-seen version in `path` to `release`'s version, never lowering it.

    Returns the version now recorded (the release's, or a higher one already there). Creates the
    parent directory (0700) if needed. Raises `HighestSeenError`.
    """
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise HighestSeenError(
            "highest_seen_unwritable", f"cannot create {path.parent}: {exc.strerror}"
        ) from None
    with _exclusive(path):
        current = read_highest_seen(path)
        if current is not None and current >= release.version:
            return current
        _write_atomically(path, json.dumps({"version": release.manifest.version}).encode() + b"\n")
        return release.version


def _parse(data: bytes, path: Path) -> Version:
    try:
        document = HIGHEST_SEEN_RECORD.parse(data)
    except RecordInvalid as exc:
        raise HighestSeenError("highest_seen_corrupt", f"{path}: {exc}") from None
    if set(document) != {"version"} or not isinstance(document["version"], str):
        raise HighestSeenError("highest_seen_corrupt", f'{path} is not {{"version": "<version>"}}')
    try:
        return Version(document["version"])
    except InvalidVersion:
        raise HighestSeenError("highest_seen_corrupt", f"{path} holds no valid version") from None


@contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    lock_path = path.with_name(path.name + ".lock")
    try:
        handle = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise HighestSeenError(
            "highest_seen_unwritable", f"cannot lock {lock_path}: {exc.strerror}"
        ) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def _write_atomically(path: Path, data: bytes) -> None:
    try:
        atomic_write(path, data)
    except OSError as exc:
        raise HighestSeenError("highest_seen_unwritable", f"cannot write {path}: {exc.strerror}") from None
