"""The extension in a real browser, for the tests in tests/extension/ and benchmarks/wake_bench.py.

- Debian's Chromium (`/usr/lib/chromium/chromium`) driven by Playwright from PyPI (async API),
  never a downloaded browser: a persistent context (a profile dir kept across launches, so a
  relaunch is a browser restart) with only extension/ loaded, headless (the new headless mode
  runs extensions), background networking and component updates off.
- The native host manifest installed into `<profile>/NativeMessagingHosts` by the real
  `herdr-mcp native-host install`, so Chromium starts the real host, which forwards to the real
  runtime's Unix socket.
- `Workstation`: the Herdr simulator and `herdr-mcp serve` on it (tests/support/runtime_harness.py),
  plus a reader of the runtime's `/push/events` for tests that wait on what the extension saw.
- `rig` / `extension_browser`: one test's world (workstation, native host in the profile,
  Playwright) and a browser launched on it; `Rig.launch` again is a browser restart.
- Waiting helpers shared by the modules (HUD lines, storage records, handoff phases, the
  continuity journal) and the side-panel binding of a tab.

The imitated sites (chatgpt.com's `ChatGPTSite`) live in tests/support/extension_sites.py; this module
re-exports `ChatGPTSite` and `Post` for its older importers.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from mcp.types import RequestParamsMeta
from playwright.async_api import BrowserContext, Page, Playwright, Route, Worker, async_playwright

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
from tests.support.extension_sites import ChatGPTSite, Post
from tests.support.runtime_harness import RunningRuntime, call_tool, running_runtime
from tests.support.waiting import DEADLINE_S, poll_until, wait_until_async

ROOT = Path(__file__).resolve().parents[2]
EXTENSION_DIR = ROOT / "extension"
CHROMIUM = Path(os.environ.get("HERDR_MCP_CHROMIUM", "/usr/lib/chromium/chromium"))
AGENT = "coder"
REVIEWER = "reviewer"
#: A whole test: browser launches, a runtime, the simulator, several waits on a loaded machine.
BODY_TIMEOUT_S = 240.0
__all__ = [
    "ChatGPTSite",
    "Post",
]  # re-exported from tests/support/extension_sites.py (wake_bench imports them here)


def extension_id() -> str:
    """The id Chromium gives extension/ (from its manifest `key`; see extension/README.md)."""
    key = json.loads((EXTENSION_DIR / "manifest.json").read_text(encoding="utf-8"))["key"]
    digest = hashlib.sha256(base64.b64decode(key)).hexdigest()[:32]
    return "".join(chr(ord("a") + int(digit, 16)) for digit in digest)


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
    #: The native host manifest `shared_workstation` installed once (None: `rig` installs one).
    host_manifest: Path | None = None

    def workspace_id(self) -> str:
        (workspace,) = self.sim.snapshot()["workspaces"]
        return str(workspace["workspace_id"])

    def agent_pane(self, label: str = AGENT) -> str:
        (pane,) = [pane for pane in self.sim.snapshot()["panes"] if pane.get("label") == label]
        return str(pane["pane_id"])

    async def prompt(self, text: str, scope: str | None = None) -> dict[str, Any]:
        """`herdr_prompt` to the agent as the Web AI's connector calls it (no scope unless given:
        the runtime takes the one scope bound to the agent's workspace). Returns once the agent
        has started on it: Herdr answers agent.prompt before it presses Enter (300 ms later), so a
        test that settled the agent at once would settle the previous turn."""
        async with self.runtime.client() as client:
            if scope is None:
                answer = await call_tool(client, "herdr_prompt", {"target": AGENT, "text": text})
            else:
                meta: RequestParamsMeta = {"herdr-mcp/scope": scope}  # type: ignore[typeddict-unknown-key]
                result = await client.call_tool("herdr_prompt", {"target": AGENT, "text": text}, meta=meta)
                assert isinstance(result.structured_content, dict), result
                answer = result.structured_content
        if "error" not in answer:
            await wait_until_async(
                lambda: self.agent_status() == "working", "the agent to start on the prompt"
            )
        return answer

    def agent_status(self, label: str = AGENT) -> str:
        (pane,) = [pane for pane in self.sim.snapshot()["panes"] if pane.get("label") == label]
        return str(pane.get("agent_status"))

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

    async def binding(self, scope: str) -> dict[str, Any] | None:
        """The runtime's binding of `scope` (None when unbound)."""
        found: dict[str, Any] | None = (await self.post("/browser/binding.get", {"scope": scope}))["binding"]
        return found

    async def package_message(self, record: dict[str, Any]) -> str:
        """The runtime's package of a handoff record's transfer (preparing it again returns the same
        package)."""
        answer = await self.post(
            "/browser/handoff.prepare",
            {
                "scope": record["scope"],
                "transfer_id": record["transferId"],
                "source_url": record["sourceUrl"],
            },
        )
        message: str = answer["package"]["message"]
        return message

    async def unbind_all(self) -> None:
        """Delete every binding the runtime holds (between the tests of a shared workstation)."""
        for found in (await self.post("/browser/binding.list", {}))["bindings"]:
            await self.post("/browser/binding.set", {"scope": found["scope"], "workspace_id": None})
        assert (await self.post("/browser/binding.list", {}))["bindings"] == []

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


