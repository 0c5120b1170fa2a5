"""`herdr-mcp start` and `herdr-mcp stop`: one command from an installed herdr-mcp to "the link
answers tools/call", and its inverse (docs/updater.md, "Starting a workstation").

`start`, in this order, each step skipped when it is already so:

1. the runtimes of the active and previous managed generations are started if they died (what
   `generation up` does after a reboot), with the runtime options given (`--herdr-socket`,
   `--sim`/`--no-sim`, `--sim-root`, `--read-only`, `--write-root`, `--allow-herdr-class`) when
   they are new for a generation that is not running;
2. when no generation is active, this installation becomes one, by where it comes from
   (`service/origin.py`): run from a release generation's venv, that PROD generation is started
   and activated through the gate; run from a checkout (or given `--source`), the checkout is
   built and installed into its own venv under `<config>/runtimes/<id>/` and activated as a DEV
   generation on a DEV plane with no PROD pin (`dev/plane.py`, `start_checkout`); anything else
   is refused (`start_not_installable`: `herdr-mcp update` installs the signed release);
3. the active generation must answer `/health`;
4. the link: detached (its own session; `<config>/link.pid`, `<config>/link.log`; `herdr-mcp
   stop` ends it), or with `--service` the user services (`service install`: they keep the
   runtimes and the link running across log-outs and reboots), or with `--foreground` in this
   terminal (Ctrl-C ends it). A link already answering on the port is left alone.

Runtime options that differ from those the running active generation was started with are
refused (`start_options_differ`), never applied by restarting it behind the user's back.

`stop` ends the detached link and the runtimes of the managed generations (not the services':
`service uninstall` does that).

`update_job_blocker` is the rule `service install` is given for the daily update job: the
updater's own options resolved as the job resolves them (no flags, no environment), and the
job's skip rules but the fence (which the install clears).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2

from herdr_mcp.cli import _runtime_options
from herdr_mcp.cli.arguments import CommandParser, dir_path, existing_dir, port, run_guarded, with_json
from herdr_mcp.cli.service import build_parser as build_service_parser
from herdr_mcp.errors import HerdrMcpError, LocalFault, RefusedFault, UsageFault
from herdr_mcp.generations.control import Generation, GenerationStateError
from herdr_mcp.generations.installed import services_executable
from herdr_mcp.generations.process import (
    check_serve_args,
    is_managed,
    read_serve_args,
    record_serve_args,
    runtime_pid,
    runtimes_dir,
    stop_runtime,
)
from herdr_mcp.generations.supervisor import ensure_running
from herdr_mcp.layout import CONFIG_DIR_ENV, DEFAULT_LINK_PORT, Layout, default_config_dir
from herdr_mcp.link.edge_device import read_device
from herdr_mcp.local_http import answer_object, local_client
from herdr_mcp.progress import printable_steps
from herdr_mcp.service.detached import DetachedLink, running_link, start_link, stop_link
from herdr_mcp.service.origin import InstallOrigin, install_origin
from herdr_mcp.terminal import printable
from herdr_mcp.update.paths import UpdatePaths

# The DEV plane and the updater (dev/plane.py, update/) are imported where they are used: they
# import the release verification and with it sigstore, ~1.5 s of a start on a 2-core machine
# under load that `stop` and a `start` with nothing to build or to describe never need.

#: /health of a runtime or a link on loopback answers at once; a loaded machine may take seconds.
HEALTH_TIMEOUT_S = 10.0
Say = Callable[[str], None]


class StartRefused(RefusedFault):
    """`start` cannot make this installation a generation (not a release, not a checkout)."""


class StartUsage(UsageFault):
    """`start` was asked for something that would change a running generation."""


class StartFailed(LocalFault):
    """Something `start` needs does not answer (the active generation's runtime)."""


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="herdr-mcp start",
        description="bring this workstation up: an active generation, its runtime and the link",
    )
    parser.add_argument(
        "--source",
        type=existing_dir,
        default=None,
        help="the checkout to build when no generation is active (default: the one this herdr-mcp "
        "was installed from)",
    )
    parser.add_argument(
        "--link-port",
        type=port,
        default=DEFAULT_LINK_PORT,
        help=f"the link's port (default {DEFAULT_LINK_PORT})",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--service",
        action="store_true",
        help="install the user services to keep it all running (systemd/launchd)",
    )
    mode.add_argument(
        "--foreground", action="store_true", help="run the link in this terminal (Ctrl-C ends it)"
    )
    # --config-dir and the options `serve` takes, passed on to the generation's runtime.
    _runtime_options(parser)
    return with_json(parser)


