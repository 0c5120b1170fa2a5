"""The link `herdr-mcp start` runs detached, without services: start it, find it, stop it.

`herdr-mcp start` (without `--service` or `--foreground`) runs `<executable> link --port <port>`
in its own session, so it keeps running after the terminal closes, with its output appended to
`<config dir>/link.log` and `{"pid", "executable", "url"}` in `<config dir>/link.pid` (0600).
`herdr-mcp stop` stops it again, and only a process that still runs that executable (a recycled
pid is left alone: `generations/process.py`). A link started by the services is not this one:
the service manager owns it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from herdr_mcp.generations.process import PID_RECORD, launch_detached, recorded_pid, stop_recorded
from herdr_mcp.layout import CONFIG_DIR_ENV, LINK_LOG_FILE, LINK_PID_FILE
from herdr_mcp.records import atomic_write

#: The line `herdr-mcp link` prints first, naming its URL.
LINK_SERVING = "herdr-mcp link serving "
#: A link binds and prints its URL in well under a second; a cold start on a loaded disk takes longer.
LINK_START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class DetachedLink:
    pid: int
    url: str
    log: Path


def running_link(config_dir: Path) -> DetachedLink | None:
    """The detached link of `config_dir` if it still runs, else None."""
    path = config_dir / LINK_PID_FILE
    pid = recorded_pid(path)
    if pid is None:
        return None
    document = PID_RECORD.read(path) or {}
    url = document.get("url")
    return DetachedLink(pid, url if isinstance(url, str) else "?", config_dir / LINK_LOG_FILE)


def start_link(executable: Path, config_dir: Path, port: int) -> DetachedLink:
    """Run the link detached (module docstring) and wait until it serves. Raises
    `GenerationStateError("runtime_start_failed")` with the tail of its log when it does not
    (a busy port: another link, perhaps the services')."""
    config_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    pid_path, log = config_dir / LINK_PID_FILE, config_dir / LINK_LOG_FILE
    env = {**os.environ, CONFIG_DIR_ENV: str(config_dir)}
    env.pop("PYTHONPATH", None)  # the link runs its own venv's code
    command = [str(executable), "link", "--port", str(port)]
    pid, url = launch_detached(
        executable, command, env, log, pid_path, LINK_SERVING, timeout_s=LINK_START_TIMEOUT_S
    )
    record = {"pid": pid, "executable": str(executable), "url": url.strip()}
    atomic_write(pid_path, json.dumps(record).encode() + b"\n")
    return DetachedLink(pid, url.strip(), log)


def stop_link(config_dir: Path) -> bool:
    """Stop the detached link (SIGTERM: calls in flight get their time); True if one ran."""
    return stop_recorded(config_dir / LINK_PID_FILE)
