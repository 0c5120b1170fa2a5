"""The JSON-to-MCP bridge end to end (issue 13, Deliver 1): Debian's Chromium with extension/
loaded, the real `herdr-mcp native-host`, a real runtime on the Herdr simulator, and imitations of
chat.z.ai and chat.deepseek.com served through request routing (tests/fixtures/extension/). The
imitated model is scripted here: it answers the protocol prompt (which must list the live tools)
with tool-call lines for herdr_inspect and herdr_fs_read, then herdr_fs_write and herdr_exec
(a non_idempotent_write the bridge gives an idempotency key), then a 256 KiB herdr_fs_read and a
2 MB herdr_fs_image, then plain text. Shown: each round answered by one TOOL_RESULT message in the
same conversation, protocol messages folded, the 2 MB result cleaned and capped, the root page's
conversation id taken once, a reload while a mutation's result was in flight re-running nothing
(the runtime's audit log has each write once), a result kept while a draft blocked it sent after
a reload, and a call present at load run only when the protocol prompt is in the conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, Route

from tests.support.browser_methods_harness import audited
from tests.support.extension_harness import BODY_TIMEOUT_S, extension_browser, rig
from tests.support.extension_sites import RawChatSite
from tests.support.runtime_harness import make_repo
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import poll_until

pytestmark = pytest.mark.slow

MARKER = "HERDR_BRIDGE_V1"
RESULT = f"TOOL_RESULT {MARKER}"
#: extension/src/lib/bridge-clean.js RESULT_CAP_CHARS, plus the per-call header lines.
CAP = 16_000
NOTE = "written by the bridge\n"


@dataclass(kw_only=True)
class Site(RawChatSite):
    """An imitated z.ai or DeepSeek (tests/support/extension_sites.py) with a scripted model answering each
    message."""

    repo: Path
    #: The workspace id herdr_exec is given.
    workspace: str = ""
    #: The model answers every message "Noted." (no calls).
    quiet: bool = False
    #: While set, a posted TOOL_RESULT is not stored and not answered (a send lost in flight).
    lose: bool = False
    _lost: asyncio.Event = field(default_factory=asyncio.Event)

    def results(self, chat_id: str | None = None) -> list[str]:
        return [text for chat, text in self.posts if text.startswith(RESULT) and chat_id in (None, chat)]

    async def lost(self, route: Route, text: str) -> bool:
        if self.lose and text.startswith(RESULT):
            with contextlib.suppress(Exception):  # the page went away meanwhile
                await self._lost.wait()
                await route.abort()
            return True
        return False

    def answer(self, messages: list[dict[str, str]]) -> str:
        """The scripted model: what it answers depends on the conversation so far."""
        last = messages[-1]["text"]
        if self.quiet:
            return "Noted."
        rounds = sum(
            1 for message in messages if message["role"] == "user" and message["text"].startswith(RESULT)
        )
        repo = self.repo
        if last.startswith(MARKER):
            assert '"herdr_fs_write"' not in last and "- herdr_fs_write:" in last, (
                "the prompt lists the live tools"
            )
            return "\n".join([
                "I will look around first.",
                call("herdr_inspect", {}),
                call("herdr_fs_read", {"path": str(repo / "README.md")}),
            ])  # fmt: skip
        if last.startswith("write again"):
            return call("herdr_fs_write", {"path": str(repo / "second.txt"), "content": "second\n"})
        if not last.startswith(RESULT):
            return "Noted."
        if rounds == 1:
            return "\n".join([
                call("herdr_fs_write", {"path": str(repo / "note.txt"), "content": NOTE}),
                # No idempotency_key from the model: the bridge supplies one (the tool requires it
                # for a non_idempotent_write).
                call("herdr_exec", {
                    "workspace": self.workspace, "command": "echo ran >> exec.log",
                    "intent": "non_idempotent_write", "confirm_busy": True,
                }),
            ])  # fmt: skip
        if rounds == 2:
            return "\n".join([
                call("herdr_fs_read", {"path": str(repo / "big.txt"), "max_bytes": 262144}),
                call("herdr_fs_image", {"path": str(repo / "big.png"), "max_bytes": 10485760}),
            ])  # fmt: skip
        return "All done."


def call(tool: str, args: dict[str, Any]) -> str:
    """One call in the bridge's form: a fenced json code block (docs/browser-protocol.md)."""
    return "```json\n" + json.dumps({"tool": tool, "args": args}) + "\n```"


def noise_png(width: int = 1024, height: int = 700) -> bytes:
    """A valid PNG of about 2 MB: random RGB pixels, stored (zlib level 0), so it does not shrink."""
    raw = b"".join(b"\x00" + os.urandom(width * 3) for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 0))
        + chunk(b"IEND", b"")
    )


