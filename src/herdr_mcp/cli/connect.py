"""`herdr-mcp connect <client>`: the configuration an MCP client needs to reach this runtime.

Over stdio (the default) the client launches `herdr-mcp stdio` itself, with the runtime options
given here (`--sim`/`--no-sim`, `--sim-root`, `--herdr-socket`, `--read-only`, `--write-root`,
`--allow-herdr-class`, `--config-dir`; paths made absolute, roots that do not exist refused):
a desktop client starts it from a directory of its own choosing (often `/` or the home
directory, never a root), so without `--sim-root` the embedded simulator has no root to offer
and the command says so. Over HTTP (`--http`) the client talks to a running `herdr-mcp serve`
(or the link, with `--url` and `--token-file`) and sends the bearer token in an Authorization
header. The entry is printed; `--write` puts it into the client's own config file under `--name`
(default `herdr-mcp`), keeping everything else the file holds and a backup of it beside it
(`<file>.bak-<UTC time>`). A file that holds a bearer (ours or any other entry's headers), and
each backup of one, is left 0600: created so, never wider for a moment, and an existing wider
one tightened, which the command says.

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
import copy
import datetime as dt
import glob
import json
import os
import secrets
import shlex
import stat
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from herdr_mcp.cli.arguments import dir_path, existing_dir
from herdr_mcp.errors import UsageFault
from herdr_mcp.layout import DEFAULT_PORT, Layout
from herdr_mcp.strict_json import JsonLimits, loads_bounded
from herdr_mcp.tokens import load_or_create_token

CLIENTS = ("claude-desktop", "cursor", "codex", "inspector")
#: Web AIs a newcomer may name here: none launches a local server or reads a config file, so
#: `connect` has nothing to print for them and says where they are connected instead.
_BRIDGED = "{} is bridged by the browser extension (extension/README.md)"
WEB_CLIENTS = {
    "chatgpt": "ChatGPT reaches this workstation through your own Edge: `herdr-mcp edge deploy`, "
    'then add the connector (README, "Use it from ChatGPT")',
    "zai": _BRIDGED.format("z.ai"),
    "z.ai": _BRIDGED.format("z.ai"),
    "deepseek": _BRIDGED.format("DeepSeek"),
}
#: The npm package and version the README's Inspector commands name (tested in
#: tests/cli/test_connect.py).
INSPECTOR_PACKAGE = "@modelcontextprotocol/inspector@2.12.0"
#: A client config larger than this is not one we should rewrite.
MAX_CONFIG_BYTES = 4 * 1024 * 1024
#: A client config's JSON structure (docs/runtime.md "Parse boundaries"): a few servers' entries.
CONFIG_LIMITS = JsonLimits(max_bytes=MAX_CONFIG_BYTES, max_items=100_000)
#: The mode of a client config (and of a backup) that holds a bearer.
PRIVATE_MODE = 0o600
#: The options passed through to the `herdr-mcp stdio` a client starts (dest names).
STDIO_OPTIONS = ("sim", "sim_root", "herdr_socket", "read_only", "write_root", "allow_herdr_class")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `connect` on the top-level subcommands."""
    parser = commands.add_parser(
        "connect",
        help="print (or --write) an MCP client's configuration for this runtime",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("client", type=_client, choices=CLIENTS, help="the MCP client to configure")
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
        "--config-dir",
        type=dir_path,
        default=None,
        help="herdr-mcp's config dir (token, state); passed to stdio",
    )
    _stdio_options(parser)
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


def _client(value: str) -> str:
    """The client as given; a web AI's name is refused with where that AI is connected."""
    where = WEB_CLIENTS.get(value.lower())
    if where is not None:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not configured here: {where}; `connect` writes the configuration of "
            f"local MCP clients ({', '.join(CLIENTS)})"
        )
    return value


