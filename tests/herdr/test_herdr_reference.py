"""The conformance reference of real Herdr's socket protocol (herdr_mcp.herdr.reference).

Its data are manifests/herdr/ (see the README there for the evidence); these tests pin what the
reference says and that its checks accept lines shaped as Herdr's source writes them and refuse
wrong ones. The examples are written from herdrdev/herdr@1c76079 src/api/schema/*.rs.
"""

from __future__ import annotations

import copy
import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from herdr_mcp.herdr import reference
from herdr_mcp.herdr.reference import METHOD_CLASSES, SUPPORTED_PROTOCOLS, from_schema_document, load, nearest
from herdr_mcp.runtime.native import RUNTIME_METHODS

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests" / "herdr"
FILES = ("README.md", "methods.json", "protocol-20.schema.json", "protocol-22.schema.json")

WORKSPACE = {
    "workspace_id": "w1",
    "number": 1,
    "label": "api",
    "focused": True,
    "pane_count": 1,
    "tab_count": 1,
    "active_tab_id": "w1:t1",
    "agent_status": "idle",
}
PANE = {
    "pane_id": "w1:p1",
    "terminal_id": "term-1",
    "workspace_id": "w1",
    "tab_id": "w1:t1",
    "focused": True,
    "agent_status": "working",
    "revision": 7,
    "cwd": "/src/api",
    "agent": "claude",
}
AGENT = {**PANE, "state_change_seq": 3, "name": "builder"}
READ = {
    "pane_id": "w1:p1",
    "workspace_id": "w1",
    "tab_id": "w1:t1",
    "source": "recent",
    "format": "text",
    "text": "$ make\n",
    "revision": 7,
    "truncated": False,
}


def _answer(result: dict[str, Any]) -> dict[str, Any]:
    return {"id": "req_1", "result": result}


@pytest.mark.parametrize("name", FILES)
def test_the_packaged_files_are_the_manifests(name: str) -> None:
    packaged = resources.files("herdr_mcp.herdr") / "reference" / name
    assert packaged.read_bytes() == (MANIFESTS / name).read_bytes()


#: sha256 of herdrdev/herdr@1c76079f8b9494ec1c971c80fda34c116ecb89dd:docs/next/api/herdr-api.schema.json
#: (`git show <commit>:<path> | sha256sum`, read 2026-12-01).
PUBLISHED_SCHEMA_20_SHA256 = "c48f1f54ee0150ca27e11fd44455fe94aeadb20fdf4e4a62393ed822a4e5b150"


def test_the_vendored_schema_is_the_published_one_byte_for_byte() -> None:
    vendored = (MANIFESTS / "protocol-20.schema.json").read_bytes()
    assert hashlib.sha256(vendored).hexdigest() == PUBLISHED_SCHEMA_20_SHA256


@pytest.mark.parametrize(("protocol", "count", "version"), [(20, 92, "0.8.2"), (22, 103, "0.9.0")])
def test_every_wire_method_has_a_class(protocol: int, count: int, version: str) -> None:
    ref = load(protocol)
    assert (ref.protocol, ref.herdr_version, len(ref.methods)) == (protocol, version, count)
    for name, method in ref.methods.items():
        assert method.name == name
        assert method.method_class in METHOD_CLASSES, name
        assert method.summary, name
        assert method.result_types, name
        Draft202012Validator.check_schema(dict(method.params_schema))
        assert "#/schemas/" not in json.dumps(dict(method.params_schema)), name
    stream = ref.methods["pane.graphics.stream"]
    assert (stream.in_published_schema, stream.method_class) == (False, "streaming")
    assert stream.params_schema["required"] == ["pane_id"]
    assert sum(not m.in_published_schema for m in ref.methods.values()) == 1
    streaming = {n for n, m in ref.methods.items() if m.method_class == "streaming"}
    assert streaming == {
        "events.subscribe",
        "events.wait",
        "agent.wait",
        "pane.wait_for_output",
        "pane.graphics.stream",
    }
    assert {n for n, m in ref.methods.items() if m.method_class == "server_control"} == {
        n for n in ref.methods if n.startswith("server.")
    }


