"""The DEV plane's build environment, kept between syncs (docs/updater.md, "The DEV plane's build
environment").

`dev sync` and `start --source` build the checkout's wheel with the release toolchain, in a venv
holding exactly the checkout's pinned `build-system.requires` (hatchling). Making that venv
(`python -m venv`, which runs ensurepip, then pip) took 10 to 35 s of every sync. It is kept in
`<config>/dev-build/env-<key>/` and used again only while it is what a new one would be:

- `<key>` is a sha256 of what defines the venv: the pinned requirements and the interpreter that
  runs herdr-mcp (its real path, `sys.version`, its cache tag, the platform). A changed pin or
  another interpreter (a Python upgrade changes `sys.version`) gives another key: a new venv is
  made, and everything else in `dev-build/` is removed.
- A venv counts only with its record, `build-env.json` (the key, the interpreter, the pins and
  every wheel pip installed with its sha256), written last, once pip has finished: a venv a
  killed sync left half made has none and is removed. The venv's `bin/python` must still be the
  interpreter that runs herdr-mcp.
- Before each reuse pip resolves the pins again, against the same index and configuration as a
  new venv would and without installing anything (`pip install --dry-run --ignore-installed
  --report`, run by the kept venv's own pip): the wheels it would install now (name, version,
  sha256, the unpinned dependencies of hatchling included) must be exactly the ones the record
  says were installed; otherwise (a new release of a dependency, say) the venv is made again.

So a reused venv holds the same wheels a new one would, and builds the same wheel. The check
costs about 1.5 s of CPU against 10 s for a new venv. Callers hold the update lock, so no two
syncs touch `dev-build/` at once. Removing `dev-build/` is always safe: the next sync makes it.

Errors: the release toolchain's `BuildError` (`build_environment_failed` when pip cannot resolve
or install).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from herdr_mcp.records import RecordInvalid, atomic_write, load_strict, read_capped
from herdr_mcp.release.build import BuildEnvironment, BuildError

SCHEMA_VERSION = 1
RECORD_FILE = "build-env.json"
MAX_RECORD_BYTES = 64 * 1024
MAX_REPORT_BYTES = 4 * 1024 * 1024

#: One installed wheel: its canonical name, version and sha256.
Wheel = tuple[str, str, str]


def interpreter() -> dict[str, str]:
    """What defines the interpreter a build venv is made from (the one running herdr-mcp)."""
    return {
        "executable": os.path.realpath(sys.executable),
        "version": sys.version,
        "cache_tag": str(sys.implementation.cache_tag),
        "platform": f"{sys.platform}-{platform.machine()}",
    }


def environment_key(requires: Sequence[str], facts: dict[str, str]) -> str:
    """sha256 of the pins and the interpreter: one kept venv per such pair."""
    text = json.dumps({"requires": list(requires), "interpreter": facts}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def build_environment(
    cache_dir: Path, requires: Sequence[str], *, say: Callable[[str], None] = lambda _: None
) -> BuildEnvironment:
    """The venv holding `requires` under `cache_dir` (module docstring): the kept one when it is
    still what a new one would be, else a new one. Raises `BuildError`."""
    facts = interpreter()
    key = environment_key(requires, facts)
    path = cache_dir / f"env-{key[:16]}"
    cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for entry in sorted(cache_dir.iterdir()):
        if entry != path:  # another interpreter or other pins, or a leftover
            _remove(entry)
    environment = BuildEnvironment(path, requires)
    if path.exists():
        why = _stale(environment, key, facts)
        if why is None:
            pins = ", ".join(requires)
            say(f"reusing the build environment {path} ({pins}; the index gives the same wheels)")
            return environment
        say(f"making the build environment again: {why}")
        _remove(path)
    say(f"creating the build environment {path} ({', '.join(requires)})")
    with tempfile.TemporaryDirectory(prefix="herdr-mcp-build-env-") as scratch:
        report = Path(scratch) / "report.json"
        environment = BuildEnvironment.create(path, requires, report=report)
        installed, unknown = _wheels(report)
    if unknown is not None:  # used for this build only: the next sync makes a new one
        say(f"not keeping the build environment: {unknown}")
        return environment
    record = {
        "schema_version": SCHEMA_VERSION,
        "key": key,
        "interpreter": facts,
        "requires": list(requires),
        "installed": [list(wheel) for wheel in installed],
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    # Last: only a venv pip finished has a record (module docstring).
    atomic_write(path / RECORD_FILE, json.dumps(record, indent=2, sort_keys=True).encode() + b"\n")
    return environment


def _stale(environment: BuildEnvironment, key: str, facts: dict[str, str]) -> str | None:
    """Why the kept venv must not be used (None: it holds what a new one would)."""
    record_path = environment.path / RECORD_FILE
    try:
        data = read_capped(record_path, MAX_RECORD_BYTES)
        record = None if data is None or len(data) > MAX_RECORD_BYTES else load_strict(data)
    except (OSError, RecordInvalid):
        record = None
    if record is None or record.get("schema_version") != SCHEMA_VERSION:
        return f"{record_path} is missing or not ours (a sync stopped while making it)"
    if record.get("key") != key or record.get("interpreter") != facts:
        return "it was made for other pins or another interpreter"
    if os.path.realpath(environment.python) != facts["executable"]:
        return f"{environment.python} is no longer {facts['executable']}"
    kept = record.get("installed")
    if not isinstance(kept, list) or not all(
        isinstance(item, list) and len(item) == 3 and all(isinstance(part, str) for part in item)
        for item in kept
    ):
        return f"{record_path} does not list the installed wheels"
    try:
        with tempfile.TemporaryDirectory(prefix="herdr-mcp-build-env-") as scratch:
            report = Path(scratch) / "report.json"
            environment.resolve(report)
            now, unknown = _wheels(report)
    except BuildError as exc:  # a broken venv; an unreachable index fails the new one too
        return f"its pip could not resolve the pins ({exc.message})"
    if unknown is not None:
        return unknown
    held = sorted((name, version, digest) for name, version, digest in kept)
    if now != held:
        gone, new = sorted(set(held) - set(now)), sorted(set(now) - set(held))
        return f"the index now gives {_names(new)} where it holds {_names(gone)}"
    return None


def _wheels(report: Path) -> tuple[list[Wheel], str | None]:
    """(name, version, sha256) of every wheel in pip's installation report, sorted; and why they
    cannot be compared (None: they can), when pip names no sha256 for one (an index without
    hashes: such a venv is used once, never kept). Raises `BuildError` for a report pip did not
    write."""
    try:
        data = read_capped(report, MAX_REPORT_BYTES)
        document: Any = json.loads(data) if data is not None and len(data) <= MAX_REPORT_BYTES else None
        wheels = []
        for item in document["install"]:
            metadata, archive = item["metadata"], item["download_info"].get("archive_info", {})
            digest = (archive.get("hashes") or {}).get("sha256")
            if digest is None and str(archive.get("hash", "")).startswith("sha256="):
                digest = archive["hash"].removeprefix("sha256=")
            if not isinstance(digest, str):
                return [], f"pip names no sha256 for {metadata['name']} {metadata['version']}"
            wheels.append((str(canonicalize_name(metadata["name"])), str(metadata["version"]), digest))
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise BuildError(
            "build_environment_failed", f"pip's installation report {report} is not what pip writes: {exc}"
        ) from None
    return sorted(wheels), None


def _names(wheels: Sequence[Wheel]) -> str:
    named = [f"{name}=={version} (sha256 {digest[:12]})" for name, version, digest in wheels]
    return ", ".join(named) or "nothing"


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
