"""Offline Sigstore verification against real recorded bundles.

The bundles are real: a keyless GitHub Actions signature over a release wheel (trailofbits/
rfc8785.py v0.1.2), a GitHub artifact attestation made through actions/attest (malancas/
attest-demo) and sigstore-python's CVE-2022-36056 regression bundle. They are found through
HERDR_MCP_SIGSTORE_FIXTURES, else ../shared/fixtures/sigstore next to the repository, else the copy
in tests/fixtures/sigstore. Every test runs with sockets to non-loopback addresses refused, so a
pass proves verification needs no network.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import ipaddress
import json
import os
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.release import attestation
from herdr_mcp.release.attestation import (
    AttestationError,
    IdentityPolicy,
    Statement,
    load_identity_policy,
    trusted_root_age,
    verify_artifact_signature,
    verify_attestation,
)

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"

RFC8785_POLICY = IdentityPolicy(
    repository="trailofbits/rfc8785.py",
    workflow_path=".github/workflows/release.yml",
    ref="refs/tags/v0.1.2",
    issuer=GITHUB_ISSUER,
    runner_environment="github-hosted",
)
DEMO_POLICY = IdentityPolicy(
    repository="malancas/attest-demo",
    workflow_path=".github/workflows/shared.yml",
    ref="refs/heads/main",
    issuer=GITHUB_ISSUER,
    runner_environment="github-hosted",
)
DEMO_SUBJECT = "github_provenance_demo-0.0.0-py3-none-any.whl"


def _fixtures_dir() -> Path:
    configured = os.environ.get("HERDR_MCP_SIGSTORE_FIXTURES")
    if configured:
        candidates = [Path(configured)]
    else:
        candidates = [
            REPOSITORY_ROOT.parent / "shared" / "fixtures" / "sigstore",
            REPOSITORY_ROOT / "tests" / "fixtures" / "sigstore",
        ]
    for candidate in candidates:
        if (candidate / "rfc8785-release.whl.sigstore.json").is_file():
            return candidate
    pytest.fail(
        "no Sigstore fixtures: set HERDR_MCP_SIGSTORE_FIXTURES to a directory holding the recorded "
        f"bundles (looked in {', '.join(map(str, candidates))})"
    )


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse every socket connection that leaves the machine (a guard, not a mock)."""
    original_connect = socket.socket.connect
    original_connect_ex = socket.socket.connect_ex

    def leaves_machine(address: Any) -> bool:
        if not isinstance(address, tuple):
            return False  # AF_UNIX path
        host = str(address[0])
        try:
            return not ipaddress.ip_address(host.split("%")[0]).is_loopback
        except ValueError:
            return host != "localhost"

    def connect(self: socket.socket, address: Any) -> None:
        if leaves_machine(address):
            raise OSError(f"network disabled in offline tests: connect to {address!r}")
        original_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if leaves_machine(address):
            raise OSError(f"network disabled in offline tests: connect to {address!r}")
        return original_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


@pytest.fixture(scope="module")
def fixtures() -> Path:
    return _fixtures_dir()


def _read(fixtures: Path, name: str) -> bytes:
    return (fixtures / name).read_bytes()


def _asset_digest(fixtures: Path) -> str:
    return hashlib.sha256(_read(fixtures, "attest-demo-artifact.whl")).hexdigest()


def _flip_byte(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]


def _edit_json(data: bytes, edit: Callable[[dict[str, Any]], None]) -> bytes:
    document = json.loads(data)
    edit(document)
    return json.dumps(document).encode()


def _refused(code: str, call: Callable[[], object]) -> AttestationError:
    with pytest.raises(AttestationError) as raised:
        call()
    assert raised.value.code == code, raised.value.message
    return raised.value


def test_the_network_guard_is_active() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(OSError, match="disabled"):
        sock.connect(("192.0.2.1", 443))


