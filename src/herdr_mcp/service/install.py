"""The service install transaction, its inverse, and what is installed.

`install_services`: render the jobs (`units`), write them atomically, (re)load them, optionally
activate a generation through the gate, then clear the update fence, record the executable the
jobs run (`installed`) and, on macOS, record the service rollback. If loading fails or the
generation is refused, the previous definitions are written back and reloaded, the fence stays as
it was, and nothing is recorded.

`uninstall_services`: set the update fence first (so an `update auto` starting meanwhile
refuses), then unload the jobs and remove their files. Only a later `install_services` clears the
fence.

`rollback_services` re-activates the service rollback the last install recorded (macOS only).

`service_config` decides what the jobs run (executable, address, port, `serve` or `generation
up`, whether the daily update job exists) and refuses an executable that runs from a checkout's
venv (`service_from_checkout`: `./scripts/serve` reinstalls it in place; `herdr-mcp start
--service` installs the checkout as a DEV generation in its own venv first); `install_warnings`
says what the installed jobs will not do (no update job without a release repository, no active
generation behind the link, an executable no release signed); `service_host` where they live on
this machine. `herdr-mcp service` (`cli/service.py`)
only parses its arguments into these and prints what they return.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from herdr_mcp.errors import RefusedFault, UsageFault
from herdr_mcp.generations import ActivationResult, GenerationError, GenerationStore, TokenReader, activate
from herdr_mcp.generations.fence import clear_fence, read_fence, set_fence
from herdr_mcp.generations.installed import clear_services_executable, record_services_executable
from herdr_mcp.generations.process import is_managed
from herdr_mcp.layout import Layout
from herdr_mcp.service.origin import install_origin
from herdr_mcp.service.rollback import discard_rollback, read_rollback, record_rollback, rollback_service
from herdr_mcp.service.units import (
    ALL_UNITS,
    ENABLED_UNITS,
    JOBS,
    LINK_UNIT,
    RUNTIME_UNIT,
    UPDATE_TIMER,
    UPDATE_UNIT,
    CommandResult,
    Platform,
    Runner,
    ServiceConfig,
    ServiceError,
    ServiceRefused,
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
        return self.store or GenerationStore.in_dir(Layout(self.config_dir).generations_dir)


class ServiceFromCheckout(RefusedFault):
    """`service install` would run an executable from a checkout's venv."""


@dataclass(frozen=True)
class InstallResult:
    written: list[Path]
    fence_cleared: bool
    rollback_recorded: bool
    activation: str | None
    #: Files of a daily update job an earlier install wrote, removed because none is scheduled now.
    removed: tuple[Path, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "written": [str(path) for path in self.written],
            "removed": [str(path) for path in self.removed],
            "fence_cleared": self.fence_cleared,
            "rollback_recorded": self.rollback_recorded,
            "activation": self.activation,
        }


def service_host(
    config_dir: Path,
    *,
    platform: Platform | None = None,
    target_dir: Path | None = None,
    state_dir: Path | None = None,
    runner: Runner = run_command,
) -> ServiceHost:
    """This machine's services: `platform` (default: this OS's), `target_dir` (default: where
    that platform keeps user jobs), the generations in `state_dir` (default: the config dir's).
    Raises `ServiceError("platform_unsupported")` on an OS with neither launchd nor systemd."""
    chosen = platform or detect_platform()
    if chosen is None:
        raise ServiceError(
            "platform_unsupported",
            f"services exist for macOS (launchd) and Linux (systemd), not {sys.platform}",
        )
    return ServiceHost(
        platform=chosen,
        target_dir=target_dir or default_target_dir(chosen),
        config_dir=config_dir,
        uid=os.getuid(),
        runner=runner,
        store=GenerationStore.in_dir(state_dir) if state_dir else None,
    )


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
    names = {path.name for path in paths}
    _run(host, systemctl("daemon-reload"))
    _run(host, systemctl("enable", *(unit for unit in ENABLED_UNITS if unit in names)))
    _run(host, systemctl("restart", RUNTIME_UNIT, LINK_UNIT))
    if UPDATE_TIMER in names:
        _run(host, systemctl("start", UPDATE_TIMER))


def unload(host: ServiceHost) -> None:
    """Stop and disable every job (a job that is not loaded is not an error)."""
    if host.platform == "launchd":
        for job in JOBS:
            _run(host, launchd_bootout(host.uid, launchd_label(job)), check=False)
        return
    _run(host, systemctl("disable", "--now", *ENABLED_UNITS), check=False)
    _run(host, systemctl("stop", UPDATE_UNIT), check=False)


def find_executable(given: Path | None) -> Path:
    """The herdr-mcp the jobs run: `given`, else the one on PATH, else the one next to this
    Python. Raises `ServiceError("executable_not_found")` when that is not an executable file."""
    found = str(given) if given is not None else shutil.which("herdr-mcp")
    if found is None:
        beside = Path(sys.executable).with_name("herdr-mcp")
        found = str(beside) if beside.is_file() else None
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        what = "no herdr-mcp executable found" if given is None else f"{given} is not an executable file"
        raise ServiceError("executable_not_found", f"{what}; pass --executable PATH")
    return Path(found).absolute()