@pytest.fixture
def base() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


async def page_results(page: Page, selector: str) -> int:
    texts: list[str] = await page.locator(selector).all_inner_texts()
    return sum(1 for text in texts if text.strip().startswith(RESULT))


SITES = {
    # name: (host, fixture, root url, conversation route prefix, user message selector)
    "zai": ("chat.z.ai", "zai.html", "https://chat.z.ai/", "/c/", ".chat-user"),
    "deepseek": (
        "chat.deepseek.com",
        "deepseek.html",
        "https://chat.deepseek.com/",
        "/a/chat/s/",
        ".ds-message",
    ),
}


@pytest.mark.parametrize("name", sorted(SITES))
def test_tool_calls_round_trip_cleaned_and_a_reload_reruns_nothing(base: Path, name: str) -> None:
    host, fixture, root_url, prefix, user_selector = SITES[name]

    async def body() -> None:
        # The workspace's directory as a managed Git root (writes are refused in a plain one).
        repo = make_repo(base / "api", {
            "README.md": b"# the api repo\nbridge marker line\n",
            "big.txt": b"a line of the big file, long enough to matter\n" * 50_000,
            "big.png": noise_png(),
        })  # fmt: skip
        assert (repo / "big.png").stat().st_size > 2_000_000
        async with rig(base) as world:
            station = world.station
            site = Site(host=host, fixture=fixture, repo=repo, workspace=station.workspace_id())
            async with world.launch(routes=[(f"https://{host}/**", site.route)]) as browser:
                page = await browser.context.new_page()
                await page.goto(root_url)
                await page.locator("herdr-bridge-hud button.start").click()

                async def finished() -> str | None:
                    for chat, messages in site.conversations.items():
                        if messages and messages[-1]["text"] == "All done.":
                            return chat
                    return None

                chat = await poll_until(finished, "the scripted model to finish its three rounds")
                assert page.url == f"https://{host}{prefix}{chat}"
                results = site.results(chat)
                assert len(results) == 3, results
                first, second, third = results
                assert "[1] herdr_inspect ok" in first and "[2] herdr_fs_read ok" in first
                assert "bridge marker line" in first
                assert "[1] herdr_fs_write ok" in second and "[2] herdr_exec ok" in second, second
                assert (repo / "exec.log").read_text(encoding="utf-8") == "ran\n"
                (executed,) = audited(station.config_dir, "herdr_exec")
                assert re.fullmatch(r"bridge-[0-9a-f]{32}-1", executed["idempotency_key"]), executed
                assert (repo / "note.txt").read_text(encoding="utf-8") == "written by the bridge\n"
                # The 2 MB image and the 256 KiB read arrive cleaned and capped.
                assert "[1] herdr_fs_read ok" in third and "[2] herdr_fs_image" in third
                assert len(third) < CAP + 400, len(third)
                assert "cut]" in third or "result capped at" in third
                assert "bytes omitted]" in third
                assert len(audited(station.config_dir, "herdr_fs_write")) == 1
                scope = f"{name}:conv:{chat}"
                assert len(await browser.storage(f"bridge:dispatched:{scope}")) == 3

                # Protocol messages are folded in the page.
                # The prompt, the two call-only replies, the three results (a reply with prose stays open).
                async def six_folded() -> bool:
                    return await page.locator('[data-herdr-fold="closed"]').count() == 6

                await poll_until(six_folded, "the protocol messages to be folded")
                prose = page.locator(
                    f"{'.chat-assistant' if name == 'zai' else '.ds-message'}", has_text="look around"
                )
                assert await prose.get_attribute("data-herdr-fold") is None

                # A reload while a mutation's TOOL_RESULT is in flight: the page showed it sent,
                # the site never stored it, so after the reload the last message is the call.
                site.lose = True
                await page.locator("#chat-input").fill("write again")
                await page.locator("#chat-input").press("End")
                send = "#send-message-button" if name == "zai" else '[role="button"][aria-label="Send"]'
                await page.locator(send).click()

                async def result_in_flight() -> bool:
                    return len(site.results(chat)) == 4

                await poll_until(result_in_flight, "the fourth TOOL_RESULT to be posted (and lost)")
                assert (repo / "second.txt").read_text(encoding="utf-8") == "second\n"
                posts_before = len(site.posts)
                await page.reload()

                async def decided() -> str | None:
                    value = await page.evaluate("document.documentElement.dataset.herdrBridgeLast ?? null")
                    return value if isinstance(value, str) else None

                decision = await poll_until(decided, "the reloaded page to decide about the last call")
                assert decision.startswith("skipped: ") and "never re-run" in decision, decision
                assert len(site.posts) == posts_before
                assert len(audited(station.config_dir, "herdr_fs_write")) == 2
                assert await page_results(page, user_selector) == 3
                site._lost.set()

    run(body(), timeout=BODY_TIMEOUT_S)


