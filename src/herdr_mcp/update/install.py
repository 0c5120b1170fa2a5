"""Install: a verified bundle becomes a new generation venv, with no network and no shared state.

`install_generation(staged, generations_dir, generation_id)` runs, in this order:

0. what is installed is a `StagedRelease`, which only `stage` makes from an admitted release
   (`install_unverified` for anything else, checked here at run time, not only by the type), and
   its file still has the size and sha256 the release signed (`install_bundle_changed`);
1. the generation id is `^[A-Za-z0-9_.-]{1,64}$` and not "." or ".." (`generation_id_invalid`);
2. `generations_dir/<id>` is claimed with an exclusive mkdir, so an existing generation, even a
   half-made one, is refused (`generation_exists`) and never touched;
3. the bundle is unpacked into the staging job directory, member by member checked first: only
   regular files and directories, no absolute path, no "..", nothing outside the one top
   directory, no link of any kind, at most `MAX_MEMBERS` members and `MAX_UNPACKED_BYTES` bytes
   (`bundle_unsafe_member`, `bundle_malformed`);
3b. the filesystem of `generations_dir` must have room for the venv, estimated from the
   bundle's wheels, plus the live runtime's margin (`update/diskspace.py`: `disk_space_low`);
4. `python -m venv --without-pip generations_dir/<id>/venv`;
5. one pip run, `pip install --no-index --find-links wheelhouse --require-hashes -r
   requirements.txt`, that installs the bundle and, in the same run, pip itself: the pip wheel
   Python ships for ensurepip (`bundled_pip`, found by the target interpreter:
   `ensurepip.version()` in its `WHEEL_PKG_DIR` or `ensurepip/_bundled`), one more requirement
   pinned to that file's sha256. The generation gets pip (its `release bundle` and `dev sync` run
   `python -m pip download`), not setuptools, which nothing in it uses (Python 3.12's ensurepip
   no longer installs it either). The pip that runs is this environment's own, aimed at the new
   venv with `--python` (`release/host_pip.py`, where the time it saves is measured); where this
   environment has none (a `uv tool install`), the venv's python runs pip from that wheel (on
   PYTHONPATH). When no such wheel is found, `python -m ensurepip --upgrade
   --default-pip` runs first, as its own step so that its own error (e.g. ENOSPC) is what a
   failure reports, then pip installs the bundle. Either way the
   network is disabled: in a network namespace with no interfaces (`unshare --net`, as root or
   with `--map-root-user`) or, on macOS, `sandbox-exec` denying network. Where neither works, pip
   still runs with `--no-index` and its proxies pointed at a closed loopback port, so a stray
   index lookup fails instead of reaching out; `Generation.network_isolation` says which one was
   used. pip compiles every installed module to bytecode (the generation starts without
   compiling anything); it skips its check of the environment for conflicting dependencies
   (`--no-warn-conflicts`: the venv is new and holds only the pinned set its resolver just
   checked, and that check only ever printed a warning).

`install_unsafe_local_bundle(bundle, generations_dir, generation_id)` is the one way to install a
bundle no release signed: an `UnsafeLocalBundle`, which the DEV plane builds from a checkout
(`herdr-mcp dev sync`). It runs steps 1 to 5; step 0 has nothing to check it against.

On any failure the generation directory this call created is removed; the unpacked bundle stays in
the job directory of the stage (its owner cleans it). Every step's processes carry the
generation's tag (`HERDR_MCP_GENERATION_DIR`), so the next update's clean-up finds and stops
what a killed updater left running. A step that runs out of space is `disk_full` (naming the
disk), not a bare exit status.

Errors: `UpdateUsageError` (`install_unverified`, `generation_id_invalid`, `generation_exists`),
`ReleaseDataError` (`bundle_unsafe_member`, `bundle_malformed`, `install_hash_mismatch`: the signed
bundle itself is wrong) and `LocalStateError` (`install_bundle_changed`, `install_venv_failed`,
`install_failed`, `install_unwritable`, `disk_space_low`, `disk_full`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath

from herdr_mcp.generations.process import generation_tag
from herdr_mcp.layout import GENERATION_TAG_ENV
from herdr_mcp.release.bundle import BUNDLE_SUFFIX, REQUIREMENTS_FILE, WHEELHOUSE_DIR
from herdr_mcp.release.host_pip import pip_environment, pip_for
from herdr_mcp.update.diskspace import (
    SpaceNeed,
    check_free_space,
    disk_full_error,
    ensurepip_wheels,
    estimate_venv,
    is_enospc,
    names_enospc,
)
from herdr_mcp.update.errors import LocalStateError, ReleaseDataError, UpdateUsageError
from herdr_mcp.update.staging import StagedRelease

GENERATION_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: A bundle holds about thirty wheels plus two entries: ten thousand members is far beyond any.
MAX_MEMBERS = 10_000
#: Unpacked size cap: our bundles are about 20 MB; 1 GiB stops a decompression bomb well before a disk fills.
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024
#: Seconds for `python -m venv` and for pip installing thirty local wheels (seconds in practice).
VENV_TIMEOUT = 300
PIP_TIMEOUT = 900
#: The discard port on loopback: nothing listens there, so a proxied connection fails at once.
_UNREACHABLE_PROXY = "http://127.0.0.1:9"
NO_NETWORK_FALLBACK = "no-index, proxies at a closed loopback port"


@dataclass(frozen=True)
class Generation:
    """A freshly installed generation: its directory, its venv's python and its `herdr-mcp`."""

    id: str
    path: Path
    python: Path
    herdr_mcp: Path
    network_isolation: str


