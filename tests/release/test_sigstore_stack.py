"""The local Sigstore stack mints bundles our real verifier accepts, and only under its own root.

Every check goes through `herdr_mcp.release.attestation` (sigstore 4.5.1 underneath) with sockets
to non-loopback addresses refused, so a pass also proves that verification needs no network.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import socket
from collections.abc import Callable
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.certificate_transparency import LogEntryType
from sigstore.models import Bundle

from herdr_mcp.release.attestation import (
    AttestationError,
    IdentityPolicy,
    verify_artifact_signature,
    verify_attestation,
)
from tests.support.sigstore_stack import (
    BUNDLE_MEDIA_TYPE,
    OTHER_ENTRIES_PER_BATCH,
    SigstoreStack,
    WorkflowIdentity,
    forbid_remote_connections,
)

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "sigstore"
RELEASE = WorkflowIdentity(
    repository="herdr-mcp/herdr-mcp", workflow_path=".github/workflows/release.yml", ref="refs/tags/v1.2.3"
)
#: GitHub's reusable attest workflow, pinned by commit, as in real attestations.
ATTEST_WORKFLOW = (
    "github/artifact-attestations-workflows/.github/workflows/attest.yml"
    "@09b495c3f12c7881b3cc17209a327792065c1a1d"
)
MANIFEST = b'{"version": "1.2.3", "assets": []}\n'
WHEEL = "herdr_mcp-1.2.3-py3-none-any.whl"
BUNDLE = "herdr-mcp-1.2.3-linux-x86_64.tar.gz"
SUBJECTS = {WHEEL: hashlib.sha256(b"wheel").hexdigest(), BUNDLE: hashlib.sha256(b"bundle").hexdigest()}


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    forbid_remote_connections(monkeypatch)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> SigstoreStack:
    return SigstoreStack(tmp_path_factory.mktemp("sigstore"))


@pytest.fixture(scope="module")
def other_stack(tmp_path_factory: pytest.TempPathFactory) -> SigstoreStack:
    return SigstoreStack(tmp_path_factory.mktemp("other-sigstore"))


def _refused(code: str, call: Callable[[], object]) -> AttestationError:
    with pytest.raises(AttestationError) as raised:
        call()
    assert raised.value.code == code, raised.value.message
    return raised.value


def _edit_bundle(bundle: bytes, edit: Callable[[dict[str, Any]], None]) -> bytes:
    document = json.loads(bundle)
    edit(document)
    return json.dumps(document).encode()


def _flip_b64(text: str, index: int = -8) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[index] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


def test_the_network_guard_is_active() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(OSError, match="disabled"):
        sock.connect(("192.0.2.1", 443))


# --- what the stack mints verifies --------------------------------------------------------


def test_signed_artifact_verifies(stack: SigstoreStack) -> None:
    bundle = stack.sign_artifact(MANIFEST, RELEASE)
    verify_artifact_signature(MANIFEST, bundle, RELEASE.policy(), trusted_root=stack.trusted_root)


def test_signed_artifact_verifies_under_the_policy_document_with_a_tag_pattern(stack: SigstoreStack) -> None:
    policy = IdentityPolicy.from_json(RELEASE.policy_json())
    assert policy == RELEASE.policy()
    pattern = dataclasses.replace(policy, ref="refs/tags/v*")
    bundle = stack.sign_artifact(MANIFEST, RELEASE)
    verify_artifact_signature(MANIFEST, bundle, pattern, trusted_root=stack.trusted_root)


def test_attestation_verifies_and_returns_the_subjects(stack: SigstoreStack) -> None:
    bundle = stack.attest_provenance(SUBJECTS, RELEASE)
    statement = verify_attestation(bundle, RELEASE.policy(), SUBJECTS, trusted_root=stack.trusted_root)
    assert {subject.name: dict(subject.digest) for subject in statement.subjects} == {
        name: {"sha256": digest} for name, digest in SUBJECTS.items()
    }
    assert statement.source_ref == RELEASE.ref
    assert statement.predicate["buildDefinition"]["externalParameters"]["workflow"] == {
        "ref": RELEASE.ref,
        "repository": "https://github.com/herdr-mcp/herdr-mcp",
        "path": ".github/workflows/release.yml",
    }
    assert (
        statement.predicate["runDetails"]["builder"]["id"]
        == "https://github.com/actions/runner/github-hosted"
    )
    assert statement.trusted_root_age.warning is None


def test_attestation_verifies_for_a_subset_of_its_subjects(stack: SigstoreStack) -> None:
    bundle = stack.attest_provenance(SUBJECTS, RELEASE)
    verify_attestation(bundle, RELEASE.policy(), {WHEEL: SUBJECTS[WHEEL]}, trusted_root=stack.trusted_root)


def test_attestation_signed_by_a_reusable_workflow_verifies(stack: SigstoreStack) -> None:
    """GitHub's attest workflow signs (the SAN); the build config claim still names ours."""
    identity = dataclasses.replace(RELEASE, signer_workflow=ATTEST_WORKFLOW)
    bundle = stack.attest_provenance(SUBJECTS, identity)
    verify_attestation(bundle, RELEASE.policy(), SUBJECTS, trusted_root=stack.trusted_root)


