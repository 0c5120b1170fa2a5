"""`herdr-mcp service install|uninstall|status` and `herdr-mcp rollback`.

install: render the jobs (`units`), write them atomically, (re)load them, optionally activate a
generation through the gate, then clear the update fence and, on macOS, record the service
rollback. If loading fails or the generation is refused, the previous definitions are written
back and reloaded, the fence stays as it was, and no rollback is recorded.

uninstall: set the update fence first (so an `update auto` starting meanwhile refuses), then
unload the jobs and remove their files. Only a later `service install` clears the fence.

Exit 0 on success, 2 with one line `herdr-mcp: error: <code>: <message>` otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from herdr_mcp.cli.arguments import CommandParser, dir_path, fail, fixed_port, io_failure
from herdr_mcp.generations import GenerationError, GenerationStore, TokenReader, activate
from herdr_mcp.generations.control import check_generation_id
from herdr_mcp.generations.process import is_managed
from herdr_mcp.runtime.config import DEFAULT_PORT, default_config_dir
from herdr_mcp.service.fence import FenceSet, clear_fence, read_fence, set_fence
from herdr_mcp.service.installed import clear_services_executable, record_services_executable
from herdr_mcp.service.rollback import discard_rollback, read_rollback, record_rollback, rollback_service
from herdr_mcp.service.units import (
    ALL_UNITS,
    ENABLED_UNITS,
    JOBS,
    LINK_UNIT,
    PLATFORMS,
    RUNTIME_UNIT,
    UPDATE_TIMER,
    UPDATE_UNIT,
    CommandResult,
    Platform,
    Runner,
    ServiceConfig,
    ServiceError,
    default_target_dir,
    detect_platform,
    launchd_bootout,
    launchd_bootstrap,
    launchd_label,
    launchd_print,
    read_existing,
    render,
    run_command,
    systemctl,
    write_files,
)

UNINSTALL_REASON = "services were uninstalled with `herdr-mcp service uninstall`"


@dataclass(frozen=True)
class ServiceHost:
    """Where and how the services of this workstation live (injectable for tests)."""

    platform: Platform
    target_dir: Path
    config_dir: Path
    uid: int
    runner: Runner = run_command
    store: GenerationStore | None = None
    token_reader: TokenReader | None = None
    sleep: Callable[[float], None] | None = None

    @property
    def names(self) -> list[str]:
        if self.platform == "launchd":
            return [f"{launchd_label(job)}.plist" for job in JOBS]
        return list(ALL_UNITS)

    def generations(self) -> GenerationStore:
        return self.store or GenerationStore.in_dir(self.config_dir / "generations")


@dataclass(frozen=True)
class InstallResult:
    written: list[Path]
    fence_cleared: bool
    rollback_recorded: bool
    activation: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "written": [str(path) for path in self.written],
            "fence_cleared": self.fence_cleared,
            "rollback_recorded": self.rollback_recorded,
            "activation": self.activation,
        }


def _must(result: CommandResult, argv: Sequence[str]) -> None:
    if result.returncode != 0:
        detail = result.stderr.strip() or result.stdout.strip()
        raise ServiceError(f"{argv[0]}_failed", f"`{' '.join(argv)}` exited {result.returncode}: {detail}")


def _run(host: ServiceHost, argv: list[str], *, check: bool = True) -> CommandResult:
    result = host.runner(argv)
    if check:
        _must(result, argv)
    return result


def load(host: ServiceHost, paths: Sequence[Path]) -> None:
    """(Re)load the written jobs: launchd bootout + bootstrap each; systemd reload, enable, restart."""
    if host.platform == "launchd":
        for path in paths:
            _run(host, launchd_bootout(host.uid, path.stem), check=False)  # not loaded yet is fine
            _run(host, launchd_bootstrap(host.uid, path))
        return
    _run(host, systemctl("daemon-reload"))
    _run(host, systemctl("enable", *ENABLED_UNITS))
    _run(host, systemctl("restart", RUNTIME_UNIT, LINK_UNIT))
    _run(host, systemctl("start", UPDATE_TIMER))


def unload(host: ServiceHost) -> None:
    """Stop and disable every job (a job that is not loaded is not an error)."""
    if host.platform == "launchd":
        for job in JOBS:
            _run(host, launchd_bootout(host.uid, launchd_label(job)), check=False)
        return
    _run(host, systemctl("disable", "--now", *ENABLED_UNITS), check=False)
    _run(host, systemctl("stop", UPDATE_UNIT), check=False)


def install_services(
    host: ServiceHost, config: ServiceConfig, *, generation: str | None = None
) -> InstallResult:
    """Install (or reinstall) the jobs; see the module docstring. Raises `ServiceError` and the
    `GenerationError`s of `activate`."""
    files = render(host.platform, config)
    before = read_existing(host.target_dir, list(files))
    store = host.generations()
    previous_generation = store.read_status().active
    if config.log_dir is not None:
        config.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    written = write_files(host.target_dir, files)
    activation: str | None = None
    try:
        load(host, written)
        if generation is not None:
            extra: dict[str, Any] = {} if host.sleep is None else {"sleep": host.sleep}
            result = activate(store, generation, token_reader=host.token_reader, **extra)
            activation = result.outcome
            if not result.ok:
                raise ServiceError("install_refused", f"{result.outcome}: {result.message}")
    except (ServiceError, GenerationError):
        _restore(host, files, before)
        raise
    cleared = clear_fence(host.config_dir)
    record_services_executable(host.config_dir, config.executable)
    recorded = False
    if host.platform == "launchd":
        installed = store.read_status().active
        recorded = record_rollback(host.config_dir, before, previous_generation, installed) is not None
    return InstallResult(written, cleared, recorded, activation)


def _restore(host: ServiceHost, files: dict[str, bytes], before: dict[str, bytes]) -> None:
    """Put the definitions that were there before a failed install back (best effort: the
    install's own error is what the user sees)."""
    for name in files:
        if name not in before:
            (host.target_dir / name).unlink(missing_ok=True)
    restored = write_files(host.target_dir, before)
    try:
        if restored:
            load(host, restored)
        else:
            unload(host)
    except ServiceError:
        return


def uninstall_services(host: ServiceHost) -> list[Path]:
    """Fence updates, unload the jobs, remove their files; returns the files removed."""
    set_fence(host.config_dir, UNINSTALL_REASON)
    unload(host)
    removed = []
    for name in host.names:
        path = host.target_dir / name
        if path.exists():
            path.unlink()
            removed.append(path)
    if host.platform == "systemd":
        _run(host, systemctl("daemon-reload"), check=False)
    discard_rollback(host.config_dir)
    clear_services_executable(host.config_dir)
    return removed


def service_status(host: ServiceHost) -> dict[str, Any]:
    """Each job's file and load state, the fence, and the recorded rollback (if any)."""
    jobs: dict[str, Any] = {}
    for name in host.names:
        if host.platform == "launchd":
            loaded = host.runner(launchd_print(host.uid, Path(name).stem)).returncode == 0
            state = "loaded" if loaded else "not loaded"
        else:
            answer = host.runner(systemctl("is-active", name)).stdout.strip()
            state = answer or "unknown"
        jobs[name] = {"installed": (host.target_dir / name).exists(), "state": state}
    fence = read_fence(host.config_dir)
    record = read_rollback(host.config_dir) if host.platform == "launchd" else None
    return {
        "platform": host.platform,
        "target_dir": str(host.target_dir),
        "jobs": jobs,
        "update_fence": None if fence is None else fence.to_dict(),
        "service_rollback": None
        if record is None
        else {
            "previous_generation": record.previous_generation,
            "installed_generation": record.installed_generation,
            "recorded_at": record.recorded_at,
        },
    }


# -- command line ----------------------------------------------------------------------------


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--platform", choices=PLATFORMS, default=None, help="default: this OS's")
    parser.add_argument("--config-dir", type=dir_path, default=None)
    parser.add_argument("--target-dir", type=dir_path, default=None, help="where the unit/plist files go")
    parser.add_argument("--state-dir", type=dir_path, default=None, help="generations state dir")
    parser.add_argument("--json", action="store_true")


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="herdr-mcp service", description="launchd / systemd --user services")
    commands = parser.add_subparsers(dest="command", required=True)
    install = commands.add_parser("install", help="install and load the services; clears the update fence")
    _common(install)
    install.add_argument("--executable", type=Path, default=None, help="herdr-mcp to run (default: on PATH)")
    install.add_argument(
        "--port", type=fixed_port, default=None, help=f"runtime port (default {DEFAULT_PORT})"
    )
    install.add_argument(
        "--log-dir", type=dir_path, default=None, help="launchd logs (~/Library/Logs/herdr-mcp)"
    )
    install.add_argument(
        "--generation",
        default=None,
        help="run this registered generation (its executable and endpoint), activate it through the gate",
    )
    uninstall = commands.add_parser("uninstall", help="set the update fence, unload and remove the services")
    _common(uninstall)
    status = commands.add_parser("status", help="show the services, the fence and the recorded rollback")
    _common(status)
    return parser


