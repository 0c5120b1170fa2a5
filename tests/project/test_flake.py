"""flake.nix: it parses (Nix's own parser, offline) and agrees with pyproject.toml.

Building the flake needs nixpkgs and a recent Nix; `nix flake check` does that in ci.yml. Here
Debian's nix-bin (`nix-instantiate --parse`) checks the syntax, and the version and dependency
list are compared with pyproject.toml.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLAKE = ROOT / "flake.nix"

#: pyproject.toml dependency name -> the expression flake.nix's runtimeDependencies uses for it:
#: `ps.<attr>` from nixpkgs' Python package set, `v.<attr>` from the wheels flake.nix vendors.
#: A new dependency in pyproject.toml fails the test below until it is mapped here and added to
#: the flake.
NIX_ATTRIBUTES = {
    "mcp": "v.mcp",
    "starlette": "ps.starlette",
    "uvicorn": "ps.uvicorn",
    "httpx2": "v.httpx2",
    "jsonschema": "ps.jsonschema",
    "rfc8785": "v.rfc8785",
    "platformdirs": "ps.platformdirs",
    "sigstore": "v.sigstore",
    "cryptography": "ps.cryptography",
    "packaging": "ps.packaging",
    "httptools": "ps.httptools",
    "rich": "ps.rich",
    "tomli-w": "v.tomli-w",
    "websockets": "ps.websockets",
}
_REQUIREMENT = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^]]*\])?\s*(?P<spec>[^;]*)")


def _pyproject() -> dict[str, object]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert isinstance(project, dict)
    return project


def _dependencies() -> dict[str, str]:
    """{normalized name: version specifier} of [project].dependencies."""
    dependencies = _pyproject()["dependencies"]
    assert isinstance(dependencies, list)
    parsed = {}
    for requirement in dependencies:
        match = _REQUIREMENT.fullmatch(requirement.strip())
        assert match, requirement
        parsed[re.sub(r"[-_.]+", "-", match["name"]).lower()] = match["spec"].strip()
    return parsed


def _flake() -> str:
    return FLAKE.read_text(encoding="utf-8")


def test_flake_nix_parses() -> None:
    nix_instantiate = shutil.which("nix-instantiate")
    if nix_instantiate is None:
        pytest.fail("nix-instantiate is missing: apt-get install nix-bin (Debian), or install Nix")
    parsed = subprocess.run(
        [nix_instantiate, "--parse", str(FLAKE)], capture_output=True, text=True, check=False
    )
    assert parsed.returncode == 0, parsed.stderr


def test_the_flake_version_is_the_pyproject_version() -> None:
    versions = re.findall(r'^      version = "([^"]+)";$', _flake(), flags=re.MULTILINE)
    assert versions == [_pyproject()["version"]]


def test_the_flake_depends_on_exactly_the_pyproject_dependencies() -> None:
    dependencies = _dependencies()
    unmapped = sorted(set(dependencies) - set(NIX_ATTRIBUTES))
    assert not unmapped, f"map these pyproject dependencies in NIX_ATTRIBUTES and flake.nix: {unmapped}"
    block = re.search(r"runtimeDependencies = ps: v: \[\n(?P<body>.*?)\n\s*\];", _flake(), flags=re.DOTALL)
    assert block, "flake.nix has no `runtimeDependencies = ps: v: [ ... ];` list"
    listed = block["body"].split()
    assert listed == [NIX_ATTRIBUTES[name] for name in dependencies]


def test_every_exact_pin_is_vendored_at_that_version() -> None:
    flake = _flake()
    pins = {name: spec.removeprefix("==") for name, spec in _dependencies().items() if spec.startswith("==")}
    assert pins, "pyproject.toml pins nothing with ==; this test would check nothing"
    for name, version in pins.items():
        attribute = NIX_ATTRIBUTES[name]
        assert attribute.startswith("v."), (
            f"{name}=={version} must come from the vendored wheels, not nixpkgs"
        )
        entry = re.search(
            rf'^        {re.escape(name)} = \{{\n          version = "(?P<version>[^"]+)";\n'
            r'          url = "(?P<url>[^"]+)";\n'
            r'          hash = "sha256-[A-Za-z0-9+/]{43}=";\n        \};',
            flake,
            flags=re.MULTILINE,
        )
        assert entry, f"flake.nix vendors no wheel for {name}"
        assert entry["version"] == version
        wheel_name = name.replace("-", "_")
        assert entry["url"].startswith("https://files.pythonhosted.org/packages/")
        assert entry["url"].endswith(f"/{wheel_name}-{version}-py3-none-any.whl")


def test_the_package_is_built_with_hatchling_from_pyproject() -> None:
    flake = _flake()
    assert "ps.buildPythonApplication {" in flake
    assert "pyproject = true;" in flake
    assert "build-system = [ ps.hatchling ];" in flake
    build_system = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["build-system"]
    assert build_system["build-backend"] == "hatchling.build"
    for output in ("packages = forAllSystems", "devShells = forAllSystems", "checks = forAllSystems"):
        assert output in flake


def test_nixpkgs_is_pinned_to_one_commit() -> None:
    """A branch (nixos-unstable) moves under the same flake.nix; a 40-hex commit does not. A
    flake.lock, when one is committed, must lock that same commit."""
    urls = re.findall(r'^  inputs\.nixpkgs\.url = "([^"]+)";$', _flake(), flags=re.MULTILINE)
    assert len(urls) == 1, urls
    pinned = re.fullmatch(r"github:NixOS/nixpkgs/(?P<rev>[0-9a-f]{40})", urls[0])
    assert pinned, f"nixpkgs is not pinned to a commit: {urls[0]}"
    lock = ROOT / "flake.lock"
    if lock.exists():
        locked = json.loads(lock.read_text(encoding="utf-8"))["nodes"]["nixpkgs"]["locked"]
        assert locked["rev"] == pinned["rev"]
