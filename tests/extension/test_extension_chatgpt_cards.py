"""ChatGPT's tool confirmation card, custom-GPT conversations and a Chinese UI, end to end (issue
20 items 3 and 5): Debian's Chromium with extension/ loaded, the real native host and runtime on
the Herdr simulator, and the imitated chatgpt.com (tests/support/extension_sites.py ChatGPTSite) rendering
its UI in Chinese and showing tool confirmation cards as the public evidence describes them
(tests/fixtures/extension/chatgpt.html, extension/README.md "Live-site selectors: evidence").

Shown, with Auto off: the card of this connector ("Herdr") for a tool of the live catalog is
accepted (Allow, never Always allow); another connector's card and a card naming no catalog tool
are left alone, the HUD says a confirmation is waiting and a browser notification is shown; a
custom-GPT conversation (`/g/g-<id>-<slug>/c/<id>`) is bound as a conversation scope; the reply
generating on the Chinese UI is seen by its test id (not at rest) and its end too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.extension_harness import BODY_TIMEOUT_S, bind_tab, extension_browser, wait_hud
from tests.support.extension_sites import ChatGPTSite, with_history
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import poll_until

pytestmark = pytest.mark.slow

CONV = "conv-gpt-0001"
URL = f"https://chatgpt.com/g/g-a1B2c3D4e-code-helper/c/{CONV}"
HISTORY = [
    {"id": "u-1", "role": "user", "text": "Dispatch the tests to the coder."},
    {"id": "a-1", "role": "assistant", "text": "Calling the Herdr connector."},
]
CARDS = [
    {"id": "ours", "connector": "Herdr", "tool": "herdr_prompt", "args": {"target": "coder", "text": "run"}},
    {"id": "other", "connector": "GitHub", "tool": "create_issue", "args": {"title": "herdr_prompt"}},
    {"id": "unknown", "connector": "Herdr", "tool": "herdr_delete_everything", "args": {}},
]


@pytest.fixture
def base() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


def test_cards_custom_gpt_scope_and_chinese_stop_detection(base: Path) -> None:
    async def body() -> None:
        chat = ChatGPTSite(
            conversations=with_history(CONV, HISTORY), lang="zh", cards=[dict(card) for card in CARDS]
        )
        async with extension_browser(base, chat) as (station, browser):
            page = await browser.open(URL)
            assert await page.locator("herdr-mcp-hud .auto").inner_text() == "Auto: off"

            # Our connector's card for a catalog tool: accepted with Auto off, once, with Allow.
            async def accepted() -> list[dict[str, Any]] | None:
                return chat.approvals or None

            assert await poll_until(accepted, "our card accepted") == [{"id": "ours", "decision": "allow"}]
            # The other two stay, and say a confirmation is waiting (HUD, notification).
            cards = page.locator('[data-testid="tool-approval-card"]')
            assert await cards.count() == 2
            await wait_hud(page, "A confirmation is waiting")

            async def notified() -> list[dict[str, Any]] | None:
                shown: list[dict[str, Any]] = await browser.worker.evaluate("() => globalThis.herdrNotified")
                return shown if len(shown) >= 2 else None

            reasons = sorted(entry["reason"] for entry in await poll_until(notified, "two notifications"))
            assert reasons == [
                "the card does not name this connector",
                "the card names no tool of the catalog",
            ]
            assert chat.approvals == [{"id": "ours", "decision": "allow"}], "nothing else was pressed"

            # The person answers the two cards (Deny); then the HUD's state line is back.
            for _ in range(2):
                await cards.first.get_by_role("button", name="拒绝").click()
            await wait_hud(page, "Not bound")

            # A custom-GPT conversation is a conversation scope.
            await bind_tab(browser, station, page)
            binding = await station.binding(f"chatgpt:conv:{CONV}")
            assert binding is not None and binding["workspace_id"] == station.workspace_id()

            # Chinese UI: the stop control's label is Chinese; generating is seen by its test id.
            rest = "document.documentElement.dataset.herdrRest"

            async def at_rest(value: str) -> bool:
                return bool(await page.evaluate(rest) == value)

            await poll_until(lambda: at_rest("true"), "the page at rest")
            chat.hold()
            await page.locator("#prompt-textarea").click()
            await page.keyboard.type("检查日志")
            await page.click('[data-testid="send-button"]')
            stop = page.locator('[data-testid="stop-button"]')
            assert await stop.get_attribute("aria-label") == "停止流式传输"
            await poll_until(lambda: at_rest("false"), "the reply seen generating")
            chat.release()
            await poll_until(lambda: at_rest("true"), "the reply's end seen")

    run(body(), timeout=BODY_TIMEOUT_S)


def test_connector_name_option_picks_which_cards_are_ours(base: Path) -> None:
    """Options `connectorName` "Workbench" (chrome.storage.local, as the options page saves it): a
    card naming Workbench and a live tool is accepted; a card naming Herdr is left alone."""

    async def body() -> None:
        cards = [
            {
                "id": "workbench",
                "connector": "Workbench",
                "tool": "herdr_prompt",
                "args": {"target": "coder"},
            },
            {"id": "herdr", "connector": "Herdr", "tool": "herdr_prompt", "args": {"target": "coder"}},
        ]
        chat = ChatGPTSite(conversations=with_history(CONV, HISTORY), cards=cards)
        async with extension_browser(base, chat) as (_, browser):
            await browser.merge_options({"connectorName": "Workbench"})
            page = await browser.open(URL)

            async def accepted() -> list[dict[str, Any]] | None:
                return chat.approvals or None

            assert await poll_until(accepted, "the Workbench card accepted") == [
                {"id": "workbench", "decision": "allow"}
            ]
            await wait_hud(page, "A confirmation is waiting")
            remaining = page.locator('[data-testid="tool-approval-card"]')
            assert await remaining.count() == 1
            assert "Herdr" in await remaining.inner_text()

            async def notified() -> list[dict[str, Any]] | None:
                shown: list[dict[str, Any]] = await browser.worker.evaluate("() => globalThis.herdrNotified")
                return shown or None

            (notice,) = await poll_until(notified, "the Herdr card's notification")
            assert notice["reason"] == "the card does not name this connector", notice
            assert chat.approvals == [{"id": "workbench", "decision": "allow"}], (
                "the Herdr card was not pressed"
            )

    run(body(), timeout=BODY_TIMEOUT_S)
