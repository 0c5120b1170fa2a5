"""The imitated chat sites the extension tests drive (split out of tests/support/extension_harness.py, which
launches the browser and the workstation; this module holds only what a site answers).

- `ChatGPTSite`: every request to https://chatgpt.com/** is answered by the test through
  Playwright's routing: the page (tests/fixtures/extension/chatgpt.html, an imitation of
  ChatGPT's composer and turns) and a tiny scripted assistant behind
  `/backend-api/conversation` that answers each message, or holds its answers until released,
  or answers HTTP 429, and the page-health scripts (a stuck page, timed-out sends, failing
  snapshot reads).
- `RawChatSite`: the imitated chat.z.ai and chat.deepseek.com (tests/fixtures/extension/zai.html,
  deepseek.html; both speak the same small API), which the bridge and handoff tests subclass for
  their scripted models (`answer`) and their in-flight losses (`lost`).
- `SiteSpec` (`ZAI`, `DEEPSEEK`): a bridge site's name, host, imitation and conversation route.
- `with_history`: a copy of a conversation's turns, so each test's site starts from its own list.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.async_api import Route

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "extension"
PAGE = FIXTURES / "chatgpt.html"
#: state/handoff.py SEED_MARKER: the start of a handoff seed's first line.
HANDOFF_MARKER = "[herdr-handoff transfer="


def with_history(conversation: str, history: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
    """`{conversation: a copy of history}` (each turn copied: the site appends to its own list)."""
    return {conversation: [dict(turn) for turn in history]}


@dataclass
class Post:
    """One message the imitated site received, with the time it arrived (time.monotonic())."""

    conversation_id: str
    text: str
    at: float


@dataclass
class ChatGPTSite:
    """The imitated chatgpt.com: conversations kept here, so a reloaded page shows them again."""

    conversations: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    posts: list[Post] = field(default_factory=list)
    #: The next N messages are answered HTTP 429 (as ChatGPT's rate limit does).
    refuse_next: int = 0
    #: Pages served from now on show user turns without their seed marker line (handoff tests).
    drop_seed_marker: bool = False
    #: New-chat pages (`/`, `/g/<p>/project`) fail to load (a network error: no content script).
    unreachable_new_chat: bool = False
    #: Page health: the site stores each message and its finished reply at once but never answers
    #: the page's request (the page keeps showing the stop button: a stale view) until `release`.
    stuck: bool = False
    #: Page health: the next message is answered HTTP 504 (the page shows "Message send timed
    #: out" and a Retry button), "delivered" with the reply stored, "not_delivered" with only the
    #: user's message stored.
    time_out_next: str | None = None
    #: Page health: snapshot reads (the conversation GET with the session's bearer, as the
    #: extension makes it) are answered with this HTTP status instead of the snapshot.
    snapshot_status: int | None = None
    #: Page health: ChatGPT's Retry is answered HTTP 504 too (nothing stored).
    retry_times_out: bool = False
    #: Paths of the HTML pages served (a reload is one more), the snapshot reads made with the
    #: bearer, and the texts of Retry requests (action "variant": no new user turn).
    page_loads: list[str] = field(default_factory=list)
    snapshot_reads: int = 0
    retries: list[str] = field(default_factory=list)
    #: The UI's language: "en", or "zh" (labels in Chinese; test ids stay, as ChatGPT's do).
    lang: str = "en"
    #: Tool confirmation cards every page shows (`{id, connector, tool, args}`; the fixture's head
    #: names the evidence for their shape), and the presses they got (`{id, decision}`).
    cards: list[dict[str, Any]] = field(default_factory=list)
    approvals: list[dict[str, Any]] = field(default_factory=list)
    #: None: replies shown as plain text. A name of `RENDERERS`: assistant replies rendered as
    #: Markdown by that real renderer and streamed in chunks (`chunk_chars` characters every
    #: `chunk_ms`) while the stop button shows, code blocks as ChatGPT shows them (the fixture's
    #: head names the evidence).
    markdown: str | None = None
    chunk_chars: int = 24
    chunk_ms: int = 15
    #: The host it answers for: chatgpt.com, or another (benchmarks/wake_bench.py serves the same
    #: page on a host the extension does not run on, for its floor).
    host: str = "chatgpt.com"
    _held: asyncio.Event | None = None
    #: Page health: each message's time in the snapshot (epoch seconds; set when first read:
    #: a test sets one earlier to make a message in progress look stalled).
    times: dict[str, float] = field(default_factory=dict)
    _unstick: asyncio.Event = field(default_factory=asyncio.Event)

    def hold(self) -> None:
        """From now on the assistant's replies wait (the stop button stays) until `release`."""
        self._held = asyncio.Event()

    def release(self) -> None:
        """Let the held replies go, and answer at once from now on."""
        if self._held is not None:
            self._held.set()
        self._held = None
        self.stuck = False
        self._unstick.set()

    def reply(self, text: str) -> str:
        """The assistant's answer to a message (a subclass scripts its own)."""
        return f"Noted: {text[:60]}"

    def texts(self, conversation_id: str | None = None) -> list[str]:
        return [post.text for post in self.posts if conversation_id in (None, post.conversation_id)]

    async def route(self, route: Route) -> None:
        request = route.request
        path = request.url.split(self.host, 1)[1].split("?", 1)[0]
        if path.startswith("/backend-api/conversation/") and request.method == "GET":
            turns = self.conversations.get(path.rsplit("/", 1)[1], [])
            if "authorization" in request.headers:
                self.snapshot_reads += 1
                if self.snapshot_status is not None:
                    await route.fulfill(status=self.snapshot_status, json={"detail": "imitated failure"})
                    return
            await route.fulfill(json={"turns": turns, **self.snapshot(turns)})
        elif path == "/api/auth/session":
            await route.fulfill(json={"accessToken": "imitation-access-token"})
        elif path == "/backend-api/conversation" and request.method == "POST":
            body = request.post_data_json
            assert isinstance(body, dict), body
            await self._answer(route, body)
        elif path == "/backend-api/tool-approval" and request.method == "POST":
            decided = request.post_data_json
            assert isinstance(decided, dict), decided
            self.approvals.append(decided)
            self.cards = [card for card in self.cards if card["id"] != decided["id"]]
            await route.fulfill(json={"ok": True})
        elif path.startswith("/backend-api/"):
            await route.fulfill(status=404, json={"detail": "not imitated"})
        elif path == "/__imitation__/renderer.js" and self.markdown is not None:
            build = NODE_MODULES / RENDERERS[self.markdown][0]
            await route.fulfill(body=build.read_bytes(), content_type="text/javascript; charset=utf-8")
        elif self.unreachable_new_chat and (path in ("", "/") or path.endswith("/project")):
            await route.abort("connectionrefused")
        else:
            self.page_loads.append(path)
            values: dict[str, Any] = {
                "dropSeedMarker": self.drop_seed_marker, "lang": self.lang, "cards": self.cards,
            }  # fmt: skip
            page = PAGE.read_text(encoding="utf-8")
            if self.markdown is not None:
                _, kind, options = RENDERERS[self.markdown]
                values["markdown"] = {
                    "renderer": kind, "options": options,
                    "chunkChars": self.chunk_chars, "chunkMs": self.chunk_ms,
                }  # fmt: skip
                script = '<script src="/__imitation__/renderer.js"></script>'
                page = page.replace("<!--RENDERER-->", script, 1)
            page = page.replace("/*IMITATION*/ {}", json.dumps(values), 1)
            await route.fulfill(body=page.encode(), content_type="text/html; charset=utf-8")

    def snapshot(self, turns: list[dict[str, str]]) -> dict[str, Any]:
        """ChatGPT's conversation shape: `current_node` and a `mapping` of parent-linked nodes
        (author role, content parts, status, times in epoch seconds)."""
        parent = "client-created-root"
        mapping: dict[str, Any] = {parent: {"id": parent, "parent": None, "message": None}}
        for turn in turns:
            at = self.times.setdefault(turn["id"], time.time())
            message = {
                "id": turn["id"],
                "author": {"role": turn["role"]},
                "content": {"content_type": "text", "parts": [turn["text"]]},
                "status": turn.get("status", "finished_successfully"),
                "create_time": at,
                "update_time": at,
            }
            mapping[turn["id"]] = {"id": turn["id"], "parent": parent, "message": message}
            parent = turn["id"]
        return {"current_node": parent, "mapping": mapping}

    async def _answer(self, route: Route, body: dict[str, Any]) -> None:
        conversation = str(body["conversation_id"])
        text = str(body["text"])
        if body.get("action") == "variant":  # ChatGPT's Retry: the same user message again
            self.retries.append(text)
            if self.retry_times_out:
                await route.fulfill(status=504, json={"detail": "Message send timed out"})
                return
            reply = {"id": f"a-retry-{len(self.retries)}", "role": "assistant", "text": f"Noted: {text[:60]}"}
            self.conversations.setdefault(conversation, []).append(reply)
            await route.fulfill(json={"reply": reply})
            return
        self.posts.append(Post(conversation, text, time.monotonic()))
        if self.refuse_next > 0:
            self.refuse_next -= 1
            await route.fulfill(status=429, json={"detail": "Too many requests"})
            return
        turns = self.conversations.setdefault(conversation, [])
        turns.append({"id": str(body["message_id"]), "role": "user", "text": text})
        if self.time_out_next is not None:
            delivered, self.time_out_next = self.time_out_next == "delivered", None
            if delivered:
                reply = {"id": f"a-{len(self.posts)}", "role": "assistant", "text": f"Noted: {text[:60]}"}
                turns.append(reply)
            await route.fulfill(status=504, json={"detail": "Message send timed out"})
            return
        if self.stuck:
            turns.append({"id": f"a-{len(self.posts)}", "role": "assistant", "text": f"Noted: {text[:60]}"})
            await self._unstick.wait()
            with contextlib.suppress(Exception):  # the page that asked may be gone (reloaded)
                await route.abort("connectionreset")
            return
        held = self._held
        if held is not None:
            await held.wait()
        reply = {"id": f"a-{len(self.posts)}", "role": "assistant", "text": self.reply(text)}
        turns.append(reply)
        await route.fulfill(json={"reply": reply})


