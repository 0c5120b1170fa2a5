"""`herdr-mcp update`: take the admitted release all the way to the active generation.

One run, under the update lock (`<config>/update/update.lock`; a second updater is refused with
`update_in_progress`), refused while the update fence is set:

1. clean up what a killed run left: the interrupted activation is undone
   (`rolled_back:activation_interrupted`), staging job dirs are removed, runtime dirs that no
   generation is registered for (a half-made install) are stopped and removed, and so are
   generations this updater made that were rejected or failed and are neither active nor the
   rollback target (a candidate whose activation was interrupted is kept: step 4 reuses it);
2. the local identity is the ACTIVE generation's (its executable's `version --json`), not the
   updater's own code: that is what the connector sees;
3. discover (or take the pinned `--manifest-url`) and admit, before anything is downloaded;
4. a generation already installed from the same signed bundle is reused (the resume of a run
   killed after its install); otherwise stage the host target's bundle, install it into
   `<config>/runtimes/<id>/venv` with no network and probe it against the TARGET contract;
   only then is the highest-seen version raised;
5. start its runtime on a free loopback port, with the `serve` arguments of the active
   generation (`generations/process.py`), register it and activate it through the gate;
6. on `activated`, stop and forget the generations of ours that are neither active nor the
   rollback target (the previous one keeps running, so `generation rollback` is instant); on a
   refusal, stop and forget the candidate; the previous generation was never touched.

A run killed at any point leaves the previous generation active and serving: nothing before the
gate's switch touches it, and the switch itself is undone by the next reader of the status file
(the link, or the next update) when the activator died while observing.

`HERDR_MCP_UPDATE_FAILPOINT=staged|installed|spawned` makes the run stop and wait at that point
(after printing `failpoint <name>` on stderr) so that tests can kill it there; it is never set in
use. `spawned` is right after the candidate's runtime process started, before its pid is
recorded: the next run finds it by its tag (`generations/process.py`) and stops it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from packaging.version import Version

from herdr_mcp.generations.control import Generation, GenerationError, GenerationStore
from herdr_mcp.generations.fence import check_fence
from herdr_mcp.generations.gate import ActivationResult, activate
from herdr_mcp.generations.process import (
    is_managed,
    read_serve_args,
    runtime_pid,
    start_runtime,
    stop_runtime,
)
from herdr_mcp.generations.registry import register, remove
from herdr_mcp.layout import DEV_PLANE_FILE
from herdr_mcp.release.manifest import RuntimeManifest
from herdr_mcp.release.verification import trust_root_warning
from herdr_mcp.update.admission import AdmissionPolicy, AlreadyCurrent, LocalIdentity, TrustedRelease
from herdr_mcp.update.check import CheckResult, check_for_update, fetch_and_admit, pinned_release_files
from herdr_mcp.update.discovery import DiscoveryConfig, NoCandidate
from herdr_mcp.update.diskspace import SpaceNeed, check_free_space, estimate_from_bundle_size
from herdr_mcp.update.errors import (
    LocalStateError,
    ReleaseDataError,
    UpdateError,
    UpdateRefused,
    UpdateUsageError,
)
from herdr_mcp.update.highest_seen import record_admitted
from herdr_mcp.update.housekeeping import clean_up, forget, make_room, retire
from herdr_mcp.update.install import install_generation
from herdr_mcp.update.paths import UpdatePaths
from herdr_mcp.update.probe import ask_version, probe
from herdr_mcp.update.staging import DownloadConfig, StagedRelease, stage

#: Seconds a candidate's `version --json` may take (a cold venv imports everything once).
PROBE_TIMEOUT_S = 60.0
FAILPOINT_ENV = "HERDR_MCP_UPDATE_FAILPOINT"
#: Present while a DEV generation (built from a checkout by `herdr-mcp dev sync`) is in charge.
DEV_PLANE_MARKER = DEV_PLANE_FILE
#: Provenance keys of a generation this updater installed from a release.
SOURCE_RELEASE = "release"


@dataclass(frozen=True)
class ReleaseSource:
    """Where the release comes from: discovery, or one pinned manifest URL."""

    discovery: DiscoveryConfig
    manifest_url: str | None = None


@dataclass
class UpdateReport:
    """What one run did; `to_dict` is the `--json` answer."""

    status: str  # no_release | current | activated | refused
    summary: str
    version: str | None = None
    generation: str | None = None
    outcome: str | None = None
    reused: bool = False
    cleaned: list[str] = field(default_factory=list)
    activation: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status != "refused"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "summary": self.summary, "cleaned": self.cleaned}
        for name in ("version", "generation", "outcome", "activation"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.reused:
            out["reused"] = True
        return out


def host_target() -> str:
    """This machine's bundle target name, as `release/config.toml` names them."""
    system = {"linux": "linux", "darwin": "macos"}.get(sys.platform)
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "x64": "x86_64"}.get(machine, machine)
    if system == "linux" and machine == "arm64":
        machine = "aarch64"
    if system == "macos" and machine == "aarch64":
        machine = "arm64"
    if system is None:
        raise UpdateUsageError("platform_unsupported", f"no runtime bundles are published for {sys.platform}")
    return f"{system}-{machine}-cp{sys.version_info.major}{sys.version_info.minor}"


