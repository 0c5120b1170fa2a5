"""Services: the rendered launchd plists and systemd units (parsed back, no plutil or systemd
here), the commands an install/uninstall runs (a recording runner, and recording fakes of
`launchctl`/`systemctl` on PATH), the update fence, and the macOS service rollback through the
generation gate against real runtimes."""

from __future__ import annotations

import json
import os
import plistlib
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from herdr_mcp.cli.service import main, rollback_main
from herdr_mcp.contract import contract_identity
from herdr_mcp.errors import EXIT_LOCAL, EXIT_REFUSED
from herdr_mcp.generations import ControlFile, Generation, GenerationStore, Observation, activate
from herdr_mcp.generations.fence import read_fence, set_fence
from herdr_mcp.service.install import UNINSTALL_REASON
from herdr_mcp.service.rollback import ROLLBACK_FILE, read_rollback
from herdr_mcp.service.units import (
    CommandResult,
    Platform,
    ServiceConfig,
    ServiceError,
    render,
    render_launchd,
    render_systemd,
    write_files,
)
from herdr_mcp.update.auto import skip_reason
from tests.support.runtime_harness import RunningRuntime, two_runtimes
from tests.support.sim_helpers import short_tmp_dir

UID = os.getuid()
RUNTIME_PLIST = "dev.herdr.mcp.runtime.plist"
PLISTS = [RUNTIME_PLIST, "dev.herdr.mcp.link.plist", "dev.herdr.mcp.update.plist"]
UNITS = [
    "herdr-mcp-link.service",
    "herdr-mcp-runtime.service",
    "herdr-mcp-update.service",
    "herdr-mcp-update.timer",
]


