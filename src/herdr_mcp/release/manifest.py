"""`runtime-manifest.json`: what a release says about itself, and the one parser that reads it.

A workstation trusts a release only through its manifest (SPEC 5 and 6), so this module is strict:

- `RuntimeManifest.from_bytes` is the one parse boundary for untrusted bytes. It raises one domain
  error, `ManifestError`, with a stable code: `evidence_too_large`, `manifest_not_json`,
  `manifest_duplicate_key`, `manifest_float`, `manifest_integer_too_large`, `manifest_type`,
  `manifest_unknown_field`, `manifest_missing_field` or `manifest_value`. Unknown fields are
  refused at every depth (fail closed), and so are floats and integers beyond 2^53 - 1 (so every
  JSON implementation reads the same numbers).
- Every dataclass here validates itself on construction: a value that exists is well-formed,
  whether it came from the parser or from `build_manifest` (`release.manifest_build`, the
  maintainer's side that writes a manifest from the tree and git).
- `RuntimeManifest.to_bytes` is the canonical form: RFC 8785 (JCS) serialization followed by one
  LF. Building the same release twice gives the same bytes, which are the bytes that get signed.
  The parser accepts any JSON spelling (signatures cover the exact bytes as published, and are
  checked before parsing), but we only ever publish the canonical one.

What the parser deliberately does not decide is admission (SPEC 6): whether a contract migration
fits *this* workstation is the updater's question.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

import rfc8785

from herdr_mcp.contract import ContractIdentity, ContractIdentityInvalid, parse_identity
from herdr_mcp.errors import RefusedFault
from herdr_mcp.release.evidence import EVIDENCE_TOO_LARGE, too_large_message
from herdr_mcp.release.versions import release_version
from herdr_mcp.strict_json import JsonLimitExceeded, JsonLimits, check_bounds

#: The file name a release publishes its manifest under.
MANIFEST_FILENAME = "runtime-manifest.json"
SCHEMA_VERSION = 1
PRODUCT = "herdr-mcp"
#: The largest integer every JSON implementation reads exactly (IEEE 754 doubles, RFC 8785 3.2.2.3).
MAX_SAFE_INTEGER = 2**53 - 1
#: A manifest lists a handful of assets (about 400 bytes each); 1 MiB is far beyond any real one
#: and small enough to refuse before parsing.
MAX_MANIFEST_BYTES = 1024 * 1024
#: Its structure (docs/runtime.md "Parse boundaries"): a handful of assets of ~10 fields each.
MANIFEST_LIMITS = JsonLimits(max_bytes=MAX_MANIFEST_BYTES, max_items=10_000)
#: Longest accepted asset URL (browsers and proxies handle 2 KiB URLs everywhere).
MAX_URL_LENGTH = 2048

AssetKind = Literal["wheel", "sdist", "bundle"]
ASSET_KINDS: tuple[AssetKind, ...] = ("wheel", "sdist", "bundle")
#: GitHub's OIDC `runner_environment` claim takes exactly these values.
RUNNER_ENVIRONMENTS = ("github-hosted", "self-hosted")

RELEASE_WORKFLOW = ".github/workflows/release.yml"
GITHUB_OIDC_ISSUER = "https://token.actions.githubusercontent.com"
SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"

# The shapes below are mirrored in manifests/runtime-manifest.schema.json; tests/release/test_manifest.py
# checks that the two agree. Patterns are applied with `fullmatch`.
_SEMVER_CORE = r"(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)"
_SEMVER_IDENT = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_SEMVER = rf"{_SEMVER_CORE}(?:-{_SEMVER_IDENT}(?:\.{_SEMVER_IDENT})*)?"
_VERSION = re.compile(_SEMVER)
_MAX_VERSION_LENGTH = 64
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{40}")
# GitHub: owner 1-39 alphanumerics or '-', repository name 1-100 of [A-Za-z0-9._-] but not "." or "..".
_REPOSITORY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,38}/(?!\.\.?$)[A-Za-z0-9._-]{1,100}")
_WORKFLOW = re.compile(r"\.github/workflows/[A-Za-z0-9._-]+\.ya?ml")
_HTTPS_URL = re.compile(r"https://[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*(?:/[A-Za-z0-9._~%+-]*)*")
_ASSET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,254}")
_TARGET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_T = TypeVar("_T")


class ManifestError(RefusedFault):
    """A manifest (or an input to building one) that cannot be trusted as given.

    `code` is stable (see the module docstring and `manifest_build.build_manifest`); `field` is
    the JSON path of the offending value when there is one (`assets[1].sha256`); `message` says
    what is wrong and names that path.
    """

    def __init__(self, code: str, message: str, *, field: str | None = None) -> None:
        self.code = code
        self.detail = message
        self.field = field
        super().__init__(code, f"{field}: {message}" if field else message)

    def within(self, parent: str) -> ManifestError:
        """The same error, its field path prefixed by `parent` (`assets[0]`, `contract`)."""
        if self.field is None:
            joined = parent
        elif self.field.startswith("["):
            joined = parent + self.field
        else:
            joined = f"{parent}.{self.field}"
        return ManifestError(self.code, self.detail, field=joined)

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


# --- value checks shared by the dataclasses ---------------------------------------------------


def _shown(value: object) -> str:
    """A value for an error message, cut short: messages must not echo megabytes back."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_int(value: object, name: str, *, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ManifestError("manifest_type", "must be an integer", field=name)
    if abs(value) > MAX_SAFE_INTEGER:
        raise ManifestError("manifest_integer_too_large", f"exceeds 2^53 - 1 ({value})", field=name)
    if value < minimum:
        raise ManifestError("manifest_value", f"must be at least {minimum}, not {value}", field=name)


