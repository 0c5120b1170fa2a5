"""Every parse boundary bounded (issue 23, Deliver 1; docs/runtime.md "Parse boundaries").

Each boundary is driven for real with a document too deep, too large and with too many items:
`herdr-mcp stdio` (a subprocess), the runtime over uvicorn on loopback (`/mcp` and a browser
route), `herdr-mcp native-host` (a subprocess speaking native messaging to a runtime stand-in),
the link (its server and router in this process, a stand-in generation behind it), the link's
reader of Edge frames, the Herdr client on a real Unix socket, records and a manifest file read
by `herdr-mcp release sign`. Each refusal carries the bound's stable code (`json_too_deep`,
`json_too_large`, `json_too_many_items`, or the boundary's own size code where it had one), and
the boundary serves the next message.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from herdr_mcp.cli.generation import main as generation_main
from herdr_mcp.generations import Generation
from herdr_mcp.herdr import HerdrClient, HerdrProtocolError
from herdr_mcp.link.edge_frames import FRAME_LIMITS, FrameInvalid, parse_frame
from herdr_mcp.link.router import BODY_LIMITS
from herdr_mcp.local_http import answer_object, local_client
from herdr_mcp.native_host.protocol import FRAME_LIMITS as HOST_FRAME_LIMITS
from herdr_mcp.records import RECORD_LIMITS, FailRule, RecordInvalid, RecordKind
from herdr_mcp.release.manifest import MANIFEST_LIMITS, ManifestError, RuntimeManifest
from herdr_mcp.runtime.browser.http import BODY_LIMITS as BROWSER_BODY_LIMITS
from herdr_mcp.sim import SimConfig, SimulatorThread
from herdr_mcp.sim.config import CONFIG_LIMITS as SIM_CONFIG_LIMITS
from herdr_mcp.sim.config import SimConfigError
from herdr_mcp.strict_json import (
    DEFAULT_MAX_DEPTH,
    MESSAGE_LIMITS,
    JsonLimitExceeded,
    JsonLimits,
    check_bounds,
    loads_bounded,
)
from herdr_mcp.update.errors import ReleaseDataError
from herdr_mcp.update.probe import OUTPUT_LIMITS, parse_version_output
from tests.support.edge_standin import EdgeStandIn
from tests.support.link_edge_harness import connected, linked
from tests.support.link_harness import LINK_TOKEN, KeepAliveGeneration, in_process_link, store_active
from tests.support.native_host_harness import StubRuntime, native_host, short_config_dir, stub_runtime
from tests.support.runtime_harness import RunningRuntime, make_repo, running_runtime
from tests.support.stdio_harness import RawStdio, stdio_command
from tests.support.waiting import wait_until

TIMEOUT_S = 60.0


def nested(depth: int, inner: str = "0") -> str:
    return "[" * depth + inner + "]" * depth


def many(count: int) -> str:
    """An array of `count` zeros: `count` items as the bound counts them."""
    return "[" + ",".join("0" * count) + "]"


def past_bounds(limits: JsonLimits, wrap: Callable[[str], Any], large: str = "json_too_large") -> list[Any]:
    """Three documents, each past one of `limits` by a little or far (the value `wrap` puts
    inside the boundary's envelope), with the code each is refused with (`large` for the size)."""
    return [
        pytest.param(wrap(nested(1000)), "json_too_deep", id="too-deep"),
        pytest.param(wrap(many(limits.max_items + 1)), "json_too_many_items", id="too-many-items"),
        pytest.param(wrap('"' + "x" * limits.max_bytes + '"'), large, id="too-large"),
    ]


# -- the reader ----------------------------------------------------------------------------------

SMALL = JsonLimits(max_bytes=10_000, max_items=100)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (nested(DEFAULT_MAX_DEPTH), None),
        (nested(DEFAULT_MAX_DEPTH + 1), "json_too_deep"),
        ('{"a":' * DEFAULT_MAX_DEPTH + "1" + "}" * DEFAULT_MAX_DEPTH, None),
        ('{"a":' * (DEFAULT_MAX_DEPTH + 1) + "1" + "}" * (DEFAULT_MAX_DEPTH + 1), "json_too_deep"),
        # Unbalanced, deeper than the parser's recursion: still a bound, never RecursionError.
        ("[" * 9_000, "json_too_deep"),
        ("[" * 4_000 + "]" * 3_999, "json_too_deep"),
        (many(100), None),
        (many(101), "json_too_many_items"),
        ("[" + ",".join(["[]"] * 99) + "]", "json_too_many_items"),  # 99 values, 100 containers
        ('{"k":[' + ",".join(["{}"] * 60) + "]}", "json_too_many_items"),
        ('"' + "x" * 9_998 + '"', None),
        ('"' + "x" * 9_999 + '"', "json_too_large"),
        # Brackets and commas inside strings are text, not structure (escaped quotes included).
        (json.dumps({"s": "[" * 5000 + ",,," + '\\"]' * 100}), None),
    ],
)
def test_the_bounded_reader(text: str, code: str | None) -> None:
    if code is None:
        assert loads_bounded(text, SMALL) == json.loads(text)
        check_bounds(text.encode(), SMALL)
        return
    with pytest.raises(JsonLimitExceeded) as refused:
        loads_bounded(text, SMALL)
    assert refused.value.code == code
    assert isinstance(refused.value, ValueError)
    assert refused.value.to_dict()["limit"] in (SMALL.max_bytes, SMALL.max_depth, SMALL.max_items)


