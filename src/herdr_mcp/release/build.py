"""Reproducible wheel and sdist builds, and the check that proves them reproducible (SPEC 5).

`build` is a minimal PEP 517 front end: it installs exactly the pinned `build-system.requires` of
`pyproject.toml` (hatchling) into a fresh venv, builds the sdist from the tree, then the wheel from
that unpacked sdist (as `python -m build` does, so the wheel can only contain what the sdist
ships). `SOURCE_DATE_EPOCH` is the commit time of HEAD unless given, so every timestamp inside the
artifacts comes from the commit, never from the clock.

`check_reproducible` clones HEAD into two separate clean trees, builds each, and compares the
artifacts by sha256; for an archive that differs it names the members that differ.

Errors are `BuildError` with a stable code: `build_config_invalid`, `build_requirement_unpinned`,
`build_source_date_unknown`, `build_git_failed`, `build_environment_failed`, `build_backend_failed`,
`build_output_invalid`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herdr_mcp.errors import LocalFault
from herdr_mcp.release.host_pip import pip_environment, pip_for

#: Called with one line of progress (the CLI prints it on stderr).
Progress = Callable[[str], None]
#: Called on each clean tree before it is built (tree, 0 or 1); tests use it to make a difference.
PrepareTree = Callable[[Path, int], None]

# A pinned requirement: a name and exactly one `==` version, nothing else (no ranges, no URLs).
_PINNED = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\s*==\s*[A-Za-z0-9.+!_-]+")
# Runs inside the build venv: import the backend named in pyproject.toml and call one PEP 517 hook.
_HOOK_RUNNER = """\
import importlib, json, sys
module_name, _, attribute = sys.argv[1].partition(":")
backend = importlib.import_module(module_name)
for name in filter(None, attribute.split(".")):
    backend = getattr(backend, name)
result = getattr(backend, sys.argv[2])(sys.argv[3])
with open(sys.argv[4], "w", encoding="utf-8") as handle:
    json.dump(result, handle)
