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
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from herdr_mcp.errors import LocalFault
from herdr_mcp.strict_json import PACKAGED_LIMITS, loads_bounded

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


#: The one rule for a contract identity read from outside (a release manifest, runtime-control.json,
#: the DEV plane's pin, a runtime's /health, a candidate's `version --json`): exactly these members,
#: integers (never booleans) in these ranges, the hash as `identity_of` writes it.
IDENTITY_FIELDS = ("epoch", "hash", "tool_count")
MAX_EPOCH = 2**31 - 1
MAX_TOOL_COUNT = 10_000
_IDENTITY_HASH = re.compile(r"sha256:[0-9a-f]{64}")


class ContractIdentityInvalid(ValueError):
    """`parse_identity` refused a value. `kind` is `type`, `value`, `unknown_field` or
    `missing_field`; `field` the member at fault (None: the value itself); the message names the
    place as `<where>.<field>`, so each reader can turn it into its own code."""

    def __init__(self, kind: str, field: str | None, where: str, detail: str) -> None:
        self.kind = kind
        self.field = field
        self.detail = detail
        super().__init__(f"{where if field is None else f'{where}.{field}'} {detail}")


def parse_identity(value: object, where: str = "contract") -> ContractIdentity:
    """`value` as a contract identity `{epoch, hash, tool_count}`; raises `ContractIdentityInvalid`."""
    if not isinstance(value, dict):
        raise ContractIdentityInvalid("type", None, where, "must be an object {epoch, hash, tool_count}")
    unknown = sorted(str(key) for key in value if key not in IDENTITY_FIELDS)
    if unknown:
        raise ContractIdentityInvalid("unknown_field", unknown[0], where, "is not a contract identity field")
    for name in IDENTITY_FIELDS:
        if name not in value:
            raise ContractIdentityInvalid("missing_field", name, where, "is missing")
    epoch = _identity_int(value["epoch"], "epoch", where, MAX_EPOCH)
    digest = value["hash"]
    if not isinstance(digest, str):
        raise ContractIdentityInvalid("type", "hash", where, "must be a string")
    if _IDENTITY_HASH.fullmatch(digest) is None:
        raise ContractIdentityInvalid(
            "value", "hash", where, 'must be "sha256:" followed by 64 lowercase hex digits'
        )
    tool_count = _identity_int(value["tool_count"], "tool_count", where, MAX_TOOL_COUNT)
    return ContractIdentity(epoch=epoch, hash=digest, tool_count=tool_count)


def _identity_int(value: object, name: str, where: str, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ContractIdentityInvalid("type", name, where, "must be an integer")
    if not 1 <= value <= high:
        raise ContractIdentityInvalid("value", name, where, f"must be an integer in 1..{high}, not {value}")
    return value


def identity_of(tools: list[dict[str, Any]], epoch: int) -> ContractIdentity:
    """Compute the identity of a tool array exactly as served (order does not matter)."""
    names = [tool.get("name") for tool in tools]
    if any(not isinstance(name, str) for name in names):
        raise ContractError("every tool needs a string name")
    if len(set(names)) != len(names):
        raise ContractError("duplicate tool names in catalog")
    import rfc8785  # here: reading a catalog (every start) does not need it

    ordered = sorted(tools, key=lambda tool: str(tool["name"]))
    digest = hashlib.sha256(rfc8785.dumps(ordered)).hexdigest()
    return ContractIdentity(epoch=epoch, hash=f"sha256:{digest}", tool_count=len(tools))


def identity_of_catalog(document: object) -> ContractIdentity:
    """The identity of a catalog document `{"epoch": E, "tools": [...]}` read from a file (a
    `runtime-epoch-E.json` given on the command line); raises `ContractError`."""
    if not isinstance(document, dict):
        raise ContractError("a catalog is a JSON object {epoch, tools}")
    epoch, tools = document.get("epoch"), document.get("tools")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 1 <= epoch <= MAX_EPOCH:
        raise ContractError(f"a catalog's epoch is an integer in 1..{MAX_EPOCH}")
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise ContractError("a catalog's tools are an array of objects")
    return identity_of(tools, epoch)


@cache
def _catalog_text(epoch: int) -> str:
    package = resources.files(__package__) / "catalogs" / f"runtime-epoch-{epoch}.json"
    try:
        return package.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ContractError(f"no frozen catalog for epoch {epoch}") from exc


def load_catalog(epoch: int = CURRENT_EPOCH) -> list[dict[str, Any]]:
    """The frozen tool array of `epoch` (a fresh copy; callers may not mutate the original)."""
    try:
        document = loads_bounded(_catalog_text(epoch), PACKAGED_LIMITS)
    except ValueError as exc:  # a damaged install: not JSON, or past the bounds
        raise ContractError(
            f"the frozen catalog for epoch {epoch} is not JSON within bounds ({exc})"
        ) from None
    if not isinstance(document, dict) or document.get("epoch") != epoch:
        raise ContractError(f"catalog file for epoch {epoch} does not declare that epoch")
    tools = document.get("tools")
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise ContractError(f"catalog for epoch {epoch} has no tool array")
    return tools


def contract_identity(epoch: int = CURRENT_EPOCH) -> ContractIdentity:
    """The identity of the frozen catalog of `epoch`."""
    return identity_of(load_catalog(epoch), epoch)
