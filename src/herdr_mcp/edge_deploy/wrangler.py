"""Running the Edge's pinned wrangler: find the sources and Node, install the lockfile's packages
when they are missing or stale, run one command, read its structured output.

Wrangler runs as `node --no-warnings --experimental-vm-modules
<edge>/node_modules/wrangler/wrangler-dist/cli.js ...` with the Node found on PATH, in the Edge's
directory: what its `bin/wrangler.js` spawns after checking the Node version (4.86.0:
`runWrangler`), run directly, which saves starting a second Node for every command (~0.2 s of CPU
of each command's ~1.5, measured with `--version`); `prepare` checks the version itself. A
wrangler without `wrangler-dist/cli.js` runs through its `bin/wrangler.js`. The environment is the
caller's plus:

- `CLOUDFLARE_ACCOUNT_ID`: the account this deploy chose (never wrangler's own cached choice);
- `WRANGLER_OUTPUT_FILE_PATH`: a file wrangler appends ND-JSON entries to (`deploy` with its
  targets, `command-failed` with the API's code and message), read instead of its prose;
- `WRANGLER_HIDE_BANNER=true`: the banner is where wrangler asks the npm registry for a newer
  version (printWranglerBanner -> updateCheck in wrangler-dist/cli.js 4.86.0);
- `WRANGLER_LOG=log`: never `debug`, at which wrangler logs request bodies (a secret's text).

A secret is given to wrangler only on stdin (`secret put` reads a piped value), never in argv,
in a file or in the environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from herdr_mcp.errors import LocalFault, RefusedFault, UsageFault
from herdr_mcp.strict_json import JsonLimits, loads_bounded

#: wrangler's own floor (bin/wrangler.js: MIN_NODE_VERSION) and the Edge's package.json engines.
MIN_NODE = (20, 0)
#: One wrangler command (a deploy bundles and uploads; on a loaded 2-core machine it takes ~10 s).
COMMAND_TIMEOUT_S = 600
NPM_CI_TIMEOUT_S = 900
#: The last lines of a failed command's output a refusal quotes.
TAIL_LINES = 6
#: What of wrangler's JSON output and log lines is read (docs/runtime.md "Parse boundaries").
WRANGLER_OUTPUT_LIMITS = JsonLimits(max_bytes=16 * 1024 * 1024, max_items=500_000)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_QUOTED_CODE = re.compile(r"\[code: (\d+)\]")
_ENVELOPE_CODE = re.compile(r'"errors":\s*\[\s*\{\s*"code":\s*(\d+)')


class EdgeDeployError(LocalFault):
    """Base of the local failures of `herdr-mcp edge deploy` (a stable `code` each)."""


class EdgeDeployUsage(UsageFault):
    """A request `herdr-mcp edge deploy` cannot carry out as given."""


class CloudflareRefused(RefusedFault):
    """The Cloudflare API (through wrangler) refused a step; `api_code` is its error code."""

    def __init__(self, code: str, message: str, api_code: int | None = None) -> None:
        super().__init__(code, message)
        self.api_code = api_code


@dataclass
class Outcome:
    """One finished wrangler command."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    entries: list[dict[str, Any]] = field(default_factory=list)

    def entry(self, kind: str) -> dict[str, Any] | None:
        """Its last output-file entry of `kind` (`deploy`, `command-failed`), if any."""
        found = [e for e in self.entries if e.get("type") == kind]
        return found[-1] if found else None

    def failure(self) -> tuple[int | None, str]:
        """The API code (if any) and message of a failed command, from its output file, else
        from the end of its output."""
        failed = self.entry("command-failed")
        if failed is not None:
            code = failed.get("code")
            message = str(failed.get("message", "")).strip()
            return (code if isinstance(code, int) else _api_code(message)), message
        lines = [_ANSI.sub("", line).strip() for line in (self.stderr + "\n" + self.stdout).splitlines()]
        message = " ".join(line for line in lines if line)[-600:]
        return _api_code(message), message