@dataclass(frozen=True)
class SiteSpec:
    """One of the bridge's sites: its name (the scope's site), host, imitation and chat route."""

    name: str
    host: str
    fixture: str
    prefix: str

    def scope(self, chat: str) -> str:
        return f"{self.name}:conv:{chat}"

    @property
    def pattern(self) -> str:
        return f"https://{self.host}/**"

    def url(self, chat: str) -> str:
        return f"https://{self.host}{self.prefix}{chat}"


ZAI = SiteSpec("zai", "chat.z.ai", "zai.html", "/c/")
DEEPSEEK = SiteSpec("deepseek", "chat.deepseek.com", "deepseek.html", "/a/chat/s/")


@dataclass(kw_only=True)
class RawChatSite:
    """An imitated z.ai or DeepSeek: conversations kept here (a reload shows them again), every post
    recorded, each message answered by `answer` (a subclass's scripted model; "Noted." here)."""

    host: str
    #: The page's file under tests/fixtures/extension/.
    fixture: str
    conversations: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    posts: list[tuple[str, str]] = field(default_factory=list)
    #: Pages served from now on show user messages without a seed's marker line (zai.html only).
    drop_seed_marker: bool = False
    #: The new-chat page fails to load (a network error: no content script there).
    unreachable_new_chat: bool = False
    #: While set, the model's replies wait for it (the stop button stays) until it is set.
    gate: asyncio.Event | None = None

    def answer(self, messages: list[dict[str, str]]) -> str:
        """The model's reply to the conversation so far (its last message is the one just posted)."""
        return "Noted."

    async def lost(self, route: Route, text: str) -> bool:
        """True when this post is lost in flight (then the subclass has dealt with `route`, and
        nothing is stored or answered)."""
        return False

    async def route(self, route: Route) -> None:
        request = route.request
        path = request.url.split(self.host, 1)[1].split("?", 1)[0]
        if path.startswith("/api/chat/") and request.method == "GET":
            await route.fulfill(json={"messages": self.conversations.get(path.rsplit("/", 1)[1], [])})
        elif path == "/api/chat" and request.method == "POST":
            body = request.post_data_json
            assert isinstance(body, dict), body
            chat, text = str(body["chat_id"]), str(body["text"])
            self.posts.append((chat, text))
            if await self.lost(route, text):
                return
            messages = self.conversations.setdefault(chat, [])
            messages.append({"role": "user", "text": text})
            if self.gate is not None:
                await self.gate.wait()
            reply = {"role": "assistant", "text": self.answer(messages)}
            messages.append(reply)
            await route.fulfill(json={"reply": reply})
        elif path.startswith("/api/"):
            await route.fulfill(status=404, json={"detail": "not imitated"})
        elif path == "/" and self.unreachable_new_chat:
            await route.abort("connectionrefused")
        else:
            switches = json.dumps({"dropSeedMarker": self.drop_seed_marker})
            page = (
                (FIXTURES / self.fixture).read_text(encoding="utf-8").replace("/*IMITATION*/ {}", switches, 1)
            )
            await route.fulfill(body=page.encode(), content_type="text/html; charset=utf-8")


