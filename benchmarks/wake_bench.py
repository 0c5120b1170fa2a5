"""Wake latency: a simulated agent settling -> the wake message arriving from the page.

One run: the Herdr simulator, `herdr-mcp serve` on it, Debian's Chromium (headless, Playwright)
with extension/ loaded, the real native host, and the imitated chatgpt.com of
tests/extension_harness.py. A conversation is bound to the workspace with Auto on. Each round:
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

from playwright.async_api import async_playwright
from tests.extension_harness import (
    AGENT,
    ChatGPTSite,
    PushReader,
    install_native_host,
    launched,
    wait_hud,
    workstation,
)
from tests.sim_helpers import short_tmp_dir
from tests.waiting import poll_until

from benchmarks.timing import percentile

CONV = "conv-bench-0001"
URL = f"https://chatgpt.com/c/{CONV}"
WAKE = "No agent in workspace"


async def measure(rounds: int) -> tuple[list[float], list[float]]:
    wakes: list[float] = []
    events: list[float] = []
    with short_tmp_dir() as base, workstation(base) as station:
        profile = base / "profile"
        install_native_host(profile, station.config_dir)
        chat = ChatGPTSite(conversations={CONV: []})
        async with (
            async_playwright() as playwright,
            launched(playwright, profile, chat) as browser,
            PushReader(station) as push,
        ):
            page = await browser.open(URL)
            panel = await browser.bind(station.workspace_id())
            await panel.close()
            await wait_hud(page, "Bound to api")
            await page.locator("herdr-mcp-hud .auto").click()
            await page.locator("herdr-mcp-hud .auto").filter(has_text="Auto: on").wait_for()
            for index in range(rounds):
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

                event_at = await poll_until(pushed, "the settle on the push stream")
                wake_at = await poll_until(woken, f"wake {index + 1}")
                events.append((event_at - start) * 1000)
                wakes.append((wake_at - start) * 1000)
    return wakes, events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    rounds = max(20, args.rounds)
    wakes, events = asyncio.run(measure(rounds))
    print(f"wake latency over {rounds} settles (ms)")
    print(f"{'':38} {'p50':>8} {'p95':>8} {'max':>8}")
    for name, samples in (
        ("settle -> wake message sent by the page", wakes),
        ("settle -> agent_settled on /push/events", events),
    ):
        print(
            f"{name:38} {percentile(samples, 0.5):8.1f} {percentile(samples, 0.95):8.1f} {max(samples):8.1f}"
        )


if __name__ == "__main__":
    main()
