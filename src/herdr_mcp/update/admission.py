"""Admission: whether this workstation may take a discovered release, decided before any download.

`admit` is the one owner of "what we have verified about a release" on a workstation (SPEC 6,
seed 001). Bytes go in (the manifest and its three pieces of evidence), typed objects come out,
and nothing here touches the network or the disk (the one exception is reading the Sigstore
trust root, packaged data, when the bundles are checked). The checks run in one fixed order,
numbered in `admit` exactly as below:

1-3. `herdr_mcp.release.verification.verify_release`, the verifier `release verify` runs too:
   the minisign signature by a pinned key over the exact bytes (before anything is parsed), the
   one parse boundary, the release's own tag identity, then the keyless Sigstore signature of
   the manifest and the build provenance of the manifest and every asset, both by the release
   workflow at the release tag, verified offline. Both Sigstore checks are required; only
   `UnsafeSkipSigstore`, chosen by name, skips them;
4. product and schema version are the ones the policy reads;
5. tag identity: the discovered tag is the manifest's tag;
6. repository identity: source repository and repository id are the pinned ones;
7. no downgrade against the persisted highest-seen version (and the local version);
8. the contract rule: M == L is an ordinary update; M != L only exactly one epoch forward with a
   `contract_migration` from L;
9. the state-schema rule: the release's `state_schema` equals the local one (an ordinary
   update), or the release declares a `state_migration` from exactly the local schema to a
   higher one (a major migration: admitted here, taken only by `update major-apply`).

Outcomes: a `TrustedRelease` (kind `same_contract` or `contract_migration`), the only object the
later steps (download, install, probe, activation) accept; `AlreadyCurrent` when the release is
the version this runtime already is (nothing to do, not an error); or `AdmissionRefused` with a
stable code. Refusal codes, in checklist order:

1-3. the verifier's codes (`herdr_mcp.release.verification`): the minisign codes
   (`no_pinned_keys`, `signature_malformed`, `signature_algorithm_unsupported`,
   `signature_key_not_pinned`, `signature_invalid`), the parser's `manifest_*` codes (e.g.
   `manifest_unknown_field` for an unknown field inside `contract_migration`), `tag_mismatch`,
   `repository_mismatch`, `sigstore_missing`, `provenance_missing`, `provenance_mismatch` and the
   `attestation_*` codes (`herdr_mcp.release.attestation`);
4. `product_mismatch`, `schema_version_unsupported`;
5. `tag_mismatch`;
6. `repository_mismatch`, `repository_id_mismatch`;
7. `version_downgrade`;
8. `contract_downgrade`, `contract_changed_within_epoch`, `contract_epoch_not_adjacent`,
   `contract_migration_missing`, `contract_migration_from_mismatch`,
   `contract_migration_state_schema_mismatch`;
9. `state_schema_mismatch` (a different schema and no `state_migration`),
   `state_migration_from_mismatch` (it migrates from another schema than the local one),
   `state_schema_downgrade` (the release's schema is below the local one).

`TrustedRelease.asset_for` refuses with `no_asset_for_target` (still before any download).
Every step-8 refusal names the local and the target contract epochs. `AdmissionRefused` is a
`ReleaseDataError`; a self-contradicting `AdmissionPolicy` is an `UpdateUsageError`
(`admission_policy_invalid`).

Decisions:
- Versions compare with `packaging`. A release equal to the local version is `AlreadyCurrent`
  (checked first in step 7, so a withdrawn newer release does not look like a downgrade). A
  release strictly below max(highest seen, local version) is `version_downgrade`. A release equal
  to the highest seen but above the local version is admitted: it is the retry of a release this
  workstation admitted before whose download or install did not finish.
- The state schema never changes in an ordinary update, with or without a contract migration: a
  release whose `state_schema` differs without declaring `state_migration` is
  `state_schema_mismatch`. One that declares it from the local schema is admitted with
  `state_step` set; `update` and `update auto` then refuse it as `major_update_required` (the
  explicit major-migration path, `update major-apply`, seed 001), never as a bare mismatch.
- A manifest whose contract equals L is an ordinary update even if it also carries a
  `contract_migration` block (SPEC 6: M == L, behaviour unchanged).
- Repository names compare exactly (GitHub Actions writes the canonical spelling); the numeric
  repository id is what survives a rename or a re-creation under the same name.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass
from typing import Literal

from packaging.version import Version

from herdr_mcp.contract import ContractIdentity, contract_identity
from herdr_mcp.release.manifest import PRODUCT, SCHEMA_VERSION, Asset, AssetKind, RuntimeManifest
from herdr_mcp.release.minisign import PublicKey, VerifiedSignature
from herdr_mcp.release.verification import (
    PublishedRelease,
    ReleaseTrust,
    ReleaseVerificationError,
    SigstoreTrust,
    UnsafeSkipSigstore,
    VerifiedRelease,
    verify_release,
)
from herdr_mcp.state import STATE_SCHEMA
from herdr_mcp.update.errors import ReleaseDataError, UpdateUsageError

AdmissionKind = Literal["same_contract", "contract_migration"]


class AdmissionRefused(ReleaseDataError):
    """The release may not be taken by this workstation: the release is at fault, or does not fit.

    `code` is stable (see the module docstring); `local_epoch` and `target_epoch` are the contract
    epochs involved (None when not known, e.g. the manifest did not parse); `message` says what is
    wrong and, for a contract refusal, names both epochs.
    """

    def __init__(
        self, code: str, message: str, *, local_epoch: int | None = None, target_epoch: int | None = None
    ) -> None:
        super().__init__(code, message)
        self.local_epoch = local_epoch
        self.target_epoch = target_epoch


@dataclass(frozen=True)
class LocalIdentity:
    """What this workstation's active runtime is: version, contract identity L, state schema."""

    version: Version
    contract: ContractIdentity
    state_schema: int

    @classmethod
    def of_this_runtime(cls, version: str) -> LocalIdentity:
        """This code's identity (frozen contract catalog and state schema) at `version`."""
        return cls(version=Version(version), contract=contract_identity(), state_schema=STATE_SCHEMA)


