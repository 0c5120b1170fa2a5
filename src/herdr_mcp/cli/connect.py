"""`herdr-mcp connect <client>`: the configuration an MCP client needs to reach this runtime.

Over stdio (the default) the client launches `herdr-mcp stdio` itself; over HTTP (`--http`) it
talks to a running `herdr-mcp serve` (or the link, with `--url` and `--token-file`) and sends the
bearer token in an Authorization header. The entry is printed; `--write` puts it into the
client's own config file under `--name` (default `herdr-mcp`), keeping everything else the file
holds and a backup of it beside it (`<file>.bak-<UTC time>`).

The formats and default locations (looked up 2026-12-01, recorded in docs/runtime.md):
- Claude Desktop: JSON `{"mcpServers": {name: {"command", "args"}}}` in
  `~/Library/Application Support/Claude/claude_desktop_config.json` (macOS),
  `%APPDATA%\\Claude\\claude_desktop_config.json` (Windows), `~/.config/Claude/...` (Linux).
  It starts local servers only; a URL is added as a connector from Anthropic's side, which
  cannot reach loopback, so `--http` is refused.
- Cursor: JSON `{"mcpServers": {name: {"command", "args"} | {"url", "headers"}}}` in
  `~/.cursor/mcp.json` on every platform.
- Codex CLI: TOML `[mcp_servers.<name>]` with `command`/`args` or `url`/`http_headers` in
  `~/.codex/config.toml` (`$CODEX_HOME/config.toml`).
- MCP Inspector: the same JSON shape as Cursor (`"type": "streamable-http"` for a URL) in a file
  named by `--config` (the Inspector has no file of its own to edit), used as
  `mcp-inspector --cli --config FILE --server NAME`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomli_w

from herdr_mcp.errors import UsageFault
from herdr_mcp.layout import DEFAULT_PORT, Layout
from herdr_mcp.strict_json import unique_keys
from herdr_mcp.tokens import load_or_create_token

CLIENTS = ("claude-desktop", "cursor", "codex", "inspector")
#: The npm package and version the README's Inspector commands name (tested in
#: tests/test_connect.py).
INSPECTOR_PACKAGE = "@modelcontextprotocol/inspector@2.12.0"
#: A client config larger than this is not one we should rewrite.
MAX_CONFIG_BYTES = 4 * 1024 * 1024


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `connect` on the top-level subcommands."""
    parser = commands.add_parser(
        "connect",
        help="print (or --write) an MCP client's configuration for this runtime",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("client", choices=CLIENTS, help="the MCP client to configure")
    transport = parser.add_mutually_exclusive_group()
    transport.add_argument(
        "--stdio",
        dest="transport",
        action="store_const",
        const="stdio",
        help="the client launches `herdr-mcp stdio` (default)",
    )
    transport.add_argument(
        "--http",
        dest="transport",
        action="store_const",
        const="http",
        help="the client calls a running `herdr-mcp serve` with the bearer token",
    )
    parser.set_defaults(transport="stdio")
    parser.add_argument(
        "--name", default="herdr-mcp", help="the server's name in the client (default herdr-mcp)"
    )
    parser.add_argument(
        "--config-dir", type=Path, default=None, help="herdr-mcp's config dir (token, state); passed to stdio"
    )
    parser.add_argument(
        "--url", default=None, help=f"--http: the MCP endpoint (default http://127.0.0.1:{DEFAULT_PORT}/mcp)"
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help="--http: the bearer token file (default <config dir>/token)",
    )
    parser.add_argument(
        "--write", action="store_true", help="edit the client's config file (a backup is kept)"
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="the client config file to write (default: the client's own)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object: client, file, entry")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the entry, or write it into the client's config file."""
    if args.client == "claude-desktop" and args.transport == "http":
        raise UsageFault(
            "transport_unsupported",
            "Claude Desktop starts local servers from its config file and cannot send a bearer to a "
            "URL there; use `herdr-mcp connect claude-desktop` (stdio)",
        )
    entry = server_entry(args.client, _endpoint(args))
    path = args.config if args.config is not None else default_config_path(args.client)
    if args.write:
        if path is None:
            raise UsageFault(
                "config_path_required",
                "the MCP Inspector has no config file of its own; pass --config FILE to write one",
            )
        backup = write_entry(args.client, path, args.name, entry)
        if args.json:
            print(
                json.dumps({"client": args.client, "file": str(path), "backup": _str(backup), "entry": entry})
            )
        else:
            print(f"wrote {args.name!r} into {path}")
            if backup is not None:
                print(f"  backup of the previous file: {backup}")
                if args.client == "codex":
                    print("  (TOML comments and layout are not carried over; the backup has them)")
            print(f"  restart {args.client} to load it")
        return 0
    if args.json:
        print(json.dumps({"client": args.client, "file": _str(path), "entry": entry}))
        return 0
    print(render(args.client, path, args.name, entry))
    return 0


def _str(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _endpoint(args: argparse.Namespace) -> dict[str, Any]:
    """What the client is told: a command to launch, or a URL and its bearer."""
    config_dir: Path | None = args.config_dir
    if args.transport == "stdio":
        command = [*_herdr_mcp_command(), "stdio"]
        if config_dir is not None:
            command += ["--config-dir", str(config_dir.expanduser().absolute())]
        return {"command": command[0], "args": command[1:]}
    token_file: Path = args.token_file or Layout.of(config_dir).token_file
    url: str = args.url or f"http://127.0.0.1:{DEFAULT_PORT}/mcp"
    return {"url": url, "token": load_or_create_token(token_file.expanduser())}


def _herdr_mcp_command() -> list[str]:
    """How to start this herdr-mcp again by absolute path (clients do not use the shell's PATH)."""
    script = Path(sys.argv[0])
    if script.name == "herdr-mcp" and script.is_file():
        return [str(script.absolute())]
    return [sys.executable, "-m", "herdr_mcp"]


def server_entry(client: str, endpoint: Mapping[str, Any]) -> dict[str, Any]:
    """The client's entry for one server, in the client's own vocabulary."""
    if "command" in endpoint:
        return {"command": endpoint["command"], "args": list(endpoint["args"])}
    header = f"Bearer {endpoint['token']}"
    if client == "codex":
        return {"url": endpoint["url"], "http_headers": {"Authorization": header}}
    entry: dict[str, Any] = {"url": endpoint["url"], "headers": {"Authorization": header}}
    if client == "inspector":
        entry = {"type": "streamable-http", **entry}
    return entry


def default_config_path(
    client: str, platform: str = sys.platform, env: Mapping[str, str] | None = None, home: Path | None = None
) -> Path | None:
    """The client's own config file on this platform; None for the Inspector (it has none)."""
    env = os.environ if env is None else env
    home = Path.home() if home is None else home
    if client == "claude-desktop":
        if platform == "darwin":
            return home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"
        if platform == "win32":
            appdata = Path(env["APPDATA"]) if env.get("APPDATA") else home / "AppData" / "Roaming"
            return appdata / "Claude" / "claude_desktop_config.json"
        config_home = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
        return config_home / "Claude" / "claude_desktop_config.json"
    if client == "cursor":
        return home / ".cursor" / "mcp.json"
    if client == "codex":
        codex_home = Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else home / ".codex"
        return codex_home / "config.toml"
    return None


def render(client: str, path: Path | None, name: str, entry: Mapping[str, Any]) -> str:
    """The entry as the user would paste it, with where it goes."""
    if client == "codex":
        snippet = tomli_w.dumps({"mcp_servers": {name: dict(entry)}})
    else:
        snippet = json.dumps({"mcpServers": {name: entry}}, indent=2)
    where = f"# add to {path}" if path is not None else "# save as a file FILE for --config"
    lines = [where, snippet.rstrip()]
    if client == "inspector":
        lines += ["", "# or run it directly:", inspector_command(entry)]
    return "\n".join(lines)


def inspector_command(entry: Mapping[str, Any]) -> str:
    """The Inspector CLI line that lists the tools of this entry's server (its options first,
    then `--` and the server, so none of the server's own arguments is taken for the Inspector's)."""
    words = ["npx", "-y", INSPECTOR_PACKAGE, "--cli", "--method", "tools/list"]
    if "command" in entry:
        words += ["--", entry["command"], *entry["args"]]
    else:
        words += ["--transport", "http"]
        for key, value in entry["headers"].items():
            words += ["--header", f"{key}: {value}"]
        words += ["--", entry["url"]]
    return shlex.join(words)


def write_entry(client: str, path: Path, name: str, entry: Mapping[str, Any]) -> Path | None:
    """Put `entry` under `name` in the client's config file, keeping everything else in it.

    An existing file is parsed first (`config_unparseable`, and the file is left as it was, if
    it cannot be), copied to a backup, then replaced atomically with the same permissions; a new
    file is created 0600 (an HTTP entry holds the bearer). Returns the backup's path, or None
    when there was no file.
    """
    target = path.expanduser()
    if target.is_symlink():
        target = target.resolve()  # edit what the link points at, keep the link
    original = _read(target)
    document = _parse(client, target, original) if original is not None else {}
    section = "mcp_servers" if client == "codex" else "mcpServers"
    servers = document.setdefault(section, {})
    if not isinstance(servers, dict):
        raise UsageFault(
            "config_unparseable",
            f"{target}: {section} is not a table of servers; fix the file by hand, nothing was changed",
        )
    servers[name] = dict(entry)
    text = tomli_w.dumps(document) if client == "codex" else json.dumps(document, indent=2) + "\n"
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = 0o600 if original is None else target.stat().st_mode & 0o777
    backup = None
    if original is not None:
        backup = target.with_name(f"{target.name}.bak-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S%fZ}")
        _write_new(backup, original, mode)
    temporary = target.with_name(f".{target.name}.herdr-mcp-{os.getpid()}")
    try:
        _write_new(temporary, text.encode("utf-8"), mode)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return backup


def _read(path: Path) -> bytes | None:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_CONFIG_BYTES:
        raise UsageFault(
            "config_unparseable", f"{path} is larger than {MAX_CONFIG_BYTES} bytes; it is not a client config"
        )
    return data


def _parse(client: str, path: Path, data: bytes) -> dict[str, Any]:
    try:
        text = data.decode("utf-8")
        document = (
            tomllib.loads(text) if client == "codex" else json.loads(text, object_pairs_hook=unique_keys)
        )
    except (UnicodeDecodeError, ValueError) as exc:
        kind = "TOML" if client == "codex" else "JSON"
        raise UsageFault(
            "config_unparseable",
            f"{path} is not valid {kind} ({exc}); fix it or pass another --config, nothing was changed",
        ) from None
    if not isinstance(document, dict):
        raise UsageFault(
            "config_unparseable", f"{path} does not hold a JSON object; fix it by hand, nothing was changed"
        )
    return document


def _write_new(path: Path, data: bytes, mode: int) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.chmod(path, mode)