def test_fixtures_directory_must_exist(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HERDR_MCP_SIGSTORE_FIXTURES", str(tmp_path / "absent"))
    with pytest.raises(pytest.fail.Exception, match="HERDR_MCP_SIGSTORE_FIXTURES"):
        _fixtures_dir()


# --- the real bundles pass -----------------------------------------------------------------


def test_release_signature_verifies_with_the_packaged_root(fixtures: Path) -> None:
    artifact = _read(fixtures, "rfc8785-release.whl")
    bundle = _read(fixtures, "rfc8785-release.whl.sigstore.json")
    verify_artifact_signature(artifact, bundle, RFC8785_POLICY)
    production = fixtures / "trusted_root.production.json"
    verify_artifact_signature(artifact, bundle, RFC8785_POLICY, trusted_root=production)


def test_release_signature_verifies_under_a_tag_pattern(fixtures: Path) -> None:
    pattern = dataclasses.replace(RFC8785_POLICY, ref="refs/tags/v*")
    artifact = _read(fixtures, "rfc8785-release.whl")
    verify_artifact_signature(artifact, _read(fixtures, "rfc8785-release.whl.sigstore.json"), pattern)


def test_github_attestation_verifies_and_returns_the_statement(fixtures: Path) -> None:
    digest = _asset_digest(fixtures)
    statement = verify_attestation(
        _read(fixtures, "attest-demo-provenance.sigstore.json"), DEMO_POLICY, {DEMO_SUBJECT: digest.upper()}
    )
    assert isinstance(statement, Statement)
    assert [(subject.name, dict(subject.digest)) for subject in statement.subjects] == [
        (DEMO_SUBJECT, {"sha256": digest})
    ]
    assert statement.predicate_type == "https://slsa.dev/provenance/v1"
    assert (
        statement.predicate["runDetails"]["builder"]["id"]
        == "https://github.com/actions/runner/github-hosted"
    )
    assert statement.source_ref == "refs/heads/main"
    assert statement.trusted_root_age.newest_key_start == datetime(2025, 9, 23, tzinfo=UTC)


# --- refusals: the keyless signature ------------------------------------------------------


def _other(**changes: Any) -> IdentityPolicy:
    return dataclasses.replace(RFC8785_POLICY, **changes)


def _signature_inputs(fixtures: Path, case: str) -> tuple[bytes, bytes]:
    name = {"rfc8785": "rfc8785-release.whl", "cve": "cve-2022-36056.txt"}[case]
    return _read(fixtures, name), _read(fixtures, f"{name}.sigstore.json")


OTHER_SIGNERS = [
    pytest.param({"repository": "trailofbits/rfc8785"}, id="other-repository"),
    pytest.param({"workflow_path": ".github/workflows/ci.yml"}, id="other-workflow"),
    pytest.param({"ref": "refs/tags/v0.1.3"}, id="other-ref"),
    pytest.param({"ref": "refs/tags/v1*"}, id="ref-outside-pattern"),
    pytest.param({"ref": "refs/heads/main"}, id="branch-not-tag"),
    pytest.param({"issuer": "https://accounts.google.com"}, id="other-issuer"),
    pytest.param({"runner_environment": "self-hosted"}, id="other-runner"),
]


@pytest.mark.parametrize("changes", OTHER_SIGNERS)
def test_another_signer_is_refused(fixtures: Path, changes: dict[str, Any]) -> None:
    artifact, bundle = _signature_inputs(fixtures, "rfc8785")
    policy = _other(**changes)
    _refused("attestation_identity_mismatch", lambda: verify_artifact_signature(artifact, bundle, policy))


def test_the_staging_root_is_refused(fixtures: Path) -> None:
    artifact, bundle = _signature_inputs(fixtures, "rfc8785")
    staging = fixtures / "trusted_root.staging.json"
    _refused(
        "attestation_untrusted_root",
        lambda: verify_artifact_signature(artifact, bundle, RFC8785_POLICY, trusted_root=staging),
    )


def test_cve_2022_36056_bundle_is_refused_by_the_packaged_root(fixtures: Path) -> None:
    """It was made with Sigstore's staging instance, so its certificate does not chain to ours."""
    artifact, bundle = _signature_inputs(fixtures, "cve")
    _refused(
        "attestation_untrusted_root", lambda: verify_artifact_signature(artifact, bundle, RFC8785_POLICY)
    )


@pytest.mark.parametrize("index", [0, 4096, -3])
def test_a_tampered_artifact_is_refused(fixtures: Path, index: int) -> None:
    artifact, bundle = _signature_inputs(fixtures, "rfc8785")
    tampered = _flip_byte(artifact, index)
    error = _refused(
        "attestation_signature_invalid", lambda: verify_artifact_signature(tampered, bundle, RFC8785_POLICY)
    )
    assert "digest mismatch" in error.message


def test_a_tampered_signature_is_refused(fixtures: Path) -> None:
    artifact, bundle = _signature_inputs(fixtures, "rfc8785")

    def flip_signature(document: dict[str, Any]) -> None:
        signature = base64.b64decode(document["messageSignature"]["signature"])
        document["messageSignature"]["signature"] = base64.b64encode(_flip_byte(signature, 20)).decode()

    forged = _edit_json(bundle, flip_signature)
    _refused(
        "attestation_signature_invalid", lambda: verify_artifact_signature(artifact, forged, RFC8785_POLICY)
    )


def test_cve_2022_36056_log_entry_of_other_materials_is_refused(fixtures: Path) -> None:
    """Against the staging root it was made under, the chain holds and the log entry check refuses it.

    The bundle signs this exact file, but carries the log entry of another signature; even an
    accepted identity would not help, so the integrity failure is what is reported.
    """
    artifact, bundle = _signature_inputs(fixtures, "cve")
    staging = fixtures / "trusted_root.staging.json"
    error = _refused(
        "attestation_signature_invalid",
        lambda: verify_artifact_signature(artifact, bundle, RFC8785_POLICY, trusted_root=staging),
    )
    assert "transparency log entry is inconsistent" in error.message


def test_identity_mismatch_says_which_claim(fixtures: Path) -> None:
    artifact, bundle = _signature_inputs(fixtures, "rfc8785")
    error = _refused(
        "attestation_identity_mismatch",
        lambda: verify_artifact_signature(artifact, bundle, _other(repository="herdr-mcp/herdr-mcp")),
    )
    assert "https://github.com/trailofbits/rfc8785.py" in error.message
    assert "https://github.com/herdr-mcp/herdr-mcp" in error.message


# --- refusals: the GitHub artifact attestation --------------------------------------------


OTHER_ATTESTERS = [
    pytest.param({"repository": "malancas/other-demo"}, id="other-repository"),
    pytest.param({"ref": "refs/heads/dev"}, id="other-ref"),
    pytest.param({"ref": "refs/tags/v*"}, id="branch-not-tag"),
    pytest.param({"workflow_path": ".github/workflows/release.yml"}, id="other-workflow"),
    pytest.param({"issuer": "https://accounts.google.com"}, id="other-issuer"),
    pytest.param({"runner_environment": "self-hosted"}, id="other-runner"),
]


@pytest.mark.parametrize("changes", OTHER_ATTESTERS)
def test_another_attester_is_refused(fixtures: Path, changes: dict[str, Any]) -> None:
    bundle = _read(fixtures, "attest-demo-provenance.sigstore.json")
    policy = dataclasses.replace(DEMO_POLICY, **changes)
    subjects = {DEMO_SUBJECT: _asset_digest(fixtures)}
    _refused("attestation_identity_mismatch", lambda: verify_attestation(bundle, policy, subjects))


def test_an_attestation_under_the_staging_root_is_refused(fixtures: Path) -> None:
    bundle = _read(fixtures, "attest-demo-provenance.sigstore.json")
    staging = fixtures / "trusted_root.staging.json"
    subjects = {DEMO_SUBJECT: _asset_digest(fixtures)}
    _refused(
        "attestation_untrusted_root",
        lambda: verify_attestation(bundle, DEMO_POLICY, subjects, trusted_root=staging),
    )


@pytest.mark.parametrize(
    "subjects",
    [
        pytest.param({DEMO_SUBJECT: "0" * 64}, id="other-digest"),
        pytest.param({"herdr_mcp-0.1.0-py3-none-any.whl": None}, id="absent-subject"),
    ],
)
def test_a_subject_digest_other_than_the_asset_is_refused(
    fixtures: Path, subjects: dict[str, str | None]
) -> None:
    bundle = _read(fixtures, "attest-demo-provenance.sigstore.json")
    expected = {name: digest or _asset_digest(fixtures) for name, digest in subjects.items()}
    _refused("attestation_subject_mismatch", lambda: verify_attestation(bundle, DEMO_POLICY, expected))


def test_every_expected_subject_must_be_attested(fixtures: Path) -> None:
    digest = _asset_digest(fixtures)
    bundle = _read(fixtures, "attest-demo-provenance.sigstore.json")
    expected = {DEMO_SUBJECT: digest, "runtime-manifest.json": digest}
    error = _refused(
        "attestation_subject_mismatch", lambda: verify_attestation(bundle, DEMO_POLICY, expected)
    )
    assert "runtime-manifest.json" in error.message


def test_editing_the_attested_digest_breaks_the_signature(fixtures: Path) -> None:
    """Rewriting the statement to name another asset digest is caught by the DSSE signature."""
    bundle = _read(fixtures, "attest-demo-provenance.sigstore.json")
    other = "1" * 64

    def rewrite_subject(document: dict[str, Any]) -> None:
        statement = json.loads(base64.b64decode(document["dsseEnvelope"]["payload"]))
        statement["subject"][0]["digest"]["sha256"] = other
        document["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()

    forged = _edit_json(bundle, rewrite_subject)
    _refused(
        "attestation_signature_invalid",
        lambda: verify_attestation(forged, DEMO_POLICY, {DEMO_SUBJECT: other}),
    )


@pytest.mark.parametrize("subjects", [{}, {DEMO_SUBJECT: "sha256:abc"}, {DEMO_SUBJECT: "g" * 64}])
def test_expected_subjects_are_checked_before_anything(fixtures: Path, subjects: dict[str, str]) -> None:
    bundle = _read(fixtures, "attest-demo-provenance.sigstore.json")
    with pytest.raises(ValueError, match=r"subject|digest"):
        verify_attestation(bundle, DEMO_POLICY, subjects)


# --- malformed input ----------------------------------------------------------------------


def _junk_certificate(document: dict[str, Any]) -> None:
    document["verificationMaterial"]["certificate"]["rawBytes"] = base64.b64encode(
        b"not a certificate"
    ).decode()


def _no_log_entry(document: dict[str, Any]) -> None:
    document["verificationMaterial"]["tlogEntries"] = []


def _both_contents(document: dict[str, Any]) -> None:
    document["dsseEnvelope"] = {"payload": "", "payloadType": "x", "signatures": []}


MALFORMED = [
    pytest.param(lambda _: b"{not json", id="not-json"),
    pytest.param(lambda _: b"[]", id="array"),
    pytest.param(lambda _: b"{}", id="no-content"),
    pytest.param(lambda _: b"\xff\xfe", id="not-utf8"),
    pytest.param(lambda _: b"[" * 100_000, id="deeply-nested"),
    pytest.param(lambda bundle: _edit_json(bundle, _junk_certificate), id="junk-certificate"),
    pytest.param(lambda bundle: _edit_json(bundle, _no_log_entry), id="no-log-entry"),
    pytest.param(lambda bundle: _edit_json(bundle, _both_contents), id="two-contents"),
    pytest.param(
        lambda bundle: bundle.replace(b"bundle.v0.3+json", b"bundle.v9+json"), id="unknown-media-type"
    ),
]


@pytest.mark.parametrize("make", MALFORMED)
def test_malformed_signature_bundles(fixtures: Path, make: Callable[[bytes], bytes]) -> None:
    artifact, bundle = _signature_inputs(fixtures, "cve")
    broken = make(bundle)
    _refused(
        "attestation_bundle_malformed", lambda: verify_artifact_signature(artifact, broken, RFC8785_POLICY)
    )


def test_an_oversized_bundle_is_evidence_too_large(fixtures: Path) -> None:
    artifact, _ = _signature_inputs(fixtures, "cve")
    refused = _refused(
        "evidence_too_large",
        lambda: verify_artifact_signature(
            artifact, b" " * (attestation.MAX_BUNDLE_BYTES + 1), RFC8785_POLICY
        ),
    )
    assert f"over its cap of {attestation.MAX_BUNDLE_BYTES} bytes" in refused.message


def test_bundle_kinds_are_not_interchangeable(fixtures: Path) -> None:
    artifact, signature_bundle = _signature_inputs(fixtures, "rfc8785")
    attestation_bundle = _read(fixtures, "attest-demo-provenance.sigstore.json")
    _refused(
        "attestation_bundle_malformed",
        lambda: verify_artifact_signature(artifact, attestation_bundle, DEMO_POLICY),
    )
    _refused(
        "attestation_bundle_malformed",
        lambda: verify_attestation(signature_bundle, RFC8785_POLICY, {"rfc8785-release.whl": "0" * 64}),
    )


@pytest.mark.parametrize(
    "content", [None, b"{}", b'{"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1"}']
)
def test_an_unusable_trusted_root_is_refused(fixtures: Path, tmp_path: Path, content: bytes | None) -> None:
    root = tmp_path / "trusted_root.json"
    if content is not None:
        root.write_bytes(content)
    artifact, bundle = _signature_inputs(fixtures, "rfc8785")
    _refused(
        "attestation_trusted_root_invalid",
        lambda: verify_artifact_signature(artifact, bundle, RFC8785_POLICY, trusted_root=root),
    )


# --- the statement and provenance checks (reachable only through a signed bundle) ----------


def _statement(**changes: Any) -> dict[str, Any]:
    statement: dict[str, Any] = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "a.whl", "digest": {"sha256": "0" * 64}}],
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {},
    }
    statement.update(changes)
    return statement


IN_TOTO = "application/vnd.in-toto+json"
UNEXPECTED_STATEMENTS = [
    pytest.param("application/json", _statement(), id="payload-type"),
    pytest.param(IN_TOTO, _statement(_type="https://in-toto.io/Statement/v0.1"), id="statement-type"),
    pytest.param(IN_TOTO, _statement(predicateType="https://slsa.dev/provenance/v0.2"), id="slsa-v0.2"),
    pytest.param(IN_TOTO, _statement(predicateType="https://spdx.dev/Document"), id="sbom"),
    pytest.param(IN_TOTO, _statement(subject=[]), id="no-subjects"),
    pytest.param(IN_TOTO, _statement(subject=[{"name": "a.whl", "digest": {"sha256": 1}}]), id="bad-digest"),
    pytest.param(IN_TOTO, _statement(subject=[{"digest": {"sha256": "0" * 64}}]), id="no-name"),
    pytest.param(IN_TOTO, _statement(predicate=[]), id="predicate-not-object"),
    pytest.param(IN_TOTO, [], id="not-an-object"),
]


@pytest.mark.parametrize(("payload_type", "statement"), UNEXPECTED_STATEMENTS)
def test_unexpected_statements(payload_type: str, statement: Any) -> None:
    payload = json.dumps(statement).encode()
    _refused("attestation_predicate_unexpected", lambda: attestation._parse_statement(payload_type, payload))


def _demo_predicate(fixtures: Path) -> dict[str, Any]:
    document = json.loads(_read(fixtures, "attest-demo-provenance.sigstore.json"))
    predicate: dict[str, Any] = json.loads(base64.b64decode(document["dsseEnvelope"]["payload"]))["predicate"]
    return predicate


def test_the_provenance_must_name_the_certificate_workflow(fixtures: Path) -> None:
    predicate = _demo_predicate(fixtures)
    attestation._check_provenance(predicate, DEMO_POLICY, "refs/heads/main")
    _refused(
        "attestation_predicate_unexpected",
        lambda: attestation._check_provenance(predicate, DEMO_POLICY, "refs/heads/dev"),
    )
    predicate["buildDefinition"]["buildType"] = "https://example.com/other-builder"
    _refused(
        "attestation_predicate_unexpected",
        lambda: attestation._check_provenance(predicate, DEMO_POLICY, "refs/heads/main"),
    )


# --- the identity policy ------------------------------------------------------------------


def test_the_packaged_policy_pins_our_release_workflow() -> None:
    policy = load_identity_policy()
    assert policy == IdentityPolicy(
        repository="herdr-mcp/herdr-mcp",
        workflow_path=".github/workflows/release.yml",
        ref="refs/tags/v*",
        issuer=GITHUB_ISSUER,
        runner_environment="github-hosted",
    )
    assert policy == IdentityPolicy.from_file(REPOSITORY_ROOT / "attestations" / "identity-policy.json")


