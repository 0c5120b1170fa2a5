"""Free space: an update never fills the disk its live runtime writes to, and says so when a disk
is full.

The live runtime shares the config dir's filesystem with the update: its `state.db` and its
audit log (`audit.jsonl`, rotated) are written on every tool call, and a full disk makes it
refuse calls (`audit_unavailable`). So an update checks, before it writes anything, that each
filesystem it will write to has room for what it writes there plus, on the filesystem holding
the config dir, a margin kept for the live runtime (`runtime_margin`):

- before staging (`update/apply.py`), from the signed bundle size alone: the bundle and its
  unpacked copy in the staging job, and the venv estimated as `VENV_PER_BUNDLE_BYTE` times the
  bundle size;
- after unpacking, before the venv is made (`update/install.py`), from the bundle's own wheels:
  `VENV_PER_WHEEL_BYTE` times the unpacked size of every wheel in the wheelhouse plus the wheels
  installed with them (pip's; pip's and setuptools' where the install falls back to `ensurepip`).

Either refuses with `disk_space_low`, naming the filesystem (its mount point and the path
checked), the bytes free and the bytes needed; nothing has been written by then. A step that
fails anyway with ENOSPC (another process filled the disk meanwhile) is `disk_full`, naming the
step, the path and the bytes free (`disk_full_error`, `names_enospc`), never a bare exit status.

Measured on this tree's bundle for linux-x86_64-cp311 (2026-12-01): bundle 17.3 MB, its tar
members 17.6 MB, its wheels unpack to 56.3 MB and ensurepip's two to 10.9 MB; the venv made from
them took 106.2 MB (23.1 MB after ensurepip, 83.1 MB more for the wheels: 2.1x and 1.5x their
unpacked sizes, the difference is the bytecode pip compiles). So 2x unpacked wheels and 7x the
bundle size for the venv, with the bundle and its unpacked copy on top (peak use 141 MB; the
estimate before the download is 156 MB, the one after unpacking 134 MB for the venv). Again on
2026-12-07, with pip installed in the same run as the wheels and no setuptools: bundle 17.6 MB,
tar members 17.9 MB, wheels 57.1 MB unpacked and the pip wheel 7.0 MB; the venv took 99.3 MB
(5.6x the bundle, 1.55x the unpacked wheels; peak use 135 MB; the estimates 159 MB before the
download, 128 MB for the venv after unpacking).
"""

from __future__ import annotations

import errno
import os
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from herdr_mcp.layout import AUDIT_KEEP_FILES, AUDIT_MAX_FILE_BYTES, Layout
from herdr_mcp.update.errors import LocalStateError

#: The venv made from a bundle, per byte of the bundle (measured 6.1, then 5.6: module docstring).
VENV_PER_BUNDLE_BYTE = 7
#: The venv, per byte of unpacked wheel (measured 1.55 with pip's, 2026-12-07; see the module docstring).
VENV_PER_WHEEL_BYTE = 2
#: Kept free for the live runtime whatever its files are now.
MIN_RUNTIME_MARGIN = 64 * 1024 * 1024
#: What the audit log may grow to: the current file and the rotated ones (`runtime/audit.py`).
AUDIT_LOG_BUDGET = AUDIT_MAX_FILE_BYTES * (AUDIT_KEEP_FILES + 1)
_ENOSPC_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_ENOSPC_TEXTS = ("No space left on device", "[Errno 28]", "Disk quota exceeded", "[Errno 122]")


class DiskSpaceLow(LocalStateError):
    """`disk_space_low`: a filesystem lacks room for what the update would write there plus the
    margin; `path`, `free` and `needed` say which, how much is free and how much was needed."""

    def __init__(self, path: Path, mount: Path, free: int, needed: int, detail: str) -> None:
        super().__init__(
            "disk_space_low",
            f"the disk holding {path} (mounted at {mount}) has {free} bytes free, the update needs "
            f"{needed} ({detail}); nothing was written: free space there and run the update again",
        )
        self.path = path
        self.free = free
        self.needed = needed


@dataclass(frozen=True)
class SpaceNeed:
    """`size` bytes the update will write under `path`, described by `what`."""

    path: Path
    size: int
    what: str