def test_lifecycle_replay_and_the_lists() -> None:
    old, new = load(20), load(22)
    assert (old.lifecycle_replay, new.lifecycle_replay) == (True, False)
    for ref in (old, new):
        assert {"pane_not_found", "agent_target_ambiguous", "empty_agent_prompt", "agent_not_ready"} <= set(
            ref.error_codes
        )
        assert {"agent_prompt_stalled", "invalid_key", "invalid_request", "timeout"} <= set(ref.error_codes)
        assert {"workspace_created", "pane_created", "pane_closed", "pane_exited"} <= set(
            ref.lifecycle_events
        )
        assert {"pane.agent_status_changed", "pane.output_matched", "pane.created"} <= set(
            ref.subscription_types
        )
    assert "connection_local_only" in new.error_codes
    assert set(old.error_codes) <= set(new.error_codes)


def test_protocol_22_keeps_every_protocol_20_method_and_the_shapes_herdr_mcp_uses() -> None:
    old, new = load(20), load(22)
    assert set(old.methods) <= set(new.methods)
    print("protocol 22 adds methods:", sorted(set(new.methods) - set(old.methods)))
    for name in sorted(RUNTIME_METHODS):  # the methods the runtime sends on its own
        before, after = old.methods[name].params_schema, new.methods[name].params_schema
        assert set(after.get("required", [])) == set(before.get("required", [])), name
        assert set(before.get("properties", {})) <= set(after.get("properties", {})), name
        added = sorted(set(after.get("properties", {})) - set(before.get("properties", {})))
        if added:
            print(f"protocol 22 adds optional params to {name}: {added}")
        assert set(old.methods[name].result_types) == set(new.methods[name].result_types), name


@pytest.mark.parametrize("protocol", SUPPORTED_PROTOCOLS)
def test_real_shaped_requests_pass_and_wrong_ones_do_not(protocol: int) -> None:
    ref = load(protocol)
    good = [
        {"id": "1", "method": "ping", "params": {}},
        {"id": "2", "method": "pane.read", "params": {"pane_id": "w1:p1", "source": "recent", "lines": 80}},
        {
            "id": "3",
            "method": "agent.prompt",
            "params": {"target": "w1:p1", "text": "go", "wait": {"timeout_ms": 1}},
        },
        {
            "id": "4",
            "method": "events.subscribe",
            "params": {"subscriptions": [{"type": "pane.agent_status_changed", "pane_id": "w1:p1"}]},
        },
        {"id": "5", "method": "pane.graphics.stream", "params": {"pane_id": "w1:p1", "z_index": -1}},
        # Herdr ignores params it does not know.
        {"id": "6", "method": "workspace.list", "params": {"verbose": True}},
    ]
    for message in good:
        assert ref.request_problems(message) == [], message
    assert ref.request_problems({"id": "1", "method": "pane.read", "params": {"source": "recent"}})
    assert ref.request_problems(
        {"id": "1", "method": "pane.read", "params": {"pane_id": "p", "source": "all"}}
    )
    assert ref.request_problems({"id": "1", "method": "agent.prompt", "params": {"target": "x"}})
    assert ref.request_problems({"id": "1", "method": "no.such", "params": {}})
    assert ref.request_problems({"id": "1", "method": "ping"})
    assert ref.request_problems({"id": 1, "method": "ping", "params": {}})
    assert ref.request_problems({"id": "1", "method": "pane.graphics.stream", "params": {"z_index": 1}})


