"""The extension in a real browser, for tests/test_extension_e2e.py and benchmarks/wake_bench.py.

- Debian's Chromium (`/usr/lib/chromium/chromium`) driven by Playwright from PyPI (async API),
  never a downloaded browser: a persistent context (a profile dir kept across launches, so a
  relaunch is a browser restart) with only extension/ loaded, headless (the new headless mode
  runs extensions), background networking and component updates off.
- The native host manifest installed into `<profile>/NativeMessagingHosts` by the real
  `herdr-mcp native-host install`, so Chromium starts the real host, which forwards to the real
  runtime's Unix socket.
- `ChatGPTSite`: every request to https://chatgpt.com/** is answered by the test through
  Playwright's routing: the page (tests/fixtures/extension/chatgpt.html, an imitation of
  ChatGPT's composer and turns) and a tiny scripted assistant behind
  `/backend-api/conversation` that answers each message, or holds its answers until released,
  or answers HTTP 429.
- `Workstation`: the Herdr simulator and `herdr-mcp serve` on it (tests/runtime_harness.py),
  plus a reader of the runtime's `/push/events` for tests that wait on what the extension saw.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from mcp.types import RequestParamsMeta
from playwright.async_api import BrowserContext, Page, Playwright, Route, Worker

from herdr_mcp.local_http import local_async_client
from herdr_mcp.sim import (
    AgentConfig,
    AgentScript,
    PaneConfig,
    ScriptStep,
    SimConfig,
    SimulatorThread,
    TabConfig,
    WorkspaceConfig,
)
from tests.runtime_harness import RunningRuntime, call_tool, running_runtime
from tests.waiting import DEADLINE_S, poll_until

ROOT = Path(__file__).resolve().parents[1]
EXTENSION_DIR = ROOT / "extension"
PAGE = Path(__file__).resolve().parent / "fixtures" / "extension" / "chatgpt.html"
CHROMIUM = Path(os.environ.get("HERDR_MCP_CHROMIUM", "/usr/lib/chromium/chromium"))
AGENT = "coder"
REVIEWER = "reviewer"


def extension_id() -> str:
    """The id Chromium gives extension/ (from its manifest `key`; see extension/README.md)."""
    key = json.loads((EXTENSION_DIR / "manifest.json").read_text(encoding="utf-8"))["key"]
    digest = hashlib.sha256(base64.b64decode(key)).hexdigest()[:32]
    return "".join(chr(ord("a") + int(digit, 16)) for digit in digest)


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

    def texts(self, conversation_id: str | None = None) -> list[str]:
        return [post.text for post in self.posts if conversation_id in (None, post.conversation_id)]

    async def route(self, route: Route) -> None:
        request = route.request
        path = request.url.split("chatgpt.com", 1)[1].split("?", 1)[0]
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
        elif path.startswith("/backend-api/"):
            await route.fulfill(status=404, json={"detail": "not imitated"})
        elif self.unreachable_new_chat and (path in ("", "/") or path.endswith("/project")):
            await route.abort("connectionrefused")
        else:
            self.page_loads.append(path)
            switches = json.dumps({"dropSeedMarker": self.drop_seed_marker})
            page = PAGE.read_text(encoding="utf-8").replace("/*IMITATION*/ {}", switches, 1)
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
        reply = {"id": f"a-{len(self.posts)}", "role": "assistant", "text": f"Noted: {text[:60]}"}
        turns.append(reply)
        await route.fulfill(json={"reply": reply})


def sim_config(base: Path) -> SimConfig:
    """Workspace `api` with two agents: `coder`, which starts working on a prompt and keeps
    working until the test settles it (`Workstation.settle`), and `reviewer`, idle until the test
    sets it working (a second agent of the same workspace: one settling while the other works is
    partial progress, not the end of the turn)."""
    repo = base / "api"
    repo.mkdir(parents=True, exist_ok=True)
    script = AgentScript((ScriptStep(state="working"), ScriptStep(after_ms=20, echo_prompt=True)))
    coder = PaneConfig(label="coder", agent=AgentConfig(AGENT, "claude", script=script))
    reviewer = PaneConfig(label="reviewer", agent=AgentConfig(REVIEWER, "codex"))
    return SimConfig((WorkspaceConfig(cwd=repo, label="api", tabs=(TabConfig("main", (coder, reviewer)),)),))


@dataclass
class Workstation:
    """The simulator and a runtime serving it (TCP for the test, the Unix socket for the host)."""

    sim: SimulatorThread
    runtime: RunningRuntime
    config_dir: Path

    def workspace_id(self) -> str:
        (workspace,) = self.sim.snapshot()["workspaces"]
        return str(workspace["workspace_id"])

    def agent_pane(self, label: str = AGENT) -> str:
        (pane,) = [pane for pane in self.sim.snapshot()["panes"] if pane.get("label") == label]
        return str(pane["pane_id"])

    async def prompt(self, text: str, scope: str | None = None) -> dict[str, Any]:
        """`herdr_prompt` to the agent as the Web AI's connector calls it (no scope unless given:
        the runtime takes the one scope bound to the agent's workspace)."""
        async with self.runtime.client() as client:
            if scope is None:
                return await call_tool(client, "herdr_prompt", {"target": AGENT, "text": text})
            meta: RequestParamsMeta = {"herdr-mcp/scope": scope}  # type: ignore[typeddict-unknown-key]
            result = await client.call_tool("herdr_prompt", {"target": AGENT, "text": text}, meta=meta)
            assert isinstance(result.structured_content, dict), result
            return result.structured_content

    def settle(self, status: str = "done", agent: str = AGENT) -> None:
        self.sim.set_agent_status(agent, status)

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with local_async_client(
            headers={"Authorization": f"Bearer {self.runtime.token}"}, timeout=30
        ) as http:
            answer = await http.post(f"{self.runtime.base}{path}", json=body)
            answer.raise_for_status()
            result: dict[str, Any] = answer.json()
            return result

    async def state(self) -> dict[str, Any]:
        async with local_async_client(
            headers={"Authorization": f"Bearer {self.runtime.token}"}, timeout=30
        ) as http:
            answer = await http.get(f"{self.runtime.base}/push/state")
            answer.raise_for_status()
            result: dict[str, Any] = answer.json()
            return result


