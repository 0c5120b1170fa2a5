"""The public Edge contract, epoch 8: frozen in manifests/contracts/edge-epoch-8.json, identified by
the same rule as the runtime catalogs (`identity_of`), and made of the runtime epoch-5 tools plus
the edge-local herdr_devices. What the Worker serves is compared to this file in test_edge_relay.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from herdr_mcp.contract import identity_of, load_catalog

#: The pin: editing the frozen catalog fails here until the change is a new epoch with a new file.
EDGE_EPOCH_8_HASH = "sha256:7dea4bde22090eda17fd93c0e842b7de7579a9f354d8cf6558d8ad9e8429cb45"
EDGE_EPOCH_8 = Path(__file__).resolve().parents[1] / "manifests" / "contracts" / "edge-epoch-8.json"


def _document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(EDGE_EPOCH_8.read_text(encoding="utf-8"))
    return document


def test_the_edge_epoch_8_hash_is_pinned() -> None:
    document = _document()
    identity = identity_of(document["tools"], document["epoch"])
    assert (identity.epoch, identity.hash, identity.tool_count) == (8, EDGE_EPOCH_8_HASH, 19)


def test_edge_epoch_8_is_the_runtime_epoch_5_tools_plus_herdr_devices() -> None:
    document = _document()
    assert (document["name"], document["runtime_epoch"]) == ("edge", 5)
    tools = {tool["name"]: tool for tool in document["tools"]}
    runtime = {tool["name"]: tool for tool in load_catalog(5)}
    devices = tools.pop("herdr_devices")
    assert tools == runtime
    Draft202012Validator.check_schema(devices["inputSchema"])
    assert devices["inputSchema"] == {"type": "object", "properties": {}, "additionalProperties": False}
    assert devices["annotations"]["readOnlyHint"] is True and devices["annotations"]["openWorldHint"] is False


def test_an_edit_of_the_edge_catalog_changes_its_identity() -> None:
    tools = _document()["tools"]
    tools[-1]["description"] += " "
    assert identity_of(tools, 8).hash != EDGE_EPOCH_8_HASH