def runtime_margin(config_dir: Path) -> int:
    """Bytes kept free for the live runtime of `config_dir`: `MIN_RUNTIME_MARGIN`, room for its
    audit log to reach `AUDIT_LOG_BUDGET`, and room for `state.db` (with its WAL) to double."""
    layout = Layout(config_dir)
    audit = sum(_size(path) for path in config_dir.glob(layout.audit_file.name + "*"))
    state = sum(_size(Path(f"{layout.state_file}{suffix}")) for suffix in ("", "-wal", "-shm"))
    return MIN_RUNTIME_MARGIN + max(0, AUDIT_LOG_BUDGET - audit) + state


def estimate_from_bundle_size(size: int) -> tuple[int, int]:
    """(staging, venv) bytes for a bundle of `size` bytes, before it is downloaded: the bundle and
    its unpacked copy, and `VENV_PER_BUNDLE_BYTE` times its size."""
    return 2 * size, VENV_PER_BUNDLE_BYTE * size


def estimate_venv(wheelhouse: Path, besides: Sequence[Path]) -> int:
    """Bytes the venv made from `wheelhouse`'s wheels will take: `VENV_PER_WHEEL_BYTE` times their
    unpacked sizes and those of the wheels `besides` it gets from elsewhere (pip's)."""
    wheels = sorted(wheelhouse.glob("*.whl")) + list(besides)
    return VENV_PER_WHEEL_BYTE * sum(_unpacked(wheel) for wheel in wheels)


def check_free_space(needs: Sequence[SpaceNeed], config_dir: Path) -> None:
    """Raise `DiskSpaceLow` unless every filesystem in `needs` has room for what it gets there,
    plus `runtime_margin(config_dir)` on the one holding `config_dir`."""
    margin = runtime_margin(config_dir)
    by_device: dict[int, list[SpaceNeed]] = {}
    for need in needs:
        by_device.setdefault(_device(need.path), []).append(need)
    live = _device(config_dir)
    for device, group in by_device.items():
        parts = [f"{need.size} for {need.what}" for need in group]
        needed = sum(need.size for need in group)
        if device == live:
            needed += margin
            parts.append(f"{margin} kept for the live runtime's state.db and audit log")
        path = group[0].path
        free = free_bytes(path)
        if free < needed:
            raise DiskSpaceLow(path, _mount_point(path), free, needed, ", ".join(parts))


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding `path`."""
    stats = os.statvfs(_existing(path))
    return stats.f_bavail * stats.f_frsize


def is_enospc(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _ENOSPC_ERRNOS


def names_enospc(text: str) -> bool:
    """Whether a step's output says it ran out of space (pip's and Python's wording of ENOSPC)."""
    return any(marker in text for marker in _ENOSPC_TEXTS)


def disk_full_error(path: Path, step: str, detail: str = "") -> LocalStateError:
    """`disk_full`: `step` ran out of space (ENOSPC) writing under `path`."""
    try:
        free = f"{free_bytes(path)} bytes free"
    except OSError:
        free = "free space unknown"
    return LocalStateError(
        "disk_full",
        f"No space left on device (ENOSPC) while {step}: the disk holding {path} (mounted at "
        f"{_mount_point(path)}) has {free}; free space there and run the update again"
        + (f"\n{detail}" if detail else ""),
    )


def ensurepip_wheels() -> list[Path]:
    """The wheels `python -m ensurepip` installs, as this interpreter keeps them next to it."""
    import ensurepip  # the wheels it installs are files next to it (`_bundled`)

    return sorted((Path(ensurepip.__file__).parent / "_bundled").glob("*.whl"))


def _unpacked(wheel: Path) -> int:
    try:
        with zipfile.ZipFile(wheel) as archive:
            return sum(info.file_size for info in archive.infolist())
    except (OSError, zipfile.BadZipFile):
        return _size(wheel)  # pip will refuse it; count it as it is


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _existing(path: Path) -> Path:
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _device(path: Path) -> int:
    return _existing(path).stat().st_dev


def _mount_point(path: Path) -> Path:
    path = _existing(path)
    device = path.stat().st_dev
    while path != path.parent and path.parent.stat().st_dev == device:
        path = path.parent
    return path