def test_a_million_levels_are_refused_without_recursion() -> None:
    for text in (nested(1_000_000), "[" * 1_000_000, '{"a":' * 1_000_000):
        with pytest.raises(JsonLimitExceeded) as refused:
            loads_bounded(text, MESSAGE_LIMITS)
        assert refused.value.code == "json_too_deep"


def test_strict_refuses_repeated_keys_and_constants_but_lenient_takes_them() -> None:
    for text in ('{"a":1,"a":2}', "[NaN]"):
        with pytest.raises(ValueError, match=r"duplicate key|NaN is not JSON") as refused:
            loads_bounded(text, SMALL)
        assert not isinstance(refused.value, JsonLimitExceeded)
    assert loads_bounded('{"a":1,"a":2}', SMALL, strict=False) == {"a": 2}


# -- stdio ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stdio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawStdio]:
    base = tmp_path_factory.mktemp("stdio")
    repo = make_repo(base / "repo", {"README.md": b"# demo\n"})
    raw = RawStdio(stdio_command(repo, base / "config"))
    try:
        raw.initialize()
        yield raw
    finally:
        raw.stop()


def _ping_with(params: str) -> bytes:
    return ('{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":' + params + "}}\n").encode()


# The defect: the 1,000-deep line ended the process (RecursionError) on the old code.
@pytest.mark.parametrize(("line", "code"), past_bounds(MESSAGE_LIMITS, _ping_with))
def test_stdio_answers_a_line_past_the_bounds_and_serves_the_next(
    stdio: RawStdio, line: bytes, code: str
) -> None:
    stdio.send_raw(line)
    refused = stdio.receive()
    assert refused["id"] is None and refused["error"]["code"] == -32600, refused
    assert refused["error"]["data"]["code"] == code
    # Within the bounds: answered as before (the deepest message the bound allows).
    assert stdio.request(2, "ping", {"x": json.loads(nested(DEFAULT_MAX_DEPTH - 2))})["result"] == {}
    assert stdio.process.poll() is None


# -- the runtime over HTTP -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningRuntime]:
    base = tmp_path_factory.mktemp("runtime")
    repo = make_repo(base / "repo", {"README.md": b"# demo\n"})
    with (
        SimulatorThread(SimConfig.for_roots([repo]), base / "herdr.sock"),
        running_runtime(base / "herdr.sock", base / "config") as running,
    ):
        yield running


_MCP_HEADERS = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2025-06-18",
}


def _initialize(params: str = "{}") -> bytes:
    return (
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
        '"capabilities":' + params + ',"clientInfo":{"name":"bounds","version":"1"}}}'
    ).encode()


def _chunks(data: bytes) -> Iterator[bytes]:
    """A body without Content-Length (chunked): the bound counts the bytes as they come."""
    for start in range(0, len(data), 1 << 20):
        yield data[start : start + (1 << 20)]


def _in_initialize(value: str) -> bytes:
    return _initialize('{"x":' + value + "}")


_CHUNKED = pytest.param(
    _in_initialize('"' + "x" * MESSAGE_LIMITS.max_bytes + '"'), "json_too_large", id="chunked"
)


