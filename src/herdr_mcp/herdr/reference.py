"""Conformance reference of real Herdr's socket protocol, per protocol number.

The data are packaged under `herdr_mcp/herdr/reference/` (hatch force-include of
`manifests/herdr/`; in a source checkout `src/herdr_mcp/herdr/reference` is a symlink to it, as
`herdr_mcp/contract/catalogs` is): Herdr's published JSON schema of protocol 20, the protocol-22
document reconstructed by `scripts/herdr-reference-22`, and `methods.json` (each wire method's
class, summary and result `type` tags, lifecycle replay, error codes). `manifests/herdr/README.md`
names the evidence of each.

A `ProtocolReference` checks whole wire lines: a request line (`request_problems`), an answer to
a method (`response_problems`) and a pushed event line (`event_problems`); each returns a list of
human-readable problems, empty when the line is what real Herdr sends or accepts. Requests are
checked exactly as Herdr accepts them (unknown params are ignored by Herdr, so allowed). Answers and
events are checked, with `strict=True`, against what Herdr's serializer guarantees beyond the
schema: no property the schema does not declare, and no `null` for an optional property (Herdr
omits `None` fields: `skip_serializing_if = "Option::is_none"`), except the two results that do
carry `null` (`pong.capabilities`, `output_matched.matched_line`).

Loading is lazy and cached: `load(p)` reads its files once; validators are compiled on first use.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from herdr_mcp.errors import InternalFault
from herdr_mcp.strict_json import PACKAGED_LIMITS, loads_bounded

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

METHOD_CLASSES: tuple[str, ...] = ("read", "mutating", "streaming", "client_ui", "server_control", "install")
UNCLASSIFIED = "unclassified"
"""The class `from_schema_document` gives a method the reference it classifies from does not know."""

SUPPORTED_PROTOCOLS: tuple[int, ...] = (20, 22)

SECTIONS: tuple[str, ...] = ("request", "success_response", "error_response", "event", "subscription_event")
DIALECT = "https://json-schema.org/draft/2020-12/schema"

# (result type, property): optional fields Herdr serializes as null when unset (no
# skip_serializing_if in src/api/schema/response.rs at protocol 20).
NULL_SERIALIZED: frozenset[tuple[str, str]] = frozenset(
    {("pong", "capabilities"), ("output_matched", "matched_line")}
)

_MAX_PROBLEMS = 20


@dataclass(frozen=True)
class MethodReference:
    """One wire method of one protocol."""

    name: str
    method_class: str
    summary: str
    params_schema: Mapping[str, Any]
    """Self-contained JSON Schema (Draft 2020-12, its own `$defs`) of the params Herdr accepts."""
    result_types: tuple[str, ...]
    """The `type` tags of the results Herdr answers it with; empty: not known (any result type)."""
    in_published_schema: bool
    notes: str = ""


@dataclass(frozen=True)
class ProtocolReference:
    """What real Herdr speaks at one protocol number."""

    protocol: int
    herdr_version: str
    origin: str
    methods: Mapping[str, MethodReference]
    lifecycle_replay: bool
    error_codes: tuple[str, ...]
    lifecycle_events: tuple[str, ...]
    subscription_types: tuple[str, ...]
    document: Mapping[str, Any] = field(repr=False, compare=False)
    """The schema document in the published layout (`schemas` -> five sections)."""
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False, hash=False)

    # -- validation -----------------------------------------------------------------------------

    def request_problems(self, message: Mapping[str, Any]) -> list[str]:
        """Problems of one request line object `{"id", "method", "params"}`; [] when Herdr takes it."""
        if not isinstance(message, Mapping):
            return [f"a request line is a JSON object, not {type(message).__name__}"]
        problems = []
        if not isinstance(message.get("id"), str):
            problems.append("id: a string is required")
        method = message.get("method")
        if not isinstance(method, str):
            return [*problems, "method: a string is required"]
        reference = self.methods.get(method)
        if reference is None:
            return [*problems, f"method: {method!r} is not a method of protocol {self.protocol}"]
        if "params" not in message:
            return [*problems, "params: required (Herdr answers invalid_request without it)"]
        validator = self._validator(("params", method), lambda: dict(reference.params_schema))
        return problems + _errors(validator, message["params"], "params")

    def response_problems(self, method: str, message: Mapping[str, Any], *, strict: bool = True) -> list[str]:
        """Problems of one answer line `{"id", "result"}` or `{"id", "error"}` to `method`."""
        if not isinstance(message, Mapping):
            return [f"an answer line is a JSON object, not {type(message).__name__}"]
        reference = self.methods.get(method)
        if reference is None:
            return [f"{method!r} is not a method of protocol {self.protocol}"]
        problems = []
        if not isinstance(message.get("id"), str):
            problems.append("id: a string is required")
        has_result, has_error = "result" in message, "error" in message
        if has_result == has_error:
            return [*problems, "exactly one of result and error is required"]
        if strict:
            extra = sorted(set(message) - {"id", "result" if has_result else "error"})
            if extra:
                problems.append(f"undeclared top-level properties {extra}")
        if has_error:
            problems += self._errors_at(("error_response", "ErrorBody"), message["error"], "error", strict)
            code = message["error"].get("code") if isinstance(message["error"], Mapping) else None
            if strict and isinstance(code, str) and code not in self.error_codes:
                problems.append(
                    f"error.code: {code!r} is not a code Herdr's protocol-{self.protocol} source sends"
                )
            return problems
        result = message["result"]
        if not isinstance(result, Mapping) or not isinstance(result.get("type"), str):
            return [*problems, "result: an object with a string type is required"]
        kind = result["type"]
        pointer = self._result_pointers().get(kind)
        if pointer is None:
            return [*problems, f"result.type: {kind!r} is not a result type of protocol {self.protocol}"]
        if reference.result_types and kind not in reference.result_types:
            problems.append(f"result.type: {method} answers {list(reference.result_types)}, not {kind!r}")
        return problems + self._errors_at(("pointer", pointer), result, "result", strict)

    def event_problems(self, message: Mapping[str, Any], *, strict: bool = True) -> list[str]:
        """Problems of one pushed event line `{"event", "data"}` (lifecycle or subscription event)."""
        if not isinstance(message, Mapping):
            return [f"an event line is a JSON object, not {type(message).__name__}"]
        event = message.get("event")
        if not isinstance(event, str):
            return ["event: a string is required"]
        if "data" not in message:
            return ["data: required"]
        problems = []
        if strict:
            extra = sorted(set(message) - {"event", "data"})
            if extra:
                problems.append(f"undeclared top-level properties {extra}")
        data = message["data"]
        pointers = self._event_pointers()
        pointer = pointers.get(event)
        if pointer is None:
            return [*problems, f"event: {event!r} is not an event of protocol {self.protocol}"]
        if "." not in event and strict and isinstance(data, Mapping) and data.get("type") != event:
            problems.append(f"data.type: {data.get('type')!r} for event {event!r}")
        return problems + self._errors_at(("pointer", pointer), data, "data", strict)

    def params_json(self, method: str) -> dict[str, Any]:
        """`method`'s params schema as plain JSON (dicts and lists), made once per method: shared
        by every answer that shows it (herdr_methods), so a caller must not change it."""
        key = ("params_json", method)
        cached = self._cache.get(key)
        if cached is None:
            cached = _plain_json(self.methods[method].params_schema)
            self._cache[key] = cached
        return cast(dict[str, Any], cached)

    # -- internals ------------------------------------------------------------------------------

    def _validator(self, key: Any, schema: Any) -> Draft202012Validator:
        cached = self._cache.get(key)
        if cached is None:
            # jsonschema is imported with the first validator: a process that never checks a
            # line against the reference (the runtime serving) does not load it for this.
            from jsonschema import Draft202012Validator

            cached = Draft202012Validator(schema())
            self._cache[key] = cached
        return cached

    def _errors_at(self, where: tuple[str, str], instance: Any, label: str, strict: bool) -> list[str]:
        kind, target = where
        pointer = f"#/schemas/{kind}/$defs/{target}" if kind != "pointer" else target

        def schema() -> dict[str, Any]:
            sections = self._strict_sections() if strict else self.document["schemas"]
            return {"$schema": DIALECT, "schemas": sections, "$ref": pointer}

        return _errors(self._validator(("at", pointer, strict), schema), instance, label)

    def _strict_sections(self) -> Mapping[str, Any]:
        sections = self._cache.get("strict")
        if sections is None:
            sections = {
                name: (_strict(body) if name != "request" else body)
                for name, body in copy.deepcopy(dict(self.document["schemas"])).items()
            }
            self._cache["strict"] = sections
        return sections

    def _result_pointers(self) -> Mapping[str, str]:
        """result type tag -> JSON pointer of its ResponseResult variant."""
        pointers = self._cache.get("results")
        if pointers is None:
            pointers = _variant_pointers(self.document, "success_response", "result", "type")
            self._cache["results"] = pointers
        return pointers

    def _event_pointers(self) -> Mapping[str, str]:
        """event name -> JSON pointer of the schema of its data."""
        pointers = self._cache.get("events")
        if pointers is None:
            pointers = dict(_variant_pointers(self.document, "event", "data", "type"))
            # Subscription data is untagged (serde untagged); its variants follow the kinds' order.
            section = self.document["schemas"]["subscription_event"]
            kinds = _resolve(self.document, section["properties"]["event"]).get("enum", [])
            data_pointer = section["properties"]["data"]["$ref"]
            union = _resolve(self.document, section["properties"]["data"])
            key = "oneOf" if "oneOf" in union else "anyOf"
            branches = union.get(key, [])
            if len(branches) == len(kinds):
                for index, kind in enumerate(kinds):
                    pointers[kind] = f"{data_pointer}/{key}/{index}"
            else:
                pointers.update({kind: data_pointer for kind in kinds})
            self._cache["events"] = pointers
        return pointers


def _errors(validator: Draft202012Validator, instance: Any, label: str) -> list[str]:
    found = []
    for error in sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path]):
        path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path)
        found.append(f"{label}{path}: {error.message}")
        if len(found) == _MAX_PROBLEMS:
            found.append("...")
            break
    return found


# -- schema walking -------------------------------------------------------------------------------

_MAP_KEYS = ("properties", "$defs", "patternProperties", "dependentSchemas")
_LIST_KEYS = ("anyOf", "oneOf", "allOf", "prefixItems")
_ONE_KEYS = (
    "items",
    "additionalProperties",
    "unevaluatedProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
)


def _subschemas(node: Mapping[str, Any]) -> Iterator[Any]:
    for key, value in node.items():
        if key in _MAP_KEYS and isinstance(value, Mapping):
            yield from value.values()
        elif key in _LIST_KEYS and isinstance(value, list):
            yield from value
        elif key in _ONE_KEYS and isinstance(value, Mapping):
            yield value


def _strict(node: Any) -> Any:
    """A copy of a section with Herdr's serializer guarantees: objects that list properties get
    `additionalProperties: false`, optional properties may not be null (but NULL_SERIALIZED)."""
    if not isinstance(node, dict):
        return node
    for key, value in node.items():
        if key in _MAP_KEYS and isinstance(value, dict):
            for name in value:
                value[name] = _strict(value[name])
        elif key in _LIST_KEYS and isinstance(value, list):
            node[key] = [_strict(item) for item in value]
        elif key in _ONE_KEYS and isinstance(value, dict):
            node[key] = _strict(value)
    properties = node.get("properties")
    if isinstance(properties, dict):
        node.setdefault("additionalProperties", False)
        required = set(node.get("required", []))
        tag = properties.get("type", {}).get("const") if isinstance(properties.get("type"), dict) else None
        for name, schema in list(properties.items()):
            if name in required or (tag, name) in NULL_SERIALIZED:
                continue
            properties[name] = {"allOf": [schema], "not": {"type": "null"}}
    return node


def _resolve(document: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    seen = 0
    while isinstance(node, Mapping) and "$ref" in node and seen < 32:
        target: Any = document
        for part in str(node["$ref"]).removeprefix("#/").split("/"):
            target = target[part]
        node = target
        seen += 1
    return node


def _variant_pointers(document: Mapping[str, Any], section: str, prop: str, tag: str) -> dict[str, str]:
    """tag const -> pointer of each oneOf branch of the union a section's `prop` refers to."""
    body = document["schemas"][section]
    ref = body["properties"][prop]["$ref"]
    union = _resolve(document, body["properties"][prop])
    pointers = {}
    for index, branch in enumerate(union.get("oneOf", [])):
        resolved = _resolve(document, branch)
        const = resolved.get("properties", {}).get(tag, {}).get("const")
        if isinstance(const, str):
            pointers[const] = f"{ref}/oneOf/{index}"
    return pointers


