"""Fixtures shared by several test modules."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.sigstore_stack import SigstoreStack

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


#: Seconds each test file took in a full run (setup, call and teardown of its tests), longest
#: first when the suite is collected: pytest-xdist hands whole files to its two workers in
#: collection order (`--dist loadfile --no-loadscope-reorder`, scripts/test), so the slow files
#: start first and the run does not end with one worker on a long file while the other idles.
#: Refreshed by a full run with HERDR_MCP_RECORD_DURATIONS=tests/durations.json.
DURATIONS = Path(__file__).with_name("durations.json")
#: A file the table does not name yet (a new one) is placed as if it took this long.
UNKNOWN_FILE_S = 10.0


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        seconds: dict[str, float] = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return
    first_seen = {_file_of(item.nodeid): index for index, item in reversed(list(enumerate(items)))}
    # Stable within a file (its fixtures and order stay); files longest first, ties as collected.
    items.sort(
        key=lambda item: (
            -seconds.get(_file_of(item.nodeid), UNKNOWN_FILE_S),
            first_seen[_file_of(item.nodeid)],
        )
    )


_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get("HERDR_MCP_RECORD_DURATIONS"):
        file = _file_of(report.nodeid)
        _FILE_SECONDS[file] = _FILE_SECONDS.get(file, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("HERDR_MCP_RECORD_DURATIONS")
    # Written once, by the process that saw every report (xdist's controller, or a run without it).
    if target and _FILE_SECONDS and not hasattr(session.config, "workerinput"):
        table = {file: round(value, 1) for file, value in sorted(_FILE_SECONDS.items())}
        Path(target).write_text(json.dumps(table, indent=1) + "\n")


#: The test that started each child process (PYTEST_CURRENT_TEST at Popen time).
_STARTED_BY: weakref.WeakKeyDictionary[subprocess.Popen[Any], str] = weakref.WeakKeyDictionary()
#: What `child_processes_are_reaped` found, shown in the terminal summary.
_UNREAPED: list[str] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _UNREAPED:
        terminalreporter.section("child processes never waited for")
        for line in _UNREAPED:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session", autouse=True)
def child_processes_are_reaped() -> Iterator[None]:
    """At the end of the session, name the tests whose child processes were never waited for.

    Such a Popen is reported by the interpreter only as `ResourceWarning: subprocess N is still
    running` at exit, with no hint of who started it; this names the test and reaps the child.
    """
    original = subprocess.Popen.__init__

    def recording_init(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _STARTED_BY[self] = os.environ.get("PYTEST_CURRENT_TEST", "(outside a test)")

    subprocess.Popen.__init__ = recording_init  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]
        gc.collect()
        for process, test in list(_STARTED_BY.items()):
            if process.returncode is None:
                what = f"child process {process.pid} ({process.args!r:.100}) never waited for"
                _UNREAPED.append(f"{what}; started by {test}")
                if process.poll() is None:
                    process.kill()
                process.wait()