@contextlib.contextmanager
def shared_workstation(base: Path) -> Iterator[Workstation]:
    """`workstation(base)` with the native host installed once (into `base/host-profile`), for a
    module whose tests each launch Chromium on a profile of their own (`rig(..., station=)`):
    a runtime start and an install per test less. The tests must leave nothing in the runtime
    that another reads; `unbind_all` takes back their bindings."""
    with workstation(base) as station:
        station.host_manifest = install_native_host(base / "host-profile", station.config_dir)
        yield station


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

    async def stored(self, key: str, accept: Callable[[Any], bool], what: str) -> Any:
        """Wait until the storage value of `key` is there and satisfies `accept` (never called with
        None); return it (a falsy value counts as not yet, as for `poll_until`)."""

        async def probe() -> Any:
            value = await self.storage(key)
            return value if value is not None and accept(value) else None

        return await poll_until(probe, what)

    async def handoff(self, scope: str, phase: str) -> dict[str, Any]:
        """Wait until the extension's handoff record of `scope` is in `phase`; return it."""
        record: dict[str, Any] = await self.stored(
            f"handoff:{scope}",
            lambda record: record["phase"] == phase,
            f"the handoff of {scope} to be {phase}",
        )
        return record

    async def journaled(self, conversation: str, at_least: int, what: str) -> None:
        """Wait until the extension journaled `at_least` turns of `conversation`."""
        await self.stored(f"journal:{conversation}", lambda turns: len(turns) >= at_least, what)

    async def merge_options(self, options: dict[str, Any], also: dict[str, Any] | None = None) -> None:
        """Set `options` into the extension's stored options (the rest kept) and the `also` keys,
        in one storage write, as the options page would."""
        await self.worker.evaluate(
            """async ([values, also]) => {
                const { options = {} } = await chrome.storage.local.get("options");
                await chrome.storage.local.set({ ...also, options: { ...options, ...values } });
            }""",
            [options, also or {}],
        )

    async def tab_on(self, suffix: str) -> Page:
        """Wait for a tab whose URL ends with `suffix`; return it."""

        async def probe() -> Page | None:
            return next((page for page in self.context.pages if page.url.endswith(suffix)), None)

        return await poll_until(probe, f"a tab on {suffix}")

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


async def wait_text(page: Page, selector: str, text: str, what: str) -> str:
    """Wait until the element at `selector` shows `text`; return its whole text."""

    async def probe() -> str | None:
        line = await page.locator(selector).inner_text()
        return line if text in line else None

    return await poll_until(probe, what)


async def wait_hud(page: Page, text: str) -> str:
    """Wait until the HUD's state line contains `text`; return the line."""
    return await wait_text(page, "herdr-mcp-hud .line", text, f"the HUD to say {text!r}")


async def turn_auto_on(page: Page) -> None:
    """Press the HUD's Auto toggle and wait until it says on."""
    await page.locator("herdr-mcp-hud .auto").click()
    await page.locator("herdr-mcp-hud .auto").filter(has_text="Auto: on").wait_for()


async def bind_tab(browser: Browser, station: Workstation, page: Page) -> None:
    """Bind `page` (the last active ChatGPT tab) to the workspace through the side panel, close the
    panel, and wait until the page's HUD says bound."""
    panel = await browser.bind(station.workspace_id())
    await panel.close()
    await wait_hud(page, "Bound to api")


#: The side panel, opened as an extension page (the Control Center is in it).
PANEL = "src/sidepanel/sidepanel.html"


async def open_panel(browser: Browser) -> Page:
    """The side panel in a tab of the side panel's width."""
    panel = await browser.page_for(PANEL)
    await panel.set_viewport_size({"width": 380, "height": 1100})
    return panel


