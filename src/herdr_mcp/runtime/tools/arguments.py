"""Tool arguments, parsed once: bounded, checked against the frozen catalog's schema, defaults filled.

The dispatcher (`runtime.dispatcher.ToolDispatcher`) hands every tools/call's `arguments` through
here before a handler runs, in this order (docs/runtime.md "Tool arguments"):

1. `check_limits`: at most `ARGUMENT_LIMITS.max_depth` objects and arrays inside one another
   (the arguments object itself is level 1), at most `max_values` values in all (every object,
   array, string, number, boolean and null counts one), at most `max_text_bytes` bytes of UTF-8
   in all strings, keys included. The walk is iterative and stops at the first bound passed, so
   no value, however deep or wide, reaches the schema validator, the audit log's digest or a
   handler (each of those recurses once per level). Refusals: `arguments_too_deep`,
   `arguments_too_many_values`, `arguments_too_large`, each with `limit`.
2. `ToolArguments.prepare`: the tool's `inputSchema` (JSON Schema draft 2020-12, the validator
   of `validator_for`) -> `unknown_tool` or `invalid_arguments` naming the first failing place;
   the message is capped at `MAX_PROBLEM_CHARS` (the validator's own message quotes the value).
3. `complete`: the schema's `default`s filled in (a property the caller left out takes its
   catalog default, inside a nested object the caller gave too: herdr_prompt's `wait`), and a
   number the schema calls an integer made an `int` (the validator admits 5.0).

Handlers therefore receive arguments of the schema's shape with every catalog default present:
they index them and never restate a default or check a type again. A value only the handler can
judge (a path, a line range, a pattern) is still the handler's to refuse.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.protocols import Validator

from herdr_mcp.contract import CURRENT_EPOCH, load_catalog
from herdr_mcp.errors import ToolError

#: A validator's message longer than this is cut (with a note of how much was left out).
MAX_PROBLEM_CHARS = 300


@dataclass(frozen=True)
class ArgumentLimits:
    """The bounds of one tools/call's `arguments` (module docstring, step 1)."""

    #: The catalog's deepest argument is 3 levels (herdr_prompt's wait.until); herdr_call's
    #: params for Herdr's layout.apply nest one level per split, so 32 allows ~30 splits.
    max_depth: int = 32
    #: The largest array any schema admits holds 100 items (task.ack's inbox_ids).
    max_values: int = 10_000
    #: fs_edit's old_string and new_string may each be a whole 8 MiB file (EDIT_MAX_BYTES); the
    #: same as one MCP message at most (strict_json.MESSAGE_LIMITS), so over stdio and HTTP the
    #: transport's bound comes first and this one binds callers inside the process.
    max_text_bytes: int = 16 << 20


ARGUMENT_LIMITS = ArgumentLimits()


def _text_bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _too_many_values(limits: ArgumentLimits) -> ToolError:
    return ToolError(
        "arguments_too_many_values",
        f"the arguments hold more than {limits.max_values} values; send less per call",
        limit=limits.max_values,
    )


def check_limits(arguments: Mapping[str, Any], limits: ArgumentLimits = ARGUMENT_LIMITS) -> None:
    """Raise ToolError when `arguments` pass one of `limits` (module docstring, step 1)."""
    values = 0
    text = 0
    stack: list[tuple[Any, int]] = [(arguments, 1)]
    while stack:
        value, depth = stack.pop()
        values += 1
        if isinstance(value, str):
            text += _text_bytes(value)
        elif isinstance(value, Mapping | list):
            if depth > limits.max_depth:
                raise ToolError(
                    "arguments_too_deep",
                    f"the arguments nest objects and arrays more than {limits.max_depth} deep",
                    limit=limits.max_depth,
                )
            # Every entry pushed is counted once popped: a container too wide is refused whole.
            if values + len(stack) + len(value) > limits.max_values:
                raise _too_many_values(limits)
            if isinstance(value, Mapping):
                for key, item in value.items():
                    if isinstance(key, str):
                        text += _text_bytes(key)
                    stack.append((item, depth + 1))
            else:
                stack.extend((item, depth + 1) for item in value)
        if text > limits.max_text_bytes:
            raise ToolError(
                "arguments_too_large",
                f"the arguments' strings hold more than {limits.max_text_bytes} bytes; split the work",
                limit=limits.max_text_bytes,
            )


