"""The extension in the person's language, end to end: Debian's Chromium launched with
`--lang=zh-CN` and with `--lang=en-US` (Chrome picks `_locales/zh_CN` or `_locales/en`), the
extension loaded, the real native host and runtime on the Herdr simulator
(tests/support/extension_harness.py), chatgpt.com imitated (tests/support/extension_sites.py).

In each language, through the page's HUD, the side panel and the options page as a person uses
them:

- the HUD, the side panel and the options page speak the language (and the HUD shows no internal
  word: `conv`, `seed_uncertain`; the options no storage key such as `progressTickSec`);
- Continue on a page bound to nothing types a message that names no workspace;
- Check Herdr is disabled on an unbound page; bound, one press types one message with the
  workspace's live state (its agents by name and status); with Auto on it is locked;
- the side panel lists the workspace once;
- at 1280x720, the HUD with every part shown (a long state line, the handoff prompt box) stays
  clear of a composer grown to its full height (bounding boxes); on the imitated z.ai and
  DeepSeek too (the bridge's HUD, each part's box against the composer's).

Screenshots of the HUD, the side panel and the options page in both languages go to
`$HERDR_MCP_SCREENSHOTS` (default /tmp/herdr-screens); the test prints the directory.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import BrowserContext, Page, Playwright, async_playwright

from tests.support.extension_harness import (
    BODY_TIMEOUT_S,
    Workstation,
    extension_browser,
    extension_id,
    install_native_host,
    launched,
    workstation,
)
from tests.support.extension_sites import DEEPSEEK, ZAI, ChatGPTSite, MarkdownChatSite, with_history
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import DEADLINE_S, poll_until

pytestmark = pytest.mark.slow

HUD = "herdr-mcp-hud"
HISTORY = [
    {"id": "u-1", "role": "user", "text": "Plan the next step."},
    {"id": "a-1", "role": "assistant", "text": "Dispatching it to the coder agent."},
]
SCREENS = Path(os.environ.get("HERDR_MCP_SCREENSHOTS", "/tmp/herdr-screens"))


@dataclass(frozen=True)
class Language:
    """What each language must show (from its catalog, checked here as a person reads it)."""

    flag: str
    tag: str
    not_bound: str
    bound: str
    continue_label: str
    check_label: str
    auto_on: str
    continue_unbound: str
    check_header: str
    panel_bound: str
    panel_heading: str
    option_label: str
    saved: str


ZH = Language(
    flag="zh-CN",
    tag="zh",
    not_bound="未绑定",
    bound="已绑定 api",
    continue_label="继续",
    check_label="查 Herdr",
    auto_on="自动：开",
    continue_unbound="[herdr-mcp] 继续：请进行下一步。",
    check_header="的 Herdr 实时状态：",
    panel_bound="已绑定到 api",
    panel_heading="Workspace 列表",
    option_label="检查 Agent 新输出的间隔（秒）",
    saved="已保存",
)
EN = Language(
    flag="en-US",
    tag="en",
    not_bound="Not bound",
    bound="Bound to api",
    continue_label="Continue",
    check_label="Check Herdr",
    auto_on="Auto: on",
    continue_unbound="[herdr-mcp] Continue: go on with the next step.",
    check_header="Herdr's live state of workspace",
    panel_bound="Bound to api",
    panel_heading="Workspaces",
    option_label="Check for new agent output every (seconds)",
    saved="Saved",
)


@pytest.fixture
def base() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


@contextlib.asynccontextmanager
async def chromium(
    playwright: Playwright, profile: Path, site: ChatGPTSite, lang: str
) -> AsyncIterator[BrowserContext]:
    """Chromium in UI language `lang` with extension/ loaded and chatgpt.com routed to `site`."""
    async with launched(playwright, profile, site, lang=lang) as browser:
        yield browser.context


async def text_of(page: Page, selector: str, needle: str, what: str) -> str:
    """Wait until the element at `selector` shows `needle`; return its text."""

    async def probe() -> str | None:
        text = await page.locator(selector).inner_text()
        return text if needle in text else None

    return await poll_until(probe, what)


async def posts(site: ChatGPTSite, conv: str, needle: str, count: int, what: str) -> list[str]:
    async def probe() -> list[str] | None:
        found = [text for text in site.texts(conv) if needle in text]
        return found if len(found) >= count else None

    return await poll_until(probe, what)


async def panel_page(context: BrowserContext, path: str) -> Page:
    page = await context.new_page()
    await page.goto(f"chrome-extension://{extension_id()}/{path}")
    return page


async def shot(page: Page, name: str, full_page: bool = False) -> None:
    SCREENS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SCREENS / name), full_page=full_page)


async def assert_hud_clear_of_composer(page: Page) -> None:
    """Every part of the HUD shown (a long state line, the handoff prompt box) and the composer
    grown to its full height: their boxes do not meet at 1280x720."""
    await page.locator("#prompt-textarea").fill("\n".join(f"draft line {n}" for n in range(12)))
    await page.evaluate(
        """(tag) => {
            const root = document.querySelector(tag).shadowRoot;
            const lines = Array.from({length: 14}, (_, n) => `state line ${n}`);
            root.querySelector(".line").textContent = lines.join("\\n");
            root.querySelector(".health").textContent = "health line";
            const copy = root.querySelector(".copy");
            copy.value = "handoff prompt"; copy.classList.add("shown");
        }""",
        HUD,
    )
    hud = await page.locator(f"{HUD} .hud").bounding_box()
    composer = await page.locator("#composer").bounding_box()
    assert hud is not None and composer is not None
    assert composer["height"] > 100, f"the composer grew: {composer}"
    assert hud["y"] + hud["height"] <= composer["y"], f"the HUD {hud} reaches the composer {composer}"
    assert hud["y"] >= 0 and hud["x"] + hud["width"] <= 1280, hud
    await page.locator("#prompt-textarea").fill("")


async def one_language(playwright: Playwright, station: Workstation, base: Path, lang: Language) -> None:
    conv = f"conv-i18n-{lang.tag}"
    site = ChatGPTSite(conversations=with_history(conv, HISTORY))
    profile = base / f"profile-{lang.tag}"
    install_native_host(profile, station.config_dir)
    async with chromium(playwright, profile, site, lang.flag) as context:
        page = await context.new_page()
        await page.goto(f"https://chatgpt.com/c/{conv}")
        await text_of(page, f"{HUD} .line", lang.not_bound, f"the HUD to say {lang.not_bound!r}")
        assert await page.locator(f"{HUD} .continue").inner_text() == lang.continue_label
        assert await page.locator(f"{HUD} .check").inner_text() == lang.check_label
        assert await page.locator(f"{HUD} .check").is_disabled(), "Check Herdr needs a bound workspace"
        hud_text = await page.locator(f"{HUD} .hud").inner_text()
        for internal in (r"\bconv\b", "seed_uncertain", "seed marker"):
            assert not re.search(internal, hud_text), (internal, hud_text)

        # Continue on an unbound page: a message that names no workspace.
        await page.locator(f"{HUD} .continue").click()
        (sent,) = await posts(site, conv, "[herdr-mcp]", 1, "Continue's message on the unbound page")
        assert sent == lang.continue_unbound, sent

        # The side panel: bind; the workspace is listed once.
        panel = await panel_page(context, "src/sidepanel/sidepanel.html")
        await panel.set_viewport_size({"width": 380, "height": 900})
        await panel.locator(f'#workspace option[value="{station.workspace_id()}"]').wait_for(state="attached")
        await panel.select_option("#workspace", station.workspace_id())
        await panel.click("#bind")
        await text_of(panel, "#message", lang.panel_bound, "the panel to say bound")
        await panel.locator(".cc-ws").first.wait_for(timeout=DEADLINE_S * 1000)
        assert await panel.locator(".cc-ws").count() == 1
        assert await panel.locator("#workspaces").count() == 0, "no second list of workspaces"
        assert (await panel.locator("#control h2").text_content()) == lang.panel_heading
        assert await panel.locator("html").get_attribute("lang") == ("zh-CN" if lang.tag == "zh" else "en")
        await panel.locator("li.cc-pane").first.wait_for(timeout=DEADLINE_S * 1000)
        await shot(panel, f"sidepanel-{lang.tag}.png", full_page=True)
        await panel.close()

        # Bound: Check Herdr sends the live state once.
        await page.bring_to_front()
        await text_of(page, f"{HUD} .line", lang.bound, "the HUD to say bound")
        check = page.locator(f"{HUD} .check")
        await poll_until(check.is_enabled, "Check Herdr enabled once bound")
        await check.click()
        (state,) = await posts(site, conv, lang.check_header, 1, "Check Herdr's message")
        assert "coder" in state and "reviewer" in state and '"api"' in state, state
        # The page confirmed it (its own turn): the HUD's last note says so, and nothing more came.
        await text_of(page, f"{HUD} .line", "Herdr", "the HUD's note of the check")
        assert len([text for text in site.texts(conv) if lang.check_header in text]) == 1

        # Auto on locks Check Herdr and Continue.
        await page.locator(f"{HUD} .auto").click()
        await page.locator(f"{HUD} .auto").filter(has_text=lang.auto_on).wait_for()
        assert await check.is_disabled() and await page.locator(f"{HUD} .continue").is_disabled()
        await page.locator(f"{HUD} .auto").click()  # off again, for the picture

        await shot(page, f"hud-{lang.tag}.png")
        await assert_hud_clear_of_composer(page)

        # The options page: labels for people, in the language; saving says so.
        options = await panel_page(context, "src/options/options.html")
        await options.locator("label[for=progressTickSec]").filter(has_text=lang.option_label).wait_for()
        body = await options.locator("body").inner_text()
        for key in ("progressTickSec", "progressFallbackSec", "rolloverThreshold", "staleAfterSec"):
            assert key not in body, key
        await options.locator("#progressTickSec").fill("60")
        await options.click("button[type=submit]")
        await options.locator("#saved").filter(has_text=lang.saved).wait_for()
        await shot(options, f"options-{lang.tag}.png", full_page=True)


def test_ui_in_chinese_and_english(base: Path) -> None:
    async def body() -> None:
        with workstation(base) as station:
            async with async_playwright() as playwright:
                for lang in (ZH, EN):
                    await one_language(playwright, station, base, lang)
        print(f"screenshots in {SCREENS}")

    run(body(), BODY_TIMEOUT_S)


async def assert_bridge_hud_clear_of_composer(page: Page, site: str) -> None:
    """The bridge HUD on an imitated z.ai / DeepSeek page (tests/fixtures/extension/
    markdown-site.html) at 1280x720: every part shown (a long state line, the health line, the
    handoff prompt box, a long bridge row) and the composer's textarea grown with a long draft, as
    the sites' textareas grow with their text (the height set to the draft's, capped at 200 px:
    the live caps are not in the evidence); no part's box, as the HUD's own box clips it (what
    does not fit scrolls inside the HUD), meets the composer's. The parts are filled and measured
    in one task of the page, so a HUD update from the worker cannot fall in between."""
    await page.set_viewport_size({"width": 1280, "height": 720})
    tag = "herdr-bridge-hud"
    await page.locator(f"{tag} .hud").wait_for(timeout=DEADLINE_S * 1000)
    await page.locator("#chat-input").fill("\n".join(f"draft line {n}" for n in range(12)))
    parts = (".title", ".line", ".health", ".row", ".handoff-row", ".copy", ".bridge")
    boxes: dict[str, Any] = await page.evaluate(
        """([tag, parts]) => {
            const input = document.querySelector("#chat-input");
            input.style.height = `${Math.min(input.scrollHeight, 200)}px`;
            const root = document.querySelector(tag).shadowRoot;
            const lines = Array.from({length: 14}, (_, n) => `state line ${n}`);
            root.querySelector(".line").textContent = lines.join("\\n");
            root.querySelector(".health").textContent = "health line";
            const copy = root.querySelector(".copy");
            copy.value = "handoff prompt"; copy.classList.add("shown");
            root.querySelector(".bridge-line").textContent = "bridge: ".repeat(40);
            const box = (element) => {
                const {x, y, width, height} = element.getBoundingClientRect();
                return width && height ? {x, y, width, height} : null;
            };
            const hud = root.querySelector(".hud");
            return {
                composer: box(document.querySelector("#composer")),
                hud: box(hud),
                scrolls: hud.scrollHeight > hud.clientHeight,
                parts: Object.fromEntries(parts.map((part) => [part, box(root.querySelector(part))])),
            };
        }""",
        [tag, list(parts)],
    )
    composer, hud = boxes["composer"], boxes["hud"]
    assert composer is not None and composer["height"] > 100, f"{site}: the composer grew: {composer}"
    assert hud is not None
    assert hud["y"] + hud["height"] <= composer["y"], f"{site}: the HUD {hud} reaches the composer {composer}"
    assert hud["y"] >= 0 and hud["x"] + hud["width"] <= 1280, (site, hud)
    assert boxes["scrolls"], f"{site}: every part shown overflows the capped HUD, which scrolls"
    for part in parts:
        box = boxes["parts"][part]
        assert box is not None, f"{site}: {part} is shown"
        seen_bottom = min(box["y"] + box["height"], hud["y"] + hud["height"])
        assert seen_bottom <= composer["y"], f"{site}: the HUD's {part} {box} reaches {composer}"
        assert box["x"] >= 0 and box["x"] + box["width"] <= 1280, (site, part, box)


def test_bridge_hud_clear_of_the_composer_on_zai_and_deepseek(base: Path) -> None:
    async def body() -> None:
        sites = {spec: MarkdownChatSite(host=spec.host, site=spec.name) for spec in (ZAI, DEEPSEEK)}
        routes = [(spec.pattern, site.route) for spec, site in sites.items()]
        async with extension_browser(base, routes=routes) as (_, browser):
            for spec in sites:
                page = await browser.context.new_page()
                await page.goto(spec.url(f"{spec.name}hud1"))
                await assert_bridge_hud_clear_of_composer(page, spec.name)
                await page.close()

    run(body(), BODY_TIMEOUT_S)
