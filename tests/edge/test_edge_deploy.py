"""What `npx wrangler deploy` would ship, checked without Cloudflare: `wrangler deploy --dry-run`
bundles the Worker from the committed configuration and names its bindings (offline, no account).

The Worker's /__test/ routes (shift the registry's clock, play a lagging KV, run control methods
without a link) exist only when the `EDGE_TEST_ROUTES` variable is "1": the test harness sets it,
the deployed configuration never does. Without it every such route is an ordinary 404 and changes
nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx2

from tests.support.edge_harness import WRANGLER, ensure_edge_packages, running_edge, wrangler_env

EDGE_DIR = Path(__file__).resolve().parents[2] / "edge"
TEST_ROUTES = ("/__test/control", "/__test/clock", "/__test/kv", "/__test/legacy-grant", "/__test/outbound")
#: Variables only the test harness sets (through running_edge's extra_vars): the test routes, and
#: the loopback origins of the tests' client metadata document servers (src/outbound.ts).
TEST_VARIABLES = ("EDGE_TEST_ROUTES", "EDGE_TEST_CIMD_ORIGINS")


def test_the_deployed_configuration_never_enables_the_test_routes() -> None:
    workflow = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "edge.yml"
    deploy = workflow.read_text().split("wrangler deploy", 1)[1]
    for variable in TEST_VARIABLES:
        for name in ("wrangler.jsonc", "package.json"):
            assert variable not in (EDGE_DIR / name).read_text(), (variable, name)
        assert variable not in deploy, variable


def test_without_the_variable_every_test_route_is_a_404_that_changes_nothing(tmp_path: Path) -> None:
    with running_edge(tmp_path, extra_vars={"EDGE_TEST_ROUTES": "0"}) as edge:
        for path in TEST_ROUTES:
            answer = httpx2.post(
                edge.base + path,
                json={
                    "offset_s": 86_400,
                    "op": "list",
                    "key": "grant:",
                    "device_id": "dev_x",
                    "method": "grant.list",
                },
                timeout=30,
            )
            assert answer.status_code == 404, (path, answer.status_code, answer.text[:200])
            assert answer.json()["error"]["code"] == "not_found"
        assert httpx2.get(edge.base + "/health", timeout=30).status_code == 200


def test_wrangler_deploy_dry_run_bundles_the_worker_with_its_bindings(tmp_path: Path) -> None:
    ensure_edge_packages()
    # No update check on the npm registry, no metrics (tests/support/edge_harness.py, OFFLINE_ENV).
    env = wrangler_env(tmp_path / "home")
    env.pop("CLOUDFLARE_API_TOKEN", None)
    built = subprocess.run(
        [str(WRANGLER), "deploy", "--dry-run", "--outdir", str(tmp_path / "out")],
        cwd=EDGE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    for binding in (
        "env.DEVICE_RELAY (DeviceRelay)",
        "env.EDGE_REGISTRY (EdgeRegistry)",
        "env.OAUTH_KV",
        "env.RATE_LIMIT",
    ):
        assert binding in built.stdout, binding
    bundle = (tmp_path / "out" / "index.js").read_text()
    # The Durable Object classes the migrations name are exported by the bundle.
    assert "  DeviceRelay,\n  EdgeRegistry,\n" in bundle
