"""Tool arguments are parsed once, by the dispatcher (runtime/tools/arguments.py, docs/runtime.md
"Tool arguments"): bounded (depth, values, string bytes), validated against the frozen catalog,
the catalog's defaults filled in; handlers index what they get and restate no default.

Before this, an `arguments` object nested 5,000 deep made `ToolDispatcher.call` raise
RecursionError (the validator's message and the audit digest both recurse once per level), a
4 MiB string that failed `maxLength` came back inside a 4 MiB error message, and 3,000 distinct
objects in herdr_prompt's `wait.until` held the event loop for 23 s (jsonschema's uniqueItems
compares every pair). The dispatcher here is the real one, with real services and audit log;
no Herdr runs, so calls that would need it stop at their Herdr error.
"""

from __future__ import annotations

import ast
import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

import herdr_mcp.runtime.tasks
import herdr_mcp.runtime.tools
from herdr_mcp.contract import load_catalog
from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.config import RuntimeConfig
from herdr_mcp.runtime.dispatcher import ToolDispatcher
from herdr_mcp.runtime.services import Services
from herdr_mcp.runtime.tools.arguments import (
    ARGUMENT_LIMITS,
    MAX_PROBLEM_CHARS,
    ArgumentLimits,
    ToolArguments,
    check_limits,
    plain_check,
    prepared,
    validator_for,
)
from tests.support.runtime_harness import call_tool, in_process_runtime
from tests.support.sim_helpers import run
from tests.support.waiting import DEADLINE_S

CATALOG = {tool["name"]: tool["inputSchema"] for tool in load_catalog()}

#: The least each tool takes (its required arguments).
MINIMAL: dict[str, dict[str, Any]] = {
    "herdr_inspect": {},
    "herdr_since": {},
    "herdr_skill": {},
    "herdr_methods": {},
    "herdr_call": {"method": "herdr_mcp.skill.list"},
    "herdr_git": {"root": "/r", "action": "status"},
    "herdr_exec": {"workspace": "w1", "command": "true"},
    "herdr_exec_start": {"root": "/r", "command": "true"},
    "herdr_exec_read": {"session_id": "s"},
    "herdr_exec_kill": {"session_id": "s"},
    "herdr_prompt": {"target": "coder", "text": "go"},
    "herdr_fs_read": {"path": "a"},
    "herdr_fs_list": {"path": "."},
    "herdr_fs_grep": {"root": "/r", "pattern": "p"},
    "herdr_fs_image": {"path": "a.png"},
    "herdr_fs_edit": {"path": "a", "old_string": "x", "new_string": "y"},
    "herdr_fs_write": {"path": "a", "content": ""},
    "herdr_fs_patch": {"root": "/r", "patch": "*** Begin Patch\n*** End Patch"},
}

#: Every default a handler (or the task tracker) wrote out by hand before the dispatcher filled
#: them in (read from the handlers at b8db2ee): each must be the catalog's.
RESTATED_BEFORE: list[tuple[str, str, Any]] = [
    ("herdr_fs_read", "start_line", 1),
    ("herdr_fs_read", "max_bytes", 16384),
    ("herdr_fs_list", "recursive", False),
    ("herdr_fs_list", "max_entries", 200),
    ("herdr_fs_grep", "regex", False),
    ("herdr_fs_grep", "case_insensitive", False),
    ("herdr_fs_grep", "max_matches", 50),
    ("herdr_fs_grep", "max_bytes", 65536),
    ("herdr_fs_image", "max_bytes", 2097152),
    ("herdr_fs_edit", "confirm_busy", False),
    ("herdr_fs_edit", "confirm_dirty", False),
    ("herdr_fs_write", "overwrite", False),
    ("herdr_fs_write", "confirm_busy", False),
    ("herdr_fs_write", "confirm_dirty", False),
    ("herdr_fs_patch", "dry_run", False),
    ("herdr_fs_patch", "confirm_busy", False),
    ("herdr_fs_patch", "confirm_dirty", False),
    ("herdr_git", "staged", False),
    ("herdr_git", "max_count", 20),
    ("herdr_git", "max_bytes", 65536),
    ("herdr_exec", "timeout_ms", 30000),
    ("herdr_exec", "confirm_busy", False),
    ("herdr_exec_start", "confirm_busy", False),
    ("herdr_exec_read", "stream", "both"),
    ("herdr_exec_read", "stdout_offset", 0),
    ("herdr_exec_read", "stderr_offset", 0),
    ("herdr_exec_read", "max_bytes", 65536),
    ("herdr_exec_kill", "grace_ms", 2000),
    ("herdr_since", "cursor", 0),
    ("herdr_since", "max_events", 100),
    ("herdr_skill", "include_native_reference", False),
    ("herdr_call", "params", {}),
]