@pytest.mark.parametrize(("body", "code"), [*past_bounds(MESSAGE_LIMITS, _in_initialize), _CHUNKED])
def test_runtime_mcp_refuses_a_body_past_the_bounds(
    runtime: RunningRuntime, body: bytes, code: str, request: pytest.FixtureRequest
) -> None:
    status = 413 if code == "json_too_large" else 400
    chunked = request.node.callspec.id == "chunked"
    headers = {**_MCP_HEADERS, "authorization": f"Bearer {runtime.token}"}
    content = _chunks(body) if chunked else body
    answer = httpx2.post(runtime.url, content=content, headers=headers, timeout=TIMEOUT_S)
    assert answer.status_code == status, answer.text[:300]
    error = answer.json()["error"]
    assert (error["code"], error["data"]["code"]) == (-32600, code)
    # The next request is served (a fresh connection: a refused body's rest was not read).
    fine = httpx2.post(runtime.url, content=_initialize(), headers=headers, timeout=TIMEOUT_S)
    assert fine.status_code == 200 and fine.json()["result"]["serverInfo"]["name"] == "herdr-mcp"


def test_runtime_reads_no_body_before_the_bearer(runtime: RunningRuntime) -> None:
    body = _initialize('{"x":"' + "x" * MESSAGE_LIMITS.max_bytes + '"}')
    answer = httpx2.post(runtime.url, content=body, headers=_MCP_HEADERS, timeout=TIMEOUT_S)
    assert answer.status_code == 401


def _in_binding_get(value: str) -> bytes:
    return ('{"scope":"chatgpt:conv:abc","pad":' + value + "}").encode()


@pytest.mark.parametrize(
    ("body", "code"), past_bounds(BROWSER_BODY_LIMITS, _in_binding_get, "body_too_large")
)
def test_runtime_browser_routes_refuse_a_body_past_the_bounds(
    runtime: RunningRuntime, body: bytes, code: str
) -> None:
    status = 413 if code == "body_too_large" else 400
    headers = {"content-type": "application/json", "authorization": f"Bearer {runtime.token}"}
    url = f"{runtime.base}/browser/binding.get"
    answer = httpx2.post(url, content=body, headers=headers, timeout=TIMEOUT_S)
    assert answer.status_code == status, answer.text[:300]
    assert answer.json()["error"]["code"] == code
    fine = httpx2.post(url, json={"scope": "chatgpt:conv:abc"}, headers=headers, timeout=TIMEOUT_S)
    assert fine.status_code == 200, fine.text[:300]


# -- the native host --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def host_config() -> Iterator[Path]:
    with short_config_dir() as path:
        yield path


@pytest.fixture(scope="module")
def host_runtime(host_config: Path) -> Iterator[StubRuntime]:
    with stub_runtime(host_config) as stub:
        yield stub


def _binding_get(request_id: str, pad: str) -> bytes:
    return (
        '{"id":"' + request_id + '","method":"POST","path":"/browser/binding.get",'
        '"body":{"scope":"chatgpt:conv:abc","pad":' + pad + "}}"
    ).encode()


def test_native_host_refuses_frames_past_the_bounds_and_goes_on(
    host_config: Path, host_runtime: StubRuntime
) -> None:
    seen_before = len(host_runtime.seen)
    with native_host(host_config) as host:
        host.send_raw(_binding_get("deep", nested(1000)))
        assert host.message(None)["error"]["code"] == "json_too_deep"
        host.send_raw(_binding_get("wide", many(HOST_FRAME_LIMITS.max_items + 1)))
        assert host.message(None)["error"]["code"] == "json_too_many_items"
        host.send_raw(_binding_get("fine", nested(DEFAULT_MAX_DEPTH - 4)))
        assert host.message("fine")["status"] == 200
        # Too large: refused from the 4 header bytes (the framing's own code); the stream
        # cannot be resynchronised after that, so the host exits.
        host.send_raw(_binding_get("big", '"' + "x" * HOST_FRAME_LIMITS.max_bytes + '"'))
        assert host.message(None)["error"]["code"] == "frame_too_large"
        assert host.wait_exit()[0] == 2
    assert [path for _, path, _ in host_runtime.seen[seen_before:]] == ["/browser/binding.get"]


# -- the link ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def link(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, KeepAliveGeneration]]:
    upstream = KeepAliveGeneration(5.0)
    try:
        store = store_active(
            tmp_path_factory.mktemp("link"), Generation("g1", upstream.endpoint), active="g1"
        )
        with in_process_link(store) as url:
            yield url, upstream
    finally:
        upstream.close()


def _tools_call(arguments: str) -> bytes:
    return (
        '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"herdr_inspect","arguments":'
        + arguments
        + "}}"
    ).encode()


