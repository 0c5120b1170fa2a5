"""A local, offline Sigstore stack for tests: real keyless bundles under a trust root of their own.

What GitHub Actions and Sigstore's public-good services do for a release, done in-process with
real keys so the pinned sigstore library verifies the result exactly as it verifies production
bundles:

- a Fulcio-like CA (root and intermediate, like Fulcio's chain) issues a ten-minute signing
  certificate for an ephemeral P-256 key, carrying the claims of a GitHub Actions OIDC token
  (the SAN URI and the 1.3.6.1.4.1.57264.1.* extensions);
- a CT log signs an RFC 6962 precertificate SCT, embedded in that certificate;
- a Rekor-like transparency log (an RFC 6962 Merkle tree, shared: other entries follow ours)
  records a hashedrekord v0.0.1 entry (message signatures) or a dsse v0.0.1 entry (attestations)
  and answers with an inclusion proof under a signed checkpoint and an inclusion promise (signed
  entry timestamp);
- `trusted_root.json` lists the CA chain, the CT log key and the log key, and nothing else.

How each check sigstore 4.5.1 makes (`Verifier._verify_common_signing_cert` and the kind-specific
steps after it) is met:

0. A verified time: the entry's integrated time, bound by the inclusion promise (a signature by
   the log key over the RFC 8785 form of body, integrated time, log ID and index). No timestamp
   authority is involved, as on public-good Rekor v1; the root lists none.
1. The chain: leaf -> intermediate -> root, valid at the integrated time under cryptography's
   WebPKI profile (critical BasicConstraints and KeyUsage on the CAs, AKI/SKI, a critical SAN on a
   leaf whose subject is empty, as Fulcio issues them).
2. The SCT: one precertificate SCT signed by the CT log key over the leaf's TBS without the SCT
   list, bound to the intermediate's key hash.
3. The profile: KeyUsage digitalSignature and ExtendedKeyUsage codeSigning; the caller's policy
   reads the claims.
4. The inclusion proof hashes up to the root of a checkpoint signed by the log key (a signed note
   whose key hint is the first four bytes of the log ID).
5. The inclusion promise (see 0).
6. The integrated time lies within the leaf's validity (it is the issuing second).
7. The signature: ECDSA P-256/SHA-256 over the artifact, or over the DSSE PAE of the statement.
8. The entry body is rebuilt by the verifier from the bundle and must equal the logged one.

Nothing here opens a socket: the service URLs in the root use the reserved `.test` domain and are
never contacted. `forbid_remote_connections` lets a test prove that.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import ipaddress
import itertools
import json
import re
import secrets
import socket
import struct
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat import asn1
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, ExtensionOID, NameOID

from herdr_mcp.release.attestation import (
    GITHUB_WORKFLOW_BUILD_TYPE,
    IN_TOTO_PAYLOAD_TYPE,
    IN_TOTO_STATEMENT_V1,
    SLSA_PROVENANCE_V1,
    IdentityPolicy,
)

GITHUB_ACTIONS_ISSUER = "https://token.actions.githubusercontent.com"
GITHUB_SERVER = "https://github.com"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
TRUSTED_ROOT_MEDIA_TYPE = "application/vnd.dev.sigstore.trustedroot+json;version=0.1"

#: Fulcio's signing certificates live ten minutes; the log integrates the entry within them.
LEAF_LIFETIME = timedelta(minutes=10)
#: Fulcio's CAs live for years; ten covers any test run.
CA_LIFETIME = timedelta(days=3650)
#: The CAs and keys start this long before the stack is made, so a wall clock stepped back
#: between making the stack and signing still finds them valid.
BACKDATE = timedelta(hours=1)

#: Entries of other users the log integrates after each of ours (see `_TransparencyLog.append`).
OTHER_ENTRIES_PER_BATCH = 2

#: The event a tag push triggers: what GitHub puts in the token's `event_name` claim.
_EVENT_NAME = "push"
_FULCIO_URL = "https://fulcio.herdr-mcp.test"
_CT_LOG_URL = "https://ctfe.herdr-mcp.test/test"
_REKOR_HOST = "rekor.herdr-mcp.test"
_KEY_DETAILS = "PKIX_ECDSA_P256_SHA_256"
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_FULCIO_OID = "1.3.6.1.4.1.57264.1"
# RFC 6962 section 3.2: the SCT fields, as TLS encodes them.
_SCT_VERSION_V1 = 0
_SIGNATURE_TYPE_CERTIFICATE_TIMESTAMP = 0
_ENTRY_TYPE_PRECERT = 1
_TLS_HASH_SHA256 = 4
_TLS_SIGNATURE_ECDSA = 3


@dataclass(frozen=True)
class WorkflowIdentity:
    """The claims GitHub's OIDC token carries into the Fulcio certificate of a workflow run.

    `signer_workflow` is the workflow that signed (the SAN, the token's `job_workflow_ref`) as
    `owner/name/.github/workflows/<file>@<ref>`, when a reusable workflow signed (GitHub's attest
    workflow); None means the run's own workflow signed. `commit` is the commit the run built.
    """

    repository: str
    workflow_path: str
    ref: str
    issuer: str = GITHUB_ACTIONS_ISSUER
    runner_environment: str = "github-hosted"
    signer_workflow: str | None = None
    commit: str = "5d1f5c0f4b6e9a3c2d8e7f6a5b4c3d2e1f0a9b8c"

    @property
    def workflow_ref(self) -> str:
        """The token's `workflow_ref`: the run's top-level workflow at the ref."""
        return f"{self.repository}/{self.workflow_path}@{self.ref}"

    @property
    def job_workflow_ref(self) -> str:
        """The token's `job_workflow_ref`: the workflow that signed."""
        return self.signer_workflow if self.signer_workflow is not None else self.workflow_ref

    @property
    def repository_id(self) -> int:
        """A stable stand-in for GitHub's numeric repository ID."""
        return _numeric_id(self.repository)

    @property
    def repository_owner_id(self) -> int:
        """A stable stand-in for GitHub's numeric owner ID."""
        return _numeric_id(self.repository.split("/")[0])

    def policy(self) -> IdentityPolicy:
        """The herdr_mcp identity policy that accepts exactly this signer."""
        return IdentityPolicy(
            repository=self.repository,
            workflow_path=self.workflow_path,
            ref=self.ref,
            issuer=self.issuer,
            runner_environment=self.runner_environment,
        )

    def policy_json(self) -> bytes:
        """`policy()` as an identity policy document (`IdentityPolicy.from_json` reads it)."""
        return json.dumps(dataclasses.asdict(self.policy()), indent=2).encode() + b"\n"


class SigstoreStack:
    """A CA, a CT log and a transparency log with fresh keys, and the trust root listing them.

    Making one costs four P-256 key generations; share one per test session where you can.
    Signing appends to the stack's log, as a shared log grows: each entry is followed by
    `OTHER_ENTRIES_PER_BATCH` unrelated ones, and later bundles carry longer inclusion proofs.
    """

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        start = datetime.now(UTC).replace(microsecond=0) - BACKDATE
        self._ca = _CertificateAuthority(start)
        self._ct_log = _CertificateTransparencyLog()
        self._rekor = _TransparencyLog()
        self._runs = itertools.count(7_000_000_001)
        self.trusted_root = directory / "trusted_root.json"
        self.trusted_root.write_text(json.dumps(self._trusted_root_document(start), indent=2) + "\n")

    def sign_artifact(self, data: bytes, identity: WorkflowIdentity) -> bytes:
        """A keyless message-signature bundle over `data`, as `python -m sigstore sign --bundle` makes.

        The signer is `identity`'s `job_workflow_ref`; the log entry is hashedrekord v0.0.1.
        """
        key, certificate, moment = self._keyless_certificate(identity)
        digest = hashlib.sha256(data).digest()
        signature = key.sign(data, ec.ECDSA(hashes.SHA256()))
        body = {
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {"hash": {"algorithm": "sha256", "value": digest.hex()}},
                "signature": {"content": _b64(signature), "publicKey": {"content": _pem_b64(certificate)}},
            },
        }
        content = {
            "messageSignature": {
                "messageDigest": {"algorithm": "SHA2_256", "digest": _b64(digest)},
                "signature": _b64(signature),
            }
        }
        return self._bundle(certificate, self._rekor.append("hashedrekord", body, moment), content)

    def attest_provenance(
        self,
        subjects: Mapping[str, str],
        identity: WorkflowIdentity,
        *,
        build_type: str = GITHUB_WORKFLOW_BUILD_TYPE,
    ) -> bytes:
        """A GitHub artifact attestation: a DSSE bundle of an in-toto v1 statement with SLSA provenance v1.

        `subjects` maps each artifact name to its sha256 hex digest. The predicate is the one
        actions/attest-build-provenance writes for a workflow run; `build_type` replaces its
        buildType (to make an attestation the verifier must not accept). The log entry is
        dsse v0.0.1. Raises ValueError for no subjects or a digest that is not sha256 hex.
        """
        if not subjects or not all(_SHA256_HEX.fullmatch(digest) for digest in subjects.values()):
            raise ValueError("attest_provenance needs subjects as {name: lowercase sha256 hex}")
        key, certificate, moment = self._keyless_certificate(identity)
        statement = {
            "_type": IN_TOTO_STATEMENT_V1,
            "subject": [{"name": name, "digest": {"sha256": digest}} for name, digest in subjects.items()],
            "predicateType": SLSA_PROVENANCE_V1,
            "predicate": _provenance_predicate(identity, build_type, run_id=next(self._runs)),
        }
        # actions/attest serializes the statement with JSON.stringify: compact, in this order.
        payload = json.dumps(statement, separators=(",", ":")).encode()
        signature = key.sign(_pae(IN_TOTO_PAYLOAD_TYPE, payload), ec.ECDSA(hashes.SHA256()))
        envelope = {
            "payload": _b64(payload),
            "payloadType": IN_TOTO_PAYLOAD_TYPE,
            "signatures": [{"sig": _b64(signature)}],
        }
        # Rekor hashes the envelope it was sent; verifiers cannot recompute that (the envelope is
        # not canonical JSON), so any faithful value serves. Ours is the envelope as bundled.
        envelope_hash = hashlib.sha256(_canonical_json(envelope)).hexdigest()
        body = {
            "apiVersion": "0.0.1",
            "kind": "dsse",
            "spec": {
                "envelopeHash": {"algorithm": "sha256", "value": envelope_hash},
                "payloadHash": {"algorithm": "sha256", "value": hashlib.sha256(payload).hexdigest()},
                "signatures": [{"signature": _b64(signature), "verifier": _pem_b64(certificate)}],
            },
        }
        entry = self._rekor.append("dsse", body, moment)
        return self._bundle(certificate, entry, {"dsseEnvelope": envelope})

    def _keyless_certificate(
        self, identity: WorkflowIdentity
    ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate, datetime]:
        """An ephemeral key and its Fulcio certificate for `identity`, issued now (whole seconds)."""
        key = ec.generate_private_key(ec.SECP256R1())
        moment = datetime.now(UTC).replace(microsecond=0)
        run_id = next(self._runs)
        certificate = self._ca.issue(key.public_key(), _fulcio_claims(identity, run_id), moment, self._ct_log)
        return key, certificate, moment

    @staticmethod
    def _bundle(certificate: x509.Certificate, entry: dict[str, Any], content: dict[str, Any]) -> bytes:
        document = {
            "mediaType": BUNDLE_MEDIA_TYPE,
            "verificationMaterial": {
                "certificate": {"rawBytes": _b64(certificate.public_bytes(serialization.Encoding.DER))},
                "tlogEntries": [entry],
                "timestampVerificationData": {},
            },
            **content,
        }
        return json.dumps(document, indent=2).encode() + b"\n"

    def _trusted_root_document(self, start: datetime) -> dict[str, Any]:
        valid_for = {"start": start.strftime("%Y-%m-%dT%H:%M:%SZ")}
        return {
            "mediaType": TRUSTED_ROOT_MEDIA_TYPE,
            "tlogs": [_log_instance(f"https://{_REKOR_HOST}", self._rekor.public_key, valid_for)],
            "certificateAuthorities": [
                {
                    "subject": {"organization": _CertificateAuthority.ORGANIZATION, "commonName": "sigstore"},
                    "uri": _FULCIO_URL,
                    "certChain": {
                        "certificates": [
                            {"rawBytes": _b64(cert.public_bytes(serialization.Encoding.DER))}
                            for cert in (self._ca.intermediate, self._ca.root)
                        ]
                    },
                    "validFor": valid_for,
                }
            ],
            "ctlogs": [_log_instance(_CT_LOG_URL, self._ct_log.public_key, valid_for)],
            "timestampAuthorities": [],
        }