# Schema validation -----------------------------------------------------------------------


def _json_key(value: Any) -> Any:
    """A hashable stand-in for a JSON value that is equal exactly when JSON Schema calls two
    values equal: numbers by value (1 == 1.0), booleans never equal to numbers, objects by their
    members, arrays by their items in order. Recursion is bounded by `check_limits`' depth."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if value is None:
        return ("null",)
    if isinstance(value, list):
        return ("array", tuple(_json_key(item) for item in value))
    if isinstance(value, Mapping):
        return ("object", frozenset((name, _json_key(item)) for name, item in value.items()))
    return ("other", repr(value))


def _unique_items(
    validator: Validator, unique: bool, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    """`uniqueItems` in linear time: jsonschema's own compares every pair of unhashable items,
    so 3,000 distinct objects in herdr_prompt's wait.until took 23 s of the event loop."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _json_key(item)
        if key in seen:
            yield ValidationError(f"{instance!r} has non-unique elements")
            return
        seen.add(key)


# jsonschema's `extend` carries no annotations; the class it returns is a Validator.
_Validator = validators.extend(Draft202012Validator, {"uniqueItems": _unique_items})  # type: ignore[no-untyped-call]


def validator_for(schema: Mapping[str, Any]) -> Validator:
    """A draft 2020-12 validator of `schema` (the standard one, `uniqueItems` made linear)."""
    validator: Validator = _Validator(schema)
    return validator


def first_problem(validator: Validator, instance: Any) -> ValidationError | None:
    """The first failure in path order (the same one for the same input), or None."""
    return next(iter(sorted(validator.iter_errors(instance), key=lambda e: list(e.path))), None)


def describe_problem(problem: ValidationError, whole: str) -> str:
    """`<place>: <what is wrong>`, the place a JSON-pointer-like path (`whole` when the value
    itself is wrong), the message cut to MAX_PROBLEM_CHARS."""
    where = "/".join(str(part) for part in problem.absolute_path) or whole
    message = problem.message
    if len(message) > MAX_PROBLEM_CHARS:
        left_out = len(message) - MAX_PROBLEM_CHARS
        message = f"{message[:MAX_PROBLEM_CHARS]}... ({left_out} more characters)"
    return f"{where}: {message}"


def complete(schema: Mapping[str, Any], value: Any) -> Any:
    """`value` (already valid against `schema`) as a handler takes it: every absent property that
    has a `default` set to a copy of it, inside present nested objects too, and every number the
    schema calls an integer an `int` (JSON Schema counts 5.0 as an integer; a handler slicing or
    comparing with it must not get a float). `value` itself is not changed."""
    if schema.get("type") == "integer" and isinstance(value, float):
        return int(value)
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, Mapping):
        return [complete(items, item) for item in value]
    properties = schema.get("properties")
    if not isinstance(value, dict) or not isinstance(properties, Mapping):
        return value
    filled = dict(value)
    for name, sub in properties.items():
        if not isinstance(sub, Mapping):
            continue
        if name in filled:
            filled[name] = complete(sub, filled[name])
        elif "default" in sub:
            default = sub["default"]
            filled[name] = default if isinstance(default, _IMMUTABLE) else copy.deepcopy(default)
    return filled


_IMMUTABLE = (str, int, float, bool, type(None))

# The plain check ------------------------------------------------------------------------------

#: Annotations: they never make an instance invalid.
_ANNOTATIONS = frozenset({"description", "title", "default", "examples"})
#: What `plain_check` compiles for a property; a property whose schema says anything else (an
#: array, a nested object, `type` as a list, `format`, ...) is left to the validator.
_PLAIN_PROPERTY_KEYWORDS = (
    frozenset({"type", "enum", "minLength", "maxLength", "minimum", "maximum"}) | _ANNOTATIONS
)
_PLAIN_TYPES = {"string": (str,), "integer": (int,), "boolean": (bool,)}

Check = Callable[[Any], bool]