@pytest.mark.parametrize(
    ("body", "reason"), past_bounds(BODY_LIMITS, lambda value: _tools_call('{"x":' + value + "}"))
)
def test_link_refuses_a_body_past_the_bounds_before_any_generation(
    link: tuple[str, KeepAliveGeneration], body: bytes, reason: str
) -> None:
    status = 413 if reason == "json_too_large" else 400
    url, upstream = link
    before = upstream.requests
    headers = {"authorization": f"Bearer {LINK_TOKEN}", "content-type": "application/json"}
    answer = httpx2.post(url, content=body, headers=headers, timeout=TIMEOUT_S)
    assert answer.status_code == status, answer.text[:300]
    document = answer.json()
    assert document["error"]["data"] == {"code": "not_delivered", "reason": reason}
    assert upstream.requests == before
    fine = httpx2.post(url, content=_tools_call("{}"), headers=headers, timeout=TIMEOUT_S)
    assert fine.status_code == 200 and upstream.requests == before + 1


@pytest.mark.parametrize("body", [nested(8000), many(2000), "x" * 20_000], ids=["deep", "wide", "large"])
def test_link_edge_control_answers_a_body_past_the_bounds(
    link: tuple[str, KeepAliveGeneration], body: str
) -> None:
    """On the old code the 8,000-deep body raised RecursionError in the connection's thread."""
    url, _ = link
    control = url.removesuffix("/mcp") + "/edge/control"
    headers = {"authorization": f"Bearer {LINK_TOKEN}", "content-type": "application/json"}
    answer = httpx2.post(control, content=body.encode(), headers=headers, timeout=TIMEOUT_S)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "bad_request"


# -- Edge frames, the Herdr client, records, manifests, probe output ------------------------------


def _tool_request(arguments: str) -> str:
    return '{"type":"tool_request","id":"c1","tool":"herdr_inspect","arguments":' + arguments + "}"


@pytest.mark.parametrize(("text", "code"), past_bounds(FRAME_LIMITS, _tool_request))
def test_edge_frames_past_the_bounds_are_protocol_errors(text: str, code: str) -> None:
    with pytest.raises(FrameInvalid, match=code):
        parse_frame(text)


@pytest.mark.parametrize(
    ("arguments", "code"),
    [(nested(1000), "json_too_deep"), (many(FRAME_LIMITS.max_items + 1), "json_too_many_items")],
    ids=["too-deep", "too-many-items"],
)
def test_the_link_closes_1008_on_an_edge_frame_past_the_bounds_and_reconnects(
    tmp_path: Path, arguments: str, code: str
) -> None:
    """Through the link's real Edge side (a websocket to the Edge stand-in); too large is 1009,
    before the reader (test_link_edge)."""
    frame = '{"type":"tool_request","id":"r1","tool":"herdr_inspect","deadline_ms":5000,"arguments":'
    with EdgeStandIn() as edge, linked(tmp_path, edge, None) as world:
        connected(world.link)
        edge.send_text(frame + '{"x":' + arguments + "}}")
        wait_until(lambda: edge.closed, "the link to close")
        assert edge.closed[0] == (1, 1008)
        edge.wait_frame(lambda frame: frame["type"] == "hello" and edge.connections == 2, "a new hello")