def _self_contained(document: Mapping[str, Any], pointer: str) -> dict[str, Any]:
    """The request `$defs` entry at `pointer` inlined at the root, with every `$defs` entry it
    reaches under its own `$defs` (refs rewritten to `#/$defs/<Name>`)."""
    prefix = "#/schemas/request/$defs/"
    defs = document["schemas"]["request"]["$defs"]
    pending: list[str] = []

    def rewrite(node: Any) -> Any:
        if isinstance(node, list):
            return [rewrite(item) for item in node]
        if not isinstance(node, Mapping):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and value.startswith(prefix):
                pending.append(value.removeprefix(prefix))
                out[key] = "#/$defs/" + value.removeprefix(prefix)
            elif key in _MAP_KEYS and isinstance(value, Mapping):
                out[key] = {name: rewrite(sub) for name, sub in value.items()}
            elif key in _LIST_KEYS or key in _ONE_KEYS:
                out[key] = rewrite(value)
            else:
                out[key] = copy.deepcopy(value)
        return out

    root = rewrite(defs[pointer.removeprefix(prefix)])
    reached: dict[str, Any] = {}
    while pending:
        name = pending.pop()
        if name not in reached:
            reached[name] = rewrite(defs[name])
    root.pop("$schema", None)
    schema: dict[str, Any] = {"$schema": DIALECT, **root}
    if reached:
        schema["$defs"] = dict(sorted(reached.items()))
    return schema