def test_every_bundle_still_verifies_as_the_log_grows(stack: SigstoreStack) -> None:
    """Inclusion proofs of several depths, each under the checkpoint of its own tree size."""
    signed = [(b"artifact %d" % n, stack.sign_artifact(b"artifact %d" % n, RELEASE)) for n in range(6)]
    proofs = [
        json.loads(bundle)["verificationMaterial"]["tlogEntries"][0]["inclusionProof"] for _, bundle in signed
    ]
    sizes = [int(proof["treeSize"]) for proof in proofs]
    batch = 1 + OTHER_ENTRIES_PER_BATCH
    assert sizes == [sizes[0] + batch * n for n in range(6)]
    assert [int(proof["logIndex"]) for proof in proofs] == [size - batch for size in sizes]
    assert min(len(proof["hashes"]) for proof in proofs) >= 2
    for data, bundle in signed:
        verify_artifact_signature(data, bundle, RELEASE.policy(), trusted_root=stack.trusted_root)


def test_bundles_have_the_shape_sigstore_and_actions_attest_write(stack: SigstoreStack) -> None:
    signature = json.loads(stack.sign_artifact(MANIFEST, RELEASE))
    attestation = json.loads(stack.attest_provenance(SUBJECTS, RELEASE))
    for document, kind in ((signature, "hashedrekord"), (attestation, "dsse")):
        assert document["mediaType"] == BUNDLE_MEDIA_TYPE
        (entry,) = document["verificationMaterial"]["tlogEntries"]
        assert entry["kindVersion"] == {"kind": kind, "version": "0.0.1"}
        assert entry["inclusionPromise"]["signedEntryTimestamp"]
    certificate = Bundle.from_json(json.dumps(signature)).signing_certificate
    (sct,) = certificate.extensions.get_extension_for_class(
        x509.PrecertificateSignedCertificateTimestamps
    ).value
    assert sct.entry_type == LogEntryType.PRE_CERTIFICATE
    assert sct.timestamp.replace(tzinfo=UTC) == certificate.not_valid_before_utc
    assert certificate.not_valid_after_utc - certificate.not_valid_before_utc == timedelta(minutes=10)
    payload = json.loads(base64.b64decode(attestation["dsseEnvelope"]["payload"]))
    assert payload["_type"] == "https://in-toto.io/Statement/v1"
    assert payload["predicateType"] == "https://slsa.dev/provenance/v1"
    assert (
        payload["predicate"]["buildDefinition"]["buildType"]
        == "https://slsa-framework.github.io/github-actions-buildtypes/workflow/v1"
    )


# --- refusals: the keyless signature ------------------------------------------------------