@dataclass
class Recorder:
    """A runner that records every command and answers 0, or a scripted failure."""

    calls: list[list[str]] = field(default_factory=list)
    fail: dict[str, int] = field(default_factory=dict)
    before_call: list[object] = field(default_factory=list)

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(list(argv))
        code = next((rc for word, rc in self.fail.items() if word in argv), 0)
        return CommandResult(code, "active\n" if code == 0 else "", "scripted failure" if code else "")


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def _parse_unit(data: bytes) -> dict[str, list[tuple[str, str]]]:
    """A small INI parse of a unit file: section -> [(key, value)] (keys may repeat)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in data.decode().splitlines():
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        assert current is not None, line
        key, _, value = line.partition("=")
        current.append((key, value))
    return sections


_C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
              "\\": "\\", '"': '"', "'": "'", "s": " "}  # fmt: skip


def _systemd_words(value: str, *, setting: str) -> list[str]:
    """What systemd makes of a quoted `Environment=` or `ExecStart=` value, by systemd.syntax(7),
    systemd.unit(5) and systemd.service(5): split at unquoted spaces, quotes removed, C escapes
    undone; then `%%` is a literal `%` (specifiers) everywhere; in `ExecStart=` a `$$` is a
    literal `$` in the arguments, but not in the program path, which is taken as it is (only
    specifiers apply to it). In `Environment=` `$` has no special meaning."""
    words: list[str] = []
    index = 0
    while index < len(value):
        if value[index] == " ":
            index += 1
            continue
        assert value[index] == '"', f"every word is quoted: {value[index:]!r}"
        index += 1
        word = ""
        while value[index] != '"':
            if value[index] == "\\":
                index += 1
                assert value[index] in _C_ESCAPES, f"unexpected escape \\{value[index]}"
                word += _C_ESCAPES[value[index]]
            else:
                word += value[index]
            index += 1
        index += 1
        assert index == len(value) or value[index] == " ", "a closing quote ends a word"
        words.append(word)
    out = []
    for position, word in enumerate(words):
        assert re.fullmatch(r"([^%]|%%)*", word), f"a lone % is a specifier: {word!r}"
        word = word.replace("%%", "%")
        if setting == "ExecStart" and position > 0:
            assert re.fullmatch(r"([^$]|\$\$)*", word), f"a lone $ is a variable: {word!r}"
            word = word.replace("$$", "$")
        out.append(word)
    return out


def _config(tmp: Path) -> ServiceConfig:
    return ServiceConfig(
        executable=Path("/opt/herdr mcp/100%/bin/herdr-mcp"),
        config_dir=tmp / "config $HOME",
        port=8772,
        log_dir=tmp / "logs",
    )


# -- rendering -------------------------------------------------------------------------------


def test_launchd_plists_parse_back(tmp_path: Path) -> None:
    config = _config(tmp_path)
    files = render_launchd(config)
    assert sorted(files) == sorted(PLISTS)
    assert render_launchd(config) == files  # deterministic
    env = {"HERDR_MCP_CONFIG_DIR": str(config.config_dir)}
    exe = str(config.executable)

    runtime = plistlib.loads(files[RUNTIME_PLIST])
    assert runtime == {
        "Label": "dev.herdr.mcp.runtime",
        "ProgramArguments": [exe, "serve", "--host", "127.0.0.1", "--port", "8772"],
        "EnvironmentVariables": env,
        "RunAtLoad": True,
        "KeepAlive": True,
        "ThrottleInterval": 5,
        "ProcessType": "Interactive",
        "StandardOutPath": str(tmp_path / "logs" / "runtime.log"),
        "StandardErrorPath": str(tmp_path / "logs" / "runtime.err.log"),
    }
    link = plistlib.loads(files["dev.herdr.mcp.link.plist"])
    assert (link["Label"], link["ProgramArguments"], link["KeepAlive"]) == (
        "dev.herdr.mcp.link",
        [exe, "link"],
        True,
    )
    update = plistlib.loads(files["dev.herdr.mcp.update.plist"])
    assert update["ProgramArguments"] == [exe, "update", "auto"]
    assert (update["StartInterval"], update["RunAtLoad"], update["KeepAlive"]) == (86400, True, False)
    assert update["ThrottleInterval"] == 300
    assert update["EnvironmentVariables"] == env


def test_systemd_units_parse_back(tmp_path: Path) -> None:
    config = _config(tmp_path)
    files = render_systemd(config)
    assert sorted(files) == UNITS
    assert render_systemd(config) == files
    exe = str(config.executable)
    units = {name: _parse_unit(data) for name, data in files.items()}

    runtime = dict(units["herdr-mcp-runtime.service"]["Service"])
    assert _systemd_words(runtime["ExecStart"], setting="ExecStart") == [
        exe, "serve", "--host", "127.0.0.1", "--port", "8772"
    ]  # fmt: skip
    assert _systemd_words(runtime["Environment"], setting="Environment") == [
        f"HERDR_MCP_CONFIG_DIR={config.config_dir}"
    ]
    assert (runtime["Restart"], runtime["Type"]) == ("on-failure", "simple")
    assert units["herdr-mcp-runtime.service"]["Install"] == [("WantedBy", "default.target")]

    link = units["herdr-mcp-link.service"]
    assert _systemd_words(dict(link["Service"])["ExecStart"], setting="ExecStart") == [exe, "link"]
    assert ("After", "herdr-mcp-runtime.service") in link["Unit"]

    update = dict(units["herdr-mcp-update.service"]["Service"])
    assert update["Type"] == "oneshot"
    assert _systemd_words(update["ExecStart"], setting="ExecStart") == [exe, "update", "auto"]
    assert "Install" not in units["herdr-mcp-update.service"]  # started by its timer only

    timer = dict(units["herdr-mcp-update.timer"]["Timer"])
    assert (timer["OnCalendar"], timer["Persistent"], timer["Unit"]) == (
        "daily",
        "true",
        "herdr-mcp-update.service",
    )
    assert units["herdr-mcp-update.timer"]["Install"] == [("WantedBy", "timers.target")]


#: systemd refuses a program path with any of these ("Executable name contains special characters").
PROGRAM_PATH_REFUSED = {'"', "'", "\\"}
#: Characters systemd treats specially somewhere (quotes, escapes, specifiers, variables, spaces).
AWKWARD = ["plain", "with space", 'quote"d', "it's", "back\\slash", "100%", "%n", "$HOME", "${X}", "$$", "é"]


@pytest.mark.parametrize("word", AWKWARD)
def test_systemd_environment_values_are_literal(word: str) -> None:
    """`$` is written as it is in `Environment=` (it was doubled, so a config dir with a `$`
    reached the jobs with `$$`)."""
    config = ServiceConfig(Path("/opt/herdr-mcp/bin/herdr-mcp"), Path(f"/home/u/{word}/config"))
    unit = _parse_unit(render_systemd(config)["herdr-mcp-runtime.service"])
    environment = dict(unit["Service"])["Environment"]
    assert _systemd_words(environment, setting="Environment") == [
        f"HERDR_MCP_CONFIG_DIR=/home/u/{word}/config"
    ]


@pytest.mark.parametrize("word", [word for word in AWKWARD if not set(word) & PROGRAM_PATH_REFUSED])
def test_systemd_program_path_is_taken_as_written(word: str) -> None:
    """The program path gets specifier escaping only: systemd does not expand `$` in it."""
    config = ServiceConfig(Path(f"/opt/{word}/herdr-mcp"), Path("/c"))
    unit = _parse_unit(render_systemd(config)["herdr-mcp-link.service"])
    words = _systemd_words(dict(unit["Service"])["ExecStart"], setting="ExecStart")
    assert words == [f"/opt/{word}/herdr-mcp", "link"]


@pytest.mark.parametrize("word", ['quote"d', "it's", "back\\slash"])
def test_a_program_path_systemd_refuses_is_refused_before_anything_is_written(word: str) -> None:
    """systemd refuses a unit whose program path holds a quote or a backslash ("Executable name
    contains special characters"): say so instead of installing a unit that never starts."""
    with pytest.raises(ServiceError) as refused:
        render_systemd(ServiceConfig(Path(f"/opt/{word}/herdr-mcp"), Path("/c")))
    assert refused.value.code == "executable_path_unsupported"
    render_launchd(ServiceConfig(Path(f"/opt/{word}/herdr-mcp"), Path("/c")))  # launchd takes it


@pytest.mark.parametrize("platform", ["systemd", "launchd"])
@pytest.mark.parametrize("bad", ["new\nline", "tab\there", "del\x7f", "bell\a", "bytes\udcff"])
def test_control_characters_or_undecodable_bytes_in_a_path_are_refused(platform: Platform, bad: str) -> None:
    """Neither a unit line nor an XML plist can carry them faithfully (plistlib raised
    ValueError, a newline split the unit line)."""
    for config in (
        ServiceConfig(Path(f"/opt/{bad}/herdr-mcp"), Path("/c")),
        ServiceConfig(Path("/opt/herdr-mcp"), Path(f"/c/{bad}")),
        ServiceConfig(Path("/opt/herdr-mcp"), Path("/c"), log_dir=Path(f"/logs/{bad}")),
    ):
        with pytest.raises(ServiceError) as refused:
            render(platform, config)
        assert refused.value.code in ("executable_path_unsupported", "service_path_unsupported")


def test_launchd_plists_carry_awkward_paths_unchanged(tmp_path: Path) -> None:
    weird = "".join(AWKWARD) + "<&>"
    config = ServiceConfig(Path(f"/opt/{weird}/herdr-mcp"), tmp_path / weird, log_dir=tmp_path / weird)
    for name, data in render_launchd(config).items():
        plist = plistlib.loads(data)
        assert plist["ProgramArguments"][0] == f"/opt/{weird}/herdr-mcp", name
        assert plist["EnvironmentVariables"] == {"HERDR_MCP_CONFIG_DIR": str(tmp_path / weird)}
        assert plist["StandardErrorPath"].startswith(str(tmp_path / weird))


# -- the service manager's own checker -----------------------------------------------------------

#: Where the checker runs: systemd-analyze on Linux (required there; scripts/test installs
#: Debian's systemd package), plutil on macOS, where there is no systemd to check units with.
CHECKED_PLATFORM: Platform = "launchd" if sys.platform == "darwin" else "systemd"


def _check(platform: Platform, files: Path, runtime_dir: Path) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` (or `plutil -lint`) on every file in `files`."""
    paths = sorted(str(path) for path in files.iterdir())
    if platform == "launchd":
        return subprocess.run(["plutil", "-lint", *paths], capture_output=True, text=True, timeout=120)
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, (
        "systemd-analyze is missing: install Debian's systemd package (apt-get install systemd; "
        "scripts/test installs it)"
    )
    runtime_dir.mkdir(mode=0o700, exist_ok=True)
    # --user with a private XDG_RUNTIME_DIR: no running systemd or D-Bus needed; --man=no: no
    # man page lookups for Documentation=.
    return subprocess.run(
        [analyze, "verify", "--user", "--man=no", *paths],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "XDG_RUNTIME_DIR": str(runtime_dir), "SYSTEMD_LOG_COLOR": "0"},
    )


def test_the_service_manager_accepts_the_definitions_with_awkward_paths(tmp_path: Path) -> None:
    """The rendered definitions, for a real executable and a config dir whose paths hold spaces,
    `$`, `%`, quotes and backslashes where systemd allows them, pass `systemd-analyze verify`
    with nothing to say: it found the executable at the path we meant (it checks that it exists
    and is executable) and accepted every line. On macOS `plutil -lint` checks the plists."""
    exe = _exe(tmp_path / "bin $HOME 100% é" / "herdr-mcp")
    config = ServiceConfig(exe, tmp_path / 'config $HOME 100% "q" back\\slash it\'s', port=8772)
    files = tmp_path / "definitions"
    files.mkdir()
    for supervise in (False, True):
        write_files(files, render(CHECKED_PLATFORM, replace(config, supervise=supervise)))
        checked = _check(CHECKED_PLATFORM, files, tmp_path / "run")
        output = checked.stdout + checked.stderr
        if CHECKED_PLATFORM == "launchd":
            assert checked.returncode == 0 and output.count(": OK") == len(PLISTS), checked
        else:
            assert (checked.returncode, output) == (0, ""), checked


def test_the_service_manager_check_is_a_real_check(tmp_path: Path) -> None:
    """The same check refuses a definition whose program is not where it says (the old rendering
    wrote a `$` in a program path as `$$`, a path that does not exist), or a broken plist."""
    files = tmp_path / "definitions"
    files.mkdir()
    if CHECKED_PLATFORM == "launchd":
        (files / "broken.plist").write_text("<plist><dict><key>Label</key></plist>")
    else:
        write_files(files, render_systemd(ServiceConfig(tmp_path / "no-such" / "herdr-mcp", tmp_path / "c")))
    checked = _check(CHECKED_PLATFORM, files, tmp_path / "run")
    assert checked.returncode != 0, checked
    if CHECKED_PLATFORM == "systemd":
        assert "is not executable" in checked.stdout + checked.stderr


# -- install / uninstall with a recording runner ---------------------------------------------


def _repository_configured(_: Path) -> str | None:
    """The daily job's rule answering "a release repository is configured" (the CLI passes the
    updater's own rule: tests/cli/test_start.py)."""
    return None


def _args(tmp: Path, platform: str, *extra: str) -> list[str]:
    return [
        "--platform", platform, "--config-dir", str(tmp / "config"), "--target-dir", str(tmp / "agents"),
        "--state-dir", str(tmp / "generations"), *extra,
    ]  # fmt: skip


def _install(tmp: Path, platform: str, runner: Recorder, *extra: str) -> int:
    exe = _exe(tmp / "bin" / "herdr-mcp")
    more = ["--executable", str(exe), "--log-dir", str(tmp / "logs"), *extra]
    return main(["install", *_args(tmp, platform, *more)], runner=runner, update_check=_repository_configured)


def test_systemd_install_writes_units_and_enables_them(tmp_path: Path) -> None:
    runner = Recorder()
    assert _install(tmp_path, "systemd", runner) == 0
    assert runner.calls == [
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "herdr-mcp-runtime.service", "herdr-mcp-link.service",
         "herdr-mcp-update.timer"],
        ["systemctl", "--user", "restart", "herdr-mcp-runtime.service", "herdr-mcp-link.service"],
        ["systemctl", "--user", "start", "herdr-mcp-update.timer"],
    ]  # fmt: skip
    target = tmp_path / "agents"
    assert sorted(path.name for path in target.iterdir()) == UNITS
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in target.iterdir())
    assert not (tmp_path / "config" / ROLLBACK_FILE).exists()  # Linux records no service rollback


def test_launchd_install_bootstraps_each_agent(tmp_path: Path) -> None:
    runner = Recorder()
    assert _install(tmp_path, "launchd", runner) == 0
    target = tmp_path / "agents"
    expected = []
    for name in sorted(PLISTS):
        label = name.removesuffix(".plist")
        expected += [
            ["launchctl", "bootout", f"gui/{UID}/{label}"],
            ["launchctl", "bootstrap", f"gui/{UID}", str(target / name)],
        ]
    assert runner.calls == expected
    assert (tmp_path / "logs").is_dir()
    # First install: nothing to go back to.
    assert not (tmp_path / "config" / ROLLBACK_FILE).exists()


@pytest.mark.parametrize("platform", ["launchd", "systemd"])
def test_uninstall_fences_first_and_only_install_clears_it(
    tmp_path: Path, platform: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config_dir = tmp_path / "config"
    assert _install(tmp_path, platform, Recorder()) == 0

    fenced_when_called: list[bool] = []

    class FenceWatcher(Recorder):
        def __call__(self, argv: Sequence[str]) -> CommandResult:
            fenced_when_called.append(read_fence(config_dir) is not None)
            return super().__call__(argv)

    watcher = FenceWatcher()
    assert main(["uninstall", *_args(tmp_path, platform)], runner=watcher) == 0
    assert fenced_when_called and all(fenced_when_called)
    assert list((tmp_path / "agents").iterdir()) == []
    fence = read_fence(config_dir)
    assert fence is not None and fence.reason == UNINSTALL_REASON
    skipped = skip_reason(config_dir)
    assert skipped is not None and skipped.reason == "update_fenced"

    # status says so; a second uninstall keeps the fence.
    capsys.readouterr()
    assert main(["status", "--json", *_args(tmp_path, platform)], runner=Recorder()) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["update_fence"]["reason"] == UNINSTALL_REASON
    assert not any(job["installed"] for job in status["jobs"].values())

    assert _install(tmp_path, platform, Recorder()) == 0
    assert "update fence cleared" in capsys.readouterr().out
    assert read_fence(config_dir) is None
    assert skip_reason(config_dir) is None


@pytest.mark.parametrize(("platform", "failing"), [("launchd", "bootstrap"), ("systemd", "restart")])
def test_a_failed_load_restores_the_previous_definitions_and_keeps_the_fence(
    tmp_path: Path, platform: str, failing: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _install(tmp_path, platform, Recorder(), "--port", "9001") == 0
    before = {path.name: path.read_bytes() for path in (tmp_path / "agents").iterdir()}
    set_fence(tmp_path / "config", "test fence")
    capsys.readouterr()

    assert _install(tmp_path, platform, Recorder(fail={failing: 5}), "--port", "9002") == EXIT_LOCAL
    err = capsys.readouterr().err
    assert "_failed:" in err and "exited 5" in err
    after = {path.name: path.read_bytes() for path in (tmp_path / "agents").iterdir()}
    assert after == before
    assert read_fence(tmp_path / "config") is not None


# -- recording fakes on PATH (the real subprocess runner) -------------------------------------


@pytest.fixture
def fake_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`launchctl` and `systemctl` on PATH that append their argv to a log and exit 0."""
    bin_dir = tmp_path / "fakebin"
    log = tmp_path / "commands.log"
    for tool in ("launchctl", "systemctl"):
        script = bin_dir / tool
        _exe(script)
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{log}"\necho active\nexit 0\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_fake_systemctl_on_path_sees_install_status_uninstall(
    tmp_path: Path, fake_tools: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exe = str(_exe(tmp_path / "bin" / "herdr-mcp"))
    assert (
        main(
            ["install", *_args(tmp_path, "systemd", "--executable", exe)], update_check=_repository_configured
        )
        == 0
    )
    assert main(["status", *_args(tmp_path, "systemd")]) == 0
    assert main(["uninstall", *_args(tmp_path, "systemd")]) == 0
    lines = fake_tools.read_text().splitlines()
    assert lines[:4] == [
        "systemctl --user daemon-reload",
        "systemctl --user enable herdr-mcp-runtime.service herdr-mcp-link.service herdr-mcp-update.timer",
        "systemctl --user restart herdr-mcp-runtime.service herdr-mcp-link.service",
        "systemctl --user start herdr-mcp-update.timer",
    ]
    assert lines[4:8] == [f"systemctl --user is-active {unit}" for unit in UNITS_IN_HOST_ORDER]
    assert lines[8:] == [
        "systemctl --user disable --now herdr-mcp-runtime.service herdr-mcp-link.service "
        "herdr-mcp-update.timer",
        "systemctl --user stop herdr-mcp-update.service",
        "systemctl --user daemon-reload",
    ]
    out = capsys.readouterr().out
    assert "herdr-mcp-runtime.service" in out and "active" in out


UNITS_IN_HOST_ORDER = [
    "herdr-mcp-runtime.service",
    "herdr-mcp-link.service",
    "herdr-mcp-update.service",
    "herdr-mcp-update.timer",
]


def test_fake_launchctl_on_path_sees_install_and_uninstall(tmp_path: Path, fake_tools: Path) -> None:
    exe = str(_exe(tmp_path / "bin" / "herdr-mcp"))
    common = _args(tmp_path, "launchd", "--executable", exe, "--log-dir", str(tmp_path / "logs"))
    assert main(["install", *common], update_check=_repository_configured) == 0
    assert main(["uninstall", *_args(tmp_path, "launchd")]) == 0
    lines = fake_tools.read_text().splitlines()
    agents = tmp_path / "agents"
    assert lines == [
        *(
            line
            for name in sorted(PLISTS)
            for line in (
                f"launchctl bootout gui/{UID}/{name.removesuffix('.plist')}",
                f"launchctl bootstrap gui/{UID} {agents / name}",
            )
        ),
        *(f"launchctl bootout gui/{UID}/dev.herdr.mcp.{job}" for job in ("runtime", "link", "update")),
    ]


# -- the macOS service rollback through the gate ---------------------------------------------


@dataclass
class World:
    a: RunningRuntime
    b: RunningRuntime


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with short_tmp_dir() as tmp, two_runtimes(tmp) as (a, b):
        yield World(a, b)


def _store(tmp: Path, world: World) -> GenerationStore:
    """Generations A and B on the two runtimes, each registered with its own executable."""

    def spec(name: str, runtime: RunningRuntime) -> Generation:
        return Generation(
            generation=name,
            endpoint=runtime.base,
            executable=str(_exe(tmp / f"v-{name}" / "herdr-mcp")),
            expected_contract=contract_identity(),
            token_file=str(runtime.config_dir / "token"),
        )

    store = GenerationStore.in_dir(tmp / "generations")
    store.write_control(
        ControlFile(generations=(spec("A", world.a), spec("B", world.b)), observation=Observation(1, 10)),
        expected_revision=0,
    )
    return store


def _runtime_program(tmp: Path) -> list[str]:
    arguments: list[str] = plistlib.loads((tmp / "agents" / RUNTIME_PLIST).read_bytes())["ProgramArguments"]
    return arguments


def _install_generation(tmp: Path, generation: str, runner: Recorder) -> int:
    extra = ["--log-dir", str(tmp / "logs"), "--generation", generation]
    return main(
        ["install", *_args(tmp, "launchd", *extra)], runner=runner, update_check=_repository_configured
    )


def _serves(tmp: Path, name: str, runtime: RunningRuntime) -> list[str]:
    """The runtime job of generation `name`: its own executable on its own endpoint."""
    port = runtime.base.rsplit(":", 1)[1]
    return [str(tmp / f"v-{name}" / "herdr-mcp"), "serve", "--host", "127.0.0.1", "--port", port]


@pytest.mark.slow
def test_macos_install_records_a_rollback_that_rollback_revalidates_and_reactivates(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _store(tmp_path, world)
    assert _install_generation(tmp_path, "A", Recorder()) == 0
    assert store.read_status().active == "A"
    assert _runtime_program(tmp_path) == _serves(tmp_path, "A", world.a)
    assert read_rollback(tmp_path / "config") is None  # no plist before the first install
    v1_plists = {name: (tmp_path / "agents" / name).read_bytes() for name in PLISTS}

    assert _install_generation(tmp_path, "B", Recorder()) == 0
    assert "service rollback recorded" in capsys.readouterr().out
    record = read_rollback(tmp_path / "config")
    assert record is not None
    assert (record.previous_generation, record.installed_generation) == ("A", "B")
    assert dict(record.previous_plists) == v1_plists
    assert stat.S_IMODE((tmp_path / "config" / ROLLBACK_FILE).stat().st_mode) == 0o600
    assert _runtime_program(tmp_path) == _serves(tmp_path, "B", world.b)

    runner = Recorder()
    assert rollback_main(_args(tmp_path, "launchd"), runner=runner) == 0
    assert store.read_status().active == "A"
    assert {name: (tmp_path / "agents" / name).read_bytes() for name in PLISTS} == v1_plists
    assert ["launchctl", "bootstrap", f"gui/{UID}", str(tmp_path / "agents" / RUNTIME_PLIST)] in runner.calls
    assert read_rollback(tmp_path / "config") is None  # consumed

    capsys.readouterr()
    assert rollback_main(_args(tmp_path, "launchd"), runner=Recorder()) == EXIT_LOCAL
    assert "service_rollback_missing" in capsys.readouterr().err


def test_rollback_refuses_before_changing_anything(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _store(tmp_path, world)
    assert _install_generation(tmp_path, "A", Recorder()) == 0
    assert _install_generation(tmp_path, "B", Recorder()) == 0
    capsys.readouterr()

    # Linux: no service rollback at all.
    assert rollback_main(_args(tmp_path, "systemd"), runner=Recorder()) == 2
    assert "rollback_unsupported_platform" in capsys.readouterr().err

    # The previous generation no longer passes the gate: nothing changes.
    control = store.read_control()
    dead = Generation("A", "http://127.0.0.1:9", expected_contract=contract_identity())
    store.write_control(
        ControlFile(
            revision=control.revision,
            desired_active=control.desired_active,
            generations=(dead, control.find("B")),
            observation=control.observation,
        ),
        expected_revision=control.revision,
    )
    runner = Recorder()
    assert rollback_main(_args(tmp_path, "launchd"), runner=runner) == EXIT_REFUSED
    assert "rollback_refused" in capsys.readouterr().err
    assert runner.calls == []
    assert store.read_status().active == "B"
    assert _runtime_program(tmp_path) == _serves(tmp_path, "B", world.b)
    assert read_rollback(tmp_path / "config") is not None

    # The previous program is gone: refused at re-validation, before the gate.
    (tmp_path / "v-A" / "herdr-mcp").unlink()
    assert rollback_main(_args(tmp_path, "launchd"), runner=Recorder()) == EXIT_LOCAL
    assert "service_rollback_invalid" in capsys.readouterr().err

    # Fenced: refused first.
    set_fence(tmp_path / "config", "test fence")
    assert rollback_main(_args(tmp_path, "launchd"), runner=Recorder()) == EXIT_REFUSED
    assert "update_fenced" in capsys.readouterr().err


def test_an_install_whose_generation_is_refused_restores_and_records_nothing(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _store(tmp_path, world)
    assert activate(store, "A").ok
    assert _install_generation(tmp_path, "A", Recorder()) == 0
    control = store.read_control()
    bad = Generation(
        "B", "http://127.0.0.1:9", expected_contract=contract_identity(), executable=str(_exe(tmp_path / "b"))
    )
    store.write_control(
        ControlFile(
            revision=control.revision,
            desired_active=control.desired_active,
            generations=(control.find("A"), bad),
            observation=control.observation,
        ),
        expected_revision=control.revision,
    )
    set_fence(tmp_path / "config", "test fence")
    capsys.readouterr()
    assert _install_generation(tmp_path, "B", Recorder()) == EXIT_REFUSED
    assert "install_refused: candidate_rejected:health_unreachable" in capsys.readouterr().err
    assert _runtime_program(tmp_path) == _serves(tmp_path, "A", world.a)
    assert store.read_status().active == "A"
    assert read_fence(tmp_path / "config") is not None
    assert read_rollback(tmp_path / "config") is None
