"""`herdr-mcp edge deploy`: deploy the Edge to the user's own Cloudflare account, or reconcile
the deployment in place.

One run, in order (each step through the pinned wrangler, `wrangler.py`):

1. `whoami --json`: the accounts this login (wrangler login or CLOUDFLARE_API_TOKEN) can use.
2. The account: `CLOUDFLARE_ACCOUNT_ID` when set (it must match the record's, if any); else the
   record's; else the only account; else the only account holding a Worker of this name
   (`secret list` in each); else refused (`cloudflare_account_ambiguous`).
3. `secret list`: whether the Worker exists and which secrets it has.
4. The OAUTH_KV namespace: `--kv-namespace-id`, else the record's, else a non-placeholder id in
   the committed wrangler.jsonc, else the namespace titled `<worker>-OAUTH_KV`; created only
   when none of these exists and the Worker does not exist yet (an existing Worker's unknown
   namespace is never replaced by a new, empty one: `edge_kv_unknown`).
5. `deploy --config <effective config>`: uploads the code; the Durable Object migrations of
   the committed config are applied by wrangler (only those the Worker has not had yet).
6. `secret put` of each missing secret, the value on stdin: ADMIN_SECRET (kept in a 0600 file:
   the /pair password) and EDGE_HMAC_KEY (nobody needs it; it is never stored here). A secret
   the Worker already has is never put again: EDGE_HMAC_KEY must never change.
7. The record (0600, `record.json`): account, Worker, KV id, origin, the deployed version.

Run again, the same steps find everything in place: same Worker name and origin, the same KV
namespace and Durable Objects, no secret put; only a new version of the code is uploaded.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
import fcntl
import re
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herdr_mcp.edge_deploy.config import (
    KV_BINDING,
    PLACEHOLDER_KV_ID,
    committed_config,
    committed_kv_id,
    durable_object_classes,
    effective_config,
    migration_tags,
    write_config,
)
from herdr_mcp.edge_deploy.wrangler import (
    WRANGLER_OUTPUT_LIMITS,
    CloudflareRefused,
    EdgeDeployError,
    EdgeDeployUsage,
    Outcome,
    Wrangler,
)
from herdr_mcp.layout import Layout
from herdr_mcp.records import FailRule, RecordInvalid, RecordKind, atomic_write, read_capped
from herdr_mcp.strict_json import loads_bounded

SECRET_NAMES = ("ADMIN_SECRET", "EDGE_HMAC_KEY")
ADMIN_SECRET = "ADMIN_SECRET"  # noqa: S105 (a secret's name)
#: The Edge refuses secrets shorter than 32 characters (edge/README.md, step 5).
MIN_SECRET_CHARS = 32
RECORD = RecordKind("edge-deploy record", 64 * 1024, FailRule.CLOSED, schema_version=1)
WORKER_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
KV_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class DeployFiles:
    """The files of one Worker's deployment under the config dir (layout.py, edge-deploy/)."""

    directory: Path

    @property
    def record(self) -> Path:
        return self.directory / "record.json"

    @property
    def admin_secret(self) -> Path:
        return self.directory / "admin-secret"

    @property
    def wrangler_config(self) -> Path:
        return self.directory / "wrangler.json"

    @property
    def lock(self) -> Path:
        return self.directory / "deploy.lock"


@dataclass(frozen=True)
class DeployRequest:
    edge_dir: Path
    layout: Layout
    worker: str
    dry_run: bool = False
    kv_namespace_id: str | None = None
    env: dict[str, str] | None = None


def kv_title(worker: str) -> str:
    """The title of the KV namespace a deploy creates for `worker`."""
    return f"{worker}-{KV_BINDING}"


def run(request: DeployRequest) -> dict[str, Any]:
    """Deploy or reconcile (or, with `dry_run`, only bundle); the result as JSON-ready data.
    Raises EdgeDeployUsage (2), CloudflareRefused (3) or EdgeDeployError (4)."""
    wrangler = Wrangler.prepare(request.edge_dir, request.env)
    config = committed_config(request.edge_dir)
    files = DeployFiles(request.layout.edge_deploy_dir(request.worker))
    if request.dry_run:
        return _dry_run(wrangler, request, config, read_record(files.record))
    with _exclusive(files):
        return _Reconcile(wrangler, request, config, files, read_record(files.record)).run()


