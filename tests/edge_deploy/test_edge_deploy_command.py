"""`herdr-mcp edge deploy` against a loopback stand-in for the Cloudflare API
(tests/support/cloudflare_api.py,
built from Cloudflare's API docs), reached by the pinned wrangler through CLOUDFLARE_API_BASE_URL.

Nothing leaves the machine: every proxy variable points at a recording proxy that fails whatever
it is asked (loopback is exempt through NO_PROXY), the banner's npm update check is off
(WRANGLER_HIDE_BANNER, set by the command itself), metrics are off (WRANGLER_SEND_METRICS=false),
and the tests check that the proxy saw nothing. Run with `-s` to see the two runs' outputs."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.cli.edge import render
from tests.support.cloudflare_api import CloudflareApi
from tests.support.edge_harness import EDGE_DIR, ensure_edge_packages
from tests.support.logging_proxy import LoggingProxy, proxy_env

#: Each wrangler process is a Node start of seconds on a loaded 2-core machine, and a deploy runs
#: four to seven of them (whoami, secret list, kv namespace list, deploy's bundle and upload, the
#: secret puts). Measured: a command 3-47 s at load 5.5 and up to 146 s at load 8; the three long
#: tests here (six to nine commands each) 59-116 s at load 5.5 on one worker, 137-225 s at load 4-8
#: on two, past the suite's 120 s default.
pytestmark = pytest.mark.timeout(1200)

ROOT = Path(__file__).resolve().parents[2]
MAIN = "a" * 32
OTHER = "b" * 32
#: One command, inside the test's own deadline: a hung wrangler fails naming the command.
RUN_TIMEOUT_S = 600


@pytest.fixture(scope="module", autouse=True)
def _edge_packages() -> None:
    ensure_edge_packages()


@pytest.fixture
def proxy() -> Iterator[LoggingProxy]:
    with LoggingProxy("fail") as recording:
        yield recording
    # Every lookup off this machine would have gone through the proxy.
    assert recording.requests() == [], [seen.request_line for seen in recording.requests()]


def environment(
    tmp_path: Path, api: CloudflareApi | None, proxy: LoggingProxy, **extra: str
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDFLARE_", "CF_", "WRANGLER_"))}
    env.update(proxy_env(proxy.url))
    env.update(
        {
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "HOME": str(tmp_path / "home"),
            "XDG_CONFIG_HOME": str(tmp_path / "home" / ".config"),
            "WRANGLER_SEND_METRICS": "false",
            "HERDR_MCP_CONFIG_DIR": str(tmp_path / "config"),
            "PYTHONPATH": str(ROOT / "src"),
        }
    )
    if api is not None:
        env["CLOUDFLARE_API_BASE_URL"] = api.base_url
        env["CLOUDFLARE_API_TOKEN"] = api.token
    env.update(extra)
    return env


def deploy(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "herdr_mcp", "edge", "deploy", "--edge-dir", str(EDGE_DIR), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )


def secret_puts(api: CloudflareApi) -> list[dict[str, Any]]:
    return [call.json() for call in api.requests("PUT", "/secrets")]


def bindings_of(metadata: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["name"]: b for b in metadata["bindings"]}


def version_uploads(api: CloudflareApi) -> list[dict[str, Any]]:
    """The metadata of every code upload: a script PUT (deployed at once) or a version POST."""
    found = [metadata for _call, metadata in api.uploads()]
    for call in api.requests("POST", "/versions"):
        found.append(json.loads(call.multipart()["metadata"]))
    return found


def files_under(*roots: Path) -> Iterator[Path]:
    for root in roots:
        yield from (p for p in root.rglob("*") if p.is_file())


@pytest.mark.slow
def test_first_deploy_then_a_second_run_changes_nothing_but_the_code(
    tmp_path: Path, proxy: LoggingProxy
) -> None:
    with CloudflareApi([(MAIN, "Main")]) as api:
        env = environment(tmp_path, api, proxy)
        first = deploy(env, "--json")
        assert first.returncode == 0, first.stderr
        result = json.loads(first.stdout)
        print("\n--- first run (--json, rendered as the text output) ---\n" + render(result))
        first_calls = len(api.calls)

        # The KV namespace, created once, titled for the Worker.
        created = api.requests("POST", "/storage/kv/namespaces")
        assert [c.json()["title"] for c in created] == ["herdr-mcp-edge-OAUTH_KV"]
        kv_id = result["kv_namespace"]["id"]
        assert api.accounts[MAIN].namespaces == {kv_id: "herdr-mcp-edge-OAUTH_KV"}

        # The script, uploaded with the KV binding, both Durable Objects and migration v1.
        [(_upload, metadata)] = api.uploads()
        assert metadata["migrations"] == {
            "new_tag": "v1",
            "steps": [{"new_sqlite_classes": ["DeviceRelay", "EdgeRegistry"]}],
        }
        bindings = bindings_of(metadata)
        assert bindings["OAUTH_KV"] == {"type": "kv_namespace", "name": "OAUTH_KV", "namespace_id": kv_id}
        assert bindings["DEVICE_RELAY"]["class_name"] == "DeviceRelay"
        assert bindings["EDGE_REGISTRY"]["class_name"] == "EdgeRegistry"
        script = api.accounts[MAIN].scripts["herdr-mcp-edge"]
        assert script.migration_tag == "v1"

        # The secrets, put once each, long enough; ADMIN_SECRET kept in a 0600 file.
        puts = secret_puts(api)
        assert sorted(p["name"] for p in puts) == ["ADMIN_SECRET", "EDGE_HMAC_KEY"]
        values = {p["name"]: p["text"] for p in puts}
        assert all(len(v) >= 32 for v in values.values())
        admin_file = Path(result["admin_secret_file"])
        assert admin_file.read_text().strip() == values["ADMIN_SECRET"]
        record = Path(result["record"])
        for path in (admin_file, record):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert script.secrets == values

        # The origin and the next step.
        origin = "https://herdr-mcp-edge.sub-main.workers.dev"
        assert result["origin"] == origin and result["mcp_url"] == origin + "/mcp"
        saved = json.loads(record.read_text())
        assert (saved["account_id"], saved["worker"], saved["kv_namespace_id"], saved["origin"]) == (
            MAIN,
            "herdr-mcp-edge",
            kv_id,
            origin,
        )

        second = deploy(env)
        assert second.returncode == 0, second.stderr
        print("--- second run ---\n" + second.stdout)
        later = api.calls[first_calls:]

        # Nothing but a new version of the code: no secret put, no KV namespace made.
        assert not [c for c in later if c.method == "PUT" and c.path.endswith("/secrets")]
        assert not [c for c in later if c.method == "POST" and c.path.endswith("/storage/kv/namespaces")]
        assert api.accounts[MAIN].namespaces == {kv_id: "herdr-mcp-edge-OAUTH_KV"}
        assert list(api.accounts[MAIN].scripts) == ["herdr-mcp-edge"]
        uploads = version_uploads(api)
        assert len(uploads) == 2
        # The same bindings, the secrets not sent again (a version inherits them); no migration.
        assert bindings_of(uploads[1]) == bindings_of(uploads[0])
        assert not [b for b in uploads[1]["bindings"] if b["type"] == "secret_text"]
        assert "migrations" not in uploads[1]
        assert script.migration_tag == "v1"
        assert api.accounts[MAIN].scripts["herdr-mcp-edge"].secrets == values
        assert f"ChatGPT connector URL: {origin}/mcp" in second.stdout
        assert "secret EDGE_HMAC_KEY (kept, never replaced)" in second.stdout
        assert f"  herdr-mcp link pair --edge {origin}\n" in second.stdout
        assert f"origin {origin}" in second.stdout
        assert json.loads(record.read_text())["origin"] == origin

        # The secrets are in no output, no command line, no log or file but the ADMIN_SECRET one.
        for value in values.values():
            for text in (first.stdout, first.stderr, second.stdout, second.stderr):
                assert value not in text
            assert all(value not in arg for command in result["wrangler_commands"] for arg in command)
            for path in files_under(tmp_path / "home", tmp_path / "config"):
                if path != admin_file:
                    assert value.encode() not in path.read_bytes(), path
        # They went to the API only in the secret PUTs.
        for call in api.calls:
            if not (call.method == "PUT" and call.path.endswith("/secrets")):
                assert all(v.encode() not in call.body for v in values.values()), call.path


@pytest.mark.slow
def test_two_accounts_are_refused_without_an_account_id_and_the_worker_picks_its_account(
    tmp_path: Path, proxy: LoggingProxy
) -> None:
    with CloudflareApi([(MAIN, "Main"), (OTHER, "Other")]) as api:
        env = environment(tmp_path, api, proxy)
        refused = deploy(env)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.startswith("herdr-mcp: error: cloudflare_account_ambiguous: ")
        assert (
            MAIN in refused.stderr and OTHER in refused.stderr and "CLOUDFLARE_ACCOUNT_ID" in refused.stderr
        )
        assert not api.requests("POST") and not api.requests("PUT")

        picked = deploy({**env, "CLOUDFLARE_ACCOUNT_ID": OTHER}, "--json")
        assert picked.returncode == 0, picked.stderr
        assert json.loads(picked.stdout)["account"] == {"id": OTHER, "name": "Other"}
        assert list(api.accounts[OTHER].scripts) == ["herdr-mcp-edge"] and not api.accounts[MAIN].scripts

        # Another workstation (no record): exactly one account holds the Worker, so it is picked,
        # and its KV namespace is found by title; no secret is put again.
        puts = len(secret_puts(api))
        elsewhere = {**env, "HERDR_MCP_CONFIG_DIR": str(tmp_path / "config-2")}
        found = deploy(elsewhere, "--json")
        assert found.returncode == 0, found.stderr
        result = json.loads(found.stdout)
        assert result["account"]["id"] == OTHER
        assert len(secret_puts(api)) == puts
        assert result["admin_secret_file"] is None
        assert "ADMIN_SECRET was set before" in render(result)
        assert "/pair (user name anything" in render(result) and "--code <the 6 digits>" in render(result)
        assert len(api.requests("POST", "/storage/kv/namespaces")) == 1
        assert not api.accounts[MAIN].scripts

        # A recorded account wins over another CLOUDFLARE_ACCOUNT_ID: that would be a new Edge.
        moved = deploy({**env, "CLOUDFLARE_ACCOUNT_ID": MAIN})
        assert moved.returncode == 2
        assert "edge_account_differs" in moved.stderr
        unknown = deploy({**env, "CLOUDFLARE_ACCOUNT_ID": "c" * 32})
        assert unknown.returncode == 2 and "cloudflare_account_unknown" in unknown.stderr

        # A Worker whose namespace is neither recorded nor of the expected title (deployed by
        # hand): refused rather than bound to a new, empty namespace; --kv-namespace-id binds it.
        [kv_id] = api.accounts[OTHER].namespaces
        api.accounts[OTHER].namespaces[kv_id] = "made-by-hand"
        by_hand = {**env, "HERDR_MCP_CONFIG_DIR": str(tmp_path / "config-3")}
        refused_kv = deploy(by_hand)
        assert refused_kv.returncode == 2 and "edge_kv_unknown" in refused_kv.stderr
        bound = deploy(by_hand, "--kv-namespace-id", kv_id, "--json")
        assert bound.returncode == 0, bound.stderr
        assert json.loads(bound.stdout)["kv_namespace"] == {"id": kv_id, "title": "made-by-hand"}
        # The recorded namespace deleted: refused, and no new one is made in its place.
        del api.accounts[OTHER].namespaces[kv_id]
        gone = deploy(env)
        assert gone.returncode == 3 and "edge_kv_missing" in gone.stderr
        assert len(api.requests("POST", "/storage/kv/namespaces")) == 1
        assert len(secret_puts(api)) == puts


def test_errors_are_one_line_with_a_stable_code(tmp_path: Path, proxy: LoggingProxy) -> None:
    with CloudflareApi([(MAIN, "Main")]) as api:
        env = environment(tmp_path, api, proxy)

        def one_error(done: subprocess.CompletedProcess[str], status: int, code: str) -> None:
            assert done.returncode == status, (done.returncode, done.stderr)
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith(f"herdr-mcp: error: {code}: "), done.stderr

        # No Node on PATH.
        empty = tmp_path / "empty-bin"
        empty.mkdir()
        one_error(deploy({**env, "PATH": str(empty)}), 4, "node_missing")
        # Not logged in: no token and no `wrangler login` in this HOME.
        logged_out = {k: v for k, v in env.items() if k != "CLOUDFLARE_API_TOKEN"}
        one_error(deploy(logged_out), 4, "cloudflare_not_logged_in")
        # A token the API does not take.
        one_error(deploy({**env, "CLOUDFLARE_API_TOKEN": "wrong"}), 4, "cloudflare_not_logged_in")
        # The API refusing a step (a token without permission to upload scripts), under --json.
        api.refusals[("PUT", "/workers/scripts/herdr-mcp-edge")] = (
            403,
            9109,
            "Unauthorized to access requested resource",
        )
        refused = deploy(env, "--json")
        one_error(refused, 3, "cloudflare_api_refused")
        assert "9109" in refused.stderr
        assert json.loads(refused.stdout)["error"]["code"] == "cloudflare_api_refused"
        # A token that logs in but may not create KV namespaces (the API's code 10000).
        api.refusals = {("POST", "/storage/kv/namespaces"): (403, 10000, "Authentication error")}
        api.accounts[MAIN].namespaces.clear()
        one_error(deploy(env), 3, "cloudflare_not_authorized")
        api.refusals = {}
        # Another deploy of the Worker holding the lock.
        lock = tmp_path / "config" / "edge-deploy" / "herdr-mcp-edge" / "deploy.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        with lock.open("a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            one_error(deploy(env), 4, "edge_deploy_busy")
        # Bad arguments and no Edge sources.
        one_error(deploy(env, "--name", "Not_A_Name"), 2, "invalid_argument")
        one_error(deploy(env, "--kv-namespace-id", "xyz"), 2, "invalid_argument")
        missing = subprocess.run(
            [sys.executable, "-m", "herdr_mcp", "edge", "deploy", "--edge-dir", str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        one_error(missing, 2, "edge_sources_missing")


def test_an_api_off_this_machine_would_go_through_the_proxy_and_fails_as_unreachable(tmp_path: Path) -> None:
    """What makes the other tests' empty proxy record mean something: a lookup of a host that is
    not loopback goes to the proxy (which fails it), so none happened there."""
    with LoggingProxy("fail") as recording:
        env = environment(
            tmp_path,
            None,
            recording,
            CLOUDFLARE_API_BASE_URL="https://api.cloudflare.invalid/client/v4",
            CLOUDFLARE_API_TOKEN="unused",
        )
        done = deploy(env)
        assert done.returncode == 4, done.stderr
        assert done.stderr.startswith("herdr-mcp: error: cloudflare_unreachable: ")
        assert [seen.request_line for seen in recording.requests()] == [
            "CONNECT api.cloudflare.invalid:443 HTTP/1.1"
        ]


def test_the_dry_run_bundles_offline_with_no_account(tmp_path: Path, proxy: LoggingProxy) -> None:
    env = environment(tmp_path, None, proxy)
    done = deploy(env, "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["dry_run"] is True
    assert result["binding_names"] == [
        "env.DEVICE_RELAY",
        "env.EDGE_REGISTRY",
        "env.OAUTH_KV",
        "env.RATE_LIMIT",
    ]
    assert result["migrations"] == ["v1"]
    assert result["wrangler_commands"][0][:2] == ["deploy", "--dry-run"]
    assert not (tmp_path / "config").exists()
