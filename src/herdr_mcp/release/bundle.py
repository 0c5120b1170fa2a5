"""Workstation bundles: our wheel and every dependency wheel for one target, hash-locked (SPEC 5).

A bundle is one deterministic archive, `herdr-mcp-<version>-<target>.tar.gz`, holding one
directory of the same name with

    requirements.txt   every wheel pinned `name==version --hash=sha256:...` (ours too)
    wheelhouse/        the wheels themselves

and installs with no network into a fresh venv:

    python3.11 -m venv VENV
    VENV/bin/pip install --no-index --find-links wheelhouse --require-hashes -r requirements.txt

Targets come from `release/config.toml` (`load_release_config`): one per platform and CPython
version. The dependency set is what pip resolves for our wheel's metadata with `pip download
--only-binary=:all:` and the target's platform tags, Python version and ABI. pip evaluates
environment markers (`sys_platform`, `platform_machine`, `python_version`) against the interpreter
that runs it, not against `--platform`, so `bundle` runs pip with an interpreter of the target
and refuses any other (the release workflow builds each target on a matching runner).

Errors are `BundleError` with a stable code: `release_config_invalid`, `bundle_target_unknown`,
`bundle_wheel_invalid`, `bundle_host_mismatch`, `bundle_download_failed`, `bundle_wheelhouse_invalid`.
"""

from __future__ import annotations

import calendar
import gzip
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from herdr_mcp.errors import LocalFault
from herdr_mcp.release.build import sha256_file

#: Called with one line of progress (the CLI prints it on stderr).
Progress = Callable[[str], None]

#: Where maintainers keep the release configuration, relative to the repository root.
DEFAULT_CONFIG_PATH = Path("release") / "config.toml"
REQUIREMENTS_FILE = "requirements.txt"
WHEELHOUSE_DIR = "wheelhouse"
BUNDLE_SUFFIX = ".tar.gz"
#: Resolving and downloading about thirty wheels takes seconds to a minute; this bounds a hung pip.
_DOWNLOAD_TIMEOUT_SECONDS = 900

_NAME = re.compile(r"[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?")
_PYTHON_VERSION = re.compile(r"3\.[0-9]{1,2}")
_PLATFORM_TAG = re.compile(r"[a-z0-9_]+")
_RUNNER = re.compile(r"[a-z0-9][a-z0-9.-]*")
_RUNNER_ARCHES = ("x64", "arm64")
# Markers of the interpreter that will run pip, in the order `_host_markers` prints them.
_HOST_QUERY = (
    "import json, platform, sys; "
    "print(json.dumps([sys.platform, platform.machine(), '%d.%d' % sys.version_info[:2], "
    "sys.implementation.name]))"
)


class BundleError(LocalFault):
    """A bundle (or release configuration) that cannot be made as asked; `code` is stable."""


@dataclass(frozen=True)
class Channel:
    """An update channel: `stable` admits no prerelease, `preview` admits them."""

    name: str
    prereleases: bool


@dataclass(frozen=True)
class Platform:
    """An operating system and machine that bundles are built for, and the runner that builds them."""

    name: str
    sys_platform: str
    platform_machine: str
    tags: tuple[str, ...]
    runner: str
    runner_arch: str


@dataclass(frozen=True)
class Target:
    """What `pip download` needs to fetch wheels for one platform and CPython version."""

    name: str
    platform_tags: tuple[str, ...]
    python_version: str
    sys_platform: str
    platform_machine: str
    implementation: str = "cp"

    @property
    def abi(self) -> str:
        return "cp" + self.python_version.replace(".", "")


