"""Major migration of a large `state.db`: how long v1 takes no mutations, and the snapshot's time.

v1 (1.0.0, this tree) is installed from its bundle, active behind a real link (known to the job
by its `link.pid`, so the drain waits for the link's acknowledgement); its `state.db` is filled
to `--megabytes` (rows of the `events` table, 1 KiB each). v2 (2.0.0, this tree plus one numbered
migration, declaring `state_migration`) is published on the repository simulator, and
`herdr-mcp update major-apply` (v1's own, as a user runs it) takes it. Meanwhile a prober sends a
mutating `tools/call` (`herdr_exec_kill` of an unknown session: the runtime answers it, nothing
runs) through the link every 50 ms: the window is from the first call the link refused or could
not deliver to the first one answered again (by v2). The job's own figures (drain to activation,
snapshot) are printed beside it.

Releases are signed with minisign only (`--unsafe-skip-sigstore`: the Sigstore checks are not
what is measured). Run from the repository root with the project installed:
`python benchmarks/major_bench.py [--megabytes 100]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.link_harness import running_link
from tests.support.release_builder import (
    REPOSITORY,
    REPOSITORY_ID,
    ReleaseFactory,
    install_active,
    publish,
    stop_all,
)
from tests.support.repository_sim import ReleaseRepositorySimulator
from tests.support.runtime_harness import make_repo, mcp_client

from herdr_mcp.records import atomic_write
from herdr_mcp.release.minisign import keygen
from herdr_mcp.sim import SimConfig, SimulatorThread
from herdr_mcp.update.paths import UpdatePaths

PROBE_INTERVAL_S = 0.05


def fill(state: Path, megabytes: int) -> None:
    """Rows of 1 KB in `events` until the file (its log checkpointed) holds `megabytes` MB."""
    row = json.dumps({"pad": "x" * 1000})
    with sqlite3.connect(state) as conn:
        while state.stat().st_size < megabytes * 1_000_000:
            with conn:
                conn.executemany(
                    "INSERT INTO events (name, workspace_id, data_json, at) VALUES ('bench', NULL, ?, 0)",
                    ((row,) for _ in range(4096)),
                )
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    print(f"state.db: {state.stat().st_size / 1e6:.1f} MB")


class Prober:
    """A mutating call through the link every `PROBE_INTERVAL_S` (each with a new `mcp` SDK
    client, as a client that reconnects after an error would): (time, answered) samples."""

    def __init__(self, url: str, token: str) -> None:
        self.samples: list[tuple[float, bool]] = []
        self._stop = threading.Event()
        self._url, self._token = url, token
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()))

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    async def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                async with mcp_client(self._url, self._token) as client:
                    result = await client.call_tool("herdr_exec_kill", {"session_id": "none"})
                # The runtime answered the call (an unknown session is a tool error, nothing ran).
                ok = result is not None
            except Exception:
                ok = False
            self.samples.append((started, ok))
            await asyncio.sleep(PROBE_INTERVAL_S)

    def window(self) -> tuple[float, int] | None:
        """From the first probe not answered to the first one answered after it, and how many
        probes were not answered; None when every probe was answered."""
        failed = [at for at, ok in self.samples if not ok]
        if not failed:
            return None
        back = next((at for at, ok in self.samples if ok and at > failed[0]), None)
        if back is None:
            raise RuntimeError("mutations were never answered again after the migration")
        return back - failed[0], len(failed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--megabytes", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="major-bench-") as raw:
        work = Path(raw)
        keys = work / "keys"
        keys.mkdir()
        keygen(keys / "release.pub", work / "release.key")
        factory = ReleaseFactory(work, work / "release.key")
        started = time.monotonic()
        v1, v2 = factory.release("1.0.0"), factory.release("2.0.0", state_step=True)
        print(f"built v1 and v2 in {time.monotonic() - started:.0f} s")
        config = work / "config"
        config.mkdir(mode=0o700)
        paths = UpdatePaths(config)
        repo = make_repo(work / "repo", {"README.md": b"# bench\n"})
        socket = work / "herdr.sock"
        with (
            SimulatorThread(SimConfig.for_roots([repo]), socket),
            ReleaseRepositorySimulator(REPOSITORY) as sim,
        ):
            try:
                install_active(
                    paths, v1, "r1.0.0-bench", ["--no-sim", "--herdr-socket", str(socket)], work / "job"
                )
                fill(config / "state.db", args.megabytes)
                publish(sim, v2)
                with running_link(config / "generations", config / "link-token") as link:
                    record = {"pid": link.process.pid, "executable": sys.executable}
                    atomic_write(config / "link.pid", json.dumps(record).encode())
                    herdr_mcp = paths.runtimes / "r1.0.0-bench" / "venv" / "bin" / "herdr-mcp"
                    command = [
                        str(herdr_mcp), "update", "major-apply", "--json", "--unsafe-skip-sigstore",
                        "--repository", REPOSITORY, "--repository-id", str(REPOSITORY_ID),
                        "--api-url", sim.api_base_url, "--ca-file", str(sim.ca_file),
                        *(f"--allowed-host={host}" for host in sorted(sim.hosts)),
                        "--keys", str(keys), "--config-dir", str(config),
                    ]  # fmt: skip
                    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
                    with Prober(link.url, link.token) as prober:
                        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
                        time.sleep(1.0)  # a few answered probes after the activation
                if done.returncode != 0:
                    print(done.stderr, file=sys.stderr)
                    return 1
                measures = json.loads(done.stdout)["job"]["measures"]
            finally:
                stop_all(paths)
    window = prober.window()
    answered = sum(ok for _, ok in prober.samples)
    shown = (
        "every probe answered"
        if window is None
        else f"{window[0]:.2f} s ({window[1]} of {len(prober.samples)} probes not answered)"
    )
    print(
        f"major migration of a {args.megabytes} MB state.db: mutations through the link not taken for "
        f"{shown}; {answered} answered; job: drain to v2 active {measures['mutations_stopped_s']:.2f} s, "
        f"snapshot {measures['snapshot_s']:.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