@dataclass(frozen=True)
class AdmissionPolicy:
    """What this workstation trusts: pinned release keys, the one repository, and Sigstore's signer.

    `sigstore` is the signer identity policy and trust root the keyless signature and the
    provenance must verify against, or `UnsafeSkipSigstore` when the user chose, by name, to
    rely on the minisign key alone. Raises `UpdateUsageError("admission_policy_invalid")` when
    the identity policy is about another repository than the pinned one.
    """

    public_keys: tuple[PublicKey, ...]
    repository: str
    repository_id: int
    sigstore: SigstoreTrust | UnsafeSkipSigstore
    product: str = PRODUCT
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if (
            isinstance(self.sigstore, SigstoreTrust)
            and self.sigstore.identity_policy.repository != self.repository
        ):
            raise UpdateUsageError(
                "admission_policy_invalid",
                f"the identity policy's repository {self.sigstore.identity_policy.repository!r} "
                f"is not the pinned repository {self.repository!r}",
            )

    @property
    def trust(self) -> ReleaseTrust:
        return ReleaseTrust(public_keys=self.public_keys, sigstore=self.sigstore)


_ADMITTED = object()


@dataclass(frozen=True)
class TrustedRelease:
    """A release that passed admission; only `admit` makes one.

    `verified` is what `verify_release` established (the manifest, the minisign key, whether the
    keyless signature and the provenance were verified or skipped by the unsafe choice);
    `manifest` is its manifest (the contract is the TARGET contract M the candidate is probed and
    gated against); `kind` says whether the contract stays or migrates one epoch.
    """

    verified: VerifiedRelease
    kind: AdmissionKind
    local: LocalIdentity
    _admission: InitVar[object]
    #: The release migrates the state schema (`state_migration` from the local schema): only
    #: `update major-apply` takes it.
    state_step: bool = False

    def __post_init__(self, _admission: object) -> None:
        if _admission is not _ADMITTED:
            raise TypeError("a TrustedRelease is made by admit() only")

    @property
    def manifest(self) -> RuntimeManifest:
        return self.verified.manifest

    @property
    def signature(self) -> VerifiedSignature:
        return self.verified.signature

    @property
    def sigstore_verified(self) -> bool:
        """Whether the keyless signature and the provenance were verified (not skipped)."""
        return self.verified.sigstore == "verified"

    @property
    def version(self) -> Version:
        return Version(self.manifest.version)

    def asset_for(self, target: str, kind: AssetKind = "bundle") -> Asset:
        """The release's asset of `kind` for `target` (e.g. `linux-x86_64-cp311`).

        Raises `AdmissionRefused("no_asset_for_target")` when the release has none: it cannot run
        on this workstation, and that is known before downloading anything.
        """
        for asset in self.manifest.assets:
            if asset.target == target and asset.kind == kind:
                return asset
        offered = ", ".join(sorted({a.target for a in self.manifest.assets if a.kind == kind})) or "none"
        raise AdmissionRefused(
            "no_asset_for_target",
            f"release {self.manifest.tag} has no {kind} for this machine (target {target}; it "
            f"offers: {offered}); this workstation cannot run it",
            local_epoch=self.local.contract.epoch,
            target_epoch=self.manifest.contract.epoch,
        )


