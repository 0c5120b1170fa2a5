"""Staging against the release repository simulator: real HTTPS on loopback, a signed manifest.

Every case admits a real manifest (built for the asset, signed with a minisign key made here) and
downloads through `stage`; the simulator's log shows what was fetched from which host.
"""

from __future__ import annotations

import hashlib
import io
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from herdr_mcp.update.admission import (
    AdmissionRefused,
    TrustedRelease,
)
from herdr_mcp.update.errors import LocalStateError, ReleaseDataError, UpdateTransportError, UpdateUsageError
from herdr_mcp.update.staging import DownloadConfig, StagedAsset, stage
from tests.support.admitted_release import REPOSITORY, TARGET, VERSION, Keys, admitted
from tests.support.admitted_release import keys as keys  # the module-scoped signing keys fixture
from tests.support.repository_sim import Behavior, ReleaseRepositorySimulator, SimRelease
from tests.support.tmpfs import mounted_tmpfs

NAME = f"herdr-mcp-{VERSION}-{TARGET}.tar.gz"
CHUNK = 64 * 1024
PAYLOAD = bytes(range(256)) * 4096  # 1 MiB


@pytest.fixture
def sim() -> Iterator[ReleaseRepositorySimulator]:
    with ReleaseRepositorySimulator(REPOSITORY) as simulator:
        yield simulator


@dataclass
class Published:
    release: TrustedRelease
    sim_release: SimRelease
    url: str
    config: DownloadConfig


def publish(
    sim: ReleaseRepositorySimulator,
    keys: Keys,
    tmp_path: Path,
    *,
    served: bytes = PAYLOAD,
    behavior: Behavior | None = None,
    **config: Any,
) -> Published:
    """The manifest lists PAYLOAD; the simulator serves `served` with `behavior`."""
    source = tmp_path / NAME
    source.write_bytes(PAYLOAD)
    release = admitted(source, keys)
    sim_release = sim.add_release(f"v{VERSION}")
    sim_release.add_asset(NAME, served, behavior=behavior)
    url = sim.url(sim_release.download_path(NAME), host=sim.download_host)
    arguments: dict[str, Any] = {"allowed_hosts": sim.hosts, "ca_file": sim.ca_file, **config}
    return Published(release, sim_release, url, DownloadConfig(**arguments))


