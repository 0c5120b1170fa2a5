"""ChatGPT's replies as Markdown, end to end: Debian's Chromium with extension/, the real native
host and runtime on the Herdr simulator, and the imitated chatgpt.com rendering the assistant's
reply with a real Markdown renderer from npm (marked, from extension/node_modules) while it
streams in chunks with the stop control shown, code blocks as ChatGPT shows them (a language
label and a "Copy code" button inside the `pre`; tests/fixtures/extension/chatgpt.html names the
evidence, extension/README.md "Live-site selectors: evidence").

Shown, on a bound conversation: the reply (headings, a list, a code block holding `__init__.py`
and HTML) is seen generating until its last chunk and at rest once after it (the page's
`data-herdr-rest` against the imitation's chunk counter); the journaled reply (the runtime's
`/browser/turn.resolve`) is its text as a person reads it, underscores and HTML intact, once, with
no code-block chrome ("Copy code") and no Markdown syntax.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.extension_harness import BODY_TIMEOUT_S, bind_tab, extension_browser
from tests.support.extension_sites import ChatGPTSite, with_history
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import poll_until

pytestmark = pytest.mark.slow

CONV = "conv-md-0001"
URL = f"https://chatgpt.com/c/{CONV}"
HISTORY = [
    {"id": "u-seed", "role": "user", "text": "Set up the package."},
    {"id": "a-seed", "role": "assistant", "text": "Which **layout** do you want?"},
]
ASK = "Write pkg/__init__.py with a status page."
CODE = '# pkg/__init__.py\n__all__ = ["main"]\nPAGE = "<div class=\\"status\\">ok</div><br>"\n'
REPLY = (
    "## Plan for the package\n\n"
    "Three steps:\n\n"
    "- create `pkg/__init__.py`\n"
    "- render the `<div>` page\n"
    "- run the tests\n\n"
    "### The file\n\n"
    f"```python\n{CODE}```\n\n"
    "That is all."
)
#: How a person reads it: the headings' and items' words, the code as written.
READ = [
    "Plan for the package",
    "Three steps:",
    "create pkg/__init__.py",
    "render the <div> page",
    "run the tests",
    "The file",
    CODE.rstrip("\n"),
    "That is all.",
]

#: The page's `data-herdr-rest` and the imitation's `data-imitation-chunk`, in the order they
#: changed (a MutationObserver in the page).
TIMELINE = """() => {
    const root = document.documentElement;
    window.__timeline = [];
    new MutationObserver((records) => {
        for (const { attributeName: name } of records) {
            window.__timeline.push([name, root.getAttribute(name)]);
        }
    }).observe(root, { attributes: true, attributeFilter: ["data-herdr-rest", "data-imitation-chunk"] });
}"""


@dataclass(kw_only=True)
class MarkdownChatGPT(ChatGPTSite):
    """The imitated chatgpt.com answering `ASK` with `REPLY`, streamed as Markdown through marked."""

    markdown: str | None = "marked"
    chunk_chars: int = 16
    chunk_ms: int = 40

    def reply(self, text: str) -> str:
        return REPLY if text == ASK else super().reply(text)


@pytest.fixture
def base() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


def test_markdown_reply_streams_then_rests_once_and_is_journaled_as_read(base: Path) -> None:
    async def body() -> None:
        chat = MarkdownChatGPT(conversations=with_history(CONV, HISTORY))
        async with extension_browser(base, chat) as (station, browser):
            page = await browser.open(URL)
            await bind_tab(browser, station, page)

            async def rest() -> Any:
                return await page.evaluate("document.documentElement.dataset.herdrRest")

            await poll_until(lambda: _is(rest, "true"), "the page at rest")
            await page.evaluate(TIMELINE)
            await page.locator("#prompt-textarea").click()
            await page.keyboard.type(ASK)
            await page.click('[data-testid="send-button"]')

            # The reply is journaled once the page is at rest after it.
            async def journaled() -> list[dict[str, Any]] | None:
                answer = await station.post("/browser/turn.resolve", {"conversation_url": URL})
                if answer.get("status") != "resolved":
                    return None
                turns: list[dict[str, Any]] = answer["context"]["recent_turns"]
                return turns if any("Plan for the package" in turn["text"] for turn in turns) else None

            turns = await poll_until(journaled, "the Markdown reply in the continuity journal")
            await poll_until(lambda: _is(rest, "true"), "the page at rest after the reply")

            timeline: list[list[str]] = await page.evaluate("window.__timeline")
            chunks = [int(value) for name, value in timeline if name == "data-imitation-chunk"]
            last = -(-len(REPLY) // chat.chunk_chars)
            assert chunks == list(range(1, last + 1)), chunks
            state = None
            at_rest_after: list[int] = []
            seen = 0
            for name, value in timeline:
                if name == "data-imitation-chunk":
                    seen = int(value)
                    assert state == "false", f"chunk {seen} of {last} shown with the page at rest: {timeline}"
                elif value != state:
                    state = value
                    if value == "true":
                        at_rest_after.append(seen)
            assert at_rest_after == [last], (
                f"at rest once, after the last chunk: {at_rest_after} ({timeline})"
            )

            # The page shows the code block's chrome inside the reply (what the journal must not hold).
            shown = await page.locator('[data-message-author-role="assistant"]').last.inner_text()
            assert "Copy code" in shown and "python" in shown, shown

            # The journal: the history, the message, the reply as read, each once.
            replies = [turn["text"] for turn in turns if turn["role"] == "assistant"]
            users = [turn["text"] for turn in turns if turn["role"] == "user"]
            assert users.count(ASK) == 1, users
            (reply,) = [text for text in replies if "Plan for the package" in text]
            position = 0
            for piece in READ:
                found = reply.find(piece, position)
                assert found >= 0, f"{piece!r} not in the journaled reply (in order): {reply!r}"
                position = found + len(piece)
            for syntax in ("Copy code", "##", "```", "- create", "`pkg", "&lt;", "init.py\n"):
                assert syntax not in reply, (syntax, reply)
            assert replies[0] == "Which layout do you want?", replies
            print("journaled reply:", reply, sep="\n")

    run(body(), timeout=BODY_TIMEOUT_S)


async def _is(probe: Any, value: str) -> bool:
    return bool(await probe() == value)
