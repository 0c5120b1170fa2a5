"""Writing a release's `runtime-manifest.json` (the maintainer's side, run by `herdr-mcp release
manifest` in the release workflow): `build_manifest` from this tree's built assets, the previous
contract a migration starts from, and where the source comes from (the commit and ref from git,
the repository from the arguments or GitHub Actions' environment).

The model, its one parser and its canonical bytes are `release.manifest`; everything built here
goes through the same self-validating dataclasses, so a built manifest is well-formed too.
`build_manifest` refuses to produce a manifest that no workstation could ever admit (SPEC 6): a
migration that is not exactly one epoch forward, or one whose state schema is neither this tree's
nor the declared `state_migration`'s starting point (docs/updater.md, "Major migrations").
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from herdr_mcp.contract import ContractError, ContractIdentity, contract_identity, identity_of_catalog
from herdr_mcp.release.manifest import (
    TIMESTAMP_FORMAT,
    Asset,
    AssetKind,
    ContractMigration,
    ManifestError,
    Provenance,
    RuntimeManifest,
    Source,
    StateMigration,
    construct_at,
)
from herdr_mcp.state import STATE_SCHEMA


@dataclass(frozen=True)
class AssetInput:
    """A built file to publish: its name in the release is the file's name."""

    path: Path
    target: str
    kind: AssetKind


def github_download_base(repository: str, tag: str) -> str:
    """Where GitHub serves the assets of release `tag` of `repository`."""
    return f"https://github.com/{repository}/releases/download/{tag}"


