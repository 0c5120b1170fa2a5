"""herdr-mcp: a safe remote control plane between a Web AI and a Herdr workstation."""

import os
import re
import sys

#: An installed distribution's metadata directory (`herdr_mcp-0.1.0.dist-info`, or an egg's).
_METADATA_DIR = re.compile(r"herdr[-_.]mcp-[^-]+\.(dist|egg)-info", re.IGNORECASE)


def _dist_info_version() -> str | None:
    """The `Version` of the first herdr-mcp metadata directory on `sys.path` when it is a plain
    `*.dist-info` directory; None when anything else comes first (an egg, a zip on the path)."""
    for entry in sys.path:
        directory = entry or "."
        try:
            names = os.listdir(directory)
        except (FileNotFoundError, PermissionError):
            continue
        except OSError:  # a zip archive on the path: importlib.metadata reads those
            return None
        found = [name for name in names if _METADATA_DIR.fullmatch(name)]
        if not found:
            continue
        if len(found) != 1 or not found[0].lower().endswith(".dist-info"):
            return None
        try:
            with open(os.path.join(directory, found[0], "METADATA"), encoding="utf-8") as metadata:
                for line in metadata:
                    if not line.strip():
                        return None  # the headers ended without a version
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            return None
        return None
    return None


def _installed_version() -> str:
    """The version of the installed `herdr-mcp`, as `importlib.metadata.version` finds it (the
    first distribution of that name on `sys.path`), read directly when that is a dist-info
    directory: importing importlib.metadata (and the email package) cost every start 25-50 ms,
    and the stdio start is timed against a Node server. tests/foundation/test_version.py holds
    the two equal."""
    found = _dist_info_version()
    if found is not None:
        return found
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("herdr-mcp")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0+unknown"


__version__ = _installed_version()