NODE_MODULES = Path(__file__).resolve().parents[2] / "extension" / "node_modules"
#: The Markdown renderers the imitations render replies with: real ones from npm (extension/
#: package.json devDependencies), in the configurations the bridge's call forms are tested under.
#: name: (the UMD build under extension/node_modules, which renderer the page calls, its options)
RENDERERS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "marked": ("marked/lib/marked.umd.js", "marked", {"gfm": True, "breaks": False}),
    "marked-breaks": ("marked/lib/marked.umd.js", "marked", {"gfm": True, "breaks": True}),
    "markdown-it": ("markdown-it/dist/browser/markdown-it.umd.min.js", "markdown-it", {"html": False}),
    "markdown-it-html-breaks": (
        "markdown-it/dist/browser/markdown-it.umd.min.js",
        "markdown-it",
        {"html": True, "breaks": True, "linkify": True},
    ),
}


@dataclass(kw_only=True)
class MarkdownChatSite(RawChatSite):
    """An imitated z.ai or DeepSeek that renders replies as the live sites do
    (tests/fixtures/extension/markdown-site.html: Markdown through a real renderer from npm,
    re-rendered while the reply streams in chunks, each site's code-block markup, a stop state,
    UI labels in Chinese or English). `site` is "zai" or "deepseek"; the renderer and pace apply
    to pages served from the time they are set."""

    site: str
    fixture: str = "markdown-site.html"
    renderer: str = "marked"
    lang: str = "zh"
    #: Streaming pace: characters per chunk and milliseconds between chunks.
    chunk_chars: int = 24
    chunk_ms: int = 15

    async def route(self, route: Route) -> None:
        path = route.request.url.split(self.host, 1)[1].split("?", 1)[0]
        if path.startswith("/api/"):
            await super().route(route)
        elif path == "/__imitation__/renderer.js":
            build = NODE_MODULES / RENDERERS[self.renderer][0]
            await route.fulfill(body=build.read_bytes(), content_type="text/javascript; charset=utf-8")
        else:
            _, kind, options = RENDERERS[self.renderer]
            switches = json.dumps({
                "site": self.site, "lang": self.lang, "renderer": kind, "rendererOptions": options,
                "chunkChars": self.chunk_chars, "chunkMs": self.chunk_ms,
            })  # fmt: skip
            page = (
                (FIXTURES / self.fixture).read_text(encoding="utf-8").replace("/*IMITATION*/ {}", switches, 1)
            )
            await route.fulfill(body=page.encode(), content_type="text/html; charset=utf-8")


#: The bridge's mark on its protocol prompt, and on the result message it sends back.
BRIDGE_MARKER = "HERDR_BRIDGE_V1"
TOOL_RESULT = f"TOOL_RESULT {BRIDGE_MARKER}"


@dataclass(kw_only=True)
class ScriptedMarkdownSite(MarkdownChatSite):
    """A Markdown-rendering site whose scripted model answers the protocol prompt with `reply`
    (set by the test), a TOOL_RESULT with "Done." and anything else with "Noted."."""

    reply: str = ""

    def answer(self, messages: list[dict[str, str]]) -> str:
        last = messages[-1]["text"]
        if last.startswith(BRIDGE_MARKER):
            return self.reply
        return "Done." if last.startswith(TOOL_RESULT) else "Noted."

    def results(self, chat: str) -> list[str]:
        """The TOOL_RESULT messages the bridge sent in `chat`."""
        return [text for posted, text in self.posts if posted == chat and text.startswith(TOOL_RESULT)]