@dataclass(frozen=True)
class UnsafeLocalBundle:
    """UNSAFE: a bundle built on this machine (the DEV plane's, from a checkout) that no release
    signed and nothing verified; unpacked into `job_dir`. Only `install_unsafe_local_bundle`
    takes it."""

    path: Path
    job_dir: Path


def install_generation(
    staged: StagedRelease,
    generations_dir: Path,
    generation_id: str,
    *,
    python: str = sys.executable,
    config_dir: Path | None = None,
) -> Generation:
    """Install the bundle `stage` verified into the new generation `generation_id` (steps 0 to 5
    of the module docstring). `python` makes the venv and must be the target's interpreter;
    `config_dir` is the one whose live runtime's margin is kept free (default: the parent of
    `generations_dir`, as `<config>/runtimes`). Raises the errors of the module docstring."""
    # 0. Only what stage() verified against an admitted release, and still those bytes.
    if not isinstance(staged, StagedRelease):
        raise UpdateUsageError(
            "install_unverified",
            f"install_generation takes the StagedRelease stage() made from an admitted release, "
            f"not a {type(staged).__name__}; a local, unverified bundle goes through "
            "install_unsafe_local_bundle()",
        )
    _check_unchanged(staged)
    return _install(staged.path, staged.job_dir, generations_dir, generation_id, python, config_dir)


def install_unsafe_local_bundle(
    bundle: UnsafeLocalBundle,
    generations_dir: Path,
    generation_id: str,
    *,
    python: str = sys.executable,
    config_dir: Path | None = None,
) -> Generation:
    """UNSAFE: install a bundle no release signed (the DEV plane's build of a checkout) into the
    new generation `generation_id`: steps 1 to 5 of the module docstring, with the same
    isolation. Raises the errors of the module docstring but `install_unverified` and
    `install_bundle_changed`."""
    return _install(bundle.path, bundle.job_dir, generations_dir, generation_id, python, config_dir)


def _check_unchanged(staged: StagedRelease) -> None:
    """The staged file is still the one `stage` checked: the signed size and sha256."""
    try:
        with staged.path.open("rb") as file:
            digest = hashlib.file_digest(file, "sha256").hexdigest()
        size = staged.path.stat().st_size
    except OSError as exc:
        raise LocalStateError(
            "install_bundle_changed", f"cannot read the staged {staged.path}: {exc}"
        ) from None
    if (size, digest) != (staged.asset.size, staged.asset.sha256):
        raise LocalStateError(
            "install_bundle_changed",
            f"{staged.path} is no longer the bundle release {staged.release.manifest.tag} signed "
            f"(size {size}, sha256 {digest}); nothing was installed: run the update again",
        )