@contextlib.contextmanager
def workstation(base: Path) -> Iterator[Workstation]:
    """Simulator + `herdr-mcp serve` (with its Unix socket under `base/config/ipc/`)."""
    with (
        SimulatorThread(sim_config(base), base / "herdr.sock") as sim,
        running_runtime(base / "herdr.sock", base / "config") as runtime,
    ):
        yield Workstation(sim, runtime, base / "config")


def install_native_host(profile: Path, config_dir: Path) -> Path:
    """`herdr-mcp native-host install` into the profile's NativeMessagingHosts; the manifest path."""
    profile.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable, "-m", "herdr_mcp", "native-host", "install", "--browser", "chromium",
            "--extension-id", extension_id(), "--user-data-dir", str(profile),
            "--config-dir", str(config_dir),
        ],
        check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    manifest = profile / "NativeMessagingHosts" / "com.herdr_mcp.host.json"
    assert manifest.is_file(), f"native-host install wrote no {manifest}"
    return manifest


@dataclass
class Browser:
    """A launched profile: the context, the extension's service worker, helpers."""

    context: BrowserContext
    worker: Worker
    site: ChatGPTSite
    #: The service worker's console, printed when the test fails inside `launched`.
    console: list[str] = field(default_factory=list)

    async def storage(self, key: str) -> Any:
        """A value of the extension's chrome.storage.local (None when absent)."""
        return await self.worker.evaluate(
            "async (key) => (await chrome.storage.local.get(key))[key] ?? null", key
        )

    async def open(self, url: str) -> Page:
        page = await self.context.new_page()
        await page.goto(url)
        await page.locator("herdr-mcp-hud .hud").wait_for(timeout=DEADLINE_S * 1000)
        return page

    async def page_for(self, path: str) -> Page:
        url = f"chrome-extension://{extension_id()}/{path}"
        page = await self.context.new_page()
        await page.goto(url)
        return page

    async def set_options(self, tick_s: int, fallback_s: int) -> None:
        """Through the options page, as a person would."""
        page = await self.page_for("src/options/options.html")
        await page.fill("#progressTickSec", str(tick_s))
        await page.fill("#progressFallbackSec", str(fallback_s))
        await page.click("button[type=submit]")
        await page.locator("#saved").filter(has_text="Saved").wait_for()
        await page.close()

    async def bind(self, workspace_id: str | None) -> Page:
        """Bind the last active ChatGPT tab through the side panel page; the panel stays open."""
        panel = await self.page_for("src/sidepanel/sidepanel.html")
        if workspace_id is None:
            await panel.click("#unbind")
            await panel.locator("#message").filter(has_text="Unbound").wait_for()
            return panel
        await panel.locator(f'#workspace option[value="{workspace_id}"]').wait_for(state="attached")
        await panel.select_option("#workspace", workspace_id)
        await panel.click("#bind")
        await panel.locator("#message").filter(has_text="Bound to").wait_for()
        return panel


