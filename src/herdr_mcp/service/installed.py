"""`<config dir>/services.json`: which herdr-mcp executable the installed services run.

Written by `service install` after the jobs loaded, removed by `service uninstall`. The updater
reads it so that it never retires the generation whose venv holds that executable: the link,
the runtime job (`generation up`) and the daily update job run from it, and would fail at their
next start if that venv were deleted. No secrets; 0600 like every file herdr-mcp writes there.
"""

from __future__ import annotations

import json
from pathlib import Path

from herdr_mcp.generations.control import atomic_write

SERVICES_FILE = "services.json"
MAX_BYTES = 16 * 1024


def record_services_executable(config_dir: Path, executable: Path) -> None:
    atomic_write(config_dir / SERVICES_FILE, json.dumps({"executable": str(executable)}).encode() + b"\n")


def clear_services_executable(config_dir: Path) -> None:
    (config_dir / SERVICES_FILE).unlink(missing_ok=True)


def services_executable(config_dir: Path) -> Path | None:
    """The executable the installed services run, or None (no services, or an unreadable file:
    then nothing is protected by it, and the updater keeps only active and previous)."""
    try:
        data = (config_dir / SERVICES_FILE).read_bytes()[: MAX_BYTES + 1]
        document = json.loads(data) if len(data) <= MAX_BYTES else None
    except (OSError, ValueError):
        return None
    value = document.get("executable") if isinstance(document, dict) else None
    return Path(value) if isinstance(value, str) and value else None