def test_a_call_there_at_load_runs_only_with_the_protocol_context(base: Path) -> None:
    """A conversation whose last message is a never-dispatched call and which holds the protocol
    prompt runs it once on load; one without the prompt runs nothing, also when the tab moves to
    it from the first conversation inside the page (nothing of A is carried to B)."""

    async def body() -> None:
        repo = make_repo(base / "api", {"README.md": b"# the api repo\nread at load\n"})
        read = call("herdr_fs_read", {"path": str(repo / "README.md")})
        site = Site(host="chat.z.ai", fixture="zai.html", repo=repo, quiet=True)
        site.conversations["withprompt"] = [
            {"role": "user", "text": f"{MARKER}\n(the protocol prompt of an earlier page)"},
            {"role": "assistant", "text": read},
        ]
        site.conversations["without"] = [
            {"role": "user", "text": "hello"},
            {"role": "assistant", "text": read},
        ]
        routes = [("https://chat.z.ai/**", site.route)]
        async with extension_browser(base, routes=routes) as (_station, browser):
            page = await browser.context.new_page()
            await page.goto("https://chat.z.ai/c/withprompt")

            async def answered() -> list[str] | None:
                return site.results("withprompt") or None

            (result,) = await poll_until(answered, "the call there at load to be run and answered")
            assert "[1] herdr_fs_read ok" in result and "read at load" in result
            # The model's answer to the result shown (no reply in flight) before the tab moves:
            # the imitation would otherwise put it into the next conversation's thread.
            await page.locator(".chat-assistant", has_text="Noted.").wait_for()
            await page.locator("#send-message-button").wait_for()
            await page.evaluate(
                "history.pushState({}, '', '/c/without'); dispatchEvent(new PopStateEvent('popstate'))"
            )

            async def decided() -> str | None:
                value = await page.evaluate("document.documentElement.dataset.herdrBridgeLast ?? null")
                return value if isinstance(value, str) and "protocol context" in value else None

            assert await poll_until(decided, "the bridge to refuse the call without context")
            assert site.results("without") == []
            assert site.results("withprompt") == [result]
            assert await browser.storage("bridge:dispatched:zai:conv:without") is None
            assert len(await browser.storage("bridge:dispatched:zai:conv:withprompt")) == 1

    run(body(), timeout=BODY_TIMEOUT_S)


def test_a_result_kept_before_a_reload_is_sent_and_nothing_runs_again(base: Path) -> None:
    """The calls ran but the person's draft kept the TOOL_RESULT from being sent; the page is
    reloaded (the draft goes with it): the kept result is sent once and the write is not repeated."""

    async def body() -> None:
        repo = make_repo(base / "api", {"README.md": b"# the api repo\n"})
        site = Site(host="chat.z.ai", fixture="zai.html", repo=repo)
        site.conversations["kept"] = [{"role": "user", "text": f"{MARKER}\n(the protocol prompt)"}]
        routes = [("https://chat.z.ai/**", site.route)]
        async with extension_browser(base, routes=routes) as (station, browser):
            page = await browser.context.new_page()
            await page.goto("https://chat.z.ai/c/kept")
            await page.locator(".chat-user").first.wait_for()
            site.gate = asyncio.Event()
            await page.locator("#chat-input").fill("write again")
            await page.locator("#send-message-button").click()
            await page.locator("#stop-response-button").wait_for()
            await page.locator("#chat-input").fill("a draft of the person's")
            site.gate.set()

            async def kept() -> list[str] | None:
                everything = await browser.worker.evaluate("async () => chrome.storage.local.get(null)")
                found = [key for key in everything if key.startswith("bridge:result:zai:conv:kept:")]
                return found or None

            (key,) = await poll_until(kept, "the TOOL_RESULT to be kept while the draft blocks it")
            assert (repo / "second.txt").read_text(encoding="utf-8") == "second\n"
            assert site.results("kept") == []
            site.quiet = True  # the model's answer to the result makes no further calls
            await page.reload()

            async def sent() -> list[str] | None:
                return site.results("kept") or None

            (result,) = await poll_until(sent, "the kept result to be sent after the reload")
            assert "[1] herdr_fs_write ok" in result
            decision = await page.evaluate("document.documentElement.dataset.herdrBridgeLast")
            assert decision.startswith("stored: "), decision
            assert len(audited(station.config_dir, "herdr_fs_write")) == 1

            async def forgotten() -> bool:
                return await browser.storage(key) is None

            await poll_until(forgotten, "the kept result to be dropped once sent")

    run(body(), timeout=BODY_TIMEOUT_S)
