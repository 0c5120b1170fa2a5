"""JSON read strictly: an object that names a key twice is refused, not silently reduced to its last value.

Two readers of one document (ours and whoever produced or checks it) must never see different
values; `json.loads(text, object_pairs_hook=unique_keys)` raises ValueError on a repeated key.
"""

from __future__ import annotations

from typing import Any


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` for `json.loads`: the object, or ValueError on a repeated key."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result