@dataclass(frozen=True)
class ReleaseConfig:
    """The parsed `release/config.toml`."""

    channels: tuple[Channel, ...]
    platforms: tuple[Platform, ...]
    python_versions: tuple[str, ...]

    @property
    def targets(self) -> tuple[Target, ...]:
        return tuple(
            Target(
                name=f"{platform.name}-cp{version.replace('.', '')}",
                platform_tags=platform.tags,
                python_version=version,
                sys_platform=platform.sys_platform,
                platform_machine=platform.platform_machine,
            )
            for platform in self.platforms
            for version in self.python_versions
        )

    def target(self, name: str) -> Target:
        """The target called `name`; raises `BundleError("bundle_target_unknown")` listing the known ones."""
        for target in self.targets:
            if target.name == name:
                return target
        known = ", ".join(target.name for target in self.targets)
        raise BundleError(
            "bundle_target_unknown", f"no target {name!r} in the release configuration; known: {known}"
        )

    @classmethod
    def from_toml(cls, text: str, *, origin: str = "release configuration") -> ReleaseConfig:
        """Parse and check the configuration (unknown keys are refused, so a typo cannot pass
        silently). Raises `BundleError("release_config_invalid")` naming the offending key."""
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise BundleError("release_config_invalid", f"{origin}: {exc}") from None
        _keys(document, {"channels", "python", "platforms"}, origin)
        channels = tuple(
            Channel(
                name, _typed(_keys(table, {"prereleases"}, f"{origin}: channels.{name}"), "prereleases", bool)
            )
            for name, table in _tables(document, "channels", origin).items()
        )
        python = _keys(document["python"], {"versions"}, f"{origin}: python")
        versions = _strings(python, "versions", _PYTHON_VERSION, f"{origin}: python")
        platforms = tuple(
            _platform(name, table, f"{origin}: platforms.{name}")
            for name, table in _tables(document, "platforms", origin).items()
        )
        for name in [channel.name for channel in channels] + [platform.name for platform in platforms]:
            if not _NAME.fullmatch(name):
                raise BundleError(
                    "release_config_invalid", f"{origin}: {name!r} may hold only a-z, 0-9, '-' and '_'"
                )
        return cls(channels=channels, platforms=platforms, python_versions=versions)