def _plain_property(schema: Mapping[str, Any]) -> Check | None:
    """A check that is True only where the validator finds `schema` met by a value, or None
    when `schema` says more than the plain checks know."""
    if not set(schema) <= _PLAIN_PROPERTY_KEYWORDS or schema.get("type") not in _PLAIN_TYPES:
        return None
    kind = _PLAIN_TYPES[schema["type"]]
    enum = schema.get("enum")
    if enum is not None and not (isinstance(enum, list) and all(type(item) in kind for item in enum)):
        return None
    allowed = None if enum is None else frozenset(enum)
    bounds = {key: schema[key] for key in ("minLength", "maxLength", "minimum", "maximum") if key in schema}
    if not all(type(bound) is int for bound in bounds.values()):
        return None
    low_length, high_length = bounds.get("minLength"), bounds.get("maxLength")
    low, high = bounds.get("minimum"), bounds.get("maximum")

    def check(value: Any) -> bool:
        # `type(...) in`, not isinstance: a bool is no integer, a float (5.0 is one to the
        # validator) and str subclasses go to the validator.
        if type(value) not in kind:
            return False
        if allowed is not None and value not in allowed:
            return False
        if kind == (str,):
            return (low_length is None or len(value) >= low_length) and (
                high_length is None or len(value) <= high_length
            )
        if kind == (int,):
            return (low is None or value >= low) and (high is None or value <= high)
        return True

    return check


def plain_check(schema: Mapping[str, Any]) -> Check | None:
    """For an object schema made of plain keywords (`type: object`, `properties`, `required`,
    `additionalProperties: false` or absent; properties of type string, integer or boolean with
    `enum`, `minLength`, `maxLength`, `minimum`, `maximum`): a check that is True only for
    arguments the validator accepts, so it can skip the validator for them. False means "ask the
    validator" (which finds and words the problem, or accepts a value the plain check does not
    decide: a float that is an integer, a property with other keywords). None when the schema
    itself says more than this."""
    if not set(schema) <= {"type", "properties", "required", "additionalProperties"} | _ANNOTATIONS:
        return None
    if schema.get("type") != "object" or schema.get("additionalProperties", True) not in (True, False):
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        return None
    checks = {
        name: _plain_property(sub) if isinstance(sub, Mapping) else None for name, sub in properties.items()
    }
    closed = schema.get("additionalProperties", True) is False
    needed = tuple(required)

    def check(arguments: Any) -> bool:
        if type(arguments) is not dict:
            return False
        for name in needed:
            if name not in arguments:
                return False
        for name, value in arguments.items():
            if name not in checks:
                if closed:
                    return False
                continue
            property_check = checks[name]
            if property_check is None or not property_check(value):
                return False
        return True

    return check


class ToolArguments:
    """Steps 2 and 3 of the module docstring for every tool of one catalog.

    Arguments that `plain_check` finds valid skip the validator (which costs tens of
    microseconds a call, the most of a tools/call's own work after the tool's for herdr_fs_read:
    issue 24); every other argument object goes through it, so what is refused and how it is
    worded is the validator's."""

    def __init__(self, catalog: list[dict[str, Any]]) -> None:
        self.schemas: dict[str, Mapping[str, Any]] = {tool["name"]: tool["inputSchema"] for tool in catalog}
        self._validators = {name: validator_for(schema) for name, schema in self.schemas.items()}
        self._plain = {name: plain_check(schema) for name, schema in self.schemas.items()}

    def prepare(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """`arguments` of tool `name` validated, with the schema's defaults filled in.
        Raises ToolError: unknown_tool, invalid_arguments."""
        validator = self._validators.get(name)
        if validator is None:
            raise ToolError("unknown_tool", f"no tool named {name!r}; tools/list shows the 18 tools")
        plain = self._plain[name]
        if plain is None or not plain(arguments):
            problem = first_problem(validator, arguments)
            if problem is not None:
                raise ToolError("invalid_arguments", describe_problem(problem, "(arguments)"), tool=name)
        filled: dict[str, Any] = complete(self.schemas[name], dict(arguments))
        return filled


@cache
def catalog_arguments(epoch: int = CURRENT_EPOCH) -> ToolArguments:
    """The `ToolArguments` of the frozen catalog of `epoch` (built once per process)."""
    return ToolArguments(load_catalog(epoch))


def prepared(name: str, arguments: Mapping[str, Any], epoch: int = CURRENT_EPOCH) -> dict[str, Any]:
    """What a handler of tool `name` receives for `arguments`: bounded, validated, defaults
    filled (the dispatcher's steps 1-3; for callers of a handler outside the dispatcher)."""
    check_limits(arguments)
    return catalog_arguments(epoch).prepare(name, arguments)
