"""Admission (SPEC 6, seed 001) as one table, and the persisted highest-seen version.

Every row is a real release manifest: built as the release toolchain builds it, serialized to its
canonical bytes and signed with a minisign key made in a temporary directory. The contracts are
the real frozen epoch-4 and epoch-5 identities; "epoch 6" is synthesized (a different hash) for
the cases where the local runtime is epoch 5. Rows that need bytes the toolchain would never
produce (an unknown field inside contract_migration) build them by hand and sign them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from packaging.version import Version

from herdr_mcp.contract import ContractIdentity, contract_identity
from herdr_mcp.release.manifest import (
    MANIFEST_FILENAME,
    ContractMigration,
    RuntimeManifest,
    Source,
    StateMigration,
)
from herdr_mcp.release.manifest_build import AssetInput, build_manifest
from herdr_mcp.release.minisign import PublicKey, SecretKey, keygen, load_secret_key, sign
from herdr_mcp.release.verification import (
    PublishedRelease,
    SigstoreTrust,
    UnsafeSkipSigstore,
    VerifiedRelease,
)
from herdr_mcp.state import STATE_SCHEMA
from herdr_mcp.update.admission import (
    AdmissionPolicy,
    AdmissionRefused,
    AlreadyCurrent,
    LocalIdentity,
    TrustedRelease,
    admit,
)
from herdr_mcp.update.errors import ReleaseDataError, UpdateUsageError
from herdr_mcp.update.highest_seen import (
    HighestSeenError,
    read_highest_seen,
    record_admitted,
)
from tests.support.release_evidence import evidence, identity_policy, signer, sigstore_trust, subjects
from tests.support.sigstore_stack import SigstoreStack

REPOSITORY = "example-org/herdr-mcp"
REPOSITORY_ID = 812345678
COMMIT = "3f1c2a9b8e7d6c5b4a39281706f5e4d3c2b1a098"
PUBLISHED = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
TARGET = "linux-x86_64-cp311"
SIGSTORE_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sigstore"

E4 = contract_identity(4)
E5 = contract_identity(5)
#: A synthesized next epoch: the frozen catalogs stop at 5.
E6 = ContractIdentity(epoch=6, hash="sha256:" + "6" * 64, tool_count=19)
LOCAL_4 = LocalIdentity(version=Version("1.0.4"), contract=E4, state_schema=STATE_SCHEMA)
LOCAL_5 = LocalIdentity(version=Version("1.1.0"), contract=E5, state_schema=STATE_SCHEMA)


@dataclass(frozen=True)
class Keys:
    """The release key (pinned), a key nobody pinned, and the Sigstore stack that signs keylessly."""

    pinned: PublicKey
    secret: SecretKey
    unpinned: SecretKey
    stack: SigstoreStack


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory, sigstore_stack: SigstoreStack) -> Keys:
    directory = tmp_path_factory.mktemp("keys")
    pinned = keygen(directory / "release.pub", directory / "release.key")
    return Keys(
        pinned=pinned,
        secret=load_secret_key(directory / "release.key"),
        unpinned=SecretKey.generate(),
        stack=sigstore_stack,
    )


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> RuntimeManifest:
    """A manifest as `herdr-mcp release manifest` builds it (this tree: epoch 5, no migration)."""
    directory = tmp_path_factory.mktemp("assets")
    inputs = []
    for name, target, content in (
        ("herdr_mcp-1.2.0-py3-none-any.whl", "py3-none-any", b"wheel " * 64),
        (f"herdr-mcp-1.2.0-{TARGET}.tar.gz", TARGET, b"bundle " * 96),
    ):
        (directory / name).write_bytes(content)
        inputs.append(AssetInput(path=directory / name, target=target, kind="bundle"))
    return build_manifest(
        version="1.2.0",
        repository=REPOSITORY,
        repository_id=REPOSITORY_ID,
        commit=COMMIT,
        ref="refs/tags/v1.2.0",
        published_at=PUBLISHED,
        assets=inputs,
    )


def release(
    base: RuntimeManifest,
    *,
    version: str = "1.2.0",
    contract: ContractIdentity = E5,
    migrate_from: ContractIdentity | None = None,
    state_schema_from: int = STATE_SCHEMA,
    state_schema: int = STATE_SCHEMA,
    state_step_from: int | None = None,
    repository: str = REPOSITORY,
    repository_id: int = REPOSITORY_ID,
) -> RuntimeManifest:
    """`base` re-released: another version, contract, migration, state schema or repository."""
    migration = None
    if migrate_from is not None:
        migration = ContractMigration(from_contract=migrate_from, state_schema_from=state_schema_from)
    return dataclasses.replace(
        base,
        version=version,
        tag=f"v{version}",
        contract=contract,
        contract_migration=migration,
        state_schema=state_schema,
        state_migration=None if state_step_from is None else StateMigration(state_step_from),
        source=Source(
            repository=repository, repository_id=repository_id, commit=COMMIT, ref=f"refs/tags/v{version}"
        ),
    )


def with_unknown_migration_field(manifest: RuntimeManifest, block: str = "contract_migration") -> bytes:
    """Canonical bytes of `manifest` with one extra field inside `block` (hand-built)."""
    document: dict[str, Any] = manifest.to_dict()
    document[block]["note"] = "state is compatible"
    canonical: bytes = rfc8785.dumps(document)
    return canonical + b"\n"


@dataclass(frozen=True)
class Case:
    local: LocalIdentity
    manifest: Callable[[RuntimeManifest], RuntimeManifest | bytes]
    expected: str
    discovered_tag: str | None = None
    highest_seen: str | None = None
    signer: str = "pinned"  # "pinned", "unpinned", "tampered", "malformed"
    policy: dict[str, Any] = field(default_factory=dict)
    #: What the release publishes beside the manifest (see `evidence_for`).
    evidence: str = "published"


CASES: dict[str, Case] = {
    # The contract rule (step 8).
    "equal contract": Case(LOCAL_5, lambda b: release(b), "same_contract"),
    "one epoch forward, real 4 -> 5": Case(
        LOCAL_4, lambda b: release(b, version="1.1.0", contract=E5, migrate_from=E4), "contract_migration"
    ),
    "one epoch forward, 5 -> 6": Case(
        LOCAL_5, lambda b: release(b, contract=E6, migrate_from=E5), "contract_migration"
    ),
    "equal contract carrying a stale migration block": Case(
        LOCAL_5, lambda b: release(b, contract=E5, migrate_from=E4), "same_contract"
    ),
    "two epochs forward": Case(
        LOCAL_4, lambda b: release(b, contract=E6, migrate_from=E5), "contract_epoch_not_adjacent"
    ),
    "a lower epoch": Case(LOCAL_5, lambda b: release(b, contract=E4), "contract_downgrade"),
    "same epoch, other hash": Case(
        LOCAL_5,
        lambda b: release(b, contract=dataclasses.replace(E5, hash="sha256:" + "5" * 64)),
        "contract_changed_within_epoch",
    ),
    "from differs in hash": Case(
        LOCAL_5,
        lambda b: release(b, contract=E6, migrate_from=dataclasses.replace(E5, hash="sha256:" + "0" * 64)),
        "contract_migration_from_mismatch",
    ),
    "from differs in tool_count": Case(
        LOCAL_5,
        lambda b: release(b, contract=E6, migrate_from=dataclasses.replace(E5, tool_count=17)),
        "contract_migration_from_mismatch",
    ),
    "from differs in epoch": Case(
        LOCAL_5,
        lambda b: release(b, contract=E6, migrate_from=dataclasses.replace(E5, epoch=4)),
        "contract_migration_from_mismatch",
    ),
    "migration missing": Case(LOCAL_5, lambda b: release(b, contract=E6), "contract_migration_missing"),
    "unknown field inside contract_migration": Case(
        LOCAL_5,
        lambda b: with_unknown_migration_field(release(b, contract=E6, migrate_from=E5)),
        "manifest_unknown_field",
    ),
    "state_schema_from differs": Case(
        LOCAL_5,
        lambda b: release(b, contract=E6, migrate_from=E5, state_schema_from=STATE_SCHEMA + 1),
        "contract_migration_state_schema_mismatch",
    ),
    "manifest state_schema differs (migration)": Case(
        LOCAL_5,
        lambda b: release(b, contract=E6, migrate_from=E5, state_schema=STATE_SCHEMA + 1),
        "state_schema_mismatch",
    ),
    "manifest state_schema differs (same contract)": Case(
        LOCAL_5, lambda b: release(b, state_schema=STATE_SCHEMA + 1), "state_schema_mismatch"
    ),
    # The state-schema rule (step 9): a declared step is admitted, marked for major-apply.
    "a declared state step from the local schema": Case(
        LOCAL_5,
        lambda b: release(b, state_schema=STATE_SCHEMA + 1, state_step_from=STATE_SCHEMA),
        "same_contract+state_step",
    ),
    "a state step with a contract migration": Case(
        LOCAL_5,
        lambda b: release(
            b, contract=E6, migrate_from=E5, state_schema=STATE_SCHEMA + 1, state_step_from=STATE_SCHEMA
        ),
        "contract_migration+state_step",
    ),
    "a state step from another schema": Case(
        LOCAL_5,
        lambda b: release(b, state_schema=STATE_SCHEMA + 2, state_step_from=STATE_SCHEMA + 1),
        "state_migration_from_mismatch",
    ),
    "an older state schema": Case(
        LOCAL_5, lambda b: release(b, state_schema=STATE_SCHEMA - 1), "state_schema_downgrade"
    ),
    "unknown field inside state_migration": Case(
        LOCAL_5,
        lambda b: with_unknown_migration_field(
            release(b, state_schema=STATE_SCHEMA + 1, state_step_from=STATE_SCHEMA), "state_migration"
        ),
        "manifest_unknown_field",
    ),
    # No downgrade (step 7).
    "a downgrade below highest seen": Case(
        LOCAL_5, lambda b: release(b), "version_downgrade", highest_seen="1.3.0"
    ),
    "below the local version, nothing recorded": Case(
        LOCAL_5, lambda b: release(b, version="1.0.9"), "version_downgrade"
    ),
    "retry of the highest seen": Case(LOCAL_5, lambda b: release(b), "same_contract", highest_seen="1.2.0"),
    "the same version (already current)": Case(
        LOCAL_5, lambda b: release(b, version="1.1.0"), "already_current", highest_seen="1.2.0"
    ),
    # Identity (steps 4 to 6).
    "wrong repository": Case(
        LOCAL_5, lambda b: release(b, repository="attacker/herdr-mcp"), "repository_mismatch"
    ),
    "wrong repository_id": Case(
        LOCAL_5, lambda b: release(b, repository_id=REPOSITORY_ID + 1), "repository_id_mismatch"
    ),
    "tag and version disagree": Case(LOCAL_5, lambda b: release(b), "tag_mismatch", discovered_tag="v1.3.0"),
    "another product pinned": Case(
        LOCAL_5, lambda b: release(b), "product_mismatch", policy={"product": "herdr-edge"}
    ),
    "another manifest schema pinned": Case(
        LOCAL_5, lambda b: release(b), "schema_version_unsupported", policy={"schema_version": 2}
    ),
    # Signatures (steps 1 and 3).
    "a bad signature (tampered byte)": Case(
        LOCAL_5, lambda b: release(b), "signature_invalid", signer="tampered"
    ),
    "an unpinned key": Case(LOCAL_5, lambda b: release(b), "signature_key_not_pinned", signer="unpinned"),
    "no pinned keys": Case(LOCAL_5, lambda b: release(b), "no_pinned_keys", policy={"public_keys": ()}),
    "a malformed signature": Case(LOCAL_5, lambda b: release(b), "signature_malformed", signer="malformed"),
    # Sigstore and the build provenance (step 3): both required, verified offline.
    "no Sigstore bundle": Case(LOCAL_5, lambda b: release(b), "sigstore_missing", evidence="no_sigstore"),
    "no provenance": Case(LOCAL_5, lambda b: release(b), "provenance_missing", evidence="no_provenance"),
    "neither Sigstore file": Case(LOCAL_5, lambda b: release(b), "sigstore_missing", evidence="none"),
    "no Sigstore files, unsafe skip chosen": Case(
        LOCAL_5, lambda b: release(b), "same_contract", evidence="none", policy={"sigstore": "unsafe"}
    ),
    "Sigstore bundle of other bytes (a real public-good bundle)": Case(
        LOCAL_5, lambda b: release(b), "attestation_untrusted_root", evidence="foreign_sigstore"
    ),
    "Sigstore bundle of other bytes (same trust root)": Case(
        LOCAL_5, lambda b: release(b), "attestation_signature_invalid", evidence="sigstore_of_other_bytes"
    ),
    "keyless signature by another workflow": Case(
        LOCAL_5, lambda b: release(b), "attestation_identity_mismatch", evidence="signed_by_other_workflow"
    ),
    "keyless signature made at another tag": Case(
        LOCAL_5, lambda b: release(b), "attestation_identity_mismatch", evidence="signed_at_other_tag"
    ),
    "keyless signature by a self-hosted runner": Case(
        LOCAL_5, lambda b: release(b), "attestation_identity_mismatch", evidence="self_hosted_runner"
    ),
    "identity policy not covering the tag": Case(
        LOCAL_5,
        lambda b: release(b),
        "attestation_identity_mismatch",
        policy={"identity_policy": "refs/tags/v2.*"},
    ),
    "provenance gives an asset another digest": Case(
        LOCAL_5, lambda b: release(b), "provenance_mismatch", evidence="provenance_other_digest"
    ),
    "provenance lacks an asset": Case(
        LOCAL_5, lambda b: release(b), "provenance_mismatch", evidence="provenance_lacks_asset"
    ),
    "provenance of another manifest": Case(
        LOCAL_5, lambda b: release(b), "provenance_mismatch", evidence="provenance_of_other_manifest"
    ),
    "provenance from another repository's workflow": Case(
        LOCAL_5, lambda b: release(b), "attestation_identity_mismatch", evidence="provenance_other_repository"
    ),
    "provenance that is not SLSA from a workflow": Case(
        LOCAL_5,
        lambda b: release(b),
        "attestation_predicate_unexpected",
        evidence="provenance_other_build_type",
    ),
    "provenance bundle is not JSON": Case(
        LOCAL_5, lambda b: release(b), "attestation_bundle_malformed", evidence="provenance_garbage"
    ),
}


def evidence_for(case: Case, data: bytes, stack: SigstoreStack) -> tuple[bytes | None, bytes | None]:
    """(keyless signature bundle, provenance bundle) the release of `case` publishes."""
    kind = case.evidence
    good_signature, good_provenance = evidence(stack, data)
    attested = subjects(data)
    a_bundle = next(name for name in attested if name != MANIFEST_FILENAME)
    made: dict[str, tuple[bytes | None, bytes | None]] = {
        "published": (good_signature, good_provenance),
        "none": (None, None),
        "no_sigstore": (None, good_provenance),
        "no_provenance": (good_signature, None),
        "foreign_sigstore": (
            (SIGSTORE_FIXTURES / "rfc8785-release.whl.sigstore.json").read_bytes(),
            good_provenance,
        ),
        "sigstore_of_other_bytes": (stack.sign_artifact(data + b" ", signer(data)), good_provenance),
        "signed_by_other_workflow": (
            stack.sign_artifact(data, signer(data, workflow_path=".github/workflows/ci.yml")),
            good_provenance,
        ),
        "signed_at_other_tag": (
            stack.sign_artifact(data, signer(data, ref="refs/tags/v9.9.9")),
            good_provenance,
        ),
        "self_hosted_runner": (
            stack.sign_artifact(data, signer(data, runner_environment="self-hosted")),
            good_provenance,
        ),
        "provenance_other_digest": (
            good_signature,
            stack.attest_provenance({**attested, a_bundle: "0" * 64}, signer(data)),
        ),
        "provenance_lacks_asset": (
            good_signature,
            stack.attest_provenance({k: v for k, v in attested.items() if k != a_bundle}, signer(data)),
        ),
        "provenance_of_other_manifest": (
            good_signature,
            stack.attest_provenance({**attested, MANIFEST_FILENAME: "1" * 64}, signer(data)),
        ),
        "provenance_other_repository": (
            good_signature,
            stack.attest_provenance(attested, signer(data, repository="attacker/herdr-mcp")),
        ),
        "provenance_other_build_type": (
            good_signature,
            stack.attest_provenance(attested, signer(data), build_type="https://example.com/manual-build/v1"),
        ),
        "provenance_garbage": (good_signature, b"not json"),
    }
    return made[kind]


def signed(case: Case, base: RuntimeManifest, keys: Keys) -> tuple[bytes, str, str]:
    """(manifest bytes, signature text, discovered tag) for a row."""
    built = case.manifest(base)
    data = built if isinstance(built, bytes) else built.to_bytes()
    tag = json.loads(data)["tag"]
    secret = keys.unpinned if case.signer == "unpinned" else keys.secret
    signature = sign(data, secret, trusted_comment=f"herdr-mcp {tag}")
    if case.signer == "tampered":
        index = data.index(b'"published_at":"') + len(b'"published_at":"') + 3
        data = data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]
    if case.signer == "malformed":
        signature = "\n".join(signature.split("\n")[:2]) + "\n"
    return data, signature, case.discovered_tag or tag


def policy_for(case: Case, keys: Keys) -> AdmissionPolicy:
    overrides = dict(case.policy)
    sigstore: SigstoreTrust | UnsafeSkipSigstore = sigstore_trust(keys.stack, REPOSITORY)
    if "identity_policy" in overrides:
        narrowed = identity_policy(REPOSITORY, overrides.pop("identity_policy"))
        sigstore = SigstoreTrust(identity_policy=narrowed, trusted_root=keys.stack.trusted_root)
    if overrides.pop("sigstore", None) == "unsafe":
        sigstore = UnsafeSkipSigstore()
    arguments: dict[str, Any] = {
        "public_keys": (keys.pinned,),
        "repository": REPOSITORY,
        "repository_id": REPOSITORY_ID,
        "sigstore": sigstore,
        **overrides,
    }
    return AdmissionPolicy(**arguments)


def published(case: Case, base: RuntimeManifest, keys: Keys) -> tuple[PublishedRelease, str]:
    """The release of `case` as published (manifest, signatures, provenance), and its discovered tag."""
    data, signature, tag = signed(case, base, keys)
    signature_bundle, provenance = evidence_for(case, data, keys.stack)
    return PublishedRelease(data, signature, signature_bundle, provenance), tag


def run(case: Case, base: RuntimeManifest, keys: Keys) -> TrustedRelease | AlreadyCurrent:
    release_files, tag = published(case, base, keys)
    return admit(
        release_files,
        discovered_tag=tag,
        local=case.local,
        policy=policy_for(case, keys),
        highest_seen=None if case.highest_seen is None else Version(case.highest_seen),
    )


def outcome(case: Case, base: RuntimeManifest, keys: Keys) -> tuple[str, AdmissionRefused | None]:
    try:
        result = run(case, base, keys)
    except AdmissionRefused as refused:
        return refused.code, refused
    if isinstance(result, AlreadyCurrent):
        return "already_current", None
    return result.kind + ("+state_step" if result.state_step else ""), None


@pytest.mark.parametrize("name", list(CASES))
def test_the_admission_table(name: str, base: RuntimeManifest, keys: Keys) -> None:
    case = CASES[name]
    code, refused = outcome(case, base, keys)
    assert code == case.expected
    assert refused is None or isinstance(refused, ReleaseDataError)  # the release's fault, not the transport


CONTRACT_CODES = {
    "contract_downgrade",
    "contract_changed_within_epoch",
    "contract_epoch_not_adjacent",
    "contract_migration_missing",
    "contract_migration_from_mismatch",
    "contract_migration_state_schema_mismatch",
    "state_schema_mismatch",
    "state_migration_from_mismatch",
    "state_schema_downgrade",
}


@pytest.mark.parametrize("name", [name for name, case in CASES.items() if case.expected in CONTRACT_CODES])
def test_a_contract_refusal_names_both_epochs(name: str, base: RuntimeManifest, keys: Keys) -> None:
    case = CASES[name]
    _, refused = outcome(case, base, keys)
    assert refused is not None
    target = case.manifest(base)
    assert isinstance(target, RuntimeManifest)
    local_epoch, target_epoch = case.local.contract.epoch, target.contract.epoch
    assert (refused.local_epoch, refused.target_epoch) == (local_epoch, target_epoch)
    assert f"local contract epoch {local_epoch}" in refused.message
    assert f"contract epoch {target_epoch})" in refused.message
    assert refused.to_dict()["code"] == case.expected


def test_a_parser_refusal_names_the_local_epoch_and_the_field(base: RuntimeManifest, keys: Keys) -> None:
    _, refused = outcome(CASES["unknown field inside contract_migration"], base, keys)
    assert refused is not None
    assert refused.local_epoch == 5
    assert refused.target_epoch is None
    assert "contract_migration.note" in refused.message


def test_the_trusted_release(base: RuntimeManifest, keys: Keys) -> None:
    trusted = run(CASES["one epoch forward, real 4 -> 5"], base, keys)
    assert isinstance(trusted, TrustedRelease)
    assert trusted.manifest.contract == E5
    assert trusted.local == LOCAL_4
    assert trusted.version == Version("1.1.0")
    assert trusted.signature.key == keys.pinned
    assert trusted.sigstore_verified
    assert trusted.verified.provenance is not None
    assert {subject.name for subject in trusted.verified.provenance.subjects} == set(
        subjects(trusted.manifest.to_bytes())
    )
    assert trusted.asset_for(TARGET).name == f"herdr-mcp-1.2.0-{TARGET}.tar.gz"
    with pytest.raises(AdmissionRefused) as refused:
        trusted.asset_for("macos-arm64-cp311")
    assert refused.value.code == "no_asset_for_target"
    assert TARGET in refused.value.message
    with pytest.raises(dataclasses.FrozenInstanceError):
        trusted.kind = "same_contract"  # type: ignore[misc]


def test_only_admit_makes_a_trusted_release(base: RuntimeManifest, keys: Keys) -> None:
    trusted = run(CASES["equal contract"], base, keys)
    assert isinstance(trusted, TrustedRelease)
    with pytest.raises(TypeError):
        TrustedRelease(verified=trusted.verified, kind="same_contract", local=LOCAL_5, _admission=object())


def test_only_verify_release_makes_a_verified_release(base: RuntimeManifest, keys: Keys) -> None:
    trusted = run(CASES["equal contract"], base, keys)
    assert isinstance(trusted, TrustedRelease)
    verified = trusted.verified
    with pytest.raises(TypeError):
        VerifiedRelease(verified.manifest, verified.manifest_sha256, verified.signature, "verified", None)
    with pytest.raises(TypeError):
        dataclasses.replace(verified, sigstore="verified")


def test_an_identity_policy_for_another_repository_is_the_callers_fault(keys: Keys) -> None:
    with pytest.raises(UpdateUsageError, match="not the pinned repository") as error:
        AdmissionPolicy(
            public_keys=(keys.pinned,),
            repository="other/repo",
            repository_id=1,
            sigstore=sigstore_trust(keys.stack, REPOSITORY),
        )
    assert error.value.code == "admission_policy_invalid"


def test_the_unsafe_skip_is_recorded_on_the_trusted_release(base: RuntimeManifest, keys: Keys) -> None:
    trusted = run(CASES["no Sigstore files, unsafe skip chosen"], base, keys)
    assert isinstance(trusted, TrustedRelease)
    assert not trusted.sigstore_verified
    assert trusted.verified.sigstore == "unsafe_skipped"
    assert trusted.verified.provenance is None


def test_a_sigstore_refusal_names_both_epochs(base: RuntimeManifest, keys: Keys) -> None:
    case = dataclasses.replace(
        CASES["no provenance"], manifest=lambda b: release(b, contract=E6, migrate_from=E5)
    )
    _, refused = outcome(case, base, keys)
    assert refused is not None
    assert (refused.code, refused.local_epoch, refused.target_epoch) == ("provenance_missing", 5, 6)


class _NoIO:
    """An audit hook (they cannot be removed) that, while armed, refuses opening files and sockets,
    except reading the one file admission may read: the Sigstore trust root."""

    armed = False
    installed = False
    allowed: frozenset[str] = frozenset()

    @classmethod
    def hook(cls, event: str, args: tuple[Any, ...]) -> None:
        if not cls.armed:
            return
        if event == "open" and str(args[0]) in cls.allowed and args[1] in ("r", "rb", None):
            return
        if event == "open" or event.startswith("socket."):
            raise AssertionError(f"admission did I/O: {event} {args[:1]}")


def test_admission_does_no_io(base: RuntimeManifest, keys: Keys) -> None:
    names = ("equal contract", "one epoch forward, 5 -> 6", "two epochs forward", "an unpinned key")
    releases = {name: published(CASES[name], base, keys) for name in names}
    policies = {name: policy_for(CASES[name], keys) for name in names}
    if not _NoIO.installed:
        sys.addaudithook(_NoIO.hook)
        _NoIO.installed = True
    _NoIO.allowed = frozenset({str(keys.stack.trusted_root)})
    _NoIO.armed = True
    results: dict[str, str] = {}
    try:
        with pytest.raises(AssertionError, match="admission did I/O"):
            Path(__file__).read_bytes()  # the hook is live
        for name in names:
            release_files, tag = releases[name]
            try:
                result = admit(
                    release_files,
                    discovered_tag=tag,
                    local=CASES[name].local,
                    policy=policies[name],
                    highest_seen=None,
                )
                results[name] = result.kind if isinstance(result, TrustedRelease) else "already_current"
            except AdmissionRefused as refused:
                results[name] = refused.code
    finally:
        _NoIO.armed = False
    assert results == {name: CASES[name].expected for name in names}


# --- the persisted highest-seen version --------------------------------------------------------


def trusted_at(version: str, base: RuntimeManifest, keys: Keys) -> TrustedRelease:
    case = Case(LOCAL_5, lambda b: release(b, version=version), "same_contract")
    result = run(case, base, keys)
    assert isinstance(result, TrustedRelease)
    return result


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_highest_seen_is_recorded_0600_and_atomically(
    tmp_path: Path, base: RuntimeManifest, keys: Keys
) -> None:
    path = tmp_path / "state" / "highest-seen.json"
    assert read_highest_seen(path) is None
    assert record_admitted(path, trusted_at("1.2.0", base, keys)) == Version("1.2.0")
    assert mode_of(path) == 0o600
    assert json.loads(path.read_bytes()) == {"version": "1.2.0"}
    first_inode = path.stat().st_ino
    assert record_admitted(path, trusted_at("1.3.0", base, keys)) == Version("1.3.0")
    assert read_highest_seen(path) == Version("1.3.0")
    assert path.stat().st_ino != first_inode  # replaced by rename, never rewritten in place
    assert sorted(p.name for p in path.parent.iterdir()) == ["highest-seen.json", "highest-seen.json.lock"]


def test_highest_seen_is_never_lowered(tmp_path: Path, base: RuntimeManifest, keys: Keys) -> None:
    path = tmp_path / "highest-seen.json"
    record_admitted(path, trusted_at("1.3.0", base, keys))
    before = path.stat()
    assert record_admitted(path, trusted_at("1.2.0", base, keys)) == Version("1.3.0")
    assert record_admitted(path, trusted_at("1.3.0", base, keys)) == Version("1.3.0")
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert read_highest_seen(path) == Version("1.3.0")


def test_highest_seen_only_moves_after_an_admission(
    tmp_path: Path, base: RuntimeManifest, keys: Keys
) -> None:
    """The updater's order: read the floor, admit against it, record only what admission returned."""
    path = tmp_path / "highest-seen.json"
    record_admitted(path, trusted_at("1.3.0", base, keys))
    floor = read_highest_seen(path)
    for name in ("equal contract", "two epochs forward", "an unpinned key"):
        case = dataclasses.replace(CASES[name], highest_seen=str(floor))
        with pytest.raises(AdmissionRefused):
            run(case, base, keys)
    assert read_highest_seen(path) == Version("1.3.0")
    current = dataclasses.replace(
        CASES["equal contract"],
        local=LocalIdentity(version=Version("1.2.0"), contract=E5, state_schema=STATE_SCHEMA),
        highest_seen=str(floor),
    )
    # Nothing to record: AlreadyCurrent is not a TrustedRelease, and record_admitted takes only those.
    assert isinstance(run(current, base, keys), AlreadyCurrent)


