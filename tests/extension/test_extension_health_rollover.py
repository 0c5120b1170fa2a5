"""Page health's `rollover_recommended` and auto rollover end to end (issue 13, deliver 2 and 3):
Debian's Chromium with extension/ loaded, the real native host and runtime on the Herdr simulator,
and the imitated chatgpt.com (tests/support/extension_harness.py) whose send times out and whose Retry
times out again, so page health spends its one Retry and recommends a rollover.

Shown: with Auto on and auto rollover on (options), the recommendation hands the conversation off
by itself (the same handoff as the HUD's, seeded into a new conversation, the binding moved), once
for the episode; with auto rollover off nothing is handed off and the HUD says to press Hand off,
naming the precondition that failed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Page

from tests.support.extension_harness import (
    BODY_TIMEOUT_S,
    Browser,
    Workstation,
    bind_tab,
    extension_browser,
    turn_auto_on,
    wait_hud,
    wait_text,
)
from tests.support.extension_sites import HANDOFF_MARKER as MARKER
from tests.support.extension_sites import ChatGPTSite, with_history
from tests.support.sim_helpers import run, short_tmp_dir

pytestmark = pytest.mark.slow

CONV = "conv-roll-0001"
URL = f"https://chatgpt.com/c/{CONV}"
SCOPE = f"chatgpt:conv:{CONV}"
#: Four messages already: lib/rollover.js MIN_MESSAGES is 4.
HISTORY = [
    {"id": "u-1", "role": "user", "text": "Plan the migration."},
    {"id": "a-1", "role": "assistant", "text": "Planned: three steps."},
    {"id": "u-2", "role": "user", "text": "Start with step one."},
    {"id": "a-2", "role": "assistant", "text": "Step one dispatched."},
]


@pytest.fixture
def base() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


async def bound_page(browser: Browser, station: Workstation, *, rollover: bool) -> Page:
    """The conversation bound through the side panel, Auto on, its history journaled (a handoff
    needs the chain), auto rollover as asked (options in storage)."""
    await browser.merge_options(
        {"rolloverAuto": rollover, "handoffSeedDeadlineSec": 30, "handoffConnectDeadlineSec": 20}
    )
    page = await browser.open(URL)
    await bind_tab(browser, station, page)
    await turn_auto_on(page)
    await page.reload()  # the turns reported again, now to a bound scope
    await wait_hud(page, "Bound to api")
    await browser.journaled(CONV, len(HISTORY), "the history in the continuity journal")
    return page


async def spend_the_retry(chat: ChatGPTSite, page: Page) -> None:
    """The person's send times out at the user's node and the one Retry times out too."""
    chat.time_out_next = "not_delivered"
    chat.retry_times_out = True
    composer = page.locator("#prompt-textarea")
    await composer.fill("Run the linter.")
    await composer.press("Enter")

    await wait_text(
        page, "herdr-mcp-hud .health", "rollover_recommended", "page health to recommend a rollover"
    )


def test_rollover_recommended_hands_off_by_itself_with_auto_rollover_on(base: Path) -> None:
    async def body() -> None:
        chat = ChatGPTSite(conversations=with_history(CONV, HISTORY))
        async with extension_browser(base, chat) as (station, browser):
            page = await bound_page(browser, station, rollover=True)
            await spend_the_retry(chat, page)

            record = await browser.handoff(SCOPE, "done")
            target = record["targetConvKey"]
            seeds = [p.conversation_id for p in chat.posts if p.text.startswith(MARKER)]
            assert seeds == [target], "one seed, into the new conversation"
            moved = await station.post("/browser/binding.get", {"scope": f"chatgpt:conv:{target}"})
            assert moved["binding"]["workspace_id"] == station.workspace_id()
            health = await browser.storage(f"health:{CONV}")
            assert await browser.storage(f"healthRollover:{CONV}") == health["episode"]["startedAt"]
            assert await browser.storage(f"auto:chatgpt:conv:{target}") is True
            await wait_hud(page, f"handed off to {target}")

    run(body(), timeout=BODY_TIMEOUT_S)


def test_rollover_recommended_with_auto_rollover_off_offers_hand_off(base: Path) -> None:
    async def body() -> None:
        chat = ChatGPTSite(conversations=with_history(CONV, HISTORY))
        async with extension_browser(base, chat) as (station, browser):
            page = await bound_page(browser, station, rollover=False)
            await spend_the_retry(chat, page)

            line = await wait_hud(page, "press Hand off")
            assert "rollover_off" in line, line
            assert await browser.storage(f"handoff:{SCOPE}") is None
            assert await browser.storage(f"healthRollover:{CONV}") is None
            assert not [p for p in chat.posts if p.text.startswith(MARKER)]
            assert await page.locator("herdr-mcp-hud .handoff").filter(has_text="Hand off").count() == 1

    run(body(), timeout=BODY_TIMEOUT_S)
