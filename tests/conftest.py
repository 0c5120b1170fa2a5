"""Fixtures shared by several test modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sigstore_stack import SigstoreStack


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


@pytest.fixture(scope="session")
def sigstore_stack(tmp_path_factory: pytest.TempPathFactory) -> SigstoreStack:
    """One local Sigstore stack (CA, CT log, transparency log, trust root) for the session."""
    return SigstoreStack(tmp_path_factory.mktemp("sigstore-stack"))