def build_stop_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="herdr-mcp stop",
        description="stop the link `herdr-mcp start` started and the generations' runtimes",
    )
    parser.add_argument(
        "--config-dir", type=dir_path, default=None, help="the config dir (default: user config)"
    )
    return with_json(parser)


def serve_args_of(args: argparse.Namespace) -> tuple[str, ...] | None:
    """The `serve` arguments the runtime options ask for (paths made absolute: the runtime runs
    elsewhere); None when none was given."""
    out: list[str] = []
    if args.herdr_socket is not None:
        out += ["--herdr-socket", str(args.herdr_socket.absolute())]
    if args.sim != "auto":
        out.append("--sim" if args.sim == "on" else "--no-sim")
    for root in args.sim_root or ():
        out += ["--sim-root", str(root.absolute())]
    if args.read_only:
        out.append("--read-only")
    for root in args.write_root or ():
        out += ["--write-root", str(root.absolute())]
    for name in args.allow_herdr_class or ():
        out += ["--allow-herdr-class", name]
    if args.log_level != "warning":
        out += ["--log-level", args.log_level]
    return check_serve_args(out) if out else None


def this_executable() -> Path:
    """The herdr-mcp of the installation running now (the venv of this Python)."""
    return Path(sys.prefix) / "bin" / "herdr-mcp"


def main(argv: list[str]) -> int:
    """`herdr-mcp start ...` inside the CLI's one catch; the exit status."""
    return run_guarded(lambda: run(argv), argv)


def run(argv: list[str]) -> int:
    """`herdr-mcp start` (module docstring); raises what the CLI's one catch reports."""
    args = build_parser().parse_args(argv)
    config_dir = (args.config_dir or default_config_dir()).absolute()
    paths = UpdatePaths(config_dir)
    serve_args = serve_args_of(args)
    done: list[str] = []
    with printable_steps(sys.stderr) as say:

        def did(line: str) -> None:
            done.append(line)
            say(line)

        notes: list[str] = []
        plane = _ensure_generation(paths, args.source, serve_args, did, notes)
        spec = _active_spec(paths)
        version = _health(spec)
        link = _ensure_link(paths, spec, args, did)
    document: dict[str, Any] = {
        "changed": bool(done),
        "done": done,
        "plane": plane,
        "generation": spec.generation,
        "endpoint": spec.endpoint,
        "version": version,
        "link": link,
        "notes": notes,
    }
    if args.json:
        print(json.dumps(document, indent=2, sort_keys=True))
    else:
        for line in _summary(document, config_dir):
            print(printable(line))
    if args.foreground:
        _exec_link(_link_executable(paths, spec), config_dir, args.link_port)
    return 0


def _ensure_generation(
    paths: UpdatePaths, source: Path | None, serve_args: tuple[str, ...] | None, did: Say, notes: list[str]
) -> str:
    """Steps 1 and 2 of the module docstring; the plane of the active generation, as a phrase.
    What the user may have expected and `start` did not do goes into `notes`."""
    store = paths.generations
    active = store.read_status().active
    if active is not None:
        spec = store.read_control().find(active)
        if is_managed(paths.config_dir, spec):
            _check_options(paths, spec, serve_args)
    ensure_running(store, paths.config_dir, did)  # says what it restarts
    origin = install_origin(paths.config_dir, this_executable())
    if store.read_status().active is not None:
        spec = _active_spec(paths)
        notes.extend(_not_built(spec, source or origin.checkout))
        return _plane_of(paths, spec)
    if origin.kind == "generation" and origin.generation is not None and source is None:
        _activate_own(paths, origin, serve_args, did)
    elif origin.kind == "checkout" or source is not None:
        checkout = source or origin.checkout
        assert checkout is not None
        from herdr_mcp.dev.plane import start_checkout

        result, _ = start_checkout(paths, checkout, serve_args=serve_args, say=did)
        if not result.ok:
            raise StartRefused(result.outcome, f"the checkout's build was not activated: {result.message}")
        did(f"activated generation {result.active} built from {checkout} (DEV plane, no PROD pinned)")
    else:
        raise StartRefused(
            "start_not_installable",
            f"no generation is active and this herdr-mcp is {origin.detail}: run `herdr-mcp update` to "
            "install the signed release as a PROD generation (then `herdr-mcp start`), or run "
            "`herdr-mcp start` from a checkout (`./scripts/serve` once, then `.venv/bin/herdr-mcp start`)",
        )
    return _plane_of(paths, _active_spec(paths))


