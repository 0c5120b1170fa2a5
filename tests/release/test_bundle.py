"""Workstation bundles: built from this tree for this host, installed with networking disabled.

Downloading the dependency wheels needs PyPI (a package registry, reachable in CI); the install
step runs in a network namespace with no interfaces (`unshare -n`; on macOS `sandbox-exec` with
network denied), and the test proves that namespace cannot reach the network.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from herdr_mcp import __version__
from herdr_mcp.contract import contract_identity
from herdr_mcp.release.build import BuildEnvironment, BuildSystem, build, sha256_file
from herdr_mcp.release.bundle import (
    REQUIREMENTS_FILE,
    WHEELHOUSE_DIR,
    BundleError,
    ReleaseConfig,
    Target,
    bundle,
    bundle_filename,
    load_release_config,
    parse_bundle_filename,
)
from herdr_mcp.release.manifest import RuntimeManifest
from herdr_mcp.release.manifest_build import AssetInput, build_manifest
from tests.support.release_builder import host_target

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "release" / "config.toml"
# Exits 3 when the connection fails. A literal address needs no DNS, so its failure shows the
# network itself is absent, not only name resolution.
PROBE = """\
import socket, sys
try:
    socket.create_connection(({host!r}, 443), timeout=10).close()
except OSError as exc:
    print(f"offline: {{exc!r}}")
    sys.exit(3)
"""


@dataclass(frozen=True)
class Built:
    wheel: Path
    target: Target
    archive: Path


def _offline_prefix() -> list[str]:
    """A command prefix that runs its command with no network, or a failure saying what to install."""
    if sys.platform == "darwin":
        candidates = [["sandbox-exec", "-p", "(version 1)(allow default)(deny network*)"]]
    elif os.geteuid() == 0:
        candidates = [["unshare", "--net"]]
    else:
        candidates = [
            ["unshare", "--net", "--map-root-user"],
            ["sudo", "-n", "unshare", "--net", f"--setuid={os.getuid()}", f"--setgid={os.getgid()}", "--"],
        ]
    for prefix in candidates:
        if shutil.which(prefix[0]) and subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
            return prefix
    pytest.fail(
        "cannot disable networking for the install step: this test needs util-linux `unshare` "
        "(apt-get install util-linux) run as root, with unprivileged user namespaces, or with "
        "passwordless sudo; on macOS `sandbox-exec`"
    )


def _clean_pip_env(tmp: Path) -> dict[str, str]:
    """The environment without pip configuration, so only the bundle can supply wheels."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_CACHE_DIR="1", HOME=str(tmp))
    return env


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    work = tmp_path_factory.mktemp("bundle")
    tree = work / "tree"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(tree)], check=True)
    environment = BuildEnvironment.create(work / "env", BuildSystem.from_pyproject(tree).requires)
    _, wheel = build(tree, work / "dist", environment=environment)
    target = host_target()
    archive = bundle(wheel, work / "bundles", target=target)
    return Built(wheel=wheel, target=target, archive=archive)


def _extract(archive: Path, destination: Path) -> Path:
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(destination, filter="data")
    (top,) = destination.iterdir()
    return top


