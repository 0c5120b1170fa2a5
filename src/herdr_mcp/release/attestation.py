"""Offline Sigstore verification of release signatures and GitHub artifact attestations.

A release is signed twice in GitHub Actions: a keyless Sigstore signature over the exact
manifest bytes (a hashedrekord bundle) and GitHub artifact attestations (DSSE bundles holding an
in-toto statement with SLSA provenance v1) for the manifest and every asset. A workstation checks
both here, with no network: the Sigstore trust root is the vendored `trusted_root.json` packaged
as `herdr_mcp/attestations/`, and the accepted signer is an `IdentityPolicy` (repository,
workflow path, tag ref, OIDC issuer, runner environment) checked against the claims Fulcio wrote
into the signing certificate.

Every refusal is an `AttestationError` with a stable code:

- `evidence_too_large`: the bundle is over `MAX_BUNDLE_BYTES` (`herdr_mcp.release.evidence`).
- `attestation_bundle_malformed`: the bundle is not a Sigstore bundle of the expected kind.
- `attestation_trusted_root_invalid`: the trust root file is missing or unreadable.
- `attestation_untrusted_root`: the signing certificate does not chain to the trust root.
- `attestation_signature_invalid`: the signature, log entry or timestamps do not hold for
  these bytes (a tampered artifact, a log entry that belongs to other materials).
- `attestation_identity_mismatch`: validly signed, but by someone the policy does not accept.
- `attestation_predicate_unexpected`: the attestation is not the SLSA provenance we expect.
- `attestation_subject_mismatch`: the attestation does not cover an expected asset digest.
- `attestation_policy_invalid`: an identity policy is malformed.

Why one module of over 600 lines: it is one verification, read top to bottom in the order it
runs (bundle, trust root, signer identity, statement, provenance, subjects), and its three
inputs (the identity policy, the vendored trust root and its age) raise the same
`AttestationError` whose codes are listed above. Moving the policy or the trust root into
modules of their own would have them import that error back from here (a cycle) or put the
error type apart from the checks that define its codes. The policy and the trust root are
here to feed the verification; the updater and `release verify` only load them and pass them in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar

from cryptography import x509
from cryptography.hazmat import asn1

from herdr_mcp.errors import RefusedFault
from herdr_mcp.release.evidence import EVIDENCE_TOO_LARGE, too_large_message
from herdr_mcp.strict_json import JsonLimits, loads_bounded

# sigstore (with tuf, rekor_types and pydantic models) takes most of a second to import, and every
# `herdr-mcp` command that reaches the updater or the DEV plane imports this module: the
# functions that verify import it, so a command that verifies nothing does not wait for it.
if TYPE_CHECKING:
    from sigstore.models import Bundle
    from sigstore.verify import Verifier
    from sigstore.verify.policy import VerificationPolicy

AttestationErrorCode = Literal[
    "evidence_too_large",
    "attestation_bundle_malformed",
    "attestation_trusted_root_invalid",
    "attestation_untrusted_root",
    "attestation_signature_invalid",
    "attestation_identity_mismatch",
    "attestation_predicate_unexpected",
    "attestation_subject_mismatch",
    "attestation_policy_invalid",
]

#: Largest bundle we parse. Real bundles are about 10 KiB (a certificate, one log entry and, for
#: attestations, a statement with one subject per asset); 1 MiB leaves room for hundreds of
#: assets while bounding what an attacker-supplied file can make the JSON parser do.
MAX_BUNDLE_BYTES = 1 << 20
#: The structure of a bundle, its statement, an identity policy or the trusted root
#: (docs/runtime.md "Parse boundaries"): each holds a few hundred items.
EVIDENCE_LIMITS = JsonLimits(max_bytes=MAX_BUNDLE_BYTES, max_items=50_000)

#: How old the newest key in the trust root may be before `trusted_root_age` warns. Our own
#: cadence, not Sigstore's: an old root still verifies releases signed under keys it lists, but
#: misses keys Sigstore added since (those releases fail as `attestation_untrusted_root`) and
#: validity ends it set after a rotation. A yearly refresh check (attestations/TRUSTED_ROOT.md)
#: keeps both within a year.
TRUSTED_ROOT_STALE_AFTER = timedelta(days=365)

IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
IN_TOTO_STATEMENT_V1 = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"
#: The buildType actions/attest writes into SLSA provenance for a GitHub Actions workflow run
#: (what the recorded real attestation in tests/fixtures/sigstore carries).
GITHUB_WORKFLOW_BUILD_TYPE = "https://slsa-framework.github.io/github-actions-buildtypes/workflow/v1"
#: Newer @actions/attest releases name the same definition (github.com/actions/buildtypes, the
#: same `externalParameters.workflow` shape) at GitHub's own address; both are accepted.
GITHUB_WORKFLOW_BUILD_TYPES = frozenset(
    {GITHUB_WORKFLOW_BUILD_TYPE, "https://actions.github.io/buildtypes/workflow/v1"}
)

#: Fulcio's "Source Repository Ref" certificate extension (a DER UTF8String), from
#: https://github.com/sigstore/fulcio/blob/main/docs/oid-info.md.
_SOURCE_REPOSITORY_REF_OID = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.14")
#: The packaged trust directory (the repository's attestations/, force-included into the wheel).
_PACKAGED_DIR = "attestations"
_PACKAGED_TRUSTED_ROOT = "trusted_root.json"
_PACKAGED_IDENTITY_POLICY = "identity-policy.json"

_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_WORKFLOW_PATH = re.compile(r"\.github/workflows/[A-Za-z0-9_.-]+\.ya?ml")
#: An exact ref, or a prefix pattern: one trailing `*` and no other wildcard.
_REF = re.compile(r"refs/[^*?\[\]\s]+\*?")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")

_T = TypeVar("_T")


class AttestationError(RefusedFault):
    """A Sigstore bundle, trust root or identity policy was refused; `code` is stable."""

    def __init__(self, code: AttestationErrorCode, message: str) -> None:
        super().__init__(code, message)
        self.code: AttestationErrorCode = code
        self.message = message


@dataclass(frozen=True)
class IdentityPolicy:
    """Who may sign a release: the claims Fulcio copies from the GitHub Actions OIDC token.

    `ref` is an exact ref (`refs/tags/v1.2.3`) or a prefix pattern with one trailing `*`
    (`refs/tags/v*`). `runner_environment` None accepts any runner; our packaged policy
    requires `github-hosted`. Construction validates every field (`attestation_policy_invalid`).
    """

    repository: str
    workflow_path: str
    ref: str
    issuer: str
    runner_environment: str | None

    def __post_init__(self) -> None:
        problems = []
        if not _REPOSITORY.fullmatch(self.repository):
            problems.append(f"repository {self.repository!r} is not owner/name")
        if not _WORKFLOW_PATH.fullmatch(self.workflow_path):
            problems.append(f"workflow_path {self.workflow_path!r} is not .github/workflows/<file>.yml")
        if not _REF.fullmatch(self.ref):
            problems.append(f"ref {self.ref!r} is not refs/... with at most one trailing '*'")
        if not self.issuer.startswith("https://"):
            problems.append(f"issuer {self.issuer!r} is not an https URL")
        if self.runner_environment is not None and not self.runner_environment:
            problems.append("runner_environment is empty (use null to accept any runner)")
        if problems:
            raise AttestationError("attestation_policy_invalid", "; ".join(problems) + ".")

    @classmethod
    def from_json(cls, data: bytes) -> IdentityPolicy:
        """Parse a policy document: exactly the five fields, all strings (the runner may be null)."""
        try:
            document = loads_bounded(data, EVIDENCE_LIMITS, strict=False)
        except ValueError as exc:  # not JSON, or past the bounds (its code in the text)
            raise AttestationError("attestation_policy_invalid", f"not JSON: {exc}.") from exc
        fields = {"repository", "workflow_path", "ref", "issuer", "runner_environment"}
        if not isinstance(document, dict) or set(document) != fields:
            raise AttestationError(
                "attestation_policy_invalid",
                f"an identity policy is an object with exactly {sorted(fields)}.",
            )
        strings = [document[name] for name in sorted(fields - {"runner_environment"})]
        runner = document["runner_environment"]
        if not all(isinstance(value, str) for value in strings) or not isinstance(runner, str | None):
            raise AttestationError("attestation_policy_invalid", "every field must be a string.")
        return cls(
            repository=document["repository"],
            workflow_path=document["workflow_path"],
            ref=document["ref"],
            issuer=document["issuer"],
            runner_environment=runner,
        )

    @classmethod
    def from_file(cls, path: Path) -> IdentityPolicy:
        """Read and parse an identity policy file."""
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise AttestationError("attestation_policy_invalid", f"cannot read {path}: {exc}.") from exc
        return cls.from_json(data)

    @property
    def repository_uri(self) -> str:
        return f"https://github.com/{self.repository}"

    def workflow_uri(self, ref: str) -> str:
        """The workflow identity GitHub puts in the token: `https://github.com/<repo>/<path>@<ref>`."""
        return f"{self.repository_uri}/{self.workflow_path}@{ref}"

    def matches_ref(self, ref: str) -> bool:
        """Whether `ref` is this policy's exact ref, or lies under its prefix pattern."""
        if self.ref.endswith("*"):
            prefix = self.ref[:-1]
            return ref.startswith(prefix) and len(ref) > len(prefix)
        return ref == self.ref

    def with_ref(self, ref: str) -> IdentityPolicy:
        """This policy narrowed to one exact ref (e.g. the tag a manifest names).

        Raises `AttestationError("attestation_identity_mismatch")` when `ref` is outside the policy.
        """
        if "*" in ref:
            raise AttestationError("attestation_policy_invalid", f"with_ref takes an exact ref, not {ref!r}.")
        if not self.matches_ref(ref):
            raise AttestationError(
                "attestation_identity_mismatch", f"ref {ref!r} is not accepted by the policy ({self.ref!r})."
            )
        return replace(self, ref=ref)


