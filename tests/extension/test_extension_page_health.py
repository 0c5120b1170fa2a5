"""Stale-view recovery end to end (issue 13 deliver 3): Debian's Chromium with extension/ loaded,
the real native host and runtime on the Herdr simulator, and the imitated chatgpt.com
(tests/support/extension_harness.py), whose conversation GET also answers ChatGPT's snapshot shape
(`current_node`, `mapping`) and can be scripted: a page stuck on the stop button while the site
already stored the reply, snapshot reads failing with HTTP 500, a send answered "Message send
timed out" with the message delivered or not.

Shown: server ahead -> exactly one page reload, recorded; snapshot 500 -> no reload and the HUD
says fail-closed; a timed-out send whose current_node is the assistant's -> one reload, never
Retry, and no second user message; a timed-out send still at the user's node -> ChatGPT's Retry
once (no new user turn); a reply stalled on the site spending the budget (wait, page reload,
wait, tab reload by the worker with Auto on, then rollover_recommended), and with Auto off the tab
reload refused; a Retry that times out again not repeated; a UI-pressure spike (mutations, long
tasks) recorded and nothing reloaded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page

from tests.support.extension_harness import (
    BODY_TIMEOUT_S,
    Browser,
    Workstation,
    bind_tab,
    extension_browser,
    shared_workstation,
    turn_auto_on,
    wait_text,
)
from tests.support.extension_sites import ChatGPTSite, with_history
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import poll_until

pytestmark = pytest.mark.slow

CONV = "conv-health-0001"
URL = f"https://chatgpt.com/c/{CONV}"
PATH = f"/c/{CONV}"
HEALTH_KEY = f"health:{CONV}"
HISTORY = [
    {"id": "u-seed", "role": "user", "text": "Plan the migration."},
    {"id": "a-seed", "role": "assistant", "text": "Planned: three steps."},
]


@pytest.fixture(scope="module")
def shared() -> Iterator[Workstation]:
    """One simulator and runtime for the module (each test has its own browser profile, site and
    extension storage): what a test leaves in the runtime is its binding, taken back after it, and
    the turns its page journaled, which no test here reads."""
    with short_tmp_dir() as path, shared_workstation(path) as station:
        yield station


@pytest.fixture
def base(shared: Workstation) -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path
    run(shared.unbind_all(), timeout=BODY_TIMEOUT_S)


def site() -> ChatGPTSite:
    return ChatGPTSite(conversations=with_history(CONV, HISTORY))


async def bound_page(
    browser: Browser, station: Workstation, *, stalled_after_s: int = 600, auto: bool = False
) -> Page:
    """A 2 s stale delay set on the options page, as a person would, then the conversation bound
    through the side panel (Auto off unless asked: recovery needs the binding; only the tab
    reload needs Auto)."""
    options = await browser.page_for("src/options/options.html")
    # The page fills its fields from storage when it loads: type only after that.
    await options.wait_for_function("document.getElementById('staleAfterSec').value !== ''")
    for name, value in (("staleAfterSec", 2), ("stalledAfterSec", stalled_after_s), ("stalledWaitSec", 1)):
        await options.fill(f"#{name}", str(value))
    await options.click("button[type=submit]")
    await options.locator("#saved").filter(has_text="Saved").wait_for()
    await options.close()
    stored = await browser.storage("options")
    assert (stored["staleAfterSec"], stored["stalledAfterSec"], stored["stalledWaitSec"]) == (
        2,
        stalled_after_s,
        1,
    )
    page = await browser.open(URL)
    await bind_tab(browser, station, page)
    if auto:
        await turn_auto_on(page)
    return page


async def type_and_send(page: Page, text: str) -> None:
    """As the person does: type into the composer and press Enter."""
    composer = page.locator("#prompt-textarea")
    await composer.fill(text)
    await composer.press("Enter")
    await page.locator('[data-message-author-role="user"]', has_text=text).wait_for()


async def health_says(page: Page, text: str) -> str:
    return await wait_text(page, "herdr-mcp-hud .health", text, f"the HUD's page-health line to say {text!r}")


async def health_record(browser: Browser) -> dict[str, Any]:
    stored = await browser.storage(HEALTH_KEY)
    assert isinstance(stored, dict), stored
    return stored


async def reply_shown(page: Page, text: str) -> None:
    await page.locator('[data-message-author-role="assistant"]', has_text=text).wait_for()


def user_turns(chat: ChatGPTSite, text: str) -> list[dict[str, str]]:
    return [turn for turn in chat.conversations[CONV] if turn["role"] == "user" and turn["text"] == text]


def test_server_ahead_reloads_exactly_once(base: Path, shared: Workstation) -> None:
    async def body() -> None:
        chat = site()
        async with extension_browser(base, chat, station=shared) as (station, browser):
            page = await bound_page(browser, station)
            chat.stuck = True
            await type_and_send(page, "Summarise the build log.")
            await page.locator('[data-testid="stop-button"]').wait_for()
            assert chat.page_loads == [PATH]

            line = await health_says(page, "recovered")
            assert "page reloaded once" in line, line
            assert chat.page_loads == [PATH, PATH], "exactly one reload"
            assert await page.locator('[data-testid="stop-button"]').count() == 0
            await reply_shown(page, "Noted: Summarise")
            stored = await health_record(browser)
            assert stored["episode"] is None, "the episode ended with the reply shown"
            (entry,) = stored["records"]
            assert entry["step"] == "page_reload", entry
            assert entry["reason"].startswith("server ahead"), entry
            assert entry["evidence"]["dom"]["assistantId"] == "a-seed", entry
            assert entry["evidence"]["server"]["role"] == "assistant", entry
            assert chat.texts(CONV) == ["Summarise the build log."], "the message was never sent again"
            assert chat.snapshot_reads >= 1

    run(body(), timeout=BODY_TIMEOUT_S)


def test_unknown_snapshot_fails_closed(base: Path, shared: Workstation) -> None:
    async def body() -> None:
        chat = site()
        async with extension_browser(base, chat, station=shared) as (station, browser):
            page = await bound_page(browser, station)
            chat.stuck = True
            chat.snapshot_status = 500
            await type_and_send(page, "Summarise the build log.")

            line = await health_says(page, "fail-closed")
            assert "HTTP 500" in line, line
            assert chat.page_loads == [PATH], "no reload on unknown evidence"
            assert chat.snapshot_reads >= 1
            assert await page.locator('[data-testid="stop-button"]').count() == 1, "nothing was done"
            stored = await health_record(browser)
            assert {entry["step"] for entry in stored["records"]} == {"fail_closed"}, stored
            assert stored["episode"]["pageReloads"] == 0, stored
            assert chat.texts(CONV) == ["Summarise the build log."]

    run(body(), timeout=BODY_TIMEOUT_S)


def test_send_timed_out_but_delivered_reloads_never_retries(base: Path, shared: Workstation) -> None:
    async def body() -> None:
        chat = site()
        async with extension_browser(base, chat, station=shared) as (station, browser):
            page = await bound_page(browser, station)
            chat.time_out_next = "delivered"
            await type_and_send(page, "Apply the patch.")

            line = await health_says(page, "recovered")
            assert "page reloaded once" in line, line
            assert chat.page_loads == [PATH, PATH]
            assert chat.retries == [], "Retry is never pressed once the request was delivered"
            assert chat.texts(CONV) == ["Apply the patch."]
            assert len(user_turns(chat, "Apply the patch.")) == 1
            shown = page.locator('[data-message-author-role="user"]', has_text="Apply the patch.")
            assert await shown.count() == 1, "no second user message"
            await reply_shown(page, "Noted: Apply")
            (entry,) = (await health_record(browser))["records"]
            assert entry["step"] == "page_reload" and "timed out" in entry["reason"], entry

    run(body(), timeout=BODY_TIMEOUT_S)


def test_send_timed_out_at_the_user_node_retries_once(base: Path, shared: Workstation) -> None:
    async def body() -> None:
        chat = site()
        async with extension_browser(base, chat, station=shared) as (station, browser):
            page = await bound_page(browser, station)
            chat.time_out_next = "not_delivered"
            await type_and_send(page, "Run the linter.")

            line = await health_says(page, "recovered")
            assert "Retry pressed once" in line, line
            assert chat.retries == ["Run the linter."]
            assert chat.page_loads == [PATH], "no reload"
            assert chat.texts(CONV) == ["Run the linter."], "the original message was not resent"
            assert len(user_turns(chat, "Run the linter.")) == 1
            shown = page.locator('[data-message-author-role="user"]', has_text="Run the linter.")
            assert await shown.count() == 1
            await reply_shown(page, "Noted: Run the")
            (entry,) = (await health_record(browser))["records"]
            assert entry["step"] == "retry", entry

    run(body(), timeout=BODY_TIMEOUT_S)


def test_stalled_server_spends_the_budget_then_rollover_recommended(base: Path, shared: Workstation) -> None:
    """The site's reply stays in progress with no update for an hour: stalled -> wait -> one page
    reload; still stalled -> wait -> one tab reload (Auto on, checked by the worker); still
    stalled -> rollover_recommended in the HUD, and nothing more."""

    async def body() -> None:
        chat = site()
        chat.conversations[CONV] += [
            {"id": "u-step", "role": "user", "text": "Do step one."},
            {
                "id": "a-stall",
                "role": "assistant",
                "text": "Working on step one",
                "status": "in_progress",
            },
        ]
        chat.times.update({"u-step": time.time() - 3_700, "a-stall": time.time() - 3_600})
        async with extension_browser(base, chat, station=shared) as (station, browser):
            page = await bound_page(browser, station, stalled_after_s=5, auto=True)
            await page.locator('[data-testid="stop-button"]').wait_for()

            line = await health_says(page, "rollover_recommended")
            assert "budget spent" in line, line
            assert chat.page_loads == [PATH, PATH, PATH], "one page reload, one tab reload"
            stored = await health_record(browser)
            steps = [entry["step"] for entry in stored["records"]]
            assert steps == [
                "wait",
                "page_reload",
                "wait",
                "tab_reload",
                "wait",
                "rollover_recommended",
            ], steps
            assert all(entry["reason"].startswith("server stalled") for entry in stored["records"])
            episode = stored["episode"]
            assert episode["state"] == "rollover_recommended", episode
            assert (episode["pageReloads"], episode["tabReloads"], episode["retries"]) == (1, 1, 0)
            assert episode["tabReloadExecutedAt"] >= episode["pendingTabReload"], episode
            assert chat.texts(CONV) == [], "nothing was ever sent"
            assert chat.retries == []

    run(body(), timeout=BODY_TIMEOUT_S)


def test_tab_reload_refused_with_auto_off(base: Path, shared: Workstation) -> None:
    """The same stalled reply with Auto off: the page reloads once; the worker refuses the tab
    reload (it needs Auto), so the episode is rollover_recommended after one reload."""

    async def body() -> None:
        chat = site()
        chat.conversations[CONV] += [
            {"id": "u-step", "role": "user", "text": "Do step one."},
            {"id": "a-stall", "role": "assistant", "text": "Working on it", "status": "in_progress"},
        ]
        chat.times.update({"u-step": time.time() - 3_700, "a-stall": time.time() - 3_600})
        async with extension_browser(base, chat, station=shared) as (station, browser):
            page = await bound_page(browser, station, stalled_after_s=5)

            line = await health_says(page, "rollover_recommended")
            assert "tab reload refused: Auto is off" in line, line
            assert chat.page_loads == [PATH, PATH]
            stored = await health_record(browser)
            steps = [entry["step"] for entry in stored["records"]]
            assert steps == ["wait", "page_reload", "wait", "tab_reload", "rollover_recommended"], steps
            assert "tabReloadExecutedAt" not in stored["episode"], stored

    run(body(), timeout=BODY_TIMEOUT_S)


def test_pressure_spike_is_recorded_and_nothing_reloads(base: Path, shared: Workstation) -> None:
    """A page script churns the DOM and blocks the main thread in 150 ms tasks for a while: the
    meter's window says high (mutations, long tasks, from the real MutationObserver and
    PerformanceObserver), the spike is recorded with Chromium's heap figure, and one window of
    pressure does nothing else (no reload, no episode)."""

    async def body() -> None:
        chat = site()
        async with extension_browser(base, chat, station=shared) as (station, browser):
            page = await bound_page(browser, station)
            await page.evaluate(
                """() => {
                    const box = document.createElement("div");
                    document.body.appendChild(box);
                    const started = performance.now();
                    const timer = setInterval(() => {
                        const end = performance.now() + 150;
                        while (performance.now() < end) {
                            for (let i = 0; i < 20; i += 1) {
                                box.textContent = String(Math.random());
                            }
                        }
                        if (performance.now() - started > 25000) {
                            clearInterval(timer);
                            box.remove();
                        }
                    }, 200);
                }"""
            )
            line = await health_says(page, "UI pressure high")
            assert "mutations" in line and "long tasks" in line, line

            async def spike() -> dict[str, Any] | None:
                stored = await browser.storage(HEALTH_KEY)
                return stored if stored and stored.get("pressure") else None

            stored = await poll_until(spike, "the pressure spike recorded")
            pressure = stored["pressure"]
            assert pressure["level"] == "high", pressure
            assert {"mutations", "long tasks"} <= set(pressure["reasons"]), pressure
            assert pressure["signals"]["mutationsPerSec"] >= 300, pressure
            heap = pressure["signals"]["heapRatio"]
            assert isinstance(heap, (int, float)) and 0 <= heap < 1, "Chromium's performance.memory"
            assert stored["episode"] is None and stored["records"] == [], stored
            assert chat.page_loads == [PATH], "a spike is only recorded"

    run(body(), timeout=BODY_TIMEOUT_S)


def test_retry_that_times_out_again_is_not_repeated(base: Path, shared: Workstation) -> None:
    """The Retry times out too (a new thread error, still at the user's node): the episode's one
    Retry is spent, so rollover_recommended, no second Retry, no reload, no resend."""

    async def body() -> None:
        chat = site()
        async with extension_browser(base, chat, station=shared) as (station, browser):
            page = await bound_page(browser, station)
            chat.time_out_next = "not_delivered"
            chat.retry_times_out = True
            await type_and_send(page, "Run the linter.")

            line = await health_says(page, "rollover_recommended")
            assert "Retry already used" in line, line
            assert chat.retries == ["Run the linter."], "one Retry"
            assert chat.page_loads == [PATH]
            assert chat.texts(CONV) == ["Run the linter."]
            steps = [entry["step"] for entry in (await health_record(browser))["records"]]
            assert steps == ["retry", "rollover_recommended"], steps

    run(body(), timeout=BODY_TIMEOUT_S)