def service_config(
    host: ServiceHost,
    *,
    executable: Path | None = None,
    port: int | None = None,
    log_dir: Path | None = None,
    generation: str | None = None,
    update_job: bool = True,
) -> ServiceConfig:
    """The jobs' program: `executable`/`port`, else those the generation was registered with (its
    `executable`, its endpoint's address and port), else herdr-mcp on PATH and
    `ServiceConfig`'s default port. `update_job`: whether the daily update job is rendered (the
    caller knows whether a release repository is configured for it). Refuses
    `service_from_checkout` for an executable installed from a checkout (`service/origin.py`).

    When that generation (or, without `generation`, the active one) is managed (installed by
    `update` or `dev sync` into the config dir), the runtime job is `generation up`, run by that
    generation's executable: it keeps the active and previous generations running, so a
    generation activated by a later update survives a restart of the service or the machine.
    `log_dir` (launchd only) defaults to ~/Library/Logs/herdr-mcp. Raises `ServiceError` and the
    store's `GenerationError`s."""
    address = "127.0.0.1"
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
    logs = log_dir or (Path.home() / "Library" / "Logs" / "herdr-mcp")
    config = ServiceConfig(
        executable=find_executable(executable),
        config_dir=host.config_dir,
        host=address,
        log_dir=logs if host.platform == "launchd" else None,
        supervise=supervise,
        update_job=update_job,
    )
    origin = install_origin(host.config_dir, config.executable)
    if origin.kind == "checkout":
        raise ServiceFromCheckout(
            "service_from_checkout",
            f"{config.executable} runs the checkout {origin.checkout} from its venv, which `./scripts/serve` "
            "reinstalls in place: the services would run whatever the tree holds at their next start. Run "
            "`herdr-mcp start --service` from the checkout instead: it installs the checkout as a DEV "
            f"generation in its own venv under {Layout(host.config_dir).runtimes_dir} and the services on it",
        )
    return config if port is None else replace(config, port=port)


def install_warnings(host: ServiceHost, config: ServiceConfig, no_update_job: str | None) -> list[str]:
    """What the jobs of `config` will not do, one sentence each: no daily update job
    (`no_update_job` says why), no active generation behind the link, an executable that is not a
    release install."""
    warnings = []
    if not config.update_job:
        warnings.append(f"no daily `update auto` job is scheduled: {no_update_job or 'not asked for'}")
    if host.generations().read_status().active is None:
        warnings.append(
            "no generation is active, so the link will answer every call `not_delivered` "
            "(no_active_generation): run `herdr-mcp start --service` instead"
        )
    origin = install_origin(host.config_dir, config.executable)
    if origin.kind == "other":
        warnings.append(
            f"{config.executable} is {origin.detail}; `herdr-mcp update` installs the signed release as a "
            "PROD generation, and `service install` then runs that"
        )
    return warnings


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
    stale = _stale_update_job(host, config)
    activation: str | None = None
    try:
        load(host, written)
        if generation is not None:
            extra: dict[str, Any] = {} if host.sleep is None else {"sleep": host.sleep}
            result = activate(store, generation, token_reader=host.token_reader, **extra)
            activation = result.outcome
            if not result.ok:
                raise ServiceRefused("install_refused", f"{result.outcome}: {result.message}")
    except (ServiceError, GenerationError):
        _restore(host, files, before)
        raise
    cleared = clear_fence(host.config_dir)
    record_services_executable(host.config_dir, config.executable)
    recorded = False
    if host.platform == "launchd":
        installed = store.read_status().active
        recorded = record_rollback(host.config_dir, before, previous_generation, installed) is not None
    return InstallResult(written, cleared, recorded, activation, _remove_update_job(host, stale))


def _stale_update_job(host: ServiceHost, config: ServiceConfig) -> list[Path]:
    """The update job's files an earlier install left, when this one schedules none."""
    if config.update_job:
        return []
    if host.platform == "launchd":
        names = [f"{launchd_label('update')}.plist"]
    else:
        names = [UPDATE_UNIT, UPDATE_TIMER]
    return [host.target_dir / name for name in names if (host.target_dir / name).exists()]


def _remove_update_job(host: ServiceHost, stale: list[Path]) -> tuple[Path, ...]:
    """Unload and remove an earlier install's update job (`_stale_update_job`)."""
    if not stale:
        return ()
    if host.platform == "launchd":
        _run(host, launchd_bootout(host.uid, launchd_label("update")), check=False)
    else:
        _run(host, systemctl("disable", "--now", UPDATE_TIMER), check=False)
    for path in stale:
        path.unlink(missing_ok=True)
    if host.platform == "systemd":
        _run(host, systemctl("daemon-reload"), check=False)
    return tuple(stale)


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


def rollback_services(host: ServiceHost) -> ActivationResult:
    """Re-validate and re-activate the service rollback the last install recorded, and reload the
    definitions from before it (`service/rollback.py`). Only macOS records one: elsewhere raises
    `UsageFault("rollback_unsupported_platform")`; otherwise the errors of `rollback_service`."""
    if host.platform != "launchd":
        raise UsageFault(
            "rollback_unsupported_platform",
            "only macOS records a service rollback; on Linux use `herdr-mcp generation rollback`",
        )
    return rollback_service(
        host.config_dir,
        host.generations(),
        host.target_dir,
        host.uid,
        host.runner,
        token_reader=host.token_reader,
        sleep=host.sleep,
    )
