"""`herdr-mcp native-host install|uninstall`: the manifest where Chrome or Chromium looks for it, the
launcher it names, and the launcher started as Chrome starts it (docs/browser-protocol.md 4).
Every command runs as a real subprocess with HOME pointed at a temporary directory."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.errors import LocalFault
from herdr_mcp.native_host.install import DEFAULT_EXTENSION_ID, extension_id_from_key, manifest_dir
from tests.support.native_host_harness import ORIGIN, native_host, short_config_dir, stub_runtime

ROOT = Path(__file__).resolve().parents[2]
EXTENSION_ID = "abcdefghijklmnopabcdefghijklmnop"
MANIFEST = "com.herdr_mcp.host.json"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def _cli(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in ("XDG_CONFIG_HOME", "HERDR_MCP_CONFIG_DIR", "CHROME_CONFIG_HOME")
    }
    environment.update(HOME=str(home), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "herdr_mcp", "native-host", *args],
        capture_output=True, text=True, timeout=120, check=False, env=environment,
    )  # fmt: skip


def _install(home: Path, config: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = _cli(home, "install", "--config-dir", str(config), *args, "--json", env=env)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    ("browser", "where"),
    [
        ("chrome", ".config/google-chrome/NativeMessagingHosts"),
        ("chromium", ".config/chromium/NativeMessagingHosts"),
    ],
)
def test_install_writes_the_manifest_where_the_browser_looks(
    home: Path, tmp_path: Path, browser: str, where: str
) -> None:
    config = tmp_path / "config"
    result = _install(home, config, "--browser", browser, "--extension-id", EXTENSION_ID)
    manifest = home / where / MANIFEST
    launcher = config / "native-host" / "herdr-mcp-native-host"
    assert result == {
        "action": "install",
        "browser": browser,
        "manifest": str(manifest),
        "launcher": str(launcher),
        "extension_id": EXTENSION_ID,
        "changed": True,
    }
    assert json.loads(manifest.read_text()) == {
        "name": "com.herdr_mcp.host",
        "description": "herdr-mcp: the browser plane's native messaging host",
        "path": str(launcher),
        "type": "stdio",
        "allowed_origins": [f"chrome-extension://{EXTENSION_ID}/"],
    }
    assert (_mode(manifest), _mode(launcher)) == (0o644, 0o755)
    assert Path(json.loads(manifest.read_text())["path"]).is_absolute()
    script = launcher.read_text()
    assert script.startswith("#!/bin/sh\n")
    assert f"HERDR_MCP_CONFIG_DIR={config}" in script
    assert f'exec {sys.executable} -I -m herdr_mcp native-host "$@"' in script
    # Atomic writes leave no temporary file behind; nothing else is written.
    assert _files_under(home) == [f"{where}/{MANIFEST}"]
    assert _files_under(config) == ["native-host/herdr-mcp-native-host"]
    # Again: the same files, nothing changed.
    assert _install(home, config, "--browser", browser, "--extension-id", EXTENSION_ID)["changed"] is False


def test_install_into_a_profile_dir_and_under_xdg_config_home(home: Path, tmp_path: Path) -> None:
    config = tmp_path / "config"
    profile = tmp_path / "profile"
    result = _install(home, config, "--browser", "chromium", "--user-data-dir", str(profile))
    assert result["manifest"] == str(profile / "NativeMessagingHosts" / MANIFEST)
    xdg = tmp_path / "xdg"
    result = _install(home, config, env={"XDG_CONFIG_HOME": str(xdg)})
    assert result["manifest"] == str(xdg / "google-chrome" / "NativeMessagingHosts" / MANIFEST)
    assert _files_under(home) == []


def test_the_default_extension_id_is_the_one_extension_manifest_key_fixes(home: Path, tmp_path: Path) -> None:
    manifest = json.loads((ROOT / "extension" / "manifest.json").read_text())
    assert extension_id_from_key(manifest["key"]) == DEFAULT_EXTENSION_ID
    result = _install(home, tmp_path / "config")
    written = json.loads(Path(result["manifest"]).read_text())
    assert written["allowed_origins"] == [f"chrome-extension://{DEFAULT_EXTENSION_ID}/"]


@pytest.mark.parametrize(
    "bad",
    [
        "ABCDEFGHIJKLMNOPABCDEFGHIJKLMNOP",
        "abcdefghijklmnopabcdefghijklmnoq",
        "abcdefghijklmnop",
        "abcdefghijklmnopabcdefghijklmnop/",
    ],
    ids=["upper-case", "letter-past-p", "too-short", "with-a-slash"],
)
def test_a_bad_extension_id_is_refused_and_nothing_is_written(home: Path, tmp_path: Path, bad: str) -> None:
    done = _cli(home, "install", "--config-dir", str(tmp_path / "config"), "--extension-id", bad, "--json")
    assert done.returncode == 2
    assert json.loads(done.stdout)["error"]["code"] == "invalid_extension_id"
    assert done.stderr.startswith("herdr-mcp: error: invalid_extension_id: ")
    assert _files_under(home) == [] and not (tmp_path / "config").exists()


def test_uninstall_removes_the_manifest_once(home: Path, tmp_path: Path) -> None:
    config = tmp_path / "config"
    installed = _install(home, config, "--browser", "chromium")
    done = _cli(home, "uninstall", "--browser", "chromium", "--config-dir", str(config), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["changed"] is True
    assert not Path(installed["manifest"]).exists()
    assert Path(installed["launcher"]).is_file()  # another browser's manifest may name it
    again = _cli(home, "uninstall", "--browser", "chromium", "--config-dir", str(config))
    assert again.returncode == 0 and again.stdout.startswith("nothing to remove: ")


def test_the_macos_and_unsupported_platform_directories(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    support = tmp_path / "Library" / "Application Support"
    assert (
        manifest_dir("chrome", platform="darwin", env=env)
        == support / "Google" / "Chrome" / "NativeMessagingHosts"
    )
    assert (
        manifest_dir("chromium", platform="darwin", env=env) == support / "Chromium" / "NativeMessagingHosts"
    )
    with pytest.raises(LocalFault) as caught:
        manifest_dir("chrome", platform="win32", env=env)
    assert caught.value.code == "unsupported_platform"
    assert (
        manifest_dir("chrome", user_data_dir=tmp_path / "p", platform="win32")
        == tmp_path / "p" / "NativeMessagingHosts"
    )


@pytest.fixture
def short_config() -> Iterator[Path]:
    with short_config_dir() as path:
        yield path


def test_the_launcher_starts_the_host_as_chrome_would(home: Path, short_config: Path) -> None:
    """Chrome runs the manifest's `path` with the origin as its only argument, in a directory of its
    choosing, with its own environment: the launcher alone must find the config dir."""
    result = _install(home, short_config, "--browser", "chromium", "--extension-id", EXTENSION_ID)
    launcher = Path(json.loads(Path(result["manifest"]).read_text())["path"])
    with stub_runtime(short_config) as runtime, native_host(short_config, launcher=launcher) as host:
        host.send({"id": "r1", "method": "GET", "path": "/push/state"})
        assert host.message("r1") == {"id": "r1", "status": 200, "body": {"seq": 7, "workspaces": []}}
        host.close_stdin()
        assert host.wait_exit()[0] == 0
    assert runtime.seen == [("GET", "/push/state", True)]
    assert f"started for {ORIGIN}" in (short_config / "native-host" / "host.log").read_text()
