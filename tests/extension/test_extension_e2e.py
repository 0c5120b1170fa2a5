"""The extension end to end: Debian's Chromium (Playwright, headless, a persistent profile with
extension/ loaded and the native host manifest in the profile), the real `herdr-mcp native-host`
started by Chromium, a real runtime on the Herdr simulator, and an imitation of chatgpt.com
served through request routing (tests/support/extension_harness.py).

Shown: binding a conversation through the side panel; a prompt dispatched to a simulated agent;
progress typed into the page only for new output (the same output again is looked at and not
sent); the settle waking the conversation exactly once (a second settle of the same turn does
not) with the task's inbox entry acknowledged after the send; a settle while the browser was
closed replayed once on restart (and not again on the next one); the person's queued message
sent before the Auto wake; a 429 from the site pausing sends; a binding made on the root page
migrating once to the conversation the page creates; the conversation's finalized turns in the
continuity journal, each once. Screenshots of the HUD and the side panel
go to the test's temp dir (and to $HERDR_MCP_SCREENSHOTS when set).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page

from tests.support.extension_harness import (
    AGENT,
    BODY_TIMEOUT_S,
    EXTENSION_DIR,
    REVIEWER,
    Browser,
    PushReader,
    Workstation,
    bind_tab,
    extension_browser,
    extension_id,
    rig,
    screenshot_dirs,
    turn_auto_on,
    wait_hud,
)
from tests.support.extension_sites import ChatGPTSite, with_history
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import poll_until

pytestmark = pytest.mark.slow

CONV = "conv-e2e-0001"
SCOPE = f"chatgpt:conv:{CONV}"
URL = f"https://chatgpt.com/c/{CONV}"
HISTORY = [
    {"id": "u-seed", "role": "user", "text": "Plan the migration, then dispatch the tests."},
    {"id": "a-seed", "role": "assistant", "text": "Dispatching the tests to the coder agent."},
]
WAKE = "No agent in workspace"


@pytest.fixture
def base() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


def site() -> ChatGPTSite:
    return ChatGPTSite(conversations=with_history(CONV, HISTORY))


async def count_posts(chat: ChatGPTSite, needle: str, at_least: int, what: str) -> list[str]:
    async def probe() -> list[str] | None:
        found = [text for text in chat.texts(CONV) if needle in text]
        return found if len(found) >= at_least else None

    return await poll_until(probe, what)


async def storage_at_least(browser: Browser, key: str, field: str, value: int) -> dict[str, Any]:
    what = f"{key}.{field} >= {value} in the extension's storage"
    stored: dict[str, Any] = await browser.stored(
        key, lambda stored: stored and stored.get(field, 0) >= value, what
    )
    return stored


async def handled_seq(browser: Browser, seq: int) -> None:
    await browser.stored(
        "push:lastSeq", lambda stored: stored >= seq, f"the extension to handle push event {seq}"
    )


async def bind_with_auto(browser: Browser, station: Workstation) -> Page:
    page = await browser.open(URL)
    await wait_hud(page, "Not bound")
    assert await page.locator("herdr-mcp-hud .auto").inner_text() == "Auto: off", "Auto is off by default"
    await bind_tab(browser, station, page)
    await turn_auto_on(page)
    return page


def test_bind_dispatch_progress_and_one_wake_per_settle(base: Path, tmp_path: Path) -> None:
    async def body() -> None:
        chat = site()
        async with extension_browser(base, chat) as (station, browser), PushReader(station) as push:
            await browser.set_options(tick_s=1, fallback_s=600)
            page = await bind_with_auto(browser, station)
            binding = (await station.post("/browser/binding.get", {"scope": SCOPE}))["binding"]
            assert binding["workspace_id"] == station.workspace_id() and binding["label"] == "api"

            task = await station.prompt("run the tests")
            assert "task_id" in task, task
            await push.wait("agent_working", "the agent working", workspace_id=station.workspace_id())
            await wait_hud(page, "Bound to api: working")

            # The agent echoes its prompt: the first progress (then each output on its own).
            await count_posts(chat, "run the tests", 1, "progress with the echoed prompt")
            pane = station.agent_pane()
            station.sim.append_output(pane, "compiling module A\n")
            await count_posts(chat, "compiling module A", 1, "progress with module A")
            # The same output again: a tick looks at it (checked reaches the count of
            # outputs the runtime published) and sends nothing.
            station.sim.append_output(pane, "compiling module A\n")

            async def second_output() -> int | None:
                outputs = [e for e in push.of("agent_output") if "compiling module A" in e["text"]]
                return len(push.of("agent_output")) if len(outputs) >= 2 else None

            published = await poll_until(second_output, "the repeated output published")
            await storage_at_least(browser, f"progress:{SCOPE}", "checked", published)
            station.sim.append_output(pane, "compiling module B\n")
            await count_posts(chat, "compiling module B", 1, "progress with module B")
            progress = [text for text in chat.texts(CONV) if "progress in api" in text]
            assert sum("compiling module A" in text for text in progress) == 1, progress
            assert len(progress) == len(set(progress)), progress

            # The reviewer works too; the coder settling first is partial progress (the
            # workspace still works): no wake. The reviewer settling ends the turn: one wake.
            station.settle("working", agent=REVIEWER)
            await push.wait("agent_working", "the reviewer working", agent=REVIEWER)
            station.settle("done")
            partial = await push.wait("agent_settled", "the coder's settle", agent=AGENT)
            assert partial["workspace_working"] is True
            await handled_seq(browser, partial["seq"])
            assert [text for text in chat.texts(CONV) if WAKE in text] == []
            station.settle("done", agent=REVIEWER)
            last = await push.wait("agent_settled", "the reviewer's settle", agent=REVIEWER)
            assert last["workspace_working"] is False
            (wake,) = await count_posts(chat, WAKE, 1, "the wake")
            assert "signal to re-inspect, not a result" in wake, wake
            assert f"Task {task['task_id']}: completed" in wake, wake

            # Acknowledged once the page confirmed the send, a moment after the site got it.
            async def acknowledged() -> bool:
                inbox = await station.post("/browser/inbox.read", {"scope": SCOPE})
                return not inbox["items"]

            await poll_until(acknowledged, "the inbox entry acknowledged after the wake was sent")
            await handled_seq(browser, last["seq"])
            assert len([text for text in chat.texts(CONV) if WAKE in text]) == 1

            # The finalized turns of the bound conversation are in the continuity journal:
            # the history the page had, the messages the extension sent, the replies.
            async def journaled() -> dict[str, Any] | None:
                answer = await station.post("/browser/turn.resolve", {"conversation_url": URL})
                if answer.get("status") != "resolved":
                    return None
                context: dict[str, Any] = answer["context"]
                replies = [turn["text"] for turn in context["recent_turns"] if turn["role"] == "assistant"]
                return context if any(WAKE in text for text in replies) else None

            context = await poll_until(journaled, "the wake's reply in the continuity journal")
            texts = [turn["text"] for turn in context["recent_turns"]]
            assert texts[:2] == [turn["text"] for turn in HISTORY], texts
            assert [turn["role"] for turn in context["recent_turns"]][:2] == ["user", "assistant"]
            users = [turn["text"] for turn in context["recent_turns"] if turn["role"] == "user"]
            assert sum(WAKE in text for text in users) == 1, "each turn is journaled once"

            await wait_hud(page, "woke the conversation")
            for directory in screenshot_dirs(tmp_path):
                directory.mkdir(parents=True, exist_ok=True)
                await page.screenshot(path=str(directory / "hud.png"))
                panel = await browser.page_for("src/sidepanel/sidepanel.html")
                await panel.set_viewport_size({"width": 360, "height": 560})
                await panel.locator("#binding").filter(has_text="Bound to api").wait_for()
                await panel.screenshot(path=str(directory / "sidepanel.png"))
                await panel.close()
            assert (tmp_path / "hud.png").stat().st_size > 0

    run(body(), timeout=BODY_TIMEOUT_S)


def test_a_settle_while_the_browser_was_closed_wakes_once_on_restart(base: Path) -> None:
    async def body() -> None:
        chat = site()
        async with rig(base) as world, PushReader(world.station) as push:
            station = world.station
            async with world.launch(chat) as browser:
                await bind_with_auto(browser, station)
            # The browser is closed: the agent works and settles meanwhile.
            await station.prompt("run the slow suite")
            await push.wait("agent_working", "the agent working")
            station.settle("done")
            settled = await push.wait("agent_settled", "the settle", workspace_working=False)
            assert chat.texts(CONV) == [], "nothing was typed while the browser was closed"

            async with world.launch(chat) as browser:
                await browser.open(URL)
                await count_posts(chat, WAKE, 1, "the replayed wake")
                await handled_seq(browser, settled["seq"])
                # Recorded as sent once the page confirmed it, a moment after the site got it.
                await browser.stored(
                    f"wake:{SCOPE}",
                    lambda wake: wake["pending"] is None and bool(wake["wokenTurn"]),
                    "the replayed wake recorded as sent",
                )

            async with world.launch(chat) as browser:
                page = await browser.open(URL)
                await wait_hud(page, "Bound to api: not working")
                wake = await browser.storage(f"wake:{SCOPE}")
                assert wake["pending"] is None, "a third launch finds nothing pending"
            assert len([text for text in chat.texts(CONV) if WAKE in text]) == 1

    run(body(), timeout=BODY_TIMEOUT_S)


def test_the_queued_message_goes_before_the_auto_wake_and_429_pauses(base: Path) -> None:
    async def body() -> None:
        chat = site()
        async with extension_browser(base, chat) as (station, browser), PushReader(station) as push:
            page = await bind_with_auto(browser, station)
            chat.hold()  # the assistant's replies wait: the stop button stays up
            composer = page.locator("#prompt-textarea")
            await composer.click()
            await page.keyboard.type("check the logs")
            await page.click('[data-testid="send-button"]')
            await page.locator('[data-testid="stop-button"]').wait_for()

            await station.prompt("run lint")
            await push.wait("agent_working", "the agent working")
            await composer.click()
            await page.keyboard.type("also run lint")
            await page.locator("herdr-mcp-hud .queue").click()
            await page.locator("herdr-mcp-hud .queue").filter(has_text="Queue (1)").wait_for()
            assert (await composer.inner_text()).strip() == "", "queueing empties the composer"

            station.settle("done")
            await push.wait("agent_settled", "the settle", workspace_working=False)

            async def wake_pending() -> bool:
                wake = await browser.storage(f"wake:{SCOPE}")
                return bool(wake and wake["pending"])

            await poll_until(wake_pending, "the wake pending while a reply is generating")
            assert chat.texts(CONV) == ["check the logs"], "nothing is sent while generating"
            chat.release()
            await count_posts(chat, WAKE, 1, "the wake after the queued message")
            texts = chat.texts(CONV)
            assert texts[:2] == ["check the logs", "also run lint"], texts
            assert WAKE in texts[2] and len(texts) == 3, texts
            await page.locator("herdr-mcp-hud .queue").filter(has_text="Queue (0)").wait_for()

            # HTTP 429 from the site: sending pauses 30 s; the queue waits.
            chat.refuse_next = 1
            await composer.click()
            await page.keyboard.type("one more thing")
            await page.click('[data-testid="send-button"]')
            await wait_hud(page, "ChatGPT answered 429")
            backoff = await browser.storage("backoff")
            assert backoff["level"] == 1
            assert 25_000 <= backoff["pausedUntil"] - backoff["last429At"] <= 30_000
            await composer.click()
            await page.keyboard.type("queued during the pause")
            await page.locator("herdr-mcp-hud .queue").click()
            await page.locator("herdr-mcp-hud .queue").filter(has_text="Queue (1)").wait_for()
            assert "queued during the pause" not in chat.texts(CONV)

    run(body(), timeout=BODY_TIMEOUT_S)


def test_a_binding_made_on_the_root_page_moves_once_to_the_new_conversation(base: Path) -> None:
    async def body() -> None:
        async with extension_browser(base) as (station, browser):
            page = await browser.open("https://chatgpt.com/")
            await wait_hud(page, "Not bound")
            panel = await browser.bind(station.workspace_id())
            await panel.close()
            listed = (await station.post("/browser/binding.list", {}))["bindings"]
            (root,) = [binding["scope"] for binding in listed]
            assert root.startswith("chatgpt:root:tab-"), root

            await page.locator("#prompt-textarea").click()
            await page.keyboard.type("start the migration")
            await page.click('[data-testid="send-button"]')
            await page.wait_for_url("https://chatgpt.com/c/**")
            conversation = page.url.rsplit("/", 1)[1]
            await wait_hud(page, "Bound to api")

            async def moved() -> list[str] | None:
                bindings = (await station.post("/browser/binding.list", {}))["bindings"]
                scopes = sorted(binding["scope"] for binding in bindings)
                return scopes if scopes == [f"chatgpt:conv:{conversation}"] else None

            await poll_until(moved, "the root binding moved to the conversation")

    run(body(), timeout=BODY_TIMEOUT_S)


def test_the_manifest_key_gives_the_documented_extension_id() -> None:
    identifier = extension_id()
    readme = (EXTENSION_DIR / "README.md").read_text(encoding="utf-8")
    assert identifier in readme, f"extension/README.md does not name the id {identifier}"
    assert len(identifier) == 32 and set(identifier) <= set("abcdefghijklmnop")
