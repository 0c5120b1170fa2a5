"""The extension's workflow (.github/workflows/extension.yml) and its stages in ./scripts/test:
lint and unit tests with the locked npm packages, the end-to-end test in Debian's Chromium (never
a downloaded browser), a packed zip as an artifact. Pinning, permissions and actionlint are
tests/project/test_workflows.py's, for every workflow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "extension.yml"


def _load() -> dict[str, Any]:
    document = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    if True in document:  # YAML 1.1 reads the bare key `on` as true
        document["on"] = document.pop(True)
    return document


def _uses(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [step for step in job["steps"] if step.get("uses", "").startswith(f"{action}@")]


def _runs(job: dict[str, Any]) -> list[tuple[str | None, str]]:
    return [(step.get("working-directory"), str(step["run"])) for step in job["steps"] if "run" in step]


def test_the_workflow_lints_tests_runs_the_e2e_and_packs_a_zip() -> None:
    document = _load()
    for event in ("push", "pull_request"):
        assert {"extension/**", ".github/workflows/extension.yml"} <= set(document["on"][event]["paths"])
    jobs = document["jobs"]
    assert list(jobs) == ["lint", "e2e", "pack"]
    assert _runs(jobs["lint"]) == [
        ("extension", "npm ci --no-audit --no-fund"),
        ("extension", "npx --no-install eslint --max-warnings 0 ."),
        ("extension", "node --test test/"),
    ]
    (node,) = [
        step for step in jobs["lint"]["steps"] if step.get("uses", "").startswith("actions/setup-node@")
    ]
    assert node["with"]["node-version"] == "20"

    e2e = jobs["e2e"]
    assert e2e["needs"] == "lint"
    assert str(e2e["container"]).startswith("python:3.11-bookworm")
    scripts = "\n".join(run for _, run in _runs(e2e))
    assert "apt-get install" in scripts and "chromium" in scripts
    assert "playwright install" not in scripts, "the browser is Debian's, never a download"
    assert "pytest" in scripts and "tests/extension" in scripts

    pack = jobs["pack"]
    assert pack["needs"] == ["lint", "e2e"]
    (upload,) = [
        step for step in pack["steps"] if step.get("uses", "").startswith("actions/upload-artifact@")
    ]
    assert upload["with"]["path"] == "herdr-mcp-extension-*.zip"
    assert upload["with"]["if-no-files-found"] == "error"
    (zip_step,) = [run for _, run in _runs(pack) if "zip" in run]
    assert "manifest.json" in zip_step and "src" in zip_step


def test_scripts_test_runs_the_extension_stages_and_installs_chromium() -> None:
    script = (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    assert 'stage "extension lint" extension_lint' in script
    assert 'stage "extension unit tests" extension_unit_tests' in script
    assert "npm ci" in script and "eslint --max-warnings 0" in script and "node --test test/" in script
    assert "missing+=(chromium)" in script
    assert "playwright install" not in script


def test_the_lockfile_pins_what_package_json_names() -> None:
    package = json.loads((ROOT / "extension" / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((ROOT / "extension" / "package-lock.json").read_text(encoding="utf-8"))
    for name, version in package["devDependencies"].items():
        assert version[0].isdigit(), f"{name} is not pinned exactly: {version}"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version
