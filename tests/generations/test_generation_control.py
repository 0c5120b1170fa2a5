"""runtime-control.json / runtime-status.json: strict parsing, compare-and-swap, 0600, and the CLI
commands that only touch the files (register, status, remove)."""

from __future__ import annotations

import json
import stat
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.cli.generation import main
from herdr_mcp.contract import contract_identity
from herdr_mcp.generations import (
    ControlFile,
    Generation,
    GenerationError,
    GenerationStatus,
    GenerationStore,
    Observation,
    StatusFile,
    Validation,
)
from herdr_mcp.generations.control import check_endpoint
from herdr_mcp.records import atomic_write


def control_doc(**overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "schema_version": 1,
        "revision": 3,
        "desired_active": "a",
        "generations": [
            {"generation": "a", "endpoint": "http://127.0.0.1:9001"},
            {
                "generation": "b-1.2_x",
                "endpoint": "http://[::1]:9002",
                "expected_runtime_version": "0.2.0",
                "expected_contract": contract_identity().to_dict(),
                "executable": "/opt/herdr-mcp/b/bin/herdr-mcp",
                "token_file": "/home/u/.config/herdr-mcp/token",
                "provenance": {"source": "release", "tag": "v0.2.0"},
            },
        ],
        "observation": {"checks": 3, "interval_ms": 500},
    }
    document.update(overrides)
    return document


def encode(document: dict[str, Any]) -> bytes:
    return json.dumps(document).encode()


def test_a_full_control_file_round_trips() -> None:
    control = ControlFile.from_json(encode(control_doc()))
    assert control.revision == 3
    assert control.find("b-1.2_x").expected_contract == contract_identity()
    assert control.observation == Observation(3, 500)
    assert ControlFile.from_json(json.dumps(control.to_dict()).encode()) == control


def _generation(index: int) -> dict[str, Any]:
    return {"generation": f"g{index}", "endpoint": f"http://127.0.0.1:{9000 + index}"}


@pytest.mark.parametrize(
    ("document", "detail"),
    [
        (control_doc(extra=1), "unknown field(s) in document: extra"),
        (
            control_doc(generations=[{**_generation(1), "token": "s3cret"}]),
            "unknown field(s) in generations[0]",
        ),
        (
            control_doc(generations=[{**_generation(1), "expected_contract": {"epoch": 5, "hash": "x"}}]),
            "expected_contract.tool_count is missing",
        ),
        (control_doc(desired_active=None, generations=[_generation(i) for i in range(9)]), "1..8"),
        (control_doc(desired_active=None, generations=[]), "1..8"),
        (control_doc(generations=[{"generation": "a", "endpoint": "http://localhost:9001"}]), "loopback"),
        (control_doc(generations=[{"generation": "a", "endpoint": "http://10.0.0.2:9001"}]), "loopback"),
        (control_doc(generations=[{"generation": "a", "endpoint": "https://127.0.0.1:9001"}]), "loopback"),
        (control_doc(generations=[{"generation": "a", "endpoint": "http://127.0.0.1:9001/mcp"}]), "loopback"),
        (control_doc(generations=[{"generation": "a b", "endpoint": "http://127.0.0.1:1"}]), "must match"),
        (control_doc(generations=[_generation(1), _generation(1)], desired_active=None), "unique"),
        (control_doc(desired_active="zzz"), "no generation 'zzz'"),
        (control_doc(observation={"checks": 21, "interval_ms": 500}), "observation.checks"),
        (control_doc(observation={"checks": 0, "interval_ms": 500}), "observation.checks"),
        (control_doc(schema_version=2), "schema_version"),
        (control_doc(revision=True), "revision"),
    ],
)
def test_control_file_refusals(document: dict[str, Any], detail: str) -> None:
    with pytest.raises(GenerationError) as caught:
        ControlFile.from_json(encode(document))
    assert caught.value.code == "control_invalid"
    assert detail in caught.value.message


