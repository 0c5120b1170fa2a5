"""`POST /browser/*` (docs/browser-protocol.md, section 2) against a real uvicorn on loopback and on
the Unix socket, a real simulator and a real state.db: bindings (live workspaces, labels,
deletion, the root-page migration), turn.append / turn.resolve through the continuity journal,
inbox.read / inbox.ack of a scope, and every bad request refused with a stable code."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.state import STATE_SCHEMA
from tests.support.browser_methods_harness import TRANSPORTS, browser_api, call, dispatch
from tests.support.push_harness import two_agent_config
from tests.support.sim_helpers import fast_script, run, short_tmp_dir
from tests.support.waiting import poll_until

BODY_TIMEOUT_S = 90.0
PROJECT = "chatgpt:project:g-p-0123abcd"


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


def test_the_schema_has_the_browser_tables() -> None:
    assert STATE_SCHEMA == 4


@pytest.mark.parametrize("via", TRANSPORTS)
def test_bindings_get_set_list_delete_and_the_root_migration(tmp_short: Path, via: str) -> None:
    async def body() -> None:
        async with browser_api(tmp_short, two_agent_config(tmp_short), via) as (_sim, _rt, client):
            assert await call(client, "binding.get", {"scope": PROJECT}) == (200, {"binding": None})
            status, made = await call(
                client,
                "binding.set",
                {"scope": PROJECT, "workspace_id": "w1", "active_conv_key": "/c/abc-1"},
            )
            assert status == 200
            binding = made["binding"]
            assert {k: binding[k] for k in ("scope", "workspace_id", "label", "active_conv_key")} == {
                "scope": PROJECT,
                "workspace_id": "w1",
                "label": "api",  # from Herdr's live list
                "active_conv_key": "/c/abc-1",
            }
            assert binding["created_at"].endswith("Z") and binding["updated_at"] >= binding["created_at"]
            assert await call(client, "binding.get", {"scope": PROJECT}) == (200, made)

            # A new active conversation: same binding, created_at kept.
            status, moved = await call(
                client,
                "binding.set",
                {"scope": PROJECT, "workspace_id": "w1", "active_conv_key": "/c/def-2"},
            )
            assert moved["binding"]["created_at"] == binding["created_at"]
            assert moved["binding"]["active_conv_key"] == "/c/def-2"

            # A label given by the browser is display only: the live label replaces it on read.
            await call(client, "binding.set", {"scope": "zai:conv:c1", "workspace_id": "w2", "label": "mine"})
            status, got = await call(client, "binding.get", {"scope": "zai:conv:c1"})
            assert got["binding"]["label"] == "web"

            # The root page's pending binding migrates once to the conversation it created.
            await call(client, "binding.set", {"scope": "deepseek:root:tab-7", "workspace_id": "w2"})
            await call(client, "binding.set", {"scope": "deepseek:conv:d-9", "workspace_id": "w2"})
            assert await call(
                client, "binding.set", {"scope": "deepseek:root:tab-7", "workspace_id": None}
            ) == (
                200,
                {"binding": None, "deleted": True},
            )
            assert await call(
                client, "binding.set", {"scope": "deepseek:root:tab-7", "workspace_id": None}
            ) == (
                200,
                {"binding": None, "deleted": False},
            )
            status, listed = await call(client, "binding.list", {})
            assert status == 200
            assert [(b["scope"], b["workspace_id"]) for b in listed["bindings"]] == [
                (PROJECT, "w1"),
                ("deepseek:conv:d-9", "w2"),
                ("zai:conv:c1", "w2"),
            ]

    run(body(), BODY_TIMEOUT_S)


@pytest.mark.parametrize("via", TRANSPORTS)
def test_bad_binding_requests_are_refused_with_stable_codes(tmp_short: Path, via: str) -> None:
    async def body() -> None:
        async with browser_api(tmp_short, two_agent_config(tmp_short), via) as (sim, _rt, client):
            for bad in (
                {"scope": "chatgpt:folder:x", "workspace_id": "w1"},
                {"scope": "chatgpt:conv:", "workspace_id": "w1"},
                {"scope": "chatgpt:conv:a b", "workspace_id": "w1"},
                {"scope": "chatgpt:conv:" + "a" * 201, "workspace_id": "w1"},
                {"scope": "chatgpt:conv:ok"},
                {"scope": "chatgpt:conv:ok", "workspace_id": "w 1"},
                {"scope": "chatgpt:conv:ok", "workspace_id": "w1", "label": "x" * 201},
                {"scope": "chatgpt:conv:ok", "workspace_id": "w1", "active_conv_key": "c/abc"},
                {"scope": "chatgpt:conv:ok", "workspace_id": "w1", "extra": 1},
                {"scope": "chatgpt:conv:ok", "workspace_id": None, "label": "x"},
            ):
                status, answer = await call(client, "binding.set", bad)
                assert (status, answer["error"]["code"]) == (400, "invalid_argument"), bad
                assert answer["error"]["message"]
            status, answer = await call(client, "binding.get", {"scope": 7})
            assert (status, answer["error"]["code"]) == (400, "invalid_argument")
            status, answer = await call(client, "binding.set", {"scope": "zai:conv:z", "workspace_id": "w99"})
            assert (status, answer["error"]["code"]) == (404, "workspace_not_found")
            sim.inject_fault("workspace.list", code="internal_error")
            status, answer = await call(client, "binding.set", {"scope": "zai:conv:z", "workspace_id": "w1"})
            assert (status, answer["error"]["code"]) == (503, "herdr_unavailable")
            # Reading bindings does not need Herdr.
            assert await call(client, "binding.list", {}) == (200, {"bindings": []})
            sim.clear_faults()

            for method, content, kind, expected in (
                ("binding.list", b"{", "application/json", (400, "invalid_json")),
                ("binding.list", b"[]", "application/json", (400, "invalid_json")),
                (
                    "binding.get",
                    b'{"scope": "a", "scope": "b"}',
                    "application/json",
                    (400, "invalid_json"),
                ),
                ("binding.list", b'{"x": NaN}', "application/json", (400, "invalid_json")),
                ("binding.list", b"\xff", "application/json", (400, "invalid_json")),
                ("binding.list", b"{}", "text/plain", (415, "unsupported_media_type")),
                ("binding.list", b" " * (1024 * 1024 + 1), "application/json", (413, "body_too_large")),
                ("no.such", b"{}", "application/json", (404, "unknown_method")),
            ):
                raw = await client.post(f"/browser/{method}", content=content, headers={"content-type": kind})
                assert (raw.status_code, raw.json()["error"]["code"]) == expected, (method, content[:20])
            raw = await client.get("/browser/binding.list")
            assert (raw.status_code, raw.json()["error"]["code"]) == (405, "method_not_allowed")
            # An empty body is an empty object.
            raw = await client.post("/browser/binding.list")
            assert (raw.status_code, raw.json()) == (200, {"bindings": []})

    run(body(), BODY_TIMEOUT_S)


@pytest.mark.parametrize("via", TRANSPORTS)
def test_turn_append_needs_a_binding_and_journals_into_the_bound_chain(tmp_short: Path, via: str) -> None:
    async def body() -> None:
        async with browser_api(tmp_short, two_agent_config(tmp_short), via) as (_sim, _rt, client):
            turn = {
                "scope": PROJECT,
                "conversation_id": "abc-1",
                "turn_key": "msg-1",
                "role": "user",
                "text": "Please run the tests in api.",
            }
            status, answer = await call(client, "turn.append", turn)
            assert (status, answer["error"]["code"]) == (404, "binding_not_found")
            await call(client, "binding.set", {"scope": PROJECT, "workspace_id": "w1"})
            status, first = await call(client, "turn.append", turn)
            assert status == 200, first
            assert first["continuity_id"]
            status, again = await call(client, "turn.append", turn)
            assert again["idempotent_replay"] is True and again["continuity_id"] == first["continuity_id"]
            status, conflict = await call(client, "turn.append", {**turn, "text": "something else"})
            assert (status, conflict["error"]["code"]) == (409, "continuity_turn_conflict")
            status, answer = await call(client, "turn.append", {**turn, "browser_session_ref": PROJECT})
            assert (status, answer["error"]["code"]) == (400, "invalid_argument")
            status, answer = await call(client, "turn.append", {k: v for k, v in turn.items() if k != "role"})
            assert (status, answer["error"]["code"]) == (400, "invalid_argument")

            # The chain is found again by the project (the scope) and by the bound workspace.
            status, resolved = await call(
                client,
                "turn.resolve",
                {"scope": PROJECT, "site": "chatgpt", "project_id": "g-p-0123abcd"},
            )
            assert status == 200, resolved
            assert resolved["status"] == "resolved"
            assert resolved["context"]["continuity_id"] == first["continuity_id"]
            status, by_workspace = await call(client, "turn.resolve", {"workspace_id": "w1"})
            assert by_workspace["status"] == "resolved"
            assert by_workspace["context"]["continuity_id"] == first["continuity_id"]
            status, answer = await call(client, "turn.resolve", {})
            assert (status, answer["error"]["code"]) == (400, "continuity_identity_required")

    run(body(), BODY_TIMEOUT_S)


@pytest.mark.parametrize("via", TRANSPORTS)
def test_inbox_read_and_ack_of_one_scope(tmp_short: Path, via: str) -> None:
    async def body() -> None:
        config = two_agent_config(tmp_short, fast_script())
        async with browser_api(tmp_short, config, via) as (_sim, rt, client):
            mine, other = "chatgpt:conv:mine-1", "zai:conv:other-2"
            await dispatch(rt, mine, "coder")
            await dispatch(rt, other, "reviewer")

            async def unread(scope: str) -> list[dict[str, Any]] | None:
                items: list[dict[str, Any]] = (await call(client, "inbox.read", {"scope": scope}))[1]["items"]
                return items or None

            items = await poll_until(lambda: unread(mine), "the coder's outcome in my inbox")
            assert [(i["outcome"], i["summary"]["agent"]) for i in items] == [("completed", "coder")]
            theirs = await poll_until(lambda: unread(other), "the reviewer's outcome in the other inbox")
            assert [i["summary"]["agent"] for i in theirs] == ["reviewer"]

            status, answer = await call(client, "inbox.read", {"scope": mine, "limit": 1})
            assert status == 200 and answer["scope"] == mine and answer["more"] is False
            # Acknowledging another scope's entry does nothing.
            status, acked = await call(
                client, "inbox.ack", {"scope": mine, "inbox_ids": [theirs[0]["inbox_id"]]}
            )
            assert acked == {"acked": [], "not_acked": [theirs[0]["inbox_id"]]}
            status, acked = await call(
                client, "inbox.ack", {"scope": mine, "inbox_ids": [items[0]["inbox_id"]]}
            )
            assert acked == {"acked": [items[0]["inbox_id"]], "not_acked": []}
            assert (await call(client, "inbox.read", {"scope": mine}))[1]["items"] == []
            assert len((await call(client, "inbox.read", {"scope": other}))[1]["items"]) == 1

            for bad_method, bad in (
                ("inbox.read", {"scope": mine, "limit": 0}),
                ("inbox.read", {"scope": mine, "limit": 101}),
                ("inbox.read", {}),
                ("inbox.ack", {"scope": mine, "inbox_ids": []}),
                ("inbox.ack", {"scope": mine, "inbox_ids": ["1"]}),
                ("inbox.ack", {"scope": mine, "inbox_ids": [0]}),
            ):
                status, answer = await call(client, bad_method, bad)
                assert (status, answer["error"]["code"]) == (400, "invalid_argument"), bad

    run(body(), BODY_TIMEOUT_S)
