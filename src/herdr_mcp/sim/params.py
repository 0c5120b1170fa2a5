"""Which methods Herdr's socket accepts and how it types their params.

Herdr deserializes a whole request line with serde (src/api/schema.rs: `Request {id, #[serde(flatten)]
method}`, `Method` tagged by `method` with content `params`); any failure — bad JSON, a missing or
unknown method, missing or ill-typed params — is answered `{"id": "", "error": {"code":
"invalid_request"}}` (src/api/server.rs). Params structs do not deny unknown fields, so extra
params are ignored. `Option<T>` fields accept null; `#[serde(default)]` fields (bools, lists) do not.

The table below is written from the published schema (docs/next/api/herdr-api.schema.json,
protocol 20; its `request` definitions). When `herdr_mcp.herdr.reference` is available, its
`params_schema` of the running protocol is used instead (`validator_for`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

AGENT_STATUSES = ("idle", "working", "blocked", "done", "unknown")
READ_SOURCES = ("visible", "recent", "recent_unwrapped", "detection")
READ_FORMATS = ("text", "ansi")
SPLIT = ("right", "down")
DIRECTIONS = ("left", "right", "up", "down")

# name:type ; `?` optional and nullable (Option<T>), `~` optional but not nullable (serde default).
# s string, i unsigned integer, n number, b bool, o object, S list of strings, *x a checker below.
_SPECS: dict[str, str] = {
    "ping": "",
    "server.stop": "",
    "server.live_handoff": "?expected_protocol:i ?expected_version:s ?import_exe:s",
    "server.reload_config": "",
    "server.agent_manifests": "",
    "server.reload_agent_manifests": "",
    "notification.show": "title:s ?body:s ?position:s ?sound:*any",
    "client.window_title.set": "title:s",
    "client.window_title.clear": "",
    "session.snapshot": "",
    "workspace.create": "?cwd:s ~env:o ~focus:b ?label:s",
    "workspace.list": "",
    "workspace.get": "workspace_id:s",
    "workspace.focus": "workspace_id:s",
    "workspace.rename": "workspace_id:s label:s",
    "workspace.move": "workspace_id:s insert_index:i",
    "workspace.move_block": "workspace_ids:S ?before_workspace_id:s",
    "workspace.report_metadata": "workspace_id:s source:s tokens:o ?seq:i ?ttl_ms:i",
    "workspace.close": "workspace_id:s",
    "worktree.list": "?cwd:s ?workspace_id:s",
    "worktree.create": "?base:s ?branch:s ?cwd:s ~focus:b ?label:s ?path:s ?workspace_id:s",
    "worktree.open": "?branch:s ?cwd:s ~focus:b ?label:s ?path:s ?workspace_id:s",
    "worktree.remove": "workspace_id:s ~force:b",
    "tab.create": "?cwd:s ~env:o ~focus:b ?label:s ?workspace_id:s",
    "tab.list": "?workspace_id:s",
    "tab.get": "tab_id:s",
    "tab.focus": "tab_id:s",
    "tab.rename": "tab_id:s label:s",
    "tab.move": "tab_id:s insert_index:i",
    "tab.close": "tab_id:s",
    "agent.list": "",
    "agent.get": "target:s",
    "agent.read": "target:s source:*source ?lines:i ~format:*format ~strip_ansi:b",
    "agent.explain": "target:s",
    "agent.send_keys": "target:s keys:S",
    "agent.rename": "target:s ?name:s",
    "agent.view.set": "source:s ?label:s ?filter:*any ~sort:*list",
    "agent.view.clear": "?source:s",
    "agent.focus": "target:s",
    "agent.start": "pane_id:s kind:s name:s ~args:S ?timeout_ms:i",
    "agent.prompt": "target:s text:s ?wait:*wait",
    "agent.wait": "target:s ~until:*statuses ?timeout_ms:i",
    "pane.split": "direction:*split ?cwd:s ~env:o ~focus:b ?ratio:n ~right_click:*any "
    "?target_pane_id:s ?workspace_id:s",
    "pane.swap": "?direction:*direction ?pane_id:s ?source_pane_id:s ?target_pane_id:s",
    "pane.move": "pane_id:s destination:*destination ~focus:b",
    "pane.zoom": "?pane_id:s ~mode:*zoom",
    "pane.layout": "?pane_id:s",
    "pane.process_info": "?pane_id:s",
    "layout.export": "?pane_id:s ?tab_id:s",
    "layout.apply": "root:*layout ~focus:b ?tab_id:s ?tab_label:s ?workspace_id:s",
    "layout.set_split_ratio": "path:*path ratio:n ?pane_id:s ?tab_id:s",
    "pane.neighbor": "direction:*direction ?pane_id:s",
    "pane.edges": "?pane_id:s",
    "pane.focus_direction": "direction:*direction ?pane_id:s",
    "pane.resize": "direction:*direction ?amount:n ?pane_id:s",
    "pane.list": "?workspace_id:s",
    "pane.current": "?caller_pane_id:s",
    "pane.get": "pane_id:s",
    "pane.focus": "pane_id:s",
    "pane.input.set": "pane_id:s right_click:*any",
    "pane.rename": "pane_id:s ?label:s",
    "pane.send_text": "pane_id:s text:s",
    "pane.send_keys": "pane_id:s keys:S",
    "pane.send_input": "pane_id:s ~text:s ~keys:S",
    "pane.read": "pane_id:s source:*source ?lines:i ~format:*format ~strip_ansi:b",
    "pane.graphics.set": "pane_id:s format:s image_width:i image_height:i ~data_base64:s "
    "?layer_id:s ~placement:o ~z_index:*int",
    "pane.graphics.clear": "pane_id:s ?layer_id:s",
    "pane.graphics.info": "pane_id:s",
    "pane.graphics.stream": "pane_id:s",
    "pane.report_agent": "pane_id:s source:s agent:s state:*pane_state ?agent_session_id:s "
    "?agent_session_path:s ?message:s ?seq:i",
    "pane.report_agent_session": "pane_id:s source:s agent:s ?agent_session_id:s "
    "?agent_session_path:s ?seq:i ?session_start_source:s",
    "pane.report_metadata": "pane_id:s source:s ?agent:s ?applies_to_source:s ~clear_display_agent:b "
    "~clear_state_labels:b ~clear_title:b ?display_agent:s ?seq:i ~state_labels:o ?title:s "
    "~tokens:o ?ttl_ms:i",
    "pane.clear_agent_authority": "pane_id:s ?seq:i ?source:s",
    "pane.release_agent": "pane_id:s agent:s source:s ?seq:i",
    "pane.close": "pane_id:s",
    "popup.close": "",
    "events.subscribe": "subscriptions:*subscriptions",
    "events.wait": "match_event:*event_match ?timeout_ms:i",
    "pane.wait_for_output": "pane_id:s source:*source match:*match ?lines:i ?timeout_ms:i ~strip_ansi:b",
    "integration.install": "target:s",
    "integration.uninstall": "target:s",
    "plugin.link": "path:s ~enabled:b ?source:*any",
    "plugin.list": "?plugin_id:s",
    "plugin.unlink": "plugin_id:s",
    "plugin.enable": "plugin_id:s",
    "plugin.disable": "plugin_id:s",
    "plugin.action.list": "?plugin_id:s",
    "plugin.action.invoke": "action_id:s ?context:*any ?plugin_id:s",
    "plugin.log.list": "?limit:i ?plugin_id:s",
    "plugin.pane.open": "plugin_id:s entrypoint:s ?cwd:s ?direction:*split ~env:o ~focus:b "
    "?height:*any ?placement:*any ?target_pane_id:s ?width:*any ?workspace_id:s",
    "plugin.pane.focus": "pane_id:s",
    "plugin.pane.close": "pane_id:s",
}

WIRE_METHODS: frozenset[str] = frozenset(_SPECS)
"""The methods of Herdr's `Method` enum at protocol 20 (src/api/server.rs api_method_name)."""

