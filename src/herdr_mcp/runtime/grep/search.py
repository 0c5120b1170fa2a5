"""The entry of herdr_fs_grep's search: rg when it is on PATH (unless the caller asks for
Python), else the Python engine, both within one deadline."""

from __future__ import annotations

import shutil
import time
from typing import Literal

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.grep.python_engine import grep_python
from herdr_mcp.runtime.grep.query import GrepEngine, GrepQuery, Matches
from herdr_mcp.runtime.grep.rg import grep_rg


def engine_in_use() -> Literal["rg", "python"]:
    """The engine an `auto` search would use right now (what /health reports)."""
    return "rg" if shutil.which("rg") is not None else "python"


def search(
    query: GrepQuery, matches: Matches, *, engine: GrepEngine, timeout_s: float
) -> Literal["rg", "python"]:
    """Fill `matches` for `query` with rg (when on PATH, unless `engine` says python) or Python.

    Returns the engine used. Raises ToolError: `engine_unavailable` (engine="rg" without rg, or
    a Python engine that could not run), `pattern_invalid`, path codes for a single-file target,
    and `grep_timeout` when the deadline (`timeout_s` from now) passed first.
    """
    deadline = time.monotonic() + timeout_s
    rg = shutil.which("rg") if engine != "python" else None
    if engine == "rg" and rg is None:
        raise ToolError("engine_unavailable", "ripgrep (rg) is not installed; use engine='python' or 'auto'.")
    used: Literal["rg", "python"] = "python"
    if rg is not None:
        try:
            grep_rg(rg, query, matches, deadline)
            used = "rg"
        except OSError as exc:
            if engine == "rg":
                raise ToolError(
                    "engine_unavailable", f"ripgrep could not run ({exc.strerror}); use engine='python'."
                ) from exc
    if used == "python":
        grep_python(query, matches, deadline)
    if matches.timed_out:
        raise ToolError(
            "grep_timeout",
            f"The search did not finish within {timeout_s:g} s and was stopped; narrow it with `path` "
            f"or `glob`, or simplify the pattern. The {len(matches.items)} matches found before the "
            "deadline are in `matches`.",
            timeout_s=timeout_s,
            engine=used,
            matches=matches.items,
        )
    return used
