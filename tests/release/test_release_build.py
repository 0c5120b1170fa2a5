"""`release build` and `release check-reproducible`: real builds with the pinned hatchling.

The build environment (a venv with hatchling from PyPI) is made once for the module; every build
runs in a fresh clone of HEAD, so uncommitted edits in the working tree never reach these tests.
"""

from __future__ import annotations

import calendar
import email
import json
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from herdr_mcp import __version__
from herdr_mcp.release.build import (
    ARCHIVE_CONTAINER,
    BuildEnvironment,
    BuildError,
    BuildSystem,
    build,
    check_reproducible,
    commit_time,
    sha256_file,
)

ROOT = Path(__file__).resolve().parents[2]
WHEEL = f"herdr_mcp-{__version__}-py3-none-any.whl"
SDIST = f"herdr_mcp-{__version__}.tar.gz"


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> BuildEnvironment:
    requires = BuildSystem.from_pyproject(ROOT).requires
    return BuildEnvironment.create(tmp_path_factory.mktemp("build-env") / "env", requires)


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    tree = tmp_path / "clone"
    _git("clone", "--quiet", "--no-hardlinks", str(ROOT), str(tree))
    return tree


def test_the_build_backend_is_pinned_in_pyproject() -> None:
    system = BuildSystem.from_pyproject(ROOT)
    assert system.backend == "hatchling.build"
    assert len(system.requires) == 1 and system.requires[0].startswith("hatchling==")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_build_makes_a_wheel_and_sdist_dated_by_the_commit(
    clone: Path, environment: BuildEnvironment
) -> None:
    out = clone / "dist"
    sdist, wheel = build(clone, out, environment=environment)
    assert (sdist.name, wheel.name) == (SDIST, WHEEL)
    assert sorted(path.name for path in out.iterdir()) == sorted([SDIST, WHEEL])
    epoch = int(_git("log", "-1", "--format=%ct", cwd=clone))
    assert commit_time(clone) == epoch

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert {calendar.timegm((*info.date_time, 0, 0, 0)) for info in archive.infolist()} == {
            epoch - epoch % 2
        }
    # What the runtime reads at run time is packaged (SPEC 2: never read from the source tree).
    assert {
        "herdr_mcp/contract/catalogs/runtime-epoch-5.json",
        "herdr_mcp/release/runtime-manifest.schema.json",
        "herdr_mcp/attestations/README.md",
        "herdr_mcp/cli/__init__.py",
    } <= names
    with tarfile.open(sdist, "r:gz") as archive:
        members = archive.getmembers()
    assert {member.mtime for member in members} == {epoch}
    assert {(member.uid, member.gid) for member in members} == {(0, 0)}
    assert f"herdr_mcp-{__version__}/pyproject.toml" in {member.name for member in members}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_wheel_and_sdist_carry_the_license_and_project_urls(
    clone: Path, environment: BuildEnvironment
) -> None:
    """The MIT text the metadata names ships in both artifacts; the URLs name the repository
    whose release workflow attestations/identity-policy.json trusts."""
    sdist, wheel = build(clone, clone / "dist", environment=environment)
    repository = json.loads((ROOT / "attestations" / "identity-policy.json").read_text())["repository"]
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith("MIT License\n")
    dist_info = f"herdr_mcp-{__version__}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read(f"{dist_info}/licenses/LICENSE").decode() == license_text
        metadata = email.message_from_bytes(archive.read(f"{dist_info}/METADATA"))
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL") or [])
    assert urls["Repository"] == f"https://github.com/{repository}"
    assert urls["Issues"] == f"https://github.com/{repository}/issues"
    with tarfile.open(sdist, "r:gz") as archive:
        member = archive.extractfile(f"herdr_mcp-{__version__}/LICENSE")
        assert member is not None
        assert member.read().decode() == license_text


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_explicit_source_date_epoch_is_used(clone: Path, environment: BuildEnvironment) -> None:
    sdist, _ = build(clone, clone / "dist", source_date_epoch=1_700_000_000, environment=environment)
    with tarfile.open(sdist, "r:gz") as archive:
        assert {member.mtime for member in archive.getmembers()} == {1_700_000_000}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_check_reproducible_passes_on_a_clean_clone(tmp_path: Path, environment: BuildEnvironment) -> None:
    report = check_reproducible(ROOT, tmp_path, environment=environment)
    assert report.reproducible, "\n".join(report.describe())
    assert report.commit == _git("rev-parse", "HEAD")
    assert report.source_date_epoch == int(_git("log", "-1", "--format=%ct"))
    assert sorted(artifact.name for artifact in report.artifacts) == sorted([SDIST, WHEEL])
    for artifact in report.artifacts:
        assert artifact.first_sha256 == sha256_file(report.second_dist / artifact.name)
    # Both builds really happened, each in its own clone.
    assert report.first_dist != report.second_dist
    assert (report.first_dist.parent / "first-tree" / ".git").is_dir()
    assert (report.first_dist.parent / "second-tree" / ".git").is_dir()
    assert report.to_dict()["reproducible"] is True


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_check_reproducible_fails_and_names_what_differs(
    tmp_path: Path, environment: BuildEnvironment
) -> None:
    def edit_second_tree(tree: Path, index: int) -> None:
        if index == 1:
            module = tree / "src" / "herdr_mcp" / "__init__.py"
            module.write_text(module.read_text(encoding="utf-8") + "# differs\n", encoding="utf-8")

    report = check_reproducible(ROOT, tmp_path, prepare_tree=edit_second_tree, environment=environment)
    assert not report.reproducible
    differing = {artifact.name: artifact for artifact in report.differing}
    assert set(differing) == {SDIST, WHEEL}
    wheel, sdist = differing[WHEEL], differing[SDIST]
    assert wheel.first_sha256 and wheel.second_sha256 and wheel.first_sha256 != wheel.second_sha256
    assert set(wheel.differing_members) == {
        "herdr_mcp/__init__.py",
        f"herdr_mcp-{__version__}.dist-info/RECORD",
    }
    assert sdist.differing_members == (f"herdr_mcp-{__version__}/src/herdr_mcp/__init__.py",)
    text = "\n".join(report.describe())
    for needle in (WHEEL, SDIST, wheel.first_sha256, wheel.second_sha256, "herdr_mcp/__init__.py"):
        assert needle in text
    assert ARCHIVE_CONTAINER not in text


def test_an_unpinned_build_requirement_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling>=1.20"]\nbuild-backend = "hatchling.build"\n',
        encoding="utf-8",
    )
    with pytest.raises(BuildError) as caught:
        build(tmp_path, tmp_path / "dist", source_date_epoch=0)
    assert caught.value.code == "build_requirement_unpinned"
    assert "hatchling>=1.20" in caught.value.message


def test_a_tree_outside_git_needs_an_explicit_date(tmp_path: Path) -> None:
    with pytest.raises(BuildError) as caught:
        build(tmp_path, tmp_path / "dist")
    assert caught.value.code == "build_source_date_unknown"
