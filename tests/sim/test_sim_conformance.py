"""Every answer and every pushed event of the simulator is what real Herdr sends, at 20 and 22.

A broad session through the recording proxy (tests/support/herdr_wire.py): every method the simulator
implements, called with valid params, plus error cases; a subscription to every subscription type
the protocol has runs alongside. Each answer is checked with the reference of the simulator's
protocol (`response_problems(method, answer, strict=True)`), each event with `event_problems`,
each request we sent with `request_problems` (so the session itself speaks Herdr). Refused lines
(an unknown method, ill-typed params) must be Herdr's `{"id": "", "error": {"code":
"invalid_request"}}`. When a check finds a problem it is the simulator that changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.herdr.reference import ProtocolReference, load
from herdr_mcp.sim import AgentConfig, PaneConfig, SimConfig, Simulator, TabConfig, WorkspaceConfig
from tests.support.herdr_wire import RecordingProxy
from tests.support.sim_helpers import FAST_TIME_SCALE, fast_script, run, short_tmp_dir
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.timeout(90)

NEW_AT_22 = ("pane.scroll", "pane.selection.read", "pane.copy_motion", "pane.copy_search", "integration.list")


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


def _config(base: Path, protocol: int) -> SimConfig:
    repo, web = base / "repo", base / "web"
    repo.mkdir()
    web.mkdir()
    for args in (
        ["init", "-q", "-b", "main"],
        ["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "x"],
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    script = fast_script()
    return SimConfig(
        (
            WorkspaceConfig(
                cwd=repo,
                label="repo",
                tabs=(
                    TabConfig(
                        label="main",
                        panes=(
                            PaneConfig(label="shell"),
                            PaneConfig(label="coder", agent=AgentConfig("coder", "claude", script=script)),
                        ),
                    ),
                ),
            ),
            WorkspaceConfig(
                cwd=web,
                label="web",
                tabs=(TabConfig(panes=(PaneConfig(agent=AgentConfig("reviewer", "codex")),)),),
            ),
        ),
        protocol=protocol,
        time_scale=FAST_TIME_SCALE,
    )


class Session:
    """Raw Herdr calls through the proxy: one connection per request, the whole answer back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        self.refused: list[dict[str, Any]] = []

    async def line(self, text: str) -> dict[str, Any]:
        reader, writer = await asyncio.open_unix_connection(str(self.path))
        try:
            writer.write(text.encode() + b"\n")
            await writer.drain()
            answer: dict[str, Any] = json.loads(await reader.readline())
            return answer
        finally:
            writer.close()

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.count += 1
        request = {"id": f"c{self.count}", "method": method, "params": params or {}}
        return await self.line(json.dumps(request))

    async def ok(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = await self.call(method, params)
        assert "result" in answer, (method, params, answer)
        result: dict[str, Any] = answer["result"]
        return result

    async def fails(self, method: str, params: dict[str, Any], code: str) -> None:
        answer = await self.call(method, params)
        assert answer.get("error", {}).get("code") == code, (method, params, answer)

    async def refused_line(self, text: str) -> None:
        answer = await self.line(text)
        self.refused.append(answer)
        assert answer["id"] == "" and answer["error"]["code"] == "invalid_request", (text, answer)


def _subscriptions(reference: ProtocolReference) -> list[dict[str, Any]]:
    """One subscription of every type the protocol has (pane-filtered ones on w1's panes)."""
    out: list[dict[str, Any]] = []
    for kind in reference.subscription_types:
        if kind == "pane.agent_status_changed":
            out.append({"type": kind, "pane_id": "w1:p2"})
        elif kind == "pane.output_matched":
            out.append(
                {
                    "type": kind,
                    "pane_id": "w1:p1",
                    "source": "recent",
                    "match": {"type": "substring", "value": "sim-"},
                }
            )
        elif kind == "pane.scroll_changed":
            out.append({"type": kind, "pane_id": "w1:p1"})
        else:
            out.append({"type": kind})
    return out


async def _session(sim: Simulator, s: Session, protocol: int, base: Path) -> None:
    repo = str(base / "repo")
    # -- reads of the configured session
    await s.ok("ping")
    snapshot = (await s.ok("session.snapshot"))["snapshot"]
    assert [p["pane_id"] for p in snapshot["panes"]] == ["w1:p1", "w1:p2", "w2:p1"]
    for method, params in (
        ("workspace.list", {}),
        ("workspace.get", {"workspace_id": "w1"}),
        ("tab.list", {"workspace_id": "w1"}),
        ("tab.get", {"tab_id": "w1:t1"}),
        ("pane.list", {}),
        ("pane.get", {"pane_id": "w1:p1"}),
        ("pane.current", {}),
        ("pane.layout", {"pane_id": "w1:p1"}),
        ("pane.process_info", {"pane_id": "w1:p1"}),
        ("pane.neighbor", {"pane_id": "w1:p1", "direction": "right"}),
        ("pane.edges", {"pane_id": "w1:p1"}),
        ("pane.graphics.info", {"pane_id": "w1:p1"}),
        ("layout.export", {"tab_id": "w1:t1"}),
        ("agent.list", {}),
        ("agent.get", {"target": "coder"}),
        ("agent.read", {"target": "coder", "source": "recent", "lines": 10}),
        ("agent.explain", {"target": "coder"}),
        ("plugin.list", {}),
        ("plugin.action.list", {}),
        ("plugin.log.list", {"limit": 5}),
        ("worktree.list", {"workspace_id": "w1"}),
        ("notification.show", {"title": "hi", "body": "there"}),
        ("client.window_title.set", {"title": "sim"}),
        ("client.window_title.clear", {}),
        ("popup.close", {}),
    ):
        await s.ok(method, params)
    # -- a real shell: type, wait, read
    await s.ok(
        "pane.send_text",
        {"pane_id": "w1:p1", "text": "for i in 1 2 3; do echo sim-$i word_x; done; seq 1 40"},
    )
    await s.ok("pane.send_keys", {"pane_id": "w1:p1", "keys": ["Enter"]})
    await s.ok(
        "pane.wait_for_output",
        {
            "pane_id": "w1:p1",
            "source": "recent",
            "match": {"type": "regex", "value": "^sim-3"},
            "timeout_ms": 10000,
        },
    )
    await s.ok("pane.send_input", {"pane_id": "w1:p1", "text": "echo more", "keys": ["Enter"]})
    for source in ("visible", "recent", "recent_unwrapped", "detection"):
        await s.ok("pane.read", {"pane_id": "w1:p1", "source": source, "format": "text"})
    await s.ok("pane.read", {"pane_id": "w1:p1", "source": "recent", "format": "ansi", "strip_ansi": False})
    # -- agents
    prompted = await s.ok(
        "agent.prompt", {"target": "coder", "text": "go", "wait": {"until": ["done"], "timeout_ms": 10000}}
    )
    assert prompted["agent"]["agent_status"] == "done"
    await s.ok("agent.wait", {"target": "coder", "until": ["done", "idle"], "timeout_ms": 3000})
    await s.ok("agent.prompt", {"target": "reviewer", "text": "look"})
    await s.ok("agent.send_keys", {"target": "reviewer", "keys": ["a"]})
    await s.ok("agent.rename", {"target": "reviewer", "name": "checker"})
    await s.ok("agent.focus", {"target": "checker"})
    await s.ok(
        "events.wait",
        {
            "match_event": {"event": "pane_agent_status_changed", "pane_id": "w1:p2", "agent_status": "done"},
            "timeout_ms": 5000,
        },
    )
    await s.ok(
        "pane.report_agent",
        {"pane_id": "w1:p1", "source": "hook", "agent": "claude", "state": "working", "seq": 1},
    )
    await s.ok(
        "pane.report_agent", {"pane_id": "w1:p1", "source": "hook", "agent": "claude", "state": "idle"}
    )
    await s.ok(
        "pane.report_agent_session",
        {"pane_id": "w1:p1", "source": "hook", "agent": "claude", "agent_session_id": "s1"},
    )
    await s.ok(
        "pane.report_metadata",
        {"pane_id": "w1:p1", "source": "hook", "title": "building", "tokens": {"k": "v"}},
    )
    await s.ok("pane.clear_agent_authority", {"pane_id": "w1:p1", "source": "hook"})
    await s.ok("pane.release_agent", {"pane_id": "w1:p1", "source": "hook", "agent": "claude"})
    await s.ok(
        "workspace.report_metadata", {"workspace_id": "w1", "source": "hook", "tokens": {"branch": "main"}}
    )
    # -- workspaces, tabs, panes, layouts
    created = await s.ok("workspace.create", {"cwd": repo, "label": "extra", "focus": True})
    ws = created["workspace"]["workspace_id"]
    await s.ok("workspace.rename", {"workspace_id": ws, "label": "extra2"})
    await s.ok("workspace.focus", {"workspace_id": "w1"})
    await s.ok("workspace.move", {"workspace_id": ws, "insert_index": 0})
    await s.ok("workspace.move_block", {"workspace_ids": [ws], "before_workspace_id": "w2"})
    tab = await s.ok("tab.create", {"workspace_id": ws, "label": "second"})
    tab_id = tab["tab"]["tab_id"]
    await s.ok("tab.rename", {"tab_id": tab_id, "label": "two"})
    await s.ok("tab.focus", {"tab_id": tab_id})
    await s.ok("tab.move", {"tab_id": tab_id, "insert_index": 0})
    split = await s.ok(
        "pane.split", {"target_pane_id": "w1:p1", "direction": "down", "ratio": 0.4, "focus": True}
    )
    new_pane = split["pane"]["pane_id"]
    await s.ok("pane.rename", {"pane_id": new_pane, "label": "logs"})
    await s.ok("pane.focus", {"pane_id": "w1:p1"})
    await s.ok("pane.input.set", {"pane_id": new_pane, "right_click": "pane"})
    await s.ok("pane.zoom", {"pane_id": "w1:p1", "mode": "on"})
    await s.ok("pane.zoom", {"pane_id": "w1:p1", "mode": "off"})
    await s.ok("pane.resize", {"pane_id": "w1:p1", "direction": "down", "amount": 0.1})
    await s.ok("pane.swap", {"source_pane_id": "w1:p1", "target_pane_id": new_pane})
    await s.ok("pane.focus_direction", {"pane_id": "w1:p1", "direction": "up"})
    await s.ok("layout.set_split_ratio", {"tab_id": "w1:t1", "path": [], "ratio": 0.6})
    exported = (await s.ok("layout.export", {"tab_id": "w1:t1"}))["layout"]
    await s.ok("layout.apply", {"workspace_id": ws, "root": exported["root"], "tab_label": "copy"})
    await s.ok(
        "pane.graphics.set",
        {"pane_id": "w1:p1", "format": "png", "image_width": 1, "image_height": 1, "data_base64": "AA=="},
    )
    await s.ok("pane.graphics.clear", {"pane_id": "w1:p1"})
    # pane.move: to another tab of its workspace, its own tab, a new tab, another workspace, a new one
    home = (await s.ok("tab.create", {"workspace_id": "w1", "label": "home"}))["tab"]["tab_id"]

    async def move(destination: dict[str, Any], **extra: Any) -> dict[str, Any]:
        answer = await s.ok("pane.move", {"pane_id": new_pane, "destination": destination, **extra})
        result: dict[str, Any] = answer["move_result"]
        return result

    moved = await move({"type": "tab", "tab_id": home, "split": "right"})
    assert (moved["changed"], moved["pane"]["pane_id"], moved["pane"]["tab_id"]) == (True, new_pane, home)
    same = await move({"type": "tab", "tab_id": home, "split": "down"})
    assert (same["changed"], same["reason"]) == (False, "same_tab")
    own = await move({"type": "new_tab", "label": "alone"})
    assert own["pane"]["pane_id"] == new_pane and own["created_tab"]["label"] == "alone"
    away = await move({"type": "tab", "tab_id": tab_id, "split": "down", "ratio": 0.3}, focus=True)
    assert away["closed_tab_id"] == own["pane"]["tab_id"] and away["pane"]["workspace_id"] == ws
    assert away["pane"]["pane_id"] != new_pane
    alias = await s.ok("pane.get", {"pane_id": new_pane})  # the old id resolves to the moved pane
    assert alias["pane"]["pane_id"] == away["pane"]["pane_id"]
    fresh = await move({"type": "new_workspace", "label": "moved", "tab_label": "t"})
    assert fresh["created_workspace"]["workspace_id"] == fresh["pane"]["workspace_id"]
    # agent.start in a new shell pane
    start_pane = (await s.ok("pane.split", {"target_pane_id": "w1:p1", "direction": "right"}))["pane"][
        "pane_id"
    ]
    await s.ok("agent.start", {"pane_id": start_pane, "kind": "claude", "name": "helper", "timeout_ms": 5000})
    # worktrees
    made = await s.ok("worktree.create", {"workspace_id": "w1", "branch": "feature"})
    await s.ok("worktree.open", {"workspace_id": "w1", "branch": "feature"})
    await s.ok("worktree.remove", {"workspace_id": made["workspace"]["workspace_id"], "force": True})
    # -- protocol 22's viewport and copy methods
    if protocol >= 22:
        scrolled = await s.ok("pane.scroll", {"pane_id": "w1:p1", "offset_from_bottom": 0})
        assert scrolled["pane"]["scroll"]["offset_from_bottom"] == 0
        rows = (await s.ok("pane.read", {"pane_id": "w1:p1", "source": "recent"}))["read"]["text"].split("\n")
        row = next(
            i
            for i, text in enumerate(sim.world.text_rows(sim.world.panes["w1:p1"]))
            if text.startswith("sim-1")
        )
        assert rows
        selection = await s.ok(
            "pane.selection.read",
            {"pane_id": "w1:p1", "anchor": {"row": row, "col": 0}, "cursor": {"row": row, "col": 4}},
        )
        assert selection["text"] == "sim-1"
        for motion in reference_motions():
            await s.ok(
                "pane.copy_motion", {"pane_id": "w1:p1", "cursor": {"row": row, "col": 0}, "motion": motion}
            )
        word = await s.ok(
            "pane.copy_motion",
            {"pane_id": "w1:p1", "cursor": {"row": row, "col": 0}, "motion": "next_word_start"},
        )
        assert word["cursor"] == {"row": row, "col": 3}  # `sim` | `-` | `1`
        revision = word["content_revision"]
        found = await s.ok(
            "pane.copy_search",
            {
                "pane_id": "w1:p1",
                "content_revision": revision,
                "cursor": {"row": 0, "col": 0},
                "direction": "forward",
                "query": "word_x",
            },
        )
        assert found["total"] >= 3 and "current" in found
        await s.ok(
            "pane.copy_search",
            {
                "pane_id": "w1:p1",
                "content_revision": revision,
                "cursor": {"row": row, "col": 0},
                "direction": "backward",
                "query": "nothing-like-this",
            },
        )
        integrations = await s.ok("integration.list")
        assert len(integrations["integrations"]) == 17
        await s.fails("client_shell.surface.set", {"active": True}, "connection_local_only")
        for method, params in (
            ("command.invoke", {"command_id": "x"}),
            ("pane.edit_scrollback", {"pane_id": "w1:p1"}),
            ("pane.link.activate", {"pane_id": "w1:p1", "viewport_row": 0, "col": 0}),
            ("product_announcement.dismiss", {"id": "a", "version": "0.9.2"}),
            ("release_notes.dismiss", {"version": "0.9.2"}),
        ):
            await s.fails(method, params, "not_implemented")
    else:
        for method in NEW_AT_22:
            await s.refused_line(json.dumps({"id": "x", "method": method, "params": {"pane_id": "w1:p1"}}))
    # -- errors
    await s.fails("pane.get", {"pane_id": "w9:p9"}, "pane_not_found")
    await s.fails("tab.get", {"tab_id": "w9:t9"}, "tab_not_found")
    await s.fails("workspace.get", {"workspace_id": "w9"}, "workspace_not_found")
    await s.fails("agent.get", {"target": "nobody"}, "agent_not_found")
    await s.fails("agent.prompt", {"target": "coder", "text": ""}, "empty_agent_prompt")
    await s.fails("agent.wait", {"target": "coder", "until": ["working"], "timeout_ms": 50}, "timeout")
    await s.fails("pane.send_keys", {"pane_id": "w1:p1", "keys": ["NoSuchKey"]}, "invalid_key")
    await s.fails(
        "events.wait",
        {
            "match_event": {
                "event": "pane_agent_status_changed",
                "pane_id": "w1:p2",
                "agent_status": "blocked",
            },
            "timeout_ms": 50,
        },
        "timeout",
    )
    await s.fails(
        "pane.move",
        {"pane_id": "w1:p1", "destination": {"type": "tab", "tab_id": "w9:t1", "split": "right"}},
        "tab_not_found",
    )
    await s.fails(
        "layout.set_split_ratio",
        {"tab_id": "w1:t1", "path": [True, True, True], "ratio": 0.5},
        "split_not_found",
    )
    await s.fails("plugin.action.invoke", {"action_id": "nope"}, "plugin_not_found")
    for method, params in (
        ("server.stop", {}),
        ("server.reload_config", {}),
        ("server.agent_manifests", {}),
        ("server.reload_agent_manifests", {}),
        ("integration.install", {"target": "claude"}),
        ("integration.uninstall", {"target": "claude"}),
        ("plugin.link", {"path": str(base)}),
        ("plugin.unlink", {"plugin_id": "p"}),
        ("plugin.enable", {"plugin_id": "p"}),
        ("plugin.disable", {"plugin_id": "p"}),
        ("agent.view.set", {"source": "mine"}),
        ("agent.view.clear", {}),
        ("pane.graphics.stream", {"pane_id": "w1:p1"}),
    ):
        await s.fails(method, params, "not_implemented")
    for method, params in (
        ("plugin.pane.open", {"plugin_id": "p", "entrypoint": "main"}),
        ("plugin.pane.focus", {"pane_id": "w1:p1"}),
        ("plugin.pane.close", {"pane_id": "w1:p1"}),
    ):
        await s.fails(method, params, "plugin_not_found")
    await s.fails("server.live_handoff", {}, "unsupported_in_app_mode")
    await s.fails(
        "pane.wait_for_output",
        {"pane_id": "w1:p1", "source": "recent", "match": {"type": "regex", "value": "("}, "timeout_ms": 50},
        "invalid_regex",
    )
    # Refused lines: Herdr's serde (src/api/server.rs) answers an empty id and invalid_request.
    await s.refused_line("not json")
    await s.refused_line(json.dumps({"id": "r", "method": "no.such.method", "params": {}}))
    await s.refused_line(json.dumps({"id": "r", "method": "pane.get"}))
    await s.refused_line(json.dumps({"id": "r", "method": "pane.get", "params": {"pane_id": 7}}))
    await s.refused_line(
        json.dumps(
            {
                "id": "r",
                "method": "pane.read",
                "params": {"pane_id": "w1:p1", "source": "recent", "lines": 2**32},
            }
        )
    )
    await s.refused_line(
        json.dumps({"id": "r", "method": "pane.zoom", "params": {"focus": None, "mode": "sideways"}})
    )
    # Unknown params are ignored (Herdr's params structs do not deny unknown fields).
    await s.ok("pane.get", {"pane_id": "w1:p1", "whatever": [1, 2]})
    # -- closing
    await s.ok("pane.close", {"pane_id": start_pane})
    await s.ok("tab.close", {"tab_id": tab_id})
    await s.ok("tab.close", {"tab_id": home})
    await s.ok("workspace.close", {"workspace_id": ws})


@pytest.mark.parametrize("protocol", [20, 22])
def test_every_answer_and_event_of_the_simulator_is_valid(tmp_short: Path, protocol: int) -> None:
    reference = load(protocol)

    async def body() -> tuple[RecordingProxy, Session]:
        simulator = Simulator(_config(tmp_short, protocol), tmp_short / "herdr.sock")
        await simulator.start()
        try:
            async with RecordingProxy(simulator.socket_path, tmp_short / "proxy.sock") as proxy:
                session = Session(proxy.socket_path)
                reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
                request = {
                    "id": "feed",
                    "method": "events.subscribe",
                    "params": {"subscriptions": _subscriptions(reference)},
                }
                writer.write((json.dumps(request) + "\n").encode())
                await writer.drain()
                ack = json.loads(await reader.readline())
                assert ack == {"id": "feed", "result": {"type": "subscription_started"}}, ack
                drain = asyncio.ensure_future(_drain(reader))
                try:
                    await _session(simulator, session, protocol, tmp_short)
                    feed = proxy.connections[0]
                    kinds = {k.replace(".", "_") for k in reference.subscription_types}
                    expected = sum(1 for e in simulator.hub.events_after(0) if e.event in kinds)
                    # The feed is polled one event per subscription per poll: wait for it to catch up.
                    await wait_until_async(
                        lambda: sum(1 for e in feed.events if "." not in e["event"]) >= expected * 0.9,
                        "the subscription to deliver the session's lifecycle events",
                    )
                finally:
                    writer.close()
                    drain.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await drain
            return proxy, session
        finally:
            await simulator.stop()

    proxy, _session_used = run(body(), timeout=80)
    problems: list[str] = []
    answers = events = 0
    methods: set[str] = set()
    for connection in proxy.connections:
        request = connection.request
        refused = any(a.get("id") == "" for a in connection.answers)
        if request is not None and not refused:
            methods.add(connection.method)
            problems += [f"request {request}: {p}" for p in reference.request_problems(request)]
        for answer in connection.answers:
            answers += 1
            method = connection.method if not refused else "ping"  # a refusal answers no method
            problems += [
                f"answer to {connection.method} {json.dumps(answer)[:300]}: {p}"
                for p in reference.response_problems(method, answer, strict=True)
            ]
        for event in connection.events:
            events += 1
            problems += [
                f"event {json.dumps(event)[:300]}: {p}" for p in reference.event_problems(event, strict=True)
            ]
    kinds = sorted({e["event"] for c in proxy.connections for e in c.events})
    print(f"protocol {protocol}: {len(methods)} methods, {answers} answers, {events} events {kinds}")
    untested = sorted(set(reference.methods) - methods)
    assert not untested, f"methods the session does not call: {untested}"
    assert not problems, "\n".join(problems[:60])
    assert events >= 40
    if protocol >= 22:
        assert set(NEW_AT_22) <= methods
    assert {"pane.scroll_changed", "pane.output_matched", "pane.agent_status_changed", "pane_moved"} <= set(
        kinds
    )


def reference_motions() -> list[str]:
    """Every PaneCopyMotion of protocol 22's schema."""
    schema = load(22).methods["pane.copy_motion"].params_schema
    return list(schema["$defs"]["PaneCopyMotion"]["enum"])


async def _drain(reader: asyncio.StreamReader) -> None:
    while await reader.readline():
        pass