def test_control_file_refuses_garbage_and_oversize() -> None:
    for data in (b"", b"[]", b"{", b" " * (300 * 1024)):
        with pytest.raises(GenerationError, match="control_invalid"):
            ControlFile.from_json(data)


def test_loopback_endpoints() -> None:
    assert check_endpoint("http://127.0.0.1:8772/") == "http://127.0.0.1:8772"
    assert check_endpoint("http://[::1]:8772") == "http://[::1]:8772"
    for bad in ("http://127.0.0.1", "http://127.0.0.2:1", "http://user:pw@127.0.0.1:1", "http://[::1]:x", 5):
        with pytest.raises(GenerationError, match="endpoint_not_loopback"):
            check_endpoint(bad)


def test_status_file_round_trips_and_refuses_unknown_fields() -> None:
    status = StatusFile(
        processed_revision=4,
        outcome="activated",
        active="b",
        previous="a",
        last_good="b",
        transition_seq=2,
        last_transition="2026-11-29T19:00:00.000Z",
        generations=(
            GenerationStatus("a", "standby", Validation(True, None, "0.1.0", contract_identity().hash, 18)),
            GenerationStatus("b", "active", None),
        ),
    )
    document = status.to_dict()
    assert StatusFile.from_json(json.dumps(document).encode()) == status
    for broken in (
        {**document, "manager": {}},
        {**document, "generations": [{"generation": "a", "phase": "x"}]},
    ):
        with pytest.raises(GenerationError, match="status_invalid"):
            StatusFile.from_json(json.dumps(broken).encode())


def spec(name: str, port: int) -> Generation:
    return Generation(name, f"http://127.0.0.1:{port}")


def test_compare_and_swap_refuses_the_second_of_two_writers(tmp_path: Path) -> None:
    store = GenerationStore.in_dir(tmp_path / "generations")
    first = store.write_control(ControlFile(generations=(spec("a", 9001),)), expected_revision=0)
    assert first.revision == 1

    # Two writers read revision 1; the first write wins, the second names a stale revision.
    seen_by_one, seen_by_two = store.read_control(), store.read_control()
    store.write_control(
        replace(seen_by_one, generations=(*seen_by_one.generations, spec("b", 9002))),
        expected_revision=seen_by_one.revision,
    )
    with pytest.raises(GenerationError) as caught:
        store.write_control(
            replace(seen_by_two, generations=(*seen_by_two.generations, spec("c", 9003))),
            expected_revision=seen_by_two.revision,
        )
    assert caught.value.code == "control_revision_conflict"
    final = store.read_control()
    assert final.revision == 2
    assert [item.generation for item in final.generations] == ["a", "b"]