def _hash_file(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    try:
        with path.open("rb") as stream:
            while chunk := stream.read(1024 * 1024):
                digest.update(chunk)
                size += len(chunk)
    except OSError as exc:
        raise ManifestError(
            "manifest_asset_unreadable", f"cannot read asset {path}: {exc.strerror}"
        ) from None
    return size, digest.hexdigest()


def _utc_timestamp(moment: datetime) -> str:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ManifestError("manifest_value", "needs a timezone-aware datetime", field="published_at")
    return moment.astimezone(UTC).strftime(TIMESTAMP_FORMAT)


def _state_block(state_schema_from: int | None) -> StateMigration | None:
    if state_schema_from is None or state_schema_from == STATE_SCHEMA:
        return None
    if (
        isinstance(state_schema_from, bool)
        or not isinstance(state_schema_from, int)
        or not (0 < state_schema_from < STATE_SCHEMA)
    ):
        raise ManifestError(
            "state_migration_invalid",
            f"a release migrates the state schema forward to this tree's {STATE_SCHEMA}, through its "
            f"numbered migrations: state_schema_from must be 1 to {STATE_SCHEMA - 1}, "
            f"not {state_schema_from!r}",
        )
    return StateMigration(state_schema_from=state_schema_from)


def _migration_block(
    current: ContractIdentity, previous: ContractIdentity, state_schema_from: int, local_schema: int
) -> ContractMigration | None:
    if previous == current:
        return None
    if previous.epoch != current.epoch - 1:
        raise ManifestError(
            "contract_migration_not_adjacent",
            f"the previous contract is epoch {previous.epoch} (hash {previous.hash}) and this tree is "
            f"epoch {current.epoch}: a release may migrate exactly one epoch forward, and a contract "
            "change without a new epoch is never admitted",
        )
    if state_schema_from != local_schema:
        raise ManifestError(
            "contract_migration_state_schema",
            f"state_schema_from {state_schema_from} differs from the state schema a workstation taking "
            f"this release has ({local_schema}: this tree's, or the declared state migration's "
            "starting point), so no workstation could admit this release",
        )
    return ContractMigration(from_contract=previous, state_schema_from=state_schema_from)


def build_manifest(
    *,
    version: str,
    repository: str,
    repository_id: int,
    commit: str,
    ref: str,
    published_at: datetime,
    assets: Sequence[AssetInput],
    download_base: str | None = None,
    migrate_from: ContractIdentity | None = None,
    migrate_state_schema_from: int | None = None,
    state_schema_from: int | None = None,
    provenance: Provenance | None = None,
) -> RuntimeManifest:
    """The manifest of this tree's release: contract identity from the frozen catalog, state schema
    from the code, sizes and sha256 from the asset files.

    `download_base` defaults to the GitHub release download URL of the tag. `migrate_from` is the
    previous release's contract (see `contract_migration_from_file`): identical -> no
    `contract_migration`; exactly one epoch lower -> a `contract_migration` whose
    `state_schema_from` is `migrate_state_schema_from` (default: the schema a workstation taking
    the release has). `state_schema_from` below this tree's schema declares a `state_migration`
    (a major migration from that schema; equal or None: none).

    Raises `ManifestError`: any `manifest_*` code for an input that would make a malformed
    manifest, `manifest_asset_unreadable`, `contract_migration_not_adjacent` (naming both
    epochs), `contract_migration_state_schema` or `state_migration_invalid`.
    """
    tag = f"v{version}"
    current = contract_identity()
    state_migration = _state_block(state_schema_from)
    local_schema = STATE_SCHEMA if state_migration is None else state_migration.state_schema_from
    migration = None
    if migrate_from is not None:
        schema_from = local_schema if migrate_state_schema_from is None else migrate_state_schema_from
        migration = _migration_block(current, migrate_from, schema_from, local_schema)
    source = construct_at(
        "source", Source, repository=repository, repository_id=repository_id, commit=commit, ref=ref
    )
    base = download_base if download_base is not None else github_download_base(repository, tag)
    built_assets = []
    for index, item in enumerate(assets):
        size, sha256 = _hash_file(item.path)
        name = item.path.name
        asset = construct_at(
            f"assets[{index}]",
            Asset,
            name=name,
            target=item.target,
            kind=item.kind,
            size=size,
            sha256=sha256,
            url=f"{base.rstrip('/')}/{name}",
        )
        built_assets.append(asset)
    return RuntimeManifest(
        version=version,
        tag=tag,
        state_schema=STATE_SCHEMA,
        contract=current,
        contract_migration=migration,
        state_migration=state_migration,
        source=source,
        provenance=provenance if provenance is not None else Provenance(),
        published_at=_utc_timestamp(published_at),
        assets=tuple(built_assets),
    )


def contract_migration_from_file(path: Path) -> tuple[ContractIdentity, int | None]:
    """The previous contract identity for `build_manifest(migrate_from=...)`, and its state schema.

    `path` is either a previous `runtime-manifest.json` (parsed strictly; returns its `contract`
    and `state_schema`) or a frozen contract catalog `runtime-epoch-N.json` (returns the identity
    computed exactly like `herdr_mcp.contract`, and None for the state schema: a catalog does not
    know it, and `build_manifest` then uses this tree's, the only value SPEC 6 admission accepts).

    Raises `ManifestError` (`contract_migration_source_invalid`, or the parser's codes for a
    malformed previous manifest).
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ManifestError(
            "contract_migration_source_invalid", f"cannot read {path}: {exc.strerror}"
        ) from None
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        raise ManifestError("contract_migration_source_invalid", f"{path} is not JSON") from None
    if isinstance(document, dict) and "tools" in document:
        try:
            return identity_of_catalog(document), None
        except ContractError as exc:
            raise ManifestError("contract_migration_source_invalid", f"{path}: {exc}") from None
    if isinstance(document, dict) and "product" in document:
        previous = RuntimeManifest.from_bytes(data)
        return previous.contract, previous.state_schema
    raise ManifestError(
        "contract_migration_source_invalid",
        f"{path} is neither a runtime-manifest.json nor a contract catalog (runtime-epoch-N.json)",
    )


# --- where the source comes from ----------------------------------------------------------------


def _git(repo_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "-C", str(repo_dir), *args],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "LC_ALL": "C"},
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ManifestError("source_git_failed", f"cannot run git in {repo_dir}: {exc}") from None


def source_from_git(repo_dir: Path, *, tag: str | None = None) -> tuple[str, str]:
    """`(commit, ref)` of the checkout at `repo_dir`.

    With `tag`, that tag must point at HEAD and the ref is `refs/tags/<tag>`. Without it, the ref
    is the tag exactly at HEAD (`git describe --exact-match --tags`), else the checked-out branch.
    Raises `ManifestError`: `source_git_failed`, `source_tag_mismatch` or `source_ref_unknown`.
    """
    head = _git(repo_dir, "rev-parse", "--verify", "HEAD^{commit}")
    if head.returncode != 0:
        raise ManifestError("source_git_failed", f"{repo_dir} has no commit: {head.stderr.strip()}")
    commit = head.stdout.strip()
    if tag is not None:
        tagged = _git(repo_dir, "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}")
        if tagged.returncode != 0 or tagged.stdout.strip() != commit:
            raise ManifestError(
                "source_tag_mismatch", f"tag {tag} does not point at HEAD ({commit}); tag the commit first"
            )
        return commit, f"refs/tags/{tag}"
    described = _git(repo_dir, "describe", "--exact-match", "--tags", "HEAD")
    if described.returncode == 0:
        return commit, f"refs/tags/{described.stdout.strip()}"
    branch = _git(repo_dir, "symbolic-ref", "--quiet", "HEAD")
    if branch.returncode == 0:
        return commit, branch.stdout.strip()
    raise ManifestError("source_ref_unknown", f"HEAD {commit} is detached and carries no tag")


def resolve_repository(
    repository: str | None = None,
    repository_id: int | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> tuple[str, int]:
    """`(owner/name, numeric id)`: the explicit values, else GitHub Actions' `GITHUB_REPOSITORY` and
    `GITHUB_REPOSITORY_ID`. Raises `ManifestError("source_repository_unknown")` when neither says."""
    env = os.environ if environ is None else environ
    name = repository or env.get("GITHUB_REPOSITORY")
    if not name:
        raise ManifestError(
            "source_repository_unknown", "pass --repository owner/name or set GITHUB_REPOSITORY"
        )
    if repository_id is None:
        raw_id = env.get("GITHUB_REPOSITORY_ID", "")
        if not raw_id.isdecimal():
            raise ManifestError(
                "source_repository_unknown",
                "pass --repository-id (GitHub's numeric id) or set GITHUB_REPOSITORY_ID",
            )
        repository_id = int(raw_id)
    return name, repository_id