@contextlib.contextmanager
def _exclusive(files: DeployFiles) -> Iterator[None]:
    """One deploy of a Worker at a time on this workstation (two would both create a namespace)."""
    files.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(files.lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EdgeDeployError(
                "edge_deploy_busy",
                f"another `herdr-mcp edge deploy` of this Worker is running ({files.lock}); "
                "wait for it to finish",
            ) from None
        yield


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        return RECORD.read(path)
    except RecordInvalid as exc:
        raise EdgeDeployError(
            "edge_deploy_record_invalid",
            f"{exc.message}; it records where the Edge is deployed: repair it or move it away "
            "(the next deploy then finds the Worker by name)",
        ) from None


def deployed_admin_secret_file(layout: Layout, origin: str) -> Path | None:
    """The ADMIN_SECRET file a deploy kept for the Worker whose recorded origin is `origin`, or
    None (no such record, or the secret was set before a deploy kept it). A record that cannot
    be read is passed over here: `edge deploy` itself says what is wrong with it."""
    parent = layout.edge_deploy_dir("x").parent
    try:
        directories = sorted(entry for entry in parent.iterdir() if entry.is_dir())
    except OSError:
        return None
    for directory in directories:
        files = DeployFiles(directory)
        try:
            record = read_record(files.record)
        except EdgeDeployError:
            continue
        if record is not None and record.get("origin") == origin.rstrip("/") and files.admin_secret.is_file():
            return files.admin_secret
    return None


def _dry_run(
    wrangler: Wrangler, request: DeployRequest, config: dict[str, Any], record: dict[str, Any] | None
) -> dict[str, Any]:
    kv_id = (
        request.kv_namespace_id
        or (record or {}).get("kv_namespace_id")
        or committed_kv_id(config)
        or PLACEHOLDER_KV_ID
    )
    with tempfile.TemporaryDirectory(prefix="herdr-edge-dry-run-") as scratch:
        path = Path(scratch) / "wrangler.json"
        write_config(path, effective_config(request.edge_dir, config, request.worker, kv_id))
        done = wrangler.run(
            ["deploy", "--dry-run", "--config", str(path), "--outdir", str(Path(scratch) / "out")]
        )
        if done.returncode != 0:
            raise EdgeDeployError(
                "wrangler_dry_run_failed", f"wrangler deploy --dry-run failed: {done.failure()[1]}"
            )
    bindings = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("env.")]
    return {
        "dry_run": True,
        "worker": request.worker,
        "kv_namespace_id": kv_id,
        "bindings": [line.strip() for line in done.stdout.splitlines() if line.startswith("env.")],
        "binding_names": bindings,
        "durable_objects": durable_object_classes(config),
        "migrations": migration_tags(config),
        "record": str(DeployFiles(request.layout.edge_deploy_dir(request.worker)).record) if record else None,
        "wrangler_commands": wrangler.history,
    }