def test_tampered_artifact_is_refused(stack: SigstoreStack) -> None:
    bundle = stack.sign_artifact(MANIFEST, RELEASE)
    _refused(
        "attestation_signature_invalid",
        lambda: verify_artifact_signature(
            MANIFEST + b" ", bundle, RELEASE.policy(), trusted_root=stack.trusted_root
        ),
    )


OTHER_SIGNERS = [
    pytest.param({"repository": "herdr-mcp/herdr-mcp-fork"}, id="other-repository"),
    pytest.param({"workflow_path": ".github/workflows/ci.yml"}, id="other-workflow"),
    pytest.param({"ref": "refs/tags/v1.2.4"}, id="other-ref"),
    pytest.param({"ref": "refs/heads/main"}, id="branch-not-tag"),
    pytest.param({"issuer": "https://accounts.example.test"}, id="other-issuer"),
    pytest.param({"runner_environment": "self-hosted"}, id="self-hosted-runner"),
]


@pytest.mark.parametrize("change", OTHER_SIGNERS)
def test_signature_by_another_signer_is_refused(stack: SigstoreStack, change: dict[str, str]) -> None:
    bundle = stack.sign_artifact(MANIFEST, dataclasses.replace(RELEASE, **change))
    _refused(
        "attestation_identity_mismatch",
        lambda: verify_artifact_signature(
            MANIFEST, bundle, RELEASE.policy(), trusted_root=stack.trusted_root
        ),
    )


def test_signature_by_a_reusable_workflow_is_refused(stack: SigstoreStack) -> None:
    """A keyless release signature must be made by the release workflow itself (the SAN)."""
    bundle = stack.sign_artifact(MANIFEST, dataclasses.replace(RELEASE, signer_workflow=ATTEST_WORKFLOW))
    _refused(
        "attestation_identity_mismatch",
        lambda: verify_artifact_signature(
            MANIFEST, bundle, RELEASE.policy(), trusted_root=stack.trusted_root
        ),
    )


def test_stack_signature_is_untrusted_under_the_packaged_production_root(stack: SigstoreStack) -> None:
    bundle = stack.sign_artifact(MANIFEST, RELEASE)
    _refused(
        "attestation_untrusted_root", lambda: verify_artifact_signature(MANIFEST, bundle, RELEASE.policy())
    )


def test_signature_from_an_independent_stack_is_untrusted(
    stack: SigstoreStack, other_stack: SigstoreStack
) -> None:
    bundle = other_stack.sign_artifact(MANIFEST, RELEASE)
    _refused(
        "attestation_untrusted_root",
        lambda: verify_artifact_signature(
            MANIFEST, bundle, RELEASE.policy(), trusted_root=stack.trusted_root
        ),
    )


TAMPERED_LOG_ENTRIES = [
    pytest.param(
        lambda entry: entry["inclusionPromise"].update(
            signedEntryTimestamp=_flip_b64(entry["inclusionPromise"]["signedEntryTimestamp"])
        ),
        "SET: invalid inclusion promise",
        id="inclusion-promise",
    ),
    pytest.param(
        lambda entry: entry.update(integratedTime=str(int(entry["integratedTime"]) + 1)),
        "SET: invalid inclusion promise",
        id="integrated-time",
    ),
    pytest.param(
        lambda entry: entry["inclusionProof"].update(rootHash=_flip_b64(entry["inclusionProof"]["rootHash"])),
        "invalid root hash",
        id="root-hash",
    ),
    pytest.param(
        lambda entry: entry["inclusionProof"]["checkpoint"].update(
            envelope=entry["inclusionProof"]["checkpoint"]["envelope"].replace("\n\n", "\nTimestamp: 1\n\n")
        ),
        "checkpoint: invalid signature",
        id="checkpoint-note",
    ),
]