def run(args: argparse.Namespace) -> int:
    """Print the entry, or write it into the client's config file."""
    if args.client == "claude-desktop" and args.transport == "http":
        raise UsageFault(
            "transport_unsupported",
            "Claude Desktop starts local servers from its config file and cannot send a bearer to a "
            "URL there; use `herdr-mcp connect claude-desktop` (stdio)",
        )
    given = [option for option in STDIO_OPTIONS if getattr(args, option) not in (None, False)]
    if args.transport == "http" and given:
        names = ", ".join("--" + option.replace("_", "-") for option in given)
        raise UsageFault(
            "stdio_option_with_http",
            f"{names} configure the runtime a client starts over stdio; with --http the client calls a "
            "running `herdr-mcp serve`, so pass them to `serve` instead",
        )
    entry = server_entry(args.client, _endpoint(args))
    notes = root_notes(args) if args.transport == "stdio" else []
    path = args.config if args.config is not None else default_config_path(args.client)
    if args.write:
        if path is None:
            raise UsageFault(
                "config_path_required",
                "the MCP Inspector has no config file of its own; pass --config FILE to write one",
            )
        written = write_entry(args.client, path, args.name, entry)
        notes = written.notes() + notes
        if args.json:
            print(
                json.dumps(
                    {
                        "client": args.client,
                        "file": str(path),
                        "backup": _str(written.backup),
                        "mode": f"{written.mode:04o}",
                        "entry": entry,
                        "notes": notes,
                    }
                )
            )
        else:
            print(f"wrote {args.name!r} into {path} (mode {written.mode:04o})")
            if written.backup is not None:
                print(f"  backup of the previous file: {written.backup}")
                if args.client == "codex":
                    print("  (TOML comments and layout are not carried over; the backup has them)")
            for note in notes:
                print(f"  note: {note}")
            print(f"  restart {args.client} to load it")
        return 0
    if args.json:
        print(json.dumps({"client": args.client, "file": _str(path), "entry": entry, "notes": notes}))
        return 0
    print(render(args.client, path, args.name, entry))
    for note in notes:  # on stderr: stdout stays what the user pastes
        print(f"note: {note}", file=sys.stderr)
    return 0


def _stdio_options(parser: argparse.ArgumentParser) -> None:
    """The runtime options a stdio entry passes to `herdr-mcp stdio` (its own options, checked
    here once: the client starts it later, where nobody reads an error)."""
    parser.add_argument(
        "--herdr-socket", type=_socket, default=None, help="stdio: Herdr's socket (default: Herdr's rules)"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--sim", dest="sim", action="store_const", const="on", help="stdio: always embed the simulator"
    )
    mode.add_argument(
        "--no-sim", dest="sim", action="store_const", const="off", help="stdio: never embed the simulator"
    )
    parser.set_defaults(sim=None)
    parser.add_argument("--read-only", action="store_true", help="stdio: refuse every mutation")
    for flag, kind, text in (
        ("--sim-root", {"type": _root}, "a workspace root of the embedded simulator (default: the "
         "directory the client starts it in)"),
        ("--write-root", {"type": _absolute_dir}, "allow writes only under this directory"),
        ("--allow-herdr-class", {"choices": ["server_control", "install", "unclassified"]},
         "let herdr_call run Herdr methods of this class (docs/runtime.md)"),
    ):  # fmt: skip
        parser.add_argument(flag, action="append", default=None, help=f"stdio: {text} (repeatable)", **kind)


def _absolute_dir(value: str) -> Path:
    """An existing directory, as the absolute path the client will be given."""
    return existing_dir(value).resolve()


def _root(value: str) -> Path:
    """An existing directory that can be a root: the runtime never admits the home directory or
    one of its ancestors (runtime/boundary/roots.py), so one of those here would be no root."""
    path = _absolute_dir(value)
    home = Path.home().resolve()
    if path == home or path in home.parents:
        raise argparse.ArgumentTypeError(
            f"{path} is the home directory or one of its ancestors, which is never a root; "
            "pass a project directory"
        )
    return path


def _socket(value: str) -> Path:
    """Herdr's socket as an absolute path (it need not exist yet: Herdr makes it when it starts)."""
    path = Path(value).expanduser().absolute()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a directory; pass Herdr's socket path")
    return path


def root_notes(args: argparse.Namespace) -> list[str]:
    """What the user should know about the roots the stdio entry will have."""
    if args.sim_root or args.sim == "off":
        return []
    return [
        "no --sim-root: when no Herdr answers, the embedded simulator takes the directory the client "
        "starts `herdr-mcp stdio` in as its root, which the client decides (a desktop client often "
        "starts it in / or the home directory, neither ever a root); pass --sim-root DIR to fix it"
    ]