def forbid_remote_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse every socket connection that leaves the machine (a guard, not a mock).

    Loopback and AF_UNIX connections still work, so a test can run local servers while proving
    that verification itself needs no network.
    """
    original_connect = socket.socket.connect
    original_connect_ex = socket.socket.connect_ex

    def leaves_machine(address: Any) -> bool:
        if not isinstance(address, tuple):
            return False  # an AF_UNIX path
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


class _CertificateAuthority:
    """Fulcio's shape: a self-signed root, an intermediate under it, leaves from the intermediate."""

    ORGANIZATION = "herdr-mcp tests"

    def __init__(self, start: datetime) -> None:
        self._root_key = ec.generate_private_key(ec.SECP256R1())
        self._intermediate_key = ec.generate_private_key(ec.SECP256R1())
        root_name = _name("sigstore")
        self.root = self._ca_certificate(
            root_name, self._root_key.public_key(), root_name, self._root_key, start, path_length=None
        )
        self.intermediate = self._ca_certificate(
            _name("sigstore-intermediate"),
            self._intermediate_key.public_key(),
            root_name,
            self._root_key,
            start,
            path_length=0,
        )
        # RFC 6962 section 3.2: a precertificate SCT binds the issuer by its key's hash.
        self._issuer_key_hash = hashlib.sha256(_spki(self._intermediate_key.public_key())).digest()

    @staticmethod
    def _ca_certificate(
        subject: x509.Name,
        public_key: ec.EllipticCurvePublicKey,
        issuer: x509.Name,
        issuer_key: ec.EllipticCurvePrivateKey,
        start: datetime,
        *,
        path_length: int | None,
    ) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + CA_LIFETIME)
            .add_extension(_key_usage(key_cert_sign=True), critical=True)
            .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
            )
        )
        if path_length == 0:
            # Fulcio's intermediate is restricted to code signing, like the leaves it issues.
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False
            )
        return builder.sign(issuer_key, hashes.SHA256())

    def issue(
        self,
        public_key: ec.EllipticCurvePublicKey,
        claims: _FulcioClaims,
        moment: datetime,
        ct_log: _CertificateTransparencyLog,
    ) -> x509.Certificate:
        """A leaf as Fulcio issues it: empty subject, the identity in the SAN, the SCT embedded."""
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.intermediate.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(moment)
            .not_valid_after(moment + LEAF_LIFETIME)
            .add_extension(_key_usage(digital_signature=True), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._intermediate_key.public_key()),
                critical=False,
            )
            # An empty subject makes the SAN the identity, so RFC 5280 wants it critical.
            .add_extension(
                x509.SubjectAlternativeName([x509.UniformResourceIdentifier(claims.san)]), critical=True
            )
        )
        for extension in claims.extensions:
            builder = builder.add_extension(extension, critical=False)
        # Fulcio's flow: the CT log signs the precertificate; the certificate is the same TBS with
        # the SCT list appended. Without the SCT list, this TBS is what the log signed.
        precertificate_tbs = builder.sign(self._intermediate_key, hashes.SHA256()).tbs_certificate_bytes
        sct_list = ct_log.embedded_sct(precertificate_tbs, self._issuer_key_hash, moment)
        certificate = builder.add_extension(sct_list, critical=False).sign(
            self._intermediate_key, hashes.SHA256()
        )
        if certificate.tbs_precertificate_bytes != precertificate_tbs:
            raise RuntimeError("the certificate's precertificate TBS differs from the one the CT log signed")
        return certificate


