"""`<config dir>/services.json`: which herdr-mcp executable the installed services run.

Written by `service install` after the jobs loaded, removed by `service uninstall`. The updater
reads it so that it never retires the generation whose venv holds that executable: the link,
the runtime job (`generation up`) and the daily update job run from it, and would fail at their
next start if that venv were deleted. No secrets; 0600 like every file herdr-mcp writes there.
It lives with the generations, not the services: it says which generation must not be retired,
and its readers (`update`, the DEV plane, `start`) sit above `service` or beside it.

The record fails closed (`records.FailRule.CLOSED`): a file that is present but unreadable or
malformed raises `GenerationStateError("services_record_invalid")` (exit 4), so an update or a
DEV sync refuses before it retires anything, instead of reading "no services" and deleting the
venv they run from.
"""

from __future__ import annotations

from pathlib import Path

from herdr_mcp.generations.control import GenerationStateError
from herdr_mcp.layout import SERVICES_FILE, Layout
from herdr_mcp.records import FailRule, RecordInvalid, RecordKind

SERVICES_RECORD = RecordKind(SERVICES_FILE, max_bytes=16 * 1024, fail=FailRule.CLOSED)


def record_services_executable(config_dir: Path, executable: Path) -> None:
    SERVICES_RECORD.write(Layout(config_dir).services_file, {"executable": str(executable)})


def clear_services_executable(config_dir: Path) -> None:
    Layout(config_dir).services_file.unlink(missing_ok=True)


def services_executable(config_dir: Path) -> Path | None:
    """The executable the installed services run, or None when no services are recorded.

    Raises `GenerationStateError("services_record_invalid")` for a file that is there but unreadable or
    not `{"executable": "<path>"}` (fail closed: see the module docstring)."""
    path = Layout(config_dir).services_file
    try:
        document = SERVICES_RECORD.read(path)
    except RecordInvalid as exc:
        raise _invalid(path, str(exc)) from exc
    if document is None:
        return None
    value = document.get("executable")
    if set(document) != {"executable"} or not isinstance(value, str) or not value:
        raise _invalid(path, 'not {"executable": "<path>"}')
    return Path(value)


def _invalid(path: Path, detail: str) -> GenerationStateError:
    return GenerationStateError(
        "services_record_invalid",
        f"{detail}; nothing is retired while it is unreadable: run `herdr-mcp service install` to "
        f"rewrite it (or remove {path} if no services are installed)",
    )
