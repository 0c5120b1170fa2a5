"""Handoff on the bridge's sites end to end (issue 13, deliver 2): Debian's Chromium with
extension/ loaded, the real native host and runtime on the Herdr simulator, and the imitated
chat.z.ai and chat.deepseek.com (tests/fixtures/extension/) served through request routing.

Shown, from the bridge HUD's "Hand off" entry:
- success (z.ai and DeepSeek): the source conversation (bound, its turns journaled by the bridge
  page over its raw channel) is handed to a new conversation of the site: the runtime's package
  typed there as a plain message (exactly the package's message, never wrapped by the JSON
  bridge), the binding moved to `<site>:conv:<new id>` only after the new id and the seed marker
  were on the page, Auto (off) inherited, the source's unacknowledged task outcome and its
  pending wake moved to the new scope (inbox.move), the new conversation's turns journaled into
  the same chain; the imitated model's reply to the seed holds a tool-call line, and the bridge
  runs nothing for it; Auto switched on in the new conversation's HUD then types the moved wake
  there (naming the task), and the outcome is acknowledged. (With Auto on at the source, the
  outcome would have woken the source before any handoff, leaving nothing to move.)
- z.ai, bound through the side panel; the seed marker never shows (the pages show the seed
  without its marker line): `seed_uncertain`, the source keeps its binding, the seed's reply
  still runs nothing, the HUD offers "Resume handoff" and no copy prompt; once pages show the
  marker, Resume reloads the target, probes, finds it and cuts over without typing the seed
  again;
- z.ai, the new-chat page unreachable: `unavailable`, the HUD's entry is "Copy prompt" (the
  package's message, nothing typed anywhere); pasted by hand into a new z.ai conversation, its
  marker there cuts over.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page

from tests.support.extension_harness import BODY_TIMEOUT_S, Browser, Workstation, rig, wait_text
from tests.support.extension_sites import DEEPSEEK, ZAI, RawChatSite, SiteSpec, with_history
from tests.support.extension_sites import HANDOFF_MARKER as MARKER
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import poll_until

pytestmark = pytest.mark.slow

SOURCE = "zsrc0001"
HISTORY = [
    {"role": "user", "text": "Plan the migration, then dispatch the tests."},
    {"role": "assistant", "text": "Dispatching the tests to the coder agent."},
]
LAST_DECISION = "document.documentElement.dataset.herdrBridgeLast ?? null"


@dataclass(kw_only=True)
class ZaiSite(RawChatSite):
    """The imitated chat.z.ai or chat.deepseek.com (tests/support/extension_sites.py) whose model answers a
    handoff seed with a tool-call line (which must not run) and all else with "Noted."."""

    repo: Path

    def seeds(self) -> list[tuple[str, str]]:
        return [(chat, text) for chat, text in self.posts if text.startswith(MARKER)]

    def answer(self, messages: list[dict[str, str]]) -> str:
        if messages[-1]["text"].startswith(MARKER):
            # A model that mistakes the seed for a task: a call line the bridge must not run.
            write = {"path": str(self.repo / "from-seed.txt"), "content": "must not be written\n"}
            return "Resuming.\n" + json.dumps({"tool": "herdr_fs_write", "args": write})
        return "Noted."


def zai_site(
    base: Path, spec: SiteSpec = ZAI, *, drop_seed_marker: bool = False, unreachable_new_chat: bool = False
) -> ZaiSite:
    """The site of `spec` with the source conversation's history, its repo dir `base/repo` made."""
    repo = base / "repo"
    repo.mkdir()
    return ZaiSite(
        host=spec.host,
        fixture=spec.fixture,
        repo=repo,
        conversations=with_history(SOURCE, HISTORY),
        drop_seed_marker=drop_seed_marker,
        unreachable_new_chat=unreachable_new_chat,
    )


@pytest.fixture
def base() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


async def wait_status(page: Page, text: str) -> str:
    return await wait_text(page, "herdr-bridge-hud .status", text, f"the bridge HUD to say {text!r}")


