"""Staging: download one admitted asset into a fresh job directory, verified before it is kept.

`stage(release, target, jobs_dir, config)` makes `jobs_dir/upd-<ms>-<pid>-<sha8>/` (0700), streams
the release's asset for `target` into a temporary file there and keeps it under its own name only
once it is verified (python-tuf: write to disk only after verifying, atomically):

1. the URL is HTTPS on an allowed host; redirects are followed by hand only to allowed HTTPS hosts
   (`herdr_mcp.update.transport`);
2. a declared Content-Length above the manifest's size is refused before reading;
3. while streaming, the first byte beyond the manifest's size stops the transfer
   (`download_too_large`), and so does the deadline (`download_timeout`);
4. at the end, the length must be the manifest's size (`download_truncated`) and the sha256 the
   manifest's (`download_digest_mismatch`);
5. fsync, then `os.replace` to the final name, then fsync the directory.

It returns a `StagedRelease`: the file bound to the admitted release whose manifest it matched.
Only `stage` makes one (a hand-made one is refused: `install_unverified`), and `install_generation`
takes nothing else, so what is installed is always bytes a verified release signed.

Decision on failure: the job directory is removed entirely, so a failed stage leaves nothing
behind, final or partial. (A job directory whose process was killed keeps only its `.partial`
file; `upd-*` directories without a final file belong to no running process once their pid is gone.)

Errors, by who is at fault: `ReleaseDataError` (`download_too_large`, `download_digest_mismatch`:
the hosted bytes are not the ones the release signed; retrying does not help), `AdmissionRefused`
(`no_asset_for_target`), `UpdateTransportError` (`download_truncated`, `download_timeout`,
`download_http_error`, `download_unreachable`, `download_not_https`, `download_redirect_refused`,
`download_too_many_redirects`), `UpdateUsageError` (`download_not_https`, `download_host_refused`,
`download_url_invalid`, `download_url_mismatch`, `update_config_invalid`) and `LocalStateError`
(`staging_unwritable`; `disk_full` when a write ran out of space, naming the disk).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from dataclasses import InitVar, dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

import httpx2

from herdr_mcp.progress import download_bar
from herdr_mcp.release.manifest import Asset
from herdr_mcp.update.admission import TrustedRelease
from herdr_mcp.update.discovery import GITHUB_HOSTS
from herdr_mcp.update.diskspace import disk_full_error, is_enospc
from herdr_mcp.update.errors import LocalStateError, ReleaseDataError, UpdateTransportError, UpdateUsageError
from herdr_mcp.update.transport import (
    TransportRules,
    check_https_url,
    declared_length,
    open_client,
    stream_get,
    timeout_error,
)

#: GitHub sends `browser_download_url` to one signed CDN URL: one redirect, two more for slack.
DEFAULT_MAX_REDIRECTS = 3
#: Seconds to connect and to wait for any one read: GitHub's CDN answers within a second.
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_READ_TIMEOUT = 30.0
#: Seconds for the whole download: a bundle is about 20 MB; 30 minutes is 11 kB/s for it.
DEFAULT_DEADLINE = 1800.0
#: Bytes read per chunk; also how often the progress bar and the deadline are checked at least.
DEFAULT_CHUNK_SIZE = 64 * 1024
JOB_PREFIX = "upd-"


@dataclass(frozen=True)
class DownloadConfig:
    """Every limit a download enforces, and where it may go (the size cap is the manifest's).

    `allowed_hosts` are the hosts the first URL and every redirect may be on; `ca_file`, when set,
    is the only trust anchor (tests: the simulator's CA). Raises
    `UpdateUsageError("update_config_invalid")` on construction when a value is unusable.
    """

    allowed_hosts: frozenset[str] = GITHUB_HOSTS
    ca_file: Path | None = None
    max_redirects: int = DEFAULT_MAX_REDIRECTS
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    deadline: float = DEFAULT_DEADLINE
    chunk_size: int = DEFAULT_CHUNK_SIZE

    def __post_init__(self) -> None:
        if self.max_redirects < 0 or self.chunk_size < 1:
            raise UpdateUsageError(
                "update_config_invalid", "max_redirects >= 0 and chunk_size >= 1 are required"
            )
        for name in ("connect_timeout", "read_timeout", "deadline"):
            if not getattr(self, name) > 0:
                raise UpdateUsageError("update_config_invalid", f"{name} must be positive")

    def rules(self) -> TransportRules:
        return TransportRules(
            prefix="download",
            allowed_hosts=self.allowed_hosts,
            ca_file=self.ca_file,
            max_redirects=self.max_redirects,
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
        )


@dataclass(frozen=True)
class StagedAsset:
    """A file under its own name in the job directory `job_dir`, with its size and sha256."""

    path: Path
    sha256: str
    size: int
    job_dir: Path


_STAGED = object()


@dataclass(frozen=True)
class StagedRelease(StagedAsset):
    """The asset `asset` of the admitted release `release`, downloaded and checked against it by
    `stage`, which alone makes one (as only `admit` makes a `TrustedRelease`); what
    `install_generation` takes. Raises `UpdateUsageError("install_unverified")` when made by
    hand or by `dataclasses.replace`."""

    release: TrustedRelease
    asset: Asset
    _staged: InitVar[object] = None

    def __post_init__(self, _staged: object) -> None:
        if _staged is not _STAGED:
            raise UpdateUsageError(
                "install_unverified",
                "a staged release is made by stage() from an admitted release only; "
                "a local, unverified bundle is installed with install_unsafe_local_bundle()",
            )


def stage(
    release: TrustedRelease,
    target: str,
    jobs_dir: Path,
    config: DownloadConfig,
    *,
    url: str | None = None,
    progress: TextIO | None = None,
) -> StagedRelease:
    """Download the release's bundle for `target` into a new job directory under `jobs_dir`.

    `url` is where to fetch it (the discovered `browser_download_url` of the asset of the same
    name); by default the manifest's URL. Either way the bytes must be the manifest's. Progress goes
    to `progress` (default stderr) only when that stream is a terminal. Raises the errors of the
    module docstring; on any of them the job directory is gone.
    """
    asset = release.asset_for(target)
    source = url if url is not None else asset.url
    # 1. HTTPS on an allowed host, naming the manifest's asset (redirects: in transport).
    parsed = check_https_url(source, config.rules())
    if not parsed.path.endswith("/" + asset.name):
        raise UpdateUsageError(
            "download_url_mismatch", f"{source} does not name the asset {asset.name} of the manifest"
        )
    job_dir = _make_job_dir(jobs_dir, asset.sha256)
    try:
        path = _download(
            source, asset.name, asset.size, asset.sha256, job_dir, config, progress or sys.stderr
        )
    except BaseException:
        shutil.rmtree(job_dir, ignore_errors=True)
        raise
    return StagedRelease(path, asset.sha256, asset.size, job_dir, release, asset, _STAGED)


def _make_job_dir(jobs_dir: Path, sha256: str) -> Path:
    name = f"{JOB_PREFIX}{time.time_ns() // 1_000_000}-{os.getpid()}-{sha256[:8]}"
    try:
        jobs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        job_dir = jobs_dir / name
        job_dir.mkdir(mode=0o700)
    except OSError as exc:
        raise _unwritable(
            exc, jobs_dir, "creating the staging job directory", f"cannot create {jobs_dir / name}: {exc}"
        ) from None
    return job_dir


def _download(
    url: str, name: str, size: int, sha256: str, job_dir: Path, config: DownloadConfig, stream: TextIO
) -> Path:
    rules = config.rules()
    deadline = time.monotonic() + config.deadline
    partial = job_dir / f".{name}.partial"
    digest = hashlib.sha256()
    received = 0
    bar = download_bar(name, size, stream)
    try:
        with (
            open_client(rules) as client,
            stream_get(client, url, rules, deadline) as response,
            _create(partial) as out,
        ):
            # 2. A declared length above the cap is refused before a byte is read.
            declared = declared_length(response)
            if declared is not None and declared > size:
                raise _too_large(url, size, f"it declares {declared} bytes")
            try:
                for chunk in response.iter_raw(config.chunk_size):
                    received += len(chunk)
                    # 3. The cap is enforced as the bytes arrive, not after.
                    if received > size:
                        raise _too_large(url, size, "more arrived")
                    if time.monotonic() > deadline:
                        raise timeout_error(url, rules)
                    digest.update(chunk)
                    out.write(chunk)
                    if bar is not None:
                        bar.update(received)
            except httpx2.RemoteProtocolError:
                # The connection ended before the length the server declared: a short body.
                raise _truncated(url, received, size) from None
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        raise _unwritable(exc, job_dir, f"writing {partial.name}", f"cannot write {partial}: {exc}") from None
    finally:
        if bar is not None:
            bar.finish()
    # 4. Length, then digest.
    if received != size:
        raise _truncated(url, received, size)
    if digest.hexdigest() != sha256:
        raise ReleaseDataError(
            "download_digest_mismatch",
            f"{name} from {url} has sha256 {digest.hexdigest()}, the signed manifest says {sha256}; "
            "the hosted asset is not the released one",
        )
    # 5. Keep it under its own name, atomically.
    final = job_dir / name
    try:
        os.replace(partial, final)
        _fsync_dir(job_dir)
    except OSError as exc:
        raise _unwritable(exc, job_dir, f"keeping {name}", f"cannot keep {final}: {exc}") from None
    return final


def _create(path: Path) -> BinaryIO:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise _unwritable(exc, path.parent, f"creating {path.name}", f"cannot create {path}: {exc}") from None
    return os.fdopen(fd, "wb")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unwritable(exc: OSError, where: Path, step: str, message: str) -> LocalStateError:
    """`disk_full` when `exc` is ENOSPC (the disk named), else `staging_unwritable`."""
    if is_enospc(exc):
        return disk_full_error(where, f"staging: {step}")
    return LocalStateError("staging_unwritable", message)


def _truncated(url: str, received: int, size: int) -> UpdateTransportError:
    return UpdateTransportError(
        "download_truncated", f"GET {url} ended after {received} of {size} bytes; try again"
    )


def _too_large(url: str, size: int, what: str) -> ReleaseDataError:
    return ReleaseDataError(
        "download_too_large",
        f"GET {url} sent more than the {size} bytes the signed manifest lists ({what}); "
        "refused while reading",
    )