# -- building -------------------------------------------------------------------------------------


def _check_layout(document: Any) -> None:
    if not isinstance(document, Mapping):
        raise ValueError("a Herdr schema document is a JSON object")
    if not isinstance(document.get("protocol"), int):
        raise ValueError("not a Herdr schema document: no integer 'protocol'")
    schemas = document.get("schemas")
    if not isinstance(schemas, Mapping):
        raise ValueError("not a Herdr schema document: no 'schemas' object")
    missing = [name for name in SECTIONS if not isinstance(schemas.get(name), Mapping)]
    if missing:
        raise ValueError(f"not a Herdr schema document: 'schemas' lacks {missing}")
    for name in SECTIONS:
        if not isinstance(schemas[name].get("$defs"), Mapping) or not isinstance(
            schemas[name].get("properties"), Mapping
        ):
            raise ValueError(f"not a Herdr schema document: schemas.{name} has no '$defs' and 'properties'")
    branches = schemas["request"].get("oneOf")
    if not isinstance(branches, list) or not branches:
        raise ValueError("not a Herdr schema document: schemas.request has no 'oneOf' of methods")
    for index, branch in enumerate(branches):
        properties = branch.get("properties") if isinstance(branch, Mapping) else None
        method = properties.get("method") if isinstance(properties, Mapping) else None
        params = properties.get("params") if isinstance(properties, Mapping) else None
        if not (
            isinstance(method, Mapping)
            and isinstance(method.get("const"), str)
            and isinstance(params, Mapping)
            and str(params.get("$ref", "")).startswith("#/schemas/request/$defs/")
        ):
            raise ValueError(
                f"not a Herdr schema document: schemas.request.oneOf[{index}] is not "
                "{method: {const}, params: {$ref: #/schemas/request/$defs/...}}"
            )
    for section, prop in (("success_response", "result"), ("event", "data"), ("subscription_event", "data")):
        ref = schemas[section]["properties"].get(prop, {})
        if not isinstance(ref, Mapping) or "$ref" not in ref:
            raise ValueError(
                f"not a Herdr schema document: schemas.{section}.properties.{prop} is not a $ref"
            )