class _CertificateTransparencyLog:
    """A CT log that signs precertificate SCTs (RFC 6962 section 3.2) with its P-256 key."""

    def __init__(self) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        self.public_key = self._key.public_key()
        self._log_id = hashlib.sha256(_spki(self.public_key)).digest()

    def embedded_sct(
        self, precertificate_tbs: bytes, issuer_key_hash: bytes, moment: datetime
    ) -> x509.UnrecognizedExtension:
        """The SignedCertificateTimestampList extension holding one SCT over `precertificate_tbs`."""
        timestamp = int(moment.timestamp() * 1000)
        extensions = b""
        signed = (
            struct.pack(
                "!BBQH",
                _SCT_VERSION_V1,
                _SIGNATURE_TYPE_CERTIFICATE_TIMESTAMP,
                timestamp,
                _ENTRY_TYPE_PRECERT,
            )
            + issuer_key_hash
            + _u24_prefixed(precertificate_tbs)
            + _u16_prefixed(extensions)
        )
        signature = self._key.sign(signed, ec.ECDSA(hashes.SHA256()))
        sct = (
            struct.pack("!B", _SCT_VERSION_V1)
            + self._log_id
            + struct.pack("!Q", timestamp)
            + _u16_prefixed(extensions)
            + struct.pack("!BB", _TLS_HASH_SHA256, _TLS_SIGNATURE_ECDSA)
            + _u16_prefixed(signature)
        )
        # The extension value is a DER OCTET STRING around the TLS-encoded list of serialized SCTs.
        sct_list = _u16_prefixed(_u16_prefixed(sct))
        return x509.UnrecognizedExtension(
            ExtensionOID.PRECERT_SIGNED_CERTIFICATE_TIMESTAMPS, asn1.encode_der(sct_list)
        )