async def bound_source(
    browser: Browser,
    station: Workstation,
    *,
    auto: bool,
    seed_s: int,
    spec: SiteSpec = ZAI,
    panel: bool = False,
    connect_s: int = 20,
) -> Page:
    """The source conversation, bound by `bind_source` before the browser started (the worker
    reads the bindings when it connects) or, with `panel`, through the side panel; Auto as asked;
    its turns journaled."""
    await browser.merge_options(
        {"handoffSeedDeadlineSec": seed_s, "handoffConnectDeadlineSec": connect_s},
        also={f"auto:{spec.scope(SOURCE)}": auto},
    )
    page = await browser.context.new_page()
    await page.goto(spec.url(SOURCE))
    if panel:  # bound through the side panel, as a person does
        await page.locator("herdr-bridge-hud .status").filter(has_text="Not bound").wait_for()
        await (await browser.bind(station.workspace_id())).close()
    # A page may report its turns before the worker has read the bindings; once the HUD says
    # bound, a reload reports them again to a worker that knows.
    await wait_status(page, "Bound to")
    await page.reload()
    await wait_status(page, "Bound to")
    await browser.journaled(SOURCE, 2, "the source's history in the continuity journal")
    return page


async def bind_source(station: Workstation, spec: SiteSpec = ZAI) -> None:
    await station.post(
        "/browser/binding.set", {"scope": spec.scope(SOURCE), "workspace_id": station.workspace_id()}
    )


async def unread(station: Workstation, scope: str) -> list[dict[str, Any]] | None:
    items: list[dict[str, Any]] = (await station.post("/browser/inbox.read", {"scope": scope}))["items"]
    return items or None


async def seed_reply_ran_nothing(browser: Browser, zai: ZaiSite, target: str) -> Page:
    """The new conversation's tab, once the bridge has judged the model's reply to the seed (it
    carries a call line) and run nothing for it."""
    page = await browser.tab_on(f"/{target}")

    async def decided() -> str | None:
        value: str | None = await page.evaluate(LAST_DECISION)
        return value

    assert "handoff seed" in await poll_until(decided, "the bridge to judge the seed's reply")
    assert not (zai.repo / "from-seed.txt").exists()
    return page


@pytest.mark.parametrize("spec", [ZAI, DEEPSEEK], ids=lambda spec: spec.name)
def test_handoff_seeds_over_the_raw_channel_and_moves_the_binding(base: Path, spec: SiteSpec) -> None:
    async def body() -> None:
        zai = zai_site(base, spec)
        async with rig(base) as world:
            station = world.station
            await bind_source(station, spec)
            # A task of the source's, finished and not acknowledged: its inbox entry must follow.
            await station.prompt("run the tests", scope=spec.scope(SOURCE))
            station.settle("done")
            (entry,) = await poll_until(
                partial(unread, station, spec.scope(SOURCE)), "the task's outcome in the inbox"
            )
            async with world.launch(routes=[(spec.pattern, zai.route)]) as browser:
                source = await bound_source(browser, station, auto=False, seed_s=30, spec=spec)
                await source.locator("herdr-bridge-hud .handoff").click()
                record = await browser.handoff(spec.scope(SOURCE), "done")
                target = record["targetConvKey"]
                assert target and target != SOURCE
                # Exactly the package's message, typed as a plain message into the new conversation.
                assert zai.seeds() == [(target, await station.package_message(record))]
                assert not [t for _, t in zai.posts if t.startswith("HERDR_BRIDGE_V1")], "no bridge wrapper"
                moved = await station.binding(spec.scope(target))
                assert moved and moved["workspace_id"] == station.workspace_id()
                assert await station.binding(spec.scope(SOURCE)) is None
                assert await browser.storage(f"auto:{spec.scope(target)}") is None, "Auto (off) inherited"
                assert await unread(station, spec.scope(SOURCE)) is None, "nothing left under the old scope"
                moved_entries = await unread(station, spec.scope(target)) or []
                assert [item["inbox_id"] for item in moved_entries] == [entry["inbox_id"]]
                assert (await browser.storage(f"wake:{spec.scope(target)}") or {}).get("pending")
                assert await browser.storage(f"chain:{target}") == record["continuityId"]
                await wait_status(source, f"handed off to {target}")

                # The model's reply to the seed carries a call line: the bridge runs nothing.
                page = await seed_reply_ran_nothing(browser, zai, target)
                assert await browser.storage(f"bridge:dispatched:{spec.scope(target)}") is None
                assert [text for _, text in zai.posts if text.startswith("TOOL_RESULT")] == []

                # The new conversation's turns journal into the same chain (bound there now).
                async def journaled() -> bool:
                    return len(await browser.storage(f"journal:{target}") or []) >= 1

                await poll_until(journaled, "the new conversation's turns in the journal")
                resolved = await station.post(
                    "/browser/turn.resolve",
                    {"conversation_url": spec.url(target), "max_turns": 5},
                )
                assert resolved["context"]["continuity_id"] == record["continuityId"], resolved

                # Auto on in the new conversation's HUD: the moved wake is typed there, once.
                assert not [t for _, t in zai.posts if t.startswith("[herdr-mcp]")], "no wake before Auto"
                await page.locator("herdr-bridge-hud .auto").click()

                async def woken() -> list[tuple[str, str]] | None:
                    wakes = [(c, t) for c, t in zai.posts if t.startswith("[herdr-mcp] No agent")]
                    return wakes or None

                ((chat, wake),) = await poll_until(woken, "the moved wake in the new conversation")
                assert chat == target and f"Task {entry['task_id']}: {entry['outcome']}." in wake, wake
                assert '{"tool": ..., "args": {...}}' in wake, "the wake tells the model the bridge's form"

                async def acknowledged() -> bool:
                    return await unread(station, spec.scope(target)) is None

                await poll_until(acknowledged, "the moved outcome acknowledged after the wake")

    run(body(), timeout=BODY_TIMEOUT_S)