def _defaults(schema: dict[str, Any]) -> dict[str, Any]:
    return {name: sub["default"] for name, sub in schema.get("properties", {}).items() if "default" in sub}


def deep(levels: int, leaf: Any = "x") -> Any:
    """`leaf` inside `levels` objects."""
    value = leaf
    for _ in range(levels):
        value = {"a": value}
    return value


# --- Defaults: the catalog's, filled once --------------------------------------------------


def test_minimal_arguments_cover_the_catalog() -> None:
    assert set(MINIMAL) == set(CATALOG)
    for name, arguments in MINIMAL.items():
        assert not list(Draft202012Validator(CATALOG[name]).iter_errors(arguments)), name


@pytest.mark.parametrize(("tool", "argument", "value"), RESTATED_BEFORE)
def test_every_default_the_handlers_restated_is_the_catalogs_and_the_dispatcher_fills_it(
    tool: str, argument: str, value: Any
) -> None:
    assert CATALOG[tool]["properties"][argument]["default"] == value
    assert prepared(tool, MINIMAL[tool])[argument] == value


@pytest.mark.parametrize("tool", sorted(CATALOG))
def test_the_dispatcher_fills_every_catalog_default_and_nothing_else(tool: str) -> None:
    schema = CATALOG[tool]
    filled = prepared(tool, MINIMAL[tool])
    assert filled == {**MINIMAL[tool], **_defaults(schema)}
    # Each default is valid where it stands, and what the caller gave is kept as given.
    assert not list(Draft202012Validator(schema).iter_errors(filled))
    given = {
        name: sub["default"] for name, sub in schema["properties"].items() if sub.get("type") == "boolean"
    }
    flipped = {name: not value for name, value in given.items()}
    assert prepared(tool, {**MINIMAL[tool], **flipped}).items() >= flipped.items()


def test_nested_defaults_are_filled_only_inside_what_was_given() -> None:
    wait = CATALOG["herdr_prompt"]["properties"]["wait"]["properties"]
    assert "wait" not in prepared("herdr_prompt", MINIMAL["herdr_prompt"])
    filled = prepared("herdr_prompt", {**MINIMAL["herdr_prompt"], "wait": {}})
    assert filled["wait"] == {"until": wait["until"]["default"], "timeout_ms": wait["timeout_ms"]["default"]}
    kept = prepared("herdr_prompt", {**MINIMAL["herdr_prompt"], "wait": {"until": ["working"]}})
    assert kept["wait"] == {"until": ["working"], "timeout_ms": 60000}
    # A default is a copy: changing one call's arguments never changes the next call's.
    filled["wait"]["until"].append("working")
    again = prepared("herdr_prompt", {**MINIMAL["herdr_prompt"], "wait": {}})
    assert again["wait"]["until"] == ["idle", "done", "blocked"]
    assert (
        prepared("herdr_call", MINIMAL["herdr_call"])["params"]
        is not CATALOG["herdr_call"]["properties"]["params"]["default"]
    )


