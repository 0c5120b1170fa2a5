"""A STAND-IN for the Cloudflare API v4 on loopback, for `herdr-mcp edge deploy`'s tests: the
endpoints wrangler 4.86.0's `whoami`, `deploy`, `kv namespace` and `secret` commands call, each
built from Cloudflare's public API documentation (named beside it), never from what our code
sends. Every request is recorded (`calls`): method, path, query and body, a secret's text
included, so a test can show which calls a run made and that a secret went only where it should.

Wrangler is pointed here by `CLOUDFLARE_API_BASE_URL` (wrangler-dist/cli.js, 4.86.0, line 37241:
`getCloudflareApiBaseUrlFromEnv`, read by `getCloudflareApiBaseUrl` on the next line, which every
`fetchResult` uses) set to `CloudflareApi.base_url`, and authenticates with `CLOUDFLARE_API_TOKEN`
(a bearer token; a wrong one is refused as the API refuses it, below).

The envelope of every answer (https://developers.cloudflare.com/fundamentals/api/how-to/make-api-calls/,
and the published schema `api-response-common`: required `success`, `errors`, `messages`,
`result`): `{"success", "errors": [{"code", "message"}], "messages", "result"}`, lists with
`result_info` `{page, per_page, count, total_count, total_pages}`. An unknown route is HTTP 404
with error code 7003 "No route for the URI" (the schema's failure example).

Endpoints (https://developers.cloudflare.com/api/ pages named per handler):

- GET  /user/tokens/verify                          user/subresources/tokens/methods/verify
- GET  /user                                        user/methods/get
- GET  /accounts                                    accounts/methods/list (paginated)
- GET  /memberships                                 memberships/methods/list (paginated)
- GET  /accounts/{a}/workers/subdomain              workers/subresources/subdomains/methods/get
- GET  /accounts/{a}/workers/scripts                workers/subresources/scripts/methods/list
- GET  /accounts/{a}/workers/services/{s}           the official client's resources/workers/services
- PUT  /accounts/{a}/workers/scripts/{s}            workers/subresources/scripts/methods/update
                                                    (multipart: a `metadata` part, see
                                                    /workers/configuration/multipart-upload-metadata/):
                                                    a new version, deployed at once
- GET  /accounts/{a}/workers/scripts/{s}/settings   .../scripts/subresources/
                                                    script_and_version_settings/methods/get
- PATCH /accounts/{a}/workers/scripts/{s}/script-settings
                                                    .../scripts/subresources/script_settings/methods/edit
- POST /accounts/{a}/workers/scripts/{s}/versions   .../scripts/subresources/versions/methods/create
                                                    (the same multipart; a version, not deployed)
- GET  /accounts/{a}/workers/scripts/{s}/versions/{v}  .../versions/methods/get
- GET|POST /accounts/{a}/workers/scripts/{s}/deployments
                                                    .../scripts/subresources/deployments/methods/list|create
- GET|POST /accounts/{a}/workers/scripts/{s}/subdomain   .../scripts/subresources/subdomain
- GET|PUT  /accounts/{a}/workers/scripts/{s}/secrets     .../scripts/subresources/secrets
- GET|POST /accounts/{a}/storage/kv/namespaces      kv/subresources/namespaces/methods/list|create

A script that does not exist is error 10007 (the code wrangler itself tests for,
`WORKER_NOT_FOUND_ERR_CODE` in wrangler-dist/cli.js), HTTP 404. The other error codes with a
source named beside them are the API's; 10019, 10021 and 10079 (a malformed request, a
migration whose old_tag is not the script's) are this stand-in's own choice, and no test or
code here depends on their numbers.
"""

from __future__ import annotations

import contextlib
import email.parser
import email.policy
import http.server
import json
import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

PREFIX = "/client/v4"
NO_ROUTE = (7003, "No route for the URI")
SCRIPT_NOT_FOUND = 10007
#: The documented default and maximum page sizes of the list endpoints (accounts: 20 / 50).
DEFAULT_PER_PAGE = 20