class _Reconcile:
    def __init__(
        self,
        wrangler: Wrangler,
        request: DeployRequest,
        config: dict[str, Any],
        files: DeployFiles,
        record: dict[str, Any] | None,
    ) -> None:
        self.wrangler = wrangler
        self.request = request
        self.config = config
        self.files = files
        self.record = record
        self.worker = request.worker
        self.created: list[str] = []
        self.reused: list[str] = []
        self.changed: list[str] = []

    def run(self) -> dict[str, Any]:
        accounts = self._accounts()
        account_id, existing = self._account(accounts)
        worker_existed = existing is not None
        kv_id, kv_name = self._kv_namespace(account_id, worker_existed)
        write_config(
            self.files.wrangler_config,
            effective_config(self.request.edge_dir, self.config, self.worker, kv_id),
        )
        deployed = self._deploy(account_id)
        (self.reused if worker_existed else self.created).append(f"Worker {self.worker}")
        targets = [t for t in deployed.get("targets") or [] if isinstance(t, str)]
        origin = next((t.rstrip("/") for t in targets if t.startswith("https://")), None)
        admin_known = self._secrets(account_id, existing or set())
        previous_origin = (self.record or {}).get("origin")
        if origin is not None and previous_origin not in (None, origin):
            self.changed.append(f"origin {previous_origin} -> {origin}")
        elif origin is not None and previous_origin == origin:
            self.reused.append(f"origin {origin}")
        version_id = deployed.get("version_id")
        self.changed.append(
            "Worker code: a new version uploaded" + (f" ({version_id})" if version_id else "")
        )
        durable = durable_object_classes(self.config)
        self.reused.append(
            f"Durable Objects {', '.join(durable)} (migrations {', '.join(migration_tags(self.config))})"
        )
        record = {
            "account_id": account_id,
            "account_name": accounts[account_id],
            "worker": self.worker,
            "kv_namespace_id": kv_id,
            "kv_title": kv_name,
            "origin": origin,
            "version_id": version_id,
            "edge_dir": str(self.request.edge_dir.resolve()),
            "deployed_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        RECORD.write(self.files.record, record)
        return {
            "worker": self.worker,
            "account": {"id": account_id, "name": accounts[account_id]},
            "origin": origin,
            "mcp_url": f"{origin}/mcp" if origin else None,
            "kv_namespace": {"id": kv_id, "title": kv_name},
            "durable_objects": durable,
            "migrations": migration_tags(self.config),
            "created": self.created,
            "reused": self.reused,
            "changed": self.changed,
            "admin_secret_file": str(self.files.admin_secret) if admin_known else None,
            "record": str(self.files.record),
            "config": str(self.files.wrangler_config),
            "wrangler_commands": self.wrangler.history,
        }

    # -- steps ------------------------------------------------------------------------------

    def _accounts(self) -> dict[str, str]:
        done = self.wrangler.run(["whoami", "--json"])
        document = _json(done.stdout)
        if isinstance(document, dict) and document.get("loggedIn") is False:
            raise EdgeDeployError(
                "cloudflare_not_logged_in",
                "wrangler is not logged in to Cloudflare; run `npx wrangler login` in the Edge's "
                "directory, or export CLOUDFLARE_API_TOKEN (template 'Edit Cloudflare Workers')",
            )
        if done.returncode != 0 or not isinstance(document, dict):
            raise _refused(done, "listing your Cloudflare accounts (wrangler whoami)", login=True)
        accounts = {
            str(a["id"]): str(a.get("name", ""))
            for a in document.get("accounts") or []
            if isinstance(a, dict) and isinstance(a.get("id"), str)
        }
        if not accounts:
            raise CloudflareRefused(
                "cloudflare_no_account",
                "this Cloudflare login can use no account; check the API token's account resources",
            )
        return accounts

    def _account(self, accounts: dict[str, str]) -> tuple[str, set[str] | None]:
        """The account to deploy to, and the Worker's secret names there (None: no Worker)."""
        env = self.wrangler.env
        # CF_ACCOUNT_ID is wrangler's older name of the variable (it still reads it).
        chosen = (env.get("CLOUDFLARE_ACCOUNT_ID") or env.get("CF_ACCOUNT_ID") or "").strip() or None
        recorded = (self.record or {}).get("account_id")
        listing = ", ".join(f"{i} ({n})" for i, n in sorted(accounts.items()))
        if chosen is not None:
            if chosen not in accounts:
                raise EdgeDeployUsage(
                    "cloudflare_account_unknown",
                    f"CLOUDFLARE_ACCOUNT_ID={chosen} is not an account this login can use; "
                    f"it can use {listing}",
                )
            if recorded is not None and recorded != chosen:
                raise EdgeDeployUsage(
                    "edge_account_differs",
                    f"Worker {self.worker} was deployed to account {recorded} ({self.files.record}); "
                    f"deploying it to {chosen} would make a second, empty Edge at another origin. "
                    "Unset CLOUDFLARE_ACCOUNT_ID, or pass --name for a new Edge",
                )
            return chosen, self._secret_names(chosen)
        if recorded is not None:
            if recorded not in accounts:
                raise EdgeDeployUsage(
                    "edge_account_unavailable",
                    f"Worker {self.worker} was deployed to account {recorded} ({self.files.record}), "
                    f"which this login cannot use (it can use {listing}); log in to that account",
                )
            return recorded, self._secret_names(recorded)
        if len(accounts) == 1:
            only = next(iter(accounts))
            return only, self._secret_names(only)
        # Asked of every account at once: each is a wrangler process of seconds.
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(accounts))) as pool:
            found = dict(zip(accounts, pool.map(self._secret_names, accounts), strict=True))
        holders = {account: names for account, names in found.items() if names is not None}
        if len(holders) == 1:
            account, names = next(iter(holders.items()))
            return account, names
        which = (
            f"Worker {self.worker} is in several of them ({', '.join(sorted(holders))})"
            if holders
            else f"none holds a Worker {self.worker} yet"
        )
        raise EdgeDeployUsage(
            "cloudflare_account_ambiguous",
            f"this login can use {len(accounts)} accounts ({listing}) and {which}; "
            "set CLOUDFLARE_ACCOUNT_ID to the one to deploy to",
        )

    def _secret_names(self, account_id: str) -> set[str] | None:
        done = self.wrangler.run(
            ["secret", "list", "--name", self.worker, "--format", "json"], account_id=account_id
        )
        if done.returncode != 0:
            _code, message = done.failure()
            # wrangler 4.86.0 turns the API's 10007 into this sentence (secret list's handler).
            if f'Worker "{self.worker}" not found' in message:
                return None
            raise _refused(done, f"listing the secrets of Worker {self.worker}")
        listed = _json(done.stdout)
        if not isinstance(listed, list):
            raise _refused(done, f"listing the secrets of Worker {self.worker}")
        return {str(s["name"]) for s in listed if isinstance(s, dict) and "name" in s}

    def _kv_namespace(self, account_id: str, worker_exists: bool) -> tuple[str, str]:
        done = self.wrangler.run(["kv", "namespace", "list"], account_id=account_id)
        listed = _json(done.stdout)
        if done.returncode != 0 or not isinstance(listed, list):
            raise _refused(done, "listing the account's KV namespaces")
        titles = {str(n["id"]): str(n.get("title", "")) for n in listed if isinstance(n, dict) and "id" in n}
        recorded = (self.record or {}).get("kv_namespace_id")
        explicit = self.request.kv_namespace_id
        if explicit is not None:
            if explicit not in titles:
                raise EdgeDeployUsage(
                    "kv_namespace_unknown",
                    f"--kv-namespace-id {explicit} is not a KV namespace of account {account_id}",
                )
            if recorded is not None and recorded != explicit:
                raise EdgeDeployUsage(
                    "edge_kv_differs",
                    f"Worker {self.worker} uses KV namespace {recorded}; binding {explicit} instead "
                    "would lose every connector's grant. Leave out --kv-namespace-id",
                )
            return self._reuse_kv(explicit, titles[explicit], "--kv-namespace-id")
        if recorded is not None:
            if recorded not in titles:
                raise CloudflareRefused(
                    "edge_kv_missing",
                    f"the KV namespace {recorded} recorded for Worker {self.worker} is not in account "
                    f"{account_id} any more; pass --kv-namespace-id to bind another one (connectors "
                    "then sign in again)",
                )
            return self._reuse_kv(recorded, titles[recorded], "the record")
        committed = committed_kv_id(self.config)
        if committed is not None and committed in titles:
            return self._reuse_kv(committed, titles[committed], "wrangler.jsonc")
        title = kv_title(self.worker)
        by_title = [i for i, t in titles.items() if t == title]
        if by_title:
            return self._reuse_kv(by_title[0], title, "its title")
        if worker_exists:
            raise EdgeDeployUsage(
                "edge_kv_unknown",
                f"Worker {self.worker} exists in account {account_id}, but which KV namespace it "
                f"binds as {KV_BINDING} is not known here (no record, no namespace titled {title}); "
                "pass --kv-namespace-id <id> (`npx wrangler kv namespace list` lists them) so its "
                "connectors' grants are kept",
            )
        made = self.wrangler.run(["kv", "namespace", "create", title], account_id=account_id)
        if made.returncode != 0:
            raise _refused(made, f"creating the KV namespace {title}")
        again = self.wrangler.run(["kv", "namespace", "list"], account_id=account_id)
        relisted = _json(again.stdout)
        found = [
            str(n["id"])
            for n in relisted or []
            if isinstance(n, dict) and n.get("title") == title and "id" in n
        ]
        if again.returncode != 0 or not found:
            raise _refused(again, f"finding the new KV namespace {title}")
        self.created.append(f"KV namespace {KV_BINDING} {found[0]} ({title})")
        return found[0], title

    def _reuse_kv(self, kv_id: str, title: str, source: str) -> tuple[str, str]:
        self.reused.append(f"KV namespace {KV_BINDING} {kv_id} ({title}; from {source})")
        return kv_id, title

    def _deploy(self, account_id: str) -> dict[str, Any]:
        done = self.wrangler.run(
            ["deploy", "--config", str(self.files.wrangler_config)], account_id=account_id
        )
        entry = done.entry("deploy")
        if done.returncode != 0 or entry is None:
            raise _refused(done, f"deploying Worker {self.worker}")
        return entry

    def _secrets(self, account_id: str, present: set[str]) -> bool:
        """Put the missing secrets; whether ADMIN_SECRET's value is in the local file."""
        admin_file = self.files.admin_secret
        stored = _stored_secret(admin_file)
        for name in SECRET_NAMES:
            if name in present:
                self.reused.append(f"secret {name} (kept, never replaced)")
                continue
            if name == ADMIN_SECRET:
                value = stored or secrets.token_urlsafe(32)
                if stored is None:
                    atomic_write(admin_file, value.encode() + b"\n")
                    stored = value
            else:
                value = secrets.token_urlsafe(32)
            done = self.wrangler.run(
                ["secret", "put", name, "--config", str(self.files.wrangler_config)],
                account_id=account_id,
                stdin=value,
            )
            del value
            if done.returncode != 0:
                raise _refused(done, f"setting the secret {name}")
            self.created.append(f"secret {name}")
        return stored is not None


