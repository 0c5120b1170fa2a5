"""The extension against the REAL native host when the host goes away and under a burst: Debian's
Chromium with extension/ loaded, `herdr-mcp native-host` started by Chromium from the manifest
the harness installs, a real runtime on the Herdr simulator (tests/support/extension_harness.py).

Shown:
- One push stream across host restarts: with a bound ChatGPT conversation (Auto on, progress
  every second), the host process Chromium started is killed (SIGKILL, found as Chromium's child
  running `herdr_mcp native-host` with this test's config dir), twice. Each time Chromium starts
  a new host, the runtime has exactly one `/push/events` stream open and has opened exactly one
  more (`/health` `push.streams`, `push.opened`), and a new line of agent output reaches the
  conversation in one progress message, once: the extension took that output once (its
  `progress:<scope>.outputs` grew by one). Each kill comes
  when nothing else is under way, so the port comes back through the push follower's own reopen.
  Checked against the code before dde7dd6 (push-follower.js of dde7dd6^): it fails at the first
  restart, two streams open and two opened (without the figures: the output twice in one
  progress message).
- 200 requests at once from the service worker through the real host (whose cap is 64 in
  flight, the push stream among them): 200 `panel.state` messages from an extension page, each
  answered by the worker's `GET /push/state` through its NativeClient; all 200 answer the live
  workspace list, none a refusal. Checked against native-port.js of dde7dd6^ (no queue): 137 of
  200 refused (`invalid_request` "64 requests are in flight": 63 requests and the stream got the
  places).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.local_http import local_async_client
from tests.support.extension_harness import (
    BODY_TIMEOUT_S,
    ROOT,
    Browser,
    Workstation,
    bind_tab,
    extension_browser,
    turn_auto_on,
    wait_hud,
)
from tests.support.extension_sites import ChatGPTSite, with_history
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import poll_until, wait_until_async

pytestmark = pytest.mark.slow

CONV = "conv-resilience-0001"
SCOPE = f"chatgpt:conv:{CONV}"
URL = f"https://chatgpt.com/c/{CONV}"
HISTORY = [
    {"id": "u-seed", "role": "user", "text": "Dispatch the build and report progress."},
    {"id": "a-seed", "role": "assistant", "text": "Dispatching the build to the coder agent."},
]
RESTARTS = 2
BURST = 200


@pytest.fixture
def base() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


@pytest.fixture(scope="module", autouse=True)
def host_runs_this_tree() -> None:
    """Chromium starts the host through the launcher (`python -I -m herdr_mcp native-host`):
    `-I` ignores PYTHONPATH, so the host is the venv's installed herdr_mcp. It must be this
    tree's native host, or these tests would test another one."""
    probe = "import herdr_mcp.native_host as n, pathlib; print(pathlib.Path(n.__file__).parent)"
    found = subprocess.run(
        [sys.executable, "-I", "-c", probe], check=True, capture_output=True, text=True, timeout=60
    ).stdout.strip()
    installed, tree = Path(found), ROOT / "src" / "herdr_mcp" / "native_host"
    stale = [
        source.name
        for source in sorted(tree.glob("*.py"))
        if not (installed / source.name).is_file()
        or (installed / source.name).read_bytes() != source.read_bytes()
    ]
    assert not stale, f"the venv's native host ({installed}) is not this tree's ({stale}): pip install -e ."


def host_pids(config_dir: Path) -> list[int]:
    """The native hosts serving this test: processes running `herdr_mcp native-host` whose
    HERDR_MCP_CONFIG_DIR (set by the launcher) is this test's config dir, each a child of
    Chromium (Chromium starts them; nothing else here does)."""
    wanted = f"HERDR_MCP_CONFIG_DIR={config_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if b"herdr_mcp" not in argv or b"native-host" not in argv or wanted not in environ:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue  # killed, not yet reaped by Chromium
        parent = Path("/proc") / fields[1] / "cmdline"
        try:
            parent_argv = parent.read_bytes()
        except OSError:
            continue
        assert b"chromium" in parent_argv, f"native host {entry.name}'s parent: {parent_argv!r}"
        found.append(int(entry.name))
    return found


async def one_host(config_dir: Path, other_than: int | None = None) -> int:
    """Wait until exactly one native host serves this test (and it is not `other_than`)."""

    async def probe() -> int | None:
        pids = host_pids(config_dir)
        return pids[0] if len(pids) == 1 and pids[0] != other_than else None

    return await poll_until(probe, "one native host started by Chromium" + (" again" if other_than else ""))


async def push_figures(station: Workstation) -> tuple[int, int]:
    """The runtime's /push/events streams: (open now, opened since it started), from /health."""
    async with local_async_client(timeout=30) as http:
        answer = await http.get(f"{station.runtime.base}/health")
        answer.raise_for_status()
        health: dict[str, Any] = answer.json()
    assert "push" in health, "the runtime's /health has no push figures: run with PYTHONPATH=<tree>/src"
    return int(health["push"]["streams"]), int(health["push"]["opened"])