def load_identity_policy() -> IdentityPolicy:
    """The packaged release identity policy (`herdr_mcp/attestations/identity-policy.json`)."""
    resource = resources.files("herdr_mcp") / _PACKAGED_DIR / _PACKAGED_IDENTITY_POLICY
    try:
        data = resource.read_bytes()
    except OSError as exc:
        raise AttestationError(
            "attestation_policy_invalid", f"packaged identity policy missing: {exc}."
        ) from exc
    return IdentityPolicy.from_json(data)


@dataclass(frozen=True)
class TrustedRootAge:
    """How current a trust root is, judged by the newest key it lists."""

    source: str
    newest_key_start: datetime
    age: timedelta

    @property
    def stale(self) -> bool:
        return self.age > TRUSTED_ROOT_STALE_AFTER

    @property
    def warning(self) -> str | None:
        """A sentence for the user when the root is older than `TRUSTED_ROOT_STALE_AFTER`, else None."""
        if not self.stale:
            return None
        return (
            f"the Sigstore trust root {self.source} has no key newer than "
            f"{self.newest_key_start.date().isoformat()} ({self.age.days} days ago); releases signed "
            "under keys Sigstore added since will be refused: check for a newer root "
            "(attestations/TRUSTED_ROOT.md)."
        )


def trusted_root_age(trusted_root: Path | None = None, *, now: datetime | None = None) -> TrustedRootAge:
    """The age of `trusted_root` (default: the packaged one) as of `now` (default: the clock)."""
    with _trusted_root_file(trusted_root) as path:
        try:
            with path.open("rb") as handle:
                document = loads_bounded(handle.read(MAX_BUNDLE_BYTES + 1), EVIDENCE_LIMITS, strict=False)
            newest = max(_validity_starts(document))
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise AttestationError(
                "attestation_trusted_root_invalid", f"cannot read key validity from {path}: {exc}."
            ) from exc
    current = now if now is not None else datetime.now(UTC)
    return TrustedRootAge(source=_describe_root(trusted_root), newest_key_start=newest, age=current - newest)


