"""Which methods Herdr's socket accepts at a protocol, and which params it takes.

Herdr deserializes a whole request line with serde (src/api/schema.rs: `Request {id, #[serde(flatten)]
method}`, `Method` tagged by `method` with content `params`); any failure — bad JSON, a missing or
unknown method, missing or ill-typed params — is answered `{"id": "", "error": {"code":
"invalid_request"}}` (src/api/server.rs). Params structs do not deny unknown fields, so extra
params are ignored.

The methods and their params schemas are the reference of the simulator's protocol
(`herdr_mcp.herdr.reference.load(protocol)`: Herdr's published schema at 20, the reconstructed one
at 22, plus `pane.graphics.stream` from `methods.json`). A method that protocol does not have is an
unknown method. The one thing added here is what a JSON Schema validator does not assert: the
`format` schemars writes from the Rust type of a number field (`uint32`, `int32`, `float`, ...).
serde refuses a number outside that type's range (a `u32` `lines` of 2^32, an `i32` `z_index` of
2^31), while a validator treats `format` as an annotation; the published protocol-20 schema gives
most unsigned fields only `minimum: 0` and the rest nothing but the format.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

from herdr_mcp.herdr import reference


class Invalid(Exception):
    """Params Herdr's serde would refuse; the message says what."""


Check = Callable[[str, Any], None]

# schemars' `format` of each Rust integer type (src/api/schema/*.rs field types) -> its range.
_INTEGER_RANGES: dict[str, tuple[int, int]] = {
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
    "uint": (0, 2**64 - 1),  # usize on the 64-bit targets Herdr ships for
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "int": (-(2**63), 2**63 - 1),
}
_F32_MAX = 3.4028234663852886e38


def _rust_formats() -> FormatChecker:
    checker = FormatChecker(formats=())

    def integer_in(low: int, high: int) -> Callable[[object], bool]:
        def check(value: object) -> bool:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return True  # not a number: the schema's `type` says what is wrong
            if isinstance(value, float) and not value.is_integer():
                return True
            return low <= value <= high

        return check

    for name, (low, high) in _INTEGER_RANGES.items():
        checker.checks(name)(integer_in(low, high))

    @checker.checks("float")
    def f32(value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return True
        return math.isfinite(value) and abs(value) <= _F32_MAX

    @checker.checks("double")
    def f64(value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return True
        return math.isfinite(value)

    return checker


_FORMATS = _rust_formats()


def methods_of(protocol: int) -> frozenset[str]:
    """The wire methods of `protocol` (every method of its reference)."""
    return frozenset(reference.load(protocol).methods)


def validator_for(protocol: int) -> Check:
    """The params check of `protocol`: raises Invalid when Herdr would refuse `params` of `method`
    (its reference's `params_schema` with the Rust number ranges); an unknown method is Invalid."""
    loaded = reference.load(protocol)
    validators: dict[str, Draft202012Validator] = {}

    def validator(method: str) -> Draft202012Validator:
        found = validators.get(method)
        if found is None:
            entry = loaded.methods.get(method)
            if entry is None:
                raise Invalid(f"unknown method {method!r} at protocol {protocol}")
            found = validators[method] = Draft202012Validator(
                dict(entry.params_schema), format_checker=_FORMATS
            )
        return found

    def check(method: str, params: Any) -> None:
        checked = validator(method)
        if not isinstance(params, Mapping):
            raise Invalid("params must be an object")
        error = next(iter(checked.iter_errors(params)), None)
        if error is not None:
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
            raise Invalid(f"params{where}: {error.message}")

    return check
