"""README.md's "Use it from ChatGPT", steps 1-7, run as printed from the clone, each step's output
printed (`pytest -s`).

What stands in for what cannot run here:
- Cloudflare's API: tests/support/cloudflare_api.py, a loopback stand-in built from Cloudflare's API docs,
  reached by the pinned wrangler through CLOUDFLARE_API_BASE_URL (step 1);
- the deployed Worker: the same Worker under workerd (`wrangler dev --local`, tests/support/edge_harness.py)
  with the ADMIN_SECRET the deploy generated; what Cloudflare would route from the workers.dev
  origin to the Worker is the one link not here, so the deploy's record is pointed at the origin
  the Worker runs at, and `link pair --edge <origin>` then runs exactly as printed (step 2);
- ChatGPT: the `mcp` SDK's own OAuth client (tests/support/connector_harness.py SdkOAuth): it finds the
  metadata from /mcp's 401, registers, opens the consent page, and after the owner's approval
  exchanges the code and calls tools (steps 4-6).

Everything else is real and its own process: `herdr-mcp edge deploy`, `link pair`, `start` (the
checkout built into its own venv, a DEV generation, the runtime with its embedded simulator, the
detached link), `connector approve`, `audit`, `connector grants`, `connector revoke`, `stop`.
The commands differ from the README only by `--link-port` (a free port, not the default 8771 a
developer's own link may hold) and by the config dir (`HERDR_MCP_CONFIG_DIR`, a temporary one).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from herdr_mcp.edge_deploy.deploy import RECORD, DeployFiles
from herdr_mcp.layout import Layout
from tests.support.cloudflare_api import CloudflareApi
from tests.support.connector_harness import Consent, SdkOAuth
from tests.support.edge_harness import running_edge
from tests.support.logging_proxy import LoggingProxy, proxy_env
from tests.support.runtime_harness import make_repo
from tests.support.sim_helpers import short_tmp_dir
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
ACCOUNT = "c" * 32
#: `start` builds the checkout's wheel, bundles it and installs it offline; the deploy runs several
#: wrangler processes. Generous for a loaded 2-core machine.
STEP_TIMEOUT_S = 900
WAIT_S = 120.0
PROXY_VARIABLES = {"http_proxy", "https_proxy", "all_proxy"}
NO_PROXY = {"no_proxy"}


def readme_section() -> str:
    text = README.read_text()
    start = text.index("## Use it from ChatGPT")
    return text[start : text.index("\n## ", start + 1)]


def printed_commands(section: str) -> list[str]:
    """The `herdr-mcp ...` lines of the section's shell blocks, comments dropped."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.DOTALL):
        for line in block.splitlines():
            command = line.split("  #", 1)[0].strip()
            if command.startswith("herdr-mcp "):
                commands.append(command)
    return commands


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class User:
    """A person at the clone's root with `.venv/bin` on PATH, running commands as printed."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def run(
        self, command: str, *extra: str, ok: bool = True, registries: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """`registries`: the step may reach the package registries (the build of `start` installs
        its pinned build requirements from PyPI, as CI allows); every other step sees only a proxy
        that refuses, so any lookup off this machine would show."""
        argv = [*shlex.split(command), *extra]
        env = self.env
        if registries:  # the machine's own proxy settings, whatever they are
            env = {k: v for k, v in env.items() if k.lower() not in PROXY_VARIABLES | NO_PROXY}
            env |= {k: v for k, v in os.environ.items() if k.lower() in PROXY_VARIABLES | NO_PROXY}
        done = subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S, check=False
        )
        shown = " ".join(shlex.quote(arg) for arg in argv)
        print(
            f"\n$ {shown}\n{done.stdout.rstrip()}"
            + (f"\n[stderr] {done.stderr.rstrip()}" if done.stderr.strip() else "")
        )
        if ok:
            assert done.returncode == 0, (argv, done.returncode, done.stdout, done.stderr)
        return done


@pytest.fixture
def user(tmp_path: Path) -> Iterator[User]:
    with LoggingProxy("fail") as proxy:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDFLARE_", "CF_", "WRANGLER_"))}
        env.update(proxy_env(proxy.url))
        env.update(
            {
                "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
                "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
                "HOME": str(tmp_path / "home"),
                "XDG_CONFIG_HOME": str(tmp_path / "home" / ".config"),
                "HERDR_MCP_CONFIG_DIR": str(tmp_path / "config"),
                "HERDR_SOCKET_PATH": str(tmp_path / "no-herdr.sock"),  # no Herdr: the simulator
                "WRANGLER_SEND_METRICS": "false",
            }
        )
        env.pop("PYTHONPATH", None)  # the installed herdr-mcp, as a user has it
        yield User(env)
        # Nothing off this machine: every proxy variable points at a proxy that refuses.
        assert proxy.requests() == [], [seen.request_line for seen in proxy.requests()]


def test_the_readme_chatgpt_section_runs_from_deploy_to_a_revoked_grant(user: User, tmp_path: Path) -> None:
    section = readme_section()
    printed = printed_commands(section)
    origin_placeholder = "https://herdr-mcp-edge.<your subdomain>.workers.dev"
    expected = [
        "herdr-mcp edge deploy",
        f"herdr-mcp link pair --edge {origin_placeholder}",
        "herdr-mcp start --sim-root ~/src/myproject",
        "herdr-mcp link status",
        "herdr-mcp connector approve <request-id>",
    ]
    assert printed == expected, printed
    config = Layout(Path(user.env["HERDR_MCP_CONFIG_DIR"]))
    port = str(free_port())
    at_link = ("--link-port", port)

    # 1. Deploy the Edge (against the Cloudflare API stand-in).
    with CloudflareApi([(ACCOUNT, "Mine")]) as api:
        user.env |= {"CLOUDFLARE_API_BASE_URL": api.base_url, "CLOUDFLARE_API_TOKEN": api.token}
        deployed = user.run(printed[0])
    assert "ChatGPT connector URL: https://herdr-mcp-edge." in deployed.stdout
    files = DeployFiles(config.edge_deploy_dir("herdr-mcp-edge"))
    admin_secret = files.admin_secret.read_text().strip()
    assert admin_secret not in deployed.stdout + deployed.stderr

    with short_tmp_dir() as short, running_edge(short / "edge", {"ADMIN_SECRET": admin_secret}) as edge:
        # The Worker the deploy uploaded, running here: its record points at where it runs.
        record = RECORD.read(files.record)
        assert record is not None
        RECORD.write(files.record, {**record, "origin": edge.base})

        # 2. Pair, with the ADMIN_SECRET the deploy kept.
        paired = user.run(printed[1].replace(origin_placeholder, edge.base))
        assert f"paired with {edge.base} as dev_" in paired.stdout

        # 3. Bring the workstation up (from this clone: a DEV generation), then the link's state.
        project = make_repo(tmp_path / "home" / "src" / "myproject", {"README.md": b"# myproject\n"})
        try:
            started = user.run(printed[2].replace("~/src/myproject", str(project)), *at_link, registries=True)
            assert started.stdout.startswith("started") and "DEV" in started.stdout, started.stdout
            wait_until(
                lambda: _edge_state(user.run(printed[3], *at_link, "--json")) == "connected",
                "the link to connect to the Edge",
                WAIT_S,
            )
            user.run(printed[3], *at_link)

            # 4-6. The connector (the SDK's OAuth client): the consent page, the owner's approval
            # with the page's code, then the first tool call.
            approvals: list[str] = []

            def owner(consent: Consent) -> None:
                command = printed[4].replace("<request-id>", consent.request_id)
                approvals.append(user.run(command, "--code", consent.code, *at_link).stdout)

            oauth = SdkOAuth(edge, owner, client_name="ChatGPT")
            tools, inspected = asyncio.run(_first_call(edge.base, oauth))
            print(f"\nconnector: {len(tools)} tools; herdr_inspect projects: {inspected}")
            assert len(tools) == 19 and "herdr_devices" in tools and "herdr_inspect" in tools
            assert str(project) in inspected
            (approved,) = approvals
            assert approved.startswith("approved: "), approved
            audit = user.run("herdr-mcp audit --since 10m")
            assert "herdr_inspect" in audit.stdout

            # 7. Revoke: the grant is listed, revoked, gone, and the connector's token refused.
            user.run("herdr-mcp connector grants", *at_link)
            grants = json.loads(user.run("herdr-mcp connector grants", *at_link, "--json").stdout)
            (grant,) = [g for g in grants["grants"] if g.get("client_name") == "ChatGPT"]
            user.run(f"herdr-mcp connector revoke {grant['grant_id']}", *at_link)
            after = json.loads(user.run("herdr-mcp connector grants", *at_link, "--json").stdout)
            assert grant["grant_id"] not in json.dumps(after)
            assert oauth.storage.tokens is not None
            refused = httpx2.post(
                f"{edge.base}/mcp",
                headers={"authorization": f"Bearer {oauth.storage.tokens.access_token}"},
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                timeout=WAIT_S,
            )
            print(f"after the revocation the connector's token: HTTP {refused.status_code}")
            assert refused.status_code == 401
        finally:
            user.run("herdr-mcp stop", ok=False)


async def _first_call(base: str, oauth: SdkOAuth) -> tuple[list[str], str]:
    async with (
        oauth.http() as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
    ):
        listed = await client.list_tools()
        result = await client.call_tool("herdr_inspect", {})
        assert not result.is_error, result
        return [tool.name for tool in listed.tools], json.dumps(result.structured_content)


def _edge_state(done: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(done.stdout).get("edge", {}).get("state")
