"""scripts/_env.sh `install_package`: the package is reinstalled only when the tree or the install changed.

The script runs for real (bash, find, sha256sum) on a copy of the files the wheel is built from;
the venv's `python` is a stand-in that logs each pip call and writes a dist-info RECORD as an
install would (a real install builds a wheel: seconds per call, which is what the stamp saves).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORD = "lib/python3.11/site-packages/herdr_mcp-0.1.0.dist-info/RECORD"

_FAKE_PYTHON = """#!/usr/bin/env bash
# Logs its arguments; a pip install writes the RECORD, the same for the same tree (as pip's).
echo "$*" >> "$(dirname "$0")/../calls.log"
if [ "$1 $2 $3" = "-m pip install" ]; then
    record="$(dirname "$0")/../{record}"
    mkdir -p "$(dirname "$record")"
    echo "herdr_mcp/__init__.py,sha256=...,1" > "$record"
fi
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The files the digest covers, copied (src/ without caches), and scripts/_env.sh."""
    copy = tmp_path / "tree"
    (copy / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "_env.sh", copy / "scripts" / "_env.sh")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("src", "manifests", "attestations"):
        shutil.copytree(ROOT / name, copy / name, symlinks=True, ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, copy / name)
    python = copy / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(_FAKE_PYTHON.replace("{record}", RECORD))
    python.chmod(0o755)
    return copy


def install(tree: Path, extras: str = "") -> list[str]:
    """Run `install_package EXTRAS` as scripts/serve does; the pip calls it made."""
    log = tree / "venv" / "calls.log"
    before = log.read_text().splitlines() if log.exists() else []
    subprocess.run(
        ["bash", "-c", f'source scripts/_env.sh && install_package "{extras}"'],
        cwd=tree,
        env={"PATH": "/usr/bin:/bin", "HERDR_MCP_VENV": str(tree / "venv")},
        check=True,
        timeout=60,
    )
    after = log.read_text().splitlines() if log.exists() else []
    return after[len(before) :]


def test_an_unchanged_tree_is_not_reinstalled(tree: Path) -> None:
    first = install(tree)
    assert first == [f"-m pip install -q {tree}", f"-m pip install -q --no-deps --force-reinstall {tree}"]
    assert install(tree) == []
    assert install(tree) == []


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write(text)


CHANGES: dict[str, Callable[[Path], object]] = {
    "edit": lambda tree: _append(tree / "src/herdr_mcp/__init__.py", "# edited\n"),
    "new-file": lambda tree: (tree / "src/herdr_mcp/added.py").write_text(""),
    "removed-file": lambda tree: (tree / "src/herdr_mcp/terminal.py").unlink(),
    "pyproject": lambda tree: _append(tree / "pyproject.toml", "\n"),
    "packaged-data": lambda tree: _append(tree / "manifests/runtime-manifest.schema.json", " "),
    "other-install": lambda tree: (tree / "venv" / RECORD).write_text("pip install -e\n"),
    "uninstalled": lambda tree: (tree / "venv" / RECORD).unlink(),
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_changed_tree_or_install_is_reinstalled(tree: Path, change: str) -> None:
    install(tree)
    CHANGES[change](tree)
    assert len(install(tree)) == 2
    assert install(tree) == []


def test_the_test_extras_have_their_own_stamp(tree: Path) -> None:
    install(tree)
    assert install(tree, "[test]") == [
        f"-m pip install -q {tree}[test]",
        f"-m pip install -q --no-deps --force-reinstall {tree}",
    ]
    assert install(tree, "[test]") == []
    assert install(tree) == []