def test_the_release_configuration_names_four_platforms_and_three_pythons() -> None:
    config = load_release_config(CONFIG)
    assert {channel.name: channel.prereleases for channel in config.channels} == {
        "stable": False,
        "preview": True,
    }
    assert {target.name for target in config.targets} == {
        f"{platform}-{python}"
        for platform in ("linux-x86_64", "linux-aarch64", "macos-x86_64", "macos-arm64")
        for python in ("cp311", "cp312", "cp313")
    }
    target = config.target("linux-x86_64-cp311")
    assert (target.python_version, target.abi, target.implementation) == ("3.11", "cp311", "cp")
    assert "manylinux2014_x86_64" in target.platform_tags


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_bundle_is_hash_locked_and_deterministic(built: Built, tmp_path: Path) -> None:
    assert built.archive.name == bundle_filename("herdr-mcp", __version__, built.target.name)
    assert parse_bundle_filename(built.archive.name, "herdr-mcp", __version__) == built.target.name
    with tarfile.open(built.archive, "r:gz") as tar:
        members = tar.getmembers()
    assert [member.name for member in members] == sorted(member.name for member in members)
    assert {(member.uid, member.gid, member.uname, member.gname) for member in members} == {(0, 0, "", "")}
    assert len({member.mtime for member in members}) == 1
    assert not any(member.pax_headers for member in members)

    top = _extract(built.archive, tmp_path)
    assert top.name == built.archive.name.removesuffix(".tar.gz")
    wheels = sorted((top / WHEELHOUSE_DIR).iterdir())
    pins = [line for line in (top / REQUIREMENTS_FILE).read_text().splitlines() if not line.startswith("#")]
    assert len(pins) == len(wheels) > 10
    by_hash = {sha256_file(wheel): wheel.name for wheel in wheels}
    for pin in pins:
        requirement, option = pin.split(" ")
        assert "==" in requirement and option.startswith("--hash=sha256:")
        assert option.removeprefix("--hash=sha256:") in by_hash
    assert f"herdr-mcp=={__version__} --hash=sha256:{sha256_file(built.wheel)}" in pins
    assert all(wheel.name.endswith(".whl") for wheel in wheels)

    again = bundle(built.wheel, tmp_path / "again", target=built.target)
    assert sha256_file(again) == sha256_file(built.archive)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_bundle_installs_with_no_network_and_serves_the_tree_contract(
    built: Built, tmp_path: Path
) -> None:
    offline = _offline_prefix()
    for host in ("pypi.org", "151.101.0.223"):
        probe = subprocess.run(
            [*offline, sys.executable, "-c", PROBE.format(host=host)], capture_output=True, text=True
        )
        assert probe.returncode == 3, f"the offline wrapper reached {host}: {probe.stderr}"

    top = _extract(built.archive, tmp_path / "bundle")
    venv = tmp_path / "venv"
    env = _clean_pip_env(tmp_path)
    subprocess.run([*offline, sys.executable, "-m", "venv", str(venv)], check=True, env=env)
    installed = subprocess.run(
        [
            *offline,
            str(venv / "bin" / "pip"),
            *(
                "install",
                "--no-index",
                "--find-links",
                WHEELHOUSE_DIR,
                "--require-hashes",
                "-r",
                REQUIREMENTS_FILE,
            ),
        ],
        cwd=top,
        env=env,
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr

    reported = subprocess.run(
        [str(venv / "bin" / "herdr-mcp"), "version", "--json"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    version = json.loads(reported.stdout)
    manifest = build_manifest(
        version=__version__,
        repository="herdr-mcp/herdr-mcp",
        repository_id=1,
        commit="0" * 40,
        ref=f"refs/tags/v{__version__}",
        published_at=datetime(2026, 11, 29, tzinfo=UTC),
        assets=[AssetInput(built.archive, built.target.name, "bundle")],
    )
    parsed = RuntimeManifest.from_bytes(manifest.to_bytes())
    assert version["contract"] == parsed.contract.to_dict() == contract_identity().to_dict()
    assert version["state_schema"] == parsed.state_schema
    assert (version["product"], version["version"]) == ("herdr-mcp", parsed.version)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_wheel_altered_after_bundling_is_refused_at_install(built: Built, tmp_path: Path) -> None:
    top = _extract(built.archive, tmp_path / "bundle")
    (victim,) = (top / WHEELHOUSE_DIR).glob("rfc8785-*.whl")
    victim.write_bytes(victim.read_bytes() + b"\0")
    venv = tmp_path / "venv"
    env = _clean_pip_env(tmp_path)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
    installed = subprocess.run(
        [
            str(venv / "bin" / "pip"),
            *(
                "install",
                "--no-index",
                "--find-links",
                WHEELHOUSE_DIR,
                "--require-hashes",
                "-r",
                REQUIREMENTS_FILE,
            ),
        ],
        cwd=top,
        env=env,
        capture_output=True,
        text=True,
    )
    assert installed.returncode != 0
    assert "DO NOT MATCH THE HASHES" in installed.stderr
    assert not list((venv / "lib").glob("python*/site-packages/herdr_mcp"))


@pytest.mark.slow
def test_a_bundle_for_another_host_is_refused_before_downloading(built: Built, tmp_path: Path) -> None:
    config = load_release_config(CONFIG)
    other = next(target for target in config.targets if target.sys_platform != sys.platform)
    with pytest.raises(BundleError) as caught:
        bundle(built.wheel, tmp_path, target=other)
    assert caught.value.code == "bundle_host_mismatch"
    assert other.name in caught.value.message
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "name",
    [
        "herdr_mcp-0.1.0.whl",  # no tags
        "herdr_mcp-notaversion-py3-none-any.whl",  # no PEP 440 version
        "herdr_mcp-0.1.0-x1-py3-none-any.whl",  # a build number starts with a digit
        "herdr mcp-0.1.0-py3-none-any.whl",  # no project name
        "herdr_mcp-0.1.0-py3-none-any.zip",
    ],
)
def test_a_badly_named_wheel_is_refused_before_anything_runs(name: str, tmp_path: Path) -> None:
    """Wheel names are read by packaging.utils.parse_wheel_filename, as pip reads them; the hand
    regex took a version that is none. The host is not even asked (its python does not exist)."""
    wheel = tmp_path / name
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("herdr_mcp/__init__.py", "")
    target = load_release_config(CONFIG).target("linux-x86_64-cp311")
    with pytest.raises(BundleError) as caught:
        bundle(wheel, tmp_path / "out", target=target, python=str(tmp_path / "no-python"))
    assert caught.value.code == "bundle_wheel_invalid"
    assert name in caught.value.message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[channels.stable]\nprereleases = false\nsurprise = 1\n", "unknown key 'surprise'"),
        ('[channels.stable]\nprereleases = "no"\n', "prereleases must be a bool"),
        ("[python]\nversions = [3.11]\n", "versions must be a list"),
    ],
)
def test_a_malformed_release_configuration_is_refused(text: str, needle: str) -> None:
    valid = CONFIG.read_text(encoding="utf-8")
    table = text.split("\n", 1)[0]
    start = valid.index(table)
    end = valid.find("\n[", start + 1)
    broken = valid[:start] + text + (valid[end + 1 :] if end != -1 else "")
    with pytest.raises(BundleError) as caught:
        ReleaseConfig.from_toml(broken)
    assert caught.value.code == "release_config_invalid"
    assert needle in caught.value.message


def test_an_unknown_target_is_named_with_the_known_ones() -> None:
    with pytest.raises(BundleError) as caught:
        load_release_config(CONFIG).target("windows-x86_64-cp311")
    assert caught.value.code == "bundle_target_unknown"
    assert "linux-x86_64-cp311" in caught.value.message