SUBSCRIPTION_TYPES = frozenset(
    {
        "workspace.created", "workspace.updated", "workspace.metadata_updated", "workspace.renamed",
        "workspace.moved", "workspace.reordered", "workspace.closed", "workspace.focused",
        "worktree.created", "worktree.opened", "worktree.removed", "tab.created", "tab.closed",
        "tab.focused", "tab.renamed", "tab.moved", "pane.created", "pane.closed", "pane.updated",
        "pane.focused", "pane.moved", "pane.exited", "pane.agent_detected", "pane.output_matched",
        "pane.agent_status_changed", "pane.scroll_changed", "layout.updated",
    }
)  # fmt: skip
"""Herdr: src/api/schema/events.rs, enum Subscription."""

EVENT_MATCH_REQUIRED: dict[str, tuple[str, ...]] = {
    "workspace_created": (), "workspace_updated": ("workspace_id",), "workspace_closed": ("workspace_id",),
    "workspace_renamed": ("workspace_id",), "workspace_moved": ("workspace_id",),
    "workspace_focused": ("workspace_id",), "tab_created": (), "tab_closed": ("tab_id",),
    "tab_renamed": ("tab_id",), "tab_moved": ("tab_id",), "tab_focused": ("tab_id",), "pane_created": (),
    "pane_closed": ("pane_id",), "pane_focused": ("pane_id",), "pane_moved": ("pane_id",),
    "pane_output_changed": ("pane_id",), "pane_exited": ("pane_id",), "pane_agent_detected": ("pane_id",),
    "pane_agent_status_changed": ("pane_id", "agent_status"),
}  # fmt: skip
"""Herdr: src/api/schema/events.rs, enum EventMatch (tagged by `event`)."""