@dataclass
class Call:
    """One request the stand-in received."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes
    content_type: str
    user_agent: str = ""

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    def multipart(self) -> dict[str, bytes]:
        """The parts of a multipart/form-data body, by name."""
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + self.content_type.encode() + b"\r\n\r\n" + self.body
        )
        parts: dict[str, bytes] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            parts[str(name)] = payload if isinstance(payload, bytes) else b""
        return parts


@dataclass
class Script:
    """A Worker as the API keeps it."""

    id: str
    tag: str
    etag: str
    created_on: str
    modified_on: str
    metadata: dict[str, Any]
    modules: list[str]
    migration_tag: str | None = None
    #: Secrets by name: their text (the API never returns it; the stand-in keeps it for tests).
    secrets: dict[str, str] = field(default_factory=dict)
    subdomain_enabled: bool = False
    #: The script object's `last_deployed_from` ("the client most recently used to deploy
    #: this Worker"): "wrangler" for an upload whose User-Agent is wrangler's, else "api" (an
    #: inference: the docs name the field, not how the API tells the clients apart).
    last_deployed_from: str = "api"
    #: Its deployments, newest first: each {id, created_on, source, strategy, versions}.
    deployments: list[dict[str, Any]] = field(default_factory=list)
    #: Its versions by id: metadata, modules, secrets, source, created_on.
    versions: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Its script-level settings (logpush, observability, tail_consumers, tags).
    script_settings: dict[str, Any] = field(default_factory=dict)

    def bindings(self) -> list[dict[str, Any]]:
        """The script's bindings: its metadata's (secrets aside) and its secrets."""
        listed = [b for b in self.metadata.get("bindings", []) if b.get("type") != "secret_text"]
        return listed + [
            {"type": "secret_text", "name": n, "text": t} for n, t in sorted(self.secrets.items())
        ]

    def listed(self) -> dict[str, Any]:
        entry = {
            "id": self.id,
            "tag": self.tag,
            "etag": self.etag,
            "created_on": self.created_on,
            "modified_on": self.modified_on,
            "handlers": ["fetch"],
            "compatibility_date": self.metadata.get("compatibility_date"),
            "compatibility_flags": self.metadata.get("compatibility_flags", []),
            "usage_model": "standard",
            "last_deployed_from": self.last_deployed_from,
        }
        if self.migration_tag is not None:
            entry["migration_tag"] = self.migration_tag
        return entry


@dataclass
class Account:
    id: str
    name: str
    subdomain: str
    scripts: dict[str, Script] = field(default_factory=dict)
    #: KV namespaces: id -> title.
    namespaces: dict[str, str] = field(default_factory=dict)


class ApiError(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _without_text(binding: dict[str, Any]) -> dict[str, Any]:
    """A binding as the API shows it: a secret's text is never returned."""
    return {k: v for k, v in binding.items() if not (binding.get("type") == "secret_text" and k == "text")}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


def _hex_id() -> str:
    return secrets.token_hex(16)


