"""The foreground of `herdr-mcp update major-apply` and `major-rollback`: the update lock, the
recovery of an interrupted job, admission and the ordinary staging, install and probe of the
candidate (as `update` does them, update/apply.py), then the migration itself (update/major.py).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from herdr_mcp.generations.control import Generation
from herdr_mcp.layout import Layout
from herdr_mcp.update.admission import AdmissionPolicy, AlreadyCurrent, LocalIdentity
from herdr_mcp.update.apply import (
    ReleaseSource,
    _admit,
    _new_generation_id,
    check_may_update,
    check_room,
    host_target,
    install_probed,
    local_identity,
    release_provenance,
    start_and_activate,
    update_lock,
)
from herdr_mcp.update.diskspace import SpaceNeed
from herdr_mcp.update.highest_seen import record_admitted
from herdr_mcp.update.housekeeping import clean_up
from herdr_mcp.update.major import (
    Candidate,
    MajorRefused,
    apply_major,
    major_dir,
    major_rollback,
    major_status,
    recover,
)
from herdr_mcp.update.paths import UpdatePaths
from herdr_mcp.update.staging import DownloadConfig, stage


def run_major_apply(
    paths: UpdatePaths,
    source: ReleaseSource,
    policy: AdmissionPolicy,
    download: DownloadConfig,
    *,
    fallback: LocalIdentity,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """`update major-apply` (update/major.py's module docstring); the `--json` answer."""
    check_may_update(paths.config_dir)
    with update_lock(paths):
        recover(paths.config_dir, say)
        for line in clean_up(paths):
            say(f"cleaned up: {line}")
        local = local_identity(paths.generations, fallback)
        admission = _admit(paths, source, local, policy)
        release = admission.outcome
        if release is None:
            return {"status": "no_release", "summary": admission.no_release or "no release"}
        if isinstance(release, AlreadyCurrent):
            version = release.manifest.version
            return {"status": "current", "summary": f"herdr-mcp {version} is active and current"}
        if not release.state_step:
            raise MajorRefused(
                "major_not_needed",
                f"herdr-mcp {release.version} keeps state schema {release.manifest.state_schema}: "
                "`herdr-mcp update` takes it",
            )
        say(
            f"admitted herdr-mcp {release.version}: state schema {local.state_schema} -> "
            f"{release.manifest.state_schema}"
        )
        target = host_target()
        asset = release.asset_for(target)
        generation = _new_generation_id(release.manifest.version)
        # Room for the staging job and the venv, and for the snapshot, the candidate's copy of
        # state.db and the migrated baseline kept for major-rollback's count (each up to its size,
        # WAL included), before anything is written.
        state = Layout(paths.config_dir).state_file
        database = sum(p.stat().st_size for p in (state, state.with_name(state.name + "-wal")) if p.is_file())
        check_room(
            paths,
            asset.name,
            asset.size,
            (
                SpaceNeed(paths.jobs, database, "the snapshot of state.db"),
                SpaceNeed(paths.runtimes, database, "the candidate's copy of state.db to migrate"),
                SpaceNeed(paths.jobs, database, "the migrated database as v2 first opens it"),
            ),
        )
        staged = stage(
            release, target, paths.jobs, download, url=admission.bundle_url(asset.name), progress=None
        )
        executable = install_probed(staged, paths, generation, release)
        record_admitted(paths.highest_seen, release)
        provenance = {
            **release_provenance(release, asset.name, asset.sha256),
            "state_schema": str(release.manifest.state_schema),
        }
        candidate = Candidate(release, generation, executable, provenance)

        def activate(spec: Generation, serve_args: tuple[str, ...]) -> Any:
            return start_and_activate(paths, spec, serve_args, keep=(), say=say)

        return apply_major(paths.config_dir, candidate, say=say, activate_candidate=activate)


def run_major_rollback(paths: UpdatePaths, *, say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    with update_lock(paths):
        return major_rollback(paths.config_dir, say=say)


def run_major_status(paths: UpdatePaths, *, say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """The phase; an interrupted job is recovered first when no other update holds the lock."""
    from herdr_mcp.update.errors import LocalStateError

    try:
        with update_lock(paths):
            recovered = recover(paths.config_dir, say)
    except LocalStateError as exc:
        if exc.code != "update_in_progress":
            raise
        recovered = None
    answer = major_status(paths.config_dir)
    if recovered is not None:
        answer["recovered"] = recovered
    return answer


#: Workers left running after the foreground's wait.
_GOING_ON: list[subprocess.Popen[bytes]] = []


def run_detached(
    command: Sequence[str], config_dir: Path, wait_s: float, *, echo: Callable[[str], None]
) -> tuple[int, str] | None:
    """Run the worker `command` in its own session with its output in files under
    `update/major/` (a pipe would break, and stop it, when this process dies), echo its stderr as
    it comes, and wait at most `wait_s` seconds: (exit status, stdout), or None when it goes on."""
    directory = major_dir(config_dir)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    stamp = f"{time.time_ns() // 1_000_000}-{os.getpid()}"
    out_path, log_path = directory / f"worker-{stamp}.out", directory / f"worker-{stamp}.log"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    out_fd, log_fd = os.open(out_path, flags, 0o600), os.open(log_path, flags, 0o600)
    try:
        worker = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=out_fd,
            stderr=log_fd,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(out_fd)
        os.close(log_fd)
    deadline = time.monotonic() + wait_s
    with log_path.open(encoding="utf-8", errors="replace") as log:
        while True:
            for line in log:
                echo(line)
            code = worker.poll()
            if code is not None:
                for line in log:
                    echo(line)
                return code, out_path.read_text(encoding="utf-8", errors="replace")
            if time.monotonic() >= deadline:
                _GOING_ON.append(worker)  # it outlives this wait: never reaped (or warned about) here
                return None
            time.sleep(0.1)