def _check_str(value: object, name: str, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str):
        raise ManifestError("manifest_type", "must be a string", field=name)
    if pattern.fullmatch(value) is None:
        raise ManifestError("manifest_value", f"must be {what}, not {_shown(value)}", field=name)
    return value


def _check_identity(identity: object, name: str) -> None:
    """An identity built in code obeys the rule a parsed one does (`contract.parse_identity`)."""
    if not isinstance(identity, ContractIdentity):
        raise ManifestError("manifest_type", "must be a contract identity", field=name)
    _identity_from(identity.to_dict(), name)


def _check_version(value: object, name: str) -> None:
    text = _check_str(value, name, _VERSION, "a semantic version MAJOR.MINOR.PATCH[-PRERELEASE]")
    if len(text) > _MAX_VERSION_LENGTH:
        raise ManifestError("manifest_value", f"longer than {_MAX_VERSION_LENGTH} characters", field=name)
    if release_version(text) is None:
        raise ManifestError(
            "manifest_value",
            f"{text!r} is not a release version that semver and PEP 440 read alike, spelled one way "
            "(prereleases are -alpha.N, -beta.N, -rc.N, optionally followed by .dev.N, or -dev.N)",
            field=name,
        )


# --- the manifest model ------------------------------------------------------------------------


@dataclass(frozen=True)
class ContractMigration:
    """`contract_migration`: this release moves the contract exactly one epoch forward."""

    from_contract: ContractIdentity
    state_schema_from: int

    def __post_init__(self) -> None:
        _check_identity(self.from_contract, "from")
        _check_int(self.state_schema_from, "state_schema_from", minimum=1)

    def to_dict(self) -> dict[str, Any]:
        return {"from": self.from_contract.to_dict(), "state_schema_from": self.state_schema_from}


@dataclass(frozen=True)
class StateMigration:
    """`state_migration`: this release moves the state schema forward from `state_schema_from` to
    its own `state_schema` through its numbered migrations (a major migration, docs/updater.md).
    Only `herdr-mcp update major-apply` takes such a release; an updater that predates the field
    refuses it as unknown, which is the fail-closed outcome (the way across is a bridge release)."""

    state_schema_from: int

    def __post_init__(self) -> None:
        _check_int(self.state_schema_from, "state_schema_from", minimum=1)

    def to_dict(self) -> dict[str, Any]:
        return {"state_schema_from": self.state_schema_from}


@dataclass(frozen=True)
class Source:
    """`source`: the GitHub repository and the commit and tag ref the release was built from."""

    repository: str
    repository_id: int
    commit: str
    ref: str

    def __post_init__(self) -> None:
        _check_str(self.repository, "repository", _REPOSITORY, 'a GitHub "owner/name"')
        _check_int(self.repository_id, "repository_id", minimum=1)
        _check_str(self.commit, "commit", _COMMIT, "a 40-digit lowercase hex commit id")
        _check_str(self.ref, "ref", re.compile(rf"refs/tags/v{_SEMVER}"), '"refs/tags/v" + version')

    def to_dict(self) -> dict[str, Any]:
        return {
            "repository": self.repository,
            "repository_id": self.repository_id,
            "commit": self.commit,
            "ref": self.ref,
        }