@contextlib.contextmanager
def update_lock(paths: UpdatePaths) -> Iterator[None]:
    """Hold the update lock or raise `update_in_progress` at once."""
    paths.lock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LocalStateError(
                "update_in_progress", "another herdr-mcp update (or dev sync) is running; let it finish"
            ) from None
        yield
    finally:
        os.close(fd)


def local_identity(store: GenerationStore, fallback: LocalIdentity) -> LocalIdentity:
    """The active generation's identity (its executable's `version --json`); `fallback` (the
    updater's own code) when no generation is active yet."""
    status, control = store.read_status(), store.read_control()
    if status.active is None:
        return fallback
    spec = control.find(status.active)
    if spec.executable is None:
        if spec.expected_runtime_version is None or spec.expected_contract is None:
            raise LocalStateError(
                "local_identity_unknown",
                f"the active generation {spec.generation} records neither its executable nor its "
                "expected version and contract; register it with them",
            )
        return LocalIdentity(
            Version(spec.expected_runtime_version), spec.expected_contract, fallback.state_schema
        )
    try:
        found = ask_version(Path(spec.executable), timeout=PROBE_TIMEOUT_S)
    except UpdateError as exc:
        raise LocalStateError(
            "local_identity_unknown", f"cannot ask the active generation {spec.generation}: {exc.message}"
        ) from None
    return LocalIdentity(Version(found.version), found.contract, found.state_schema)


def check_may_update(config_dir: Path) -> None:
    """Whether this workstation takes updates at all, said before anything else is looked at:
    raises `FenceSet` while the update fence is set, `UpdateRefused("plane_not_prod")` on a
    DEV plane."""
    check_fence(config_dir)
    if (config_dir / DEV_PLANE_MARKER).exists():
        raise UpdateRefused(
            "plane_not_prod",
            "this workstation runs a DEV generation; `herdr-mcp dev rollback` returns to the pinned "
            "PROD generation, then update",
        )


