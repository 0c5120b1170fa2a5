"""Continuity on the bridge's sites end to end (issue 13; seed 002: a z.ai or DeepSeek
conversation bound to a workspace gets progress and the settle wake like a ChatGPT one):
Debian's Chromium with extension/ loaded, the real native host and runtime on the Herdr
simulator, the imitated chat.z.ai and chat.deepseek.com (tests/fixtures/extension/) served
through request routing.

Shown:
- z.ai, bound through the side panel, Auto switched on in the bridge HUD: a prompt to the
  simulated agent, its echoed prompt typed in as progress; while the model's reply is held the
  person queues a message from the HUD; the agent settles; once the reply comes, the queued
  message goes first, then exactly one wake (naming the task's outcome and the bridge's JSON-line
  form), whose reply carries a herdr_inspect call that the bridge runs, answering with one
  TOOL_RESULT; the task's inbox entry is acknowledged; nothing is typed while an answer is due;
- DeepSeek with Auto off: the settle leaves the wake pending and the HUD says to press Continue,
  nothing is typed; Continue types the wake once;
- z.ai, a conversation that used the tools through the bridge handed off: the new conversation
  gets the seed, then (once its reply is in) the bridge's protocol prompt, once, and its model's
  call runs there through the bridge;
- z.ai, the agent settling while the bridge runs a call (an herdr_exec held until the test lets
  it finish): the wake waits until the call's TOOL_RESULT is sent and the model has answered it,
  and is typed after that, never in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import pytest
from playwright.async_api import Page

from tests.support.extension_harness import (
    BODY_TIMEOUT_S,
    Browser,
    Workstation,
    extension_browser,
    rig,
    screenshot,
    wait_text,
)
from tests.support.extension_sites import DEEPSEEK, HANDOFF_MARKER, ZAI, RawChatSite, SiteSpec, with_history
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import poll_until

pytestmark = pytest.mark.slow

CHAT = "zcont0001"
HISTORY = [
    {"role": "user", "text": "Plan the migration, then dispatch the tests."},
    {"role": "assistant", "text": "Dispatching the tests to the coder agent."},
]
WAKE = "[herdr-mcp] No agent in workspace"
PROGRESS = "[herdr-mcp] progress in api"
QUEUED = "Also run the linter afterwards."
HUD = "herdr-bridge-hud"
#: lib/bridge-protocol.js MARKER: the protocol prompt's first line.
PROMPT = "HERDR_BRIDGE_V1"


@dataclass(kw_only=True)
class WakeableSite(RawChatSite):
    """The imitated model answers a wake by inspecting the workspace through the bridge (one
    herdr_inspect line), a TOOL_RESULT with "Checked.", everything else with "Noted."."""

    def answer(self, messages: list[dict[str, str]]) -> str:
        asked = messages[-1]["text"]
        if asked.startswith(HANDOFF_MARKER):
            return "Resuming."
        if asked.startswith(WAKE) or asked.startswith(PROMPT):
            return "Re-inspecting.\n```json\n" + json.dumps({"tool": "herdr_inspect", "args": {}}) + "\n```"
        if asked.startswith("TOOL_RESULT"):
            return "Checked."
        return "Noted."

    @classmethod
    def on(cls, spec: SiteSpec) -> Self:
        """The imitation of `spec`'s site, conversation CHAT holding HISTORY."""
        return cls(host=spec.host, fixture=spec.fixture, conversations=with_history(CHAT, HISTORY))

    def texts(self, chat: str = CHAT) -> list[str]:
        return [text for posted_in, text in self.posts if posted_in == chat]

    async def checked(self, chat: str = CHAT) -> bool:
        """The model answered a TOOL_RESULT (its "Checked." is in the conversation)."""
        return any(message["text"] == "Checked." for message in self.conversations.get(chat, []))


@pytest.fixture
def base() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


async def hud_says(page: Page, text: str) -> str:
    return await wait_text(page, f"{HUD} .status", text, f"the bridge HUD to say {text!r}")


async def unread(station: Workstation, scope: str) -> list[dict[str, object]]:
    items: list[dict[str, object]] = (await station.post("/browser/inbox.read", {"scope": scope}))["items"]
    return items


async def posted(site: WakeableSite, prefix: str, what: str, count: int = 1) -> list[str]:
    async def probe() -> list[str] | None:
        found = [text for text in site.texts() if text.startswith(prefix)]
        return found if len(found) >= count else None

    return await poll_until(probe, what)


