"""The frozen catalogs and the contract identity.

The pinned hashes below are the contract: editing a frozen catalog fails here until the change
becomes a new epoch with a new file (and a new pin), never an incidental edit.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from jsonschema import Draft202012Validator

from herdr_mcp.contract import ContractError, contract_identity, identity_of, load_catalog

PINNED = {
    4: "sha256:a9cab92d3eb6e761a0800a3e843e2561935646be318b800c496edbd7bb237dc0",
    5: "sha256:2001dae4b592926b17f499b131be0ff586936d7577ca78e56aa2e2784c3a701a",
}
TOOL_NAMES = {
    "herdr_inspect", "herdr_since", "herdr_skill", "herdr_methods", "herdr_call", "herdr_fs_read",
    "herdr_fs_list", "herdr_fs_grep", "herdr_fs_image", "herdr_fs_edit", "herdr_fs_write",
    "herdr_fs_patch", "herdr_git", "herdr_exec", "herdr_exec_start", "herdr_exec_read",
    "herdr_exec_kill", "herdr_prompt",
}  # fmt: skip
READ_ONLY = {
    "herdr_inspect", "herdr_since", "herdr_skill", "herdr_methods", "herdr_fs_read", "herdr_fs_list",
    "herdr_fs_grep", "herdr_fs_image", "herdr_git", "herdr_exec_read",
}  # fmt: skip
SOURCE = Path(__file__).resolve().parents[2] / "manifests" / "contracts"


@pytest.mark.parametrize("epoch", sorted(PINNED))
def test_pinned_hash(epoch: int) -> None:
    identity = contract_identity(epoch)
    assert identity.hash == PINNED[epoch]
    assert identity.tool_count == 18
    assert identity.epoch == epoch


@pytest.mark.parametrize("epoch", sorted(PINNED))
def test_packaged_catalog_is_the_source_catalog(epoch: int) -> None:
    source = json.loads((SOURCE / f"runtime-epoch-{epoch}.json").read_text(encoding="utf-8"))
    assert source["tools"] == load_catalog(epoch)


def test_hash_is_sha256_of_jcs_of_tools_sorted_by_name() -> None:
    tools = load_catalog(5)
    ordered: list[dict[str, Any]] = sorted(tools, key=lambda t: str(t["name"]))
    expected = hashlib.sha256(rfc8785.dumps(ordered)).hexdigest()
    assert contract_identity(5).hash == f"sha256:{expected}"
    assert identity_of(list(reversed(tools)), 5) == contract_identity(5)


def _by_name(epoch: int) -> dict[str, dict[str, Any]]:
    return {tool["name"]: tool for tool in load_catalog(epoch)}


def test_catalog_shape_and_annotations() -> None:
    tools = _by_name(5)
    assert set(tools) == TOOL_NAMES
    for name, tool in tools.items():
        Draft202012Validator.check_schema(tool["inputSchema"])
        assert tool["inputSchema"]["type"] == "object"
        assert tool["inputSchema"]["additionalProperties"] is False
        assert len(tool["description"]) > 80, name
        annotations = tool["annotations"]
        assert annotations["openWorldHint"] is False
        assert annotations["readOnlyHint"] is (name in READ_ONLY), name
        if name not in READ_ONLY:
            assert "destructiveHint" in annotations, name
        assert "sandbox" not in tool["description"].lower() or "not a sandbox" in tool["description"]


def test_epoch_4_is_epoch_5_without_exec_intent_and_key() -> None:
    four, five = _by_name(4), _by_name(5)
    assert set(four) == set(five)
    for name in five:
        if name != "herdr_exec":
            assert four[name] == five[name], name
    expected = copy.deepcopy(five["herdr_exec"]["inputSchema"])
    del expected["properties"]["intent"]
    del expected["properties"]["idempotency_key"]
    assert four["herdr_exec"]["inputSchema"] == expected


def test_edit_of_a_frozen_catalog_changes_its_identity() -> None:
    tools = load_catalog(5)
    tools[0]["description"] += " "
    assert identity_of(tools, 5).hash != PINNED[5]


def test_duplicate_names_are_refused() -> None:
    tools = load_catalog(5)
    with pytest.raises(ContractError):
        identity_of([*tools, tools[0]], 5)


def test_unknown_epoch_is_refused() -> None:
    with pytest.raises(ContractError):
        load_catalog(99)


def _cli(*args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "herdr_mcp", *args], check=True, capture_output=True, text=True, timeout=60
    ).stdout


def test_version_text_and_json_agree() -> None:
    lines = _cli("version").splitlines()
    info = json.loads(_cli("version", "--json"))
    assert lines[0] == f"herdr-mcp {info['version']}"
    assert lines[1] == "contract epoch 5 / 18 tools"
    assert lines[2] == PINNED[5]
    assert lines[3] == f"state schema {info['state_schema']}"
    assert info["contract"] == {"epoch": 5, "hash": PINNED[5], "tool_count": 18}
    assert info["product"] == "herdr-mcp"


def test_an_editable_install_finds_the_packaged_data() -> None:
    """`pip install -e .` puts src/ on sys.path; the catalogs, the manifest schema and the
    attestations must be readable from there (the packaged names are symlinks into manifests/
    and attestations/). PYTHONPATH=src is exactly that situation, without a new venv."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    probe = (
        "import json, herdr_mcp\n"
        "from herdr_mcp.contract import contract_identity\n"
        "from herdr_mcp.release.attestation import load_identity_policy, trusted_root_age\n"
        "from importlib import resources\n"
        "schema = resources.files('herdr_mcp.release') / 'runtime-manifest.schema.json'\n"
        "print(json.dumps({'file': herdr_mcp.__file__, 'epoch': contract_identity().epoch,\n"
        "  'policy': load_identity_policy().repository, 'root_age': trusted_root_age().age.days >= 0,\n"
        "  'schema': json.loads(schema.read_text())['title']}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env, cwd=root
    )
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["file"] == str(root / "src" / "herdr_mcp" / "__init__.py")
    assert info["epoch"] == 5
    version = subprocess.run(
        [sys.executable, "-m", "herdr_mcp", "version"], capture_output=True, text=True, timeout=60, env=env
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.splitlines()[1] == "contract epoch 5 / 18 tools"