def test_zai_seed_marker_never_shown_is_uncertain_and_resume_cuts_over_later(base: Path) -> None:
    async def body() -> None:
        zai = zai_site(base, drop_seed_marker=True)
        async with rig(base) as world:
            station = world.station
            async with world.launch(routes=[(ZAI.pattern, zai.route)]) as browser:
                source = await bound_source(browser, station, auto=False, seed_s=4, panel=True)
                await source.locator("herdr-bridge-hud .handoff").click()
                record = await browser.handoff(ZAI.scope(SOURCE), "seed_uncertain")
                target = record["targetConvKey"]
                assert target, "the page did move to a new conversation"
                assert record["error"]["code"] == "seed_uncertain"
                assert (await station.binding(ZAI.scope(SOURCE)) or {}).get(
                    "workspace_id"
                ) == station.workspace_id()
                assert await station.binding(f"zai:conv:{target}") is None, "the source stays"
                handoff = source.locator("herdr-bridge-hud .handoff")
                await handoff.filter(has_text="Resume handoff").wait_for()
                await wait_status(source, "Handoff not confirmed yet")
                assert [chat for chat, _ in zai.seeds()] == [target]
                # The page showed the seed without its marker; its reply's call line still ran nothing.
                await seed_reply_ran_nothing(browser, zai, target)

                # Pages show the marker again; Resume reloads the target, finds it, types nothing.
                zai.drop_seed_marker = False
                await handoff.click()
                done = await browser.handoff(ZAI.scope(SOURCE), "done")
                assert done["targetConvKey"] == target
                moved = await station.binding(f"zai:conv:{target}")
                assert (moved or {}).get("workspace_id") == station.workspace_id()
                assert await station.binding(ZAI.scope(SOURCE)) is None
                assert [chat for chat, _ in zai.seeds()] == [target], "found, so not sent again"
                assert await browser.storage(f"auto:zai:conv:{target}") is None, "Auto was off"

    run(body(), timeout=BODY_TIMEOUT_S)


def test_zai_browser_control_unavailable_offers_the_copy_prompt_and_a_paste_cuts_over(base: Path) -> None:
    async def body() -> None:
        zai = zai_site(base, unreachable_new_chat=True)
        async with rig(base) as world:
            station = world.station
            await bind_source(station)
            async with world.launch(routes=[(ZAI.pattern, zai.route)]) as browser:
                source = await bound_source(browser, station, auto=False, seed_s=30, connect_s=3)
                await source.locator("herdr-bridge-hud .handoff").click()
                record = await browser.handoff(ZAI.scope(SOURCE), "unavailable")
                assert record["error"]["code"] == "handoff_page_unreachable", record
                await source.locator("herdr-bridge-hud .handoff").filter(has_text="Copy prompt").wait_for()
                assert zai.posts == [], "nothing typed anywhere"
                message = await station.package_message(record)
                assert record["message"] == message, "the copy prompt is the package's message"

                # The person pastes it into a new z.ai conversation: its marker there cuts over.
                zai.unreachable_new_chat = False
                fresh = await browser.context.new_page()
                await fresh.goto("https://chat.z.ai/")
                await fresh.locator("#chat-input").fill(message)
                await fresh.locator("#send-message-button").click()
                done = await browser.handoff(ZAI.scope(SOURCE), "done")
                target = done["targetConvKey"]
                assert fresh.url == ZAI.url(target)
                moved = await station.binding(ZAI.scope(target))
                assert (moved or {}).get("workspace_id") == station.workspace_id()
                assert await station.binding(ZAI.scope(SOURCE)) is None
                assert [chat for chat, _ in zai.seeds()] == [target]

    run(body(), timeout=BODY_TIMEOUT_S)