def run_stage(published: Published, jobs: Path, progress: io.StringIO | None = None) -> StagedAsset:
    return stage(published.release, TARGET, jobs, published.config, url=published.url, progress=progress)


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def raw_bytes_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts every body byte the client read off the wire (httpx2's `iter_raw`)."""
    counter = [0]
    original = httpx2.Response.iter_raw

    def counting(self: httpx2.Response, chunk_size: int | None = None) -> Iterator[bytes]:
        for chunk in original(self, chunk_size):
            counter[0] += len(chunk)
            yield chunk

    monkeypatch.setattr(httpx2.Response, "iter_raw", counting)
    return counter


def test_a_good_download_is_kept_under_its_name_in_a_private_job_dir(
    sim: ReleaseRepositorySimulator, keys: Keys, tmp_path: Path
) -> None:
    published = publish(sim, keys, tmp_path)
    jobs = tmp_path / "jobs"
    quiet = io.StringIO()
    staged = run_stage(published, jobs, quiet)

    assert staged.path == staged.job_dir / NAME
    assert staged.path.read_bytes() == PAYLOAD
    assert staged.sha256 == hashlib.sha256(PAYLOAD).hexdigest() and staged.size == len(PAYLOAD)
    assert re.fullmatch(rf"upd-[0-9]{{13}}-[0-9]+-{staged.sha256[:8]}", staged.job_dir.name)
    assert stat.S_IMODE(staged.job_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(staged.path.stat().st_mode) == 0o600
    assert [p.name for p in staged.job_dir.iterdir()] == [NAME]
    assert quiet.getvalue() == ""  # not a terminal: no progress
    assert [(entry.host, entry.status) for entry in sim.downloads()] == [(sim.download_host, 200)]


def test_progress_is_drawn_on_a_terminal(sim: ReleaseRepositorySimulator, keys: Keys, tmp_path: Path) -> None:
    published = publish(sim, keys, tmp_path)
    terminal = FakeTerminal()
    run_stage(published, tmp_path / "jobs", terminal)
    drawn = terminal.getvalue()
    # rich's bar: the asset's name, the bar, bytes of the total and the share; the last frame drawn.
    frames = [frame for frame in re.split(r"[\r\n]", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn)) if frame]
    last = frames[-1]
    assert last.startswith(NAME[:24])  # the name gives way to the figures on 80 columns
    assert "━" in last
    assert re.search(r"1\.0/1\.0 MiB\s+100%", last), repr(last)
    assert drawn.endswith("\n\x1b[?25h")  # left on its own line, the cursor shown again


def test_an_oversized_chunked_body_stops_at_the_cap(
    sim: ReleaseRepositorySimulator, keys: Keys, tmp_path: Path, raw_bytes_read: list[int]
) -> None:
    extra = 64 * 1024 * 1024
    published = publish(sim, keys, tmp_path, behavior=Behavior(chunked=True, extra_bytes=extra))
    jobs = tmp_path / "jobs"
    with pytest.raises(ReleaseDataError) as caught:
        run_stage(published, jobs)
    assert caught.value.code == "download_too_large"
    # Read at most one chunk beyond the manifest's size, not the 64 MiB on offer.
    assert len(PAYLOAD) < raw_bytes_read[0] <= len(PAYLOAD) + CHUNK
    assert list(jobs.iterdir()) == []


def test_an_oversized_declared_length_is_refused_before_reading(
    sim: ReleaseRepositorySimulator, keys: Keys, tmp_path: Path, raw_bytes_read: list[int]
) -> None:
    published = publish(sim, keys, tmp_path, behavior=Behavior(extra_bytes=1))
    with pytest.raises(ReleaseDataError) as caught:
        run_stage(published, tmp_path / "jobs")
    assert caught.value.code == "download_too_large"
    assert raw_bytes_read[0] == 0


@pytest.mark.parametrize(
    ("served", "behavior", "error", "code"),
    [
        (PAYLOAD[:-100], None, UpdateTransportError, "download_truncated"),
        (PAYLOAD[:-100], Behavior(declared_length=len(PAYLOAD)), UpdateTransportError, "download_truncated"),
        (PAYLOAD[:-1] + b"\x00", None, ReleaseDataError, "download_digest_mismatch"),
    ],
    ids=["short body", "short body, lying length", "one byte changed"],
)
def test_a_body_that_is_not_the_signed_asset_is_not_kept(
    sim: ReleaseRepositorySimulator,
    keys: Keys,
    tmp_path: Path,
    served: bytes,
    behavior: Behavior | None,
    error: type[Exception],
    code: str,
) -> None:
    published = publish(sim, keys, tmp_path, served=served, behavior=behavior)
    jobs = tmp_path / "jobs"
    with pytest.raises(error) as caught:
        run_stage(published, jobs)
    assert getattr(caught.value, "code", None) == code
    assert list(jobs.iterdir()) == []


def test_an_http_url_is_refused_without_a_request(
    sim: ReleaseRepositorySimulator, keys: Keys, tmp_path: Path
) -> None:
    published = publish(sim, keys, tmp_path)
    published.url = published.url.replace("https://", "http://")
    with pytest.raises(UpdateUsageError) as caught:
        run_stage(published, tmp_path / "jobs")
    assert caught.value.code == "download_not_https"
    assert sim.log == []
    assert not (tmp_path / "jobs").exists()


def test_a_redirect_to_http_is_not_followed(
    sim: ReleaseRepositorySimulator, keys: Keys, tmp_path: Path
) -> None:
    behavior = Behavior(redirect_host=sim.download_host, redirect_scheme="http")
    published = publish(sim, keys, tmp_path, behavior=behavior)
    with pytest.raises(UpdateTransportError) as caught:
        run_stage(published, tmp_path / "jobs")
    assert caught.value.code == "download_not_https"
    assert [entry.status for entry in sim.downloads()] == [302]


def test_a_redirect_to_an_allowed_host_is_followed(
    sim: ReleaseRepositorySimulator, keys: Keys, tmp_path: Path
) -> None:
    published = publish(sim, keys, tmp_path, behavior=Behavior(redirect_host=sim.api_host))
    staged = run_stage(published, tmp_path / "jobs")
    assert staged.path.read_bytes() == PAYLOAD
    asset_id = published.sim_release.assets[0].id
    assert [(entry.host, entry.path, entry.status) for entry in sim.downloads()] == [
        (sim.download_host, published.sim_release.download_path(NAME), 302),
        (sim.api_host, f"/objects/{asset_id}", 200),
    ]


def test_a_redirect_to_a_refused_host_is_not_contacted(
    sim: ReleaseRepositorySimulator, keys: Keys, tmp_path: Path
) -> None:
    published = publish(
        sim,
        keys,
        tmp_path,
        behavior=Behavior(redirect_host=sim.api_host),
        allowed_hosts=frozenset({sim.download_host}),
    )
    jobs = tmp_path / "jobs"
    with pytest.raises(UpdateTransportError) as caught:
        run_stage(published, jobs)
    assert caught.value.code == "download_redirect_refused"
    assert sim.api_host in caught.value.message
    assert {entry.host for entry in sim.log} == {sim.download_host}
    assert list(jobs.iterdir()) == []


def test_too_many_redirects_are_refused(sim: ReleaseRepositorySimulator, keys: Keys, tmp_path: Path) -> None:
    published = publish(sim, keys, tmp_path, behavior=Behavior(redirect_host=sim.api_host), max_redirects=0)
    with pytest.raises(UpdateTransportError) as caught:
        run_stage(published, tmp_path / "jobs")
    assert caught.value.code == "download_too_many_redirects"


@pytest.mark.parametrize(
    ("behavior", "config"),
    [
        (Behavior(chunk_size=1024, chunk_delay=2.0), {"read_timeout": 0.3}),
        (Behavior(chunk_size=16 * 1024, chunk_delay=0.05), {"deadline": 0.5}),
    ],
    ids=["a read stalls", "the body trickles past the deadline"],
)
def test_a_slow_body_times_out(
    sim: ReleaseRepositorySimulator, keys: Keys, tmp_path: Path, behavior: Behavior, config: dict[str, Any]
) -> None:
    published = publish(sim, keys, tmp_path, behavior=behavior, **config)
    jobs = tmp_path / "jobs"
    with pytest.raises(UpdateTransportError) as caught:
        run_stage(published, jobs)
    assert caught.value.code == "download_timeout"
    assert list(jobs.iterdir()) == []


def test_a_release_without_a_bundle_for_the_target_downloads_nothing(
    sim: ReleaseRepositorySimulator, keys: Keys, tmp_path: Path
) -> None:
    published = publish(sim, keys, tmp_path)
    with pytest.raises(AdmissionRefused) as caught:
        stage(published.release, "macos-arm64-cp312", tmp_path / "jobs", published.config, url=published.url)
    assert caught.value.code == "no_asset_for_target"
    assert sim.log == []


def test_a_url_naming_another_file_is_refused(
    sim: ReleaseRepositorySimulator, keys: Keys, tmp_path: Path
) -> None:
    published = publish(sim, keys, tmp_path)
    published.url = published.url.replace(NAME, "other.tar.gz")
    with pytest.raises(UpdateUsageError) as caught:
        run_stage(published, tmp_path / "jobs")
    assert caught.value.code == "download_url_mismatch"
    assert sim.log == []


def test_the_config_refuses_unusable_limits() -> None:
    with pytest.raises(UpdateUsageError) as caught:
        DownloadConfig(read_timeout=0)
    assert caught.value.code == "update_config_invalid"


def test_a_full_disk_while_staging_is_disk_full_naming_the_disk(
    sim: ReleaseRepositorySimulator, keys: Keys, tmp_path: Path
) -> None:
    """A real ENOSPC: the 1 MiB bundle streamed into a 256 KiB tmpfs."""
    published = publish(sim, keys, tmp_path)
    with mounted_tmpfs(tmp_path / "disk", 256 * 1024) as disk:
        with pytest.raises(LocalStateError) as caught:
            run_stage(published, disk / "jobs")
        assert caught.value.code == "disk_full", caught.value
        assert caught.value.message.startswith("No space left on device (ENOSPC) while staging: writing ")
        assert f"(mounted at {disk})" in caught.value.message
        assert list((disk / "jobs").iterdir()) == []  # the job directory is gone again
