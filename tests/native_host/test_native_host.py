"""`herdr-mcp native-host` as Chrome runs it: a real subprocess speaking native messaging frames on
its stdin/stdout, forwarding over a real Unix socket to a runtime stand-in served by uvicorn
(tests/support/native_host_harness.py). docs/browser-protocol.md section 4 is the contract.

The issue's framing table: a reply of 1 MiB + 1 byte arrives whole (chunked), a length of
0xFFFFFFFF is refused without allocating it, a path off the allowlist is refused, closing stdin
ends the host. Then concurrency, cancel, idleness, the bearer, and an unreachable runtime.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.generations import ControlFile, Generation, GenerationStore, StatusFile
from herdr_mcp.layout import Layout
from herdr_mcp.native_host.framing import CHUNK_TEXT_CHARS, MAX_INCOMING_BYTES, MAX_OUTGOING_BYTES
from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.native_host_harness import (
    LENGTH,
    MIB,
    ORIGIN,
    HostProcess,
    StubRuntime,
    native_host,
    short_config_dir,
    socket_of,
    stub_runtime,
)
from tests.support.processes import alive
from tests.support.runtime_harness import make_repo, running_runtime
from tests.support.waiting import wait_until

SCOPE = "chatgpt:conv:abc"


@pytest.fixture
def config() -> Iterator[Path]:
    with short_config_dir() as path:
        yield path


@pytest.fixture
def runtime(config: Path) -> Iterator[StubRuntime]:
    with stub_runtime(config) as stub:
        yield stub


def _binding_get(request_id: str, **body: Any) -> dict[str, Any]:
    return {
        "id": request_id,
        "method": "POST",
        "path": "/browser/binding.get",
        "body": {"scope": SCOPE, **body},
    }


def _events(request_id: str, after: int | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"id": request_id, "method": "GET", "path": "/push/events", "stream": True}
    if after is not None:
        message["query"] = {"after": str(after)}
    return message


def _pad_size_for(request_id: str, reply_bytes: int) -> int:
    """The pad that makes the reply `{"id","status","body":{"pad"}}` exactly `reply_bytes` long."""
    empty = {"id": request_id, "status": 200, "body": {"pad": ""}}
    return reply_bytes - len(json.dumps(empty, separators=(",", ":")))


# -- the framing table ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply_bytes", "frames"), [(MIB - 1, 1), (MIB + 1, 3)], ids=["1MiB-1byte", "1MiB+1byte"]
)
def test_a_reply_of_1_mib_plus_1_byte_arrives_whole(
    config: Path, runtime: StubRuntime, reply_bytes: int, frames: int
) -> None:
    size = _pad_size_for("r1", reply_bytes)
    with native_host(config) as host:
        host.send({"id": "r1", "method": "POST", "path": "/browser/inbox.read", "body": {"size": size}})
        received = host.receive("r1")
    assert received.message == {"id": "r1", "status": 200, "body": {"pad": "x" * size}}
    assert len(json.dumps(received.message, separators=(",", ":"))) == reply_bytes
    assert len(received.frame_sizes) == frames
    assert max(received.frame_sizes) < MAX_OUTGOING_BYTES
    if frames > 1:
        # A chunk frame is its slice (at most 512 KiB) and a small envelope.
        assert max(received.frame_sizes) < CHUNK_TEXT_CHARS + 256


#: The host's address space cap while measured: a 4 GiB allocation cannot happen under it.
ADDRESS_SPACE_CAP = 1024 * MIB


def _rss_after(config: Path, data: bytes) -> tuple[int, int, dict[str, Any] | None, bytes]:
    """Start a host, write `data`, close stdin: its exit status, peak RSS (KiB), first message, stderr."""
    rss_file = config / "rss"
    with native_host(config, measure=(rss_file, ADDRESS_SPACE_CAP)) as host:
        host.send_bytes(data)
        host.close_stdin()
        message = host.message(None) if data else None
        status, _ = host.wait_exit()
        assert host.process.stderr is not None
        return status, int(rss_file.read_text()), message, host.process.stderr.read()


def test_a_length_of_0xffffffff_is_refused_without_allocating(config: Path) -> None:
    baseline_status, baseline_kib, _, _ = _rss_after(config, b"")
    # The announced body never comes: 64 KiB of something else follow the header, and the answer
    # must come without them (a host waiting for 4 GiB would never answer).
    status, refused_kib, message, stderr = _rss_after(config, LENGTH.pack(0xFFFFFFFF) + b"\0" * 65536)
    print(f"peak RSS: a host that only started {baseline_kib} KiB, one refusing 0xFFFFFFFF {refused_kib} KiB")
    assert baseline_status == 0
    assert status == 2
    assert message is not None and message["id"] is None
    assert message["error"]["code"] == "frame_too_large"
    assert stderr.decode().startswith("herdr-mcp: error: frame_too_large: ")
    assert len(stderr.decode().splitlines()) == 1
    # 4 GiB announced; the host grew by less than 8 MiB over one that read nothing at all.
    assert refused_kib < baseline_kib + 8 * 1024


def test_a_request_frame_of_1_mib_is_taken_and_1_byte_more_is_refused(
    config: Path, runtime: StubRuntime
) -> None:
    def frame_of(size: int) -> bytes:
        message = _binding_get("r1", pad="")
        message["body"]["pad"] = "y" * (size - len(json.dumps(message).encode()))
        payload = json.dumps(message).encode()
        assert len(payload) == size
        return payload

    with native_host(config) as host:
        host.send_raw(frame_of(MAX_INCOMING_BYTES))
        reply = host.message("r1")
        assert reply["status"] == 200
        assert reply["body"]["echo"]["pad"] == "y" * (
            MAX_INCOMING_BYTES - len(json.dumps(_binding_get("r1", pad="")))
        )
    with native_host(config) as host:
        host.send_raw(frame_of(MAX_INCOMING_BYTES + 1))
        assert host.message(None)["error"]["code"] == "frame_too_large"
        assert host.wait_exit()[0] == 2
    assert [path for _, path, _ in runtime.seen] == ["/browser/binding.get"]


def test_paths_off_the_allowlist_are_refused_and_never_reach_the_runtime(
    config: Path, runtime: StubRuntime
) -> None:
    refused: list[dict[str, Any]] = [
        {"id": "a", "method": "POST", "path": "/health"},
        {"id": "b", "method": "GET", "path": "/browser/binding.get"},
        {"id": "c", "method": "POST", "path": "/browser/../mcp", "body": {}},
        {"id": "d", "method": "DELETE", "path": "/mcp"},
        {"id": "e", "method": "POST", "path": "/push/state"},
        {"id": "f", "method": "POST", "path": "//evil.example/mcp"},
    ]
    with native_host(config) as host:
        for message in refused:
            host.send(message)
        for message in refused:
            assert host.message(message["id"])["error"]["code"] == "path_not_allowed"
        host.send(_binding_get("ok"))
        assert host.message("ok")["status"] == 200
    assert runtime.seen == [("POST", "/browser/binding.get", True)]


def test_invalid_frames_are_answered_and_the_host_goes_on(config: Path, runtime: StubRuntime) -> None:
    with native_host(config) as host:
        host.send_raw(b"not json")
        assert host.message(None)["error"]["code"] == "invalid_request"
        host.send_raw(b"")
        assert host.message(None)["error"]["code"] == "invalid_request"
        host.send({"id": "r1", "method": "GET", "path": "/push/state", "body": {"x": 1}})
        assert host.message("r1")["error"]["code"] == "invalid_request"
        host.send({"id": "r2", "method": "GET", "path": "/push/state"})
        assert host.message("r2") == {"id": "r2", "status": 200, "body": {"seq": 7, "workspaces": []}}


@pytest.mark.parametrize("busy", ["nothing", "an open stream", "a call in flight"])
def test_closing_stdin_ends_the_host(config: Path, runtime: StubRuntime, busy: str) -> None:
    with native_host(config) as host:
        if busy == "an open stream":
            host.send(_events("s1"))
            assert host.message("s1")["event"] == "hello"
        elif busy == "a call in flight":
            host.send({"id": "h1", "method": "POST", "path": "/browser/turn.resolve", "body": {}})
            wait_until(lambda: runtime.held == 1, "the call to reach the runtime")
        host.close_stdin()
        assert host.wait_exit()[0] == 0


# -- streams and concurrency ------------------------------------------------------------------


def test_streams_and_requests_interleave(config: Path, runtime: StubRuntime) -> None:
    with native_host(config) as host:
        host.send(_events("s1", after=41))
        host.send(_events("s2"))
        assert host.message("s1") == {"id": "s1", "event": "hello", "data": {"protocol": 1, "after": "41"}}
        assert host.message("s2")["event"] == "hello"
        wait_until(lambda: len(runtime.subscribers) == 2, "both streams to be open at the runtime")
        # A call the runtime holds: everything below is answered while it waits.
        host.send({"id": "held", "method": "POST", "path": "/browser/turn.resolve", "body": {}})
        wait_until(lambda: runtime.held == 1, "the held call to reach the runtime")
        for seq in range(42, 52):
            runtime.push("agent_settled", seq, {"seq": seq, "workspace_id": "w1", "workspace_working": False})
            host.send(_binding_get(f"r{seq}", n=seq))
        for seq in range(42, 52):
            assert host.message(f"r{seq}")["body"]["echo"] == {"scope": SCOPE, "n": seq}
        for stream in ("s1", "s2"):
            seqs = [host.message(stream)["data"]["seq"] for _ in range(42, 52)]
            assert seqs == list(range(42, 52)), stream
        runtime.release()
        assert host.message("held") == {"id": "held", "status": 200, "body": {"released": True}}
        runtime.end_streams()
        assert host.message("s1") == {"id": "s1", "end": True}
        assert host.message("s2") == {"id": "s2", "end": True}


def test_cancel_ends_a_stream_once(config: Path, runtime: StubRuntime) -> None:
    with native_host(config) as host:
        host.send(_events("s1"))
        assert host.message("s1")["event"] == "hello"
        host.send({"id": "s1", "cancel": True})
        assert host.message("s1") == {"id": "s1", "end": True}
        wait_until(lambda: runtime.streams_closed == 1, "the runtime to see the stream closed")
        host.send({"id": "s1", "cancel": True})
        host.send(_binding_get("after"))
        assert host.message("after")["status"] == 200
        assert [item.message for item in host.held] == []
        # The id is free again: a new stream may take it.
        host.send(_events("s1"))
        assert host.message("s1")["event"] == "hello"


def test_an_id_in_flight_is_not_taken_twice(config: Path, runtime: StubRuntime) -> None:
    with native_host(config) as host:
        host.send(_events("s1"))
        assert host.message("s1")["event"] == "hello"
        host.send(_binding_get("s1"))
        assert host.message("s1")["error"]["code"] == "invalid_request"


def test_idle_ends_the_host_only_with_nothing_open(config: Path, runtime: StubRuntime) -> None:
    with native_host(config, "--idle-timeout", "0.5") as host:
        host.send(_binding_get("r1"))
        assert host.message("r1")["status"] == 200
        assert host.wait_exit()[0] == 0
    assert "idle for" in (config / "native-host" / "host.log").read_text()
    with native_host(config, "--idle-timeout", "0.5") as host:
        host.send(_events("s1"))
        assert host.message("s1")["event"] == "hello"
        time.sleep(1.5)  # the window in which an idle exit must not happen: three idle periods
        assert alive(host.process.pid)
        host.send({"id": "s1", "cancel": True})
        assert host.message("s1")["end"] is True
        assert host.wait_exit()[0] == 0


# -- the bearer and the runtime ---------------------------------------------------------------


def _everything_the_host_wrote(host: HostProcess, config: Path) -> bytes:
    assert host.process.stderr is not None
    logs = b"".join(path.read_bytes() for path in (config / "native-host").glob("host.log*"))
    return bytes(host.raw) + host.process.stderr.read() + logs


def test_the_bearer_never_leaves_the_host(config: Path, runtime: StubRuntime) -> None:
    token = runtime.token
    with native_host(config) as host:
        host.send(_binding_get("r1"))
        host.send(_events("s1"))
        host.send({"id": "r2", "method": "POST", "path": "/mcp", "body": {"jsonrpc": "2.0", "id": 1}})
        host.send({"id": "r3", "method": "POST", "path": "/browser/inbox.read", "body": {"size": MIB}})
        host.send({"id": "bad", "method": "POST", "path": "/health"})
        for request_id in ("r1", "s1", "r2", "r3", "bad"):
            host.message(request_id)
        # The runtime now wants another bearer: its refusals come back, still without ours.
        runtime.token = "another-token-" + "z" * 32
        host.send(_binding_get("r4"))
        assert host.message("r4") == {
            "id": "r4",
            "status": 401,
            "body": {"error": {"code": "unauthorized", "message": "bearer required"}},
        }
        host.send(_events("s2"))
        end = host.message("s2")
        assert end["end"] is True and end["error"]["code"] == "unauthorized" and end["error"]["status"] == 401
        host.close_stdin()
        assert host.wait_exit()[0] == 0
        written = _everything_the_host_wrote(host, config)
    assert [ok for _, _, ok in runtime.seen][:4] == [True, True, True, True]
    assert token.encode() not in written
    assert b"Bearer" not in bytes(host.raw)
    assert len(host.raw) > MIB


def test_no_runtime_is_runtime_unavailable(config: Path) -> None:
    with native_host(config) as host:
        host.send(_binding_get("r1"))
        reply = host.message("r1")
        assert reply["error"]["code"] == "runtime_unavailable"
        assert str(socket_of(config)) in reply["error"]["message"]
        host.send(_events("s1"))
        end = host.message("s1")
        assert end["end"] is True and end["error"]["code"] == "runtime_unavailable"
        # A socket file nobody listens on (a runtime that died without removing it).
        socket_of(config).parent.mkdir(mode=0o700)
        with socket.socket(socket.AF_UNIX) as stale:
            stale.bind(str(socket_of(config)))
        host.send(_binding_get("r2"))
        reply = host.message("r2")
        assert reply["error"]["code"] == "runtime_unavailable", reply
        # No token file: refused before connecting, naming the file, not a token.
        host.send(_binding_get("r3"))
        assert "token" in host.message("r3")["error"]["message"]


def test_the_socket_and_token_are_resolved_again_for_each_request(config: Path) -> None:
    with native_host(config) as host:
        with stub_runtime(config) as first:
            host.send(_binding_get("r1"))
            assert host.message("r1")["status"] == 200
        # Another runtime on the socket with another token: the next request goes to it with it.
        (config / "token").unlink()
        with stub_runtime(config) as second:
            assert second.token != first.token
            host.send(_binding_get("r2"))
            assert host.message("r2")["status"] == 200
        assert first.seen == [("POST", "/browser/binding.get", True)]
        assert second.seen == [("POST", "/browser/binding.get", True)]


def test_an_a_b_switch_is_followed_without_restarting_the_host(config: Path) -> None:
    """Two generations, each on its socket with its own token file; the status file's switch from
    A to B moves the next request and the next stream to B (docs/browser-protocol.md section 1)."""
    layout = Layout(config)
    store = GenerationStore.in_dir(layout.generations_dir)
    token_b = config / "token-b"
    generations = (
        Generation("gen-a", "http://127.0.0.1:1"),
        Generation("gen-b", "http://127.0.0.1:2", token_file=str(token_b)),
    )
    with store.locked():
        store.write_control_locked(ControlFile(generations=generations), expected_revision=0)
        store.write_status_locked(StatusFile(active="gen-a"))
    with (
        stub_runtime(config, socket=layout.generation_socket("gen-a")) as a,
        stub_runtime(config, socket=layout.generation_socket("gen-b"), token_file=token_b) as b,
        native_host(config) as host,
    ):
        assert a.token != b.token
        host.send(_events("s1"))
        assert host.message("s1")["event"] == "hello"
        host.send(_binding_get("r1"))
        assert host.message("r1")["status"] == 200
        with store.locked():
            store.write_status_locked(StatusFile(active="gen-b", previous="gen-a"))
        host.send(_binding_get("r2"))
        assert host.message("r2")["status"] == 200
        host.send(_events("s2"))
        assert host.message("s2")["event"] == "hello"
        assert (len(a.subscribers), len(b.subscribers)) == (1, 1)
    assert a.seen == [("GET", "/push/events", True), ("POST", "/browser/binding.get", True)]
    assert b.seen == [("POST", "/browser/binding.get", True), ("GET", "/push/events", True)]


@pytest.mark.slow
def test_through_the_real_runtime_and_its_socket(config: Path) -> None:
    """`herdr-mcp serve` on the Herdr simulator, listening on its Unix socket: the host forwards
    the browser's methods and the push stream to it with the bearer of the config dir."""
    repo = make_repo(config / "repo", {"README.md": b"# demo\n"})
    runtime_config = config / "config"
    with (
        SimulatorThread(SimConfig.for_roots([repo]), config / "herdr.sock"),
        running_runtime(config / "herdr.sock", runtime_config) as runtime,
        native_host(runtime_config) as host,
    ):
        host.send({"id": "state", "method": "GET", "path": "/push/state"})
        state = host.message("state")
        assert state["status"] == 200
        workspace = state["body"]["workspaces"][0]["workspace_id"]
        host.send(_events("s1", after=0))
        hello = host.message("s1")
        assert hello["event"] == "hello" and hello["data"]["protocol"] == 1
        binding = {"scope": SCOPE, "workspace_id": workspace}
        host.send({"id": "set", "method": "POST", "path": "/browser/binding.set", "body": binding})
        assert host.message("set")["status"] == 200
        host.send(_binding_get("get"))
        got = host.message("get")
        assert got["status"] == 200
        assert (got["body"]["binding"]["scope"], got["body"]["binding"]["workspace_id"]) == (SCOPE, workspace)
        host.send({"id": "unknown", "method": "POST", "path": "/browser/binding.get", "body": {"scope": "x"}})
        refused = host.message("unknown")
        assert refused["status"] == 400 and refused["body"]["error"]["code"] == "invalid_argument"
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        host.send({"id": "mcp", "method": "POST", "path": "/mcp", "body": initialize})
        answer = host.message("mcp")
        assert answer["status"] == 200 and answer["body"]["result"]["serverInfo"]["name"] == "herdr-mcp"
        host.send({"id": "s1", "cancel": True})
        assert host.message("s1") == {"id": "s1", "end": True}
        host.close_stdin()
        assert host.wait_exit()[0] == 0
    assert runtime.token.encode() not in bytes(host.raw)


def test_chrome_s_windows_argument_is_taken(config: Path, runtime: StubRuntime) -> None:
    with native_host(config, "--parent-window=0") as host:
        host.send(_binding_get("r1"))
        assert host.message("r1")["status"] == 200


def test_the_log_is_private_and_under_the_config_dir(config: Path, runtime: StubRuntime) -> None:
    with native_host(config) as host:
        host.send(_binding_get("r1"))
        assert host.message("r1")["status"] == 200
        host.close_stdin()
        host.wait_exit()
        assert host.process.stderr is not None and host.process.stderr.read() == b""
    log = config / "native-host" / "host.log"
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    text = log.read_text()
    assert f"started for {ORIGIN}" in text
    assert "r1 POST /browser/binding.get -> 200 in " in text
