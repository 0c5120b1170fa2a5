"""The DEV plane's kept build venv (`dev/build_env.py`): when it is reused and when it is made
again.

pip is replaced by a fake index here (making a real venv costs ~10 s of CPU; the real one is made
by the first `dev sync` of tests/dev/test_dev_plane.py and reused by its second, which asserts
so): `BuildEnvironment.create` makes a directory whose `bin/python` is this interpreter and
writes pip's installation report for what the fake index gives, `BuildEnvironment.resolve` writes
the report alone. Reuse must happen only while the venv holds exactly what a new one would: the
same pins, the same interpreter, a finished venv (its record), and the same wheels (name, version,
sha256) from the index now.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from herdr_mcp.dev import build_env
from herdr_mcp.dev.build_env import RECORD_FILE, build_environment
from herdr_mcp.release.build import BuildEnvironment, BuildError

PINS = ("hatchling==1.27.0",)


@dataclass
class FakeIndex:
    """What pip would install for the pins: {name: (version, sha256 or None)}."""

    wheels: dict[str, tuple[str, str | None]] = field(
        default_factory=lambda: {"hatchling": ("1.27.0", "a" * 64), "packaging": ("26.4", "b" * 64)}
    )
    created: list[Path] = field(default_factory=list)
    resolved: list[Path] = field(default_factory=list)
    broken: bool = False

    def report(self, path: Path) -> None:
        install = []
        for name, (version, digest) in self.wheels.items():
            archive = {} if digest is None else {"hash": f"sha256={digest}", "hashes": {"sha256": digest}}
            install.append(
                {"metadata": {"name": name, "version": version}, "download_info": {"archive_info": archive}}
            )
        path.write_text(json.dumps({"version": "1", "install": install}))


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch) -> FakeIndex:
    fake = FakeIndex()

    def create(
        cls: type[BuildEnvironment],
        /,
        path: Path,
        requires: Sequence[str],
        *,
        report: Path | None = None,
        **_: object,
    ) -> BuildEnvironment:
        assert not path.exists()
        (path / "bin").mkdir(parents=True)
        (path / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
        fake.created.append(path)
        assert report is not None
        fake.report(report)
        return cls(path, requires)

    def resolve(self: BuildEnvironment, report: Path) -> None:
        fake.resolved.append(self.path)
        if fake.broken:
            raise BuildError("build_environment_failed", "pip resolving the build requirements exited 1")
        fake.report(report)

    monkeypatch.setattr(BuildEnvironment, "create", classmethod(create))
    monkeypatch.setattr(BuildEnvironment, "resolve", resolve)
    return fake


def _made(cache: Path, said: list[str], pins: Sequence[str] = PINS) -> BuildEnvironment:
    said.clear()
    return build_environment(cache, pins, say=said.append)


def test_a_finished_venv_is_reused_while_the_index_gives_the_same_wheels(
    tmp_path: Path, index: FakeIndex
) -> None:
    said: list[str] = []
    first = _made(tmp_path, said)
    assert index.created == [first.path] and first.requires == PINS
    assert said[-1].startswith("creating the build environment")
    record = json.loads((first.path / RECORD_FILE).read_text())
    assert record["installed"] == [["hatchling", "1.27.0", "a" * 64], ["packaging", "26.4", "b" * 64]]
    assert record["requires"] == list(PINS) and record["interpreter"] == build_env.interpreter()
    (first.path / "kept").write_text("")

    again = _made(tmp_path, said)
    assert again.path == first.path and index.created == [first.path] and index.resolved == [first.path]
    assert said == [
        f"reusing the build environment {first.path} (hatchling==1.27.0; the index gives the same wheels)"
    ]
    assert (again.path / "kept").exists()


@pytest.mark.parametrize(
    "change",
    [
        {"packaging": ("26.4", "c" * 64)},  # the same version with other bytes
        {"packaging": ("26.5", "b" * 64)},  # a new release of an unpinned dependency
        {"pluggy": ("1.7.0", "d" * 64)},  # one more wheel
    ],
)
def test_a_venv_is_made_again_when_the_index_gives_other_wheels(
    tmp_path: Path, index: FakeIndex, change: dict[str, tuple[str, str]]
) -> None:
    said: list[str] = []
    first = _made(tmp_path, said)
    (first.path / "kept").write_text("")
    index.wheels.update(change)
    again = _made(tmp_path, said)
    assert index.created == [first.path, first.path] and not (again.path / "kept").exists()
    assert said[0].startswith("making the build environment again: the index now gives"), said
    ((name, (version, digest)),) = change.items()
    assert [name, version, digest] in json.loads((again.path / RECORD_FILE).read_text())["installed"]


def test_a_venv_without_its_record_is_made_again(tmp_path: Path, index: FakeIndex) -> None:
    """What a sync killed while pip ran leaves: the record is written last."""
    said: list[str] = []
    first = _made(tmp_path, said)
    for damage in ("missing", "not json", "other schema"):
        record = first.path / RECORD_FILE
        if damage == "missing":
            record.unlink()
        else:
            record.write_text("{" if damage == "not json" else json.dumps({"schema_version": 99}))
        (first.path / "kept").write_text("")
        _made(tmp_path, said)
        assert "is missing or not ours" in said[0], said
        assert not (first.path / "kept").exists()
    assert len(index.created) == 4


def test_other_pins_or_another_interpreter_get_a_new_venv_and_the_old_one_goes(
    tmp_path: Path, index: FakeIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    first = _made(tmp_path, said)
    (tmp_path / "env-leftover.partial").mkdir()
    other_pins = _made(tmp_path, said, ("hatchling==1.26.3",))
    assert other_pins.path != first.path and sorted(tmp_path.iterdir()) == [other_pins.path]

    facts = {**build_env.interpreter(), "version": "3.11.99 (an upgraded interpreter)"}
    monkeypatch.setattr(build_env, "interpreter", lambda: facts)
    upgraded = _made(tmp_path, said, ("hatchling==1.26.3",))
    assert upgraded.path != other_pins.path and sorted(tmp_path.iterdir()) == [upgraded.path]
    assert json.loads((upgraded.path / RECORD_FILE).read_text())["interpreter"] == facts
    assert len(index.created) == 3 and index.resolved == []


def test_a_venv_whose_python_is_no_longer_this_interpreter_is_made_again(
    tmp_path: Path, index: FakeIndex
) -> None:
    said: list[str] = []
    first = _made(tmp_path, said)
    python = first.path / "bin" / "python"
    python.unlink()
    python.symlink_to("/bin/sh")
    _made(tmp_path, said)
    assert said[0].startswith(f"making the build environment again: {python} is no longer"), said
    assert os.path.realpath(python) == os.path.realpath(sys.executable) and len(index.created) == 2


def test_a_venv_whose_pip_fails_is_made_again_and_a_failing_new_one_is_an_error(
    tmp_path: Path, index: FakeIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    _made(tmp_path, said)
    index.broken = True
    _made(tmp_path, said)
    assert said[0].startswith("making the build environment again: its pip could not resolve the pins"), said
    assert len(index.created) == 2

    def fail(*_: object, **__: object) -> BuildEnvironment:
        raise BuildError("build_environment_failed", "pip install of the build requirements exited 1")

    monkeypatch.setattr(BuildEnvironment, "create", fail)
    with pytest.raises(BuildError) as raised:
        _made(tmp_path, said)
    assert raised.value.code == "build_environment_failed"
    assert list(tmp_path.iterdir()) == []  # the venv that no longer resolved was removed


def test_wheels_without_a_sha256_are_used_once_and_never_kept(tmp_path: Path, index: FakeIndex) -> None:
    said: list[str] = []
    index.wheels["packaging"] = ("26.4", None)
    first = _made(tmp_path, said)
    assert said[-1] == "not keeping the build environment: pip names no sha256 for packaging 26.4"
    assert not (first.path / RECORD_FILE).exists()
    _made(tmp_path, said)
    assert len(index.created) == 2 and index.resolved == []
