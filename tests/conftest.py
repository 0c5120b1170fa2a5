"""Fixtures shared by several test modules."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def quiet_login_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A private HOME: exec runs `bash -l`, which reads ~/.profile; keep the developer's own out."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path
