"""The pip of the environment herdr-mcp runs in, aimed at another venv with `pip --python`.

A venv herdr-mcp makes (a generation's, `update/install.py`; a build environment's,
`release/build.py`) is made with `--without-pip` and filled by this pip, which runs the new
venv's interpreter itself (pip's own `--python` option, pip 22.3 and later: pip re-executes under
that interpreter and installs into its environment, importing nothing of this one but pip).

Why not the pip of the new venv: it has none until something installs one, and both ways of
giving it one cost more. Measured on 2026-12-07 on the 2-core development machine, the 52-wheel
bundle of this tree and pip itself installed offline into a fresh venv, the two ways alternating
(`RUSAGE_CHILDREN`; the machine's speed drifted by up to 2x over the evening, so only pairs
compare):

- pip run from the wheel Python ships for ensurepip (on PYTHONPATH, as `install.py` did): 25.8,
  27.3, 27.8, 28.1 s of CPU; this environment's pip (26.3) with `--python`: 21.0, 21.1, 22.8,
  23.4 s. Without compiling the installed modules (`--no-compile`, two rounds): 11.3 and 14.3 s
  against 4.2 and 7.6 s. Imported from a zip, pip has no bytecode, so each run compiled pip's
  own modules (839 `compile` calls, 2.9 s under cProfile), and that pip (23.2.1, Python 3.11's)
  spent 2.5 s more scanning installed distributions while it resolved. What is left is mostly
  compiling the installed modules to bytecode, which every way does;
- `python -m venv` with pip (ensurepip installing pip and setuptools, compiling both) took 7-9 s
  before anything of ours was installed, against 0.1 s for `--without-pip`.

`host_pip()` is None where this environment has no pip of its own (a `uv tool install` has none)
or one older than 22.3; the callers then fall back to a pip inside the new venv, as before.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
import sysconfig
from functools import cache
from pathlib import Path

from packaging.version import InvalidVersion, Version

#: The first pip with `--python`.
MIN_VERSION = Version("22.3")


@cache
def host_pip() -> tuple[str, ...] | None:
    """`(python, "-m", "pip")` running this environment's own pip, or None (module docstring).

    Only a pip installed in this environment's site-packages counts: `python -m pip`, run with
    no PYTHONPATH (the callers drop it), finds that one and no other.
    """
    spec = importlib.util.find_spec("pip")
    if spec is None or spec.origin is None:
        return None
    package = Path(spec.origin).resolve().parent
    site = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    if package.parent not in site:
        return None
    try:
        version = Version(importlib.metadata.version("pip"))
    except (importlib.metadata.PackageNotFoundError, InvalidVersion):
        return None
    if version < MIN_VERSION:
        return None
    return (sys.executable, "-m", "pip")


def pip_environment() -> dict[str, str]:
    """This process's environment without PYTHONPATH, so that `python -m pip` finds the pip
    `host_pip` found, and a venv's interpreter imports nothing from elsewhere."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def pip_for(python: Path | str) -> tuple[tuple[str, ...], bool]:
    """The command that runs pip for the environment of `python`, and whether it is this
    environment's pip (True) or `python`'s own (False, which needs pip installed there)."""
    runner = host_pip()
    if runner is not None:
        return (*runner, "--python", str(python)), True
    return (str(python), "-m", "pip"), False