def _not_built(spec: Generation, checkout: Path | None) -> list[str]:
    """A note when the checkout `start` would build is not what the active generation runs."""
    if checkout is None:
        return []
    from herdr_mcp.dev.marker import DevPlaneError
    from herdr_mcp.dev.plane import source_provenance

    provenance = spec.provenance or {}
    try:
        head = source_provenance(checkout)
    except DevPlaneError:
        return []
    if provenance.get("path") == head["path"] and provenance.get("commit") == head["commit"]:
        return []
    return [
        f"generation {spec.generation} is active, so {head['path']} at {head['describe']} was not built: "
        "`herdr-mcp dev sync` runs it (start only starts what is there)"
    ]


def _check_options(paths: UpdatePaths, spec: Generation, serve_args: tuple[str, ...] | None) -> None:
    """Options for a managed generation: recorded for its next start when it is not running,
    refused when it runs with others."""
    if serve_args is None:
        return
    runtime_dir = runtimes_dir(paths.config_dir) / spec.generation
    recorded = read_serve_args(runtime_dir) or ()
    if recorded == serve_args:
        return
    if runtime_pid(runtime_dir) is None:
        record_serve_args(runtime_dir, serve_args)
        return
    raise StartUsage(
        "start_options_differ",
        f"generation {spec.generation} runs with `serve {' '.join(recorded) or '(no options)'}`; to run it "
        f"with `{' '.join(serve_args)}`, `herdr-mcp stop` first, then `herdr-mcp start` with them",
    )


def _activate_own(
    paths: UpdatePaths, origin: InstallOrigin, serve_args: tuple[str, ...] | None, did: Say
) -> None:
    """This installation is a registered generation that is not active: start and activate it."""
    from herdr_mcp.update.apply import start_and_activate, update_lock

    assert origin.generation is not None
    with update_lock(paths):
        spec = paths.generations.read_control().find(origin.generation)
        result = start_and_activate(paths, spec, serve_args, say=did)
    if not result.ok:
        raise StartRefused(
            result.outcome, f"generation {origin.generation} was not activated: {result.message}"
        )
    did(f"activated generation {origin.generation} ({origin.detail})")


def _active_spec(paths: UpdatePaths) -> Generation:
    store = paths.generations
    active = store.read_status().active
    if active is None:
        raise StartFailed(
            "no_active_generation", "no generation is active after start; see `generation status`"
        )
    return store.read_control().find(active)


def _plane_of(paths: UpdatePaths, spec: Generation) -> str:
    provenance = spec.provenance or {}
    if provenance.get("plane") == "dev":
        from herdr_mcp.dev.marker import read_plane

        plane = read_plane(paths.config_dir)
        pinned = plane is not None and plane.pinned_prod is not None
        where = provenance.get("describe") or provenance.get("commit", "?")
        suffix = "over a pinned PROD generation" if pinned else "checkout only, no PROD pinned"
        return f"DEV: built from the checkout {provenance.get('path', '?')} at {where} ({suffix})"
    if provenance.get("plane") == "prod" or provenance.get("source") == "release":
        return f"PROD: a signed release ({provenance.get('tag', spec.expected_runtime_version or '?')})"
    return "a generation registered by hand (herdr-mcp neither starts nor stops its runtime)"