"""
#: Building hatchling's own venv and one artifact take seconds; these bound a hung pip or backend.
_PIP_TIMEOUT_SECONDS = 600
_HOOK_TIMEOUT_SECONDS = 300
_GIT_TIMEOUT_SECONDS = 120


class BuildError(LocalFault):
    """A build that cannot be carried out as asked; `code` is stable, `message` says what to do."""


@dataclass(frozen=True)
class BuildSystem:
    """The `[build-system]` table of a pyproject.toml: pinned requirements and the backend."""

    requires: tuple[str, ...]
    backend: str

    @classmethod
    def from_pyproject(cls, source_dir: Path) -> BuildSystem:
        """Read and check `source_dir/pyproject.toml`.

        Raises `BuildError`: `build_config_invalid` (missing or malformed table) or
        `build_requirement_unpinned` (a requirement that is not `name==version`: an unpinned
        backend builds different bytes on different days).
        """
        path = source_dir / "pyproject.toml"
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise BuildError("build_config_invalid", f"cannot read {path}: {exc}") from None
        table = document.get("build-system")
        if not isinstance(table, dict):
            raise BuildError("build_config_invalid", f"{path} has no [build-system] table")
        requires, backend = table.get("requires"), table.get("build-backend")
        if not isinstance(requires, list) or not requires or not all(isinstance(r, str) for r in requires):
            raise BuildError("build_config_invalid", f"{path}: build-system.requires must list requirements")
        if not isinstance(backend, str) or not backend:
            raise BuildError("build_config_invalid", f"{path}: build-system.build-backend is missing")
        for requirement in requires:
            if not _PINNED.fullmatch(requirement.strip()):
                raise BuildError(
                    "build_requirement_unpinned",
                    f"{path}: build requirement {requirement!r} is not pinned; write it as name==version",
                )
        return cls(requires=tuple(r.strip() for r in requires), backend=backend)


class BuildEnvironment:
    """A venv holding exactly the pinned build requirements, reusable for several builds."""

    def __init__(self, path: Path, requires: Sequence[str]) -> None:
        self.path = path
        self.requires = tuple(requires)

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @classmethod
    def create(
        cls,
        path: Path,
        requires: Sequence[str],
        *,
        progress: Progress | None = None,
        report: Path | None = None,
    ) -> BuildEnvironment:
        """Make a fresh venv at `path` (which must not exist) and install `requires` from wheels.
        With `report`, pip writes there what it installed (its JSON installation report: every
        wheel's name, version and sha256), which `dev/build_env.py` keeps to decide reuse.

        Raises `BuildError("build_environment_failed")` naming pip's complaint.
        """
        _say(progress, f"creating the build environment ({', '.join(requires)})")
        # This environment's pip fills the venv when it can (release/host_pip.py); else the venv
        # gets its own pip from ensurepip first.
        pip, from_host = pip_for(path / "bin" / "python")
        _run(
            [sys.executable, "-m", "venv", *(("--without-pip",) if from_host else ()), str(path)],
            code="build_environment_failed",
            what="python -m venv",
            timeout=_PIP_TIMEOUT_SECONDS,
        )
        environment = cls(path, requires)
        _run(
            [
                *pip,
                *("install", "--quiet", "--disable-pip-version-check", "--no-input"),
                "--only-binary=:all:",
                *(() if report is None else ("--report", str(report))),
                *requires,
            ],
            code="build_environment_failed",
            what="pip install of the build requirements",
            env=pip_environment(),
            timeout=_PIP_TIMEOUT_SECONDS,
        )
        return environment

    def resolve(self, report: Path) -> None:
        """Have pip resolve `requires` for this venv's interpreter as it would for a new venv (what
        is installed here is ignored) and write its JSON installation report to `report`,
        installing nothing. The pip is this environment's where it has one (release/host_pip.py),
        else the venv's own.

        Raises `BuildError("build_environment_failed")` naming pip's complaint.
        """
        pip, _ = pip_for(self.python)
        _run(
            [
                *pip,
                *("install", "--dry-run", "--ignore-installed", "--quiet"),
                *("--disable-pip-version-check", "--no-input", "--only-binary=:all:"),
                *("--report", str(report)),
                *self.requires,
            ],
            code="build_environment_failed",
            what="pip resolving the build requirements",
            env=pip_environment(),
            timeout=_PIP_TIMEOUT_SECONDS,
        )

    def call_hook(self, backend: str, hook: str, tree: Path, out_dir: Path, source_date_epoch: int) -> str:
        """Run PEP 517 `hook` (build_sdist/build_wheel) of `backend` in `tree`; return the file name."""
        with tempfile.TemporaryDirectory(prefix="herdr-mcp-hook-") as scratch:
            result_file = Path(scratch) / "result.json"
            env = {**os.environ, "SOURCE_DATE_EPOCH": str(source_date_epoch)}
            # -I: no PYTHON* variables, no user site, and the tree itself is not on sys.path.
            _run(
                [str(self.python), "-I", "-c", _HOOK_RUNNER, backend, hook, str(out_dir), str(result_file)],
                code="build_backend_failed",
                what=f"{backend} {hook}",
                cwd=tree,
                env=env,
                timeout=_HOOK_TIMEOUT_SECONDS,
            )
            name = json.loads(result_file.read_text(encoding="utf-8"))
        if not isinstance(name, str) or Path(name).name != name or not (out_dir / name).is_file():
            raise BuildError(
                "build_output_invalid", f"{backend}.{hook} reported {name!r}, which it did not write"
            )
        return name


def commit_time(source_dir: Path) -> int:
    """The committer time of HEAD in `source_dir` (the default SOURCE_DATE_EPOCH).

    Raises `BuildError("build_source_date_unknown")` outside a Git checkout.
    """
    try:
        completed = _git(source_dir, "log", "-1", "--format=%ct", "HEAD")
    except BuildError as exc:
        raise BuildError(
            "build_source_date_unknown",
            f"{source_dir} is not a Git checkout with a commit ({exc.message}); pass a source date epoch",
        ) from None
    return int(completed.strip())


def build(
    source_dir: Path,
    out_dir: Path,
    *,
    source_date_epoch: int | None = None,
    environment: BuildEnvironment | None = None,
    progress: Progress | None = None,
) -> list[Path]:
    """Build the sdist and the wheel of the tree at `source_dir` into `out_dir`; return [sdist, wheel].

    `source_date_epoch` defaults to the commit time of HEAD. `environment` reuses a build venv
    (it must hold this tree's pinned requirements); by default a fresh one is made and removed.
    The artifacts appear in `out_dir` only once both are built (an existing file of the same name
    is replaced). Raises `BuildError`.
    """
    source_dir = source_dir.resolve()
    epoch = commit_time(source_dir) if source_date_epoch is None else source_date_epoch
    system = BuildSystem.from_pyproject(source_dir)
    if environment is not None and environment.requires != system.requires:
        raise BuildError(
            "build_config_invalid",
            f"the build environment holds {list(environment.requires)}, "
            f"the tree pins {list(system.requires)}",
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="herdr-mcp-build-") as scratch_name,
        # Beside out_dir, so moving the finished artifacts in is an atomic rename.
        tempfile.TemporaryDirectory(prefix=".building-", dir=out_dir) as staging_name,
    ):
        scratch, staging = Path(scratch_name), Path(staging_name)
        if environment is None:
            environment = BuildEnvironment.create(scratch / "env", system.requires, progress=progress)
        _say(progress, f"building the sdist of {source_dir} (SOURCE_DATE_EPOCH={epoch})")
        sdist = environment.call_hook(system.backend, "build_sdist", source_dir, staging, epoch)
        unpacked = _unpack_sdist(staging / sdist, scratch / "sdist")
        _say(progress, "building the wheel from the sdist")
        wheel = environment.call_hook(system.backend, "build_wheel", unpacked, staging, epoch)
        built = []
        for name in (sdist, wheel):
            os.replace(staging / name, out_dir / name)
            built.append(out_dir / name)
    return built


# --- reproducibility -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ArtifactComparison:
    """One artifact name as built in each tree; a digest is None when that build lacks the file."""

    name: str
    first_sha256: str | None
    second_sha256: str | None
    #: Archive members whose bytes or metadata differ (or exist on one side only); for archives
    #: equal member by member but not byte for byte, ARCHIVE_CONTAINER.
    differing_members: tuple[str, ...] = ()

    @property
    def identical(self) -> bool:
        return self.first_sha256 is not None and self.first_sha256 == self.second_sha256

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "first_sha256": self.first_sha256,
            "second_sha256": self.second_sha256,
            "identical": self.identical,
            "differing_members": list(self.differing_members),
        }


#: Stands for "the members agree, the archive around them does not" (order, compression, header).
ARCHIVE_CONTAINER = "(archive container: member order, compression or header)"


@dataclass(frozen=True)
class ReproducibilityReport:
    """The outcome of building one commit twice in two clean trees."""

    commit: str
    source_date_epoch: int
    first_dist: Path
    second_dist: Path
    artifacts: tuple[ArtifactComparison, ...]

    @property
    def reproducible(self) -> bool:
        return bool(self.artifacts) and all(artifact.identical for artifact in self.artifacts)

    @property
    def differing(self) -> tuple[ArtifactComparison, ...]:
        return tuple(artifact for artifact in self.artifacts if not artifact.identical)

    def describe(self) -> list[str]:
        """Human-readable lines: one per artifact, then the members of each that differ."""
        lines = [f"commit {self.commit}, SOURCE_DATE_EPOCH={self.source_date_epoch}"]
        for artifact in self.artifacts:
            if artifact.identical:
                lines.append(f"identical  {artifact.name}  sha256:{artifact.first_sha256}")
                continue
            lines.append(
                f"DIFFERENT  {artifact.name}  first sha256:{artifact.first_sha256 or '(missing)'}"
                f"  second sha256:{artifact.second_sha256 or '(missing)'}"
            )
            lines.extend(f"    member differs: {member}" for member in artifact.differing_members)
        if not self.reproducible:
            lines.append(f"the two builds (compare with diffoscope): {self.first_dist} {self.second_dist}")
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "source_date_epoch": self.source_date_epoch,
            "reproducible": self.reproducible,
            "first_dist": str(self.first_dist),
            "second_dist": str(self.second_dist),
            "artifacts": [artifact.to_dict() for artifact in self.artifacts],
        }


def check_reproducible(
    source_dir: Path,
    work_dir: Path,
    *,
    prepare_tree: PrepareTree | None = None,
    environment: BuildEnvironment | None = None,
    progress: Progress | None = None,
) -> ReproducibilityReport:
    """Build HEAD of `source_dir` twice, each in its own fresh clone under `work_dir`, and compare.

    Uncommitted changes in `source_dir` are not part of either build. Both builds use the commit
    time of HEAD as SOURCE_DATE_EPOCH and share one build environment (made here unless given).
    `prepare_tree(tree, index)` runs on each clone before its build. The clones and their `dist/`
    directories stay in a new directory under `work_dir`. Raises `BuildError` when a build fails;
    differing artifacts are reported, not raised.
    """
    source_dir = source_dir.resolve()
    commit = _git(source_dir, "rev-parse", "--verify", "HEAD^{commit}").strip()
    epoch = commit_time(source_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="reproducible-", dir=work_dir))
    dists = []
    for index, label in enumerate(("first", "second")):
        tree = run_dir / f"{label}-tree"
        _say(progress, f"cloning {commit[:12]} into {tree}")
        _git(run_dir, "clone", "--quiet", "--no-checkout", "--no-hardlinks", str(source_dir), str(tree))
        _git(tree, "checkout", "--quiet", "--detach", commit)
        if prepare_tree is not None:
            prepare_tree(tree, index)
        if environment is None:  # the commit's own pins, not the working tree's
            requires = BuildSystem.from_pyproject(tree).requires
            environment = BuildEnvironment.create(run_dir / "build-env", requires, progress=progress)
        dist = run_dir / f"{label}-dist"
        build(tree, dist, source_date_epoch=epoch, environment=environment, progress=progress)
        dists.append(dist)
    first, second = dists
    names = sorted({path.name for path in first.iterdir()} | {path.name for path in second.iterdir()})
    artifacts = tuple(_compare(first / name, second / name) for name in names)
    return ReproducibilityReport(
        commit=commit, source_date_epoch=epoch, first_dist=first, second_dist=second, artifacts=artifacts
    )


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _compare(first: Path, second: Path) -> ArtifactComparison:
    first_digest = sha256_file(first) if first.is_file() else None
    second_digest = sha256_file(second) if second.is_file() else None
    members: tuple[str, ...] = ()
    if first_digest and second_digest and first_digest != second_digest:
        members = _differing_members(first, second)
    return ArtifactComparison(first.name, first_digest, second_digest, members)


def _differing_members(first: Path, second: Path) -> tuple[str, ...]:
    left, right = _archive_members(first), _archive_members(second)
    if left is None or right is None:
        return ()
    differing = tuple(
        sorted(name for name in left.keys() | right.keys() if left.get(name) != right.get(name))
    )
    return differing or (ARCHIVE_CONTAINER,)


def _archive_members(path: Path) -> Mapping[str, tuple[object, ...]] | None:
    """Each member's content digest and metadata, or None for a file that is not a wheel or sdist."""
    if path.name.endswith(".whl"):
        with zipfile.ZipFile(path) as archive:
            return {
                info.filename: (
                    hashlib.sha256(archive.read(info)).hexdigest(),
                    info.date_time,
                    info.external_attr,
                    info.compress_type,
                )
                for info in archive.infolist()
            }
    if path.name.endswith(".tar.gz"):
        members: dict[str, tuple[object, ...]] = {}
        with tarfile.open(path, "r:gz") as archive:
            for info in archive:
                handle = archive.extractfile(info) if info.isfile() else None
                content = hashlib.sha256(handle.read()).hexdigest() if handle is not None else info.linkname
                members[info.name] = (
                    content,
                    info.type,
                    info.mode,
                    info.mtime,
                    info.uid,
                    info.gid,
                    info.uname,
                    info.gname,
                )
        return members
    return None


# --- helpers -------------------------------------------------------------------------------------


def _unpack_sdist(sdist: Path, destination: Path) -> Path:
    """Extract the sdist (refusing links and paths outside `destination`); return its top directory."""
    try:
        with tarfile.open(sdist, "r:gz") as archive:
            archive.extractall(destination, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise BuildError("build_output_invalid", f"cannot unpack {sdist.name}: {exc}") from None
    tops = [entry for entry in destination.iterdir() if entry.is_dir()]
    if len(tops) != 1 or not (tops[0] / "pyproject.toml").is_file():
        raise BuildError(
            "build_output_invalid", f"{sdist.name} has no single top directory with a pyproject.toml"
        )
    return tops[0]


def _git(repo_dir: Path, *args: str) -> str:
    return _run(
        ["git", "-C", str(repo_dir), *args],
        code="build_git_failed",
        what=f"git {args[0]}",
        env={**os.environ, "LC_ALL": "C"},
        timeout=_GIT_TIMEOUT_SECONDS,
    )


def _run(
    command: Sequence[str],
    *,
    code: str,
    what: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float,
) -> str:
    """Run `command` (`what` names it in errors); return its stdout, or raise `BuildError(code)`
    quoting the end of its output."""
    try:
        completed = subprocess.run(
            list(command), cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=timeout
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(code, f"{what} could not run: {exc}") from None
    if completed.returncode != 0:
        tail = "\n".join((completed.stderr or completed.stdout).strip().splitlines()[-15:])
        raise BuildError(code, f"{what} exited {completed.returncode}:\n{tail}")
    return completed.stdout


def _say(progress: Progress | None, line: str) -> None:
    if progress is not None:
        progress(line)