class _TransparencyLog:
    """Rekor v1's answers: an append-only RFC 6962 Merkle tree, signed checkpoints, inclusion promises."""

    def __init__(self) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        self.public_key = self._key.public_key()
        self._log_id = hashlib.sha256(_spki(self.public_key)).digest()
        # Rekor names its checkpoints "<host> - <tree ID>".
        self._origin = f"{_REKOR_HOST} - {secrets.randbits(63)}"
        self._leaves: list[bytes] = []
        self._lock = threading.Lock()

    def append(self, kind: str, body: Mapping[str, Any], moment: datetime) -> dict[str, Any]:
        """Log `body` (canonical JSON) at `moment`; the bundle's tlog entry for it."""
        canonical_body = _canonical_json(body)
        integrated_time = int(moment.timestamp())
        with self._lock:
            index = len(self._leaves)
            self._leaves.append(_leaf_hash(canonical_body))
            # The public log is shared: other entries land in the tree after ours before it is
            # signed, so our leaf is rarely the last one and its proof climbs both ways.
            self._leaves.extend(_leaf_hash(secrets.token_bytes(32)) for _ in range(OTHER_ENTRIES_PER_BATCH))
            leaves = list(self._leaves)
        root = _tree_hash(leaves)
        promise = {
            "body": _b64(canonical_body),
            "integratedTime": integrated_time,
            "logID": self._log_id.hex(),
            "logIndex": index,
        }
        return {
            "logIndex": str(index),
            "logId": {"keyId": _b64(self._log_id)},
            "kindVersion": {"kind": kind, "version": "0.0.1"},
            "integratedTime": str(integrated_time),
            "inclusionPromise": {"signedEntryTimestamp": _b64(self._sign(_canonical_json(promise)))},
            "inclusionProof": {
                "logIndex": str(index),
                "rootHash": _b64(root),
                "treeSize": str(len(leaves)),
                "hashes": [_b64(node) for node in _inclusion_path(index, leaves)],
                "checkpoint": {"envelope": self._checkpoint(len(leaves), root)},
            },
            "canonicalizedBody": _b64(canonical_body),
        }

    def _checkpoint(self, size: int, root: bytes) -> str:
        """A signed note (transparency-dev checkpoint format) over the tree head."""
        note = f"{self._origin}\n{size}\n{_b64(root)}\n"
        # The signature line carries a four-byte key hint (the log ID's first bytes), then the signature.
        signature = self._log_id[:4] + self._sign(note.encode())
        return f"{note}\n\u2014 {_REKOR_HOST} {_b64(signature)}\n"

    def _sign(self, data: bytes) -> bytes:
        return self._key.sign(data, ec.ECDSA(hashes.SHA256()))