def _host(args: argparse.Namespace, runner: Runner) -> ServiceHost:
    platform: Platform | None = args.platform or detect_platform()
    if platform is None:
        raise ServiceError(
            "platform_unsupported",
            f"services exist for macOS (launchd) and Linux (systemd), not {sys.platform}",
        )
    config_dir = args.config_dir or default_config_dir()
    return ServiceHost(
        platform=platform,
        target_dir=args.target_dir or default_target_dir(platform),
        config_dir=config_dir,
        uid=os.getuid(),
        runner=runner,
        store=GenerationStore.in_dir(args.state_dir) if args.state_dir else None,
    )


def _executable(given: Path | None) -> Path:
    found = str(given) if given is not None else shutil.which("herdr-mcp")
    if found is None:
        beside = Path(sys.executable).with_name("herdr-mcp")
        found = str(beside) if beside.is_file() else None
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        what = "no herdr-mcp executable found" if given is None else f"{given} is not an executable file"
        raise ServiceError("executable_not_found", f"{what}; pass --executable PATH")
    return Path(found).absolute()


def _service_config(args: argparse.Namespace, host: ServiceHost, generation: str | None) -> ServiceConfig:
    """The jobs' program: `--executable`/`--port`, else those the generation was registered
    with (its `executable`, its endpoint's address and port), else herdr-mcp on PATH and 8772.

    When that generation (or, without `--generation`, the active one) is managed (installed by
    `update` or `dev sync` into the config dir), the runtime job is `generation up`, run by that
    generation's executable: it keeps the active and previous generations running, so a
    generation activated by a later update survives a restart of the service or the machine."""
    executable: Path | None = args.executable
    address, port = "127.0.0.1", args.port
    store = host.generations()
    managed = generation or store.read_status().active
    supervise = False
    if managed is not None:
        try:
            managed_spec = store.read_control().find(managed)
        except GenerationError:
            managed_spec = None
        if managed_spec is not None and is_managed(host.config_dir, managed_spec):
            supervise = True
            if executable is None and managed_spec.executable is not None:
                executable = Path(managed_spec.executable)
    if generation is not None:
        spec = store.read_control().find(generation)
        if executable is None and spec.executable is not None:
            executable = Path(spec.executable)
        endpoint = urlsplit(spec.endpoint)
        address = endpoint.hostname or address
        if port is None:
            port = endpoint.port
    log_dir = args.log_dir or (Path.home() / "Library" / "Logs" / "herdr-mcp")
    return ServiceConfig(
        executable=_executable(executable),
        config_dir=host.config_dir,
        port=DEFAULT_PORT if port is None else port,
        host=address,
        log_dir=log_dir if host.platform == "launchd" else None,
        supervise=supervise,
    )