class Invalid(Exception):
    """Params Herdr's serde would refuse; the message says what."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _enum(*allowed: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value not in allowed:
            raise Invalid(f"unknown variant {value!r}, expected one of {', '.join(allowed)}")

    return check


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise Invalid(f"{what} must be an object")
    return value


def _statuses(value: Any) -> None:
    if not isinstance(value, list):
        raise Invalid("until must be a list")
    for item in value:
        _enum(*AGENT_STATUSES)(item)


def _wait(value: Any) -> None:
    body = _object(value, "wait")
    if "until" in body:
        _statuses(body["until"])
    if body.get("timeout_ms") is not None and not (_is_int(body["timeout_ms"]) and body["timeout_ms"] >= 0):
        raise Invalid("wait.timeout_ms must be an unsigned integer")


def _match(value: Any) -> None:
    body = _object(value, "match")
    _enum("substring", "regex")(body.get("type"))
    if not isinstance(body.get("value"), str):
        raise Invalid("match.value must be a string")


def _subscriptions(value: Any) -> None:
    if not isinstance(value, list):
        raise Invalid("subscriptions must be a list")
    for item in value:
        body = _object(item, "subscription")
        kind = body.get("type")
        if kind not in SUBSCRIPTION_TYPES:
            raise Invalid(f"unknown subscription type {kind!r}")
        filtered = kind in ("pane.output_matched", "pane.agent_status_changed", "pane.scroll_changed")
        if filtered and not isinstance(body.get("pane_id"), str):
            raise Invalid(f"{kind} needs a string pane_id")
        if kind == "pane.agent_status_changed" and body.get("agent_status") is not None:
            _enum(*AGENT_STATUSES)(body["agent_status"])
        if kind == "pane.output_matched":
            _enum(*READ_SOURCES)(body.get("source"))
            _match(body.get("match"))


def _event_match(value: Any) -> None:
    body = _object(value, "match_event")
    event = body.get("event")
    if event not in EVENT_MATCH_REQUIRED:
        raise Invalid(f"unknown match_event event {event!r}")
    for key in EVENT_MATCH_REQUIRED[event]:
        if not isinstance(body.get(key), str):
            raise Invalid(f"match_event.{key} must be a string")
    if event == "pane_agent_status_changed":
        _enum(*AGENT_STATUSES)(body["agent_status"])


def _layout(value: Any) -> None:
    body = _object(value, "layout node")
    if body.get("type") == "pane":
        return
    if body.get("type") != "split":
        raise Invalid("layout node type must be pane or split")
    _enum(*SPLIT)(body.get("direction"))
    if not isinstance(body.get("ratio"), (int, float)) or isinstance(body.get("ratio"), bool):
        raise Invalid("split ratio must be a number")
    _layout(body.get("first"))
    _layout(body.get("second"))


def _destination(value: Any) -> None:
    body = _object(value, "destination")
    kind = body.get("type")
    if kind == "tab":
        if not isinstance(body.get("tab_id"), str):
            raise Invalid("destination.tab_id must be a string")
        _enum(*SPLIT)(body.get("split"))
    elif kind not in ("new_tab", "new_workspace"):
        raise Invalid("destination type must be tab, new_tab or new_workspace")


def _path(value: Any) -> None:
    if not isinstance(value, list) or not all(isinstance(v, bool) for v in value):
        raise Invalid("path must be a list of booleans")


def _list(value: Any) -> None:
    if not isinstance(value, list):
        raise Invalid("must be a list")


def _int(value: Any) -> None:
    if not _is_int(value):
        raise Invalid("must be an integer")


_CHECKERS: dict[str, Callable[[Any], None]] = {
    "any": lambda value: None,
    "list": _list,
    "int": _int,
    "source": _enum(*READ_SOURCES),
    "format": _enum(*READ_FORMATS),
    "split": _enum(*SPLIT),
    "direction": _enum(*DIRECTIONS),
    "zoom": _enum("toggle", "on", "off"),
    "pane_state": _enum("idle", "working", "blocked", "unknown"),
    "statuses": _statuses,
    "wait": _wait,
    "match": _match,
    "subscriptions": _subscriptions,
    "event_match": _event_match,
    "layout": _layout,
    "destination": _destination,
    "path": _path,
}


_TYPE_NAMES = {
    "s": "a string", "i": "an unsigned integer", "n": "a number", "b": "a boolean", "o": "an object",
    "S": "a list of strings",
}  # fmt: skip


def _check_type(kind: str, value: Any) -> None:
    if kind == "s":
        ok = isinstance(value, str)
    elif kind == "i":
        ok = _is_int(value) and value >= 0
    elif kind == "n":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    elif kind == "b":
        ok = isinstance(value, bool)
    elif kind == "o":
        ok = isinstance(value, dict)
    elif kind == "S":
        ok = isinstance(value, list) and all(isinstance(item, str) for item in value)
    else:
        _CHECKERS[kind.lstrip("*")](value)
        return
    if not ok:
        raise Invalid(f"expected {_TYPE_NAMES[kind]}")


def check_params(method: str, params: Any) -> None:
    """Raise Invalid when Herdr would refuse `params` of `method` (unknown keys are ignored)."""
    if not isinstance(params, dict):
        raise Invalid("params must be an object")
    for field in _SPECS[method].split():
        name, kind = field.split(":")
        optional = name[0] in "?~"
        nullable = name[0] == "?"
        name = name.lstrip("?~")
        if name not in params:
            if not optional:
                raise Invalid(f"missing field `{name}`")
            continue
        value = params[name]
        if value is None and nullable:
            continue
        try:
            _check_type(kind, value)
        except Invalid as exc:
            raise Invalid(f"{name}: {exc}") from None


def validator_for(protocol: int) -> Callable[[str, Any], None]:
    """The params check for `protocol`: the packaged reference's schema when present, else ours."""
    try:
        from herdr_mcp.herdr import reference  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return check_params
    try:
        from jsonschema import Draft202012Validator

        loaded = reference.load(protocol)
        validators = {
            name: Draft202012Validator(method.params_schema) for name, method in loaded.methods.items()
        }
    except Exception:  # a reference not usable here: fall back to the table above
        return check_params

    def check(method: str, params: Any) -> None:
        validator = validators.get(method)
        if validator is None:
            check_params(method, params)
            return
        error = next(iter(validator.iter_errors(params)), None)
        if error is not None:
            raise Invalid(error.message)

    return check
