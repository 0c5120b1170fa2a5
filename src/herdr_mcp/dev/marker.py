"""The DEV plane's marker, `dev-plane.json` in the config dir: which PROD generation the plane
pinned, the DEV generation it activated and the checkout it came from (docs/updater.md, the planes
table's `dev` row). `dev/plane.py` writes it as it syncs and rolls back; `read_plane` is how everything
else learns which plane the workstation is on. A marker herdr-mcp did not write is
`dev_plane_invalid`, never guessed at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herdr_mcp.contract import ContractIdentity
from herdr_mcp.errors import RefusedFault
from herdr_mcp.generations.control import GenerationError, parse_contract
from herdr_mcp.layout import Layout
from herdr_mcp.records import atomic_write, load_strict, read_capped

SCHEMA_VERSION = 1
MAX_MARKER_BYTES = 64 * 1024


class DevPlaneError(RefusedFault):
    """The DEV plane refuses what was asked (not on the plane it needs, a pin that does not
    match, a contract change): a stable `code` and an actionable `message`."""


@dataclass(frozen=True)
class PinnedProd:
    generation: str
    executable: str
    version: str
    contract: ContractIdentity
    checksum: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "executable": self.executable,
            "version": self.version,
            "contract": self.contract.to_dict(),
            "checksum": self.checksum,
        }


@dataclass(frozen=True)
class DevPlane:
    """The parsed `dev-plane.json`."""

    #: None on a checkout-only workstation (`start_checkout`): no PROD to return to.
    pinned_prod: PinnedProd | None
    dev_generation: str | None
    source: dict[str, Any]
    synced_at: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "pinned_prod": None if self.pinned_prod is None else self.pinned_prod.to_dict(),
            "dev_generation": self.dev_generation,
            "source": self.source,
            "synced_at": self.synced_at,
        }


def marker_path(config_dir: Path) -> Path:
    return Layout(config_dir).dev_plane_file


def read_plane(config_dir: Path) -> DevPlane | None:
    """The DEV plane marker, or None on PROD; `dev_plane_invalid` when it is not ours."""
    path = marker_path(config_dir)
    try:
        data = read_capped(path, MAX_MARKER_BYTES)
    except OSError as exc:
        raise DevPlaneError("dev_plane_invalid", f"cannot open {path}: {exc.strerror}") from None
    if data is None:
        return None
    try:
        document = load_strict(data) if len(data) <= MAX_MARKER_BYTES else None
        if not isinstance(document, dict) or document.get("schema_version") != SCHEMA_VERSION:
            raise ValueError("not a schema 1 object")
        if set(document) != {"schema_version", "pinned_prod", "dev_generation", "source", "synced_at"}:
            raise ValueError("unexpected fields")
        dev = document["dev_generation"]
        if not (dev is None or isinstance(dev, str)) or not isinstance(document["source"], dict):
            raise ValueError("dev_generation or source is malformed")
        if not isinstance(document["synced_at"], str):
            raise ValueError("synced_at must be a string")
        pin = document["pinned_prod"]
        pinned = None if pin is None else _parse_pin(pin)
        return DevPlane(pinned, dev, document["source"], document["synced_at"])
    except (ValueError, GenerationError) as exc:
        raise DevPlaneError(
            "dev_plane_invalid", f"{path} is not a DEV plane marker herdr-mcp wrote ({exc}); fix or remove it"
        ) from None


def _parse_pin(pin: object) -> PinnedProd:
    fields = {"generation", "executable", "version", "contract", "checksum"}
    if not isinstance(pin, dict) or set(pin) != fields:
        raise ValueError("pinned_prod is malformed")
    for key in ("generation", "executable", "version", "checksum"):
        if not isinstance(pin[key], str):
            raise ValueError(f"pinned_prod.{key} must be a string")
    contract = parse_contract(pin["contract"], "pinned_prod.contract")
    return PinnedProd(pin["generation"], pin["executable"], pin["version"], contract, pin["checksum"])


def write_plane(config_dir: Path, plane: DevPlane | None) -> None:
    path = marker_path(config_dir)
    if plane is None:
        path.unlink(missing_ok=True)
    else:
        atomic_write(path, json.dumps(plane.to_dict(), indent=2, sort_keys=True).encode() + b"\n")