async def pin(panel: Page, pane_id: str) -> None:
    """Pin pane `pane_id` with its row's Pin button, and wait until the row shows it pinned."""
    row = panel.locator(f'li.cc-pane[data-pane="{pane_id}"]')
    await row.wait_for(timeout=DEADLINE_S * 1000)
    await row.locator("button.cc-pin").click()
    await panel.locator(f'li.cc-pane.pinned[data-pane="{pane_id}"]').wait_for(timeout=DEADLINE_S * 1000)


def screenshot_dirs(tmp_path: Path) -> list[Path]:
    """Where a test's screenshots go: its temp dir, and $HERDR_MCP_SCREENSHOTS when set."""
    extra = os.environ.get("HERDR_MCP_SCREENSHOTS")
    return [tmp_path, *([Path(extra)] if extra else [])]


async def screenshot(page: Page, tmp_path: Path, name: str) -> None:
    """The page in this state, into each of `screenshot_dirs`."""
    for directory in screenshot_dirs(tmp_path):
        directory.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(directory / name))


@contextlib.asynccontextmanager
async def launched(
    playwright: Playwright,
    profile: Path,
    site: ChatGPTSite,
    routes: Sequence[tuple[str, Callable[[Route], Awaitable[None]]]] = (),
    lang: str | None = None,
) -> AsyncIterator[Browser]:
    """Chromium on `profile` with extension/ loaded, chatgpt.com routed to `site` and each
    `(pattern, handler)` of `routes` routed too (the bridge's imitated z.ai and DeepSeek); with
    `lang` (`zh-CN`), in that UI language (`--lang`, and LANGUAGE, which Chromium on Linux reads)."""
    if not CHROMIUM.is_file():
        raise RuntimeError(f"no Chromium at {CHROMIUM}: apt-get install chromium (./scripts/test does)")
    language = [f"--lang={lang}"] if lang else []
    context = await playwright.chromium.launch_persistent_context(
        str(profile),
        executable_path=str(CHROMIUM),
        headless=True,
        args=[
            f"--disable-extensions-except={EXTENSION_DIR}",
            f"--load-extension={EXTENSION_DIR}",
            "--disable-background-networking",
            "--disable-component-update",
            *language,
        ],
        env={**os.environ, "LANGUAGE": lang.replace("-", "_")} if lang else None,
        viewport={"width": 1280, "height": 720},
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


@dataclass
class Rig:
    """One test's world: the workstation, a profile with the native host installed, Playwright.
    Each `launch` starts Chromium on the same profile (a second one is a browser restart)."""

    station: Workstation
    playwright: Playwright
    profile: Path

    def launch(
        self,
        site: ChatGPTSite | None = None,
        routes: Sequence[tuple[str, Callable[[Route], Awaitable[None]]]] = (),
    ) -> AbstractAsyncContextManager[Browser]:
        return launched(self.playwright, self.profile, site or ChatGPTSite(), routes)


@contextlib.asynccontextmanager
async def rig(base: Path, station: Workstation | None = None) -> AsyncIterator[Rig]:
    """`workstation(base)`, the native host installed into `base/profile`, and Playwright started.
    With `station` (from `shared_workstation`): that one, and its installed manifest copied into
    the profile (the same bytes `native-host install` writes: it names the launcher in the
    workstation's config dir, nothing of the profile)."""
    profile = base / "profile"
    with contextlib.ExitStack() as started:
        if station is None:
            station = started.enter_context(workstation(base))
            install_native_host(profile, station.config_dir)
        else:
            assert station.host_manifest is not None, "a station from shared_workstation"
            hosts = profile / "NativeMessagingHosts"
            hosts.mkdir(parents=True)
            shutil.copy2(station.host_manifest, hosts / station.host_manifest.name)
        async with async_playwright() as playwright:
            yield Rig(station, playwright, profile)


@contextlib.asynccontextmanager
async def extension_browser(
    base: Path,
    site: ChatGPTSite | None = None,
    routes: Sequence[tuple[str, Callable[[Route], Awaitable[None]]]] = (),
    station: Workstation | None = None,
) -> AsyncIterator[tuple[Workstation, Browser]]:
    """`rig(base, station)` with one browser launched on it (chatgpt.com routed to `site`, an
    empty `ChatGPTSite` unless given)."""
    async with rig(base, station) as world, world.launch(site, routes) as browser:
        yield world.station, browser


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