@pytest.mark.parametrize("protocol", SUPPORTED_PROTOCOLS)
def test_real_shaped_answers_pass_and_wrong_ones_do_not(protocol: int) -> None:
    ref = load(protocol)
    good: dict[str, dict[str, Any]] = {
        "ping": {"type": "pong", "version": "0.8.2", "protocol": protocol, "capabilities": None},
        "workspace.list": {"type": "workspace_list", "workspaces": [WORKSPACE]},
        "pane.get": {"type": "pane_info", "pane": PANE},
        "pane.split": {"type": "pane_info", "pane": PANE},
        "pane.read": {"type": "pane_read", "read": READ},
        "agent.get": {"type": "agent_info", "agent": AGENT},
        "agent.prompt": {"type": "agent_prompted", "agent": AGENT},
        "events.subscribe": {"type": "subscription_started"},
        "pane.send_input": {"type": "ok"},
        "pane.wait_for_output": {
            "type": "output_matched",
            "pane_id": "w1:p1",
            "revision": 8,
            "matched_line": None,
            "read": READ,
        },
    }
    for method, result in good.items():
        assert ref.response_problems(method, _answer(result)) == [], method
    assert (
        ref.response_problems("pane.get", {"id": "2", "error": {"code": "pane_not_found", "message": "x"}})
        == []
    )

    # A missing required field.
    pane = {key: value for key, value in PANE.items() if key != "revision"}
    assert ref.response_problems("pane.get", _answer({"type": "pane_info", "pane": pane}))
    # An undeclared field: refused under strict only.
    wrong = _answer({"type": "pane_info", "pane": {**PANE, "kind": "claude"}})
    assert ref.response_problems("pane.get", wrong)
    assert ref.response_problems("pane.get", wrong, strict=False) == []
    # A null optional (Herdr omits None): refused under strict only.
    null_cwd = _answer({"type": "pane_info", "pane": {**PANE, "cwd": None}})
    assert ref.response_problems("pane.get", null_cwd)
    assert ref.response_problems("pane.get", null_cwd, strict=False) == []
    # The wrong result type for the method.
    assert ref.response_problems("agent.prompt", _answer({"type": "agent_info", "agent": AGENT}))
    assert ref.response_problems("pane.get", _answer({"type": "no_such", "pane": PANE}))
    # Envelope faults.
    assert ref.response_problems("ping", {"id": "1"})
    assert ref.response_problems(
        "ping", {"id": "1", "result": good["ping"], "error": {"code": "x", "message": "y"}}
    )
    assert ref.response_problems("pane.get", {"id": "2", "error": {"code": "pane_not_found"}})
    assert ref.response_problems("pane.get", {"id": "2", "error": {"code": "made_up", "message": "x"}})
    assert (
        ref.response_problems(
            "pane.get", {"id": "2", "error": {"code": "made_up", "message": "x"}}, strict=False
        )
        == []
    )


@pytest.mark.parametrize("protocol", SUPPORTED_PROTOCOLS)
def test_real_shaped_events_pass_and_wrong_ones_do_not(protocol: int) -> None:
    ref = load(protocol)
    good = [
        {"event": "workspace_created", "data": {"type": "workspace_created", "workspace": WORKSPACE}},
        {"event": "pane_closed", "data": {"type": "pane_closed", "pane_id": "w1:p2", "workspace_id": "w1"}},
        {
            "event": "pane.agent_status_changed",
            "data": {"pane_id": "w1:p1", "workspace_id": "w1", "agent_status": "idle", "agent": "claude"},
        },
        {
            "event": "pane.output_matched",
            "data": {"pane_id": "w1:p1", "matched_line": "ok", "read": READ},
        },
    ]
    for message in good:
        assert ref.event_problems(message) == [], message
    assert ref.event_problems({"event": "pane_closed", "data": {"type": "pane_closed", "pane_id": "w1:p2"}})
    assert ref.event_problems(
        {"event": "pane_closed", "data": {"type": "pane_exited", "pane_id": "p", "workspace_id": "w"}}
    )
    status = {"pane_id": "w1:p1", "workspace_id": "w1", "agent_status": "idle"}
    assert ref.event_problems({"event": "pane.agent_status_changed", "data": {**status, "agent": None}})
    assert (
        ref.event_problems(
            {"event": "pane.agent_status_changed", "data": {**status, "agent": None}}, strict=False
        )
        == []
    )
    assert ref.event_problems({"event": "pane.agent_status_changed", "data": {**status, "kind": "x"}})
    assert ref.event_problems({"event": "pane.agent_status_changed", "data": {"pane_id": "w1:p1"}})
    assert ref.event_problems({"event": "no_such_event", "data": {"type": "no_such_event"}})
    assert ref.event_problems({"event": "pane_closed"})


