"""The stdio loop's protocol pieces, written without the `mcp` SDK (runtime/protocol.py,
runtime/stdio.py), held against the SDK itself: the SDK is the oracle here and only here.

- the constants (revisions, reserved `_meta` keys, error codes) equal mcp_types';
- `check_envelope` answers every generated 2026-07-28 envelope as the SDK's
  `classify_inbound_request` (no headers: stdio has none) does, code, message and data;
- every `initialize` params `handshake_version` decides is accepted by the SDK's
  `InitializeRequestParams` with the same revision (the rest is left to that model);
- the server's identity, capabilities and instructions, and the tools/list result, equal what the
  SDK server of the HTTP app (`runtime.server.build_mcp_server`) gives; the bytes a running
  `herdr-mcp stdio` writes for initialize and server/discover equal the bytes the loop wrote when
  it built them from that SDK server, and its tools/list equals that one's as JSON.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.shared.inbound import InboundLadderRejection, InboundModernRoute, classify_inbound_request
from mcp_types import jsonrpc, version

from herdr_mcp import __version__
from herdr_mcp.contract import contract_identity, identity_of, load_catalog
from herdr_mcp.runtime import protocol
from herdr_mcp.runtime.config import RuntimeConfig
from herdr_mcp.runtime.dispatcher import ToolDispatcher
from herdr_mcp.runtime.server import build_mcp_server, list_tools_result
from herdr_mcp.runtime.services import Services
from herdr_mcp.runtime.stdio import SUPPORTED_VERSIONS, ServerIdentity, tools_list_result
from herdr_mcp.text import dumps
from tests.support.runtime_harness import make_repo
from tests.support.stdio_harness import RawStdio, stdio_command


def _dump(model: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


def _bytes(value: Any) -> str:
    """As the loop writes JSON (runtime/stdio.py `_send`)."""
    return dumps(value, ensure_ascii=False, separators=(",", ":"))


def test_the_protocol_constants_are_the_sdks() -> None:
    assert protocol.HANDSHAKE_PROTOCOL_VERSIONS == version.HANDSHAKE_PROTOCOL_VERSIONS
    assert protocol.MODERN_PROTOCOL_VERSIONS == version.MODERN_PROTOCOL_VERSIONS
    assert protocol.LATEST_HANDSHAKE_VERSION == version.LATEST_HANDSHAKE_VERSION
    assert protocol.LATEST_MODERN_VERSION == version.LATEST_MODERN_VERSION
    assert protocol.PROTOCOL_VERSION_META_KEY == types.PROTOCOL_VERSION_META_KEY
    assert protocol.CLIENT_CAPABILITIES_META_KEY == types.CLIENT_CAPABILITIES_META_KEY
    assert protocol.CLIENT_INFO_META_KEY == types.CLIENT_INFO_META_KEY
    assert protocol.SERVER_INFO_META_KEY == types.SERVER_INFO_META_KEY
    for name in ("PARSE_ERROR", "INVALID_REQUEST", "METHOD_NOT_FOUND", "INVALID_PARAMS", "INTERNAL_ERROR"):
        assert getattr(protocol, name) == getattr(jsonrpc, name), name
    assert protocol.UNSUPPORTED_PROTOCOL_VERSION == jsonrpc.UNSUPPORTED_PROTOCOL_VERSION


# -- the 2026-07-28 envelope ----------------------------------------------------------------------

#: Values a version, capabilities or client info may take in a generated envelope.
_VALUES: tuple[Any, ...] = (
    "2026-07-28",
    "2025-11-25",
    "2099-01-01",
    "",
    " 2026-07-28",
    "2026-07-28\ud800",
    None,
    0,
    7.5,
    True,
    [],
    ["2026-07-28"],
    {},
    {"name": "c", "version": "1"},
)
_ABSENT = object()


def _envelopes() -> Iterator[dict[str, Any]]:
    """params of generated requests: `_meta` absent or not an object, and every combination of
    the three envelope keys absent or holding each value, with and without another key."""
    yield {}
    for odd in (None, [], "meta", 0, True, [protocol.PROTOCOL_VERSION_META_KEY]):
        yield {"_meta": odd}
    keys = (protocol.PROTOCOL_VERSION_META_KEY, protocol.CLIENT_CAPABILITIES_META_KEY)
    for pair in itertools.product((_ABSENT, *_VALUES), repeat=2):
        for info in (_ABSENT, None, {"name": "c", "version": "1"}):
            for other in (False, True):
                meta: dict[str, Any] = {
                    key: value for key, value in zip(keys, pair, strict=True) if value is not _ABSENT
                }
                if info is not _ABSENT:
                    meta[protocol.CLIENT_INFO_META_KEY] = info
                if other:
                    meta["progressToken"] = 1
                yield {"_meta": meta, "name": "herdr_fs_read"}


def test_check_envelope_answers_every_generated_envelope_as_the_sdks_ladder() -> None:
    checked = 0
    for params in _envelopes():
        ours = protocol.check_envelope(params)
        sdk = classify_inbound_request({"method": "tools/list", "params": params})
        if isinstance(sdk, InboundLadderRejection):
            assert isinstance(ours, protocol.EnvelopeRejection), (params, sdk)
            assert (ours.code, ours.message, ours.data) == (sdk.code, sdk.message, sdk.data), params
        else:
            assert isinstance(sdk, InboundModernRoute)
            assert ours == sdk.protocol_version, params
        checked += 1
    assert checked == 7 + (len(_VALUES) + 1) ** 2 * 3 * 2


def test_unsupported_revisions_name_every_revision_served_both_eras_newest_first() -> None:
    newest_first = (*version.MODERN_PROTOCOL_VERSIONS, *reversed(version.HANDSHAKE_PROTOCOL_VERSIONS))
    assert newest_first == SUPPORTED_VERSIONS


# -- initialize params ------------------------------------------------------------------------------

#: What clients send: the SDK client's fullest capabilities and identity, and common shapes.
_CLIENT_PARAMS: tuple[dict[str, Any], ...] = (
    _dump(
        types.InitializeRequestParams(
            protocol_version=version.LATEST_HANDSHAKE_VERSION,
            capabilities=types.ClientCapabilities(
                sampling=types.SamplingCapability(
                    context=types.SamplingContextCapability(), tools=types.SamplingToolsCapability()
                ),
                elicitation=types.ElicitationCapability(
                    form=types.FormElicitationCapability(), url=types.UrlElicitationCapability()
                ),
                roots=types.RootsCapability(list_changed=True),
                experimental={"x": {"on": True}},
                extensions={"io.example/ext": {}},
            ),
            client_info=types.Implementation(
                name="client", version="1.0", title="A client", description="d", website_url="https://x.test"
            ),
        )
    ),
    {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}},
    {
        "protocolVersion": "2024-11-05",
        "capabilities": {"roots": {"listChanged": True}, "sampling": {}, "elicitation": {}},
        "clientInfo": {"name": "inspector", "version": "0.1"},
    },
    {
        "protocolVersion": "2099-01-01",
        "capabilities": {"roots": {}},
        "clientInfo": {"name": "n", "version": ""},
    },
)

_VERSIONS: tuple[Any, ...] = ("2025-06-18", "2099-01-01", "", "x\ud800", 5, None, True, [])
_CAPABILITIES: tuple[Any, ...] = (
    {},
    {"roots": {"listChanged": True}},
    {"roots": {"listChanged": "true"}},
    {"roots": {"listChanged": 1}},
    {"roots": {"listChanged": None}},
    {"roots": {"list_changed": True}},
    {"roots": None},
    {"roots": []},
    {"sampling": {}},
    {"sampling": {"tools": {}, "context": {}}},
    {"sampling": {"tools": 1}},
    {"sampling": {"tools": None}},
    {"elicitation": {"form": {}, "url": {}}},
    {"elicitation": {"form": {"extra": 1}}},
    {"elicitation": {"url": "yes"}},
    {"experimental": {"a": {}}},
    {"experimental": {"a": 1}},
    {"experimental": []},
    {"extensions": {"x": {"y": 1}}},
    {"extensions": {"x": None}},
    {"tasks": {}},
    {"tasks": {"list": {}, "requests": {"sampling": {}}}},
    {"unknown": 1},
    {"roots": {}, "sampling": {}, "elicitation": {}, "experimental": {}, "extensions": {}},
    [],
    None,
    "caps",
)
_CLIENT_INFO: tuple[Any, ...] = (
    {"name": "c", "version": "1"},
    {"name": "c"},
    {"version": "1"},
    {"name": 1, "version": "1"},
    {"name": "c", "version": 1.0},
    {"name": "c", "version": "1", "title": "t"},
    {"name": "c", "version": "1", "title": None},
    {"name": "c", "version": "1", "title": 3},
    {"name": "c", "version": "1", "websiteUrl": "https://x"},
    {"name": "c", "version": "1", "website_url": "https://x"},
    {"name": "c", "version": "1", "icons": [{"src": "https://x/i.png"}]},
    {"name": "c", "version": "1", "icons": [{}]},
    {"name": "c", "version": "1", "extra": 1},
    None,
    [],
)
_KEYS = ("protocolVersion", "capabilities", "clientInfo", "protocol_version", "client_info", "_meta", "other")


def _sdk_version(params: dict[str, Any]) -> str | None:
    try:
        return types.InitializeRequestParams.model_validate(params).protocol_version
    except ValueError:
        return None


def _initialize_params() -> Iterator[dict[str, Any]]:
    """Every combination of the three members' values, then 4,000 random mixes of members
    (wire names, field names, `_meta`, an unknown one) and values."""
    for values in itertools.product(_VERSIONS, _CAPABILITIES, _CLIENT_INFO):
        yield dict(zip(("protocolVersion", "capabilities", "clientInfo"), values, strict=True))
    pools = {
        "protocolVersion": _VERSIONS,
        "protocol_version": _VERSIONS,
        "capabilities": _CAPABILITIES,
        "clientInfo": _CLIENT_INFO,
        "client_info": _CLIENT_INFO,
        "_meta": ({}, {"progressToken": 1}, None, 5),
        "other": (1, None),
    }
    generator = random.Random(24)
    for _ in range(4000):
        keys = [key for key in _KEYS if generator.random() < 0.6]
        yield {key: generator.choice(pools[key]) for key in keys}


def test_every_initialize_handshake_version_decides_the_sdk_accepts_with_that_revision() -> None:
    decided = undecided = 0
    for params in _initialize_params():
        ours = protocol.handshake_version(params)
        if ours is None:
            undecided += 1
            continue
        decided += 1
        assert _sdk_version(params) == ours, params
    # Both kinds occur (about 110 decided, 7,100 left to the SDK, 620 of those valid): the
    # check is not vacuous, and it leaves the unusual (nulls, field names, _meta, tasks, icons).
    assert decided >= 100 and undecided >= 1000, (decided, undecided)


@pytest.mark.parametrize("params", _CLIENT_PARAMS, ids=["sdk-client", "bare", "inspector", "future"])
def test_what_clients_send_is_decided_without_the_sdk(params: dict[str, Any]) -> None:
    assert protocol.handshake_version(params) == params["protocolVersion"] == _sdk_version(params)


# -- the server's identity and its tool list -------------------------------------------------------


@pytest.fixture
def dispatcher(tmp_path: Path) -> Iterator[ToolDispatcher]:
    config = RuntimeConfig(config_dir=tmp_path / "config", herdr_socket=tmp_path / "no-herdr.sock")
    services = Services.create(config)
    dispatcher = ToolDispatcher(services)
    try:
        yield dispatcher
    finally:
        dispatcher.audit.close()
        services.state.close()


def test_the_identity_is_what_the_http_apps_sdk_server_says(dispatcher: ToolDispatcher) -> None:
    server = build_mcp_server(dispatcher)
    options = server.create_initialization_options()
    identity = ServerIdentity()
    assert _bytes(identity.server_info()) == _bytes(_dump(server.server_info))
    assert identity.server_info() == server.server_info_stamp == {"name": "herdr-mcp", "version": __version__}
    assert _bytes(identity.capabilities()) == _bytes(_dump(options.capabilities))
    modern = server.get_capabilities(protocol_version=version.LATEST_MODERN_VERSION)
    assert _bytes(identity.capabilities(modern=True)) == _bytes(_dump(modern))
    assert identity.instructions == options.instructions == server.instructions


def test_tools_list_is_the_frozen_catalog_as_the_sdk_dumped_it(dispatcher: ToolDispatcher) -> None:
    catalog = load_catalog()
    ours = tools_list_result(catalog)
    sdk = _dump(list_tools_result(dispatcher.catalog))
    # The same members in the same order, the same values; inside a tool the catalog's own order.
    assert list(ours) == list(sdk)
    assert ours == sdk
    assert json.dumps(ours, sort_keys=True) == json.dumps(sdk, sort_keys=True)
    assert identity_of(ours["tools"], contract_identity().epoch) == contract_identity()


_INITIALIZE = _CLIENT_PARAMS[1]
_ENVELOPE = {
    protocol.PROTOCOL_VERSION_META_KEY: "2026-07-28",
    protocol.CLIENT_CAPABILITIES_META_KEY: {},
    protocol.CLIENT_INFO_META_KEY: {"name": "raw", "version": "1"},
}


def test_the_answers_on_the_wire_are_the_bytes_the_sdk_built_ones_were(
    dispatcher: ToolDispatcher, tmp_path: Path
) -> None:
    """What the loop wrote when it took its identity and tool list from the SDK server (until
    issue 24), rebuilt here from that server, against a running `herdr-mcp stdio`."""
    server = build_mcp_server(dispatcher)
    options = server.create_initialization_options()
    stamp = {types.SERVER_INFO_META_KEY: server.server_info_stamp}
    tools = _dump(list_tools_result(dispatcher.catalog))
    expected = {
        1: {
            "protocolVersion": "2025-06-18",
            "capabilities": _dump(options.capabilities),
            "serverInfo": _dump(server.server_info),
            "instructions": options.instructions,
        },
        2: tools,
        3: {**tools, "_meta": stamp},
        4: {
            "supportedVersions": list(version.MODERN_PROTOCOL_VERSIONS),
            "capabilities": _dump(server.get_capabilities(protocol_version=version.LATEST_MODERN_VERSION)),
            "instructions": options.instructions,
            "ttlMs": 0,
            "cacheScope": "private",
            "resultType": "complete",
            "_meta": stamp,
        },
    }
    repo = make_repo(tmp_path / "repo", {"README.md": b"# demo\n"})
    raw = RawStdio(stdio_command(repo, tmp_path / "stdio-config"))
    try:
        requests = [
            (1, "initialize", _INITIALIZE),
            (2, "tools/list", None),
            (3, "tools/list", {"_meta": _ENVELOPE}),
            (4, "server/discover", {"_meta": _ENVELOPE}),
        ]
        for request_id, method, params in requests:
            raw.send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "method": method,
                    **({"params": params} if params else {}),
                }
            )
            line = raw.lines.get(timeout=60)
            assert line is not None, raw.stderr
            answer: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "result": expected[request_id]}
            if method == "tools/list":
                # The catalog's tools as they are: equal to the SDK's dump as JSON (the SDK's model
                # orders a tool's annotations its own way), its members in the SDK's order.
                received = json.loads(line)
                assert received == answer and list(received["result"]) == list(answer["result"])
            else:
                assert line.decode("utf-8").rstrip("\n") == _bytes(answer), method
    finally:
        raw.stop()
