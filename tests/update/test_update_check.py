"""`herdr-mcp update --check` against the release repository simulator: discovery, the manifest
and its signature, admission; the simulator's log proves no asset is downloaded, admitted or not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from herdr_mcp.contract import ContractIdentity
from herdr_mcp.errors import EXIT_LOCAL, EXIT_REFUSED
from herdr_mcp.generations.fence import clear_fence, set_fence
from herdr_mcp.release.verification import PROVENANCE_BUNDLE_NAME, SIGNATURE_NAME, SIGSTORE_BUNDLE_NAME
from tests.support.published_release import BUNDLE, REPOSITORY, REPOSITORY_ID, TAG, VERSION, Trust, publish
from tests.support.repository_sim import ReleaseRepositorySimulator
from tests.support.sigstore_stack import SigstoreStack


@pytest.fixture
def sim(sigstore_stack: SigstoreStack) -> Iterator[ReleaseRepositorySimulator]:
    with ReleaseRepositorySimulator(REPOSITORY) as simulator:
        simulator.stack = sigstore_stack  # type: ignore[attr-defined]
        yield simulator


def _check(
    sim: ReleaseRepositorySimulator, tmp: Path, trust: Trust, *mode: str
) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "herdr_mcp", "update", *(mode or ("--check",)), "--json",
        *sim.update_flags(REPOSITORY_ID), *trust.flags(), "--config-dir", str(tmp / "config"),
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


#: What a check fetches: the manifest and its evidence, never an asset.
EVIDENCE = sorted(["runtime-manifest.json", SIGNATURE_NAME, SIGSTORE_BUNDLE_NAME, PROVENANCE_BUNDLE_NAME])


def _fetched(sim: ReleaseRepositorySimulator) -> list[str]:
    return sorted(Path(entry.path).name for entry in sim.downloads())


def test_a_same_contract_release_is_admitted_without_downloading_its_bundle(
    sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    keys = publish(sim, tmp_path)
    result = _check(sim, tmp_path, keys)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert (answer["status"], answer["version"], answer["kind"]) == ("admitted", VERSION, "same_contract")
    assert _fetched(sim) == EVIDENCE


@pytest.mark.parametrize(
    ("contract", "tamper", "code"),
    [
        (ContractIdentity(7, "sha256:" + "a" * 64, 18), False, "contract_epoch_not_adjacent"),
        (None, True, "signature_invalid"),
    ],
    ids=["two-epochs-ahead", "tampered-manifest"],
)
def test_a_refused_release_downloads_nothing_but_its_manifest(
    sim: ReleaseRepositorySimulator,
    tmp_path: Path,
    contract: ContractIdentity | None,
    tamper: bool,
    code: str,
) -> None:
    keys = publish(sim, tmp_path, contract=contract, tamper=tamper)
    result = _check(sim, tmp_path, keys)
    assert result.returncode == EXIT_REFUSED
    assert f"error: {code}:" in result.stderr
    assert BUNDLE not in _fetched(sim)
    assert not (tmp_path / "config" / "highest-seen.json").exists()


def test_update_paths_respect_the_fence(sim: ReleaseRepositorySimulator, tmp_path: Path) -> None:
    keys = publish(sim, tmp_path)
    set_fence(tmp_path / "config", "service uninstall")
    for mode in ("--check", "--json"):  # the check, and the whole update
        refused = _check(sim, tmp_path, keys, mode)
        assert refused.returncode == EXIT_REFUSED
        assert "error: update_fenced:" in refused.stderr
    skipped = _check(sim, tmp_path, keys, "auto")
    assert skipped.returncode == 0, skipped.stderr
    assert json.loads(skipped.stdout)["reason"] == "update_fenced"
    assert sim.log == [], "a fenced update contacts nothing"
    clear_fence(tmp_path / "config")
    admitted = json.loads(_check(sim, tmp_path, keys).stdout)
    assert admitted["status"] == "admitted"
    assert _fetched(sim) == EVIDENCE
    # Unfenced, `auto` runs the whole update: this release's "bundle" is not one, so it fails
    # after admission, at the download or install step, and nothing is activated.
    tried = _check(sim, tmp_path, keys, "auto")
    assert tried.returncode == EXIT_REFUSED and "\nherdr-mcp: error: " in tried.stderr, tried.stderr
    assert not (tmp_path / "config" / "generations" / "runtime-status.json").exists()


def test_a_pinned_manifest_url_is_admitted_from_the_files_next_to_it(
    sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    keys = publish(sim, tmp_path)
    url = sim.url(f"/{REPOSITORY}/releases/download/{TAG}/runtime-manifest.json", host=sim.download_host)
    result = _check(sim, tmp_path, keys, "--check", "--manifest-url", url)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "admitted"
    assert _fetched(sim) == EVIDENCE
    assert [
        entry.path for entry in sim.log if "/releases?" in entry.path or entry.path.endswith("/releases")
    ] == []

    # The tag comes from the URL: a manifest served under another tag is refused as moved.
    moved = url.replace(f"/download/{TAG}/", "/download/v0.0.1/")
    refused = _check(sim, tmp_path, keys, "--check", "--manifest-url", moved)
    assert refused.returncode == EXIT_LOCAL  # the tag answered HTTP 404: a transport failure

    for bad in (url.replace("runtime-manifest.json", "other.json"), url.replace("/download/", "/x/")):
        refused = _check(sim, tmp_path, keys, "--check", "--manifest-url", bad)
        assert refused.returncode == 2
        assert "error: manifest_url_invalid:" in refused.stderr


def test_the_repository_and_channel_come_from_the_settings_file_when_no_flag_names_them(
    sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    keys = publish(sim, tmp_path)
    config = tmp_path / "config"
    config.mkdir()
    command = [
        sys.executable, "-m", "herdr_mcp", "update", "--check", "--json",
        "--api-url", sim.api_base_url, *(f"--allowed-host={host}" for host in sorted(sim.hosts)),
        "--ca-file", str(sim.ca_file), *keys.flags(), "--config-dir", str(config),
    ]  # fmt: skip
    env = {
        key: value for key, value in os.environ.items() if not key.startswith("HERDR_MCP_UPDATE_REPOSITORY")
    }
    missing = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert missing.returncode == 2
    assert "error: update_config_invalid:" in missing.stderr and "update-settings.json" in missing.stderr

    settings = config / "update-settings.json"
    settings.write_text(json.dumps({"repository": REPOSITORY, "repository_id": REPOSITORY_ID}))
    found = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["status"] == "admitted"

    for bad in ({"repository": "no-slash"}, {"repository_id": "1"}, {"repository_id": True}):
        settings.write_text(json.dumps(bad))
        refused = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
        assert refused.returncode == 2
        assert "error: update_settings_invalid:" in refused.stderr


@pytest.mark.parametrize(
    ("has_sigstore", "has_provenance", "code"),
    [(False, True, "sigstore_missing"), (True, False, "provenance_missing")],
    ids=["no-sigstore-bundle", "no-provenance"],
)
def test_a_release_without_its_sigstore_evidence_is_refused_before_any_asset_download(
    sim: ReleaseRepositorySimulator, tmp_path: Path, has_sigstore: bool, has_provenance: bool, code: str
) -> None:
    trust = publish(sim, tmp_path, sigstore=has_sigstore, provenance=has_provenance)
    for mode in ("--check", "--json"):  # the check, and the whole update
        result = _check(sim, tmp_path, trust, mode)
        assert result.returncode == EXIT_REFUSED, result.stdout
        assert f"error: {code}:" in result.stderr
        assert BUNDLE not in _fetched(sim)
    assert not (tmp_path / "config" / "highest-seen.json").exists()
    assert not (tmp_path / "config" / "runtimes").exists()
    assert not (tmp_path / "config" / "generations" / "runtime-control.json").exists()


def test_the_unsafe_skip_is_named_warned_about_and_refused_by_auto(
    sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    trust = publish(sim, tmp_path, sigstore=False, provenance=False)
    skipped = _check(sim, tmp_path, trust, "--check", "--unsafe-skip-sigstore")
    assert skipped.returncode == 0, skipped.stderr
    assert json.loads(skipped.stdout)["status"] == "admitted"
    assert "warning: --unsafe-skip-sigstore" in skipped.stderr
    # Neither Sigstore file is even asked for when the user skips them.
    assert _fetched(sim) == sorted(["runtime-manifest.json", SIGNATURE_NAME])
    sim.clear_log()
    auto = _check(sim, tmp_path, trust, "auto", "--unsafe-skip-sigstore")
    assert auto.returncode == 2
    assert "update auto` never skips the Sigstore checks" in auto.stderr
    assert sim.log == []


def test_another_repository_needs_its_own_identity_policy(
    sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    trust = publish(sim, tmp_path)
    command = [
        sys.executable, "-m", "herdr_mcp", "update", "--check", "--json", "--repository", "someone/fork",
        "--repository-id", "7", "--api-url", sim.api_base_url, "--ca-file", str(sim.ca_file),
        *(f"--allowed-host={host}" for host in sorted(sim.hosts)), "--keys", str(trust.keys),
        "--config-dir", str(tmp_path / "config"),
    ]  # fmt: skip
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert "error: identity_policy_missing:" in refused.stderr
    assert "someone/fork" in refused.stderr
    assert sim.log == [], "refused before anything is contacted"
    # The policy of the release's own repository, pinned for the fork, is refused as well.
    other = subprocess.run([*command, *trust.sigstore], capture_output=True, text=True, timeout=60)
    assert other.returncode == 2
    assert "error: identity_policy_missing:" in other.stderr


class _PlainHttp(ThreadingHTTPServer):
    """A plain-HTTP loopback server that records every request it gets (none are expected)."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.path)
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def test_a_pinned_manifest_url_obeys_https_and_the_host_allowlist_before_any_request(
    sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    trust = publish(sim, tmp_path)
    path = f"/{REPOSITORY}/releases/download/{TAG}/runtime-manifest.json"
    with _PlainHttp() as plain:
        thread = threading.Thread(target=plain.serve_forever, daemon=True)
        thread.start()
        try:
            cases = {
                f"http://127.0.0.1:{plain.server_address[1]}{path}": "manifest_not_https",
                sim.url(path, host=sim.download_host).replace("https://", "http://"): "manifest_not_https",
                f"https://evil.example{path}": "manifest_host_refused",
                sim.url(path, host="127.0.0.2"): "manifest_host_refused",
            }
            for url, code in cases.items():
                for mode in ("--check", "--json"):
                    refused = _check(sim, tmp_path, trust, mode, "--manifest-url", url)
                    assert refused.returncode == 2, (url, refused.stdout)
                    assert f"error: {code}:" in refused.stderr, refused.stderr
        finally:
            plain.shutdown()
            thread.join(timeout=30)
    assert plain.requests == []
    assert sim.log == []


def test_text_from_the_release_index_is_escaped_before_the_terminal(
    sim: ReleaseRepositorySimulator, tmp_path: Path
) -> None:
    trust = publish(sim, tmp_path)
    evil = "notes\x1b]0;owned\x07\x1b[2J\u202egpj.exe"
    newer = sim.add_release("v9.1.0")
    newer.add_asset(evil, b"x")
    newer.add_asset("runtime-manifest.json", b"{}")
    # Only the API host allowed: discovery refuses the first asset URL, naming the asset.
    command = [
        sys.executable, "-m", "herdr_mcp", "update", "--check", "--repository", REPOSITORY,
        "--repository-id", str(REPOSITORY_ID), "--api-url", sim.api_base_url, "--ca-file", str(sim.ca_file),
        f"--allowed-host={sim.api_host}", *trust.flags(), "--config-dir", str(tmp_path / "config"),
    ]  # fmt: skip
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert refused.returncode == EXIT_REFUSED
    assert "error: discovery_asset_url_refused:" in refused.stderr
    assert "\x1b" not in refused.stderr and "\x07" not in refused.stderr and "\u202e" not in refused.stderr
    assert "notes\\x1b]0;owned\\x07\\x1b[2J\\u202egpj.exe" in refused.stderr
    assert refused.stderr.count("\n") == 1
