"""Page health's `rollover_recommended` and auto rollover end to end (issue 13, deliver 2 and 3):
Debian's Chromium with extension/ loaded, the real native host and runtime on the Herdr simulator,
and the imitated chatgpt.com (tests/extension_harness.py) whose send times out and whose Retry
times out again, so page health spends its one Retry and recommends a rollover.

Shown: with Auto on and auto rollover on (options), the recommendation hands the conversation off
by itself (the same handoff as the HUD's, seeded into a new conversation, the binding moved), once
for the episode; with auto rollover off nothing is handed off and the HUD says to press Hand off,
naming the precondition that failed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, async_playwright

from tests.extension_harness import (
    Browser,
    ChatGPTSite,
    Workstation,
    install_native_host,
    launched,
    wait_hud,
    workstation,
)
from tests.sim_helpers import run, short_tmp_dir
from tests.waiting import poll_until

pytestmark = pytest.mark.slow

CONV = "conv-roll-0001"
URL = f"https://chatgpt.com/c/{CONV}"
SCOPE = f"chatgpt:conv:{CONV}"
MARKER = "[herdr-handoff transfer="
#: Four messages already: lib/rollover.js MIN_MESSAGES is 4.
HISTORY = [
    {"id": "u-1", "role": "user", "text": "Plan the migration."},
    {"id": "a-1", "role": "assistant", "text": "Planned: three steps."},
    {"id": "u-2", "role": "user", "text": "Start with step one."},
    {"id": "a-2", "role": "assistant", "text": "Step one dispatched."},
]
#: A whole test: a browser launch, a runtime, the simulator, a handoff, on a loaded machine.
BODY_TIMEOUT_S = 240.0


@pytest.fixture
def base() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


async def bound_page(browser: Browser, station: Workstation, *, rollover: bool) -> Page:
    """The conversation bound through the side panel, Auto on, its history journaled (a handoff
    needs the chain), auto rollover as asked (options in storage)."""
    await browser.worker.evaluate(
        """async (rollover) => {
            const { options = {} } = await chrome.storage.local.get("options");
            await chrome.storage.local.set({ options: { ...options, rolloverAuto: rollover,
                handoffSeedDeadlineSec: 30, handoffConnectDeadlineSec: 20 } });
        }""",
        rollover,
    )
    page = await browser.open(URL)
    panel = await browser.bind(station.workspace_id())
    await panel.close()
    await wait_hud(page, "Bound to api")
    await page.locator("herdr-mcp-hud .auto").click()
    await page.locator("herdr-mcp-hud .auto").filter(has_text="Auto: on").wait_for()
    await page.reload()  # the turns reported again, now to a bound scope
    await wait_hud(page, "Bound to api")

    async def journaled() -> bool:
        return len(await browser.storage(f"journal:{CONV}") or []) >= len(HISTORY)

    await poll_until(journaled, "the history in the continuity journal")
    return page


async def spend_the_retry(chat: ChatGPTSite, page: Page) -> None:
    """The person's send times out at the user's node and the one Retry times out too."""
    chat.time_out_next = "not_delivered"
    chat.retry_times_out = True
    composer = page.locator("#prompt-textarea")
    await composer.fill("Run the linter.")
    await composer.press("Enter")

    async def recommended() -> bool:
        line = await page.locator("herdr-mcp-hud .health").inner_text()
        return "rollover_recommended" in line

    await poll_until(recommended, "page health to recommend a rollover")


def test_rollover_recommended_hands_off_by_itself_with_auto_rollover_on(base: Path) -> None:
    async def body() -> None:
        profile = base / "profile"
        with workstation(base) as station:
            install_native_host(profile, station.config_dir)
            chat = ChatGPTSite(conversations={CONV: [dict(turn) for turn in HISTORY]})
            async with async_playwright() as playwright, launched(playwright, profile, chat) as browser:
                page = await bound_page(browser, station, rollover=True)
                await spend_the_retry(chat, page)

                async def done() -> dict[str, Any] | None:
                    record = await browser.storage(f"handoff:{SCOPE}")
                    return record if record and record["phase"] == "done" else None

                record = await poll_until(done, "the automatic rollover to cut over")
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
        profile = base / "profile"
        with workstation(base) as station:
            install_native_host(profile, station.config_dir)
            chat = ChatGPTSite(conversations={CONV: [dict(turn) for turn in HISTORY]})
            async with async_playwright() as playwright, launched(playwright, profile, chat) as browser:
                page = await bound_page(browser, station, rollover=False)
                await spend_the_retry(chat, page)

                line = await wait_hud(page, "press Hand off")
                assert "rollover_off" in line, line
                assert await browser.storage(f"handoff:{SCOPE}") is None
                assert await browser.storage(f"healthRollover:{CONV}") is None
                assert not [p for p in chat.posts if p.text.startswith(MARKER)]
                assert await page.locator("herdr-mcp-hud .handoff").filter(has_text="Hand off").count() == 1

    run(body(), timeout=BODY_TIMEOUT_S)
