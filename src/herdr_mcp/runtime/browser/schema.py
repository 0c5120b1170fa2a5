"""The pieces of the `/browser/*` methods' params schemas that several method tables use
(methods.py, control.py): a closed object, and a Herdr workspace id."""

from __future__ import annotations

from typing import Any

from herdr_mcp.state.bindings import WORKSPACE_ID_PATTERN

WORKSPACE = {"type": "string", "pattern": WORKSPACE_ID_PATTERN}


def closed(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    """An object schema with exactly `properties` (no others), `required` among them."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }
