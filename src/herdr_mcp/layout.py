"""Where the workstation side keeps its files: every path under the config dir, named once.

The config dir is `$HERDR_MCP_CONFIG_DIR` when set, else the platform's user config dir for
"herdr-mcp" (`~/.config/herdr-mcp` on Linux). Everything herdr-mcp keeps on the workstation
lives under it; the modules that read or write a file take its path from here, so a name cannot
drift between a writer and its readers (the runtime token's path was built in four places).

    token                   the runtime's bearer token (0600; `tokens.py`)
    link-token              the link's bearer token (0600)
    link.pid, link.log      the link `herdr-mcp start` runs detached: its pid and its output
                            (`service/detached.py`; `herdr-mcp stop` ends it)
    state.db, audit.jsonl   the runtime's durable state and its audit log of tool calls
    exec/                   the spool of exec sessions
    generations/            runtime-control.json, runtime-status.json, generations.lock
    runtimes/<generation>/  a managed generation: its venv, launch.json, runtime.pid, runtime.log
    update/                 jobs/ (staging), update.lock
    highest-seen.json       the downgrade floor (fails closed)
    update-settings.json    the user's update settings (fails closed: a usage error)
    update-fence.json       the update fence (fails closed: an unreadable fence still fences)
    services.json           which executable the installed services run (fails closed)
    service-rollback.json   macOS: what the last service install replaced
    dev-plane.json          present while a DEV generation is in charge
    dev-build/env-<key>/    the DEV plane's build venv (hatchling), kept between syncs while it is
                            what a new one would be (`dev/build_env.py`); safe to remove
    edge-device.json        the Edge this workstation is paired with: device id and secret (0600,
                            fails closed; `link/edge_device.py`)
    edge-deploy/<worker>/   `herdr-mcp edge deploy`'s (`edge_deploy/`): record.json (the account,
                            Worker, KV id and origin of the last deploy; 0600, fails closed),
                            admin-secret (the /pair password, 0600), wrangler.json (the
                            effective wrangler configuration), deploy.lock and wrangler's
                            own .wrangler/
    native-host/            the Chrome native messaging host's launcher (the path its manifest
                            names) and its log, host.log (`native_host/`)
    ipc/                    0700: the runtimes' Unix sockets for the native host (0600):
                            runtime.sock (a runtime without generations), <generation>.sock
                            (one per generation; `browser_ipc.active_socket` picks the active one)

How each small record is read and written, and whether a bad one fails open or closed, is
`records.py`; the fail rule is declared where each record is defined.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

CONFIG_DIR_ENV = "HERDR_MCP_CONFIG_DIR"
#: The runtime's port (`herdr-mcp serve`, the runtime service).
DEFAULT_PORT = 8772
#: The link's port: the stable endpoint clients are configured with.
DEFAULT_LINK_PORT = 8771
#: Only loopback: the runtime is reached through the link or the native host, never directly.
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")

TOKEN_FILE = "token"  # noqa: S105 (a file name, not a secret)
LINK_TOKEN_FILE = "link-token"  # noqa: S105 (a file name)
LINK_PID_FILE = "link.pid"
LINK_LOG_FILE = "link.log"
STATE_FILE = "state.db"
AUDIT_FILE = "audit.jsonl"
#: The audit log rotates when the current file would grow past this. A record is ~300-600 bytes,
#: so 8 MiB is ~15,000-25,000 calls: days of busy planner use in one file that `audit` reads in
#: well under a second.
AUDIT_MAX_FILE_BYTES = 8 * 1024 * 1024
#: Rotated audit files kept (`audit.jsonl.1` newest ... `.4` oldest): at most 5 x 8 MiB = 40 MiB
#: in all, which keeps weeks of history without ever filling a workstation's disk.
AUDIT_KEEP_FILES = 4
EXEC_SPOOL_DIR = "exec"
GENERATIONS_DIR = "generations"
RUNTIMES_DIR = "runtimes"
UPDATE_DIR = "update"
HIGHEST_SEEN_FILE = "highest-seen.json"
SETTINGS_FILE = "update-settings.json"
FENCE_FILE = "update-fence.json"
SERVICES_FILE = "services.json"
SERVICE_ROLLBACK_FILE = "service-rollback.json"
DEV_PLANE_FILE = "dev-plane.json"
DEV_BUILD_DIR = "dev-build"
EDGE_DEVICE_FILE = "edge-device.json"
NATIVE_HOST_DIR = "native-host"
EDGE_DEPLOY_DIR = "edge-deploy"
IPC_DIR = "ipc"
RUNTIME_SOCKET = "runtime.sock"
#: How a generation's launcher tells its runtime which socket is the generation's (`serve` reads it).
IPC_SOCKET_ENV = "HERDR_MCP_IPC_SOCKET"
#: The runtime dir of the generation a launcher started the process for: how a runtime whose pid
#: was never recorded (its updater was killed) is found again in /proc (`generations/process.py`).
#: `serve` drops it from its own environment, so the commands it runs do not carry it.
GENERATION_TAG_ENV = "HERDR_MCP_GENERATION_DIR"


def default_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """`$HERDR_MCP_CONFIG_DIR`, else the user config dir for herdr-mcp."""
    env = os.environ if env is None else env
    override = env.get(CONFIG_DIR_ENV)
    if override:
        return Path(override)
    return Path(platformdirs.user_config_dir("herdr-mcp", appauthor=False))


@dataclass(frozen=True)
class Layout:
    """The files of one config dir (see the module docstring)."""

    config_dir: Path

    @classmethod
    def default(cls, env: Mapping[str, str] | None = None) -> Layout:
        """The layout of the default config dir (`default_config_dir`)."""
        return cls(default_config_dir(env))

    @classmethod
    def of(cls, config_dir: Path | None) -> Layout:
        """The layout of `config_dir`, or of the default config dir when it is None."""
        return cls(default_config_dir() if config_dir is None else config_dir)

    @property
    def token_file(self) -> Path:
        return self.config_dir / TOKEN_FILE

    @property
    def link_token_file(self) -> Path:
        return self.config_dir / LINK_TOKEN_FILE

    @property
    def state_file(self) -> Path:
        return self.config_dir / STATE_FILE

    @property
    def audit_file(self) -> Path:
        return self.config_dir / AUDIT_FILE

    @property
    def exec_spool_dir(self) -> Path:
        return self.config_dir / EXEC_SPOOL_DIR

    @property
    def generations_dir(self) -> Path:
        return self.config_dir / GENERATIONS_DIR

    @property
    def runtimes_dir(self) -> Path:
        return self.config_dir / RUNTIMES_DIR

    @property
    def update_dir(self) -> Path:
        return self.config_dir / UPDATE_DIR

    @property
    def highest_seen_file(self) -> Path:
        return self.config_dir / HIGHEST_SEEN_FILE

    @property
    def settings_file(self) -> Path:
        return self.config_dir / SETTINGS_FILE

    @property
    def fence_file(self) -> Path:
        return self.config_dir / FENCE_FILE

    @property
    def services_file(self) -> Path:
        return self.config_dir / SERVICES_FILE

    @property
    def service_rollback_file(self) -> Path:
        return self.config_dir / SERVICE_ROLLBACK_FILE

    @property
    def dev_plane_file(self) -> Path:
        return self.config_dir / DEV_PLANE_FILE

    @property
    def dev_build_dir(self) -> Path:
        return self.config_dir / DEV_BUILD_DIR

    @property
    def edge_device_file(self) -> Path:
        return self.config_dir / EDGE_DEVICE_FILE

    def edge_deploy_dir(self, worker: str) -> Path:
        """The files of `herdr-mcp edge deploy` for the Worker `worker` (a checked name)."""
        return self.config_dir / EDGE_DEPLOY_DIR / worker

    @property
    def native_host_dir(self) -> Path:
        return self.config_dir / NATIVE_HOST_DIR

    @property
    def ipc_dir(self) -> Path:
        return self.config_dir / IPC_DIR

    @property
    def runtime_socket(self) -> Path:
        """The Unix socket of a runtime started without generations (`serve`'s default)."""
        return self.ipc_dir / RUNTIME_SOCKET

    def generation_socket(self, generation: str) -> Path:
        """The Unix socket of the runtime of `generation` (a checked generation id)."""
        return self.ipc_dir / f"{generation}.sock"