def test_a_number_the_schema_calls_an_integer_reaches_the_handler_as_an_int() -> None:
    # JSON Schema counts 5.0 as an integer; the handlers that used int(...) no longer convert.
    read = prepared("herdr_exec_read", {"session_id": "s", "stdout_offset": 5.0, "max_bytes": 10.0})
    assert (read["stdout_offset"], type(read["stdout_offset"]), type(read["max_bytes"])) == (5, int, int)
    wait = prepared("herdr_prompt", {**MINIMAL["herdr_prompt"], "wait": {"timeout_ms": 1000.0}})["wait"]
    assert type(wait["timeout_ms"]) is int
    assert type(prepared("herdr_git", {"root": "/r", "action": "log", "max_count": 3.0})["max_count"]) is int


def _sources() -> Iterator[Path]:
    yield from Path(herdr_mcp.runtime.tools.__file__).parent.rglob("*.py")
    yield Path(herdr_mcp.runtime.tasks.__file__)


def test_no_handler_restates_a_catalog_default() -> None:
    """No call in the handlers or the task tracker passes an argument's name and then a value
    for it (`args.get("timeout_ms", 30000)`, `int_arg(args, "max_bytes", READ_DEFAULT_MAX_BYTES)`):
    a default is the dispatcher's to fill. At b8db2ee there were 21 such calls (and eleven
    booleans defaulted to false inside `bool_arg`)."""
    defaulted = {name for schema in CATALOG.values() for name in _defaults(schema)}
    defaulted |= set(_defaults(CATALOG["herdr_prompt"]["properties"]["wait"]))
    found = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            for argument in node.args[:-1]:
                if isinstance(argument, ast.Constant) and argument.value in defaulted:
                    found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    assert not found, found


def test_bad_types_are_the_dispatchers_to_refuse() -> None:
    refused: list[tuple[str, dict[str, Any]]] = [
        ("herdr_git", {"root": "/r", "action": "push"}),
        ("herdr_git", {"root": "/r", "action": "log", "max_count": True}),
        ("herdr_fs_read", {"path": "a", "max_bytes": "16"}),
        ("herdr_exec_read", {"session_id": "s", "stdout_offset": 1.5}),
        ("herdr_fs_edit", {"path": "a", "old_string": "", "new_string": "y"}),
    ]
    for tool, arguments in refused:
        with pytest.raises(ToolError) as caught:
            prepared(tool, arguments)
        assert (caught.value.code, caught.value.details["tool"]) == ("invalid_arguments", tool)
    with pytest.raises(ToolError) as caught:
        prepared("herdr_nothing", {})
    assert caught.value.code == "unknown_tool"


# --- Bounds ------------------------------------------------------------------------------------


def test_the_bounds_are_exact() -> None:
    limits = ArgumentLimits(max_depth=4, max_values=10, max_text_bytes=8)
    check_limits({"a": {"b": {"c": {}}}}, limits)  # four objects inside one another
    check_limits({"k": [1, 2, 3, 4, 5, 6, 7, 8]}, limits)  # ten values: object, list, eight items
    check_limits({"abc": "défg"}, limits)  # 3 + 5 bytes (é is two)
    over: list[tuple[dict[str, Any], str]] = [
        ({"a": {"b": {"c": {"d": {}}}}}, "arguments_too_deep"),
        ({"a": [[[[]]]]}, "arguments_too_deep"),
        ({"k": [1, 2, 3, 4, 5, 6, 7, 8, 9]}, "arguments_too_many_values"),
        ({"a": None, "b": [None] * 7, "c": None}, "arguments_too_many_values"),
        ({"abc": "défgh"}, "arguments_too_large"),
        ({"abcdefghi": ""}, "arguments_too_large"),
    ]
    for arguments, code in over:
        with pytest.raises(ToolError) as caught:
            check_limits(arguments, limits)
        assert caught.value.code == code, arguments
        assert (
            caught.value.details["limit"]
            == {
                "arguments_too_deep": 4,
                "arguments_too_many_values": 10,
                "arguments_too_large": 8,
            }[code]
        )


