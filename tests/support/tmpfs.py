"""A small tmpfs mounted for one test: a real filesystem that fills up (ENOSPC) at a chosen size.

Mounting needs root (CAP_SYS_ADMIN); where it is refused the test is skipped, saying why. The
mount is taken down again however the test ends (lazily if a process still holds it open).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted_tmpfs(path: Path, size: int) -> Iterator[Path]:
    """`path` (created) with a tmpfs of `size` bytes mounted on it."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def resize(path: Path, size: int) -> None:
    """Give the tmpfs mounted on `path` a new size (what it holds stays)."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True, capture_output=True)
