"""Deploying the public Edge (edge/, a Cloudflare Worker) to the user's own Cloudflare account:
`herdr-mcp edge deploy` (`deploy.py`), over the wrangler that edge/package-lock.json pins
(`wrangler.py`), with an effective configuration generated from the committed one (`config.py`).

It runs from the Edge's sources, not from a Worker bundled into the wheel: the wheel is built
reproducibly by the release toolchain without Node, and wrangler (which bundles the Worker with
esbuild and uploads it) has to come from npm either way; so the sources and the lockfile are
what a deploy needs, and a bundle in the wheel would be a second, Node-built artifact to sign
and keep in step. In a clone that is `edge/` (found next to the package when it runs from the
checkout); a user who installed a signed release clones the repository at the release's tag
and passes `--edge-dir`. `npm ci` of the lockfile runs when the installed wrangler is not the
pinned one.
"""

from herdr_mcp.edge_deploy.deploy import DeployRequest, deployed_admin_secret_file, run

__all__ = ["DeployRequest", "deployed_admin_secret_file", "run"]