def test_from_schema_document_gives_the_published_methods_classified() -> None:
    old = load(20)
    document = json.loads((MANIFESTS / "protocol-20.schema.json").read_text(encoding="utf-8"))
    built = from_schema_document(document, classes_from=old)
    assert set(built.methods) == set(old.methods) - {"pane.graphics.stream"}
    for name, method in built.methods.items():
        assert (method.method_class, method.result_types) == (
            old.methods[name].method_class,
            old.methods[name].result_types,
        )
        assert dict(method.params_schema) == dict(old.methods[name].params_schema)
    assert (built.origin, built.lifecycle_replay, built.error_codes) == (
        "herdr api schema --json",
        old.lifecycle_replay,
        old.error_codes,
    )
    assert built.response_problems("pane.get", _answer({"type": "pane_info", "pane": PANE})) == []

    # A method the classifying reference does not know.
    extended = copy.deepcopy(document)
    branch = copy.deepcopy(extended["schemas"]["request"]["oneOf"][0])
    branch["properties"]["method"]["const"] = "pane.new_thing"
    extended["schemas"]["request"]["oneOf"].append(branch)
    method = from_schema_document(extended, classes_from=old).methods["pane.new_thing"]
    assert (method.method_class, method.result_types) == (reference.UNCLASSIFIED, ())


@pytest.mark.parametrize(
    "document",
    [[], {"protocol": 20}, {"protocol": 20, "schemas": {}}, {"protocol": "20", "schemas": {}}],
)
def test_from_schema_document_refuses_other_layouts(document: Any) -> None:
    with pytest.raises(ValueError, match="Herdr schema document"):
        from_schema_document(document, classes_from=load(20))


def test_a_request_oneof_branch_without_a_method_const_is_refused() -> None:
    document = json.loads((MANIFESTS / "protocol-20.schema.json").read_text(encoding="utf-8"))
    del document["schemas"]["request"]["oneOf"][3]["properties"]["method"]["const"]
    with pytest.raises(ValueError, match=r"oneOf\[3\]"):
        from_schema_document(document, classes_from=load(20))


def test_nearest_and_load() -> None:
    assert nearest(20) == (load(20), True)
    assert nearest(22) == (load(22), True)
    assert nearest(21) == (load(20), False)
    assert nearest(23) == (load(22), False)
    assert nearest(18) == (load(20), False)
    assert load(20) is load(20)
    with pytest.raises(ValueError, match="no Herdr protocol reference"):
        load(21)


@pytest.mark.parametrize("protocol", SUPPORTED_PROTOCOLS)
def test_subscription_data_variants_follow_the_kinds(protocol: int) -> None:
    """event_problems picks the data schema of an untagged subscription event by the kinds' order."""
    ref = load(protocol)
    section = ref.document["schemas"]["subscription_event"]
    kinds = section["$defs"]["SubscriptionEventKind"]["enum"]
    union = section["$defs"]["SubscriptionEventData"]
    refs = [branch["$ref"].rsplit("/", 1)[1] for branch in union.get("oneOf", union.get("anyOf", []))]
    assert refs == ["PaneOutputMatchedEvent", "PaneAgentStatusChangedEvent", "PaneScrollChangedEvent"]
    assert kinds == ["pane.output_matched", "pane.agent_status_changed", "pane.scroll_changed"]