@dataclass(frozen=True)
class _FulcioClaims:
    san: str
    extensions: tuple[x509.UnrecognizedExtension, ...]


def _fulcio_claims(identity: WorkflowIdentity, run_id: int) -> _FulcioClaims:
    """The SAN and claim extensions Fulcio derives from a GitHub Actions token (Fulcio's oid-info.md)."""
    repository_url = f"{GITHUB_SERVER}/{identity.repository}"
    signer = f"{GITHUB_SERVER}/{identity.job_workflow_ref}"
    # The signer's digest is the commit of the workflow that signed: a reusable workflow pinned by
    # commit names it; otherwise the run's own commit stands in.
    signer_ref = identity.job_workflow_ref.rpartition("@")[2]
    signer_digest = signer_ref if _COMMIT.fullmatch(signer_ref) else identity.commit
    # 1.1-1.6 are Fulcio's first claim extensions: raw bytes, not DER (kept for old verifiers).
    legacy = {
        1: identity.issuer,
        2: _EVENT_NAME,
        3: identity.commit,
        4: Path(identity.workflow_path).stem,
        5: identity.repository,
        6: identity.ref,
    }
    # 1.8 onwards are DER UTF8Strings; these are the ones sigstore's policies read.
    current = {
        8: identity.issuer,
        9: signer,
        10: signer_digest,
        11: identity.runner_environment,
        12: repository_url,
        13: identity.commit,
        14: identity.ref,
        15: str(identity.repository_id),
        16: f"{GITHUB_SERVER}/{identity.repository.split('/')[0]}",
        17: str(identity.repository_owner_id),
        18: f"{GITHUB_SERVER}/{identity.workflow_ref}",
        19: identity.commit,
        20: _EVENT_NAME,
        21: f"{repository_url}/actions/runs/{run_id}/attempts/1",
        22: "public",
    }
    extensions = [_claim(arc, value.encode()) for arc, value in legacy.items()]
    extensions += [_claim(arc, asn1.encode_der(value)) for arc, value in current.items()]
    return _FulcioClaims(san=signer, extensions=tuple(extensions))


