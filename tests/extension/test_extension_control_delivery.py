"""The Control Center when a send's answer is lost, end to end, in English and Chinese: Debian's
Chromium (Playwright, headless, extension/ loaded, launched with `--lang=en-US` and with
`--lang=zh-CN`), the real `herdr-mcp native-host`, a real runtime on the Herdr simulator
(tests/support/extension_harness.py) whose `pane.send_input` is made to hang (the simulator's own fault:
Herdr takes the request and never answers), so the runtime answers "sent, answer lost".

"Sent, answer lost" has one code, `delivery_unknown`; a runtime from before issue 23 names it
`delivery_uncertain`. Whichever name the runtime in this checkout gives (read from it directly
here), the panel shows `delivery_unknown` in the person's language, keeps the send pending for a
Retry with the same key, and a Retry does not type the line again. The suite runs it in English
(each language costs a Chromium start and a 5 s Herdr timeout); HERDR_MCP_CONTROL_LANGS=en-US,zh-CN
runs both, as done for the screenshots, which go to the test's temp dir (and to
$HERDR_MCP_SCREENSHOTS when set).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.herdr import HerdrClient
from herdr_mcp.local_http import local_async_client
from herdr_mcp.sim import PaneConfig
from tests.support.extension_harness import (
    BODY_TIMEOUT_S,
    ChatGPTSite,
    install_native_host,
    launched,
    open_panel,
    pin,
    rig,
    screenshot,
)
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import DEADLINE_S

pytestmark = pytest.mark.slow

#: What each language's panel says for an unconfirmed send, from its catalog (ccNotConfirmed).
NOT_CONFIRMED = {"en-US": "not confirmed (delivery_unknown)", "zh-CN": "未确认送达（delivery_unknown）"}
RETRY = {"en-US": "Retry sends it with the same key", "zh-CN": "重试会沿用同一个 key"}
LANGS = os.environ.get("HERDR_MCP_CONTROL_LANGS", "en-US").split(",")


@pytest.fixture
def base() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


def test_a_lost_answer_shows_as_delivery_unknown_and_stays_for_retry(base: Path, tmp_path: Path) -> None:
    async def body() -> None:
        async with rig(base) as world:
            station = world.station
            workspace = station.workspace_id()
            shell = station.sim.add_pane(workspace, PaneConfig(label="shell"))
            station.sim.inject_fault("pane.send_input", hang=True)

            async def raw_answer() -> dict[str, Any]:
                async with local_async_client(
                    headers={"Authorization": f"Bearer {station.runtime.token}"}, timeout=DEADLINE_S
                ) as http:
                    answer = await http.post(
                        f"{station.runtime.base}/browser/pane.send_input",
                        json={
                            "pane_id": shell,
                            "workspace_id": workspace,
                            "text": "echo raw",
                            "idempotency_key": "raw-probe-1",
                        },
                    )
                found: dict[str, Any] = answer.json()
                return found

            # The runtime's own answer, asked directly (while Chromium starts): one of the two names.
            probe = asyncio.create_task(raw_answer())
            for lang in LANGS:
                profile = world.profile if lang == "en-US" else base / "profile-zh"
                if lang != "en-US":
                    install_native_host(profile, station.config_dir)
                line = f"echo lost-{lang}"
                async with launched(world.playwright, profile, ChatGPTSite(), lang=lang) as browser:
                    panel = await open_panel(browser)
                    await pin(panel, shell)
                    await panel.fill("#cc-text", line)
                    await panel.click("#cc-send")
                    shown = panel.locator("#cc-message").filter(has_text=NOT_CONFIRMED[lang])
                    await shown.wait_for(timeout=DEADLINE_S * 1000)
                    text = await shown.inner_text()
                    assert RETRY[lang] in text and "delivery_uncertain" not in text, text
                    pending = await browser.storage("control:pending")
                    assert pending is not None and pending["body"]["text"] == line, pending
                    key = pending["body"]["idempotency_key"]
                    await panel.locator("#cc-pending-line").filter(has_text=key).wait_for()
                    await screenshot(panel, tmp_path, f"control-delivery-unknown-{lang}.png")

                    # Retry: the same key; the runtime answers the stored outcome, nothing typed again.
                    await panel.evaluate("document.getElementById('cc-message').textContent = ''")
                    await panel.click("#cc-retry")
                    await shown.wait_for(timeout=DEADLINE_S * 1000)
                    assert (await browser.storage("control:pending"))["body"]["idempotency_key"] == key

            raw = await probe
            print("the runtime names a lost answer", raw["error"]["code"])
            assert raw["error"]["code"] in ("delivery_unknown", "delivery_uncertain"), raw

            read = await HerdrClient(station.sim.socket_path).call(
                "pane.read", {"pane_id": shell, "source": "recent_unwrapped", "lines": 1000}
            )
            typed = str(read["read"]["text"])
            for lang in LANGS:
                assert typed.count(f"echo lost-{lang}") <= 1, typed

    run(body(), BODY_TIMEOUT_S)