@contextlib.asynccontextmanager
async def bound_conversation(
    base: Path, site: WakeableSite, spec: SiteSpec
) -> AsyncIterator[tuple[Workstation, Browser, Page]]:
    """The world with `site` routed and conversation CHAT of `spec` bound to the workspace before
    the browser starts (the worker reads the bindings when it connects; one set by someone else
    afterwards reaches it only on its next connection), its page opened; yields once the HUD
    says bound."""
    async with rig(base) as world:
        station = world.station
        binding = {"scope": spec.scope(CHAT), "workspace_id": station.workspace_id()}
        await station.post("/browser/binding.set", binding)
        async with world.launch(routes=[(spec.pattern, site.route)]) as browser:
            page = await browser.context.new_page()
            await page.goto(spec.url(CHAT))
            await hud_says(page, "Bound to api")
            yield station, browser, page


async def handled(browser: Browser, scope: str) -> None:
    """The extension saw the settle: the scope's wake is pending."""
    await browser.stored(
        f"wake:{scope}", lambda wake: bool(wake.get("pending")), f"a wake pending for {scope}"
    )


def test_zai_bound_conversation_gets_progress_the_queue_then_one_wake_the_bridge_acts_on(
    base: Path, tmp_path: Path
) -> None:
    async def body() -> None:
        site = WakeableSite.on(ZAI)
        scope = ZAI.scope(CHAT)
        async with extension_browser(base, routes=[(ZAI.pattern, site.route)]) as (
            station,
            browser,
        ):
            await browser.set_options(tick_s=1, fallback_s=600)
            page = await browser.context.new_page()
            await page.goto(ZAI.url(CHAT))
            await hud_says(page, "Not bound")
            # Bound through the side panel, Auto switched on in the bridge HUD, as a person does.
            await (await browser.bind(station.workspace_id())).close()
            await hud_says(page, "Bound to api")
            assert await page.locator(f"{HUD} .auto").inner_text() == "Auto: off", "Auto is off by default"
            await page.locator(f"{HUD} .auto").click()
            await page.locator(f"{HUD} .auto").filter(has_text="Auto: on").wait_for()

            task = await station.prompt("run the tests", scope=scope)
            await hud_says(page, "Bound to api: working")
            (first,) = await posted(site, PROGRESS, "progress with the echoed prompt")
            assert "run the tests" in first, first

            # The model's next reply is held (its stop button shows): the person queues a message.
            site.gate = asyncio.Event()
            station.sim.append_output(station.agent_pane(), "compiling module A\n")
            await posted(site, PROGRESS, "progress with module A", count=2)
            await page.locator("#stop-response-button").wait_for()
            await page.locator("#chat-input").fill(QUEUED)
            await page.locator(f"{HUD} .queue").click()
            await page.locator(f"{HUD} .queue").filter(has_text="Queue (1)").wait_for()
            assert await page.locator("#chat-input").input_value() == "", "the queued text left the composer"
            await screenshot(page, tmp_path, "zai-hud-queued.png")

            station.settle("done")
            await handled(browser, scope)
            sent_before = list(site.texts())
            assert not [t for t in sent_before if t == QUEUED or t.startswith(WAKE)], (
                "nothing typed while a reply is due"
            )
            site.gate.set()

            await poll_until(site.checked, "the wake answered, its call run and its result answered")
            texts = site.texts()
            wakes = [t for t in texts if t.startswith(WAKE)]
            results = [t for t in texts if t.startswith("TOOL_RESULT")]
            assert len(wakes) == 1 and len(results) == 1, texts
            assert texts.index(QUEUED) < texts.index(wakes[0]) < texts.index(results[0]), texts
            (wake,) = wakes
            assert f"Task {task['task_id']}:" in wake, wake
            assert '{"tool": ..., "args": {...}}' in wake, "the wake names the bridge's form"
            assert "herdr_inspect ok" in results[0], results[0]

            async def acknowledged() -> bool:
                return not await unread(station, scope)

            await poll_until(acknowledged, "the task's outcome acknowledged after the wake")
            await page.locator(f"{HUD} .queue").filter(has_text="Queue (0)").wait_for()

    run(body(), timeout=BODY_TIMEOUT_S)