async def _herdr_answering(socket_path: Path, line: bytes) -> Exception | None:
    """A Unix socket server that answers any request with `line`; what the client raises."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(line)
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(answer, path=str(socket_path))
    try:
        await HerdrClient(socket_path).call("ping", {}, timeout=TIMEOUT_S)
    except Exception as exc:
        return exc
    finally:
        server.close()
        await server.wait_closed()
    return None


@pytest.mark.parametrize(
    ("result", "code"),
    [(nested(1000), "json_too_deep"), (many(100_001), "json_too_many_items")],
    ids=["too-deep", "too-many-items"],
)
def test_herdr_client_refuses_an_answer_past_the_bounds(tmp_path: Path, result: str, code: str) -> None:
    line = ('{"id":"1","result":' + result + "}\n").encode()
    with short_config_dir() as short:
        raised = asyncio.run(_herdr_answering(short / "h.sock", line))
    assert isinstance(raised, HerdrProtocolError), raised
    assert code in raised.message


def _in_object(value: str) -> str:
    return '{"schema_version":1,"x":' + value + "}"


@pytest.mark.parametrize(("text", "code"), past_bounds(RECORD_LIMITS, _in_object))
def test_a_record_past_the_bounds_is_record_invalid(tmp_path: Path, text: str, code: str) -> None:
    path = tmp_path / "launch.json"
    path.write_text(text)
    kind = RecordKind("launch.json", 2 * RECORD_LIMITS.max_bytes, FailRule.CLOSED)
    with pytest.raises(RecordInvalid, match=code) as refused:
        kind.read(path)
    assert refused.value.code == "record_invalid"
    assert RecordKind("launch.json", 2 * RECORD_LIMITS.max_bytes, FailRule.OPEN).read(path) is None


@pytest.mark.parametrize(("text", "code"), past_bounds(MANIFEST_LIMITS, _in_object, "evidence_too_large"))
def test_a_manifest_file_past_the_bounds_is_refused(tmp_path: Path, text: str, code: str) -> None:
    manifest = tmp_path / "runtime-manifest.json"
    manifest.write_text(text)
    with pytest.raises(ManifestError) as refused:
        RuntimeManifest.from_bytes(manifest.read_bytes())
    assert refused.value.code == code


def test_the_cli_refuses_a_manifest_file_past_the_bounds(tmp_path: Path) -> None:
    """`release sign` parses the manifest before it signs: one clean error, exit 3."""
    manifest = tmp_path / "runtime-manifest.json"
    manifest.write_text(_in_object(nested(1000)))
    command = [sys.executable, "-m", "herdr_mcp", "release", "sign", "--json"]
    command += ["--manifest", str(manifest), "--secret-key", str(tmp_path / "absent.key")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 3, done.stderr
    assert json.loads(done.stdout)["error"]["code"] == "json_too_deep", done.stdout
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("text", "bound"), past_bounds(OUTPUT_LIMITS, _in_object, "more than"))
def test_probe_output_past_the_bounds_is_malformed(text: str, bound: str) -> None:
    with pytest.raises(ReleaseDataError, match=bound) as refused:
        parse_version_output(text.encode())
    assert refused.value.code == "probe_output_malformed"


def test_a_catalog_file_past_the_bounds_is_contract_file_invalid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`generation register --expected-contract-file`: the 1,000-deep file raised RecursionError."""
    path = tmp_path / "runtime-epoch-5.json"
    path.write_text('{"epoch":5,"tools":' + nested(1000) + "}")
    state = ["--state-dir", str(tmp_path / "generations"), "--json", "register", "--id", "g"]
    code = generation_main(
        [*state, "--endpoint", "http://127.0.0.1:9001", "--expected-contract-file", str(path)]
    )
    assert code == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "contract_file_invalid" and "json_too_deep" in error["message"]


@pytest.mark.parametrize(
    ("client", "name", "text"),
    [
        ("cursor", "mcp.json", '{"mcpServers":' + nested(1000) + "}"),
        ("cursor", "mcp.json", '{"mcpServers":' + many(100_001) + "}"),
        ("codex", "config.toml", "x = " + nested(5000)),
    ],
    ids=["json-too-deep", "json-too-many-items", "toml-too-deep"],
)
def test_a_client_config_past_the_bounds_is_unparseable(
    tmp_path: Path, client: str, name: str, text: str
) -> None:
    """`herdr-mcp connect --write`: the deep JSON and TOML raised RecursionError before."""
    config = tmp_path / name
    config.write_text(text)
    command = [
        sys.executable,
        "-m",
        "herdr_mcp",
        "connect",
        client,
        "--write",
        "--config",
        str(config),
        "--json",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert json.loads(done.stdout)["error"]["code"] == "config_unparseable", done.stdout
    assert config.read_text() == text  # nothing was changed


class _DeepAnswer(http.server.BaseHTTPRequestHandler):
    """Whatever listens on a port the command line asks: here, a body nested 1,000 deep."""

    def do_GET(self) -> None:
        body = ('{"product":"herdr-mcp-link","x":' + nested(1000) + "}").encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def deep_answering_port() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DeepAnswer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_local_answer_past_the_bounds_is_no_answer(deep_answering_port: int, tmp_path: Path) -> None:
    """`herdr-mcp link status` read the link's /health with `answer.json()`: RecursionError."""
    with local_client(timeout=TIMEOUT_S) as client, pytest.raises(JsonLimitExceeded):
        answer_object(client.get(f"http://127.0.0.1:{deep_answering_port}/health"))
    command = [sys.executable, "-m", "herdr_mcp", "link", "status", "--json"]
    command += ["--config-dir", str(tmp_path / "config"), "--link-port", str(deep_answering_port)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 4, done.stderr
    assert json.loads(done.stdout)["error"]["code"] == "link_unreachable", done.stdout


@pytest.mark.parametrize(
    ("text", "code"), past_bounds(SIM_CONFIG_LIMITS, lambda value: '{"workspaces":' + value + "}")
)
def test_a_simulator_config_past_the_bounds_is_refused(tmp_path: Path, text: str, code: str) -> None:
    path = tmp_path / "sim.json"
    path.write_text(text)
    with pytest.raises(SimConfigError, match=code):
        SimConfig.from_json_file(path)