@pytest.mark.parametrize(("tamper", "reason"), TAMPERED_LOG_ENTRIES)
def test_tampered_log_entry_is_refused(
    stack: SigstoreStack, tamper: Callable[[dict[str, Any]], None], reason: str
) -> None:
    """The inclusion promise, proof and checkpoint the stack's log signs are each checked."""
    bundle = stack.sign_artifact(MANIFEST, RELEASE)
    tampered = _edit_bundle(
        bundle, lambda document: tamper(document["verificationMaterial"]["tlogEntries"][0])
    )
    error = _refused(
        "attestation_signature_invalid",
        lambda: verify_artifact_signature(
            MANIFEST, tampered, RELEASE.policy(), trusted_root=stack.trusted_root
        ),
    )
    assert reason in error.message


@pytest.mark.parametrize(
    ("section", "code", "reason"),
    [
        pytest.param("ctlogs", "attestation_signature_invalid", "SCT verify failed", id="ct-log-key"),
        pytest.param(
            "tlogs",
            "attestation_signature_invalid",
            "checkpoint: invalid signature",
            id="transparency-log-key",
        ),
        pytest.param(
            "certificateAuthorities",
            "attestation_untrusted_root",
            "certificate chain",
            id="certificate-authority",
        ),
    ],
)
def test_every_key_of_the_trust_root_is_checked(
    stack: SigstoreStack, other_stack: SigstoreStack, tmp_path: Path, section: str, code: str, reason: str
) -> None:
    """With one section swapped for another stack's, the stack's bundles stop verifying."""
    root = json.loads(stack.trusted_root.read_text())
    root[section] = json.loads(other_stack.trusted_root.read_text())[section]
    mixed = tmp_path / "trusted_root.json"
    mixed.write_text(json.dumps(root))
    bundle = stack.sign_artifact(MANIFEST, RELEASE)
    verify_artifact_signature(MANIFEST, bundle, RELEASE.policy(), trusted_root=stack.trusted_root)
    error = _refused(
        code, lambda: verify_artifact_signature(MANIFEST, bundle, RELEASE.policy(), trusted_root=mixed)
    )
    assert reason in error.message


# --- refusals: the attestation ------------------------------------------------------------


@pytest.mark.parametrize(
    "expected",
    [
        pytest.param(
            {WHEEL: SUBJECTS[WHEEL], "herdr-mcp-extra.tar.gz": SUBJECTS[BUNDLE]}, id="missing-subject"
        ),
        pytest.param({WHEEL: hashlib.sha256(b"other wheel").hexdigest()}, id="other-digest"),
    ],
)
def test_attestation_not_covering_the_asset_is_refused(
    stack: SigstoreStack, expected: dict[str, str]
) -> None:
    bundle = stack.attest_provenance(SUBJECTS, RELEASE)
    _refused(
        "attestation_subject_mismatch",
        lambda: verify_attestation(bundle, RELEASE.policy(), expected, trusted_root=stack.trusted_root),
    )


def test_tampered_attestation_payload_is_refused(stack: SigstoreStack) -> None:
    bundle = stack.attest_provenance(SUBJECTS, RELEASE)
    forged_digest = hashlib.sha256(b"forged bundle").hexdigest()

    def forge(document: dict[str, Any]) -> None:
        envelope = document["dsseEnvelope"]
        statement = base64.b64decode(envelope["payload"]).replace(
            SUBJECTS[BUNDLE].encode(), forged_digest.encode()
        )
        envelope["payload"] = base64.b64encode(statement).decode()

    forged = _edit_bundle(bundle, forge)
    _refused(
        "attestation_signature_invalid",
        lambda: verify_attestation(
            forged, RELEASE.policy(), {BUNDLE: forged_digest}, trusted_root=stack.trusted_root
        ),
    )


@pytest.mark.parametrize("change", OTHER_SIGNERS)
def test_attestation_by_another_signer_is_refused(stack: SigstoreStack, change: dict[str, str]) -> None:
    bundle = stack.attest_provenance(SUBJECTS, dataclasses.replace(RELEASE, **change))
    _refused(
        "attestation_identity_mismatch",
        lambda: verify_attestation(bundle, RELEASE.policy(), SUBJECTS, trusted_root=stack.trusted_root),
    )


