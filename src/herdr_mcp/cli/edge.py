"""`herdr-mcp edge deploy`: deploy the public Edge to your own Cloudflare account, or reconcile it.

Needs Node.js 20+, the Edge's sources (a clone's `edge/`: found in the current directory, its
`edge/`, or next to a package run from a checkout; else `--edge-dir`) and a Cloudflare login:
`npx wrangler login` or `CLOUDFLARE_API_TOKEN`. With several accounts, `CLOUDFLARE_ACCOUNT_ID`
picks one. What it does is `herdr_mcp.edge_deploy.deploy`'s docstring; edge/README.md,
"Deploying", says it for users.

Exit codes: 0 deployed (or, with --dry-run, bundled); 2 a request it cannot carry out as given
(an ambiguous account, an unknown KV namespace, no Edge sources); 3 Cloudflare refused a step;
4 the workstation (no Node, not logged in, npm ci failed, the API unreachable). Under `--json`
the result, or the failure as `{"error": {"code", "message"}}`, is one object on stdout.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import herdr_mcp
from herdr_mcp.cli.arguments import CommandParser, dir_path, run_guarded, with_json
from herdr_mcp.edge_deploy import DeployRequest
from herdr_mcp.edge_deploy import run as deploy
from herdr_mcp.edge_deploy.config import DEFAULT_WORKER
from herdr_mcp.edge_deploy.deploy import KV_ID, WORKER_NAME
from herdr_mcp.edge_deploy.wrangler import EdgeDeployUsage
from herdr_mcp.layout import Layout
from herdr_mcp.terminal import printable

#: The package.json name that marks a directory as the herdr-mcp Edge's sources.
EDGE_PACKAGE = "herdr-mcp-edge"


def _worker_name(value: str) -> str:
    if not WORKER_NAME.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a Worker name: lowercase letters, digits and '-', 1-63 characters, "
            "not starting or ending with '-' (it becomes <name>.<subdomain>.workers.dev)"
        )
    return value


def _kv_id(value: str) -> str:
    if not KV_ID.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a KV namespace id (32 hexadecimal digits)")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="herdr-mcp edge", description="The public Edge on your Cloudflare account.")
    commands = parser.add_subparsers(dest="action", required=True)
    deploy_parser = commands.add_parser(
        "deploy",
        help="create or reconcile the Edge: KV namespace, Durable Objects, secrets, code",
        description=(__doc__ or "").split("\n\n")[0],
    )
    deploy_parser.add_argument(
        "--name",
        type=_worker_name,
        default=DEFAULT_WORKER,
        help=f"the Worker's name, part of its origin (default {DEFAULT_WORKER})",
    )
    deploy_parser.add_argument(
        "--edge-dir", type=dir_path, default=None, help="the Edge's sources (a clone's edge/)"
    )
    deploy_parser.add_argument(
        "--config-dir", type=dir_path, default=None, help="where the record and ADMIN_SECRET are kept"
    )
    deploy_parser.add_argument(
        "--kv-namespace-id",
        type=_kv_id,
        default=None,
        help="bind this existing KV namespace as OAUTH_KV (an Edge deployed before without a record)",
    )
    deploy_parser.add_argument(
        "--dry-run",
        action="store_true",
        help="only bundle the Worker (wrangler deploy --dry-run): no account, nothing changed",
    )
    return with_json(parser)


def find_edge_dir(given: Path | None) -> Path:
    """`given`, else the first Edge source directory among: the current directory, its `edge/`,
    the `edge/` of the checkout this package runs from."""
    if given is not None:
        return given
    package_root = Path(herdr_mcp.__file__).resolve().parents[2]
    for candidate in (Path.cwd(), Path.cwd() / "edge", package_root / "edge"):
        if _is_edge_dir(candidate):
            return candidate
    raise EdgeDeployUsage(
        "edge_sources_missing",
        "no Edge sources here (a directory with the herdr-mcp Edge's package.json and "
        "wrangler.jsonc); clone herdr-mcp at the release you run (git clone --branch "
        "v<version> ...) and pass --edge-dir <clone>/edge",
    )


def _is_edge_dir(path: Path) -> bool:
    try:
        return (
            json.loads((path / "package.json").read_text()).get("name") == EDGE_PACKAGE
            and (path / "wrangler.jsonc").is_file()
        )
    except (OSError, ValueError, AttributeError):
        return False


def run(argv: Sequence[str]) -> int:
    return run_guarded(lambda: _run(list(argv)), argv)


def _run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    request = DeployRequest(
        edge_dir=find_edge_dir(args.edge_dir),
        layout=Layout.of(args.config_dir),
        worker=args.name,
        dry_run=args.dry_run,
        kv_namespace_id=args.kv_namespace_id,
    )
    result = deploy(request)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(render(result))
    return 0


def render(result: dict[str, Any]) -> str:
    """The result for a person: what was reused, created and changed, and what to do next."""
    if result.get("dry_run"):
        lines = [f"Dry run: Worker {result['worker']} bundles with these bindings (nothing deployed):"]
        lines += [f"  {binding}" for binding in result["bindings"]]
        lines.append(f"Durable Object migrations: {', '.join(result['migrations'])}")
        return "\n".join(printable(line) for line in lines)
    account = result["account"]
    lines = [f"Edge {result['worker']} deployed to Cloudflare account {account['name']} ({account['id']})."]
    for title, key in (("Reused", "reused"), ("Created", "created"), ("Changed", "changed")):
        if result[key]:
            lines.append(f"{title}:")
            lines += [f"  {item}" for item in result[key]]
    origin = result["origin"]
    if origin is None:
        lines.append(
            "wrangler reported no public URL for the Worker (workers.dev off and no route); "
            "give it one, then run this again"
        )
    else:
        lines.append(f"ChatGPT connector URL: {result['mcp_url']}")
    if result["admin_secret_file"]:
        lines.append(f"ADMIN_SECRET (the /pair password) is in {result['admin_secret_file']}")
    else:
        lines.append("ADMIN_SECRET was set before this tool kept it: use the value you kept")
    if origin is not None and result["admin_secret_file"]:
        lines += [
            "Next: pair this workstation (it starts the pairing with the ADMIN_SECRET kept above):",
            f"  herdr-mcp link pair --edge {origin}",
        ]
    elif origin is not None:
        lines += [
            f"Next: pair this workstation. Open {origin}/pair (user name anything, password "
            "ADMIN_SECRET), then run",
            f"  herdr-mcp link pair --edge {origin} --code <the 6 digits>",
        ]
    lines.append(f"Record: {result['record']}")
    return "\n".join(printable(line) for line in lines)


__all__ = ["build_parser", "find_edge_dir", "render", "run"]