def _health(spec: Generation) -> str:
    """The active generation's version from its /health; `StartFailed` when it does not answer."""
    try:
        with local_client(timeout=HEALTH_TIMEOUT_S) as client:
            answer = client.get(f"{spec.endpoint}/health")
        health = answer_object(answer) if answer.status_code == 200 else None
        version = health.get("version") if health is not None else None
    except (httpx2.HTTPError, ValueError) as exc:  # nothing answers, or not JSON
        raise StartFailed(
            "runtime_unreachable",
            f"the active generation {spec.generation} does not answer at {spec.endpoint} ({exc}); "
            "start its runtime, or activate another generation",
        ) from None
    if not isinstance(version, str):
        raise StartFailed(
            "runtime_unreachable",
            f"the active generation {spec.generation} at {spec.endpoint} answered /health with "
            f"{answer.status_code}",
        )
    return version


def _link_executable(paths: UpdatePaths, spec: Generation) -> Path:
    """The link runs from the active generation's own venv when it has one, else from this
    installation."""
    if is_managed(paths.config_dir, spec) and spec.executable is not None:
        return Path(spec.executable)
    return this_executable()


def _foreign_link(port: int) -> str | None:
    """The URL of a link already answering on `port` (the services', another start's)."""
    if port == 0:
        return None
    base = f"http://127.0.0.1:{port}"
    try:
        with local_client(timeout=HEALTH_TIMEOUT_S) as client:
            answer = client.get(f"{base}/health")
        health = answer_object(answer) if answer.status_code == 200 else None
        product = health.get("product") if health is not None else None
    except (httpx2.HTTPError, ValueError):  # nothing listens, or not a link
        return None
    return f"{base}/mcp" if product == "herdr-mcp-link" else None


def _ensure_link(paths: UpdatePaths, spec: Generation, args: argparse.Namespace, did: Say) -> dict[str, Any]:
    config_dir = paths.config_dir
    token_file = str(Layout(config_dir).link_token_file)
    if args.service:
        if stop_link(config_dir):
            did("stopped the detached link (the services run the link now)")
        _install_services(config_dir, did)
        return {
            "mode": "service",
            "url": f"http://127.0.0.1:{DEFAULT_LINK_PORT}/mcp",
            "token_file": token_file,
        }
    ours = running_link(config_dir)
    if ours is not None:
        return {
            "mode": "detached",
            "pid": ours.pid,
            "url": ours.url,
            "token_file": token_file,
            "log": str(ours.log),
        }
    foreign = _foreign_link(args.link_port)
    if foreign is not None:
        return {"mode": "elsewhere", "url": foreign, "token_file": token_file}
    if args.foreground:
        return {
            "mode": "foreground",
            "url": f"http://127.0.0.1:{args.link_port}/mcp",
            "token_file": token_file,
        }
    started: DetachedLink = start_link(_link_executable(paths, spec), config_dir, args.link_port)
    did(f"started the link at {started.url} (pid {started.pid})")
    return {
        "mode": "detached",
        "pid": started.pid,
        "url": started.url,
        "token_file": token_file,
        "log": str(started.log),
    }


def _install_services(config_dir: Path, did: Say) -> None:
    """`service install` for this config dir, with the daily job's rule; its warnings said."""
    from herdr_mcp.service.install import install_services, install_warnings, service_config, service_host
    from herdr_mcp.service.units import read_existing, render

    host = service_host(config_dir)
    blocker = update_job_blocker(config_dir)
    config = service_config(host, update_job=blocker is None)
    for warning in install_warnings(host, config, blocker):
        print(printable(f"herdr-mcp: warning: {warning}"), file=sys.stderr)
    files = render(host.platform, config)
    stale = [name for name in host.names if name not in files and (host.target_dir / name).exists()]
    current = read_existing(host.target_dir, list(files)) == files and not stale
    if current and services_executable(config_dir) == config.executable:
        return  # installed as they would be written: a reinstall would only restart them
    result = install_services(host, config)
    jobs = ", ".join(path.name for path in result.written)
    did(f"installed the user services into {host.target_dir}: {jobs}")