def test_attestation_of_another_build_type_is_refused(stack: SigstoreStack) -> None:
    bundle = stack.attest_provenance(SUBJECTS, RELEASE, build_type="https://example.test/buildtypes/other/v1")
    _refused(
        "attestation_predicate_unexpected",
        lambda: verify_attestation(bundle, RELEASE.policy(), SUBJECTS, trusted_root=stack.trusted_root),
    )


def test_attestation_from_an_independent_stack_is_untrusted(
    stack: SigstoreStack, other_stack: SigstoreStack
) -> None:
    bundle = other_stack.attest_provenance(SUBJECTS, RELEASE)
    _refused(
        "attestation_untrusted_root",
        lambda: verify_attestation(bundle, RELEASE.policy(), SUBJECTS, trusted_root=stack.trusted_root),
    )
    _refused("attestation_untrusted_root", lambda: verify_attestation(bundle, RELEASE.policy(), SUBJECTS))


@pytest.mark.parametrize(
    "subjects",
    [pytest.param({}, id="none"), pytest.param({WHEEL: "ABC"}, id="not-sha256-hex")],
)
def test_attest_provenance_refuses_malformed_subjects(stack: SigstoreStack, subjects: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="sha256"):
        stack.attest_provenance(subjects, RELEASE)


# --- the stack's root is its own ----------------------------------------------------------


def test_recorded_real_signature_verifies_only_under_its_own_root(stack: SigstoreStack) -> None:
    """A public-good bundle verifies under the production root and is untrusted under the stack's."""
    rfc8785 = WorkflowIdentity(
        repository="trailofbits/rfc8785.py",
        workflow_path=".github/workflows/release.yml",
        ref="refs/tags/v0.1.2",
    )
    artifact = (RECORDED / "rfc8785-release.whl").read_bytes()
    bundle = (RECORDED / "rfc8785-release.whl.sigstore.json").read_bytes()
    production = RECORDED / "trusted_root.production.json"
    verify_artifact_signature(artifact, bundle, rfc8785.policy(), trusted_root=production)
    _refused(
        "attestation_untrusted_root",
        lambda: verify_artifact_signature(
            artifact, bundle, rfc8785.policy(), trusted_root=stack.trusted_root
        ),
    )


def test_recorded_real_attestation_verifies_only_under_its_own_root(stack: SigstoreStack) -> None:
    """A real GitHub artifact attestation verifies under the production root, not the stack's."""
    demo = WorkflowIdentity(
        repository="malancas/attest-demo", workflow_path=".github/workflows/shared.yml", ref="refs/heads/main"
    )
    wheel = (RECORDED / "attest-demo-artifact.whl").read_bytes()
    subjects = {"github_provenance_demo-0.0.0-py3-none-any.whl": hashlib.sha256(wheel).hexdigest()}
    bundle = (RECORDED / "attest-demo-provenance.sigstore.json").read_bytes()
    production = RECORDED / "trusted_root.production.json"
    verify_attestation(bundle, demo.policy(), subjects, trusted_root=production)
    _refused(
        "attestation_untrusted_root",
        lambda: verify_attestation(bundle, demo.policy(), subjects, trusted_root=stack.trusted_root),
    )


def test_attestation_with_the_newer_actions_build_type_verifies(stack: SigstoreStack) -> None:
    """Newer @actions/attest writes GitHub's own buildType address for the same definition."""
    bundle = stack.attest_provenance(
        SUBJECTS, RELEASE, build_type="https://actions.github.io/buildtypes/workflow/v1"
    )
    statement = verify_attestation(bundle, RELEASE.policy(), SUBJECTS, trusted_root=stack.trusted_root)
    assert {subject.name for subject in statement.subjects} == set(SUBJECTS)
