"""`herdr_mcp.__version__` is read from the installed dist-info without importing
importlib.metadata (a start cost, issue 24), and says what importlib.metadata says: here, and on
made-up `sys.path`s with dist-info and egg-info directories where importlib.metadata is the oracle."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

import herdr_mcp


def test_the_version_is_importlib_metadatas() -> None:
    assert herdr_mcp.__version__ == importlib.metadata.version("herdr-mcp")
    assert herdr_mcp._dist_info_version() == importlib.metadata.version("herdr-mcp")


def _dist_info(directory: Path, name: str, version: str) -> None:
    info = directory / name
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.4\nName: herdr-mcp\nVersion: {version}\n\nbody\n")


def _egg_info(directory: Path, version: str) -> None:
    info = directory / "herdr_mcp-9.9.9.egg-info"
    info.mkdir(parents=True)
    (info / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: herdr-mcp\nVersion: {version}\n")


def test_made_up_paths_read_as_importlib_metadata_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty, first, second, egg = (tmp_path / name for name in ("empty", "first", "second", "egg"))
    empty.mkdir()
    (empty / "herdr_mcp").mkdir()  # the package without metadata: not a distribution
    _dist_info(first, "herdr_mcp-1.2.3.dist-info", "1.2.3")
    _dist_info(second, "herdr_mcp-4.5.6.dist-info", "4.5.6")
    _egg_info(egg, "7.8.9")
    for path, fast in (
        ([empty, first, second], "1.2.3"),
        ([second, first], "4.5.6"),
        ([egg, first], None),  # an egg first: left to importlib.metadata
        ([tmp_path / "missing", first], "1.2.3"),
    ):
        monkeypatch.setattr(sys, "path", [str(entry) for entry in path])
        assert herdr_mcp._dist_info_version() == fast
        assert herdr_mcp._installed_version() == importlib.metadata.version("herdr-mcp"), path
