"""The bridge's call forms through real Markdown rendering (issue 20, Deliver 1-2): Debian's
Chromium with extension/, the real native host and runtime on the Herdr simulator, and imitations
of chat.z.ai and chat.deepseek.com that render each reply with a real renderer from npm (marked,
markdown-it; four configurations), streamed in chunks with each site's stop state and code-block
markup (z.ai: CodeMirror editors; DeepSeek: `.md-code-block` with a `pre`), labels in Chinese or
English (tests/fixtures/extension/markdown-site.html, tests/support/extension_sites.py MarkdownChatSite).

One reply holds the table of call forms (underscores, HTML inside strings, `\\"` and `\\\\`
escapes, backslashes, pretty-printed JSON, two calls in one block, and the malformed: two objects
on a line, JSON cut midway, bad args, a call line outside a code block). Asserted per form: what
ran (the file it wrote, byte for byte; nothing for the malformed) and what the model was told (the
TOOL_RESULT). The table is printed (`pytest -s`). A second test streams a write call slowly: it
does not run before the reply has ended.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser_methods_harness import audited
from tests.support.extension_harness import BODY_TIMEOUT_S, rig
from tests.support.extension_sites import (
    DEEPSEEK,
    RENDERERS,
    ZAI,
    ScriptedMarkdownSite,
    SiteSpec,
)
from tests.support.runtime_harness import make_repo
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import poll_until


def block(*objects: str) -> str:
    return "```json\n" + "\n".join(objects) + "\n```"


def write(path: str, content: str, indent: int | None = None) -> str:
    return json.dumps({"tool": "herdr_fs_write", "args": {"path": path, "content": content}}, indent=indent)


@dataclass(frozen=True)
class Form:
    name: str
    #: Files the form writes when it runs: relative path -> exact content.
    writes: dict[str, str]
    #: Files that must never appear.
    never: tuple[str, ...] = ()
    #: A piece of the error the model must be told ("" when the form runs).
    told: str = ""


def forms(root: Path) -> tuple[list[Form], str]:
    """The table and the reply that holds it (root: this conversation's directory)."""

    def p(name: str) -> str:
        return str(root / name)

    table = [
        Form("underscores (__init__.py)", {"pkg/__init__.py": '__all__ = ["main"]\n'}),
        Form("HTML inside strings", {"page.html": "<b>bold</b> <script>x()</script> <br>\n"}),
        Form('escapes \\" and \\\\', {"quote.txt": 'say "hi" \\ done\n'}),
        Form("backslashes", {"win.txt": "C:\\dir\\new\\table *a* _b_\n"}),
        Form("multi-line JSON", {"pretty.txt": "pretty\nprinted\n"}),
        Form("two calls, one block", {"two-a.txt": "a\n", "two-b.txt": "b\n"}),
        Form("malformed: two on a line", {}, ("never1.txt", "never2.txt"), "two calls on one line"),
        Form("malformed: cut midway", {}, ("never3.txt",), "cut before its end"),
        Form("malformed: bad args", {}, (), "invalid_arguments"),
        Form("old line form outside code", {}, ("never4.txt",), "outside a fenced json code block"),
    ]
    reply = "\n\n".join([
        "I will write the files.",
        block(write(p("pkg/__init__.py"), '__all__ = ["main"]\n')),
        block(write(p("page.html"), "<b>bold</b> <script>x()</script> <br>\n")),
        block(write(p("quote.txt"), 'say "hi" \\ done\n')),
        block(write(p("win.txt"), "C:\\dir\\new\\table *a* _b_\n")),
        block(write(p("pretty.txt"), "pretty\nprinted\n", indent=2)),
        block(write(p("two-a.txt"), "a\n"), write(p("two-b.txt"), "b\n", indent=2)),
        block(write(p("never1.txt"), "1\n") + " " + write(p("never2.txt"), "2\n")),
        block('{"tool": "herdr_fs_write", "args": {"path": "' + p("never3.txt") + '", "content": "cut'),
        block('{"tool": "herdr_fs_write", "args": {"path": 5, "content": "x"}}'),
        write(p("never4.txt"), "4\n"),
        "That is all.",
    ])  # fmt: skip
    return table, reply


@pytest.fixture
def base() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


def check_form(form: Form, root: Path, result: str) -> str:
    """Assert one form's outcome; the table cell: what ran and what the model was told."""
    for name, content in form.writes.items():
        assert (root / name).read_bytes() == content.encode(), (form.name, name)
    for name in form.never:
        assert not (root / name).exists(), (form.name, name)
    if form.told:
        assert form.told in result, (form.name, result)
        return f"nothing ran; told: {form.told}"
    return "ran: " + ", ".join(sorted(form.writes)) + " exact"


async def conversation(site: ScriptedMarkdownSite, spec: SiteSpec, browser: Any, renderer: str) -> str:
    """Open the site's new chat with `renderer`, start the tools, wait for the model's "Done."."""
    site.renderer = renderer
    site.lang = "zh" if sorted(RENDERERS).index(renderer) % 2 == 0 else "en"
    before = set(site.conversations)
    page = await browser.context.new_page()
    await page.goto(f"https://{spec.host}/")
    await page.locator("herdr-bridge-hud button.start").click()

    async def done() -> str | None:
        for chat, messages in site.conversations.items():
            if chat not in before and messages and messages[-1]["text"] == "Done.":
                return chat
        return None

    chat = await poll_until(done, f"the table's round on {spec.name} with {renderer}")
    await page.close()
    return chat


@pytest.mark.parametrize("spec", [ZAI, DEEPSEEK], ids=lambda spec: spec.name)
def test_call_forms_through_each_renderer(base: Path, spec: SiteSpec) -> None:
    async def body() -> None:
        repo = make_repo(base / "api", {"README.md": b"# api\n"})
        site = ScriptedMarkdownSite(host=spec.host, site=spec.name)
        rows: list[tuple[str, str, str]] = []
        async with rig(base) as world, world.launch(routes=[(spec.pattern, site.route)]) as browser:
            for renderer in sorted(RENDERERS):
                root = repo / renderer
                (root / "pkg").mkdir(parents=True)
                table, site.reply = forms(root)
                writes_before = len(audited(world.station.config_dir, "herdr_fs_write"))
                chat = await conversation(site, spec, browser, renderer)
                (result,) = site.results(chat)
                for form in table:
                    rows.append((form.name, renderer, check_form(form, root, result)))
                ran = len(audited(world.station.config_dir, "herdr_fs_write")) - writes_before
                assert ran == sum(len(form.writes) for form in table), result
        print(f"\ncall forms on {spec.name} (imitation rendering Markdown, streamed):")
        print(f"| form | {' | '.join(sorted(RENDERERS))} |")
        print(f"|---|{'---|' * len(RENDERERS)}")
        for form_name in dict.fromkeys(name for name, _, _ in rows):
            cells = [cell for name, _, cell in rows if name == form_name]
            print(f"| {form_name} | {' | '.join(cells)} |")

    run(body(), timeout=BODY_TIMEOUT_S)


@pytest.mark.parametrize("spec", [ZAI, DEEPSEEK], ids=lambda spec: spec.name)
def test_a_write_in_the_first_chunk_runs_only_after_the_reply_ends(base: Path, spec: SiteSpec) -> None:
    async def body() -> None:
        repo = make_repo(base / "api", {"README.md": b"# api\n"})
        target = repo / "early.txt"
        prose = "This reply keeps streaming for a while after its call. " * 6
        site = ScriptedMarkdownSite(host=spec.host, site=spec.name, chunk_chars=12, chunk_ms=90)
        site.reply = block(write(str(target), "early\n")) + "\n\n" + prose
        async with rig(base) as world, world.launch(routes=[(spec.pattern, site.route)]) as browser:
            page = await browser.context.new_page()
            await page.goto(f"https://{spec.host}/")
            await page.locator("herdr-bridge-hud button.start").click()
            chunks = 0

            async def ended() -> bool:
                nonlocal chunks
                streaming = await page.evaluate("document.documentElement.dataset.imitationStreaming ?? ''")
                if streaming == "1":
                    chunks += 1
                    assert not target.exists(), "the write ran while its reply was still streaming"
                    return False
                return bool(streaming == "0")

            await poll_until(ended, "the slowly streamed reply to end")
            assert chunks > 3, "the reply was seen streaming"

            async def written() -> bool:
                return target.exists()

            await poll_until(written, "the write to run once the reply ended")
            assert target.read_text(encoding="utf-8") == "early\n"

            # The file exists before the call's audit record is written (the answer, not the
            # effect, waits for the record): wait for the record, then it must be the only one.
            async def recorded() -> int:
                return len(audited(world.station.config_dir, "herdr_fs_write"))

            assert await poll_until(recorded, "the write's audit record") == 1

    run(body(), timeout=BODY_TIMEOUT_S)
