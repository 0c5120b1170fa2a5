"""The service definitions: launchd agents (macOS) and systemd --user units (Linux), as files.

Three jobs, the same on both platforms:

- runtime: `herdr-mcp serve --host <loopback> --port <port>`, kept alive;
- link: `herdr-mcp link`, kept alive (the stable local MCP endpoint);
- update: `herdr-mcp update auto`, once a day (launchd `StartInterval` 86400 with `RunAtLoad`;
  systemd a oneshot service started by a daily, persistent timer); rendered only when
  `ServiceConfig.update_job` (a release repository is configured for the daily job: without one
  it could only exit 2 every day).

Every job gets `HERDR_MCP_CONFIG_DIR` so all three agree on one config dir. Rendering is pure and
deterministic (same `ServiceConfig`, same bytes); `write_files` writes atomically (temp file +
`os.replace`). The commands that load and unload the jobs are built here too and run by whoever
owns a `Runner` (see `cli/service.py`), so tests can record them.
"""

from __future__ import annotations

import os
import plistlib
import subprocess
import sys
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

from herdr_mcp.errors import LocalFault, RefusedFault
from herdr_mcp.layout import DEFAULT_PORT
from herdr_mcp.records import atomic_write

Platform = Literal["launchd", "systemd"]
PLATFORMS: tuple[Platform, ...] = ("launchd", "systemd")

#: The reverse-DNS prefix the native messaging host already uses (`dev.herdr.mcp`).
LABEL_PREFIX = "dev.herdr.mcp"
JOBS = ("runtime", "link", "update")
#: Once a day, as the original's LaunchAgent (StartInterval 86400).
UPDATE_INTERVAL_S = 86_400
#: launchd never restarts the update job sooner than this after a start (original: 300).
UPDATE_THROTTLE_S = 300
#: launchd/systemd wait this long before restarting a runtime or link that exited.
RESTART_DELAY_S = 5
#: `systemctl`/`launchctl` answer in well under a second; a hung one must not hang an install.
COMMAND_TIMEOUT_S = 60.0


class ServiceError(LocalFault):
    """A service command cannot be carried out on this workstation (a service manager command
    failed, no executable, an unsupported platform): a stable `code` and an actionable `message`."""


class ServiceRefused(RefusedFault, ServiceError):
    """The gate refused the generation a service install or rollback would run."""


