"""`herdr-mcp native-host install|uninstall`: the host manifest Chrome looks for, and its launcher.

Chrome finds a native messaging host by a manifest named `<host name>.json` in its
NativeMessagingHosts directory (docs/browser-protocol.md section 4):

    Linux   $XDG_CONFIG_HOME (default ~/.config)/google-chrome|chromium/NativeMessagingHosts
    macOS   ~/Library/Application Support/Google/Chrome|Chromium/NativeMessagingHosts
    any     <user data dir>/NativeMessagingHosts with --user-data-dir (Chromium reads it; CI uses it)

The manifest's `path` must be an absolute path to an executable, and Chrome passes it no
arguments of ours, so it names a launcher: a small shell script in `<config dir>/native-host/`
that execs this Python with `-m herdr_mcp native-host`, the config dir in its environment.
`allowed_origins` is exactly the extension's origin: no other extension can start the host.
Both files are written atomically; the manifest 0644, the launcher 0755.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herdr_mcp.errors import LocalFault, UsageFault
from herdr_mcp.layout import CONFIG_DIR_ENV, Layout
from herdr_mcp.records import atomic_write

#: The host's name: what the extension passes to `chrome.runtime.connectNative`.
HOST_NAME = "com.herdr_mcp.host"
MANIFEST_FILE = f"{HOST_NAME}.json"
LAUNCHER_FILE = "herdr-mcp-native-host"
BROWSERS = ("chrome", "chromium")
#: An extension id: 32 letters a-p (the first 128 bits of a SHA-256, one letter per hex digit).
EXTENSION_ID = re.compile(r"^[a-p]{32}$")
#: The id fixed by extension/manifest.json's `key` (tests/native_host/test_native_host_install.py
#: recomputes it from the manifest, so the two cannot drift apart).
DEFAULT_EXTENSION_ID = "kehgeddoknjnijipecobgiljhnhmjchi"

_LINUX_DIRS = {"chrome": "google-chrome", "chromium": "chromium"}
_MACOS_DIRS = {"chrome": ("Google", "Chrome"), "chromium": ("Chromium",)}


def extension_id_from_key(key: str) -> str:
    """The extension id Chrome derives from a manifest `key` (base64 of the DER public key): the
    first 32 hex digits of its SHA-256, each digit 0-f written as a letter a-p."""
    try:
        der = base64.b64decode(key, validate=True)
    except (binascii.Error, ValueError):
        raise UsageFault("invalid_extension_key", "the manifest key is not base64 of a public key") from None
    digest = hashlib.sha256(der).hexdigest()[:32]
    return "".join(chr(ord("a") + int(digit, 16)) for digit in digest)


def check_extension_id(value: str) -> str:
    """`value` when it is an extension id; `UsageFault("invalid_extension_id")` else."""
    if not EXTENSION_ID.match(value):
        raise UsageFault(
            "invalid_extension_id",
            f"{value[:64]!r} is not an extension id: 32 letters a-p, as chrome://extensions shows it",
        )
    return value


def manifest_dir(
    browser: str, *, user_data_dir: Path | None = None, platform: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Path:  # fmt: skip
    """The NativeMessagingHosts directory the manifest goes to (see the module docstring)."""
    if user_data_dir is not None:
        return user_data_dir.expanduser().absolute() / "NativeMessagingHosts"
    if browser not in BROWSERS:
        raise UsageFault("invalid_argument", f"unknown browser {browser!r}; use one of {', '.join(BROWSERS)}")
    platform = sys.platform if platform is None else platform
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home())
    if platform.startswith("linux"):
        xdg = env.get("XDG_CONFIG_HOME", "")
        config = Path(xdg) if xdg and Path(xdg).is_absolute() else home / ".config"
        return config / _LINUX_DIRS[browser] / "NativeMessagingHosts"
    if platform == "darwin":
        return home.joinpath("Library", "Application Support", *_MACOS_DIRS[browser], "NativeMessagingHosts")
    raise LocalFault(
        "unsupported_platform",
        f"native messaging hosts are installed on Linux and macOS only (this is {platform}); "
        "pass --user-data-dir for a Chromium profile directory",
    )


def launcher_script(config_dir: Path, python: str) -> str:
    """The launcher's text: `python -I -m herdr_mcp native-host` with the config dir set.

    `-I` keeps the current directory and the PYTHON* variables out of the interpreter Chrome
    starts (Chrome picks the working directory), while the venv's packages stay found.
    """
    return (
        "#!/bin/sh\n"
        "# Written by `herdr-mcp native-host install`; Chrome starts it through com.herdr_mcp.host.json.\n"
        f"{CONFIG_DIR_ENV}={shlex.quote(str(config_dir))}\n"
        f"export {CONFIG_DIR_ENV}\n"
        f'exec {shlex.quote(python)} -I -m herdr_mcp native-host "$@"\n'
    )


def host_manifest(launcher: Path, extension_id: str) -> dict[str, Any]:
    """The host manifest (Chrome's fields, nothing else)."""
    return {
        "name": HOST_NAME,
        "description": "herdr-mcp: the browser plane's native messaging host",
        "path": str(launcher),
        "type": "stdio",
        "allowed_origins": [f"chrome-extension://{extension_id}/"],
    }


@dataclass(frozen=True)
class Installed:
    """What `install` wrote (or `uninstall` removed)."""

    browser: str
    manifest: Path
    launcher: Path
    extension_id: str | None
    changed: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "browser": self.browser,
            "manifest": str(self.manifest),
            "launcher": str(self.launcher),
            "extension_id": self.extension_id,
            "changed": self.changed,
        }


def install(
    *, layout: Layout, browser: str, extension_id: str | None, user_data_dir: Path | None,
    python: str | None = None,
) -> Installed:  # fmt: skip
    """Write the launcher, then the manifest that names it (a manifest never names a launcher
    that is not there yet). Raises `UsageFault` for a bad id or browser, `OSError` on disk."""
    chosen = check_extension_id(extension_id if extension_id is not None else DEFAULT_EXTENSION_ID)
    target = manifest_dir(browser, user_data_dir=user_data_dir) / MANIFEST_FILE
    config_dir = layout.config_dir.expanduser().absolute()
    launcher = Layout(config_dir).native_host_dir / LAUNCHER_FILE
    script = launcher_script(config_dir, python or sys.executable)
    atomic_write(launcher, script.encode("utf-8"), mode=0o755)
    payload = (json.dumps(host_manifest(launcher, chosen), indent=2) + "\n").encode("utf-8")
    changed = not (target.is_file() and target.read_bytes() == payload)
    atomic_write(target, payload, mode=0o644)
    return Installed(browser, target, launcher, chosen, changed)


def uninstall(*, layout: Layout, browser: str, user_data_dir: Path | None) -> Installed:
    """Remove the manifest from the browser's directory (nothing to do when it is not there).
    The launcher stays: another browser's manifest may name it."""
    target = manifest_dir(browser, user_data_dir=user_data_dir) / MANIFEST_FILE
    launcher = Layout(layout.config_dir.expanduser().absolute()).native_host_dir / LAUNCHER_FILE
    try:
        target.unlink()
    except FileNotFoundError:
        return Installed(browser, target, launcher, None, changed=False)
    return Installed(browser, target, launcher, None, changed=True)
