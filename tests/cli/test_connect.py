"""`herdr-mcp connect`: client configurations printed and written, and the MCP Inspector (the
real npm CLI) listing the 18 tools through them, over stdio and over HTTP with the bearer.

Every run gets its own HOME, so the clients' default config files are under tmp_path.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import stat
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from herdr_mcp.cli.connect import default_config_path
from herdr_mcp.contract import contract_identity, load_catalog
from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.npm_tools import INSPECTOR, npm_program
from tests.support.runtime_harness import make_repo, running_runtime

DEADLINE_S = 120.0
HERDR_MCP = Path(sys.executable).with_name("herdr-mcp")


def _env(home: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"XDG_CONFIG_HOME", "CODEX_HOME", "APPDATA"}
    }
    return {**env, "HOME": str(home), "HERDR_MCP_CONFIG_DIR": str(home / "herdr-config")}


def connect(home: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HERDR_MCP), "connect", *arguments],
        capture_output=True,
        text=True,
        env=_env(home),
        timeout=DEADLINE_S,
    )


def connect_json(home: Path, *arguments: str) -> dict[str, Any]:
    done = connect(home, *arguments, "--json")
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.mark.parametrize(
    ("client", "where"),
    [
        ("claude-desktop", ".config/Claude/claude_desktop_config.json"),
        ("cursor", ".cursor/mcp.json"),
        ("codex", ".codex/config.toml"),
        ("inspector", None),
    ],
)
def test_the_stdio_entry_launches_this_herdr_mcp_by_absolute_path(
    home: Path, client: str, where: str | None
) -> None:
    answer = connect_json(home, client, "--config-dir", str(home / "cfg"))
    assert answer["entry"] == {
        "command": str(HERDR_MCP),
        "args": ["stdio", "--config-dir", str(home / "cfg")],
    }
    assert answer["file"] == (str(home / where) if where else None)


def test_the_printed_configuration_is_what_the_client_reads(home: Path) -> None:
    cursor = connect(home, "cursor")
    assert cursor.returncode == 0, cursor.stderr
    header, _, body = cursor.stdout.partition("\n")
    assert header == f"# add to {home / '.cursor' / 'mcp.json'}"
    assert json.loads(body)["mcpServers"]["herdr-mcp"]["command"] == str(HERDR_MCP)
    codex = connect(home, "codex", "--http", "--name", "workstation")
    _, _, body = codex.stdout.partition("\n")
    table = tomllib.loads(body)["mcp_servers"]["workstation"]
    token = (home / "herdr-config" / "token").read_text().strip()
    assert table == {"url": "http://127.0.0.1:8772/mcp", "http_headers": {"Authorization": f"Bearer {token}"}}
    inspector = connect(home, "inspector")
    assert inspector.stdout.splitlines()[-1] == shlex.join(
        [
            "npx",
            "-y",
            "@modelcontextprotocol/inspector@2.12.0",
            "--cli",
            "--method",
            "tools/list",
            "--",
            str(HERDR_MCP),
            "stdio",
        ]
    )


def test_http_entries_carry_the_bearer_of_the_named_token_file(home: Path, tmp_path: Path) -> None:
    token_file = tmp_path / "link-token"
    token_file.write_text("t" * 43 + "\n")
    token_file.chmod(0o600)
    answer = connect_json(
        home, "cursor", "--http", "--url", "http://127.0.0.1:8771/mcp", "--token-file", str(token_file)
    )
    assert answer["entry"] == {
        "url": "http://127.0.0.1:8771/mcp",
        "headers": {"Authorization": "Bearer " + "t" * 43},
    }
    inspector = connect_json(home, "inspector", "--http", "--token-file", str(token_file))
    assert inspector["entry"]["type"] == "streamable-http"


def test_default_locations_per_platform(tmp_path: Path) -> None:
    home = tmp_path
    assert default_config_path("claude-desktop", "darwin", {}, home) == (
        home / "Library/Application Support/Claude/claude_desktop_config.json"
    )
    assert default_config_path(
        "claude-desktop", "win32", {"APPDATA": "C:/Users/u/AppData/Roaming"}, home
    ) == Path("C:/Users/u/AppData/Roaming/Claude/claude_desktop_config.json")
    assert default_config_path("claude-desktop", "linux", {"XDG_CONFIG_HOME": "/x"}, home) == Path(
        "/x/Claude/claude_desktop_config.json"
    )
    for platform in ("darwin", "win32", "linux"):
        assert default_config_path("cursor", platform, {}, home) == home / ".cursor/mcp.json"
        assert default_config_path("codex", platform, {}, home) == home / ".codex/config.toml"
    assert default_config_path("codex", "linux", {"CODEX_HOME": "/c"}, home) == Path("/c/config.toml")
    assert default_config_path("inspector", "linux", {}, home) is None


def test_write_creates_a_private_file_in_the_clients_default_place(home: Path) -> None:
    answer = connect_json(home, "cursor", "--http", "--write")
    path = home / ".cursor" / "mcp.json"
    assert answer["file"] == str(path) and answer["backup"] is None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds the bearer
    assert json.loads(path.read_text())["mcpServers"]["herdr-mcp"] == answer["entry"]


def test_write_keeps_everything_else_and_a_backup_of_the_json_it_replaced(home: Path) -> None:
    path = home / ".config" / "Claude" / "claude_desktop_config.json"
    path.parent.mkdir(parents=True)
    original: dict[str, Any] = {
        "globalShortcut": "Ctrl+Space",
        "mcpServers": {"other": {"command": "other-server", "args": ["--x"], "env": {"K": "v"}}},
        "preferences": {"a": [1, 2, {"b": None}]},
    }
    data = json.dumps(original, indent=4).encode()
    path.write_bytes(data)
    path.chmod(0o644)
    answer = connect_json(home, "claude-desktop", "--write")
    written = json.loads(path.read_text())
    assert written == {**original, "mcpServers": {**original["mcpServers"], "herdr-mcp": answer["entry"]}}
    assert list(written) == list(original)  # the order of what was there is kept
    assert Path(answer["backup"]).read_bytes() == data
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    # Writing again replaces our entry and leaves the rest as it is.
    again = connect_json(home, "claude-desktop", "--write", "--config-dir", str(home / "elsewhere"))
    assert json.loads(path.read_text())["mcpServers"] == {
        **original["mcpServers"],
        "herdr-mcp": again["entry"],
    }


def test_write_keeps_the_values_of_a_codex_toml_and_a_backup(home: Path) -> None:
    path = home / ".codex" / "config.toml"
    path.parent.mkdir()
    text = (
        '# my settings\nmodel = "o3"\napproval_policy = "on-request"\n\n'
        '[mcp_servers.docs]\ncommand = "docs-mcp"\nargs = ["--port", "1"]\nenv = { TOKEN_VAR = "DOCS" }\n\n'
        '[profiles.fast]\nmodel = "o4-mini"\n'
    )
    path.write_text(text)
    done = connect(home, "codex", "--write")
    assert done.returncode == 0, done.stderr
    assert "comments" in done.stdout  # said, since tomli-w cannot keep them
    written = tomllib.loads(path.read_text())
    before = tomllib.loads(text)
    assert written["mcp_servers"]["herdr-mcp"] == {"command": str(HERDR_MCP), "args": ["stdio"]}
    del written["mcp_servers"]["herdr-mcp"]
    assert written == before
    (backup,) = path.parent.glob("config.toml.bak-*")
    assert backup.read_text() == text


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_world_readable_file_holding_the_bearer_and_its_backups_are_made_private(home: Path) -> None:
    # What an earlier `connect cursor --http --write` left: the user's 0644 file with our bearer,
    # and a 0644 backup of it holding the bearer too.
    path = home / ".cursor" / "mcp.json"
    path.parent.mkdir()
    earlier = {
        "mcpServers": {
            "other": {"command": "other-server", "args": []},
            "herdr-mcp": {"url": "http://127.0.0.1:8772/mcp", "headers": {"Authorization": "Bearer old"}},
        }
    }
    data = json.dumps(earlier).encode()
    path.write_bytes(data)
    old_backup = path.with_name("mcp.json.bak-20261101T000000000000Z")
    old_backup.write_bytes(data)
    stdio_backup = path.with_name("mcp.json.bak-20261001T000000000000Z")
    stdio_backup.write_text('{"mcpServers": {"other": {"command": "other-server"}}}')
    for file in (path, old_backup, stdio_backup):
        file.chmod(0o644)
    answer = connect_json(home, "cursor", "--http", "--write")
    backup = Path(answer["backup"])
    print(
        f"\nEVIDENCE modes after --http --write: file {_mode(path):04o}, its backup {_mode(backup):04o}, "
        f"earlier backup with a bearer {_mode(old_backup):04o}, earlier stdio-only backup "
        f"{_mode(stdio_backup):04o}; notes {answer['notes']}"
    )
    assert (_mode(path), answer["mode"]) == (0o600, "0600")
    assert json.loads(path.read_text())["mcpServers"]["herdr-mcp"] == answer["entry"]
    assert backup.read_bytes() == data and _mode(backup) == 0o600
    assert _mode(old_backup) == 0o600 and _mode(stdio_backup) == 0o644  # no bearer: its mode stays
    assert any("mode 0644" in note and "0600 now" in note for note in answer["notes"])
    assert any(str(old_backup) in note for note in answer["notes"])
    # The plain output says so too.
    path.chmod(0o644)
    done = connect(home, "cursor", "--http", "--write")
    assert done.returncode == 0 and "readable by others (mode 0644)" in done.stdout, done.stdout
    assert _mode(path) == 0o600


def test_a_file_without_a_bearer_keeps_its_mode_and_gets_one_private_once_it_holds_one(home: Path) -> None:
    path = home / ".cursor" / "mcp.json"
    path.parent.mkdir()
    stdio_only = b'{"mcpServers": {"other": {"command": "other-server", "args": []}}}'
    path.write_bytes(stdio_only)
    path.chmod(0o644)
    # Under a umask that would narrow a new file, the mode is kept exactly.
    done = subprocess.run(
        ["/bin/sh", "-c", 'umask 077 && exec "$@"', "sh", str(HERDR_MCP), "connect", "cursor", "--write",
         "--json"],
        capture_output=True, text=True, env=_env(home), timeout=DEADLINE_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)
    assert _mode(path) == 0o644 and _mode(Path(first["backup"])) == 0o644 and first["mode"] == "0644"
    # Adding an HTTP entry puts the bearer in: the file becomes 0600; the backup of the stdio-only
    # file holds none and keeps 0644.
    second = connect_json(home, "cursor", "--http", "--write", "--name", "remote")
    assert _mode(path) == 0o600 and _mode(Path(second["backup"])) == 0o644
    assert "readable by others" in second["notes"][0]
    # Another server's API key header counts as a bearer too (codex: http_headers).
    codex = home / ".codex" / "config.toml"
    codex.parent.mkdir()
    codex.write_text(
        '[mcp_servers.api]\nurl = "https://example.invalid/mcp"\nhttp_headers = { "X-Api-Key" = "k" }\n'
    )
    codex.chmod(0o640)
    third = connect_json(home, "codex", "--write")
    assert _mode(codex) == 0o600 and _mode(Path(third["backup"])) == 0o600


def test_write_through_a_symlink_edits_its_target(home: Path, tmp_path: Path) -> None:
    target = tmp_path / "dotfiles" / "mcp.json"
    target.parent.mkdir()
    target.write_text('{"mcpServers": {}}')
    link = home / ".cursor" / "mcp.json"
    link.parent.mkdir()
    link.symlink_to(target)
    connect_json(home, "cursor", "--write")
    assert link.is_symlink()
    assert "herdr-mcp" in json.loads(target.read_text())["mcpServers"]


@pytest.mark.parametrize(
    ("client", "name", "content"),
    [
        ("cursor", "mcp.json", b'{"mcpServers": {},}'),
        ("cursor", "mcp.json", b'["not", "an", "object"]'),
        ("cursor", "mcp.json", b'{"mcpServers": ["a"]}'),
        ("cursor", "mcp.json", b'{"mcpServers": {}, "mcpServers": {}}'),
        ("cursor", "mcp.json", b'{"a": "\xff"}'),
        ("codex", "config.toml", b"model = \n"),
        ("codex", "config.toml", b'mcp_servers = "none"\n'),
    ],
)
def test_a_config_that_cannot_be_parsed_is_refused_and_left_untouched(
    tmp_path: Path, home: Path, client: str, name: str, content: bytes
) -> None:
    path = tmp_path / "configs" / name
    path.parent.mkdir()
    path.write_bytes(content)
    done = connect(home, client, "--write", "--config", str(path), "--json")
    assert done.returncode == 2, done
    assert json.loads(done.stdout)["error"]["code"] == "config_unparseable"
    assert path.read_bytes() == content
    assert sorted(p.name for p in path.parent.iterdir()) == [name]  # no backup, no temp file
    plain = connect(home, client, "--write", "--config", str(path))
    assert plain.returncode == 2 and plain.stdout == ""
    assert (
        plain.stderr.startswith("herdr-mcp: error: config_unparseable: ")
        and "nothing was changed" in plain.stderr
    )


def test_refusals_that_need_another_choice(home: Path) -> None:
    http = connect(home, "claude-desktop", "--http", "--json")
    assert http.returncode == 2 and json.loads(http.stdout)["error"]["code"] == "transport_unsupported"
    no_file = connect(home, "inspector", "--write", "--json")
    assert no_file.returncode == 2 and json.loads(no_file.stdout)["error"]["code"] == "config_path_required"
    assert not (home / ".cursor").exists() and not (home / ".codex").exists()


def _inspect_from(entry: dict[str, Any], cwd: Path, home: Path) -> dict[str, Any]:
    """herdr_inspect through the `mcp` SDK's stdio client running `entry` as a client would: its
    command and args, started in `cwd`."""

    async def session() -> dict[str, Any]:
        params = StdioServerParameters(command=entry["command"], args=entry["args"], cwd=cwd, env=_env(home))
        async with Client(params) as client:
            result = await client.call_tool("herdr_inspect", {})
            assert not result.is_error and result.structured_content is not None, result
            return dict(result.structured_content)

    return asyncio.run(asyncio.wait_for(session(), DEADLINE_S))


def test_runtime_options_reach_the_stdio_entry_and_its_runtime(home: Path, tmp_path: Path) -> None:
    first = make_repo(tmp_path / "first", {"README.md": b"# one\n"})
    second = make_repo(tmp_path / "second", {"README.md": b"# two\n"})
    config_dir = tmp_path / "config"
    answer = connect_json(
        home, "cursor", "--write", "--config-dir", str(config_dir), "--sim",
        "--sim-root", str(first), "--sim-root", str(second), "--read-only", "--write-root", str(first),
    )  # fmt: skip
    written = json.loads((home / ".cursor" / "mcp.json").read_text())["mcpServers"]["herdr-mcp"]
    assert written == answer["entry"] and answer["notes"] == []
    assert written["args"] == [
        "stdio", "--config-dir", str(config_dir), "--sim", "--read-only", "--sim-root", str(first.resolve()),
        "--sim-root", str(second.resolve()), "--write-root", str(first.resolve()),
    ]  # fmt: skip
    # Started in the home directory, as a desktop client does: the roots are the ones given.
    inspected = _inspect_from(written, home, home)
    roots = [project["root"] for project in inspected["projects"]]
    print(f"\nEVIDENCE the written entry started in $HOME: roots {roots}, policy {inspected['policy']}")
    assert roots == sorted([str(first.resolve()), str(second.resolve())])
    assert inspected["policy"]["read_only"] is True
    assert inspected["policy"]["write_roots"] == [str(first.resolve())]
    # Without --sim-root the client's directory decides, and the command says so: from $HOME,
    # which is never a root, there is none.
    bare = connect_json(home, "cursor", "--config-dir", str(config_dir), "--sim")
    assert bare["notes"] and "--sim-root" in bare["notes"][0]
    printed = connect(home, "cursor", "--sim")
    assert printed.returncode == 0 and printed.stderr.startswith("note: no --sim-root"), printed.stderr
    nothing = _inspect_from(bare["entry"], home, home)
    print(
        f"EVIDENCE the same without --sim-root: roots {nothing['projects']}, warnings {nothing['warnings']}"
    )
    assert nothing["projects"] == []
    assert any(warning["code"] == "root_excluded" for warning in nothing["warnings"])


def test_runtime_options_are_checked_before_anything_is_written(home: Path, tmp_path: Path) -> None:
    refusals = [
        ("--sim-root", str(tmp_path / "missing")),
        ("--sim-root", str(home)),
        ("--sim-root", str(home.parent)),
        ("--write-root", str(tmp_path / "missing")),
        ("--herdr-socket", str(tmp_path)),
    ]
    for option, value in refusals:
        done = connect(home, "cursor", "--write", option, value, "--json")
        assert done.returncode == 2, (option, value, done)
        error = json.loads(done.stdout)["error"]
        assert error["code"] == "invalid_argument" and value in error["message"], error
    http = connect(home, "cursor", "--http", "--write", "--read-only", "--json")
    assert http.returncode == 2 and json.loads(http.stdout)["error"]["code"] == "stdio_option_with_http"
    assert not (home / ".cursor").exists()
    # A socket path need not exist yet (Herdr makes it), and is passed on absolute.
    socket = connect_json(home, "codex", "--no-sim", "--herdr-socket", "herdr.sock")["entry"]
    assert socket["args"] == ["stdio", "--herdr-socket", str(Path.cwd() / "herdr.sock"), "--no-sim"]


def _inspector(home: Path, *arguments: str) -> list[str]:
    """The names of the tools the MCP Inspector's CLI lists with `arguments`."""
    env = {**_env(home), "MCP_INSPECTOR_SECRET_STORE": "memory"}
    done = subprocess.run(
        [str(npm_program(*INSPECTOR)), "--cli", "--method", "tools/list", *arguments],
        capture_output=True,
        text=True,
        env=env,
        timeout=DEADLINE_S,
    )
    assert done.returncode == 0, done.stderr
    return [tool["name"] for tool in json.loads(done.stdout)["tools"]]


