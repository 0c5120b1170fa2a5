"""The Sigstore evidence a release carries, made by the local Sigstore stack
(tests/support/sigstore_stack.py).

`evidence(stack, manifest_bytes)` gives what the release workflow publishes next to the manifest:
the keyless signature of the manifest by the release workflow at the manifest's tag, and the
build provenance of the manifest and every asset it lists. `policy_file` writes the identity
policy a workstation pins for that workflow, `sigstore_flags` the `herdr-mcp update` (and
`release verify`) flags that point at both.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from herdr_mcp.release.attestation import IdentityPolicy
from herdr_mcp.release.manifest import MANIFEST_FILENAME
from herdr_mcp.release.verification import PROVENANCE_BUNDLE_NAME, SIGSTORE_BUNDLE_NAME, SigstoreTrust
from tests.support.sigstore_stack import GITHUB_ACTIONS_ISSUER, SigstoreStack, WorkflowIdentity

RELEASE_WORKFLOW = ".github/workflows/release.yml"


def identity_policy(repository: str, ref: str = "refs/tags/v*") -> IdentityPolicy:
    """The signer policy a workstation pins: `repository`'s release workflow on release tags."""
    return IdentityPolicy(
        repository=repository,
        workflow_path=RELEASE_WORKFLOW,
        ref=ref,
        issuer=GITHUB_ACTIONS_ISSUER,
        runner_environment="github-hosted",
    )


def sigstore_trust(stack: SigstoreStack, repository: str) -> SigstoreTrust:
    return SigstoreTrust(identity_policy=identity_policy(repository), trusted_root=stack.trusted_root)


def signer(manifest: bytes, **changes: str) -> WorkflowIdentity:
    """The release workflow run that would sign `manifest` (its repository, at its tag);
    `changes` make another signer (repository=, ref=, workflow_path=, runner_environment=...)."""
    document = json.loads(manifest)
    identity = WorkflowIdentity(
        repository=document["source"]["repository"],
        workflow_path=RELEASE_WORKFLOW,
        ref="refs/tags/" + document["tag"],
    )
    return dataclasses.replace(identity, **changes)


def subjects(manifest: bytes) -> dict[str, str]:
    """What the release workflow attests: the manifest itself and every asset it lists."""
    listed = {asset["name"]: asset["sha256"] for asset in json.loads(manifest)["assets"]}
    return {MANIFEST_FILENAME: hashlib.sha256(manifest).hexdigest(), **listed}


def evidence(stack: SigstoreStack, manifest: bytes) -> tuple[bytes, bytes]:
    """(keyless signature bundle, provenance bundle) for `manifest`, as the release workflow makes."""
    identity = signer(manifest)
    return stack.sign_artifact(manifest, identity), stack.attest_provenance(subjects(manifest), identity)


def write_evidence(stack: SigstoreStack, manifest_path: Path) -> None:
    """Write both bundles next to `manifest_path` under their published names."""
    signature, provenance = evidence(stack, manifest_path.read_bytes())
    (manifest_path.parent / SIGSTORE_BUNDLE_NAME).write_bytes(signature)
    (manifest_path.parent / PROVENANCE_BUNDLE_NAME).write_bytes(provenance)


def policy_file(directory: Path, repository: str) -> Path:
    path = directory / f"identity-policy-{repository.replace('/', '_')}.json"
    path.write_text(json.dumps(dataclasses.asdict(identity_policy(repository)), indent=2) + "\n")
    return path


def sigstore_flags(stack: SigstoreStack, directory: Path, repository: str) -> list[str]:
    """`--identity-policy` and `--trusted-root` for the command line."""
    return [
        "--identity-policy",
        str(policy_file(directory, repository)),
        "--trusted-root",
        str(stack.trusted_root),
    ]