def test_the_packaged_trust_files_are_the_repository_ones() -> None:
    packaged = resources.files("herdr_mcp") / "attestations"
    for name in ("trusted_root.json", "identity-policy.json"):
        assert (packaged / name).read_bytes() == (REPOSITORY_ROOT / "attestations" / name).read_bytes()


def test_ref_patterns_and_narrowing() -> None:
    policy = load_identity_policy()
    assert policy.matches_ref("refs/tags/v1.2.3")
    assert policy.matches_ref("refs/tags/v1.2.3-rc.1")
    assert not policy.matches_ref("refs/tags/v")
    assert not policy.matches_ref("refs/tags/1.2.3")
    assert not policy.matches_ref("refs/heads/v1")
    exact = policy.with_ref("refs/tags/v1.2.3")
    assert exact.ref == "refs/tags/v1.2.3"
    assert not exact.matches_ref("refs/tags/v1.2.4")
    assert exact.workflow_uri(exact.ref) == (
        "https://github.com/herdr-mcp/herdr-mcp/.github/workflows/release.yml@refs/tags/v1.2.3"
    )
    _refused("attestation_identity_mismatch", lambda: policy.with_ref("refs/heads/main"))
    _refused("attestation_policy_invalid", lambda: policy.with_ref("refs/tags/v1*"))


