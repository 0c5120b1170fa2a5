"""The contract identity `{epoch, hash, tool_count}` is read by one rule (`contract.parse_identity`)
wherever it comes from outside: a release manifest, runtime-control.json (and the DEV plane's pin,
a runtime's /health, through `generations.control.parse_contract`), a candidate's `version --json`.
Each reader keeps its own error code; none accepts what another refuses (a manifest used to accept
a `tool_count` over 10,000 and an epoch of 2**40 that runtime-control.json then refused, and the
probe took any string as the hash)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.cli import version_info
from herdr_mcp.cli.generation import main as generation_main
from herdr_mcp.contract import ContractIdentityInvalid, contract_identity, load_catalog, parse_identity
from herdr_mcp.generations.control import parse_contract
from herdr_mcp.release.manifest import ManifestError, RuntimeManifest
from herdr_mcp.release.manifest_build import contract_migration_from_file
from herdr_mcp.update.errors import ReleaseDataError
from herdr_mcp.update.probe import parse_version_output

EXAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "runtime-manifest.example.json"
GOOD = contract_identity().to_dict()

#: (name, value, kind, field)
BAD: list[tuple[str, object, str, str | None]] = [
    ("not an object", [1, 2], "type", None),
    ("extra member", {**GOOD, "name": "x"}, "unknown_field", "name"),
    ("no hash", {k: v for k, v in GOOD.items() if k != "hash"}, "missing_field", "hash"),
    ("boolean epoch", {**GOOD, "epoch": True}, "type", "epoch"),
    ("string epoch", {**GOOD, "epoch": "5"}, "type", "epoch"),
    ("epoch 0", {**GOOD, "epoch": 0}, "value", "epoch"),
    ("epoch 2**40", {**GOOD, "epoch": 2**40}, "value", "epoch"),
    ("hash without prefix", {**GOOD, "hash": "0" * 64}, "value", "hash"),
    ("upper-case hash", {**GOOD, "hash": "sha256:" + "A" * 64}, "value", "hash"),
    ("number hash", {**GOOD, "hash": 5}, "type", "hash"),
    ("no tools", {**GOOD, "tool_count": 0}, "value", "tool_count"),
    ("10,001 tools", {**GOOD, "tool_count": 10_001}, "value", "tool_count"),
    ("float count", {**GOOD, "tool_count": 18.0}, "type", "tool_count"),
]
IDS = [case[0] for case in BAD]


def _manifest_with(contract: object) -> bytes:
    document: dict[str, Any] = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    document["contract"] = contract
    return json.dumps(document).encode()


def _version_output_with(contract: object) -> bytes:
    return json.dumps({**version_info(), "contract": contract}).encode()


def test_a_good_identity_reads_the_same_everywhere() -> None:
    identity = contract_identity()
    assert parse_identity(GOOD) == identity
    assert parse_contract(GOOD, "expected_contract") == identity
    assert RuntimeManifest.from_bytes(_manifest_with(GOOD)).contract == identity
    assert parse_version_output(_version_output_with(GOOD)).contract == identity


@pytest.mark.parametrize(("name", "value", "kind", "field"), BAD, ids=IDS)
def test_the_rule_names_what_is_wrong(name: str, value: object, kind: str, field: str | None) -> None:
    with pytest.raises(ContractIdentityInvalid) as refused:
        parse_identity(value, "contract")
    assert (refused.value.kind, refused.value.field) == (kind, field)
    assert str(refused.value).startswith("contract" if field is None else f"contract.{field} ")


@pytest.mark.parametrize(("name", "value", "kind", "field"), BAD, ids=IDS)
def test_every_reader_refuses_what_the_rule_refuses(
    name: str, value: object, kind: str, field: str | None
) -> None:
    with pytest.raises(ValueError, match="expected_contract"):
        parse_contract(value, "expected_contract")
    with pytest.raises(ManifestError) as manifest:
        RuntimeManifest.from_bytes(_manifest_with(value))
    if isinstance(value, dict) and isinstance(value.get("tool_count"), float):
        assert manifest.value.code == "manifest_float"  # the manifest's loader refuses every float first
    else:
        assert manifest.value.code == f"manifest_{kind}"
        assert manifest.value.field == ("contract" if field is None else f"contract.{field}")
    with pytest.raises(ReleaseDataError) as probe:
        parse_version_output(_version_output_with(value))
    assert probe.value.code == "probe_output_malformed"


#: Catalog files (`{"epoch", "tools"}`) both readers of one refuse: `generation register
#: --expected-contract-file` took a boolean or zero epoch, the release build a zero epoch.
BAD_CATALOGS = {
    "boolean epoch": {"epoch": True, "tools": []},
    "epoch 0": {"epoch": 0, "tools": []},
    "tools not an array": {"epoch": 5, "tools": {}},
    "a tool not an object": {"epoch": 5, "tools": [1]},
}


def test_a_catalog_file_is_read_by_one_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "runtime-epoch-5.json"
    good.write_text(json.dumps({"epoch": 5, "tools": load_catalog(5)}), encoding="utf-8")
    assert contract_migration_from_file(good) == (contract_identity(5), None)
    state = ["--state-dir", str(tmp_path / "generations")]
    endpoint = ["--endpoint", "http://127.0.0.1:9001"]
    assert (
        generation_main([*state, "register", "--id", "ok", *endpoint, "--expected-contract-file", str(good)])
        == 0
    )
    for index, (name, document) in enumerate(BAD_CATALOGS.items()):
        path = tmp_path / f"bad-{index}.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        with pytest.raises(ManifestError) as built:
            contract_migration_from_file(path)
        assert built.value.code == "contract_migration_source_invalid", name
        capsys.readouterr()
        bad = ["--id", f"b{index}", "--endpoint", f"http://127.0.0.1:{9100 + index}"]
        code = generation_main([*state, "--json", "register", *bad, "--expected-contract-file", str(path)])
        assert code == 2, name
        assert json.loads(capsys.readouterr().out)["error"]["code"] == "contract_file_invalid", name
