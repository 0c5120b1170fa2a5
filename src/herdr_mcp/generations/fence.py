"""The update fence: a file that says "this workstation must not update itself".

`service uninstall` sets it (before it unloads anything, so a scheduled `update auto` that starts
meanwhile already sees it); only `service install` clears it. While it is set every update path
refuses with `FenceSet` (code `update_fenced`), naming the reason and when it was set.

The fence is `<config dir>/update-fence.json`, 0600, written atomically:
`{"schema_version": 1, "reason": "...", "set_at": "2026-11-29T19:00:00.000Z"}`. A fence file that
exists but cannot be read or parsed still fences (`FailRule.CLOSED`): its reason then says so.

It lives with the generations: it fences every change of which generation runs that the
workstation makes by itself (`update`, `update auto`, `dev sync`, the macOS service rollback).
`service` writes it and `update` and `dev` read it, so it sits below both of them.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herdr_mcp.errors import RefusedFault
from herdr_mcp.layout import FENCE_FILE, Layout
from herdr_mcp.records import FailRule, RecordInvalid, RecordKind

SCHEMA_VERSION = 1
#: A fence file is one short line; anything larger is not ours (and still fences).
MAX_FENCE_BYTES = 16 * 1024
FENCE_RECORD = RecordKind(FENCE_FILE, MAX_FENCE_BYTES, FailRule.CLOSED, SCHEMA_VERSION)


class FenceSet(RefusedFault):
    """An update was refused because the update fence is set (code `update_fenced`)."""

    def __init__(self, fence: Fence) -> None:
        self.fence = fence
        super().__init__(
            "update_fenced",
            f"updates are fenced since {fence.set_at or 'an unknown time'} ({fence.reason}); "
            "run `herdr-mcp service install` to clear the fence",
        )


@dataclass(frozen=True)
class Fence:
    """Why and when updates were fenced (`set_at` is None only for an unreadable fence file)."""

    reason: str
    set_at: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "set_at": self.set_at}


def fence_path(config_dir: Path) -> Path:
    return Layout(config_dir).fence_file


def set_fence(config_dir: Path, reason: str, *, now: datetime.datetime | None = None) -> Fence:
    """Fence updates with `reason` (replacing any earlier fence); returns the fence written."""
    moment = now or datetime.datetime.now(datetime.UTC)
    fence = Fence(reason=reason, set_at=_timestamp(moment))
    FENCE_RECORD.write(fence_path(config_dir), fence.to_dict())
    return fence


def clear_fence(config_dir: Path) -> bool:
    """Remove the fence; True when one was set. Only `service install` calls this."""
    try:
        fence_path(config_dir).unlink()
    except FileNotFoundError:
        return False
    return True


def read_fence(config_dir: Path) -> Fence | None:
    """The fence, or None when updates are not fenced. Never raises for a bad fence file: an
    unreadable or malformed one is a fence whose reason says what is wrong with it."""
    path = fence_path(config_dir)
    try:
        document = FENCE_RECORD.read(path)
    except RecordInvalid as exc:
        if isinstance(exc.__cause__, OSError):
            return Fence(reason=f"fence file {path} is unreadable ({exc.__cause__.strerror})", set_at=None)
        return Fence(reason=f"fence file {path} is malformed", set_at=None)
    if document is None:
        return None
    return _parse(document) or Fence(reason=f"fence file {path} is malformed", set_at=None)


def check_fence(config_dir: Path) -> None:
    """Return when updates may run; raise `FenceSet` while the fence is set."""
    fence = read_fence(config_dir)
    if fence is not None:
        raise FenceSet(fence)


def _parse(document: dict[str, Any]) -> Fence | None:
    if set(document) != {"schema_version", "reason", "set_at"}:
        return None
    reason, set_at = document["reason"], document["set_at"]
    if not isinstance(reason, str) or not reason:
        return None
    if not isinstance(set_at, str):
        return None
    return Fence(reason=reason, set_at=set_at)


def _timestamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
