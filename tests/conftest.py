"""Fixtures shared by several test modules."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sigstore_stack import SigstoreStack

#: The dispositions a CLI command run in this process may change (`loopback.StopSignals`).
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@pytest.fixture(autouse=True)
def signal_dispositions_restored() -> Iterator[None]:
    """Every test leaves SIGINT/SIGTERM and the wakeup fd as it found them.

    A serving subcommand run in process (`main(["serve", ...])`) installs `StopSignals` and, on
    its way out, ignores both signals so the interpreter's exit cannot be killed by them. In a
    real process that is right; in pytest's process an ignored SIGTERM is inherited by every
    child started later, and those children then shrug off SIGTERM (exec sessions escalated to
    SIGKILL, runtimes outlived their stop: ten failures in a full run, none alone).
    """
    before = {signum: signal.getsignal(signum) for signum in _STOP_SIGNALS}
    wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)
    signal.set_wakeup_fd(wakeup)


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