def _subscription_types(document: Mapping[str, Any]) -> tuple[str, ...]:
    branch = next(
        b
        for b in document["schemas"]["request"]["oneOf"]
        if b["properties"]["method"]["const"] == "events.subscribe"
    )
    params = _resolve(document, branch["properties"]["params"])
    items = params.get("properties", {}).get("subscriptions", {}).get("items", {})
    found: list[str] = []

    def walk(node: Any) -> None:
        node = _resolve(document, node)
        const = node.get("properties", {}).get("type", {}).get("const")
        if isinstance(const, str):
            found.append(const)
            return
        for key in ("oneOf", "anyOf"):
            for sub in node.get(key, []):
                walk(sub)

    walk(items)
    return tuple(dict.fromkeys(found))


def _build(
    document: Mapping[str, Any],
    *,
    herdr_version: str,
    origin: str,
    lifecycle_replay: bool,
    error_codes: tuple[str, ...],
    facts: Mapping[str, Mapping[str, Any]],
    extra_methods: Mapping[str, Mapping[str, Any]],
) -> ProtocolReference:
    methods: dict[str, MethodReference] = {}
    for branch in document["schemas"]["request"]["oneOf"]:
        name = branch["properties"]["method"]["const"]
        known = facts.get(name, {})
        methods[name] = MethodReference(
            name=name,
            method_class=str(known.get("method_class", UNCLASSIFIED)),
            summary=str(known.get("summary", "")),
            params_schema=MappingProxyType(_self_contained(document, branch["properties"]["params"]["$ref"])),
            result_types=tuple(known.get("result_types", ())),
            in_published_schema=True,
            notes=str(known.get("notes", "")),
        )
    for name, known in extra_methods.items():
        methods[name] = MethodReference(
            name=name,
            method_class=str(known["method_class"]),
            summary=str(known["summary"]),
            params_schema=MappingProxyType(dict(known["params_schema"])),
            result_types=tuple(known["result_types"]),
            in_published_schema=False,
            notes=str(known.get("notes", "")),
        )
    event_kinds = _resolve(document, document["schemas"]["event"]["properties"]["event"]).get("enum", [])
    return ProtocolReference(
        protocol=int(document["protocol"]),
        herdr_version=herdr_version,
        origin=origin,
        methods=MappingProxyType(methods),
        lifecycle_replay=lifecycle_replay,
        error_codes=error_codes,
        lifecycle_events=tuple(event_kinds),
        subscription_types=_subscription_types(document),
        document=document,
    )