def _str(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _endpoint(args: argparse.Namespace) -> dict[str, Any]:
    """What the client is told: a command to launch, or a URL and its bearer."""
    config_dir: Path | None = args.config_dir
    if args.transport == "stdio":
        command = [*_herdr_mcp_command(), "stdio"]
        if config_dir is not None:
            command += ["--config-dir", str(config_dir.expanduser().absolute())]
        if args.herdr_socket is not None:
            command += ["--herdr-socket", str(args.herdr_socket)]
        if args.sim is not None:
            command.append("--sim" if args.sim == "on" else "--no-sim")
        if args.read_only:
            command.append("--read-only")
        for dest in ("sim_root", "write_root", "allow_herdr_class"):
            for value in getattr(args, dest) or ():
                command += ["--" + dest.replace("_", "-"), str(value)]
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


@dataclass(frozen=True)
class Written:
    """What `write_entry` did: the file's mode now, the backup, what it made private."""

    mode: int
    backup: Path | None = None
    #: The file's mode before, when it held a bearer readable by others and was tightened.
    tightened_from: int | None = None
    #: Earlier backups beside it that held a bearer readable by others, now 0600.
    backups_tightened: tuple[Path, ...] = field(default=())

    def notes(self) -> list[str]:
        notes = []
        if self.tightened_from is not None:
            notes.append(
                f"the file holds a bearer and was readable by others (mode {self.tightened_from:04o}); "
                f"it is {PRIVATE_MODE:04o} now (a backup holding one is too)"
            )
        for backup in self.backups_tightened:
            notes.append(f"an earlier backup held a bearer readable by others; {backup} is 0600 now")
        return notes


def write_entry(client: str, path: Path, name: str, entry: Mapping[str, Any]) -> Written:
    """Put `entry` under `name` in the client's config file, keeping everything else in it.

    An existing file is parsed first (`config_unparseable`, and the file is left as it was, if
    it cannot be), copied to a backup, then replaced atomically. Whatever holds a bearer (the new
    file, the backup, an earlier backup beside it) is 0600 from its creation on; a file without
    one keeps the mode it had (a new one is 0600).
    """
    target = path.expanduser()
    if target.is_symlink():
        target = target.resolve()  # edit what the link points at, keep the link
    original = _read(target)
    before = _parse(client, target, original) if original is not None else {}
    document = copy.deepcopy(before)  # `before` stays what the backup holds
    section = _section(client)
    servers = document.setdefault(section, {})
    if not isinstance(servers, dict):
        raise UsageFault(
            "config_unparseable",
            f"{target}: {section} is not a table of servers; fix the file by hand, nothing was changed",
        )
    servers[name] = dict(entry)
    text = tomli_w.dumps(document) if client == "codex" else json.dumps(document, indent=2) + "\n"
    target.parent.mkdir(parents=True, exist_ok=True)
    old_mode = stat.S_IMODE(target.stat().st_mode) if original is not None else PRIVATE_MODE
    mode = PRIVATE_MODE if holds_bearer(client, document) else old_mode
    backup = None
    if original is not None:
        backup = target.with_name(f"{target.name}.bak-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S%fZ}")
        _write_new(backup, original, PRIVATE_MODE if holds_bearer(client, before) else old_mode)
    temporary = target.with_name(f".{target.name}.herdr-mcp-{secrets.token_hex(4)}")
    try:
        _write_new(temporary, text.encode("utf-8"), mode)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    tightened = old_mode if original is not None and mode != old_mode and old_mode & 0o077 else None
    return Written(mode, backup, tightened, _tighten_backups(client, target, skip=backup))


def _section(client: str) -> str:
    return "mcp_servers" if client == "codex" else "mcpServers"


def holds_bearer(client: str, document: Mapping[str, Any]) -> bool:
    """Whether a client config carries a credential for some server: HTTP headers (ours are
    `Authorization: Bearer ...`; another server's may hold an API key) or a Codex `bearer_token`."""
    servers = document.get(_section(client))
    if not isinstance(servers, dict):
        return False
    for server in servers.values():
        if not isinstance(server, dict):
            continue
        if server.get("headers") or server.get("http_headers") or server.get("bearer_token"):
            return True
    return False


def _tighten_backups(client: str, target: Path, skip: Path | None) -> tuple[Path, ...]:
    """Make the earlier backups of `target` that hold a bearer 0600 (an earlier `connect --write`
    kept the file's mode, 0644 say, for them); the ones tightened."""
    tightened = []
    for backup in sorted(target.parent.glob(f"{glob.escape(target.name)}.bak-*")):
        if backup == skip:
            continue
        try:
            info = backup.lstat()
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or not info.st_mode & 0o077:
                continue
            data = _read(backup)
        except (OSError, UsageFault):
            continue  # not ours to judge: left as it is
        if data is not None and _bytes_hold_bearer(client, backup, data):
            os.chmod(backup, PRIVATE_MODE, follow_symlinks=False)
            tightened.append(backup)
    return tuple(tightened)


def _bytes_hold_bearer(client: str, path: Path, data: bytes) -> bool:
    try:
        return holds_bearer(client, _parse(client, path, data))
    except UsageFault:  # not parseable: judge by the bytes
        return b"bearer " in data.lower()


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
        document = tomllib.loads(text) if client == "codex" else loads_bounded(text, CONFIG_LIMITS)
    except RecursionError:  # TOML nested past the parser's recursion (tomllib recurses per level)
        raise UsageFault(
            "config_unparseable", f"{path} nests too deeply to be a client config; nothing was changed"
        ) from None
    except (UnicodeDecodeError, ValueError) as exc:  # not TOML/JSON, or past CONFIG_LIMITS
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
    """Create `path` (never an existing one) as `mode`: the umask can only narrow the mode it is
    created with, and the data is written after `fchmod` set the mode exactly."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(descriptor, "wb") as file:
        os.fchmod(file.fileno(), mode)
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
