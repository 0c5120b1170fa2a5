"""Git repositories with text files (`make_repo`, `git` with a fixed identity) and a snapshot of
every entry under a tree (`snapshot`), for tests that prove a tool changed nothing it must not."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    """Run git in `repo` with a fixed identity; return stdout."""
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "init.defaultBranch=main", *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **_GIT_ENV},
    )
    return done.stdout


def make_repo(path: Path, files: dict[str, str]) -> Path:
    """A Git repository at `path` with `files` committed; returns its realpath."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    for name, content in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(content)
    git(path, "add", "-A")
    git(path, "commit", "-q", "--allow-empty", "-m", "init")
    return Path(os.path.realpath(path))


Snapshot = dict[str, tuple[object, ...]]


def snapshot(top: Path) -> Snapshot:
    """Every entry under `top` (never following symlinks): type, mode, size, mtime, content hash.

    FIFOs and devices are recorded by lstat only (never opened); files above 1 MiB by size and
    mtime only (the 2 GiB sparse file).
    """
    found: Snapshot = {}
    for directory, dirs, files in os.walk(top, followlinks=False):
        for name in [*dirs, *files]:
            path = os.path.join(directory, name)
            st = os.lstat(path)
            detail: object = None
            if stat.S_ISLNK(st.st_mode):
                detail = os.readlink(path)
            elif stat.S_ISREG(st.st_mode) and st.st_size <= 1 << 20:
                detail = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            mtime = None if stat.S_ISDIR(st.st_mode) and name == ".git" else st.st_mtime_ns
            found[os.path.relpath(path, top)] = (
                stat.S_IFMT(st.st_mode),
                st.st_mode,
                st.st_size,
                mtime,
                detail,
            )
    return found