def test_narrowing_to_another_tag_refuses_the_signature(fixtures: Path) -> None:
    pattern = dataclasses.replace(RFC8785_POLICY, ref="refs/tags/v*")
    artifact, bundle = _signature_inputs(fixtures, "rfc8785")
    verify_artifact_signature(artifact, bundle, pattern.with_ref("refs/tags/v0.1.2"))
    _refused(
        "attestation_identity_mismatch",
        lambda: verify_artifact_signature(artifact, bundle, pattern.with_ref("refs/tags/v0.1.1")),
    )


INVALID_POLICIES = [
    pytest.param({"repository": "herdr-mcp"}, id="repository-without-owner"),
    pytest.param({"workflow_path": "release.yml"}, id="workflow-outside-workflows"),
    pytest.param({"ref": "v1.2.3"}, id="ref-not-refs"),
    pytest.param({"ref": "refs/tags/v*.*"}, id="wildcard-inside"),
    pytest.param({"ref": "refs/*"}, id="any-ref"),
    pytest.param({"issuer": "http://token.actions.githubusercontent.com"}, id="issuer-not-https"),
    pytest.param({"runner_environment": ""}, id="empty-runner"),
    pytest.param({"runner_environment": 1}, id="runner-not-string"),
    pytest.param({"extra": "field"}, id="unknown-field"),
]


@pytest.mark.parametrize("change", INVALID_POLICIES)
def test_invalid_policies(tmp_path: Path, change: dict[str, Any]) -> None:
    document = json.loads((REPOSITORY_ROOT / "attestations" / "identity-policy.json").read_bytes())
    document.update(change)
    path = tmp_path / "identity-policy.json"
    path.write_text(json.dumps(document))
    _refused("attestation_policy_invalid", lambda: IdentityPolicy.from_file(path))


def test_a_policy_may_accept_any_runner(fixtures: Path) -> None:
    artifact, bundle = _signature_inputs(fixtures, "rfc8785")
    verify_artifact_signature(artifact, bundle, _other(runner_environment=None))


# --- the age of the trust root ------------------------------------------------------------


def test_trusted_root_age_is_the_newest_key() -> None:
    fresh = trusted_root_age(now=datetime(2026, 3, 1, tzinfo=UTC))
    assert fresh.newest_key_start == datetime(2025, 9, 23, tzinfo=UTC)
    assert not fresh.stale
    assert fresh.warning is None
    old = trusted_root_age(now=datetime(2026, 11, 29, tzinfo=UTC))
    assert old.stale
    assert old.warning is not None
    assert "2025-09-23" in old.warning
    assert "432 days" in old.warning
    assert "TRUSTED_ROOT.md" in old.warning


def test_trusted_root_age_of_another_root(fixtures: Path) -> None:
    age = trusted_root_age(fixtures / "trusted_root.staging.json", now=datetime(2026, 11, 29, tzinfo=UTC))
    assert age.source.endswith("trusted_root.staging.json")
    assert age.newest_key_start <= datetime(2026, 11, 29, tzinfo=UTC)