def _read(name: str) -> Any:
    path = resources.files(__package__) / "reference" / name
    try:
        return loads_bounded(path.read_bytes(), PACKAGED_LIMITS)
    except ValueError as exc:  # a damaged install: not UTF-8, not JSON, or past the bounds
        raise InternalFault(
            "herdr_reference_damaged",
            f"the packaged Herdr reference {name} is unreadable ({exc}); reinstall herdr-mcp",
        ) from None


@cache
def _facts() -> Mapping[str, Any]:
    facts = _read("methods.json")
    if not isinstance(facts, dict) or not isinstance(facts.get("protocols"), dict):
        raise ValueError("herdr reference methods.json is malformed")
    return facts


@cache
def load(protocol: int) -> ProtocolReference:
    """The reference of `protocol` (cached); ValueError for a protocol with no reference."""
    entry = _facts()["protocols"].get(str(protocol))
    if protocol not in SUPPORTED_PROTOCOLS or entry is None:
        raise ValueError(
            f"no Herdr protocol reference for protocol {protocol} (have {list(SUPPORTED_PROTOCOLS)})"
        )
    document = _read(entry["schema"])
    _check_layout(document)
    if document["protocol"] != protocol:
        raise ValueError(f"{entry['schema']} declares protocol {document['protocol']}, not {protocol}")
    methods = entry["methods"]
    return _build(
        document,
        herdr_version=entry["herdr_version"],
        origin=entry["origin"],
        lifecycle_replay=bool(entry["lifecycle_replay"]),
        error_codes=tuple(entry["error_codes"]),
        facts=methods,
        extra_methods={name: info for name, info in methods.items() if not info["in_published_schema"]},
    )


def nearest(protocol: int) -> tuple[ProtocolReference, bool]:
    """The reference of `protocol` and True, else the nearest lower one and False (the lowest when
    `protocol` is below all)."""
    if protocol in SUPPORTED_PROTOCOLS:
        return load(protocol), True
    lower = [p for p in SUPPORTED_PROTOCOLS if p < protocol]
    return load(max(lower) if lower else min(SUPPORTED_PROTOCOLS)), False


def from_schema_document(
    document: Mapping[str, Any],
    *,
    classes_from: ProtocolReference,
    origin: str = "herdr api schema --json",
) -> ProtocolReference:
    """A reference built from a schema document in the published layout (what `herdr api schema
    --json` prints). Classes, summaries, result types, lifecycle replay and error codes come from
    `classes_from` for the methods it knows; any other method is `unclassified` with no known
    result types. Methods outside the schema (pane.graphics.stream) are not included.
    ValueError for a document not in that layout."""
    _check_layout(document)
    facts = {
        name: {
            "method_class": method.method_class,
            "summary": method.summary,
            "result_types": method.result_types,
            "notes": method.notes,
        }
        for name, method in classes_from.methods.items()
    }
    same = document["protocol"] == classes_from.protocol
    return _build(
        copy.deepcopy(dict(document)),
        herdr_version=classes_from.herdr_version if same else "unknown",
        origin=origin,
        lifecycle_replay=classes_from.lifecycle_replay,
        error_codes=classes_from.error_codes,
        facts=facts,
        extra_methods={},
    )


def _plain_json(value: Any) -> Any:
    """A plain JSON copy (dicts, lists) of a value built from read-only mappings and tuples."""
    if isinstance(value, Mapping):
        return {str(key): _plain_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_json(item) for item in value]
    return value