def test_concurrent_writers_never_lose_an_update(tmp_path: Path) -> None:
    store = GenerationStore.in_dir(tmp_path / "generations")
    store.write_control(ControlFile(generations=(spec("base", 9000),)), expected_revision=0)
    outcomes: list[str] = []
    conflicts: list[str] = []

    def writer(index: int) -> None:
        for _ in range(50):
            current = store.read_control()
            try:
                store.write_control(
                    replace(current, generations=(*current.generations, spec(f"w{index}", 9100 + index))),
                    expected_revision=current.revision,
                )
            except GenerationError as exc:
                conflicts.append(exc.code)
                continue
            outcomes.append(f"w{index}")
            return

    threads = [threading.Thread(target=writer, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = store.read_control()
    assert sorted(item.generation for item in final.generations[1:]) == sorted(outcomes)
    assert final.revision == 1 + len(outcomes) == 5
    assert set(conflicts) <= {"control_revision_conflict"}


def test_files_are_0600_in_a_0700_dir(tmp_path: Path) -> None:
    store = GenerationStore.in_dir(tmp_path / "generations")
    store.write_control(ControlFile(generations=(spec("a", 9001),)), expected_revision=0)
    with store.locked():
        store.write_status_locked(StatusFile(active="a"))
    for path in (store.control_path, store.status_path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.state_dir.stat().st_mode) == 0o700
    assert sorted(item.name for item in store.state_dir.iterdir()) == [
        "generations.lock",
        "runtime-control.json",
        "runtime-status.json",
    ]
    atomic_write(store.control_path, b"{}")
    assert stat.S_IMODE(store.control_path.stat().st_mode) == 0o600


def test_lock_times_out_with_a_code(tmp_path: Path) -> None:
    store = GenerationStore.in_dir(tmp_path)
    with store.locked(), pytest.raises(GenerationError, match="control_locked"), store.locked(timeout_s=0.1):
        pass


def test_cli_register_status_remove(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = ["--state-dir", str(tmp_path / "generations")]
    catalog = tmp_path / "runtime-epoch-5.json"
    catalog.write_text(json.dumps({"epoch": 5, "tools": _catalog_tools()}))
    assert main([*state, "register", "--id", "a", "--endpoint", "http://127.0.0.1:9001"]) == 0
    with_contract = ["--expected-version", "0.1.0", "--expected-contract-file", str(catalog)]
    assert main([*state, "register", "--id", "b", "--endpoint", "http://[::1]:9002", *with_contract]) == 0
    assert (
        main(
            [*state, "register", "--id", "c", "--endpoint", "http://127.0.0.1:9003", "--expected-epoch", "4"]
        )
        == 0
    )
    capsys.readouterr()

    assert main([*state, "status", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["control"]["revision"] == 3
    b = shown["control"]["generations"][1]
    assert b["expected_contract"] == contract_identity(5).to_dict()
    assert shown["control"]["generations"][2]["expected_contract"] == contract_identity(4).to_dict()

    refusals = [
        (["register", "--id", "a", "--endpoint", "http://127.0.0.1:9009"], "generation_exists"),
        (["register", "--id", "d", "--endpoint", "http://127.0.0.1:9001"], "endpoint_in_use"),
        (["register", "--id", "d", "--endpoint", "http://example.com:80"], "endpoint_not_loopback"),
        (
            ["register", "--id", "d", "--endpoint", "http://127.0.0.1:9004", "--expected-epoch", "99"],
            "contract_unknown",
        ),
        (["activate", "nope"], "generation_unknown"),
        (["remove", "nope"], "generation_unknown"),
        (["rollback"], "no_previous_generation"),
    ]
    for argv, code in refusals:
        assert main([*state, *argv]) == 2
        assert capsys.readouterr().err.startswith(f"herdr-mcp: error: {code}: ")

    assert main([*state, "remove", "c"]) == 0
    assert capsys.readouterr().out == "removed c (control revision 4)\n"
    assert main([*state, "status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "control revision 4 (processed 0)"
    assert [line.split()[0] for line in lines[3:]] == ["a", "b"]


def test_cli_register_refuses_a_ninth_generation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = ["--state-dir", str(tmp_path)]
    for index in range(8):
        assert (
            main([*state, "register", "--id", f"g{index}", "--endpoint", f"http://127.0.0.1:{9000 + index}"])
            == 0
        )
    assert main([*state, "register", "--id", "g8", "--endpoint", "http://127.0.0.1:9100"]) == 2
    assert "generations_full" in capsys.readouterr().err


def test_cli_remove_refuses_the_active_generation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = GenerationStore.in_dir(tmp_path)
    store.write_control(ControlFile(generations=(spec("a", 9001), spec("b", 9002))), expected_revision=0)
    with store.locked():
        store.write_status_locked(StatusFile(active="a", previous="b"))
    assert main(["--state-dir", str(tmp_path), "remove", "a"]) == 2
    assert "herdr-mcp: error: generation_active: " in capsys.readouterr().err
    assert main(["--state-dir", str(tmp_path), "remove", "b"]) == 0
    assert store.read_status().previous is None
    assert main(["--state-dir", str(tmp_path), "remove", "a"]) == 2


def _catalog_tools() -> list[dict[str, Any]]:
    from herdr_mcp.contract import load_catalog

    return load_catalog(5)
