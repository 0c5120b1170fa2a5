"""`POST /browser/handoff.prepare` (runtime/browser/handoff.py) against a real uvicorn on loopback
and on the Unix socket, the Herdr simulator and a real state.db: the package of a journaled
conversation (the same package for the same transfer id, its message's first line the seed
marker, the copy prompt the same string), refused `workspace_working` while an agent of the bound
workspace works, `continuity_not_found` for a conversation the journal never saw,
`handoff_scope_mismatch` for a URL outside the scope, and bad bodies `invalid_argument`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.support.browser_methods_harness import TRANSPORTS, browser_api, call
from tests.support.sim_helpers import fast_script, run, short_tmp_dir, two_project_config
from tests.support.waiting import poll_until

BODY_TIMEOUT_S = 90.0
PROJECT = "g-p-0123abcd"
SCOPE = f"chatgpt:project:{PROJECT}"
SOURCE = f"https://chatgpt.com/g/{PROJECT}/c/conv-source-1"


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


async def journal_two_turns(client: httpx2.AsyncClient, scope: str, url: str) -> None:
    for key, role, text in (("u1", "user", "Plan the release."), ("a1", "assistant", "Dispatching.")):
        status, answer = await call(
            client,
            "turn.append",
            {"scope": scope, "conversation_url": url, "turn_key": key, "role": role, "text": text},
        )
        assert status == 200, answer


@pytest.mark.parametrize("via", TRANSPORTS)
def test_prepare_gives_one_package_per_transfer_and_refuses_while_working(tmp_short: Path, via: str) -> None:
    async def body() -> None:
        config = two_project_config(tmp_short, fast_script())
        async with browser_api(tmp_short, config, via) as (sim, _rt, client):
            status, bound = await call(client, "binding.set", {"scope": SCOPE, "workspace_id": "w1"})
            assert status == 200, bound
            await journal_two_turns(client, SCOPE, SOURCE)

            request = {"scope": SCOPE, "transfer_id": "tr-test-0001", "source_url": SOURCE}
            status, first = await call(client, "handoff.prepare", request)
            assert status == 200, first
            package = first["package"]
            assert first["workspace_id"] == "w1"
            assert package["source_url"] == SOURCE and package["transfer_id"] == "tr-test-0001"
            assert package["message"].startswith("[herdr-handoff transfer=tr-test-0001 ")
            assert first["seed_marker"] == package["message"].splitlines()[0]
            assert package["automatic_delivery"]["params"]["message"] == package["message"]
            assert package["manual_delivery"]["copy_prompt"] == package["message"]
            assert package["target_context"] == {"site": "chatgpt", "project_id": PROJECT}
            status, again = await call(client, "handoff.prepare", request)
            assert status == 200 and again == first, "the same transfer gives the same package"

            sim.set_agent_status("coder", "working")

            async def refused() -> dict[str, Any] | None:
                status, answer = await call(
                    client, "handoff.prepare", {**request, "transfer_id": "tr-test-0002"}
                )
                return answer if status == 409 else None

            answer = await poll_until(refused, "handoff.prepare refused while coder works")
            assert answer["error"]["code"] == "workspace_working"
            assert answer["error"]["agents"] == ["coder"]
            assert answer["error"]["workspace_id"] == "w1"

            sim.set_agent_status("coder", "done")
            status, later = await call(client, "handoff.prepare", {**request, "transfer_id": "tr-test-0002"})
            assert status == 200, later
            assert later["package"]["parent_transfer_id"] == "tr-test-0001"

    run(body(), timeout=BODY_TIMEOUT_S)


def test_prepare_refusals(tmp_short: Path) -> None:
    async def body() -> None:
        config = two_project_config(tmp_short, fast_script())
        async with browser_api(tmp_short, config, "tcp") as (_sim, _rt, client):
            # Unbound and never journaled: nothing to hand off.
            status, answer = await call(
                client,
                "handoff.prepare",
                {
                    "scope": "chatgpt:conv:never-seen",
                    "transfer_id": "tr-x",
                    "source_url": "https://chatgpt.com/c/never-seen",
                },
            )
            assert (status, answer["error"]["code"]) == (404, "continuity_not_found")

            # Journaled through a bound conversation scope, then unbound: still hands off.
            scope, url = "chatgpt:conv:conv-plain-1", "https://chatgpt.com/c/conv-plain-1"
            assert (await call(client, "binding.set", {"scope": scope, "workspace_id": "w2"}))[0] == 200
            await journal_two_turns(client, scope, url)
            assert (await call(client, "binding.set", {"scope": scope, "workspace_id": None}))[0] == 200
            status, answer = await call(
                client,
                "handoff.prepare",
                {"scope": scope, "transfer_id": "tr-unbound", "source_url": url},
            )
            assert status == 200 and answer["workspace_id"] is None, answer

            for scope_, url_ in (
                (scope, "https://chatgpt.com/c/another-conv"),
                (scope, f"https://chatgpt.com/g/{PROJECT}/c/conv-plain-1"),
                (SCOPE, url),
                ("chatgpt:root:tab-7", url),
                (SCOPE, f"https://chatgpt.com/g/{PROJECT}/project"),
            ):
                status, answer = await call(
                    client,
                    "handoff.prepare",
                    {"scope": scope_, "transfer_id": "tr-y", "source_url": url_},
                )
                assert (status, answer["error"]["code"]) == (400, "handoff_scope_mismatch"), (
                    scope_,
                    url_,
                )

            # z.ai and DeepSeek conversation scopes prepare the same way.
            for site_scope, site_url in (
                ("zai:conv:chat-zai-1", "https://chat.z.ai/c/chat-zai-1"),
                ("deepseek:conv:ds-1", "https://chat.deepseek.com/a/chat/s/ds-1"),
            ):
                assert (await call(client, "binding.set", {"scope": site_scope, "workspace_id": "w2"}))[
                    0
                ] == 200
                await journal_two_turns(client, site_scope, site_url)
                status, answer = await call(
                    client,
                    "handoff.prepare",
                    {"scope": site_scope, "transfer_id": f"tr-{site_scope[:3]}", "source_url": site_url},
                )
                assert status == 200, answer
                assert answer["package"]["target_context"]["site"] == site_scope.split(":")[0]

            for bad in (
                {"scope": scope, "source_url": url},
                {"scope": scope, "transfer_id": "tr z", "source_url": url},
                {"scope": "chatgpt:conv:", "transfer_id": "tr-z", "source_url": url},
                {"scope": scope, "transfer_id": "tr-z", "source_url": url, "extra": 1},
            ):
                status, answer = await call(client, "handoff.prepare", bad)
                assert (status, answer["error"]["code"]) == (400, "invalid_argument"), bad

    run(body(), timeout=BODY_TIMEOUT_S)
