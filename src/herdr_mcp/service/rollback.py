"""The service rollback record (macOS) and `herdr-mcp rollback`.

A successful `service install` with launchd records what it replaced: the previous plists and the
generation that was active before it, in `<config dir>/service-rollback.json` (0600, atomic):

    {"schema_version": 1, "platform": "launchd", "recorded_at": "...Z",
     "previous_generation": "gen-a", "installed_generation": "gen-b",
     "previous_plists": {"dev.herdr.mcp.runtime.plist": "<?xml ...", ...}}

Nothing is recorded when there is nothing to go back to (no plist before, or no active
generation). Linux records nothing: `herdr-mcp rollback` is macOS only (on Linux use
`herdr-mcp generation rollback`).

`rollback_service` re-validates before it changes anything, in this order:

1. the update fence is not set (uninstalled services are not rolled back into place);
2. the record parses (one parse boundary, unknown fields refused);
3. every recorded plist parses, is one of our agents, and its program still exists;
4. the previous generation passes the activation gate and becomes active (`activate`);
5. only then the plists are written back and each agent is booted out and bootstrapped again;
6. the record is consumed (removed), so a second `rollback` does not flip back.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import plistlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herdr_mcp.generations import ActivationResult, GenerationError, GenerationStore, TokenReader, activate
from herdr_mcp.generations.control import check_generation_id
from herdr_mcp.generations.fence import check_fence
from herdr_mcp.layout import SERVICE_ROLLBACK_FILE, Layout
from herdr_mcp.records import FailRule, RecordKind, atomic_write, read_capped
from herdr_mcp.service.units import (
    JOBS,
    LABEL_PREFIX,
    Runner,
    ServiceError,
    ServiceRefused,
    launchd_bootout,
    launchd_bootstrap,
    launchd_label,
    write_files,
)

ROLLBACK_FILE = SERVICE_ROLLBACK_FILE
SCHEMA_VERSION = 1
#: Three plists of ~1 KiB each; anything much larger is not a record we wrote.
MAX_RECORD_BYTES = 256 * 1024
#: A bad record fails closed: `rollback` refuses (`service_rollback_invalid`) rather than guess.
ROLLBACK_RECORD = RecordKind(SERVICE_ROLLBACK_FILE, MAX_RECORD_BYTES, FailRule.CLOSED, SCHEMA_VERSION)
_PLIST_NAMES = frozenset(f"{launchd_label(job)}.plist" for job in JOBS)


@dataclass(frozen=True)
class ServiceRollback:
    """What a successful macOS install replaced."""

    previous_generation: str
    installed_generation: str | None
    previous_plists: Mapping[str, bytes]
    recorded_at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "platform": "launchd",
            "recorded_at": self.recorded_at,
            "previous_generation": self.previous_generation,
            "installed_generation": self.installed_generation,
            "previous_plists": {name: data.decode("utf-8") for name, data in self.previous_plists.items()},
        }

    @classmethod
    def from_json(cls, data: bytes) -> ServiceRollback:
        """Parse the record; raises `ServiceError("service_rollback_invalid")`."""
        try:
            return _parse(data)
        except (ValueError, UnicodeError, TypeError, KeyError) as exc:
            raise ServiceError(
                "service_rollback_invalid",
                f"{ROLLBACK_FILE} is not a service rollback record ({exc}); reinstall with "
                "`herdr-mcp service install`",
            ) from exc


def _parse(data: bytes) -> ServiceRollback:
    document = ROLLBACK_RECORD.parse(data)
    fields = {
        "schema_version", "platform", "recorded_at", "previous_generation", "installed_generation",
        "previous_plists",
    }  # fmt: skip
    if set(document) != fields:
        raise ValueError(f"fields must be exactly {', '.join(sorted(fields))}")
    if document["schema_version"] != SCHEMA_VERSION or document["platform"] != "launchd":
        raise ValueError(f"schema_version must be {SCHEMA_VERSION} and platform launchd")
    plists = document["previous_plists"]
    if not isinstance(plists, dict) or not plists or not set(plists) <= _PLIST_NAMES:
        raise ValueError(f"previous_plists must map some of {', '.join(sorted(_PLIST_NAMES))}")
    if not all(isinstance(text, str) for text in plists.values()) or not isinstance(
        document["recorded_at"], str
    ):
        raise TypeError("previous_plists values and recorded_at must be strings")
    installed = document["installed_generation"]
    try:
        return ServiceRollback(
            previous_generation=check_generation_id(document["previous_generation"]),
            installed_generation=None if installed is None else check_generation_id(installed),
            previous_plists={name: text.encode("utf-8") for name, text in plists.items()},
            recorded_at=document["recorded_at"],
        )
    except GenerationError as exc:  # an id that breaks the generation id pattern
        raise ValueError(exc.message) from exc


def record_path(config_dir: Path) -> Path:
    return Layout(config_dir).service_rollback_file


def record_rollback(
    config_dir: Path,
    previous_plists: Mapping[str, bytes],
    previous_generation: str | None,
    installed_generation: str | None,
) -> ServiceRollback | None:
    """Write the record of a successful install; None (and any stale record removed) when there
    is nothing to go back to."""
    ours = {name: data for name, data in previous_plists.items() if name in _PLIST_NAMES}
    if not ours or previous_generation is None:
        discard_rollback(config_dir)
        return None
    moment = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
    record = ServiceRollback(
        previous_generation=previous_generation,
        installed_generation=installed_generation,
        previous_plists=ours,
        recorded_at=moment.replace("+00:00", "Z"),
    )
    payload = (json.dumps(record.to_dict(), indent=2, sort_keys=True) + "\n").encode("utf-8")
    ServiceRollback.from_json(payload)
    atomic_write(record_path(config_dir), payload)
    return record


def read_rollback(config_dir: Path) -> ServiceRollback | None:
    """The recorded rollback, None when there is none; raises `service_rollback_invalid`."""
    data = read_capped(record_path(config_dir), MAX_RECORD_BYTES)
    return None if data is None else ServiceRollback.from_json(data)


def discard_rollback(config_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        record_path(config_dir).unlink()


def _check_plist(name: str, data: bytes) -> None:
    """Step 3: a recorded plist is one of our agents and its program is still there."""
    refuse = ServiceError(
        "service_rollback_invalid",
        f"the recorded {name} is no longer usable; reinstall with `herdr-mcp service install`",
    )
    try:
        plist = plistlib.loads(data)
    except (ValueError, plistlib.InvalidFileException) as exc:
        raise refuse from exc
    arguments = plist.get("ProgramArguments") if isinstance(plist, dict) else None
    label = plist.get("Label") if isinstance(plist, dict) else None
    if f"{label}.plist" != name or not isinstance(label, str) or not label.startswith(LABEL_PREFIX):
        raise refuse
    if not isinstance(arguments, list) or not arguments or not all(isinstance(a, str) for a in arguments):
        raise refuse
    program = Path(arguments[0])
    if not program.is_file() or not os.access(program, os.X_OK):
        raise ServiceError(
            "service_rollback_invalid",
            f"{name} runs {program}, which no longer exists; reinstall with `herdr-mcp service install`",
        )


def rollback_service(
    config_dir: Path,
    store: GenerationStore,
    target_dir: Path,
    uid: int,
    runner: Runner,
    *,
    token_reader: TokenReader | None = None,
    sleep: Callable[[float], None] | None = None,
) -> ActivationResult:
    """Re-validate and re-activate the recorded service rollback (module docstring, steps 1-6).

    Raises `FenceSet` (step 1), `ServiceError` (`service_rollback_missing`,
    `service_rollback_invalid`, `rollback_refused`, `launchctl_failed`) and the `GenerationError`s
    of `activate`.
    """
    check_fence(config_dir)
    record = read_rollback(config_dir)
    if record is None:
        raise ServiceError(
            "service_rollback_missing",
            "no service rollback is recorded (only a successful `service install` on macOS "
            "records one); see `herdr-mcp generation rollback`",
        )
    for name, data in sorted(record.previous_plists.items()):
        _check_plist(name, data)
    extra: dict[str, Any] = {} if sleep is None else {"sleep": sleep}
    result = activate(store, record.previous_generation, token_reader=token_reader, **extra)
    if not result.ok:
        raise ServiceRefused(
            "rollback_refused",
            f"the previous generation {record.previous_generation} did not pass the gate "
            f"({result.outcome}); the services and the active generation are unchanged: {result.message}",
        )
    for path in write_files(target_dir, record.previous_plists):
        runner(launchd_bootout(uid, path.stem))  # not loaded is fine: we load it next
        loaded = runner(launchd_bootstrap(uid, path))
        if loaded.returncode != 0:
            raise ServiceError(
                "launchctl_failed",
                f"launchctl bootstrap {path} failed ({loaded.returncode}): {loaded.stderr.strip()}",
            )
    discard_rollback(config_dir)
    return result
