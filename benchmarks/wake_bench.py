"""Wake latency: a simulated agent settling -> the wake message arriving from the page.

One run: the Herdr simulator, `herdr-mcp serve` on it, Debian's Chromium (headless, Playwright)
with extension/ loaded, the real native host, and the imitated chatgpt.com and chat.z.ai of
tests/support/extension_sites.py. A ChatGPT conversation and a z.ai conversation are bound to the same
workspace with Auto on, so each settle wakes both: the z.ai page (the bridge's raw channel, with
its stricter "at rest" check) is measured against ChatGPT's in the same rounds. Each round:
the agent is set working, the round waits until the extension has handled that event (its
persisted push seq reached it), then the clock starts and the agent settles; the round ends when
the imitated site receives the wake message the extension typed into the composer and sent
(the page POSTs it on the send button's click, so this includes typing, clicking and the page's
own request). Printed: p50, p95 and max over the rounds, and the same for a plain push event
(settle -> the test's own reader of /push/events), which is the runtime's share.

Run from the repository root with the project installed: `python benchmarks/wake_bench.py`
(`--rounds` to change the count; at least 20). Exits 0 (figures, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playwright.async_api import Page, async_playwright
from tests.support.extension_harness import (
    AGENT,
    ChatGPTSite,
    PushReader,
    install_native_host,
    launched,
    wait_hud,
    wait_text,
    workstation,
)
from tests.support.extension_sites import ZAI, RawChatSite
from tests.support.sim_helpers import short_tmp_dir
from tests.support.waiting import poll_until

from benchmarks.timing import percentile

CONV = "conv-bench-0001"
URL = f"https://chatgpt.com/c/{CONV}"
ZAI_CHAT = "zbench0001"
WAKE = "No agent in workspace"


class TimedZai(RawChatSite):
    """The imitated z.ai, noting when each message reached its API (the page POSTs it on send)."""

    def __init__(self) -> None:
        super().__init__(host=ZAI.host, fixture=ZAI.fixture, conversations={ZAI_CHAT: []})
        self.arrivals: list[tuple[str, float]] = []

    def answer(self, messages: list[dict[str, str]]) -> str:
        self.arrivals.append((messages[-1]["text"], time.monotonic()))
        return "Noted."


async def measure(rounds: int) -> tuple[list[float], list[float], list[float]]:
    wakes: list[float] = []
    zai_wakes: list[float] = []
    events: list[float] = []
    with short_tmp_dir() as base, workstation(base) as station:
        profile = base / "profile"
        install_native_host(profile, station.config_dir)
        chat = ChatGPTSite(conversations={CONV: []})
        zai = TimedZai()
        await station.post(
            "/browser/binding.set", {"scope": ZAI.scope(ZAI_CHAT), "workspace_id": station.workspace_id()}
        )
        async with (
            async_playwright() as playwright,
            launched(playwright, profile, chat, routes=[(ZAI.pattern, zai.route)]) as browser,
            PushReader(station) as push,
        ):
            zai_page = await browser.context.new_page()
            await zai_page.goto(ZAI.url(ZAI_CHAT))
            await wait_text(zai_page, "herdr-bridge-hud .status", "Bound to api", "the z.ai page bound")
            await zai_page.locator("herdr-bridge-hud .auto").click()
            await zai_page.locator("herdr-bridge-hud .auto").filter(has_text="Auto: on").wait_for()
            page = await browser.open(URL)
            panel = await browser.bind(station.workspace_id())
            await panel.close()
            await wait_hud(page, "Bound to api")
            await page.locator("herdr-mcp-hud .auto").click()
            await page.locator("herdr-mcp-hud .auto").filter(has_text="Auto: on").wait_for()
            for index in range(rounds):
                # Both pages at rest, as the worker was told: a round starts from quiet pages (the
                # replies to the last round's wakes in, and each page's next look taken).
                for quiet in (page, zai_page):

                    async def rest(quiet: Page = quiet) -> bool:
                        return bool(
                            await quiet.evaluate("document.documentElement.dataset.herdrRest === 'true'")
                        )

                    await poll_until(rest, "a page at rest")
                seen = len(push.of("agent_working"))
                station.settle("working", agent=AGENT)

                async def working(seen: int = seen) -> int | None:
                    found = push.of("agent_working")
                    return int(found[-1]["seq"]) if len(found) > seen else None

                seq = await poll_until(working, "the agent working")

                async def handled(seq: int = seq) -> bool:
                    stored = await browser.storage("push:lastSeq")
                    return stored is not None and stored >= seq

                await poll_until(handled, "the extension to handle the working event")
                settled = len(push.of("agent_settled"))
                start = time.monotonic()
                station.settle("done", agent=AGENT)

                async def pushed(settled: int = settled) -> float | None:
                    return time.monotonic() if len(push.of("agent_settled")) > settled else None

                async def woken(count: int = index + 1) -> float | None:
                    posts = [post for post in chat.posts if WAKE in post.text]
                    return posts[-1].at if len(posts) >= count else None

                async def zai_woken(count: int = index + 1) -> float | None:
                    posts = [at for text, at in zai.arrivals if WAKE in text]
                    return posts[-1] if len(posts) >= count else None

                event_at = await poll_until(pushed, "the settle on the push stream")
                wake_at = await poll_until(woken, f"wake {index + 1}")
                zai_at = await poll_until(zai_woken, f"z.ai wake {index + 1}")
                events.append((event_at - start) * 1000)
                wakes.append((wake_at - start) * 1000)
                zai_wakes.append((zai_at - start) * 1000)
    return wakes, zai_wakes, events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    rounds = max(20, args.rounds)
    wakes, zai_wakes, events = asyncio.run(measure(rounds))
    print(f"wake latency over {rounds} settles (ms)")
    print(f"{'':42} {'p50':>8} {'p95':>8} {'max':>8}")
    for name, samples in (
        ("settle -> wake sent by the ChatGPT page", wakes),
        ("settle -> wake sent by the z.ai page", zai_wakes),
        ("settle -> agent_settled on /push/events", events),
    ):
        print(
            f"{name:42} {percentile(samples, 0.5):8.1f} {percentile(samples, 0.95):8.1f} {max(samples):8.1f}"
        )
    ratio = percentile(zai_wakes, 0.5) / percentile(wakes, 0.5)
    print(f"z.ai / ChatGPT wake p50 in the same rounds: {ratio:.2f}")


if __name__ == "__main__":
    main()