class CommandResult(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


Runner = Callable[[Sequence[str]], CommandResult]


def run_command(argv: Sequence[str]) -> CommandResult:
    """The real runner: run `argv` (found on PATH), capture its output, never raise on exit code."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        return CommandResult(127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return CommandResult(124, "", f"{argv[0]}: no answer within {COMMAND_TIMEOUT_S} s")
    return CommandResult(done.returncode, done.stdout, done.stderr)


@dataclass(frozen=True)
class ServiceConfig:
    """What the jobs run and where they log."""

    executable: Path
    config_dir: Path
    port: int = DEFAULT_PORT
    host: str = "127.0.0.1"
    #: launchd only (systemd jobs log to the journal).
    log_dir: Path | None = None
    #: The runtime job keeps the managed generations running (`generation up`) instead of
    #: serving one runtime itself.
    supervise: bool = False
    #: Whether the daily `update auto` job is rendered (a release repository is configured).
    update_job: bool = True

    @property
    def jobs(self) -> tuple[str, ...]:
        """The jobs rendered: all of `JOBS`, without `update` when `update_job` is False."""
        return JOBS if self.update_job else tuple(job for job in JOBS if job != "update")

    def arguments(self, job: str) -> list[str]:
        exe = str(self.executable)
        if job == "runtime" and self.supervise:
            return [exe, "generation", "up"]
        if job == "runtime":
            return [exe, "serve", "--host", self.host, "--port", str(self.port)]
        if job == "link":
            return [exe, "link"]
        return [exe, "update", "auto"]

    @property
    def environment(self) -> dict[str, str]:
        return {"HERDR_MCP_CONFIG_DIR": str(self.config_dir)}


def detect_platform(system: str | None = None) -> Platform | None:
    """`launchd` on macOS, `systemd` on Linux, None elsewhere (`system` as `sys.platform`)."""
    name = sys.platform if system is None else system
    if name == "darwin":
        return "launchd"
    if name.startswith("linux"):
        return "systemd"
    return None


def default_target_dir(platform: Platform, env: Mapping[str, str] | None = None) -> Path:
    """`~/Library/LaunchAgents`, or `$XDG_CONFIG_HOME/systemd/user` (default ~/.config/...)."""
    env = os.environ if env is None else env
    if platform == "launchd":
        return Path.home() / "Library" / "LaunchAgents"
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


# -- launchd ---------------------------------------------------------------------------------


def launchd_label(job: str) -> str:
    return f"{LABEL_PREFIX}.{job}"


def launchd_plist(config: ServiceConfig, job: str) -> dict[str, Any]:
    """The property list of one LaunchAgent."""
    label = launchd_label(job)
    plist: dict[str, Any] = {
        "Label": label,
        "ProgramArguments": config.arguments(job),
        "EnvironmentVariables": config.environment,
        "RunAtLoad": True,
        "ProcessType": "Background" if job == "update" else "Interactive",
    }
    if job == "update":
        # A one-shot job: an explicit plist, RunAtLoad and no KeepAlive, never `launchctl submit`
        # (an inferred job can replay a destructive update after the command exited).
        plist.update(KeepAlive=False, StartInterval=UPDATE_INTERVAL_S, ThrottleInterval=UPDATE_THROTTLE_S)
    else:
        plist.update(KeepAlive=True, ThrottleInterval=RESTART_DELAY_S)
    if config.log_dir is not None:
        plist["StandardOutPath"] = str(config.log_dir / f"{job}.log")
        plist["StandardErrorPath"] = str(config.log_dir / f"{job}.err.log")
    return plist


def render_launchd(config: ServiceConfig) -> dict[str, bytes]:
    """`{<label>.plist: XML bytes}` for the three agents (keys sorted, so deterministic).
    Raises `ServiceError` for paths a plist cannot carry (`check_printable`); launchd runs
    `ProgramArguments` without a shell, so nothing else needs escaping."""
    check_printable(config)
    return {
        f"{launchd_label(job)}.plist": plistlib.dumps(
            launchd_plist(config, job), fmt=plistlib.FMT_XML, sort_keys=True
        )
        for job in config.jobs
    }


def launchd_domain(uid: int) -> str:
    return f"gui/{uid}"


def launchd_bootstrap(uid: int, plist_path: Path) -> list[str]:
    return ["launchctl", "bootstrap", launchd_domain(uid), str(plist_path)]


def launchd_bootout(uid: int, label: str) -> list[str]:
    return ["launchctl", "bootout", f"{launchd_domain(uid)}/{label}"]


def launchd_print(uid: int, label: str) -> list[str]:
    return ["launchctl", "print", f"{launchd_domain(uid)}/{label}"]


# -- systemd ---------------------------------------------------------------------------------

RUNTIME_UNIT = "herdr-mcp-runtime.service"
LINK_UNIT = "herdr-mcp-link.service"
UPDATE_UNIT = "herdr-mcp-update.service"
UPDATE_TIMER = "herdr-mcp-update.timer"
#: Units started and enabled by an install (the update service is started by its timer).
ENABLED_UNITS = (RUNTIME_UNIT, LINK_UNIT, UPDATE_TIMER)
ALL_UNITS = (RUNTIME_UNIT, LINK_UNIT, UPDATE_UNIT, UPDATE_TIMER)


#: systemd refuses a program path holding any of these ("Executable name contains special
#: characters", `string_is_safe`): a unit with one would never start.
_PROGRAM_PATH_REFUSED = frozenset("\"'\\")


def _quoted(text: str) -> str:
    """One double-quoted word of a unit file (systemd.syntax(7) "Quoting"): backslash and double
    quote escaped C-style; `check_printable` has kept control characters out."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_environment(name: str, value: str) -> str:
    """The value of one `Environment=` line: `%` doubled (specifiers are expanded there), `$`
    written as it is (systemd.exec(5): no variable expansion, `$` has no special meaning)."""
    return _quoted(f"{name}={value}".replace("%", "%%"))


def systemd_command(argv: Sequence[str]) -> str:
    """The value of `ExecStart=` for `argv` (systemd.service(5) "Command lines"): `%` doubled in
    every word; `$` doubled in the arguments, where `$NAME` would be expanded, but not in the
    program path, which systemd takes as written. Raises `ServiceError` for a program path that
    systemd refuses."""
    program, *arguments = argv
    refused = sorted(set(program) & _PROGRAM_PATH_REFUSED)
    if refused:
        raise ServiceError(
            "executable_path_unsupported",
            f"systemd refuses a program path containing {' '.join(refused)}: {program}; install "
            "herdr-mcp under a path without quotes or backslashes and pass it with --executable",
        )
    words = [program.replace("%", "%%")]
    words += [argument.replace("%", "%%").replace("$", "$$") for argument in arguments]
    return " ".join(_quoted(word) for word in words)


def check_printable(config: ServiceConfig) -> None:
    """Refuse a path no job definition can carry faithfully: control characters (a newline
    would end a unit line; XML 1.0 plists cannot hold them) or bytes that are not UTF-8 (unit
    files and plists are UTF-8 text). Raises `ServiceError`."""
    fields = {"--executable": config.executable, "--config-dir": config.config_dir}
    if config.log_dir is not None:
        fields["--log-dir"] = config.log_dir
    for option, path in fields.items():
        text = str(path)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            printable = False
        else:
            printable = not any(unicodedata.category(char) == "Cc" for char in text)
        if not printable:
            code = "executable_path_unsupported" if option == "--executable" else "service_path_unsupported"
            raise ServiceError(
                code,
                f"{text!r} holds control characters or bytes that are not UTF-8, which a service "
                f"definition cannot carry; pass another {option}",
            )
    if not config.executable.is_absolute():
        raise ServiceError(
            "executable_path_unsupported", f"{config.executable} is not an absolute path; pass one"
        )


def _unit(sections: list[tuple[str, list[tuple[str, str]]]]) -> bytes:
    lines: list[str] = []
    for name, entries in sections:
        if lines:
            lines.append("")
        lines.append(f"[{name}]")
        lines.extend(f"{key}={value}" for key, value in entries)
    return ("\n".join(lines) + "\n").encode("utf-8")


def _exec(config: ServiceConfig, job: str) -> list[tuple[str, str]]:
    environment = [
        ("Environment", systemd_environment(key, value)) for key, value in sorted(config.environment.items())
    ]
    return [*environment, ("ExecStart", systemd_command(config.arguments(job)))]


def render_systemd(config: ServiceConfig) -> dict[str, bytes]:
    """The four user units: runtime and link services, the update oneshot and its daily timer.
    Raises `ServiceError` for paths a unit cannot carry (`check_printable`, `systemd_command`)."""
    check_printable(config)
    runtime = _unit(
        [
            ("Unit", [("Description", "herdr-mcp runtime (local MCP server)")]),
            (
                "Service",
                [
                    ("Type", "simple"),
                    *_exec(config, "runtime"),
                    ("Restart", "on-failure"),
                    ("RestartSec", str(RESTART_DELAY_S)),
                ],
            ),
            ("Install", [("WantedBy", "default.target")]),
        ]
    )
    link = _unit(
        [
            (
                "Unit",
                [
                    ("Description", "herdr-mcp link (stable local MCP endpoint)"),
                    ("Wants", RUNTIME_UNIT),
                    ("After", RUNTIME_UNIT),
                ],
            ),
            (
                "Service",
                [
                    ("Type", "simple"),
                    *_exec(config, "link"),
                    ("Restart", "on-failure"),
                    ("RestartSec", str(RESTART_DELAY_S)),
                ],
            ),
            ("Install", [("WantedBy", "default.target")]),
        ]
    )
    update = _unit(
        [
            ("Unit", [("Description", "herdr-mcp update auto (PROD, stable channel)")]),
            ("Service", [("Type", "oneshot"), *_exec(config, "update")]),
        ]
    )
    timer = _unit(
        [
            ("Unit", [("Description", "herdr-mcp update auto, daily")]),
            (
                "Timer",
                [
                    ("OnCalendar", "daily"),
                    ("Persistent", "true"),
                    ("RandomizedDelaySec", "1h"),
                    ("Unit", UPDATE_UNIT),
                ],
            ),
            ("Install", [("WantedBy", "timers.target")]),
        ]
    )
    if not config.update_job:
        return {RUNTIME_UNIT: runtime, LINK_UNIT: link}
    return {RUNTIME_UNIT: runtime, LINK_UNIT: link, UPDATE_UNIT: update, UPDATE_TIMER: timer}


def systemctl(*arguments: str) -> list[str]:
    return ["systemctl", "--user", *arguments]


# -- files -----------------------------------------------------------------------------------


def render(platform: Platform, config: ServiceConfig) -> dict[str, bytes]:
    return render_launchd(config) if platform == "launchd" else render_systemd(config)


def write_files(target_dir: Path, files: Mapping[str, bytes]) -> list[Path]:
    """Write each file atomically (0600) into `target_dir`; returns the paths in name order."""
    written = []
    for name in sorted(files):
        path = target_dir / name
        atomic_write(path, files[name])
        written.append(path)
    return written


def read_existing(target_dir: Path, names: Sequence[str]) -> dict[str, bytes]:
    """The files among `names` that exist in `target_dir` (an install's "before")."""
    found: dict[str, bytes] = {}
    for name in names:
        try:
            found[name] = (target_dir / name).read_bytes()
        except FileNotFoundError:
            continue
    return found