def _summary(document: dict[str, Any], config_dir: Path) -> list[str]:
    link = document["link"]
    lines = [
        "started" if document["changed"] else "already up: nothing changed",
        f"  generation {document['generation']} (herdr-mcp {document['version']}) at {document['endpoint']}",
        f"  {document['plane']}",
        f"  link {link['url']} (bearer in {link['token_file']})",
    ]
    mode = link["mode"]
    if mode == "detached":
        lines.append(
            f"  the link runs detached (pid {link['pid']}, log {link['log']}): `herdr-mcp stop` ends it;"
        )
        lines.append("  `herdr-mcp start --service` keeps it running across log-outs and reboots")
    elif mode == "elsewhere":
        lines.append("  a link was already answering there (the services'?): left alone")
    elif mode == "service":
        lines.append("  the user services keep the runtime and the link running (`herdr-mcp service status`)")
    else:
        lines.append("  the link runs in this terminal now: Ctrl-C ends it")
    lines.extend(f"  note: {note}" for note in document["notes"])
    lines.append(f"  config dir {config_dir}")
    lines.append(_edge_line(config_dir))
    return lines


def _edge_line(config_dir: Path) -> str:
    """Where the link stands with the Edge: paired (and where), or the next step for ChatGPT."""
    try:
        device = read_device(Layout(config_dir).edge_device_file)
    except HerdrMcpError as exc:
        return f"  the Edge record is unusable ({exc.code}): `herdr-mcp link unpair`, then pair again"
    if device is None:
        return (
            "  for ChatGPT: `herdr-mcp edge deploy`, then `herdr-mcp link pair --edge <origin>` "
            '(README, "Use it from ChatGPT")'
        )
    return f"  paired with {device.edge_url} as {device.device_id} (`herdr-mcp link status`: the connection)"


def _exec_link(executable: Path, config_dir: Path, link_port: int) -> None:
    sys.stdout.flush()
    env = {**os.environ, CONFIG_DIR_ENV: str(config_dir)}
    env.pop("PYTHONPATH", None)
    os.execve(executable, [str(executable), "link", "--port", str(link_port)], env)  # noqa: S606 (no shell)


def stop_main(argv: list[str]) -> int:
    """`herdr-mcp stop ...` inside the CLI's one catch; the exit status."""
    return run_guarded(lambda: stop_run(argv), argv)


def stop_run(argv: list[str]) -> int:
    """`herdr-mcp stop`: the detached link, then the managed generations' runtimes."""
    args = build_stop_parser().parse_args(argv)
    config_dir = (args.config_dir or default_config_dir()).absolute()
    stopped: list[str] = []
    if stop_link(config_dir):
        stopped.append("link")
    runtimes = runtimes_dir(config_dir)
    if runtimes.is_dir():
        for runtime_dir in sorted(runtimes.iterdir()):
            if stop_runtime(runtime_dir):
                stopped.append(runtime_dir.name)
    note = None
    try:
        installed = services_executable(config_dir) is not None
    except GenerationStateError:
        installed = True  # a record that is there but unreadable: services were installed
    if installed:
        note = (
            "the user services are installed and start them again: `herdr-mcp service uninstall` stops them"
        )
    if args.json:
        print(json.dumps({"stopped": stopped, "note": note}, sort_keys=True))
    else:
        print(printable("stopped " + (", ".join(stopped) if stopped else "nothing (nothing was running)")))
        if note:
            print(printable(note))
    return 0


def update_job_blocker(config_dir: Path) -> str | None:
    """Why the daily `update auto` job could not run from `config_dir` (module docstring); None
    when it can."""
    from herdr_mcp.update.auto import skip_reason
    from herdr_mcp.update.options import UpdateFlags, resolve_options

    try:
        resolve_options(UpdateFlags(), config_dir, {})
    except HerdrMcpError as exc:
        return f"no release repository is configured for it ({exc.message})"
    skipped = skip_reason(config_dir)
    if skipped is not None and skipped.reason != "update_fenced":
        return skipped.message
    return None


def service_run(argv: list[str]) -> int:
    """`herdr-mcp service ...` with the updater's rule for the daily job (`update_job_blocker`)."""
    from herdr_mcp.cli.service import run as run_service

    return run_service(argv, update_check=update_job_blocker)


__all__ = ["build_parser", "build_service_parser", "build_stop_parser", "run", "service_run", "stop_run"]