@dataclass(frozen=True)
class AlreadyCurrent:
    """The release passed steps 1 to 6 and is the version this runtime already is: nothing to do."""

    manifest: RuntimeManifest


def admit(
    published: PublishedRelease,
    *,
    discovered_tag: str,
    local: LocalIdentity,
    policy: AdmissionPolicy,
    highest_seen: Version | None,
) -> TrustedRelease | AlreadyCurrent:
    """Decide whether this workstation may take the release `published` (manifest and evidence).

    `discovered_tag` is the release tag discovery chose; `highest_seen` the persisted highest
    version admitted so far (`herdr_mcp.update.highest_seen`), None if none was recorded.
    Returns a `TrustedRelease` or `AlreadyCurrent`. Raises `AdmissionRefused` (a
    `ReleaseDataError`: the release is at fault or does not fit this workstation). No I/O.
    """
    epoch = local.contract.epoch
    # 1-3. The one release verifier: minisign, parse, own tag identity, Sigstore, provenance.
    try:
        verified = verify_release(published, policy.trust)
    except ReleaseVerificationError as exc:
        target = None if exc.manifest is None else exc.manifest.contract.epoch
        raise AdmissionRefused(exc.code, exc.message, local_epoch=epoch, target_epoch=target) from None
    manifest = verified.manifest
    target_epoch = manifest.contract.epoch
    # 4. Product and schema version.
    if manifest.product != policy.product:
        raise AdmissionRefused(
            "product_mismatch",
            f"the manifest is for {manifest.product!r}, not {policy.product!r}",
            local_epoch=epoch,
            target_epoch=target_epoch,
        )
    if manifest.schema_version != policy.schema_version:
        raise AdmissionRefused(
            "schema_version_unsupported",
            f"manifest schema_version {manifest.schema_version}; this updater reads {policy.schema_version}",
            local_epoch=epoch,
            target_epoch=target_epoch,
        )
    # 5. Tag identity: what discovery chose is what the manifest says it is.
    if discovered_tag != manifest.tag:
        raise AdmissionRefused(
            "tag_mismatch",
            f"discovered release {discovered_tag!r} carries the manifest of {manifest.tag!r} "
            f"(version {manifest.version}, ref {manifest.source.ref}); "
            "refusing a manifest moved between releases",
            local_epoch=epoch,
            target_epoch=target_epoch,
        )
    # 6. Repository identity.
    _check_repository(manifest, policy, epoch)
    # 7. No downgrade.
    target_version = Version(manifest.version)
    if target_version == local.version:
        return AlreadyCurrent(manifest=manifest)
    floor = local.version if highest_seen is None else max(highest_seen, local.version)
    if target_version < floor:
        raise AdmissionRefused(
            "version_downgrade",
            f"release {manifest.version} is below {floor} (local {local.version}, highest seen "
            f"{highest_seen}); a workstation never moves back through an update (use rollback)",
            local_epoch=epoch,
            target_epoch=target_epoch,
        )
    # 8. The contract rule.
    kind = _contract_admission(manifest, local)
    # 9. The state-schema rule.
    state_step = _state_admission(manifest, local)
    return TrustedRelease(
        verified=verified, kind=kind, local=local, _admission=_ADMITTED, state_step=state_step
    )