def check_update(
    paths: UpdatePaths,
    source: ReleaseSource,
    policy: AdmissionPolicy,
    fallback: LocalIdentity,
    *,
    say: Callable[[str], None] = lambda _: None,
) -> CheckResult:
    """`herdr-mcp update --check`: steps 2 and 3 only (the ACTIVE generation's identity, else
    `fallback`; discover or take the pinned manifest; admit), downloading no asset, and whether
    the admitted release has a bundle for this machine (`no_asset_for_target` otherwise, as
    `update` would refuse). A trust root past its age limit is warned about through `say`.
    Raises the discovery, transport, manifest and signature errors and `AdmissionRefused`."""
    _warn_trust_root(policy, say)
    local = local_identity(paths.generations, fallback)
    if source.manifest_url is None:
        result = check_for_update(source.discovery, local, policy, paths.highest_seen)
    else:
        rules = source.discovery.rules(prefix="manifest")
        files = pinned_release_files(source.manifest_url, rules)
        result = CheckResult(None, fetch_and_admit(files, rules, local, policy, paths.highest_seen))
    if isinstance(result.outcome, TrustedRelease):
        result.outcome.asset_for(host_target())  # "no bundle for this machine" before any download
    return result


def _warn_trust_root(policy: AdmissionPolicy, say: Callable[[str], None]) -> None:
    """Say, as `release verify` reports it, when the Sigstore trust root is past its age limit."""
    warning = trust_root_warning(policy.sigstore)
    if warning is not None:
        say(f"herdr-mcp: warning: {warning}")