@dataclass(frozen=True)
class Provenance:
    """`provenance`: who may have built and attested the release (checked against Sigstore)."""

    workflow: str = RELEASE_WORKFLOW
    issuer: str = GITHUB_OIDC_ISSUER
    predicate_type: str = SLSA_PROVENANCE_V1
    runner_environment: str = "github-hosted"

    def __post_init__(self) -> None:
        _check_str(self.workflow, "workflow", _WORKFLOW, 'a workflow path ".github/workflows/<file>.yml"')
        _check_str(self.issuer, "issuer", _HTTPS_URL, "an https URL")
        _check_str(self.predicate_type, "predicate_type", _HTTPS_URL, "an https URL")
        if not isinstance(self.runner_environment, str):
            raise ManifestError("manifest_type", "must be a string", field="runner_environment")
        if self.runner_environment not in RUNNER_ENVIRONMENTS:
            raise ManifestError(
                "manifest_value",
                f"must be one of {', '.join(RUNNER_ENVIRONMENTS)}, not {_shown(self.runner_environment)}",
                field="runner_environment",
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "issuer": self.issuer,
            "predicate_type": self.predicate_type,
            "runner_environment": self.runner_environment,
        }


@dataclass(frozen=True)
class Asset:
    """One downloadable file of the release, pinned by size and sha256."""

    name: str
    target: str
    kind: AssetKind
    size: int
    sha256: str
    url: str

    def __post_init__(self) -> None:
        _check_str(self.name, "name", _ASSET_NAME, "a plain file name of [A-Za-z0-9._+-]")
        _check_str(self.target, "target", _TARGET, "a target name of [A-Za-z0-9._-]")
        if not isinstance(self.kind, str):
            raise ManifestError("manifest_type", "must be a string", field="kind")
        if self.kind not in ASSET_KINDS:
            raise ManifestError(
                "manifest_value",
                f"must be one of {', '.join(ASSET_KINDS)}, not {_shown(self.kind)}",
                field="kind",
            )
        _check_int(self.size, "size", minimum=1)
        _check_str(self.sha256, "sha256", _SHA256_HEX, "64 lowercase hex digits")
        _check_str(self.url, "url", _HTTPS_URL, "an https URL without query or fragment")
        if len(self.url) > MAX_URL_LENGTH:
            raise ManifestError("manifest_value", f"longer than {MAX_URL_LENGTH} characters", field="url")
        if not self.url.endswith("/" + self.name):
            raise ManifestError("manifest_value", f"must end with the asset name /{self.name}", field="url")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "target": self.target,
            "kind": self.kind,
            "size": self.size,
            "sha256": self.sha256,
            "url": self.url,
        }


