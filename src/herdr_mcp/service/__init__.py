"""Workstation services: launchd agents (macOS) and systemd --user units (Linux).

`units` renders the job definitions and builds the load/unload commands; `fence` is the update
fence (`service uninstall` sets it, only `service install` clears it, every update path checks
it); `rollback` is the macOS service rollback record and `herdr-mcp rollback`; their
command line (`herdr-mcp service install|uninstall|status`, `herdr-mcp rollback`) is `cli/service.py`.
"""

from __future__ import annotations

from herdr_mcp.service.fence import Fence, FenceSet, check_fence, clear_fence, read_fence, set_fence
from herdr_mcp.service.units import CommandResult, Platform, Runner, ServiceConfig, ServiceError

__all__ = [
    "CommandResult",
    "Fence",
    "FenceSet",
    "Platform",
    "Runner",
    "ServiceConfig",
    "ServiceError",
    "check_fence",
    "clear_fence",
    "read_fence",
    "set_fence",
]
