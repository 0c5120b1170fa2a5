"""Workstation services: launchd agents (macOS) and systemd --user units (Linux).

`units` renders the job definitions and builds the load/unload commands; `install` is the install
transaction and its inverse, which also set and clear the update fence and write the record of
the executable the services run (both `generations/`: `fence.py`, `installed.py`, since the
updater, the DEV plane and `start` read them); `rollback` is the macOS service rollback record
and `herdr-mcp rollback`; their command line (`herdr-mcp service install|uninstall|status`,
`herdr-mcp rollback`) is `cli/service.py`.
"""

from __future__ import annotations

from herdr_mcp.service.units import CommandResult, Platform, Runner, ServiceConfig, ServiceError

__all__ = [
    "CommandResult",
    "Platform",
    "Runner",
    "ServiceConfig",
    "ServiceError",
]