def main(argv: list[str], *, runner: Runner = run_command) -> int:
    """`herdr-mcp service ...`; the one catch of expected errors for this command."""
    args = _parser().parse_args(argv)
    try:
        host = _host(args, runner)
        if args.command == "install":
            generation = None if args.generation is None else check_generation_id(args.generation)
            config = _service_config(args, host, generation)
            result = install_services(host, config, generation=generation)
            document: dict[str, Any] = result.to_dict()
            summary = f"installed {len(result.written)} {host.platform} jobs into {host.target_dir}"
            if result.fence_cleared:
                summary += "; update fence cleared"
            if result.rollback_recorded:
                summary += "; service rollback recorded"
        elif args.command == "uninstall":
            removed = uninstall_services(host)
            document = {"removed": [str(path) for path in removed], "update_fence": "set"}
            summary = (
                f"removed {len(removed)} {host.platform} jobs; updates are fenced until `service install`"
            )
        else:
            document = service_status(host)
            summary = _status_text(document)
    except (ServiceError, GenerationError, FenceSet) as exc:
        return fail("herdr-mcp", exc.code, exc.message)
    except OSError as exc:
        return io_failure("herdr-mcp", exc)
    print(json.dumps(document, indent=2, sort_keys=True) if args.json else summary)
    return 0


def _status_text(document: dict[str, Any]) -> str:
    lines = [f"{document['platform']} jobs in {document['target_dir']}"]
    for name, job in document["jobs"].items():
        installed = "installed" if job["installed"] else "missing"
        lines.append(f"  {name:<36} {installed:<10} {job['state']}")
    fence = document["update_fence"]
    lines.append(
        "update fence: " + ("not set" if fence is None else f"set {fence['set_at']} ({fence['reason']})")
    )
    record = document["service_rollback"]
    if record is not None:
        lines.append(f"service rollback: back to generation {record['previous_generation']}")
    return "\n".join(lines)


def rollback_main(argv: list[str], *, runner: Runner = run_command) -> int:
    """`herdr-mcp rollback`: re-validate and re-activate the recorded service rollback (macOS)."""
    parser = CommandParser(
        prog="herdr-mcp rollback", description="re-activate the service rollback recorded by the last install"
    )
    _common(parser)
    args = parser.parse_args(argv)
    try:
        host = _host(args, runner)
        if host.platform != "launchd":
            raise ServiceError(
                "rollback_unsupported_platform",
                "only macOS records a service rollback; on Linux use `herdr-mcp generation rollback`",
            )
        result = rollback_service(
            host.config_dir,
            host.generations(),
            host.target_dir,
            host.uid,
            host.runner,
            token_reader=host.token_reader,
            sleep=host.sleep,
        )
    except (ServiceError, GenerationError, FenceSet) as exc:
        return fail("herdr-mcp", exc.code, exc.message)
    except OSError as exc:
        return io_failure("herdr-mcp", exc)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        print(f"rolled back: {result.message}; previous service definitions reloaded")
    return 0