def load_release_config(path: Path = DEFAULT_CONFIG_PATH) -> ReleaseConfig:
    """Read the release configuration at `path` (default: release/config.toml of the current
    directory). Raises `BundleError("release_config_invalid")`."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BundleError("release_config_invalid", f"cannot read {path}: {exc}") from None
    return ReleaseConfig.from_toml(text, origin=str(path))


def bundle_filename(project: str, version: str, target_name: str) -> str:
    """`herdr-mcp-0.1.0-linux-x86_64-cp311.tar.gz` for project herdr-mcp, 0.1.0, linux-x86_64-cp311."""
    return f"{project}-{version}-{target_name}{BUNDLE_SUFFIX}"


def parse_bundle_filename(name: str, project: str, version: str) -> str | None:
    """The target named by a bundle file name of `project` at `version`, or None if it is not one."""
    prefix = f"{project}-{version}-"
    if not (name.startswith(prefix) and name.endswith(BUNDLE_SUFFIX)):
        return None
    target = name[len(prefix) : -len(BUNDLE_SUFFIX)]
    return target if _NAME.fullmatch(target) else None


def bundle(
    wheel: Path,
    out_dir: Path,
    *,
    target: Target,
    source_date_epoch: int | None = None,
    python: str = sys.executable,
    progress: Progress | None = None,
) -> Path:
    """Make the bundle of `wheel` for `target` in `out_dir`; return the archive's path.

    `python` runs `pip download` and must be an interpreter of the target (same `sys_platform`,
    `platform_machine` and Python version). Every timestamp in the archive is
    `source_date_epoch`, else the SOURCE_DATE_EPOCH environment variable, else the newest
    timestamp inside `wheel` (which our build takes from the commit), so the same wheels give
    the same bytes. Raises `BundleError`.
    """
    project, version = _wheel_identity(wheel)
    _check_host(python, target)
    epoch = _source_date_epoch(source_date_epoch, wheel)
    top = bundle_filename(project, version, target.name).removesuffix(BUNDLE_SUFFIX)
    with tempfile.TemporaryDirectory(prefix="herdr-mcp-bundle-") as scratch_name:
        root = Path(scratch_name) / top
        wheelhouse = root / WHEELHOUSE_DIR
        wheelhouse.mkdir(parents=True)
        _say(progress, f"downloading the dependency wheels of {wheel.name} for {target.name}")
        _download(python, wheel, wheelhouse, target)
        pins = _pins(wheelhouse)
        ours = pins.get(project)
        if ours is None or ours[1] != sha256_file(wheel):
            raise BundleError(
                "bundle_wheelhouse_invalid", f"pip did not place {wheel.name} itself in the wheelhouse"
            )
        _say(progress, f"{len(pins)} wheels, pinned by sha256 in {REQUIREMENTS_FILE}")
        (root / REQUIREMENTS_FILE).write_text(_requirements(project, version, target, pins), encoding="utf-8")
        out_dir.mkdir(parents=True, exist_ok=True)
        archive = out_dir / bundle_filename(project, version, target.name)
        staging = out_dir / f".{archive.name}.partial"  # same file system: the rename is atomic
        try:
            _write_archive(root, staging, epoch)
            os.replace(staging, archive)
        finally:
            staging.unlink(missing_ok=True)
    _say(progress, f"wrote {archive}")
    return archive


# --- configuration parsing -----------------------------------------------------------------------


def _keys(table: object, allowed: set[str], where: str) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise BundleError("release_config_invalid", f"{where} must be a table")
    unknown = sorted(set(table) - allowed)
    missing = sorted(allowed - set(table))
    if unknown or missing:
        problem = f"unknown key {unknown[0]!r}" if unknown else f"missing key {missing[0]!r}"
        raise BundleError("release_config_invalid", f"{where}: {problem}")
    return table


def _tables(document: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    tables = document[key]
    if not isinstance(tables, dict) or not tables:
        raise BundleError("release_config_invalid", f"{where}: [{key}] must hold at least one table")
    return tables


def _typed(table: Mapping[str, Any], key: str, kind: type) -> Any:
    value = table[key]
    if not isinstance(value, kind):
        raise BundleError("release_config_invalid", f"{key} must be a {kind.__name__}, not {value!r}")
    return value


def _strings(table: Mapping[str, Any], key: str, pattern: re.Pattern[str], where: str) -> tuple[str, ...]:
    values = table[key]
    if (
        not isinstance(values, list)
        or not values
        or not all(isinstance(value, str) and pattern.fullmatch(value) for value in values)
        or len(set(values)) != len(values)
    ):
        raise BundleError(
            "release_config_invalid", f"{where}: {key} must be a list of distinct {pattern.pattern}"
        )
    return tuple(values)


def _platform(name: str, table: object, where: str) -> Platform:
    fields = _keys(table, {"sys_platform", "platform_machine", "tags", "runner", "runner_arch"}, where)
    for key in ("sys_platform", "platform_machine", "runner", "runner_arch"):
        _typed(fields, key, str)
    if not _RUNNER.fullmatch(fields["runner"]) or fields["runner_arch"] not in _RUNNER_ARCHES:
        raise BundleError(
            "release_config_invalid", f"{where}: runner or runner_arch ({_RUNNER_ARCHES}) is malformed"
        )
    return Platform(
        name=name,
        sys_platform=fields["sys_platform"],
        platform_machine=fields["platform_machine"],
        tags=_strings(fields, "tags", _PLATFORM_TAG, where),
        runner=fields["runner"],
        runner_arch=fields["runner_arch"],
    )


# --- building ------------------------------------------------------------------------------------


def _wheel_name_and_version(filename: str) -> tuple[str, str] | None:
    """(normalized project name, version) of a wheel file name, None when it is no valid one.

    The name is read by `packaging` (the binary distribution format spec: name, PEP 440 version,
    optional build number, tags), the way pip reads it.
    """
    try:
        name, version, _build, _tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    return str(name), str(version)


def _wheel_identity(wheel: Path) -> tuple[str, str]:
    identity = _wheel_name_and_version(wheel.name)
    if identity is None or not wheel.is_file():
        raise BundleError("bundle_wheel_invalid", f"{wheel} is not a wheel file")
    try:
        with zipfile.ZipFile(wheel):
            pass
    except (zipfile.BadZipFile, OSError) as exc:
        raise BundleError("bundle_wheel_invalid", f"{wheel} is not a readable wheel: {exc}") from None
    return identity


def _check_host(python: str, target: Target) -> None:
    try:
        completed = subprocess.run(
            [python, "-c", _HOST_QUERY], capture_output=True, text=True, check=True, timeout=60
        )
        sys_platform, machine, version, implementation = json.loads(completed.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise BundleError("bundle_host_mismatch", f"cannot ask {python} what it is: {exc}") from None
    host = (sys_platform, machine, version, implementation)
    wanted = (target.sys_platform, target.platform_machine, target.python_version, "cpython")
    if host != wanted:
        raise BundleError(
            "bundle_host_mismatch",
            f"target {target.name} needs CPython {target.python_version} on {target.sys_platform}/"
            f"{target.platform_machine}, but {python} is {implementation} {version} on "
            f"{sys_platform}/{machine}: "
            "pip evaluates dependency markers against the interpreter that runs it, so build this "
            "bundle on a matching host (the release workflow has a runner per target)",
        )


def _source_date_epoch(explicit: int | None, wheel: Path) -> int:
    if explicit is not None:
        return explicit
    from_env = os.environ.get("SOURCE_DATE_EPOCH", "")
    if from_env.isdecimal():
        return int(from_env)
    with zipfile.ZipFile(wheel) as archive:
        newest = max((info.date_time for info in archive.infolist()), default=(1980, 1, 1, 0, 0, 0))
    # Wheel timestamps are UTC here: hatchling writes SOURCE_DATE_EPOCH as UTC.
    return calendar.timegm((*newest, 0, 0, 0))


def _download(python: str, wheel: Path, wheelhouse: Path, target: Target) -> None:
    command = [
        python,
        *("-m", "pip", "download", "--disable-pip-version-check", "--no-input", "--progress-bar", "off"),
        "--only-binary=:all:",
        *("--implementation", target.implementation),
        *("--python-version", target.python_version),
        *("--abi", target.abi),
        *(argument for tag in target.platform_tags for argument in ("--platform", tag)),
        *("--dest", str(wheelhouse)),
        str(wheel),
    ]
    try:
        completed = subprocess.run(
            command, capture_output=True, text=True, check=False, timeout=_DOWNLOAD_TIMEOUT_SECONDS
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BundleError("bundle_download_failed", f"pip download could not run: {exc}") from None
    if completed.returncode != 0:
        tail = "\n".join(completed.stderr.strip().splitlines()[-15:])
        raise BundleError("bundle_download_failed", f"pip download exited {completed.returncode}:\n{tail}")


def _pins(wheelhouse: Path) -> dict[str, tuple[str, str]]:
    """{canonical name: (version, sha256)} of every wheel; refuses anything else in the wheelhouse."""
    pins: dict[str, tuple[str, str]] = {}
    for path in sorted(wheelhouse.iterdir()):
        identity = _wheel_name_and_version(path.name)
        if identity is None or not path.is_file():
            raise BundleError("bundle_wheelhouse_invalid", f"{path.name} in the wheelhouse is not a wheel")
        name, version = identity
        if name in pins:
            raise BundleError("bundle_wheelhouse_invalid", f"two wheels of {name} in the wheelhouse")
        pins[name] = (version, sha256_file(path))
    return pins


def _requirements(project: str, version: str, target: Target, pins: Mapping[str, tuple[str, str]]) -> str:
    lines = [
        f"# {project} {version} for {target.name}: every wheel in {WHEELHOUSE_DIR}/, pinned by sha256.",
        "# Install with no network into a fresh venv, from this directory:",
        f"#   python{target.python_version} -m venv VENV",
        f"#   VENV/bin/pip install --no-index --find-links {WHEELHOUSE_DIR} --require-hashes "
        f"-r {REQUIREMENTS_FILE}",
    ]
    lines.extend(
        f"{name}=={pin_version} --hash=sha256:{digest}" for name, (pin_version, digest) in pins.items()
    )
    return "\n".join(lines) + "\n"


def _write_archive(root: Path, archive: Path, epoch: int) -> None:
    """A tar.gz of `root` that depends only on the files' names and bytes: sorted entries, one
    timestamp, owner 0:0, fixed modes, GNU format (no pax headers), no name or time in the gzip
    header beyond `epoch`."""
    entries: list[Path] = [root, *sorted(root.rglob("*"), key=lambda path: path.relative_to(root).as_posix())]
    with (
        archive.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=epoch) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.GNU_FORMAT) as tar,
    ):
        for path in entries:
            info = tarfile.TarInfo(path.relative_to(root.parent).as_posix())
            info.mtime = epoch
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if path.is_dir():
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
                continue
            data = path.read_bytes()
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))


def _say(progress: Progress | None, line: str) -> None:
    if progress is not None:
        progress(line)