@pytest.mark.slow
def test_the_mcp_inspector_lists_the_18_tools_over_stdio_and_over_http(home: Path, tmp_path: Path) -> None:
    catalog = sorted(tool["name"] for tool in load_catalog(contract_identity().epoch))
    assert len(catalog) == 18
    repo = make_repo(tmp_path / "repo", {"README.md": b"# demo\n"})
    config_dir = tmp_path / "config"
    # stdio: the command `connect` prints, with the simulator so no Herdr is needed.
    stdio = connect_json(home, "inspector", "--config-dir", str(config_dir))["entry"]
    launch = [stdio["command"], *stdio["args"], "--sim", "--sim-root", str(repo)]
    assert sorted(_inspector(home, "--", *launch)) == catalog
    # The file `connect --write` makes is one the Inspector reads (`--config FILE --server NAME`).
    servers = tmp_path / "inspector.json"
    connect_json(home, "inspector", "--write", "--config", str(servers), "--config-dir", str(config_dir))
    document = json.loads(servers.read_text())
    document["mcpServers"]["herdr-mcp"]["args"] += ["--sim", "--sim-root", str(repo)]
    servers.write_text(json.dumps(document))
    assert sorted(_inspector(home, "--config", str(servers), "--server", "herdr-mcp")) == catalog
    # HTTP: a running `serve`, the URL and bearer header from `connect --http`.
    with (
        SimulatorThread(SimConfig.for_roots([repo]), tmp_path / "herdr.sock"),
        running_runtime(tmp_path / "herdr.sock", config_dir) as runtime,
    ):
        http = connect_json(
            home, "inspector", "--http", "--url", runtime.url, "--config-dir", str(config_dir)
        )["entry"]
        assert http["headers"] == {"Authorization": f"Bearer {runtime.token}"}
        header = f"Authorization: {http['headers']['Authorization']}"
        assert (
            sorted(_inspector(home, "--transport", "http", "--header", header, "--", http["url"])) == catalog
        )
        connect_json(
            home, "inspector", "--http", "--url", runtime.url, "--config-dir", str(config_dir),
            "--write", "--config", str(servers), "--name", "h",
        )  # fmt: skip
        assert sorted(_inspector(home, "--config", str(servers), "--server", "h")) == catalog
        # Without the header the runtime refuses, so the listing above went through the bearer.
        env = {**_env(home), "MCP_INSPECTOR_SECRET_STORE": "memory"}
        refused = subprocess.run(
            [
                str(npm_program(*INSPECTOR)),
                "--cli",
                "--method",
                "tools/list",
                "--transport",
                "http",
                "--",
                runtime.url,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=DEADLINE_S,
        )
        assert refused.returncode != 0


def _readme_section() -> list[str]:
    """The shell lines of the README's "Connect a client" code blocks (continuations joined)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Connect a client\n", 1)[1].split("\n## ", 1)[0]
    lines: list[str] = []
    for block in section.split("```sh\n")[1:]:
        text = block.split("```", 1)[0].replace("\\\n", " ")
        lines += [line.split("  #", 1)[0].strip() for line in text.splitlines() if line.strip()]
    return lines


def test_the_readme_commands_do_what_it_says(home: Path, tmp_path: Path) -> None:
    lines = _readme_section()
    connects = [line for line in lines if line.startswith(".venv/bin/herdr-mcp connect ")]
    inspectors = [line for line in lines if line.startswith("npx ")]
    assert len(connects) == 5 and len(inspectors) == 2
    for line in connects:
        done = connect(home, *shlex.split(line)[2:])
        assert done.returncode == 0, (line, done.stderr)
    assert "herdr-mcp" in json.loads((home / ".cursor" / "mcp.json").read_text())["mcpServers"]
    assert "herdr-mcp" in tomllib.loads((home / ".codex" / "config.toml").read_text())["mcp_servers"]
    package, version, _ = INSPECTOR
    prefix = f"npx -y {package}@{version} --cli "
    catalog = sorted(tool["name"] for tool in load_catalog(contract_identity().epoch))
    repo = make_repo(tmp_path / "repo", {"README.md": b"# demo\n"})
    config_dir = home / "herdr-config"
    with (
        SimulatorThread(SimConfig.for_roots([repo]), tmp_path / "herdr.sock"),
        running_runtime(tmp_path / "herdr.sock", config_dir) as runtime,
    ):
        for line in inspectors:
            assert line.startswith(prefix), line
            line = line.replace("$(.venv/bin/herdr-mcp token)", runtime.token).replace(
                "http://127.0.0.1:8772/mcp", runtime.url
            )
            words = [str(HERDR_MCP) if word == ".venv/bin/herdr-mcp" else word for word in shlex.split(line)]
            # The stdio line runs without Herdr: `stdio` embeds the simulator at its cwd, the repo.
            env = {**_env(home), "MCP_INSPECTOR_SECRET_STORE": "memory"}
            done = subprocess.run(
                [str(npm_program(*INSPECTOR)), *words[3:]],  # after `npx -y <package>`
                capture_output=True,
                text=True,
                env=env,
                cwd=repo,
                timeout=DEADLINE_S,
            )
            assert done.returncode == 0, (line, done.stderr)
            assert sorted(tool["name"] for tool in json.loads(done.stdout)["tools"]) == catalog
