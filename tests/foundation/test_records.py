"""Small records (`records.py`): capped, strict, schema-checked, written atomically as 0600, and
each one's fail rule honoured: a corrupt `services.json` stops an update from retiring the
generation whose venv the services run from (it used to read as "no services")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from herdr_mcp.generations import Generation, GenerationStore
from herdr_mcp.generations.control import GenerationStateError
from herdr_mcp.generations.installed import record_services_executable, services_executable
from herdr_mcp.generations.registry import register
from herdr_mcp.records import FailRule, RecordInvalid, RecordKind, atomic_write
from herdr_mcp.update.housekeeping import retire
from herdr_mcp.update.paths import UpdatePaths

KIND = RecordKind("example.json", max_bytes=64, fail=FailRule.CLOSED, schema_version=1)


def _managed(config: Path, name: str, port: int) -> Generation:
    """A registered generation whose executable lies in its runtime dir (one `update` made)."""
    executable = config / "runtimes" / name / "venv" / "bin" / "herdr-mcp"
    executable.parent.mkdir(parents=True)
    executable.write_text("#!/bin/sh\n")
    spec = Generation(name, f"http://127.0.0.1:{port}", executable=str(executable))
    register(GenerationStore.in_dir(config / "generations"), spec)
    return spec


@pytest.mark.parametrize(
    "content", [b"{not json", b'{"executable": 1}', b'{"executable": "/a", "executable": "/b"}', b"[]"]
)
def test_a_corrupt_services_record_stops_retiring_generations(tmp_path: Path, content: bytes) -> None:
    _managed(tmp_path, "B", 9101)
    (tmp_path / "services.json").write_bytes(content)
    with pytest.raises(GenerationStateError) as refused:
        retire(UpdatePaths(tmp_path))
    assert refused.value.code == "services_record_invalid"
    assert (tmp_path / "runtimes" / "B" / "venv" / "bin" / "herdr-mcp").is_file()
    names = [
        spec.generation
        for spec in GenerationStore.in_dir(tmp_path / "generations").read_control().generations
    ]
    assert names == ["B"]


def test_a_valid_services_record_protects_only_its_generation(tmp_path: Path) -> None:
    kept = _managed(tmp_path, "B", 9101)
    _managed(tmp_path, "C", 9102)
    record_services_executable(tmp_path, Path(str(kept.executable)))
    assert services_executable(tmp_path) == Path(str(kept.executable))
    assert retire(UpdatePaths(tmp_path)) == ["C"]
    assert (tmp_path / "runtimes" / "B").is_dir() and not (tmp_path / "runtimes" / "C").exists()
    assert os.stat(tmp_path / "services.json").st_mode & 0o777 == 0o600


def test_update_refuses_with_a_corrupt_services_record_before_it_downloads(tmp_path: Path) -> None:
    _managed(tmp_path, "B", 9101)
    (tmp_path / "services.json").write_text("{")
    done = subprocess.run(
        [
            sys.executable, "-m", "herdr_mcp", "update", "--config-dir", str(tmp_path), "--json",
            "--repository", "herdr-mcp/herdr-mcp", "--repository-id", "1",
            "--api-url", "https://127.0.0.1:9/", "--manifest-url", "https://127.0.0.1:9/x/runtime-manifest.json",
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 4, (done.stdout, done.stderr)
    assert json.loads(done.stdout)["error"]["code"] == "services_record_invalid"
    assert (tmp_path / "runtimes" / "B").is_dir()


def test_records_are_strict_capped_and_of_their_schema(tmp_path: Path) -> None:
    path = tmp_path / KIND.name
    assert KIND.read(path) is None
    KIND.write(path, {"value": 1})
    assert KIND.read(path) == {"schema_version": 1, "value": 1}
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert [entry.name for entry in tmp_path.iterdir()] == [KIND.name]  # no temp file left
    for bad in (
        b'{"schema_version": 1, "a": 1, "a": 2}',
        b'{"schema_version": 2}',
        b'{"schema_version": true}',
        b'{"schema_version": 1, "a": NaN}',
        b'{"schema_version": 1, "a": "' + b"x" * 64 + b'"}',
        b"\xff",
    ):
        path.write_bytes(bad)
        with pytest.raises(RecordInvalid):
            KIND.read(path)
    lenient = RecordKind(KIND.name, max_bytes=64, fail=FailRule.OPEN, schema_version=1)
    assert lenient.read(path) is None


def test_atomic_write_never_follows_a_symlink_left_at_its_temp_name(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    atomic_write(target, b"{}\n")
    link = tmp_path / "elsewhere"
    link.symlink_to(target)
    atomic_write(link, b'{"a": 1}\n')  # replaces the link itself, never writes through it
    assert target.read_bytes() == b"{}\n" and not link.is_symlink()
