"""The Control Center end to end: Debian's Chromium (Playwright, headless, extension/ loaded, the
native host installed into the profile), the side panel page opened as an extension page, the
real `herdr-mcp native-host` started by Chromium, a real runtime on the Herdr simulator
(tests/support/extension_harness.py), plus a terminal-only pane added to the simulated workspace.

Shown through the panel's own controls: the live panes and agents listed; pinning an agent
(kept in the extension's storage across a reload); a prompt delivered, then the same send
retried with the same idempotency key (as after a lost answer: the send put back as pending,
the panel reloaded, Retry pressed) answered as already delivered, and the simulated agent saw
the prompt once; a bounded read of a terminal pane's output; one line typed into that terminal
pane (delivered); the same terminal pin refused `pane_has_agent` once an agent runs in the pane
(nothing typed into the agent). A screenshot of the panel goes to the test's temp dir (and to
$HERDR_MCP_SCREENSHOTS when set).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Page

from herdr_mcp.herdr import HerdrClient
from herdr_mcp.sim import AgentConfig, PaneConfig
from tests.support.extension_harness import (
    AGENT,
    BODY_TIMEOUT_S,
    Workstation,
    open_panel,
    pin,
    rig,
    screenshot_dirs,
)
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import DEADLINE_S, poll_until

pytestmark = pytest.mark.slow


@pytest.fixture
def base() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


async def herdr_text(station: Workstation, pane_id: str) -> str:
    """The pane's output as the simulated Herdr holds it (read on its own socket)."""
    read = await HerdrClient(station.sim.socket_path).call(
        "pane.read", {"pane_id": pane_id, "source": "recent_unwrapped", "lines": 1000}
    )
    return str(read["read"]["text"])


async def text_with(station: Workstation, pane_id: str, needle: str, what: str) -> str:
    async def probe() -> str | None:
        text = await herdr_text(station, pane_id)
        return text if needle in text else None

    return await poll_until(probe, what)


async def message(panel: Page, text: str) -> str:
    await panel.locator("#cc-message").filter(has_text=text).wait_for(timeout=DEADLINE_S * 1000)
    return await panel.locator("#cc-message").inner_text()


def test_pinned_prompt_once_per_key_and_send_input_only_into_terminals(base: Path, tmp_path: Path) -> None:
    async def body() -> None:
        async with rig(base) as world:
            station = world.station
            workspace = station.workspace_id()
            shell = station.sim.add_pane(workspace, PaneConfig(label="shell"))
            coder = station.agent_pane()
            async with world.launch() as browser:
                panel = await open_panel(browser)
                # The live list: the workspace, its agents and the terminal pane.
                await panel.locator(".cc-ws-head").filter(has_text="api").wait_for(timeout=DEADLINE_S * 1000)
                await panel.locator(f'li.cc-pane[data-pane="{shell}"]').filter(has_text="terminal").wait_for()
                await panel.locator(f'li.cc-pane[data-pane="{coder}"]').filter(has_text=AGENT).wait_for()

                # Pin the agent; the pin survives a reload of the panel.
                await pin(panel, coder)
                assert (await browser.storage("control:pinned"))["pane_id"] == coder
                await panel.reload()
                await panel.locator("#cc-pin-line").filter(has_text=f"agent {AGENT}").wait_for()
                assert await panel.locator("#cc-send").inner_text() == "Send prompt"

                await panel.fill("#cc-text", "cc-e2e prompt one")
                await panel.click("#cc-send")
                delivered = await message(panel, "delivered (key")
                last = await browser.storage("control:last")
                key = last["body"]["idempotency_key"]
                assert key in delivered and last["method"] == "agent.prompt"
                assert last["body"] == {
                    "pane_id": coder,
                    "workspace_id": workspace,
                    "agent": AGENT,
                    "text": "cc-e2e prompt one",
                    "idempotency_key": key,
                }
                assert await browser.storage("control:pending") is None

                # The answer was lost (as if the panel closed before it came): the send is
                # pending again; the reloaded panel offers Retry, which repeats the same key.
                await browser.worker.evaluate(
                    "async (send) => chrome.storage.local.set({'control:pending': send})", last
                )
                await panel.reload()
                await panel.locator("#cc-pending-line").filter(has_text=key).wait_for()
                await panel.click("#cc-retry")
                replayed = await message(panel, "already delivered")
                assert key in replayed and "not sent again" in replayed

                # A later prompt (new key) runs after anything queued before it. Each delivery
                # shows in the pane as often as the other (the typed text, and the agent's own echo
                # once it starts: Herdr types the prompt, then presses Enter), so once the second
                # prompt shows as often as the first, a second delivery of the first would show.
                await panel.fill("#cc-text", "cc-e2e prompt two")
                await panel.click("#cc-send")
                second = await message(panel, "delivered (key")
                assert key not in second

                async def both_shown() -> str | None:
                    text = await herdr_text(station, coder)
                    shown = text.count("cc-e2e prompt two")
                    return text if shown and shown >= text.count("cc-e2e prompt one") else None

                text = await poll_until(both_shown, "the second prompt shown as often as the first")
                assert text.count("cc-e2e prompt one") == text.count("cc-e2e prompt two"), text

                # A terminal pane: read its output (bounded), type one line + Enter.
                station.sim.append_output(shell, "".join(f"boot line {n}\n" for n in range(30)))
                await pin(panel, shell)
                assert await panel.locator("#cc-send").inner_text() == "Type + Enter"
                await panel.fill("#cc-lines", "5")
                await panel.click("#cc-read")
                await panel.locator("#cc-output").filter(has_text="boot line 29").wait_for()
                shown = await panel.locator("#cc-output").inner_text()
                assert "boot line 24" not in shown and "boot line 25" in shown, shown
                await panel.fill("#cc-text", "echo cc-from-panel")
                await panel.click("#cc-send")
                await message(panel, f"Input to {shell}: delivered")
                await text_with(station, shell, "echo cc-from-panel", "the typed line in the terminal")

                # An agent starts in that pane: the pin still says terminal, the runtime refuses.
                station.sim.add_agent(shell, AgentConfig("latecomer", "sim"))
                await panel.fill("#cc-text", "echo cc-into-agent")
                await panel.click("#cc-send")
                refused = await message(panel, "refused (pane_has_agent)")
                assert "latecomer" in refused, refused
                assert "cc-into-agent" not in await herdr_text(station, shell)
                assert await browser.storage("control:pending") is None
                await panel.locator("#cc-drift").filter(has_text="now runs agent latecomer").wait_for()

                # Pin the coder again for the picture, with its output read.
                await pin(panel, coder)
                await panel.click("#cc-read")
                await panel.locator("#cc-output").filter(has_text="cc-e2e prompt two").wait_for()
                for directory in screenshot_dirs(tmp_path):
                    directory.mkdir(parents=True, exist_ok=True)
                    await panel.screenshot(path=str(directory / "control-center.png"), full_page=True)
                assert (tmp_path / "control-center.png").stat().st_size > 0

    run(body(), BODY_TIMEOUT_S)