def test_deepseek_with_auto_off_waits_for_continue_then_wakes_once(base: Path) -> None:
    async def body() -> None:
        site = WakeableSite.on(DEEPSEEK)
        scope = DEEPSEEK.scope(CHAT)
        async with bound_conversation(base, site, DEEPSEEK) as (station, browser, page):
            task = await station.prompt("run the tests", scope=scope)
            await hud_says(page, "Bound to api: working")
            station.settle("done")
            await handled(browser, scope)
            await hud_says(page, "press Continue to wake")
            assert not [t for t in site.texts() if t.startswith(WAKE)], "Auto off: no wake typed"

            await page.locator(f"{HUD} .continue").click()
            (wake,) = await posted(site, WAKE, "the wake after Continue")
            assert f"Task {task['task_id']}:" in wake, wake
            await poll_until(site.checked, "the wake's call run and answered")
            assert [t for t in site.texts() if t.startswith(WAKE)] == [wake], "one wake"
            assert await hud_says(page, "Bound to api: not working")

    run(body(), timeout=BODY_TIMEOUT_S)


def test_zai_handoff_of_a_conversation_using_the_tools_primes_the_new_one(base: Path) -> None:
    async def body() -> None:
        site = WakeableSite.on(ZAI)
        scope = ZAI.scope(CHAT)
        async with bound_conversation(base, site, ZAI) as (_station, browser, page):
            await page.locator(f"{HUD} button.start").click()
            await poll_until(site.checked, "the source's call run through the bridge and answered")
            await browser.journaled(CHAT, 2, "the source's turns in the continuity journal")

            await page.locator(f"{HUD} .handoff").click()
            record = await browser.handoff(scope, "done")
            target = record["targetConvKey"]
            assert target and target != CHAT

            async def primed() -> bool:
                return await site.checked(target)

            await poll_until(primed, "the new conversation's call run through the bridge and answered")
            texts = site.texts(target)
            assert texts[0].startswith(HANDOFF_MARKER), texts
            prompts = [text for text in texts if text.startswith(PROMPT)]
            assert len(prompts) == 1 and texts.index(prompts[0]) == 1, (
                "the protocol prompt once, after the seed"
            )
            results = [text for text in texts if text.startswith("TOOL_RESULT")]
            assert len(results) == 1 and "herdr_inspect ok" in results[0], texts

            async def unprimed() -> bool:
                return await browser.storage(f"prime:{target}") is None

            await poll_until(unprimed, "the prime mark dropped once the prompt was confirmed sent")

    run(body(), timeout=BODY_TIMEOUT_S)


@dataclass(kw_only=True)
class HeldCallSite(WakeableSite):
    """The model answers the protocol prompt with one herdr_exec that waits for the file `go`."""

    workspace: str = ""

    def answer(self, messages: list[dict[str, str]]) -> str:
        if messages[-1]["text"].startswith(PROMPT):
            args = {
                "workspace": self.workspace,
                "command": "while [ ! -e go ]; do sleep 0.05; done; echo released",
                "intent": "read_only",
                "confirm_busy": True,
            }
            return "```json\n" + json.dumps({"tool": "herdr_exec", "args": args}) + "\n```"
        return super().answer(messages)


def test_zai_wake_waits_for_the_bridge_round_in_flight(base: Path) -> None:
    async def body() -> None:
        site = HeldCallSite.on(ZAI)
        scope = ZAI.scope(CHAT)
        async with bound_conversation(base, site, ZAI) as (station, browser, page):
            site.workspace = station.workspace_id()
            await page.locator(f"{HUD} .auto").click()
            await page.locator(f"{HUD} .auto").filter(has_text="Auto: on").wait_for()
            await station.prompt("run the tests", scope=scope)
            await hud_says(page, "Bound to api: working")
            await page.locator(f"{HUD} button.start").click()

            async def running() -> bool:
                found: str | None = await page.evaluate(
                    "document.documentElement.dataset.herdrBridgeLast ?? null"
                )
                line = await page.locator(f"{HUD} .bridge-line").inner_text()
                return found is None and "running tool calls" in line

            await poll_until(running, "the bridge running the held herdr_exec")
            station.settle("done")
            await handled(browser, scope)
            assert not [t for t in site.texts() if t.startswith(WAKE)], "no wake while the call runs"
            (base / "api" / "go").touch()
            await poll_until(site.checked, "the held call's result sent and answered")
            (wake,) = await posted(site, WAKE, "the wake after the round")
            conversation = [message["text"] for message in site.conversations[CHAT]]
            result_at = next(i for i, text in enumerate(conversation) if text.startswith("TOOL_RESULT"))
            assert "released" in conversation[result_at], conversation[result_at]
            # The model answered the result, then came the wake: nothing typed in between.
            assert conversation[result_at + 1 : result_at + 3] == ["Checked.", wake], conversation

    run(body(), timeout=BODY_TIMEOUT_S)