def _check_repository(manifest: RuntimeManifest, policy: AdmissionPolicy, epoch: int) -> None:
    source = manifest.source
    if source.repository != policy.repository:
        raise AdmissionRefused(
            "repository_mismatch",
            f"the release was built from {source.repository}, not the pinned {policy.repository}",
            local_epoch=epoch,
            target_epoch=manifest.contract.epoch,
        )
    if source.repository_id != policy.repository_id:
        raise AdmissionRefused(
            "repository_id_mismatch",
            f"repository id {source.repository_id} is not the pinned {policy.repository_id} "
            f"({policy.repository} was renamed or re-created)",
            local_epoch=epoch,
            target_epoch=manifest.contract.epoch,
        )


def _describe(identity: ContractIdentity) -> str:
    return f"epoch {identity.epoch} ({identity.tool_count} tools, {identity.hash})"


def _contract_admission(manifest: RuntimeManifest, local: LocalIdentity) -> AdmissionKind:
    """Step 8 (SPEC 6): equal identity, or exactly one epoch forward with a migration from L."""
    target, mine = manifest.contract, local.contract

    def refuse(code: str, reason: str) -> AdmissionRefused:
        return AdmissionRefused(
            code,
            f"{reason} (local contract epoch {mine.epoch}, release {manifest.tag} contract epoch "
            f"{target.epoch})",
            local_epoch=mine.epoch,
            target_epoch=target.epoch,
        )

    if target == mine:
        kind: AdmissionKind = "same_contract"
    elif target.epoch < mine.epoch:
        raise refuse("contract_downgrade", "the release serves an older contract epoch")
    elif target.epoch == mine.epoch:
        raise refuse(
            "contract_changed_within_epoch",
            f"the release's contract {_describe(target)} differs from the local {_describe(mine)} "
            "without a new epoch",
        )
    elif target.epoch != mine.epoch + 1:
        raise refuse(
            "contract_epoch_not_adjacent",
            "an update moves the contract at most one epoch forward; update through each epoch in turn",
        )
    elif manifest.contract_migration is None:
        raise refuse(
            "contract_migration_missing",
            "the release changes the contract but declares no contract_migration",
        )
    elif manifest.contract_migration.from_contract != mine:
        raise refuse(
            "contract_migration_from_mismatch",
            f"the release migrates from {_describe(manifest.contract_migration.from_contract)}, "
            f"but this workstation runs {_describe(mine)}",
        )
    elif manifest.contract_migration.state_schema_from != local.state_schema:
        raise refuse(
            "contract_migration_state_schema_mismatch",
            f"the migration starts from state schema {manifest.contract_migration.state_schema_from}, "
            f"this workstation has {local.state_schema}",
        )
    else:
        kind = "contract_migration"
    return kind


def _state_admission(manifest: RuntimeManifest, local: LocalIdentity) -> bool:
    """Step 9: the same state schema (False), or a declared step from the local one (True)."""

    def refuse(code: str, reason: str) -> AdmissionRefused:
        return AdmissionRefused(
            code,
            f"{reason} (local state schema {local.state_schema}, release {manifest.tag} state schema "
            f"{manifest.state_schema}; local contract epoch {local.contract.epoch}, release contract "
            f"epoch {manifest.contract.epoch})",
            local_epoch=local.contract.epoch,
            target_epoch=manifest.contract.epoch,
        )

    step = manifest.state_migration
    if manifest.state_schema == local.state_schema:
        # A release at the local schema migrates nothing here (a declared step from a lower one is
        # the parser's business: it is below state_schema, so it is not the local schema).
        return False
    if manifest.state_schema < local.state_schema:
        raise refuse(
            "state_schema_downgrade",
            "the release uses an older state schema than this workstation's database; no release "
            "migrates a database back (major-rollback restores the snapshot of one)",
        )
    if step is None:
        raise refuse(
            "state_schema_mismatch",
            "the release uses another state schema and declares no state_migration; an update never "
            "migrates the state schema",
        )
    if step.state_schema_from != local.state_schema:
        raise refuse(
            "state_migration_from_mismatch",
            f"the release migrates from state schema {step.state_schema_from}; take the release that "
            "migrates from this workstation's schema first",
        )
    return True
