"""The updater against odd evidence, full disks and kills (issue 22, items 5-7), on the release
repository simulator with releases signed by the local Sigstore stack.

- Oversized evidence is one refusal, `evidence_too_large`, naming the file and its cap, on every
  path: downloaded by `update --check`, read from disk by `release verify`, passed as bytes to
  each parser.
- `update --check` says "no bundle for this machine" (`no_asset_for_target`) for a release
  without one, as `update` does.
- `update` and `update --check` warn when the Sigstore trust root is past the age limit
  `release verify` applies.
- With the config dir on a small tmpfs, an update whose estimate does not fit beside the live
  runtime's margin is refused (`disk_space_low`) before it writes, while a live runtime on that
  disk keeps answering every call; with room, the same update goes on to download.
- A runtime whose updater was killed before it recorded the pid is found by its tag and stopped
  by the next update's clean-up.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.errors import EXIT_LOCAL, EXIT_REFUSED
from herdr_mcp.generations.process import PID_FILE, START_MARKER, generation_processes
from herdr_mcp.release.attestation import (
    MAX_BUNDLE_BYTES,
    AttestationError,
    load_identity_policy,
    verify_artifact_signature,
)
from herdr_mcp.release.host_pip import pip_for
from herdr_mcp.release.manifest import MANIFEST_FILENAME, ManifestError, RuntimeManifest
from herdr_mcp.release.minisign import MAX_SIGNATURE_FILE_BYTES, SignatureError, keygen, verify
from herdr_mcp.release.verification import PROVENANCE_BUNDLE_NAME, SIGNATURE_NAME, SIGSTORE_BUNDLE_NAME
from herdr_mcp.update.diskspace import estimate_from_bundle_size, free_bytes, runtime_margin
from herdr_mcp.update.errors import LocalStateError
from herdr_mcp.update.paths import UpdatePaths
from tests.support.processes import alive, read_until
from tests.support.published_release import EVIDENCE_CAPS, REPOSITORY, REPOSITORY_ID, Trust, publish
from tests.support.repository_sim import ReleaseRepositorySimulator
from tests.support.runtime_harness import make_repo, running_runtime
from tests.support.sigstore_stack import SigstoreStack
from tests.support.tmpfs import mounted_tmpfs, resize
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024


@pytest.fixture
def sim(sigstore_stack: SigstoreStack) -> Any:
    with ReleaseRepositorySimulator(REPOSITORY) as simulator:
        simulator.stack = sigstore_stack  # type: ignore[attr-defined]
        yield simulator


def _update(
    sim: ReleaseRepositorySimulator, trust: Trust, config: Path, *mode: str, sigstore: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    flags = ["--keys", str(trust.keys), *(trust.sigstore if sigstore is None else sigstore)]
    command = [
        sys.executable, "-m", "herdr_mcp", "update", *mode, "--json", *sim.update_flags(REPOSITORY_ID),
        *flags, "--config-dir", str(config),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


def _fetched(sim: ReleaseRepositorySimulator) -> list[str]:
    return sorted(Path(entry.path).name for entry in sim.downloads())


@pytest.mark.parametrize(
    "name", [MANIFEST_FILENAME, SIGNATURE_NAME, SIGSTORE_BUNDLE_NAME, PROVENANCE_BUNDLE_NAME]
)
def test_update_check_refuses_oversized_evidence_with_one_code_naming_the_file(
    sim: ReleaseRepositorySimulator, tmp_path: Path, name: str
) -> None:
    trust = publish(sim, tmp_path, oversized=name)
    done = _update(sim, trust, tmp_path / "config", "--check")
    assert done.returncode == EXIT_REFUSED, (done.stdout, done.stderr)
    cap = EVIDENCE_CAPS[name]
    assert done.stderr.startswith(
        f"herdr-mcp: error: evidence_too_large: {name} is over its cap of {cap} bytes"
    )
    assert json.loads(done.stdout)["error"]["code"] == "evidence_too_large"
    assert not any(path.endswith(".tar.gz") for path in _fetched(sim))


def test_every_other_path_refuses_oversized_evidence_with_the_same_code(
    sigstore_stack: SigstoreStack, tmp_path: Path
) -> None:
    big_bundle = b" " * (MAX_BUNDLE_BYTES + 1)
    # The parsers, given bytes.
    with pytest.raises(AttestationError) as bundle_refused:
        verify_artifact_signature(b"{}", big_bundle, load_identity_policy())
    with pytest.raises(SignatureError) as signature_refused:
        verify(
            b"{}", b" " * (MAX_SIGNATURE_FILE_BYTES + 1), (keygen(tmp_path / "k.pub", tmp_path / "k.key"),)
        )
    with pytest.raises(ManifestError) as manifest_refused:
        RuntimeManifest.from_bytes(b" " * (EVIDENCE_CAPS[MANIFEST_FILENAME] + 1))
    for caught in (bundle_refused, signature_refused, manifest_refused):
        assert caught.value.code == "evidence_too_large", caught.value
    assert f"over its cap of {MAX_BUNDLE_BYTES} bytes" in bundle_refused.value.message
    # `release verify` reading the files from disk.
    (tmp_path / MANIFEST_FILENAME).write_bytes(b"{}")
    (tmp_path / SIGNATURE_NAME).write_bytes(b"untrusted comment: x\n")
    big = tmp_path / "big.sigstore.json"
    big.write_bytes(big_bundle)
    for flag in ("--sigstore-bundle", "--attestation"):
        done = subprocess.run(
            [sys.executable, "-m", "herdr_mcp", "release", "verify", "--manifest",
             str(tmp_path / MANIFEST_FILENAME), flag, str(big)],
            capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )  # fmt: skip
        assert done.returncode == EXIT_REFUSED, done.stderr
        assert done.stderr.startswith(f"herdr-mcp: error: evidence_too_large: {big} is over its cap of"), (
            done.stderr
        )


def test_update_check_says_when_the_release_has_no_bundle_for_this_machine(
    sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    trust = publish(sim, tmp_path, target="linux-riscv64-cp311")
    done = _update(sim, trust, tmp_path / "config", "--check")
    assert done.returncode == EXIT_REFUSED, (done.stdout, done.stderr)
    assert done.stderr.startswith("herdr-mcp: error: no_asset_for_target: "), done.stderr
    assert "has no bundle for this machine (target linux-x86_64-cp311; it offers: linux-riscv64-cp311)" in (
        done.stderr
    )
    assert not any(path.endswith(".tar.gz") for path in _fetched(sim))


def _stale_copy(stack: SigstoreStack, tmp_path: Path) -> Path:
    """The stack's trust root with every key's validity moved two years back: it still verifies
    what the stack signs, and its newest key is past the one-year age limit."""
    document = json.loads(stack.trusted_root.read_text())

    def back(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "validFor":
                    start = datetime.fromisoformat(value["start"].replace("Z", "+00:00"))
                    value["start"] = (start - timedelta(days=730)).strftime("%Y-%m-%dT%H:%M:%SZ")
                else:
                    back(value)
        elif isinstance(node, list):
            for item in node:
                back(item)

    back(document)
    stale = tmp_path / "stale_root.json"
    stale.write_text(json.dumps(document))
    return stale


def test_update_and_check_warn_when_the_trust_root_is_past_the_age_limit(
    sim: ReleaseRepositorySimulator, sigstore_stack: SigstoreStack, tmp_path: Path
) -> None:
    trust = publish(sim, tmp_path)
    fresh = _update(sim, trust, tmp_path / "config", "--check")
    assert fresh.returncode == 0, fresh.stderr
    assert "trust root" not in fresh.stderr

    flags = [*trust.sigstore[:2], "--trusted-root", str(_stale_copy(sigstore_stack, tmp_path))]
    checked = _update(sim, trust, tmp_path / "config", "--check", sigstore=flags)
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["status"] == "admitted"
    warning = "herdr-mcp: warning: the Sigstore trust root "
    assert checked.stderr.startswith(warning), checked.stderr
    assert "days ago); releases signed under keys Sigstore added since will be refused" in checked.stderr

    updated = _update(sim, trust, tmp_path / "config", sigstore=flags)
    assert updated.stderr.startswith(warning), updated.stderr  # said before anything else
    # (The published bundle is a stand-in, so this update stops at its unpacking.)
    assert "error: bundle_malformed" in updated.stderr, updated.stderr


def _calls_in_a_loop(runtime: Any, stop: threading.Event, results: list[str]) -> None:
    async def loop() -> None:
        async with runtime.client() as client:
            while not stop.is_set():
                answer = await client.call_tool("herdr_methods", {})
                results.append("error" if answer.is_error else "ok")

    asyncio.run(loop())


@pytest.mark.timeout(300)
def test_an_update_that_does_not_fit_beside_the_live_runtime_is_refused_before_it_writes(
    sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    from herdr_mcp.sim import SimConfig, SimulatorThread

    bundle_size = 8 * MiB
    staging, venv = estimate_from_bundle_size(bundle_size)
    (tmp_path / "release").mkdir()
    trust = publish(sim, tmp_path / "release", bundle_size=bundle_size)
    repo = make_repo(tmp_path / "repo", {"README.md": b"# demo\n"})
    with (
        mounted_tmpfs(tmp_path / "disk", 150 * MiB) as disk,
        SimulatorThread(SimConfig.for_roots([repo]), tmp_path / "herdr.sock"),
        running_runtime(tmp_path / "herdr.sock", disk / "config") as runtime,
    ):
        config = disk / "config"
        stop, results = threading.Event(), list[str]()
        caller = threading.Thread(target=_calls_in_a_loop, args=(runtime, stop, results))
        caller.start()
        try:
            wait_until(lambda: len(results) >= 5, "the live runtime to answer calls", timeout=60)
            margin, free = runtime_margin(config), free_bytes(config)
            assert margin < free < margin + staging + venv  # above the margin, below the estimate
            before = sorted(path.name for path in config.iterdir())

            refused = _update(sim, trust, config)
            calls_during = len(results)

            assert refused.returncode == EXIT_LOCAL, (refused.stdout, refused.stderr)
            assert (
                f"herdr-mcp: error: disk_space_low: the disk holding {config}/update/jobs " in refused.stderr
            )
            assert (
                f"(mounted at {disk})" in refused.stderr
                and " bytes free, the update needs " in refused.stderr
            )
            assert "kept for the live runtime's state.db and audit log" in refused.stderr
            # Nothing was downloaded or written but the update lock.
            assert not any(path.endswith(".tar.gz") for path in _fetched(sim))
            after = sorted(path.name for path in config.iterdir())
            # The update's lock and the generations store it reads (empty: no generation yet).
            assert set(after) - set(before) <= {"update", "generations"}, (before, after)
            assert [path.name for path in (config / "update").iterdir()] == ["update.lock"]
            written = [path for name in ("update", "generations") for path in (config / name).rglob("*")]
            assert sum(path.stat().st_size for path in written if path.is_file()) < 4096, written
            assert not (config / "runtimes").exists()

            # With room, the same update passes the check and downloads the bundle.
            resize(disk, 400 * MiB)
            sim.clear_log()
            roomy = _update(sim, trust, config)
            assert "disk_space_low" not in roomy.stderr, roomy.stderr
            assert any(path.endswith(".tar.gz") for path in _fetched(sim))
        finally:
            stop.set()
            caller.join(timeout=60)
        assert calls_during > 5 and results and set(results) == {"ok"}, results[-5:]


def test_a_runtime_whose_pid_was_never_recorded_is_stopped_by_the_next_update(
    sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    """The updater's start step is killed right after the candidate's runtime started (the
    `spawned` failpoint, before the pid is recorded); the next `update` finds the runtime by its
    tag and stops it before removing the half-made generation."""
    from herdr_mcp.sim import SimConfig, SimulatorThread

    config = tmp_path / "config"
    config.mkdir(mode=0o700)
    paths = UpdatePaths(config)
    runtime_dir = paths.runtimes / "r-orphan"
    (tmp_path / "release").mkdir()
    trust = publish(sim, tmp_path / "release")
    repo = make_repo(tmp_path / "repo", {"README.md": b"# demo\n"})
    executable = str(Path(sys.executable).parent / "herdr-mcp")
    starter = (
        "import sys; from pathlib import Path; from herdr_mcp.generations import Generation;"
        "from herdr_mcp.update.apply import UpdatePaths, start_and_activate;"
        f"spec = Generation('r-orphan', 'http://127.0.0.1:1', executable={executable!r});"
        f"paths = UpdatePaths(Path({str(config)!r}));"
        "start_and_activate(paths, spec, ['--no-sim', '--herdr-socket', sys.argv[1]])"
    )
    with SimulatorThread(SimConfig.for_roots([repo]), tmp_path / "herdr.sock"):
        process = subprocess.Popen(
            [sys.executable, "-c", starter, str(tmp_path / "herdr.sock")],
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "HERDR_MCP_UPDATE_FAILPOINT": "spawned"},
        )
        assert process.stderr is not None
        seen = read_until(process.stderr, "failpoint spawned")
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        process.stderr.close()
        assert (runtime_dir / START_MARKER).exists() and not (runtime_dir / PID_FILE).exists(), seen
        wait_until(lambda: generation_processes(runtime_dir) != [], "the orphaned runtime to run", timeout=60)
        orphans = generation_processes(runtime_dir)

        done = _update(sim, trust, config)

        cleaned = "removed half-made generation r-orphan (its start was interrupted) (its runtime stopped)"
        assert f"cleaned up: {cleaned}" in done.stderr, done.stderr
        assert generation_processes(runtime_dir) == []
        assert orphans and not any(alive(pid) for pid in orphans), orphans
        assert not runtime_dir.exists()


def test_the_pip_steps_running_out_of_space_are_disk_full_not_a_bare_exit_status(tmp_path: Path) -> None:
    """The install's venv and pip steps, as `install.py` runs them, on a 4 MiB tmpfs: the pip run
    installing pip from Python's own pip wheel (pip alone unpacks to about 15 MB), by this
    environment's pip and by pip from that wheel, and, where that wheel is not found, ensurepip
    (about 23 MB) each hit a real ENOSPC, which the refusal names with the disk."""
    from herdr_mcp.update import install

    python = sys._base_executable  # type: ignore[attr-defined]
    pip_wheel = install.bundled_pip(python)
    assert pip_wheel is not None
    top = tmp_path / "bundle"  # a bundle with nothing to install but pip
    (top / "wheelhouse").mkdir(parents=True)
    (top / "requirements.txt").write_text("")
    pinned = install._pin_pip(pip_wheel, tmp_path / "pip.txt")
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("PYTHONPATH", None)

    def pip_run(venv: Path) -> None:
        python = venv / "bin" / "python"
        runs = {**env, "PYTHONPATH": str(pip_wheel)}
        install._pip_install((), (str(python), "-m", "pip"), runs, venv, top, extra=pinned)

    def host_pip_run(venv: Path) -> None:
        pip, from_host = pip_for(venv / "bin" / "python")
        assert from_host, "this environment's pip is the one installs use here"
        install._pip_install((), pip, env, venv, top, extra=pinned)

    def ensurepip(venv: Path) -> None:
        command = [str(venv / "bin" / "python"), "-m", "ensurepip", "--upgrade", "--default-pip"]
        install._run(command, env, tmp_path, "install_venv_failed", 300, writes=venv.parent)

    # Each step, and what its refusal names as the step: the end of its command.
    for run, step in (
        (host_pip_run, "wheelhouse --require-hashes -r requirements.txt"),
        (pip_run, "wheelhouse --require-hashes -r requirements.txt"),
        (ensurepip, "-m ensurepip --upgrade --default-pip"),
    ):
        with mounted_tmpfs(tmp_path / "disk", 4 * MiB) as disk:
            venv = disk / "g" / "venv"
            install._run(
                [python, "-m", "venv", "--without-pip", str(venv)],
                env,
                tmp_path,
                "install_venv_failed",
                300,
                writes=disk / "g",
            )
            with pytest.raises(LocalStateError) as caught:
                run(venv)
            assert caught.value.code == "disk_full", caught.value
            message = caught.value.message
            assert message.startswith(f"No space left on device (ENOSPC) while {step} (exit "), message
            assert f"(mounted at {disk})" in message
            assert "No space left on device" in message.split("\n", 1)[1], message