@dataclass
class Wrangler:
    """The pinned wrangler of one Edge directory."""

    edge_dir: Path
    node: str
    env: dict[str, str]
    #: Every command line run (argv after `wrangler`), in order: what a run did, for its report.
    history: list[list[str]] = field(default_factory=list)

    @classmethod
    def prepare(cls, edge_dir: Path, env: dict[str, str] | None = None) -> Wrangler:
        """Check the sources and Node, `npm ci` when the installed wrangler is not the
        lockfile's; raises EdgeDeployUsage / EdgeDeployError with a stable code."""
        check_sources(edge_dir)
        environment = dict(os.environ if env is None else env)
        node = shutil.which("node", path=environment.get("PATH"))
        if node is None:
            raise EdgeDeployError(
                "node_missing",
                "Node.js is not on PATH; install Node.js 20 or later (wrangler runs on it) and try again",
            )
        version = _node_version(node, environment)
        if version < MIN_NODE:
            raise EdgeDeployError(
                "node_too_old",
                f"Node.js {'.'.join(map(str, version))} is too old for wrangler; install Node.js 20 or later",
            )
        wanted = pinned_wrangler_version(edge_dir)
        if installed_wrangler_version(edge_dir) != wanted:
            _npm_ci(edge_dir, environment, node)
            if installed_wrangler_version(edge_dir) != wanted:
                raise EdgeDeployError(
                    "wrangler_not_installed",
                    f"npm ci did not install wrangler {wanted} in {edge_dir / 'node_modules'}",
                )
        return cls(edge_dir, node, environment)

    def run(self, args: list[str], *, account_id: str | None = None, stdin: str | None = None) -> Outcome:
        """Run `wrangler <args>` (raises only for a timeout or a missing program)."""
        package = self.edge_dir / "node_modules" / "wrangler"
        cli = package / "wrangler-dist" / "cli.js"
        if cli.is_file():  # bin/wrangler.js's own command line for it (module docstring)
            program = [self.node, "--no-warnings", "--experimental-vm-modules", str(cli)]
        else:
            program = [self.node, str(package / "bin" / "wrangler.js")]
        env = {**self.env, "WRANGLER_HIDE_BANNER": "true", "WRANGLER_LOG": "log"}
        env.pop("CLOUDFLARE_ACCOUNT_ID", None)
        env.pop("CF_ACCOUNT_ID", None)
        if account_id is not None:
            env["CLOUDFLARE_ACCOUNT_ID"] = account_id
        self.history.append(list(args))
        with tempfile.TemporaryDirectory(prefix="herdr-wrangler-") as scratch:
            output = Path(scratch) / "output.ndjson"
            env["WRANGLER_OUTPUT_FILE_PATH"] = str(output)
            try:
                done = subprocess.run(
                    [*program, *args],
                    cwd=self.edge_dir,
                    env=env,
                    input=stdin if stdin is not None else "",
                    capture_output=True,
                    text=True,
                    timeout=COMMAND_TIMEOUT_S,
                )
            except subprocess.TimeoutExpired:
                raise EdgeDeployError(
                    "wrangler_timeout",
                    f"`wrangler {' '.join(args[:3])}` did not finish in {COMMAND_TIMEOUT_S} s; "
                    "check the network and try again",
                ) from None
            entries = _entries(output)
        return Outcome(list(args), done.returncode, done.stdout, done.stderr, entries)


def check_sources(edge_dir: Path) -> None:
    """The Edge's sources are there: wrangler.jsonc, package.json, package-lock.json, src/."""
    missing = [
        name
        for name in ("wrangler.jsonc", "package.json", "package-lock.json", "src/index.ts")
        if not (edge_dir / name).is_file()
    ]
    if missing:
        raise EdgeDeployUsage(
            "edge_sources_missing",
            f"{edge_dir} is not the Edge's source directory (no {', '.join(missing)}); clone "
            "herdr-mcp at the release you run (git clone --branch v<version> ...) and pass "
            "--edge-dir <clone>/edge",
        )


def pinned_wrangler_version(edge_dir: Path) -> str:
    """The wrangler version edge/package-lock.json pins."""
    try:
        lock = json.loads((edge_dir / "package-lock.json").read_text())
        version = lock["packages"]["node_modules/wrangler"]["version"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EdgeDeployUsage(
            "edge_lockfile_invalid", f"{edge_dir / 'package-lock.json'} names no wrangler version ({exc})"
        ) from None
    if not isinstance(version, str):
        raise EdgeDeployUsage("edge_lockfile_invalid", "package-lock.json's wrangler version is not a string")
    return version


def installed_wrangler_version(edge_dir: Path) -> str | None:
    """The version of the wrangler installed under edge/node_modules, if any."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        document = json.loads((edge_dir / "node_modules" / "wrangler" / "package.json").read_text())
        version = document["version"]
        return version if isinstance(version, str) else None
    return None


def _node_version(node: str, env: dict[str, str]) -> tuple[int, int]:
    try:
        done = subprocess.run([node, "--version"], capture_output=True, text=True, env=env, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EdgeDeployError("node_missing", f"{node} --version failed ({exc}); reinstall Node.js") from None
    match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+\S*", done.stdout.strip())
    if match is None:
        raise EdgeDeployError(
            "node_missing", f"{node} --version printed {done.stdout.strip()!r}, not a version"
        )
    return int(match[1]), int(match[2])


def _npm_ci(edge_dir: Path, env: dict[str, str], node: str) -> None:
    """`npm ci` of the lockfile (the npm next to this Node, else npm on PATH)."""
    npm = shutil.which("npm", path=f"{Path(node).parent}{os.pathsep}{env.get('PATH', '')}")
    if npm is None:
        raise EdgeDeployError("npm_missing", "npm is not on PATH; install it with Node.js and try again")
    try:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=edge_dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=NPM_CI_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise EdgeDeployError("npm_ci_failed", f"npm ci did not finish in {NPM_CI_TIMEOUT_S} s") from None
    if done.returncode != 0:
        tail = " ".join(done.stderr.strip().splitlines()[-TAIL_LINES:])
        raise EdgeDeployError("npm_ci_failed", f"npm ci in {edge_dir} failed: {tail}")


def _api_code(message: str) -> int | None:
    """The API's error code quoted in a message: wrangler's "[code: N]", or the first code of an
    API envelope some commands print raw (`kv namespace create`: `{"errors":[{"code":N,...`)."""
    match = _QUOTED_CODE.search(message) or _ENVELOPE_CODE.search(message)
    return int(match[1]) if match else None


def _entries(path: Path) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):  # not JSON, or past the bounds: not an entry
                entry = loads_bounded(line, WRANGLER_OUTPUT_LIMITS, strict=False)
                if isinstance(entry, dict):
                    entries.append(entry)
    return entries