def test_a_looser_file_is_replaced_by_a_0600_one(tmp_path: Path, base: RuntimeManifest, keys: Keys) -> None:
    path = tmp_path / "highest-seen.json"
    path.write_text('{"version": "1.0.0"}\n')
    os.chmod(path, 0o644)
    record_admitted(path, trusted_at("1.2.0", base, keys))
    assert mode_of(path) == 0o600


@pytest.mark.parametrize(
    "content",
    [b"not json", b'{"version": 3}', b'{"version": "1.0", "extra": 1}', b'{"version": "one"}', b"[]"],
)
def test_a_corrupt_highest_seen_file_is_an_error_not_none(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "highest-seen.json"
    path.write_bytes(content)
    with pytest.raises(HighestSeenError) as error:
        read_highest_seen(path)
    assert error.value.code == "highest_seen_corrupt"


def test_an_unwritable_place_is_reported(tmp_path: Path, base: RuntimeManifest, keys: Keys) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state directory should be")
    with pytest.raises(HighestSeenError) as error:
        record_admitted(blocker / "highest-seen.json", trusted_at("1.2.0", base, keys))
    assert error.value.code == "highest_seen_unwritable"
    unreadable = tmp_path / "directory-as-file"
    unreadable.mkdir()
    with pytest.raises(HighestSeenError) as error:
        read_highest_seen(unreadable)
    assert error.value.code == "highest_seen_unreadable"


def test_the_local_identity_of_this_runtime() -> None:
    assert LocalIdentity.of_this_runtime("1.1.0") == LOCAL_5