def _install(
    archive: Path,
    job_dir: Path,
    generations_dir: Path,
    generation_id: str,
    python: str,
    config_dir: Path | None,
) -> Generation:
    # 1. The id.
    if GENERATION_ID.fullmatch(generation_id) is None or generation_id in (".", ".."):
        raise UpdateUsageError(
            "generation_id_invalid",
            f"generation id {generation_id!r} must be 1-64 characters of A-Z a-z 0-9 _ . - (not . or ..)",
        )
    # 2. Claim the directory; an existing one is someone else's.
    path = generations_dir / generation_id
    try:
        generations_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.mkdir(mode=0o700)
    except FileExistsError:
        raise UpdateUsageError(
            "generation_exists", f"generation {generation_id} already exists at {path}; choose a new id"
        ) from None
    except OSError as exc:
        if is_enospc(exc):
            raise disk_full_error(generations_dir, f"creating {path}") from None
        raise LocalStateError("install_unwritable", f"cannot create {path}: {exc}") from None
    try:
        # 3. Unpack, 3b. room for the venv.
        top = unpack_bundle(archive, job_dir / f"unpacked-{generation_id}")
        venv = path / "venv"
        pip_wheel = bundled_pip(python)
        besides = [pip_wheel] if pip_wheel is not None else ensurepip_wheels()
        check_free_space(
            [SpaceNeed(venv, estimate_venv(top / WHEELHOUSE_DIR, besides), "the new generation's venv")],
            config_dir if config_dir is not None else generations_dir.parent,
        )
        # 4, 5. Venv, then pip (from Python's own pip wheel, else after ensurepip) with no
        # network; every process tagged as the generation's.
        prefix, isolation = offline_prefix()
        env = _pip_env(job_dir, offline=bool(prefix))
        env[GENERATION_TAG_ENV] = generation_tag(path)
        make = [*prefix, python, "-m", "venv", "--without-pip", str(venv)]
        _run(make, env, top, "install_venv_failed", VENV_TIMEOUT, writes=path)
        pip, from_host = pip_for(venv / "bin" / "python")
        if pip_wheel is None:
            ensurepip = [
                *prefix,
                str(venv / "bin" / "python"),
                "-m",
                "ensurepip",
                "--upgrade",
                "--default-pip",
            ]
            _run(ensurepip, env, top, "install_venv_failed", VENV_TIMEOUT, writes=path)
            _pip_install(prefix, pip, env, venv, top)
        else:
            extra = _pin_pip(pip_wheel, job_dir / f"pip-{generation_id}.txt")
            runs = env if from_host else {**env, "PYTHONPATH": str(pip_wheel)}
            _pip_install(prefix, pip, runs, venv, top, extra=extra)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return Generation(
        id=generation_id,
        path=path,
        python=venv / "bin" / "python",
        herdr_mcp=venv / "bin" / "herdr-mcp",
        network_isolation=isolation,
    )


def unpack_bundle(archive: Path, destination: Path) -> Path:
    """Unpack the bundle `archive` into `destination` (which must not exist) after checking every
    member; return its top directory. Raises `ReleaseDataError` (`bundle_unsafe_member`,
    `bundle_malformed`) and `LocalStateError("install_unwritable")`."""
    expected_top = archive.name.removesuffix(BUNDLE_SUFFIX)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = _checked_members(tar, expected_top)
            destination.mkdir(mode=0o700)
            # The "data" filter re-checks what _checked_members allowed (paths, modes, links).
            tar.extractall(destination, members=members, filter="data")
    except (tarfile.TarError, EOFError) as exc:
        raise ReleaseDataError(
            "bundle_malformed", f"{archive.name} is not a readable tar.gz: {exc}"
        ) from None
    except OSError as exc:
        if is_enospc(exc):
            raise disk_full_error(destination, f"unpacking {archive.name}") from None
        raise LocalStateError("install_unwritable", f"cannot unpack {archive.name}: {exc}") from None
    top = destination / expected_top
    if not (top / REQUIREMENTS_FILE).is_file() or not (top / WHEELHOUSE_DIR).is_dir():
        raise ReleaseDataError(
            "bundle_malformed",
            f"{archive.name} lacks {expected_top}/{REQUIREMENTS_FILE} or {WHEELHOUSE_DIR}/",
        )
    return top


def _checked_members(tar: tarfile.TarFile, top: str) -> list[tarfile.TarInfo]:
    members: list[tarfile.TarInfo] = []
    total = 0
    for member in tar:
        name = member.name
        parts = PurePosixPath(name).parts
        if not (member.isfile() or member.isdir()):
            raise _unsafe(name, "is a link or special file; bundles hold only files and directories")
        if name.startswith("/") or "\\" in name or ".." in parts or not parts or parts[0] != top:
            raise _unsafe(name, f"is not a relative path inside {top}/")
        total += member.size
        members.append(member)
        if len(members) > MAX_MEMBERS or total > MAX_UNPACKED_BYTES:
            raise _unsafe(name, f"the bundle exceeds {MAX_MEMBERS} members or {MAX_UNPACKED_BYTES} bytes")
    return members


def _unsafe(name: str, why: str) -> ReleaseDataError:
    return ReleaseDataError("bundle_unsafe_member", f"bundle member {name!r} {why}; nothing was installed")


@cache
def offline_prefix() -> tuple[tuple[str, ...], str]:
    """A command prefix that runs its command with no network, and its name; `((), fallback)`
    when this host offers none (see the module docstring)."""
    candidates: list[tuple[str, ...]]
    if sys.platform == "darwin":
        candidates = [("sandbox-exec", "-p", "(version 1)(allow default)(deny network*)")]
    elif hasattr(os, "geteuid") and os.geteuid() == 0:
        candidates = [("unshare", "--net")]
    else:
        candidates = [("unshare", "--net", "--map-root-user")]
    for prefix in candidates:
        if shutil.which(prefix[0]) is None:
            continue
        try:
            works = subprocess.run([*prefix, "true"], capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.SubprocessError):
            works = False
        if works:
            return prefix, " ".join(prefix[:2])
    return (), NO_NETWORK_FALLBACK