def _stored_secret(path: Path) -> str | None:
    data = read_capped(path, 4096)
    if data is None:
        return None
    value = data.decode("utf-8", errors="replace").strip()
    if len(value) < MIN_SECRET_CHARS:
        raise EdgeDeployError(
            "admin_secret_invalid",
            f"{path} holds no ADMIN_SECRET of at least {MIN_SECRET_CHARS} characters; move it away",
        )
    return value


def _json(text: str) -> Any:
    """wrangler's JSON output, or None when it is not JSON or passes `WRANGLER_OUTPUT_LIMITS`."""
    try:
        return loads_bounded(text, WRANGLER_OUTPUT_LIMITS, strict=False)
    except ValueError:
        return None


#: How a request that never got an answer reads in wrangler's failure (undici's "fetch failed",
#: Node's socket errors).
_UNREACHABLE = ("fetch failed", "econnrefused", "enotfound", "etimedout", "econnreset", "eai_again")


def _refused(done: Outcome, step: str, *, login: bool = False) -> CloudflareRefused | EdgeDeployError:
    """The one-line failure of a wrangler step (`login`: the step that checks the login)."""
    code, message = done.failure()
    lowered = message.lower()
    if "not authenticated" in lowered or "cloudflare_api_token" in lowered or (login and code == 10000):
        return EdgeDeployError(
            "cloudflare_not_logged_in",
            f"{step}: Cloudflare refused the login ({message}); run `npx wrangler login` in the "
            "Edge's directory, or export a valid CLOUDFLARE_API_TOKEN",
        )
    if code == 10000:
        # The API's answer to missing, expired or insufficient credentials for one request.
        return CloudflareRefused(
            "cloudflare_not_authorized",
            f"{step}: Authentication error [code: 10000]; the login or API token lacks the "
            "permission for this (an API token from the 'Edit Cloudflare Workers' template has them)",
            api_code=code,
        )
    if code is None and any(sign in lowered for sign in _UNREACHABLE):
        return EdgeDeployError(
            "cloudflare_unreachable",
            f"{step}: the Cloudflare API did not answer ({message}); check the network (and any "
            "HTTPS_PROXY) and try again",
        )
    where = f" [code: {code}]" if code is not None else ""
    return CloudflareRefused("cloudflare_api_refused", f"{step}: {message}{where}", api_code=code)
