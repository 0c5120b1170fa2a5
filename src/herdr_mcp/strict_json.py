"""JSON read strictly and within bounds.

Strict: an object that names a key twice is refused, not silently reduced to its last value. Two
readers of one document (ours and whoever produced or checks it) must never see different
values; `json.loads(text, object_pairs_hook=unique_keys)` raises ValueError on a repeated key.

Bounded (docs/runtime.md "Parse boundaries"): every document that crosses a boundary (a stdio
line, an HTTP body, a native-messaging frame, an Edge frame, a record or manifest on disk) is
read by `loads_bounded` with the `JsonLimits` of its boundary: at most `max_bytes` bytes, at
most `max_depth` arrays and objects inside one another, at most `max_items` array elements and
object members in all (counted as the commas outside strings plus the arrays and objects, so
an empty array or object counts as one). The standard parser recurses
once per level and ends in `RecursionError` near the interpreter's limit (about 1,000 levels),
and a few megabytes of `[{},{},...]` cost hundreds of megabytes of dicts; both are refused
before the parser runs, by a scan of the text's structure (a regular expression skips strings
whole, C loops count the brackets and commas left: no Python step per character). What is
refused raises `JsonLimitExceeded`, a ValueError with a stable `code` (`json_too_large`,
`json_too_deep`, `json_too_many_items`) and the `limit` it passed; neither RecursionError nor
MemoryError leaves `loads_bounded`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

#: Arrays and objects inside one another that any boundary accepts (the deepest document we
#: exchange, a tool call's arguments inside a JSON-RPC message inside an Edge frame, is ~10).
DEFAULT_MAX_DEPTH = 64

#: A JSON string (escapes included) or a run of anything that is neither a string nor structure:
#: removing both leaves only the brackets and commas outside strings.
_NOT_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[^\[\]{},"]+', re.DOTALL)
#: What each byte of the brackets adds to the depth: +1 for `[` and `{`, -1 for `]` and `}`.
_DEPTH_STEP = tuple(1 if byte in b"[{" else -1 if byte in b"]}" else 0 for byte in range(256))


@dataclass(frozen=True)
class JsonLimits:
    """The bounds of one parse boundary (module docstring)."""

    max_bytes: int
    max_items: int
    max_depth: int = DEFAULT_MAX_DEPTH

    def as_dict(self) -> dict[str, int]:
        return {"max_bytes": self.max_bytes, "max_depth": self.max_depth, "max_items": self.max_items}


#: One MCP / JSON-RPC message wherever it travels (a stdio line, an HTTP body of the runtime or
#: the link, an Edge frame): 16 MiB leaves room for the JSON escaping of the largest argument
#: the catalog allows (10 MiB), and 500,000 items is over ten times the most a tool answer holds
#: (a grep's 262,144 bytes of matches) while keeping the parsed form within ~100 MB.
MESSAGE_LIMITS = JsonLimits(max_bytes=16 * 1024 * 1024, max_items=500_000)
#: A JSON file of our own package (a frozen catalog, the Herdr reference schemas): the largest
#: today is 320 KiB with ~13,000 items; a damaged install past these is refused, not parsed.
PACKAGED_LIMITS = JsonLimits(max_bytes=4 * 1024 * 1024, max_items=200_000)


class JsonLimitExceeded(ValueError):
    """A document over one of its boundary's bounds: `code` says which, `limit` its value."""

    def __init__(self, code: str, limit: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.limit = limit
        self.message = message

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "limit": self.limit}


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` for `json.loads`: the object, or ValueError on a repeated key."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def no_constant(name: str) -> Any:
    """`parse_constant` for `json.loads`: NaN, Infinity and -Infinity are not JSON (RFC 8259)."""
    raise ValueError(f"{name} is not JSON")


def check_bounds(data: bytes | str, limits: JsonLimits) -> None:
    """Raise `JsonLimitExceeded` when `data` (a JSON text, bytes as received) passes `limits`.

    Valid JSON is measured exactly; for invalid JSON the scan may report a bound where the
    parser would have reported the syntax error, and either way the document is refused."""
    _check_size(data, limits)
    _check_structure(data.decode("utf-8", "replace") if isinstance(data, bytes) else data, limits)


def too_large(limits: JsonLimits) -> JsonLimitExceeded:
    """The refusal of a document over `limits.max_bytes` (for a reader that counts the bytes)."""
    return JsonLimitExceeded(
        "json_too_large", limits.max_bytes, f"the JSON is larger than {limits.max_bytes} bytes"
    )


def _check_size(data: bytes | str, limits: JsonLimits) -> None:
    if len(data) > limits.max_bytes:
        raise too_large(limits)


def _check_structure(text: str, limits: JsonLimits) -> None:
    # Counted over the whole text, strings included, these are upper bounds: a document whose
    # brackets could not reach the depth bound nor its commas the item bound needs no scan.
    opened = text.count("[") + text.count("{")
    if opened <= limits.max_depth and opened + text.count(",") <= limits.max_items:
        return
    structure = _NOT_STRUCTURE.sub("", text)
    if not structure:
        return
    # Depth first (a deeply nested document is reported as such, not as one of many items):
    # the highest running count of opened minus closed brackets, in C loops over the brackets.
    brackets = structure.replace(",", "").encode("ascii")
    if max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0) > limits.max_depth:
        raise _too_deep(limits)
    # A non-empty array or object of n values has n - 1 commas: commas plus containers count
    # every value inside one (an empty array or object counts as one).
    items = structure.count(",") + structure.count("[") + structure.count("{")
    if items > limits.max_items:
        raise JsonLimitExceeded(
            "json_too_many_items",
            limits.max_items,
            f"the JSON holds more than {limits.max_items} array elements and object members",
        )


def _too_deep(limits: JsonLimits) -> JsonLimitExceeded:
    return JsonLimitExceeded(
        "json_too_deep",
        limits.max_depth,
        f"the JSON nests arrays and objects more than {limits.max_depth} deep",
    )


def loads_bounded(
    data: bytes | str,
    limits: JsonLimits,
    *,
    strict: bool = True,
    parse_float: Callable[[str], Any] | None = None,
) -> Any:
    """`data` (UTF-8 bytes or text) parsed within `limits`; `strict` refuses repeated keys and
    NaN/Infinity. Raises `JsonLimitExceeded` over a bound, ValueError for anything else that is
    not JSON (UnicodeDecodeError included)."""
    _check_size(data, limits)
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    _check_structure(text, limits)
    try:
        if strict:
            return json.loads(
                text, object_pairs_hook=unique_keys, parse_constant=no_constant, parse_float=parse_float
            )
        return json.loads(text, parse_float=parse_float)
    except RecursionError:
        # Only unbalanced text gets here (the scan measured balanced text): still never escapes.
        raise _too_deep(limits) from None
    except MemoryError:
        raise JsonLimitExceeded(
            "json_too_large", limits.max_bytes, "the JSON does not fit in memory"
        ) from None
