"""Three of the bridge's guarantees end to end (issue 20; the call form of df8b2d0): Debian's
Chromium with extension/, the real native host and runtime on the Herdr simulator, and the
imitations of chat.z.ai and chat.deepseek.com that render replies as Markdown while streaming
(tests/fixtures/extension/markdown-site.html through tests/support/extension_sites.py MarkdownChatSite).

- A reload during a long call: the page is reloaded while a reply's `herdr_exec` runs; the
  command holds until the reloaded page has asked for that reply (it waits for a file the test
  writes then, so the reload falls inside the call on any machine). Exactly one TOOL_RESULT for
  the reply reaches the site, the command ran once (the files it appends to, the audit log), and
  the reloaded page got the result of the run it joined.
- A fast reply made only of malformed calls (two objects on a line, JSON cut midway), rendered and
  finished well inside one quiet period, still reaches the model: one TOOL_RESULT with both error
  texts, nothing run, on z.ai and DeepSeek.
- The quiet period on its own: a script the test adds to the page (`WATCH`) takes away both
  generating signals the adapters read (the stop control, and on z.ai the reply row still without
  its action bar), so nothing says the reply is streaming. A write call in the reply's first chunk
  does not run while the reply streams, nor before its content has been unchanged for the quiet
  period (`QUIET_MS` in bridge-main.js), and then runs once.

The page script also records when the last reply's content last changed and when the imitation's
stream began and ended (`window.__herdrTest`), in the page's own clock (Date.now(), wall time:
the same clock as a file's mtime).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page

from tests.support.browser_methods_harness import audited
from tests.support.extension_harness import BODY_TIMEOUT_S, Browser, rig
from tests.support.extension_sites import DEEPSEEK, TOOL_RESULT, ZAI, ScriptedMarkdownSite, SiteSpec
from tests.support.runtime_harness import make_repo
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import poll_until, wait_until_async

pytestmark = pytest.mark.slow

#: extension/src/content/bridge-main.js QUIET_MS.
QUIET_MS = 1_200
#: Timestamps compared across the page's clock and the file system's (coarse, a few ms).
CLOCK_SLACK_MS = 50

#: Added to each page before its own scripts (Playwright init script, page world). It records the
#: last reply's content changes and the imitation's streaming flag; with SIGNALS_OFF it also takes
#: away every generating signal the adapters read (zai-dom.js, deepseek-dom.js), on each mutation,
#: before any task of the content script can look: the stop control is removed and a z.ai reply
#: row gets its action bar at once ("selector without evidence": the page says nothing while it
#: streams). `signals()` names any generating signal still showing.
WATCH = """
(() => {
  const signalsOff = SIGNALS_OFF;
  const ARROW = "M8.3125";
  const seen = { changes: 0, lastChange: 0, text: null, streaming: [], removed: 0 };
  const stopControls = () => [
    ...document.querySelectorAll("#action > button:not(#send-message-button)"),
    ...[...document.querySelectorAll("#action .ds-button--circle")].filter(
      (circle) => !(circle.querySelector("svg path")?.getAttribute("d") ?? "").startsWith(ARROW),
    ),
  ];
  const unfinishedRows = () =>
    [...document.querySelectorAll(".chat-assistant")].filter(
      (row) => !row.querySelector(".copy-response-button"),
    );
  seen.signals = () => [
    ...stopControls().map(() => "stop control"),
    ...unfinishedRows().map(() => "reply row without its action bar"),
  ];
  window.__herdrTest = seen;
  function hide() {
    for (const control of stopControls()) {
      control.remove();
      seen.removed += 1;
    }
    for (const row of unfinishedRows()) {
      const bar = document.createElement("div");
      bar.className = "buttons";
      for (const name of ["copy-response-button", "regenerate-response-button"]) {
        const button = document.createElement("button");
        button.className = name;
        button.setAttribute("aria-label", name);
        bar.append(button);
      }
      row.append(bar);
      seen.removed += 1;
    }
  }
  function note() {
    const rows = document.querySelectorAll(".chat-assistant, .ds-message.assistant");
    const text = rows.length ? rows[rows.length - 1].textContent : null;
    if (text !== seen.text) {
      seen.text = text;
      seen.changes += 1;
      seen.lastChange = Date.now();
    }
    const flag = document.documentElement?.dataset.imitationStreaming;
    if (flag !== undefined && flag !== seen.streaming.at(-1)?.flag) {
      seen.streaming.push({ flag, at: Date.now(), lastChange: seen.lastChange });
    }
  }
  new MutationObserver(() => {
    if (signalsOff) {
      hide();
    }
    note();
  }).observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
})();
"""


def block(*objects: str) -> str:
    return "```json\n" + "\n".join(objects) + "\n```"


def call(tool: str, args: dict[str, Any]) -> str:
    return json.dumps({"tool": tool, "args": args})


@pytest.fixture
def base() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


async def start_tools(browser: Browser, spec: SiteSpec, signals_off: bool = False) -> tuple[Page, str]:
    """A new chat on `spec`'s root page (with `WATCH`), "Start Herdr tools" pressed; the page and the
    conversation id it moved to."""
    page = await browser.context.new_page()
    await page.add_init_script(script=WATCH.replace("SIGNALS_OFF", json.dumps(signals_off)))
    await page.goto(f"https://{spec.host}/")
    await page.locator("herdr-bridge-hud button.start").click()

    async def moved() -> str | None:
        path = page.url.split(spec.host, 1)[1]
        return path[len(spec.prefix) :] if path.startswith(spec.prefix) else None

    return page, await poll_until(moved, f"the new chat on {spec.name} to get its id")


async def answered(site: ScriptedMarkdownSite, chat: str, what: str) -> None:
    """Wait until the model has answered a TOOL_RESULT in `chat` ("Done.")."""

    async def done() -> bool:
        messages = site.conversations.get(chat, [])
        return bool(messages) and messages[-1]["text"] == "Done."

    await poll_until(done, what)


async def kept_results(browser: Browser, scope: str) -> list[str]:
    everything = await browser.worker.evaluate("async () => chrome.storage.local.get(null)")
    return [key for key in everything if key.startswith(f"bridge:result:{scope}:")]


async def first_stream(page: Page) -> tuple[dict[str, Any], dict[str, Any]]:
    """The page's first streamed reply (the answer to the prompt) as `WATCH` saw the imitation's
    stream flag: its start and its end, each `{flag, at, lastChange}`."""
    flags: list[dict[str, Any]] = await page.evaluate("window.__herdrTest.streaming")
    began, end = flags[:2]
    assert (began["flag"], end["flag"]) == ("1", "0"), flags
    return began, end


def test_a_reload_during_a_long_call_delivers_its_result_once(base: Path) -> None:
    async def body() -> None:
        repo = make_repo(base / "api", {"README.md": b"# api\n"})
        # The command appends to started.log, holds until the test writes `release` (at most
        # about 20 s), then appends to done.log.
        command = (
            "echo started >> started.log; n=0; "
            "while [ ! -e release ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done; "
            "echo done >> done.log"
        )
        async with rig(base) as world:
            station = world.station
            site = ScriptedMarkdownSite(host=ZAI.host, site=ZAI.name)
            site.reply = "Running the long command.\n\n" + block(call("herdr_exec", {
                "workspace": station.workspace_id(), "command": command,
                "intent": "non_idempotent_write", "confirm_busy": True,
            }))  # fmt: skip
            async with world.launch(routes=[(ZAI.pattern, site.route)]) as browser:
                page, chat = await start_tools(browser, ZAI)
                await wait_until_async((repo / "started.log").exists, "the long call to start")
                assert not (repo / "done.log").exists()
                await page.reload()
                # The reloaded page asks for the same reply (present at load) while it still runs.
                bridge_row = page.locator("herdr-bridge-hud .bridge-line")

                async def asked() -> str | None:
                    decision = await page.evaluate("document.documentElement.dataset.herdrBridgeLast ?? ''")
                    if decision:
                        return f"decided: {decision}"
                    return "waiting" if "running tool calls" in await bridge_row.inner_text() else None

                state = await poll_until(asked, "the reloaded page to ask for the running reply")
                assert state == "waiting", f"the reloaded page did not wait for the running call ({state})"
                assert not (repo / "done.log").exists(), "the call ended before the reloaded page asked"
                (repo / "release").write_text("go\n", encoding="utf-8")

                await answered(site, chat, "the model to answer the long call's result")
                scope = ZAI.scope(chat)

                async def delivered() -> bool:
                    return not await kept_results(browser, scope)

                await poll_until(delivered, "the reloaded page to confirm the result sent")
                await bridge_row.filter(has_text="result sent").wait_for()
                (result,) = site.results(chat)
                assert "[1] herdr_exec ok" in result, result
                decision = await page.evaluate("document.documentElement.dataset.herdrBridgeLast")
                assert decision == (
                    "stored: the calls running when the page reloaded finished; their result is sent"
                ), decision
                assert (repo / "started.log").read_text(encoding="utf-8") == "started\n"
                assert (repo / "done.log").read_text(encoding="utf-8") == "done\n"
                assert len(audited(station.config_dir, "herdr_exec")) == 1
                shown = await page.locator(".chat-user").all_inner_texts()
                assert [text.strip().startswith(TOOL_RESULT) for text in shown] == [False, True], shown

    run(body(), timeout=BODY_TIMEOUT_S)


def test_a_fast_reply_of_only_malformed_calls_is_answered_with_the_errors(base: Path) -> None:
    async def body() -> None:
        repo = make_repo(base / "api", {"README.md": b"# api\n"})
        # About 250 characters in four chunks 40 ms apart: rendered and finished in ~120 ms.
        sites = {spec.name: ScriptedMarkdownSite(host=spec.host, site=spec.name, chunk_chars=80, chunk_ms=40)
                 for spec in (ZAI, DEEPSEEK)}  # fmt: skip
        routes = [(spec.pattern, sites[spec.name].route) for spec in (ZAI, DEEPSEEK)]
        async with rig(base) as world, world.launch(routes=routes) as browser:
            for spec in (ZAI, DEEPSEEK):
                site = sites[spec.name]
                never = [repo / f"{spec.name}-{n}.txt" for n in (1, 2, 3)]
                write = [call("herdr_fs_write", {"path": str(path), "content": "x\n"}) for path in never]
                site.reply = "\n\n".join([
                    block(write[0] + " " + write[1]),
                    block(write[2][: write[2].index('"content"') + 13]),  # cut inside "content"
                ])  # fmt: skip
                page, chat = await start_tools(browser, spec)
                await answered(site, chat, f"the model to be told its errors on {spec.name}")
                began, ended = await first_stream(page)
                assert ended["at"] - began["at"] < QUIET_MS, "the reply was rendered and finished fast"
                (result,) = site.results(chat)
                assert "[1] (call) error" in result and "[2] (call) error" in result, result
                assert "two calls on one line" in result, result
                assert "cut before its end" in result, result
                assert " ok\n" not in result, result
                assert not any(path.exists() for path in never)
                await page.close()
            assert audited(world.station.config_dir, "herdr_fs_write") == []

    run(body(), timeout=BODY_TIMEOUT_S)


@pytest.mark.parametrize("spec", [ZAI, DEEPSEEK], ids=lambda spec: spec.name)
def test_without_generating_signals_a_write_waits_for_the_quiet_period_and_runs_once(
    base: Path, spec: SiteSpec
) -> None:
    async def body() -> None:
        repo = make_repo(base / "api", {"README.md": b"# api\n"})
        target = repo / "quiet.txt"
        prose = "This reply keeps streaming after its call, slowly. " * 4
        # 16 characters every 100 ms: the call's block is whole after ~1 s, the prose streams ~1.5 s
        # more (no gap near the quiet period).
        site = ScriptedMarkdownSite(host=spec.host, site=spec.name, chunk_chars=16, chunk_ms=100)
        site.reply = (
            block(call("herdr_fs_write", {"path": str(target), "content": "quiet\n"})) + "\n\n" + prose
        )
        async with rig(base) as world, world.launch(routes=[(spec.pattern, site.route)]) as browser:
            page, chat = await start_tools(browser, spec, signals_off=True)
            chunks = 0

            async def ended() -> bool:
                nonlocal chunks
                now = await page.evaluate("""() => ({
                    flag: document.documentElement.dataset.imitationStreaming ?? "",
                    decided: document.documentElement.dataset.herdrBridgeLast ?? null,
                    signals: window.__herdrTest.signals(),
                })""")
                if now["flag"] == "1":
                    chunks += 1
                    assert not target.exists(), "the write ran while its reply was still streaming"
                    assert now["decided"] is None, f"the bridge acted mid-stream: {now['decided']}"
                    assert now["signals"] == [], now
                    return False
                return bool(now["flag"] == "0")

            await poll_until(ended, "the slowly streamed reply to end")
            assert chunks > 3, "the reply was seen streaming"
            seen = await page.evaluate(
                "({ removed: window.__herdrTest.removed, changes: window.__herdrTest.changes })"
            )
            assert seen["removed"] > 0 and seen["changes"] > 10, seen
            began, end = await first_stream(page)

            await wait_until_async(target.exists, "the write to run once the reply was quiet")
            waited_ms = target.stat().st_mtime_ns / 1e6 - end["lastChange"]
            assert waited_ms >= QUIET_MS - CLOCK_SLACK_MS, f"ran {waited_ms:.0f} ms after the last change"
            await answered(site, chat, "the model to answer the write's result")
            (result,) = site.results(chat)
            assert "[1] herdr_fs_write ok" in result, result
            assert target.read_text(encoding="utf-8") == "quiet\n"
            assert len(audited(world.station.config_dir, "herdr_fs_write")) == 1
            print(f"\n{spec.name}: streamed {end['at'] - began['at']} ms with no generating signal; "
                  f"the write ran {waited_ms:.0f} ms after the content last changed")  # fmt: skip

    run(body(), timeout=BODY_TIMEOUT_S)
