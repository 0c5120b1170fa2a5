"""The native host behind real Chrome native messaging: Debian's Chromium (driven by Playwright, no
browser download) with a minimal extension made here, whose key fixes its id, and the manifest
written by `herdr-mcp native-host install --user-data-dir`.

Shown: Chromium gives the extension the id `extension_id_from_key` computes from the key (so the
default id constant is derived the way Chrome derives it); Chromium finds and starts the host from
the installed manifest; a reply of 1 MiB + 1 byte reaches the extension as chunk frames Chrome
accepts (Chrome drops a port on a host message of 1 MiB or more); a request frame over 1 MiB from
the extension is answered `frame_too_large` and the port then closes.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from herdr_mcp.native_host.install import extension_id_from_key
from tests.support.native_host_harness import MIB, short_config_dir, stub_runtime
from tests.support.waiting import DEADLINE_S

CHROMIUM = Path(os.environ.get("HERDR_MCP_CHROMIUM", "/usr/lib/chromium/chromium"))

#: The extension's service worker: `exchange(messages, expect)` opens a port to the host, posts
#: `messages`, joins chunk frames as the real extension does, and resolves with a summary of the
#: first `expect` messages (or of what came before the port closed).
WORKER_JS = """
globalThis.exchange = (messages, expect) => new Promise((resolve) => {
  const port = chrome.runtime.connectNative("com.herdr_mcp.host");
  const got = [];
  const chunks = {};
  const done = (disconnected) => resolve({ got, disconnected });
  const keep = (message, frames) => {
    const body = message.body ?? null;
    got.push({
      id: message.id, status: message.status ?? null, error: message.error ?? null, frames,
      pad: body && typeof body.pad === "string" ? body.pad.length : null,
    });
    if (got.length === expect) { port.disconnect(); done(null); }
  };
  port.onMessage.addListener((message) => {
    if (!message.chunk) { keep(message, 1); return; }
    const parts = (chunks[message.id] ??= []);
    parts.push(message.chunk.data);
    if (parts.length === message.chunk.count) keep(JSON.parse(parts.join("")), parts.length);
  });
  port.onDisconnect.addListener(() => done(chrome.runtime.lastError?.message ?? "closed"));
  for (const message of messages) port.postMessage(message);
});
"""


def _extension(directory: Path) -> str:
    """A minimal MV3 extension with a fresh key in `directory`; its id as computed from the key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    encoded = base64.b64encode(der).decode()
    directory.mkdir()
    manifest = {
        "manifest_version": 3,
        "name": "native host test",
        "version": "1.0",
        "key": encoded,
        "permissions": ["nativeMessaging"],
        "background": {"service_worker": "worker.js"},
    }
    (directory / "manifest.json").write_text(json.dumps(manifest))
    (directory / "worker.js").write_text(WORKER_JS)
    return extension_id_from_key(encoded)


@pytest.fixture
def config() -> Iterator[Path]:
    with short_config_dir() as path:
        yield path


@pytest.mark.slow
def test_chromium_starts_the_installed_host_and_takes_its_chunked_replies(
    tmp_path: Path, config: Path
) -> None:
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.is_file():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium (./scripts/test does)")
    extension = tmp_path / "extension"
    extension_id = _extension(extension)
    profile = tmp_path / "profile"
    subprocess.run(
        [
            sys.executable, "-m", "herdr_mcp", "native-host", "install", "--browser", "chromium",
            "--extension-id", extension_id, "--user-data-dir", str(profile), "--config-dir", str(config),
        ],
        check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    reply = {"id": "big", "status": 200, "body": {"pad": ""}}
    pad = MIB + 1 - len(json.dumps(reply, separators=(",", ":")))
    big = {"id": "big", "method": "POST", "path": "/browser/inbox.read", "body": {"size": pad}}
    state = {"id": "state", "method": "GET", "path": "/push/state"}
    oversized = {"id": "over", "method": "POST", "path": "/mcp", "body": {"pad": "z" * (2 * MIB)}}
    with stub_runtime(config) as runtime, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=[
                f"--disable-extensions-except={extension}",
                f"--load-extension={extension}",
                "--disable-background-networking",
                "--disable-component-update",
            ],
        )
        try:
            worker = next(iter(context.service_workers), None) or context.wait_for_event(
                "serviceworker", timeout=DEADLINE_S * 1000
            )
            assert worker.url.startswith(f"chrome-extension://{extension_id}/"), worker.url
            answered: dict[str, Any] = worker.evaluate("([m, n]) => exchange(m, n)", [[big, state], 2])
            refused: dict[str, Any] = worker.evaluate("([m, n]) => exchange(m, n)", [[oversized], 2])
        finally:
            context.close()
    by_id = {item["id"]: item for item in answered["got"]}
    assert answered["disconnected"] is None, answered
    assert by_id["big"] == {"id": "big", "status": 200, "error": None, "frames": 3, "pad": pad}
    assert by_id["state"]["status"] == 200 and by_id["state"]["frames"] == 1
    assert [item["error"]["code"] for item in refused["got"]] == ["frame_too_large"]
    assert refused["got"][0]["id"] is None
    assert refused["disconnected"] is not None
    assert ("POST", "/browser/inbox.read", True) in runtime.seen
    assert all(path != "/mcp" for _, path, _ in runtime.seen)