def _pip_env(home: Path, *, offline: bool) -> dict[str, str]:
    """No pip configuration from the user, so only the bundle can supply wheels."""
    env = {key: value for key, value in pip_environment().items() if not key.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_CACHE_DIR="1", PIP_NO_INPUT="1", HOME=str(home))
    if not offline:
        for key in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            env[key] = _UNREACHABLE_PROXY
        env.pop("NO_PROXY", None)
        env.pop("no_proxy", None)
    return env


#: Run by the target interpreter: the pip wheel its ensurepip installs, where ensurepip keeps it
#: (a distribution's `WHEEL_PKG_DIR`, else the stdlib's `ensurepip/_bundled`), or nothing.
_FIND_BUNDLED_PIP = """
import ensurepip, os, sysconfig
name = "pip-%s-py3-none-any.whl" % ensurepip.version()
bundled = os.path.join(os.path.dirname(ensurepip.__file__), "_bundled")
for folder in (sysconfig.get_config_var("WHEEL_PKG_DIR"), bundled):
    if folder and os.path.isfile(os.path.join(folder, name)):
        print(os.path.abspath(os.path.join(folder, name)))
        break
"""


def bundled_pip(python: str) -> Path | None:
    """The pip wheel `python`'s ensurepip would install (module docstring, step 5), or None when
    `python` has no ensurepip or keeps its wheel elsewhere (the install then runs ensurepip)."""
    try:
        found = subprocess.run(
            [python, "-I", "-c", _FIND_BUNDLED_PIP], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return None
    wheel = Path(found.stdout.strip())
    return wheel if found.returncode == 0 and wheel.is_absolute() and wheel.is_file() else None


def _pin_pip(wheel: Path, requirements: Path) -> tuple[str, ...]:
    """pip's arguments that add `wheel` to the install, pinned to its version and sha256 in the
    requirements file `requirements` (written here), as `--require-hashes` wants every one."""
    version = wheel.name.split("-")[1]
    try:
        with wheel.open("rb") as file:
            digest = hashlib.file_digest(file, "sha256").hexdigest()
        requirements.write_text(f"pip=={version} --hash=sha256:{digest}\n")
    except OSError as exc:
        if is_enospc(exc):
            raise disk_full_error(requirements.parent, f"writing {requirements.name}") from None
        raise LocalStateError("install_unwritable", f"cannot pin pip in {requirements}: {exc}") from None
    return ("--find-links", str(wheel.parent), "-r", str(requirements))


def _pip_install(
    prefix: tuple[str, ...],
    pip: tuple[str, ...],
    env: dict[str, str],
    venv: Path,
    top: Path,
    *,
    extra: tuple[str, ...] = (),
) -> None:
    """Run `pip` (`host_pip.pip_for`'s command for the venv) to install the bundle unpacked at
    `top` into `venv` (module docstring, step 5)."""
    command = [
        *prefix,
        *pip,
        *("install", "--disable-pip-version-check", "--no-input", "--progress-bar", "off"),
        *("--no-warn-conflicts", *extra),
        *("--no-index", "--find-links", WHEELHOUSE_DIR, "--require-hashes", "-r", REQUIREMENTS_FILE),
    ]
    try:
        _run(command, env, top, "install_failed", PIP_TIMEOUT, writes=venv)
    except LocalStateError as exc:
        if "DO NOT MATCH THE HASHES" in exc.message:
            raise ReleaseDataError(
                "install_hash_mismatch",
                f"a wheel in the bundle does not match its pinned hash; the release is broken: {exc.message}",
            ) from None
        raise


def _run(
    command: list[str], env: dict[str, str], cwd: Path, code: str, timeout: int, *, writes: Path
) -> None:
    """Run one install step; a failure is `code` with the tail of its output, or `disk_full` when
    the output says it ran out of space writing under `writes`."""
    try:
        completed = subprocess.run(
            command,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LocalStateError(code, f"{command[0]} could not run: {exc}") from None
    if completed.returncode != 0:
        tail = "\n".join(completed.stderr.strip().splitlines()[-15:])
        said = [
            line.strip() for line in (completed.stderr + completed.stdout).splitlines() if names_enospc(line)
        ]
        if said:
            step = f"{' '.join(command[-4:])} (exit {completed.returncode})"
            raise disk_full_error(writes, step, "\n".join(said[:3]))
        raise LocalStateError(code, f"{' '.join(command)} exited {completed.returncode}:\n{tail}")