def _validity_starts(document: Any) -> Iterator[datetime]:
    """Every `validFor.start` of the root's logs, CT logs, certificate and timestamp authorities."""
    for section in ("tlogs", "ctlogs"):
        for entry in document.get(section, []):
            yield _timestamp(entry["publicKey"]["validFor"]["start"])
    for section in ("certificateAuthorities", "timestampAuthorities"):
        for entry in document.get(section, []):
            yield _timestamp(entry["validFor"]["start"])


def _timestamp(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Subject:
    """One artifact an in-toto statement is about: its name and digests (`{"sha256": hex}`)."""

    name: str
    digest: Mapping[str, str]


@dataclass(frozen=True)
class Statement:
    """An in-toto statement whose bundle, signer and expected subjects were verified.

    `source_ref` is the ref the signing workflow ran on (from the certificate);
    `trusted_root_age` says how current the trust root used was (see its `warning`).
    """

    subjects: tuple[Subject, ...]
    predicate_type: str
    predicate: Mapping[str, Any]
    source_ref: str
    trusted_root_age: TrustedRootAge


def verify_artifact_signature(
    artifact: bytes, bundle_json: bytes, policy: IdentityPolicy, *, trusted_root: Path | None = None
) -> None:
    """Verify a keyless Sigstore signature (hashedrekord bundle) over `artifact`, offline.

    The signer must be `policy`'s release workflow: certificate SAN
    `https://github.com/<repository>/<workflow_path>@<ref>`, and the OIDC issuer, source
    repository, source ref, build config and runner environment claims. Uses the packaged trust
    root unless `trusted_root` names another. Returns nothing; raises `AttestationError`.
    """
    # 1. Parse the bundle: a message-signature bundle within the size limit.
    bundle = _parse_bundle(bundle_json, "messageSignature")
    # 2. Load the trust root (never fetched).
    verifier = _verifier(trusted_root)
    # 3. Verify chain, SCT, log entry, times, signature and log consistency; the identity is
    #    evaluated on the way and judged last (see `_DeferredIdentity`).
    identity = _DeferredIdentity(_signer_check(policy, signer_is_workflow=True))
    _run(lambda checked: verifier.verify_artifact(artifact, bundle, checked), identity, trusted_root)


def verify_attestation(
    bundle_json: bytes,
    policy: IdentityPolicy,
    subjects: Mapping[str, str],
    *,
    trusted_root: Path | None = None,
) -> Statement:
    """Verify a GitHub artifact attestation (DSSE bundle) offline and check it covers `subjects`.

    `subjects` maps each expected subject name to its sha256 hex digest; every one must be in
    the statement with that digest. The signer may be a reusable workflow (actions/attest runs
    GitHub's), so the certificate SAN is not pinned; the issuer, source repository, source ref,
    runner environment and build config (`policy`'s workflow at that ref, the run's top-level
    workflow) claims are. Raises `AttestationError`, or ValueError for an empty or malformed
    `subjects`.
    """
    expected = _expected_subjects(subjects)
    # 1. Parse the bundle: a DSSE bundle within the size limit.
    bundle = _parse_bundle(bundle_json, "dsseEnvelope")
    # 2. Load the trust root (never fetched).
    verifier = _verifier(trusted_root)
    # 3. Verify chain, SCT, log entry, times, envelope signature and log consistency; the
    #    identity is evaluated on the way and judged last (see `_DeferredIdentity`).
    identity = _DeferredIdentity(_signer_check(policy, signer_is_workflow=False))
    payload_type, payload = _run(
        lambda checked: verifier.verify_dsse(bundle, checked), identity, trusted_root
    )
    # 4. The payload is an in-toto statement carrying SLSA provenance v1 ...
    statement = _parse_statement(payload_type, payload)
    # 5. ... about the workflow run the certificate names ...
    source_ref = identity.source_ref
    _check_provenance(statement.predicate, policy, source_ref)
    # 6. ... and it covers every expected subject with the expected digest.
    _check_subjects(statement.subjects, expected)
    return Statement(
        subjects=statement.subjects,
        predicate_type=statement.predicate_type,
        predicate=statement.predicate,
        source_ref=source_ref,
        trusted_root_age=trusted_root_age(trusted_root),
    )


def _parse_bundle(bundle_json: bytes, content: Literal["messageSignature", "dsseEnvelope"]) -> Bundle:
    """The one parse boundary for bundles: everything wrong with the bytes is `bundle_malformed`."""
    kind = "signature (hashedrekord)" if content == "messageSignature" else "attestation (DSSE)"
    if len(bundle_json) > MAX_BUNDLE_BYTES:
        raise AttestationError(
            EVIDENCE_TOO_LARGE, too_large_message(f"the {kind} bundle", MAX_BUNDLE_BYTES, len(bundle_json))
        )
    try:
        document = loads_bounded(bundle_json, EVIDENCE_LIMITS, strict=False)
    except ValueError as exc:  # not JSON, or past the bounds (its code in the text)
        raise _malformed(f"the bundle is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise _malformed("the bundle is not a JSON object")
    # A bundle's content is a oneof: exactly one of a message signature or a DSSE envelope.
    present = [key for key in ("messageSignature", "dsseEnvelope") if key in document]
    if present != [content]:
        raise _malformed(f"expected a Sigstore {kind} bundle, found content {present or 'none'}")
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import Bundle

    try:
        return Bundle.from_json(bundle_json)
    except (SigstoreError, ValueError) as exc:
        # sigstore wraps schema errors in InvalidBundle; a certificate or log entry that fails
        # to decode surfaces as the ValueError cryptography or pydantic raised.
        raise _malformed(f"not a valid Sigstore bundle: {_reason(exc)}") from exc


def _malformed(reason: str) -> AttestationError:
    return AttestationError(
        "attestation_bundle_malformed", f"{reason}; use the bundle the release published."
    )


@contextmanager
def _trusted_root_file(trusted_root: Path | None) -> Iterator[Path]:
    if trusted_root is not None:
        yield trusted_root
        return
    resource = resources.files("herdr_mcp") / _PACKAGED_DIR / _PACKAGED_TRUSTED_ROOT
    with resources.as_file(resource) as path:
        yield path


def _describe_root(trusted_root: Path | None) -> str:
    return str(trusted_root) if trusted_root is not None else "herdr_mcp/attestations/trusted_root.json"


def _verifier(trusted_root: Path | None) -> Verifier:
    """A sigstore Verifier over a local trust root; nothing is fetched or cached."""
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import TrustedRoot
    from sigstore.verify import Verifier

    with _trusted_root_file(trusted_root) as path:
        try:
            return Verifier(trusted_root=TrustedRoot.from_file(str(path)))
        except (OSError, ValueError, SigstoreError) as exc:
            raise AttestationError(
                "attestation_trusted_root_invalid",
                f"cannot load the Sigstore trust root {_describe_root(trusted_root)}: {_reason(exc)}; "
                "reinstall herdr-mcp or pass a valid trusted_root.json.",
            ) from exc


_SignerCheck = Callable[[x509.Certificate], str]


class _DeferredIdentity:
    """A sigstore `VerificationPolicy` that records the identity verdict instead of raising it.

    sigstore evaluates the policy before the log entry and signature, so a bundle that is both
    forged and foreign would be reported as foreign. Recording the verdict lets verification run
    to the end, so integrity failures are reported first; `_run` then refuses any recorded
    mismatch, and refuses outright if the policy was never evaluated.
    """

    def __init__(self, check: _SignerCheck) -> None:
        self._check = check
        self.evaluated = False
        self.mismatch: str | None = None
        self._source_ref: str | None = None

    def verify(self, cert: x509.Certificate) -> None:
        from sigstore.errors import VerificationError as SigstoreVerificationError

        self.evaluated = True
        try:
            self._source_ref = self._check(cert)
        except SigstoreVerificationError as exc:
            self.mismatch = str(exc)

    @property
    def source_ref(self) -> str:
        if self._source_ref is None:
            raise AttestationError("attestation_identity_mismatch", "the signer identity was not verified.")
        return self._source_ref


def _run(
    verify: Callable[[VerificationPolicy], _T], identity: _DeferredIdentity, trusted_root: Path | None
) -> _T:
    """Run one sigstore verification and translate its outcome into our codes."""
    from sigstore.errors import CertValidationError
    from sigstore.errors import Error as SigstoreError

    try:
        result = verify(identity)
    except CertValidationError as exc:
        # Raised only while building the certificate chain at the signing time.
        raise AttestationError(
            "attestation_untrusted_root",
            "the signing certificate does not chain to the Sigstore trust root "
            f"{_describe_root(trusted_root)}: {_reason(exc)}{_also(identity)}; if the release is "
            "genuine, refresh the trust root (attestations/TRUSTED_ROOT.md).",
        ) from exc
    except (SigstoreError, ValueError, x509.ExtensionNotFound) as exc:
        # VerificationError for every check sigstore anticipates; a certificate or log entry
        # that parses but is malformed inside can surface as a cryptography or pydantic error.
        raise AttestationError(
            "attestation_signature_invalid",
            f"the bundle does not verify for these bytes: {_reason(exc)}{_also(identity)}; "
            "do not install this release.",
        ) from exc
    if not identity.evaluated:
        raise AttestationError("attestation_identity_mismatch", "the signer identity was not evaluated.")
    if identity.mismatch is not None:
        raise AttestationError(
            "attestation_identity_mismatch",
            f"validly signed, but not by the release workflow the policy accepts: {identity.mismatch}; "
            "do not install this release.",
        )
    return result


def _also(identity: _DeferredIdentity) -> str:
    return f" (the signer identity does not match either: {identity.mismatch})" if identity.mismatch else ""


def _signer_check(policy: IdentityPolicy, *, signer_is_workflow: bool) -> _SignerCheck:
    """The certificate checks `policy` stands for; the check returns the certificate's source ref.

    `signer_is_workflow`: the SAN must be our workflow itself (a keyless signature made in
    release.yml). Attestations are signed by whatever workflow ran actions/attest (possibly
    GitHub's reusable one), so there the build config claim (the run's top-level workflow)
    carries our workflow instead.
    """

    def check(cert: x509.Certificate) -> str:
        from sigstore.errors import VerificationError as SigstoreVerificationError
        from sigstore.verify.policy import (
            AllOf,
            Identity,
            OIDCBuildConfigURI,
            OIDCIssuerV2,
            OIDCRunnerEnvironment,
            OIDCSourceRepositoryRef,
            OIDCSourceRepositoryURI,
        )

        # 1. The source ref must be the policy's exact ref or under its prefix pattern.
        ref = _source_ref(cert)
        if not policy.matches_ref(ref):
            raise SigstoreVerificationError(
                f"certificate's source repository ref {ref!r} is not accepted by the policy ({policy.ref!r})"
            )
        # 2. Every other claim must equal the policy's, compared by sigstore's extension checks.
        workflow = policy.workflow_uri(ref)
        checks: list[VerificationPolicy] = [
            OIDCIssuerV2(policy.issuer),
            OIDCSourceRepositoryURI(policy.repository_uri),
            OIDCSourceRepositoryRef(ref),
            OIDCBuildConfigURI(workflow),
        ]
        if signer_is_workflow:
            checks.append(Identity(identity=workflow))
        if policy.runner_environment is not None:
            checks.append(OIDCRunnerEnvironment(policy.runner_environment))
        AllOf(checks).verify(cert)
        return ref

    return check


def _source_ref(cert: x509.Certificate) -> str:
    from sigstore.errors import VerificationError as SigstoreVerificationError

    try:
        extension = cert.extensions.get_extension_for_oid(_SOURCE_REPOSITORY_REF_OID).value
    except x509.ExtensionNotFound as exc:
        raise SigstoreVerificationError("certificate has no source repository ref claim") from exc
    if not isinstance(extension, x509.UnrecognizedExtension):
        raise SigstoreVerificationError("certificate's source repository ref claim has an unexpected form")
    try:
        return asn1.decode_der(str, extension.value)
    except ValueError as exc:
        raise SigstoreVerificationError(
            f"certificate's source repository ref is not a string: {exc}"
        ) from exc


class _InToto(NamedTuple):
    subjects: tuple[Subject, ...]
    predicate_type: str
    predicate: Mapping[str, Any]


def _parse_statement(payload_type: str, payload: bytes) -> _InToto:
    """Parse a verified DSSE payload as an in-toto v1 statement with SLSA provenance v1."""
    if payload_type != IN_TOTO_PAYLOAD_TYPE:
        raise _unexpected(f"payload type is {payload_type!r}, not {IN_TOTO_PAYLOAD_TYPE!r}")
    try:
        document = loads_bounded(payload, EVIDENCE_LIMITS, strict=False)
    except ValueError as exc:  # not JSON, or past the bounds (its code in the text)
        raise _unexpected(f"the statement is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise _unexpected("the statement is not a JSON object")
    if document.get("_type") != IN_TOTO_STATEMENT_V1:
        raise _unexpected(f"statement type is {document.get('_type')!r}, not {IN_TOTO_STATEMENT_V1!r}")
    if document.get("predicateType") != SLSA_PROVENANCE_V1:
        raise _unexpected(f"predicate type is {document.get('predicateType')!r}, not {SLSA_PROVENANCE_V1!r}")
    predicate = document.get("predicate")
    if not isinstance(predicate, dict):
        raise _unexpected("the statement has no predicate object")
    raw_subjects = document.get("subject")
    if not isinstance(raw_subjects, list) or not raw_subjects:
        raise _unexpected("the statement has no subjects")
    subjects = []
    for raw in raw_subjects:
        name = raw.get("name") if isinstance(raw, dict) else None
        digest = raw.get("digest") if isinstance(raw, dict) else None
        if (
            not isinstance(name, str)
            or not isinstance(digest, dict)
            or not all(isinstance(key, str) and isinstance(value, str) for key, value in digest.items())
        ):
            raise _unexpected("a subject is not {name: string, digest: {algorithm: hex}}")
        subjects.append(Subject(name=name, digest=dict(digest)))
    return _InToto(subjects=tuple(subjects), predicate_type=SLSA_PROVENANCE_V1, predicate=predicate)


def _check_provenance(predicate: Mapping[str, Any], policy: IdentityPolicy, ref: str) -> None:
    """The provenance must describe the run the certificate names: same repository, workflow, ref."""
    definition = predicate.get("buildDefinition")
    if not isinstance(definition, dict) or definition.get("buildType") not in GITHUB_WORKFLOW_BUILD_TYPES:
        raise _unexpected(
            f"the provenance is not a GitHub Actions workflow build ({sorted(GITHUB_WORKFLOW_BUILD_TYPES)})"
        )
    parameters = definition.get("externalParameters")
    workflow = parameters.get("workflow") if isinstance(parameters, dict) else None
    expected = {"repository": policy.repository_uri, "path": policy.workflow_path, "ref": ref}
    if workflow != expected:
        raise _unexpected(f"the provenance names workflow {workflow!r}, the certificate {expected!r}")


def _unexpected(reason: str) -> AttestationError:
    return AttestationError(
        "attestation_predicate_unexpected",
        f"{reason}; a release attestation is SLSA provenance v1 from actions/attest.",
    )


def _expected_subjects(subjects: Mapping[str, str]) -> dict[str, str]:
    """Normalize the caller's name -> sha256 map; an empty map would verify nothing."""
    if not subjects:
        raise ValueError("verify_attestation needs at least one expected subject")
    expected = {}
    for name, digest in subjects.items():
        normalized = digest.lower()
        if not _SHA256_HEX.fullmatch(normalized):
            raise ValueError(f"expected digest for {name!r} is not 64 hex characters")
        expected[name] = normalized
    return expected


def _check_subjects(subjects: tuple[Subject, ...], expected: Mapping[str, str]) -> None:
    attested: dict[str, set[str]] = {}
    for subject in subjects:
        digest = subject.digest.get("sha256")
        attested.setdefault(subject.name, set()).add(digest.lower() if digest is not None else "")
    for name, digest in expected.items():
        found = attested.get(name)
        if found is None:
            raise _subject_mismatch(f"the attestation has no subject named {name!r}")
        if found != {digest}:
            raise _subject_mismatch(
                f"the attestation gives {name!r} sha256 {sorted(found)}, the asset has {digest}"
            )


def _subject_mismatch(reason: str) -> AttestationError:
    return AttestationError(
        "attestation_subject_mismatch", f"{reason}; the asset is not the one attested: do not install it."
    )


def _reason(exc: BaseException) -> str:
    """An exception's message on one line, without pydantic's documentation links."""
    lines = [line.strip() for line in str(exc).splitlines()]
    kept = [line for line in lines if line and not line.startswith("For further information")]
    return "; ".join(kept)[:500] or type(exc).__name__