def _claim(arc: int, value: bytes) -> x509.UnrecognizedExtension:
    return x509.UnrecognizedExtension(x509.ObjectIdentifier(f"{_FULCIO_OID}.{arc}"), value)


def _provenance_predicate(identity: WorkflowIdentity, build_type: str, *, run_id: int) -> dict[str, Any]:
    """SLSA provenance v1 as actions/attest-build-provenance writes it for a workflow run."""
    repository_url = f"{GITHUB_SERVER}/{identity.repository}"
    return {
        "buildDefinition": {
            "buildType": build_type,
            "externalParameters": {
                "workflow": {
                    "ref": identity.ref,
                    "repository": repository_url,
                    "path": identity.workflow_path,
                }
            },
            "internalParameters": {
                "github": {
                    "event_name": _EVENT_NAME,
                    "repository_id": str(identity.repository_id),
                    "repository_owner_id": str(identity.repository_owner_id),
                }
            },
            "resolvedDependencies": [
                {"uri": f"git+{repository_url}@{identity.ref}", "digest": {"gitCommit": identity.commit}}
            ],
        },
        "runDetails": {
            "builder": {"id": f"{GITHUB_SERVER}/actions/runner/{identity.runner_environment}"},
            "metadata": {"invocationId": f"{repository_url}/actions/runs/{run_id}/attempts/1"},
        },
    }


# --- RFC 6962 Merkle tree (section 2.1) -----------------------------------------------------


def _leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def _node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(size: int) -> int:
    """The largest power of two smaller than `size` (at least 2)."""
    return 1 << ((size - 1).bit_length() - 1)


def _tree_hash(leaves: Sequence[bytes]) -> bytes:
    """MTH over leaf hashes."""
    if len(leaves) == 1:
        return leaves[0]
    split = _split(len(leaves))
    return _node_hash(_tree_hash(leaves[:split]), _tree_hash(leaves[split:]))


def _inclusion_path(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PATH(index, leaves): the audit path, lowest level first."""
    if len(leaves) == 1:
        return []
    split = _split(len(leaves))
    if index < split:
        return [*_inclusion_path(index, leaves[:split]), _tree_hash(leaves[split:])]
    return [*_inclusion_path(index - split, leaves[split:]), _tree_hash(leaves[:split])]


# --- encodings ------------------------------------------------------------------------------


def _canonical_json(value: Any) -> bytes:
    """RFC 8785 for what we log: ASCII keys and strings and integers, where sorted compact JSON is it."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what the envelope signature covers."""
    return b"DSSEv1 %d %s %d %s" % (len(payload_type), payload_type.encode(), len(payload), payload)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _pem_b64(certificate: x509.Certificate) -> str:
    """Rekor's form of a certificate in an entry body: base64 of its PEM."""
    return _b64(certificate.public_bytes(serialization.Encoding.PEM))


def _spki(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _u16_prefixed(data: bytes) -> bytes:
    return struct.pack("!H", len(data)) + data


def _u24_prefixed(data: bytes) -> bytes:
    return struct.pack("!I", len(data))[1:] + data


def _numeric_id(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, _CertificateAuthority.ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _key_usage(*, digital_signature: bool = False, key_cert_sign: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=key_cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _log_instance(url: str, key: ec.EllipticCurvePublicKey, valid_for: dict[str, str]) -> dict[str, Any]:
    return {
        "baseUrl": url,
        "hashAlgorithm": "SHA2_256",
        "publicKey": {"rawBytes": _b64(_spki(key)), "keyDetails": _KEY_DETAILS, "validFor": valid_for},
        "logId": {"keyId": _b64(hashlib.sha256(_spki(key)).digest())},
    }