def test_a_million_values_are_refused_without_walking_them() -> None:
    started = time.perf_counter()
    with pytest.raises(ToolError) as caught:
        check_limits({"x": [0] * 1_000_000})
    assert caught.value.code == "arguments_too_many_values"
    # The list is refused by its length, not visited (a visit of 10^6 values takes ~0.5 s).
    assert time.perf_counter() - started < DEADLINE_S


@pytest.fixture
def dispatcher(tmp_path: Path) -> Iterator[tuple[ToolDispatcher, Path]]:
    config_dir = tmp_path / "config"
    services = Services.create(RuntimeConfig(config_dir=config_dir, herdr_socket=tmp_path / "herdr.sock"))
    tool_dispatcher = ToolDispatcher(services)
    try:
        yield tool_dispatcher, config_dir
    finally:
        asyncio.run(services.sessions.shutdown())
        tool_dispatcher.audit.close()
        services.state.close()


def _call(dispatcher: ToolDispatcher, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        result = await dispatcher.call(name, arguments)
        payload = result["structuredContent"]
        assert payload is not None
        # The answer encodes as JSON like any other (no RecursionError on the way out either).
        json.dumps(payload)
        return dict(payload)

    return asyncio.run(run())


def _records(config_dir: Path, dispatcher: ToolDispatcher) -> list[dict[str, Any]]:
    assert dispatcher.audit.flush(timeout=DEADLINE_S)
    lines = (config_dir / "audit.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


DEEP_CASES = [
    pytest.param("herdr_inspect", {"workspace": deep(5000)}, id="deep-value-where-a-string-goes"),
    pytest.param("herdr_inspect", {"extra": deep(5000)}, id="deep-unknown-argument"),
    pytest.param(
        "herdr_call", {"method": "herdr_mcp.skill.list", "params": {"x": deep(5000)}}, id="deep-params"
    ),
    pytest.param("herdr_call", {"method": "pane.read", "params": {"x": deep(900)}}, id="deep-native-params"),
    pytest.param(
        "herdr_exec",
        {"workspace": "w1", "command": "true", "x": deep(ARGUMENT_LIMITS.max_depth)},
        id="one-level-over",
    ),
]


@pytest.mark.parametrize(("tool", "arguments"), DEEP_CASES)
def test_deep_arguments_get_a_tool_error_and_an_audit_record(
    dispatcher: tuple[ToolDispatcher, Path], tool: str, arguments: dict[str, Any]
) -> None:
    tool_dispatcher, config_dir = dispatcher
    error = _call(tool_dispatcher, tool, arguments)["error"]
    assert error == {
        "code": "arguments_too_deep",
        "message": f"the arguments nest objects and arrays more than {ARGUMENT_LIMITS.max_depth} deep",
        "limit": ARGUMENT_LIMITS.max_depth,
    }
    [record] = _records(config_dir, tool_dispatcher)
    assert (record["tool"], record["outcome"], record["args_sha256"]) == (tool, "arguments_too_deep", None)


def test_arguments_at_the_depth_bound_reach_the_schema(dispatcher: tuple[ToolDispatcher, Path]) -> None:
    tool_dispatcher, _ = dispatcher
    # arguments (1) > params (2) > 30 objects: exactly 32 levels, so the method's schema answers.
    nested = {"method": "herdr_mcp.skill.list", "params": {"x": deep(ARGUMENT_LIMITS.max_depth - 3, {})}}
    error = _call(tool_dispatcher, "herdr_call", nested)["error"]
    assert error["code"] == "invalid_params"
    assert "Additional properties are not allowed ('x' was unexpected)" in error["message"]


def test_wide_and_large_arguments_are_refused(dispatcher: tuple[ToolDispatcher, Path]) -> None:
    tool_dispatcher, config_dir = dispatcher
    wide = _call(
        tool_dispatcher, "herdr_call", {"method": "pane.read", "params": {"keys": list(range(200_000))}}
    )
    assert (wide["error"]["code"], wide["error"]["limit"]) == ("arguments_too_many_values", 10_000)
    large = _call(
        tool_dispatcher,
        "herdr_fs_write",
        {"path": "a", "content": "é" * (ARGUMENT_LIMITS.max_text_bytes // 2 + 1)},
    )
    assert (large["error"]["code"], large["error"]["limit"]) == ("arguments_too_large", 16 << 20)
    outcomes = [record["outcome"] for record in _records(config_dir, tool_dispatcher)]
    assert outcomes == ["arguments_too_many_values", "arguments_too_large"]


def test_a_valid_call_is_answered_as_before(dispatcher: tuple[ToolDispatcher, Path]) -> None:
    tool_dispatcher, config_dir = dispatcher
    answer = _call(tool_dispatcher, "herdr_skill", {})
    assert "guide" in answer and "native_methods" not in answer
    listed = _call(tool_dispatcher, "herdr_call", {"method": "herdr_mcp.skill.list"})
    assert listed["method"] == "herdr_mcp.skill.list" and listed["result"]["modules"]
    [first, second] = _records(config_dir, tool_dispatcher)
    assert first["outcome"] == second["outcome"] == "ok"
    assert first["args_sha256"] is not None  # the digest of what was given: `{}`, no defaults


def test_a_validators_message_never_echoes_a_huge_value(dispatcher: tuple[ToolDispatcher, Path]) -> None:
    tool_dispatcher, _ = dispatcher
    error = _call(tool_dispatcher, "herdr_inspect", {"workspace": "w" * (4 << 20)})["error"]
    assert error["code"] == "invalid_arguments"
    assert error["message"].startswith("workspace: 'wwww")
    assert error["message"].endswith(
        f"({(4 << 20) + 2 + len(' is too long') - MAX_PROBLEM_CHARS} more characters)"
    )
    assert len(error["message"]) < MAX_PROBLEM_CHARS + 100


def test_unique_items_is_checked_in_linear_time(dispatcher: tuple[ToolDispatcher, Path]) -> None:
    tool_dispatcher, _ = dispatcher
    until = [{"n": index} for index in range(4_000)]  # ~8,000 values
    started = time.perf_counter()
    error = _call(tool_dispatcher, "herdr_prompt", {"target": "a", "text": "b", "wait": {"until": until}})[
        "error"
    ]
    elapsed = time.perf_counter() - started
    assert error["code"] == "invalid_arguments"
    # jsonschema's own check took 23 s for 3,000 such objects (quadratic): ~40 s for these.
    assert elapsed < DEADLINE_S, elapsed


@pytest.mark.parametrize(
    "items",
    [
        [1, 1.0],
        [1, True],
        [0, False],
        [None, False],
        ["1", 1],
        [{"a": 1}, {"a": 1.0}],
        [{"a": 1}, {"a": True}],
        [{"a": [1, {"b": None}]}, {"a": [1, {"b": None}]}],
        [[1, 2], [2, 1]],
        [{"a": 1, "b": 2}, {"b": 2, "a": 1}],
        [[], {}],
        [[[]], [[]]],
        ["idle", "done", "idle"],
    ],
)
def test_unique_items_agrees_with_jsonschemas_own(items: list[Any]) -> None:
    schema = {"type": "array", "uniqueItems": True}
    assert validator_for(schema).is_valid(items) == Draft202012Validator(schema).is_valid(items)


# --- The plain check: the validator skipped only where it would accept ----------------------


def _value_for(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values around what `schema` admits: the right type near its bounds, and wrong types."""
    near: list[st.SearchStrategy[Any]] = [
        st.none(),
        st.booleans(),
        st.floats(allow_nan=False, allow_infinity=False, min_value=-10, max_value=10),
        st.lists(st.integers(), max_size=2),
        st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
    ]
    low = schema.get("minimum", -3)
    high = schema.get("maximum", 300)
    near.append(st.integers(min_value=low - 2, max_value=min(high + 2, low + 400)))
    near.append(st.sampled_from([high, high + 1, 2**63]))
    near.append(st.text(max_size=int(schema.get("maxLength", 8)) + 2))
    if "enum" in schema:
        near.append(st.sampled_from(schema["enum"]))
    if schema.get("type") == "integer":
        near.append(st.integers(min_value=low, max_value=min(high, low + 100)).map(float))
    return st.one_of(near)


@st.composite
def _arguments(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    name = draw(st.sampled_from(sorted(CATALOG)))
    schema = CATALOG[name]
    properties: dict[str, Any] = schema.get("properties", {})
    arguments = dict(MINIMAL[name])
    for key in draw(st.lists(st.sampled_from(sorted(properties) or ["x"]), max_size=4)):
        if key in properties:
            arguments[key] = draw(_value_for(properties[key]))
    if draw(st.booleans()) and arguments:
        del arguments[draw(st.sampled_from(sorted(arguments)))]
    if draw(st.integers(0, 9)) == 0:
        arguments["unexpected"] = 1
    return name, arguments


PLAIN_CHECKS = {name: plain_check(schema) for name, schema in CATALOG.items()}
VALIDATORS = {name: Draft202012Validator(schema) for name, schema in CATALOG.items()}


@settings(max_examples=1500, deadline=None)
@given(_arguments())
def test_the_plain_check_admits_only_what_the_validator_admits(case: tuple[str, dict[str, Any]]) -> None:
    name, arguments = case
    check = PLAIN_CHECKS[name]
    if check is not None and check(arguments):
        assert VALIDATORS[name].is_valid(arguments), (name, arguments)


def test_ordinary_arguments_skip_the_validator_and_are_prepared_as_before() -> None:
    # Every tool's schema has a plain check, and its minimal arguments pass it; a property with
    # more than plain keywords (herdr_prompt's wait, herdr_call's params) goes to the validator.
    plain = {name for name, schema in CATALOG.items() if plain_check(schema) is not None}
    assert plain == set(CATALOG)
    prompt, call = plain_check(CATALOG["herdr_prompt"]), plain_check(CATALOG["herdr_call"])
    assert prompt is not None and not prompt({**MINIMAL["herdr_prompt"], "wait": {"timeout_ms": 10}})
    assert call is not None and not call({**MINIMAL["herdr_call"], "params": {}})
    tools = ToolArguments(load_catalog())
    by_validator = ToolArguments(load_catalog())
    by_validator._plain = dict.fromkeys(by_validator._plain)  # the validator for every call
    for name in sorted(plain):
        check = plain_check(CATALOG[name])
        assert check is not None and check(MINIMAL[name]), name
        assert tools.prepare(name, MINIMAL[name]) == by_validator.prepare(name, MINIMAL[name])
    read = {"path": "/r/a.txt", "start_line": 3, "end_line": 9, "max_bytes": 8192}
    assert plain_check(CATALOG["herdr_fs_read"]) is not None
    assert tools.prepare("herdr_fs_read", read) == {**read}
    # What the plain check leaves to the validator is refused in the validator's words.
    for arguments in ({"path": ""}, {"path": "a", "max_bytes": 0}, {"path": "a", "start_line": True}):
        with pytest.raises(ToolError) as refused:
            tools.prepare("herdr_fs_read", arguments)
        with pytest.raises(ToolError) as expected:
            by_validator.prepare("herdr_fs_read", arguments)
        assert refused.value.to_dict() == expected.value.to_dict()


# --- Over a real transport -----------------------------------------------------------------


def test_over_http_a_deep_call_is_a_tool_error_and_the_next_call_is_answered(tmp_path: Path) -> None:
    async def body() -> tuple[dict[str, Any], dict[str, Any]]:
        async with (
            in_process_runtime(tmp_path / "herdr.sock", tmp_path / "config") as runtime,
            runtime.client() as client,
        ):
            refused = await call_tool(client, "herdr_inspect", {"extra": deep(40)})
            return refused, await call_tool(client, "herdr_skill", {})

    refused, answered = run(body(), timeout=DEADLINE_S)
    assert refused["error"]["code"] == "arguments_too_deep"
    assert "guide" in answered