async def streams_are(station: Workstation, streams: int, opened: int, what: str) -> None:
    """Wait until the runtime has `streams` streams open and has opened `opened`."""
    seen: list[tuple[int, int]] = []

    async def probe() -> bool:
        seen.append(await push_figures(station))
        return seen[-1] == (streams, opened)

    try:
        await poll_until(probe, what)
    except AssertionError as error:
        raise AssertionError(f"{error}; (open, opened) last {seen[-1]}, wanted {(streams, opened)}") from None


async def posts_with(chat: ChatGPTSite, needle: str, what: str) -> list[str]:
    async def probe() -> list[str] | None:
        found = [text for text in chat.texts(CONV) if needle in text]
        return found or None

    return await poll_until(probe, what)


async def all_journaled(browser: Browser, chat: ChatGPTSite) -> None:
    """Wait until the extension journaled every turn the conversation has (its turn.append calls
    are done)."""
    turns = len(chat.conversations[CONV])
    await browser.journaled(CONV, turns, f"the conversation's {turns} turns journaled")


async def outputs_taken(browser: Browser) -> int:
    progress = await browser.storage(f"progress:{SCOPE}")
    return int(progress["outputs"]) if progress else 0


def test_one_push_stream_and_each_progress_line_once_across_host_restarts(base: Path) -> None:
    async def body() -> None:
        chat = ChatGPTSite(conversations=with_history(CONV, HISTORY))
        async with extension_browser(base, chat) as (station, browser):
            await browser.set_options(tick_s=1, fallback_s=600)
            page = await browser.open(URL)
            await wait_hud(page, "Not bound")
            await bind_tab(browser, station, page)
            await turn_auto_on(page)
            host = await one_host(station.config_dir)
            await streams_are(station, 1, 1, "the extension's one push stream")

            await station.prompt("build the release")
            await posts_with(chat, "build the release", "the first progress (the echoed prompt)")
            pane = station.agent_pane()
            for restart in range(1, RESTARTS + 1):
                # Nothing else under way (the last progress message and its reply journaled), so
                # the port comes back through the push follower's own reopen: the path on which
                # the reopen and the port's reconnect each opened a stream before dde7dd6.
                await all_journaled(browser, chat)
                os.kill(host, signal.SIGKILL)  # the host crashes; Chromium notices its pipe close
                host = await one_host(station.config_dir, other_than=host)
                # The old host's stream is gone, the new host opened exactly one (output is not
                # replayed: what an agent prints before the stream opens is not sent to it).
                await streams_are(station, 1, 1 + restart, f"one push stream after host restart {restart}")
                before = await outputs_taken(browser)
                marker = f"restart {restart}: linking stage {restart}"
                station.sim.append_output(pane, f"{marker}\n")
                (post,) = await posts_with(chat, marker, f"progress after host restart {restart}")
                assert post.count(marker) == 1, post
                assert await outputs_taken(browser) == before + 1, "the output was taken once"
                assert await push_figures(station) == (1, 1 + restart), "one stream, opened once"
                assert host_pids(station.config_dir) == [host]
            progress = [text for text in chat.texts(CONV) if "progress in api" in text]
            assert len(progress) == len(set(progress)), progress
            for restart in range(1, RESTARTS + 1):
                assert sum(f"restart {restart}:" in text for text in chat.texts(CONV)) == 1

    run(body(), timeout=BODY_TIMEOUT_S)


#: From an extension page: `panel.state` `count` times at once (each one the worker's
#: `GET /push/state` through its NativeClient), waiting first until the worker's port is up.
BURST_JS = """
async (count) => {
  const ask = () => chrome.runtime.sendMessage({ type: "panel.state" }).then(
    (answer) => answer?.error ? { error: answer.error } : { connected: answer.connected,
      workspaces: answer.workspaces.map((workspace) => workspace.workspace_id) },
    (error) => ({ error: { code: "sendMessage", message: String(error) } }));
  const started = performance.now();
  const answers = await Promise.all(Array.from({ length: count }, ask));
  return { answers, ms: performance.now() - started };
}
"""


def test_a_burst_of_200_requests_through_the_real_host_is_all_answered(base: Path) -> None:
    async def body() -> None:
        async with extension_browser(base) as (station, browser):
            page = await browser.page_for("src/options/options.html")
            await one_host(station.config_dir)
            # The push stream is open: it holds one of the host's 64 places throughout.
            await streams_are(station, 1, 1, "the extension's push stream")
            workspace = station.workspace_id()

            async def connected() -> bool:
                (answer,) = (await page.evaluate(BURST_JS, 1))["answers"]
                return bool(answer.get("connected"))

            await poll_until(connected, "the worker's native port up")
            burst = await page.evaluate(BURST_JS, BURST)
            answers: list[dict[str, Any]] = burst["answers"]
            refused = [answer for answer in answers if "error" in answer]
            assert refused == [], f"{len(refused)} of {BURST} refused, first {refused[:3]}"
            assert answers == [{"connected": True, "workspaces": [workspace]}] * BURST, answers[:3]
            # Still one host and one stream: the burst did not cost the connection.
            await wait_until_async(lambda: len(host_pids(station.config_dir)) == 1, "one native host")
            assert await push_figures(station) == (1, 1)
            print(f"{BURST} requests answered in {burst['ms']:.0f} ms")

    run(body(), timeout=BODY_TIMEOUT_S)