class CloudflareApi:
    """The stand-in: its accounts, the token it accepts, the calls it saw. A context manager
    serving on a free loopback port until the block ends."""

    def __init__(self, accounts: list[tuple[str, str]], token: str = "test-api-token") -> None:
        self.token = token
        self.accounts: dict[str, Account] = {
            account_id: Account(account_id, name, f"sub-{name.lower().replace(' ', '-')}")
            for account_id, name in accounts
        }
        self.calls: list[Call] = []
        #: Refusals a test plays: (method, path suffix) -> (HTTP status, code, message), answered
        #: in the API's error envelope, as a token without the right permission is refused.
        self.refusals: dict[tuple[str, str], tuple[int, int, str]] = {}
        self.email = "owner@example.com"
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}{PREFIX}"

    def __enter__(self) -> CloudflareApi:
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                url = urlsplit(self.path)
                call = Call(
                    self.command,
                    url.path,
                    parse_qs(url.query),
                    body,
                    self.headers.get("Content-Type", ""),
                    self.headers.get("User-Agent", ""),
                )
                status, document = api.answer(call, self.headers.get("Authorization"))
                payload = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_PUT = do_POST = do_PATCH = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    # -- what a test reads ---------------------------------------------------------------

    def requests(self, method: str | None = None, suffix: str = "") -> list[Call]:
        """The recorded calls (with this method, whose path ends with `suffix`)."""
        with self._lock:
            return [
                c for c in self.calls if (method is None or c.method == method) and c.path.endswith(suffix)
            ]

    def uploads(self) -> list[tuple[Call, dict[str, Any]]]:
        """Every script upload and its metadata part."""
        found = []
        for call in self.requests("PUT"):
            parts = call.path[len(PREFIX) :].strip("/").split("/")
            if len(parts) == 5 and parts[2:4] == ["workers", "scripts"]:
                found.append((call, json.loads(call.multipart()["metadata"])))
        return found

    # -- the API ---------------------------------------------------------------------------

    def answer(self, call: Call, authorization: str | None) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.calls.append(call)
            try:
                if authorization != f"Bearer {self.token}":
                    # A missing or wrong token: code 10000 "Authentication error" (as wrangler
                    # users quote it: cloudflare/workers-sdk issues #2863, #3582).
                    raise ApiError(403, 10000, "Authentication error")
                if not call.path.startswith(PREFIX + "/"):
                    raise ApiError(404, *NO_ROUTE)
                for (method, suffix), refusal in self.refusals.items():
                    if call.method == method and call.path.endswith(suffix):
                        raise ApiError(*refusal)
                result, info = self._route(call, call.path[len(PREFIX) :].strip("/").split("/"))
            except ApiError as exc:
                return exc.status, {
                    "success": False,
                    "errors": [{"code": exc.code, "message": exc.message}],
                    "messages": [],
                    "result": None,
                }
            document: dict[str, Any] = {"success": True, "errors": [], "messages": [], "result": result}
            if info is not None:
                document["result_info"] = info
            return 200, document

    def _route(self, call: Call, parts: list[str]) -> tuple[Any, dict[str, Any] | None]:
        method = call.method
        if parts == ["user", "tokens", "verify"] and method == "GET":
            # user/subresources/tokens/methods/verify: the token's id and status.
            return {"id": "token-id", "status": "active"}, None
        if parts == ["user"] and method == "GET":
            # user/methods/get: the user's details.
            return {"id": "user-id", "email": self.email}, None
        if parts == ["accounts"] and method == "GET":
            # accounts/methods/list: id, name, type, settings, created_on; paginated.
            listed = [
                {"id": a.id, "name": a.name, "type": "standard", "settings": {}, "created_on": _now()}
                for a in self.accounts.values()
            ]
            return self._page(call, listed)
        if parts == ["memberships"] and method == "GET":
            # memberships/methods/list: the user's memberships with their account and roles.
            listed = [
                {
                    "id": f"membership-{a.id}",
                    "account": {"id": a.id, "name": a.name},
                    "status": "accepted",
                    "roles": ["Super Administrator - All Privileges"],
                }
                for a in self.accounts.values()
            ]
            return self._page(call, listed)
        if len(parts) >= 2 and parts[0] == "accounts":
            account = self.accounts.get(parts[1])
            if account is None:
                # An account the token cannot reach: code 9109 "Unauthorized to access requested
                # resource" (the API's answer for an account not the token's).
                raise ApiError(403, 9109, "Unauthorized to access requested resource")
            return self._account(call, account, parts[2:])
        raise ApiError(404, *NO_ROUTE)

    def _account(self, call: Call, account: Account, parts: list[str]) -> tuple[Any, dict[str, Any] | None]:
        method = call.method
        if parts == ["workers", "subdomain"] and method == "GET":
            # workers/subresources/subdomains/methods/get: the account's workers.dev subdomain.
            return {"subdomain": account.subdomain}, None
        if parts == ["workers", "scripts"] and method == "GET":
            # workers/subresources/scripts/methods/list: the account's scripts (with migration_tag).
            return [script.listed() for script in account.scripts.values()], None
        if len(parts) >= 3 and parts[:2] == ["workers", "scripts"]:
            return self._script(call, account, parts[2], parts[3:])
        if len(parts) == 3 and parts[:2] == ["workers", "services"] and method == "GET":
            # workers/subresources/services (the official client's resources/workers/services,
            # cloudflare@3.0.0): a Worker as a service, its default environment's script.
            script = account.scripts.get(parts[2])
            if script is None:
                raise ApiError(404, SCRIPT_NOT_FOUND, "This Worker does not exist on your account.")
            return {
                "id": script.id,
                "default_environment": {
                    "environment": "production",
                    "created_on": script.created_on,
                    "modified_on": script.modified_on,
                    "script": script.listed(),
                },
                "created_on": script.created_on,
                "modified_on": script.modified_on,
            }, None
        if parts == ["storage", "kv", "namespaces"]:
            if method == "GET":
                # kv/subresources/namespaces/methods/list: id, title, supports_url_encoding; paged.
                listed = [
                    {"id": nid, "title": title, "supports_url_encoding": True}
                    for nid, title in account.namespaces.items()
                ]
                return self._page(call, listed)
            if method == "POST":
                # .../namespaces/methods/create: "Creates a namespace under the given title. A 400
                # is returned if the account already owns a namespace with this title."
                title = (call.json() or {}).get("title")
                if not isinstance(title, str) or not title:
                    raise ApiError(400, 10019, "title is required")
                if title in account.namespaces.values():
                    # The API's words and code (quoted in cloudflare/workers-sdk issue #13242).
                    raise ApiError(400, 10014, "a namespace with this account ID and title already exists")
                namespace_id = _hex_id()
                account.namespaces[namespace_id] = title
                return {"id": namespace_id, "title": title, "supports_url_encoding": True}, None
        raise ApiError(404, *NO_ROUTE)

    def _script(
        self, call: Call, account: Account, name: str, rest: list[str]
    ) -> tuple[Any, dict[str, Any] | None]:
        method = call.method
        script = account.scripts.get(name)
        if not rest and method == "PUT":
            return self._upload(call, account, name, script), None
        if script is None:
            raise ApiError(404, SCRIPT_NOT_FOUND, "This Worker does not exist on your account.")
        if rest == ["subdomain"]:
            # .../scripts/subresources/subdomain: get, or post {enabled, previews_enabled}.
            if method == "POST":
                body = call.json() or {}
                script.subdomain_enabled = bool(body.get("enabled"))
            elif method != "GET":
                raise ApiError(404, *NO_ROUTE)
            return {"enabled": script.subdomain_enabled, "previews_enabled": script.subdomain_enabled}, None
        if rest == ["settings"] and method == "GET":
            # .../scripts/subresources/script_and_version_settings/methods/get: the bindings (a
            # secret by name and type only), compatibility, observability, tags.
            return {
                "bindings": [_without_text(b) for b in script.bindings()],
                "compatibility_date": script.metadata.get("compatibility_date"),
                "compatibility_flags": script.metadata.get("compatibility_flags", []),
                "observability": script.metadata.get("observability", {"enabled": False}),
                "logpush": False,
                "tags": [],
                "tail_consumers": [],
                "usage_model": "standard",
                "placement": {},
            }, None
        if rest == ["deployments"] and method == "GET":
            # .../scripts/subresources/deployments/methods/list: {deployments}, newest first,
            # each with the versions it routes to and their percentages.
            return {"deployments": script.deployments}, None
        if rest == ["deployments"] and method == "POST":
            # .../deployments/methods/create: {strategy: "percentage", versions: [{version_id,
            # percentage}], annotations}; the percentages add up to 100.
            body = call.json() or {}
            routed = body.get("versions") or []
            if body.get("strategy") != "percentage" or not routed:
                raise ApiError(400, 10021, "a deployment needs strategy percentage and its versions")
            if sum(float(v.get("percentage", 0)) for v in routed) != 100.0:
                raise ApiError(400, 10021, "the versions' percentages must add up to 100")
            unknown = [v.get("version_id") for v in routed if v.get("version_id") not in script.versions]
            if unknown:
                raise ApiError(404, 10007, f"no such version: {unknown[0]}")
            if len(routed) != 1:
                raise ApiError(400, 10021, "this stand-in deploys one version at a time")
            return self._deploy(
                script, routed[0]["version_id"], script.versions[routed[0]["version_id"]]["source"]
            ), None
        if rest == ["versions"] and method == "POST":
            # .../versions/methods/create: "Upload a Worker Version without deploying".
            version = self._version(call, account, script)
            if version["metadata"].get("migrations") is not None:
                raise ApiError(400, 10021, "a version upload cannot carry Durable Object migrations")
            script.versions[version["id"]] = version
            return {
                "id": version["id"],
                "number": len(script.versions),
                "metadata": {"created_on": version["created_on"], "source": version["source"]},
                "resources": {"script": {"etag": _hex_id(), "handlers": ["fetch"]}},
                "startup_time_ms": 1,
            }, None
        if len(rest) == 2 and rest[0] == "versions" and method == "GET":
            # .../scripts/subresources/versions/methods/get: one version's metadata and resources.
            found = script.versions.get(rest[1])
            if found is None:
                raise ApiError(404, 10007, "This version does not exist.")
            return {
                "id": rest[1],
                "number": list(script.versions).index(rest[1]) + 1,
                "metadata": {"created_on": found["created_on"], "source": found["source"]},
                "resources": {
                    "bindings": [_without_text(b) for b in found["metadata"].get("bindings", [])],
                    "script": {"etag": script.etag, "handlers": ["fetch"]},
                    "script_runtime": {
                        "compatibility_date": found["metadata"].get("compatibility_date"),
                        "compatibility_flags": found["metadata"].get("compatibility_flags", []),
                    },
                },
            }, None
        if rest == ["script-settings"] and method == "PATCH":
            # .../script_settings/methods/edit: logpush, observability, tail_consumers, tags
            # (settings not versioned with the code); answers the settings.
            body = call.json() or {}
            script.script_settings.update(body)
            return dict(script.script_settings), None
        if rest == ["secrets"]:
            if method == "GET":
                # .../secrets/methods/list: name and type of each secret, never its text.
                return [{"name": n, "type": "secret_text"} for n in sorted(script.secrets)], None
            if method == "PUT":
                # .../secrets/methods/update: {name, text, type: "secret_text"}; answers name, type.
                body = call.json() or {}
                if body.get("type") != "secret_text" or not isinstance(body.get("name"), str):
                    raise ApiError(400, 10021, "a secret needs a name, a text and type secret_text")
                script.secrets[body["name"]] = str(body.get("text", ""))
                if script.deployments:
                    active = script.deployments[0]["versions"][0]["version_id"]
                    script.versions[active]["secrets"] = dict(script.secrets)
                return {"name": body["name"], "type": "secret_text"}, None
        raise ApiError(404, *NO_ROUTE)

    def _version(self, call: Call, account: Account, script: Script | None) -> dict[str, Any]:
        """A version from a multipart upload (scripts/methods/update and versions/methods/create
        take the same body): a `metadata` part holding main_module, bindings,
        compatibility_date/flags, `migrations` ({old_tag, new_tag, steps}: the Durable Object
        migrations to apply, old_tag the script's current tag), and one part per module."""
        if "multipart/form-data" not in call.content_type:
            raise ApiError(400, 10021, "a script upload is multipart/form-data")
        parts = call.multipart()
        if "metadata" not in parts:
            raise ApiError(400, 10021, "the upload has no metadata part")
        metadata = json.loads(parts["metadata"])
        main_module = metadata.get("main_module")
        if main_module not in parts:
            raise ApiError(400, 10021, f"main_module {main_module!r} is not a part of the upload")
        for binding in metadata.get("bindings", []):
            if (
                binding.get("type") == "kv_namespace"
                and binding.get("namespace_id") not in account.namespaces
            ):
                # A KV binding must name a namespace of the account: the API refuses the upload
                # with code 10042 (quoted in cloudflare/workers-sdk issue #14249, 2026).
                raise ApiError(
                    400,
                    10042,
                    f"KV namespace '{binding.get('namespace_id')}' is not valid. Please verify the "
                    "namespace_id in your configuration.",
                )
        # A new version inherits the previous one's secrets unless it names them itself: secrets
        # persist across deploys (https://developers.cloudflare.com/workers/configuration/secrets/;
        # wrangler 4.74.0's release notes: "Secrets not included in the file will be inherited
        # from the previous version"). keep_bindings is for the other types (plain_text, json).
        secrets_kept = dict(script.secrets) if script is not None else {}
        for binding in metadata.get("bindings", []):
            if binding.get("type") == "secret_text":
                secrets_kept[binding["name"]] = binding.get("text", "")
        return {
            "id": str(uuid.uuid4()),
            "created_on": _now(),
            "metadata": metadata,
            "modules": sorted(k for k in parts if k != "metadata"),
            "secrets": secrets_kept,
            "source": "wrangler" if call.user_agent.startswith("wrangler") else "api",
        }

    def _upload(self, call: Call, account: Account, name: str, script: Script | None) -> dict[str, Any]:
        """scripts/methods/update: a new version (`_version`), deployed to all traffic at once;
        the migrations in its metadata are applied (old_tag must be the script's current tag)."""
        version = self._version(call, account, script)
        migration_tag = script.migration_tag if script is not None else None
        migrations = version["metadata"].get("migrations")
        if migrations is not None:
            if migrations.get("old_tag") != migration_tag:
                raise ApiError(
                    400,
                    10079,
                    f"migration old_tag {migrations.get('old_tag')!r} does not match the script's "
                    f"current tag {migration_tag!r}",
                )
            migration_tag = migrations.get("new_tag")
        now = _now()
        if script is None:
            script = Script(
                id=name, tag=_hex_id(), etag="", created_on=now, modified_on=now, metadata={}, modules=[]
            )
            account.scripts[name] = script
        script.migration_tag = migration_tag
        script.versions[version["id"]] = version
        self._deploy(script, version["id"], version["source"])
        # The answer is the script object; `deployment_id` names what this upload deployed.
        return {**script.listed(), "deployment_id": version["id"]}

    def _deploy(self, script: Script, version_id: str, source: str) -> dict[str, Any]:
        """Route all traffic to `version_id`: a new deployment, newest first."""
        version = script.versions[version_id]
        now = _now()
        deployment = {
            "id": str(uuid.uuid4()),
            "created_on": now,
            "source": source,
            "strategy": "percentage",
            "author_email": self.email,
            "annotations": {},
            "versions": [{"version_id": version_id, "percentage": 100.0}],
        }
        script.deployments.insert(0, deployment)
        script.metadata = version["metadata"]
        script.modules = version["modules"]
        script.secrets = dict(version["secrets"])
        script.etag = _hex_id()
        script.modified_on = now
        script.last_deployed_from = source
        return deployment

    def _page(self, call: Call, items: list[Any]) -> tuple[list[Any], dict[str, Any]]:
        page = int(call.query.get("page", ["1"])[0])
        per_page = int(call.query.get("per_page", [str(DEFAULT_PER_PAGE)])[0])
        chunk = items[(page - 1) * per_page : page * per_page]
        total_pages = max(1, -(-len(items) // per_page))
        return chunk, {
            "page": page,
            "per_page": per_page,
            "count": len(chunk),
            "total_count": len(items),
            "total_pages": total_pages,
        }


@contextlib.contextmanager
def cloudflare_api(accounts: list[tuple[str, str]]) -> Iterator[CloudflareApi]:
    with CloudflareApi(accounts) as api:
        yield api