async def hud_line(page: Page) -> str:
    return await page.locator("herdr-mcp-hud .line").inner_text()


async def wait_hud(page: Page, text: str) -> str:
    """Wait until the HUD's state line contains `text`; return the line."""

    async def probe() -> str | None:
        line = await hud_line(page)
        return line if text in line else None

    return await poll_until(probe, f"the HUD to say {text!r}")


@contextlib.asynccontextmanager
async def launched(
    playwright: Playwright,
    profile: Path,
    site: ChatGPTSite,
    routes: Sequence[tuple[str, Callable[[Route], Awaitable[None]]]] = (),
) -> AsyncIterator[Browser]:
    """Chromium on `profile` with extension/ loaded, chatgpt.com routed to `site` and each
    `(pattern, handler)` of `routes` routed too (the bridge's imitated z.ai and DeepSeek)."""
    if not CHROMIUM.is_file():
        raise RuntimeError(f"no Chromium at {CHROMIUM}: apt-get install chromium (./scripts/test does)")
    context = await playwright.chromium.launch_persistent_context(
        str(profile),
        executable_path=str(CHROMIUM),
        headless=True,
        args=[
            f"--disable-extensions-except={EXTENSION_DIR}",
            f"--load-extension={EXTENSION_DIR}",
            "--disable-background-networking",
            "--disable-component-update",
        ],
    )
    try:
        await context.route("https://chatgpt.com/**", site.route)
        for pattern, handler in routes:
            await context.route(pattern, handler)
        worker = next(iter(context.service_workers), None)
        if worker is None:
            worker = await context.wait_for_event("serviceworker", timeout=DEADLINE_S * 1000)
        assert extension_id() in worker.url, worker.url
        browser = Browser(context, worker, site)
        worker.on("console", lambda message: browser.console.append(message.text))
        try:
            yield browser
        except BaseException:
            state = await worker.evaluate("async () => JSON.stringify(await chrome.storage.local.get(null))")
            print("extension storage:", state)
            print("service worker console:", *browser.console, sep="\n  ")
            print("site received:", *site.texts(), sep="\n  ")
            raise
    finally:
        site.release()
        await context.close()


class PushReader:
    """The runtime's `/push/events` read by the test itself (over TCP with the bearer), so a test
    can wait until an event exists before asking whether the extension acted on it."""

    def __init__(self, station: Workstation) -> None:
        self.station = station
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PushReader:
        self._task = asyncio.create_task(self._read())
        await poll_until(self._hello, "the push stream's hello")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _hello(self) -> bool:
        return any(kind == "hello" for kind, _ in self.events)

    async def _read(self) -> None:
        headers = {"Authorization": f"Bearer {self.station.runtime.token}"}
        async with (
            local_async_client(headers=headers, timeout=httpx2.Timeout(None)) as http,
            http.stream("GET", f"{self.station.runtime.base}/push/events") as response,
        ):
            kind = ""
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    kind = line.split(":", 1)[1].strip()
                elif line.startswith("data:"):
                    self.events.append((kind, json.loads(line.split(":", 1)[1])))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [data for event, data in self.events if event == kind]

    async def wait(self, kind: str, what: str, **match: Any) -> dict[str, Any]:
        """The first event of `kind` whose data has the `match` items (waits for it)."""

        async def probe() -> dict[str, Any] | None:
            for data in self.of(kind):
                if all(data.get(name) == value for name, value in match.items()):
                    return data
            return None

        return await poll_until(probe, what)