def run_update(
    paths: UpdatePaths,
    source: ReleaseSource,
    policy: AdmissionPolicy,
    download: DownloadConfig,
    *,
    fallback: LocalIdentity,
    serve_args: Sequence[str] | None = None,
    progress: TextIO | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> UpdateReport:
    """One interactive update (module docstring). Raises the updater's errors (`UpdateError`,
    `GenerationError`, `FenceSet`, and the manifest and signature errors) for anything that stops
    it before the gate; the gate's refusals are a report with status `refused`."""
    check_may_update(paths.config_dir)
    store = paths.generations
    _warn_trust_root(policy, say)
    with update_lock(paths):
        from herdr_mcp.update.major import recover

        recover(paths.config_dir, say)  # a major migration a kill interrupted, first
        cleaned = clean_up(paths)
        for line in cleaned:
            say(f"cleaned up: {line}")
        local = local_identity(store, fallback)
        admission = _admit(paths, source, local, policy)
        release = admission.outcome
        if release is None:
            return UpdateReport("no_release", admission.no_release or "no release", cleaned=cleaned)
        if isinstance(release, AlreadyCurrent):
            version = release.manifest.version
            return UpdateReport(
                "current", f"herdr-mcp {version} is active and current", version, cleaned=cleaned
            )
        if release.state_step:
            # A state-schema step is the major-migration path's (update/major.py), never this one's.
            from herdr_mcp.update.major import refuse_state_step

            return UpdateReport(
                "refused",
                refuse_state_step(paths.config_dir, release),
                release.manifest.version,
                outcome="major_update_required",
                cleaned=cleaned,
            )
        say(f"admitted herdr-mcp {release.version} ({release.kind}) over {local.version}")
        target = host_target()
        asset = release.asset_for(target)
        reused = _installed_generation(store, paths, asset.sha256, release.manifest)
        if reused is not None:
            generation_id, executable = reused
            say(f"reusing generation {generation_id}, installed from the same bundle")
        else:
            generation_id = _new_generation_id(release.manifest.version)
            check_room(paths, asset.name, asset.size)  # before anything is written
            staged = stage(
                release,
                target,
                paths.jobs,
                download,
                url=admission.bundle_url(asset.name),
                progress=progress,
            )
            _failpoint("staged")
            say(f"installing {asset.name} as generation {generation_id}")
            executable = install_probed(staged, paths, generation_id, release, after_install=_failpoint)
        record_admitted(paths.highest_seen, release)
        provenance = release_provenance(release, asset.name, asset.sha256)
        version = release.manifest.version
        spec = Generation(
            generation=generation_id,
            endpoint="http://127.0.0.1:1",  # replaced by the endpoint the runtime announces
            expected_runtime_version=version,
            expected_contract=release.manifest.contract,
            executable=str(executable),
            provenance=provenance,
        )
        try:
            result = start_and_activate(paths, spec, serve_args, say=say)
        except BaseException:
            if reused is None:  # a fresh install that never got to the gate: leave nothing behind
                stop_runtime(paths.runtimes / generation_id)
                forget(paths, generation_id)
                shutil.rmtree(paths.runtimes / generation_id, ignore_errors=True)
            raise
        if result.ok:
            summary = f"herdr-mcp {version} is active as generation {generation_id} ({result.outcome})"
        else:
            summary = (
                f"herdr-mcp {version} was not activated ({result.outcome}): {result.message}; "
                f"generation {result.active} stays active"
            )
        return UpdateReport(
            "activated" if result.ok else "refused",
            summary,
            version,
            generation_id,
            result.outcome,
            reused is not None,
            cleaned,
            result.to_dict(),
        )


def release_provenance(release: TrustedRelease, bundle: str, sha256: str) -> dict[str, str]:
    """The provenance recorded for a generation installed from `release`'s bundle."""
    return {
        "plane": "prod",
        "source": SOURCE_RELEASE,
        "tag": release.manifest.tag,
        "commit": release.manifest.source.commit,
        "bundle": bundle,
        "bundle_sha256": sha256,
        # "verified" (keyless signature and build provenance) or "unsafe_skipped" by choice.
        "sigstore": release.verified.sigstore,
    }


def start_and_activate(
    paths: UpdatePaths,
    spec: Generation,
    serve_args: Sequence[str] | None,
    *,
    keep: Sequence[str] = (),
    say: Callable[[str], None] = lambda _: None,
) -> ActivationResult:
    """Start `spec`'s runtime (its endpoint is what the process announces), register it, activate
    it through the gate, then retire our generations that are neither active nor the rollback
    target, nor in `keep`); a refused candidate is stopped and forgotten instead. `serve_args`
    None: the generation's own recorded ones, else the active generation's. Shared with `dev`."""
    store = paths.generations
    runtime_dir = paths.runtimes / spec.generation
    if serve_args is not None:
        args = tuple(serve_args)
    else:
        own = read_serve_args(runtime_dir)
        args = own if own is not None else _active_serve_args(paths)
    registered = {item.generation for item in store.read_control().generations}
    if spec.generation in registered:
        spec = store.read_control().find(spec.generation)
    if spec.executable is None:
        raise UpdateUsageError("generation_executable_missing", f"{spec.generation} has no executable")
    if runtime_pid(runtime_dir) is None:
        say(f"starting generation {spec.generation}")
        started = start_runtime(
            Path(spec.executable),
            runtime_dir,
            paths.config_dir,
            args,
            on_spawn=lambda _pid: _failpoint("spawned"),
        )
        if spec.generation in registered:
            forget(paths, spec.generation)
            registered.discard(spec.generation)
        spec = replace(spec, endpoint=started.endpoint)
    if spec.generation not in registered:
        make_room(paths)
        register(store, spec)
    say(f"activating generation {spec.generation} at {spec.endpoint}")
    result = activate(store, spec.generation)
    if result.ok:
        retire(paths, keep)
    else:
        stop_runtime(runtime_dir)
        with contextlib.suppress(GenerationError):
            remove(store, spec.generation)
        shutil.rmtree(runtime_dir, ignore_errors=True)
    return result


def install_probed(
    staged: StagedRelease,
    paths: UpdatePaths,
    generation_id: str,
    release: TrustedRelease,
    *,
    after_install: Callable[[str], None] = lambda _: None,
) -> Path:
    """Install the staged bundle as `generation_id` and probe it against the release's contract,
    version and state schema; its herdr-mcp. On any failure the generation's directory goes;
    the staging job goes either way."""
    try:
        installed = install_generation(staged, paths.runtimes, generation_id, config_dir=paths.config_dir)
        after_install("installed")
        probe(
            installed.herdr_mcp,
            release.manifest.contract,
            release.manifest.version,
            timeout=PROBE_TIMEOUT_S,
            state_schema=release.manifest.state_schema,
        )
    except BaseException:
        shutil.rmtree(paths.runtimes / generation_id, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(staged.job_dir, ignore_errors=True)
    return installed.herdr_mcp


def check_room(paths: UpdatePaths, bundle: str, size: int, extra: Sequence[SpaceNeed] = ()) -> None:
    """`disk_space_low` unless the staging job and the new venv (and `extra`: a major
    migration's database copies) fit beside the live runtime's margin (`update/diskspace.py`),
    estimated from the signed bundle size."""
    staging, venv = estimate_from_bundle_size(size)
    needs = [
        SpaceNeed(paths.jobs, staging, f"{bundle} and its unpacked copy"),
        SpaceNeed(paths.runtimes, venv, "the new generation's venv (estimated from the bundle size)"),
        *extra,
    ]
    check_free_space(needs, paths.config_dir)


def _active_serve_args(paths: UpdatePaths) -> tuple[str, ...]:
    active = paths.generations.read_status().active
    if active is None:
        return ()
    return read_serve_args(paths.runtimes / active) or ()


@dataclass(frozen=True)
class _Admission:
    """What admission answered, and where the release's assets are downloaded from: the
    discovered download URLs, or the directory of a pinned manifest."""

    outcome: TrustedRelease | AlreadyCurrent | None
    no_release: str | None = None
    discovered: Mapping[str, str] | None = None
    pinned_dir: str | None = None

    def bundle_url(self, name: str) -> str:
        if self.pinned_dir is not None:
            return self.pinned_dir + name
        if self.discovered is None or name not in self.discovered:
            raise ReleaseDataError(
                "asset_missing", f"the release lists {name} in its manifest but has no such asset"
            )
        return self.discovered[name]


def _admit(
    paths: UpdatePaths, source: ReleaseSource, local: LocalIdentity, policy: AdmissionPolicy
) -> _Admission:
    if source.manifest_url is None:
        result = check_for_update(source.discovery, local, policy, paths.highest_seen)
        if isinstance(result.candidate, NoCandidate):
            return _Admission(None, no_release=f"no release ({result.candidate.reason})")
        if result.candidate is None or result.outcome is None:
            raise ReleaseDataError(
                "update_check_incomplete", "discovery found a release but admission gave no answer"
            )
        return _Admission(
            result.outcome, discovered={asset.name: asset.url for asset in result.candidate.assets}
        )
    rules = source.discovery.rules(prefix="manifest")
    files = pinned_release_files(source.manifest_url, rules)
    outcome = fetch_and_admit(files, rules, local, policy, paths.highest_seen)
    return _Admission(outcome, pinned_dir=files.manifest_url.rsplit("/", 1)[0] + "/")


def _new_generation_id(version: str) -> str:
    safe = "".join(char if char.isalnum() or char in "._-" else "_" for char in version)
    return f"r{safe}-{time.time_ns() // 1_000_000}"[:64]


def _installed_generation(
    store: GenerationStore, paths: UpdatePaths, sha256: str, manifest: RuntimeManifest
) -> tuple[str, Path] | None:
    """A registered generation of ours installed from the bundle `sha256` that still probes as
    `manifest`'s version and state schema (its venv intact), with its executable."""
    for spec in store.read_control().generations:
        provenance = spec.provenance or {}
        if provenance.get("bundle_sha256") != sha256 or spec.executable is None:
            continue
        executable = Path(spec.executable)
        if not is_managed(paths.config_dir, spec) or not executable.is_file():
            continue
        if spec.expected_contract is None:
            continue
        try:
            probe(
                executable,
                spec.expected_contract,
                manifest.version,
                timeout=PROBE_TIMEOUT_S,
                state_schema=manifest.state_schema,
            )
        except (ReleaseDataError, LocalStateError):
            continue
        return spec.generation, executable
    return None


def _failpoint(name: str) -> None:
    if os.environ.get(FAILPOINT_ENV) == name:
        print(f"failpoint {name}", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