@dataclass(frozen=True)
class RuntimeManifest:
    """A parsed, well-formed `runtime-manifest.json` (SPEC 5).

    Rules beyond each field's own shape (the JSON Schema cannot express them): `tag` is exactly
    "v" + `version`; `source.ref` is exactly "refs/tags/" + `tag`; asset names are unique.
    """

    version: str
    tag: str
    state_schema: int
    contract: ContractIdentity
    source: Source
    published_at: str
    assets: tuple[Asset, ...]
    provenance: Provenance = field(default_factory=Provenance)
    contract_migration: ContractMigration | None = None
    state_migration: StateMigration | None = None
    schema_version: int = SCHEMA_VERSION
    product: str = PRODUCT

    def __post_init__(self) -> None:
        # 1. Constants: a manifest of another schema or product is not ours to read.
        _check_schema_version(self.schema_version)
        if self.product != PRODUCT:
            code = "manifest_value" if isinstance(self.product, str) else "manifest_type"
            raise ManifestError(code, f"must be {PRODUCT!r}, not {_shown(self.product)}", field="product")
        # 2. Release identity: version, tag and source ref say the same thing.
        _check_version(self.version, "version")
        if not isinstance(self.tag, str):
            raise ManifestError("manifest_type", "must be a string", field="tag")
        if self.tag != "v" + self.version:
            raise ManifestError(
                "manifest_value", f"must be 'v{self.version}', not {_shown(self.tag)}", field="tag"
            )
        _check_int(self.state_schema, "state_schema", minimum=1)
        # 3. Contract identity and the optional migration.
        _check_identity(self.contract, "contract")
        if self.contract_migration is not None and not isinstance(self.contract_migration, ContractMigration):
            raise ManifestError("manifest_type", "must be a contract migration", field="contract_migration")
        if self.state_migration is not None:
            if not isinstance(self.state_migration, StateMigration):
                raise ManifestError("manifest_type", "must be a state migration", field="state_migration")
            if self.state_migration.state_schema_from >= self.state_schema:
                raise ManifestError(
                    "manifest_value",
                    f"a state migration moves the schema forward: state_schema_from "
                    f"{self.state_migration.state_schema_from} is not below state_schema {self.state_schema}",
                    field="state_migration.state_schema_from",
                )
        # 4. Where it was built.
        if not isinstance(self.source, Source):
            raise ManifestError("manifest_type", "must be a source", field="source")
        if self.source.ref != "refs/tags/" + self.tag:
            raise ManifestError(
                "manifest_value",
                f"must be 'refs/tags/{self.tag}', not {_shown(self.source.ref)}",
                field="source.ref",
            )
        if not isinstance(self.provenance, Provenance):
            raise ManifestError("manifest_type", "must be a provenance", field="provenance")
        _check_timestamp(self.published_at, "published_at")
        # 5. Assets: at least one, unique names.
        if not isinstance(self.assets, tuple) or not all(isinstance(a, Asset) for a in self.assets):
            raise ManifestError("manifest_type", "must be a tuple of assets", field="assets")
        if not self.assets:
            raise ManifestError("manifest_value", "a release needs at least one asset", field="assets")
        seen: set[str] = set()
        for index, asset in enumerate(self.assets):
            if asset.name in seen:
                raise ManifestError(
                    "manifest_value", f"duplicate asset name {asset.name!r}", field=f"assets[{index}]"
                )
            seen.add(asset.name)

    @classmethod
    def from_bytes(cls, data: bytes) -> RuntimeManifest:
        """Parse untrusted manifest bytes; raises `ManifestError` (and nothing else) if they are not a
        well-formed manifest. Verify signatures over `data` first: parsing is not verification."""
        return _manifest_from_document(_load_strict_json(data))

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (plain dicts, lists, str and int)."""
        document: dict[str, Any] = {
            "schema_version": self.schema_version,
            "product": self.product,
            "version": self.version,
            "tag": self.tag,
            "state_schema": self.state_schema,
            "contract": self.contract.to_dict(),
        }
        if self.contract_migration is not None:
            document["contract_migration"] = self.contract_migration.to_dict()
        if self.state_migration is not None:
            document["state_migration"] = self.state_migration.to_dict()
        document["source"] = self.source.to_dict()
        document["provenance"] = self.provenance.to_dict()
        document["published_at"] = self.published_at
        document["assets"] = [asset.to_dict() for asset in self.assets]
        return document

    def to_bytes(self) -> bytes:
        """The canonical bytes to publish and sign: RFC 8785 JSON plus one trailing LF."""
        canonical: bytes = rfc8785.dumps(self.to_dict())
        return canonical + b"\n"

    def asset(self, name: str) -> Asset:
        """The asset called `name`; `KeyError` if the release has none."""
        for asset in self.assets:
            if asset.name == name:
                return asset
        raise KeyError(name)


def _check_schema_version(value: object) -> None:
    _check_int(value, "schema_version", minimum=0)
    if value != SCHEMA_VERSION:
        raise ManifestError(
            "manifest_value",
            f"must be {SCHEMA_VERSION}, not {value} (a newer herdr-mcp may read this manifest)",
            field="schema_version",
        )


def _check_timestamp(value: object, name: str) -> None:
    text = _check_str(value, name, _TIMESTAMP, 'an RFC 3339 UTC time "YYYY-MM-DDTHH:MM:SSZ"')
    try:
        datetime.strptime(text, TIMESTAMP_FORMAT)
    except ValueError:
        raise ManifestError("manifest_value", f"{text!r} is not a real date and time", field=name) from None


# --- the parse boundary ------------------------------------------------------------------------


def _reject_float(text: str) -> float:
    raise ManifestError("manifest_float", f"floating-point number {text} (manifests carry integers only)")


def _bounded_int(text: str) -> int:
    # More than 16 digits is always beyond 2^53 - 1; checking the length first also keeps Python's
    # int-parsing limit (4300 digits) out of the error path.
    if len(text.lstrip("-")) > 16 or abs(int(text)) > MAX_SAFE_INTEGER:
        raise ManifestError("manifest_integer_too_large", f"integer {text[:40]} exceeds 2^53 - 1")
    return int(text)


def _reject_constant(text: str) -> object:
    raise ManifestError("manifest_not_json", f"{text} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ManifestError("manifest_duplicate_key", f"key {_shown(key)} appears twice in one object")
        result[key] = value
    return result


def _load_strict_json(data: bytes) -> Any:
    if not isinstance(data, bytes | bytearray):
        raise ManifestError("manifest_type", "manifest input must be bytes")
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            EVIDENCE_TOO_LARGE, too_large_message(MANIFEST_FILENAME, MAX_MANIFEST_BYTES, len(data))
        )
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError("manifest_not_json", f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        check_bounds(text, MANIFEST_LIMITS)
    except JsonLimitExceeded as exc:
        raise ManifestError(exc.code, exc.message) from None
    try:
        return json.loads(
            text,
            parse_float=_reject_float,
            parse_int=_bounded_int,
            parse_constant=_reject_constant,
            object_pairs_hook=_unique_keys,
        )
    except json.JSONDecodeError as exc:
        raise ManifestError(
            "manifest_not_json", f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:  # only unbalanced text passes the depth bound this deep
        raise ManifestError("json_too_deep", "nested too deeply") from None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _fields(
    value: object, path: str, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    """`value` as a JSON object with exactly the allowed keys; unknown keys are refused first."""
    if not isinstance(value, dict):
        raise ManifestError("manifest_type", "must be an object", field=path or None)
    allowed = set(required) | set(optional)
    unknown = sorted(key for key in value if key not in allowed)
    if unknown:
        raise ManifestError(
            "manifest_unknown_field",
            "unknown field (a newer manifest format, or tampering); refusing to guess",
            field=_join(path, unknown[0]),
        )
    for key in required:
        if key not in value:
            raise ManifestError("manifest_missing_field", "required field is missing", field=_join(path, key))
    return value


def _identity_from(value: object, path: str) -> ContractIdentity:
    """`contract.parse_identity`, its refusal as `manifest_<kind>` naming the field."""
    try:
        return parse_identity(value, path)
    except ContractIdentityInvalid as exc:
        field = path if exc.field is None else _join(path, exc.field)
        raise ManifestError(f"manifest_{exc.kind}", exc.detail, field=field) from None


def construct_at(path: str, build: type[_T], **kwargs: Any) -> _T:
    """`build(**kwargs)`; a ManifestError it raises names its field under `path`."""
    try:
        return build(**kwargs)
    except ManifestError as exc:
        raise exc.within(path) from None


_TOP_LEVEL = (
    "schema_version", "product", "version", "tag", "state_schema", "contract", "source", "provenance",
    "published_at", "assets",
)  # fmt: skip


def _manifest_from_document(document: object) -> RuntimeManifest:
    # A manifest of another schema version says so before its unknown fields are reported.
    if isinstance(document, dict) and "schema_version" in document:
        _check_schema_version(document["schema_version"])
    top = _fields(document, "", _TOP_LEVEL, ("contract_migration", "state_migration"))
    migration = None
    if "contract_migration" in top:
        raw = _fields(top["contract_migration"], "contract_migration", ("from", "state_schema_from"))
        migration = construct_at(
            "contract_migration",
            ContractMigration,
            from_contract=_identity_from(raw["from"], "contract_migration.from"),
            state_schema_from=raw["state_schema_from"],
        )
    state_migration = None
    if "state_migration" in top:
        raw = _fields(top["state_migration"], "state_migration", ("state_schema_from",))
        state_migration = construct_at("state_migration", StateMigration, **raw)
    raw_assets = top["assets"]
    if not isinstance(raw_assets, list):
        raise ManifestError("manifest_type", "must be an array", field="assets")
    assets = []
    for index, raw_asset in enumerate(raw_assets):
        path = f"assets[{index}]"
        fields = _fields(raw_asset, path, ("name", "target", "kind", "size", "sha256", "url"))
        assets.append(construct_at(path, Asset, **fields))
    source = construct_at(
        "source", Source, **_fields(top["source"], "source", ("repository", "repository_id", "commit", "ref"))
    )
    provenance_fields = ("workflow", "issuer", "predicate_type", "runner_environment")
    provenance = construct_at(
        "provenance", Provenance, **_fields(top["provenance"], "provenance", provenance_fields)
    )
    return RuntimeManifest(
        schema_version=top["schema_version"],
        product=top["product"],
        version=top["version"],
        tag=top["tag"],
        state_schema=top["state_schema"],
        contract=_identity_from(top["contract"], "contract"),
        contract_migration=migration,
        state_migration=state_migration,
        source=source,
        provenance=provenance,
        published_at=top["published_at"],
        assets=tuple(assets),
    )
