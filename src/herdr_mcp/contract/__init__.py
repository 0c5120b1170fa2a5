"""Frozen tool catalogs and the contract identity every release carries.

A catalog is a JSON file `runtime-epoch-<E>.json` packaged under `herdr_mcp/contract/catalogs/`
(built from `manifests/contracts/` by hatch force-include; never read from the source tree at run
time). Its identity is `{epoch, hash, tool_count}` with
`hash = "sha256:" + hex(sha256(JCS(tools sorted by name)))`, JCS being RFC 8785 canonical JSON.
This module imports nothing else of ours, so the updater, the release toolchain and the runtime
can all depend on it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import rfc8785

from herdr_mcp.errors import LocalFault

#: The epoch this runtime serves.
CURRENT_EPOCH = 5
#: Epochs whose catalogs are kept frozen (the current one and its rollback baseline).
FROZEN_EPOCHS = (4, 5)


class ContractError(LocalFault):
    """A catalog is missing or malformed (duplicate names, wrong epoch, not a tool array)."""

    code = "contract_unknown"

    def __init__(self, message: str) -> None:
        super().__init__(self.code, message)

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class ContractIdentity:
    """What a release and a running runtime say about their tool contract."""

    epoch: int
    hash: str
    tool_count: int

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "hash": self.hash, "tool_count": self.tool_count}


def identity_of(tools: list[dict[str, Any]], epoch: int) -> ContractIdentity:
    """Compute the identity of a tool array exactly as served (order does not matter)."""
    names = [tool.get("name") for tool in tools]
    if any(not isinstance(name, str) for name in names):
        raise ContractError("every tool needs a string name")
    if len(set(names)) != len(names):
        raise ContractError("duplicate tool names in catalog")
    ordered = sorted(tools, key=lambda tool: str(tool["name"]))
    digest = hashlib.sha256(rfc8785.dumps(ordered)).hexdigest()
    return ContractIdentity(epoch=epoch, hash=f"sha256:{digest}", tool_count=len(tools))


@cache
def _catalog_text(epoch: int) -> str:
    package = resources.files(__package__) / "catalogs" / f"runtime-epoch-{epoch}.json"
    try:
        return package.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ContractError(f"no frozen catalog for epoch {epoch}") from exc


def load_catalog(epoch: int = CURRENT_EPOCH) -> list[dict[str, Any]]:
    """The frozen tool array of `epoch` (a fresh copy; callers may not mutate the original)."""
    document = json.loads(_catalog_text(epoch))
    if not isinstance(document, dict) or document.get("epoch") != epoch:
        raise ContractError(f"catalog file for epoch {epoch} does not declare that epoch")
    tools = document.get("tools")
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise ContractError(f"catalog for epoch {epoch} has no tool array")
    return tools


def contract_identity(epoch: int = CURRENT_EPOCH) -> ContractIdentity:
    """The identity of the frozen catalog of `epoch`."""
    return identity_of(load_catalog(epoch), epoch)
