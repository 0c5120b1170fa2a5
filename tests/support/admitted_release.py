"""A release admitted in process: the pinned minisign key with the local Sigstore stack (`Keys`,
the module-scoped `keys` fixture) and `admitted(path, keys)`, a TrustedRelease through `admit()`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from packaging.version import Version

from herdr_mcp.contract import contract_identity
from herdr_mcp.release.manifest_build import AssetInput, build_manifest
from herdr_mcp.release.minisign import PublicKey, SecretKey, keygen, load_secret_key, sign
from herdr_mcp.release.verification import PublishedRelease
from herdr_mcp.state import STATE_SCHEMA
from herdr_mcp.update.admission import AdmissionPolicy, LocalIdentity, TrustedRelease, admit
from tests.support.release_evidence import evidence, sigstore_trust
from tests.support.sigstore_stack import SigstoreStack

REPOSITORY = "example-org/herdr-mcp"
REPOSITORY_ID = 812345678
TARGET = "linux-x86_64-cp311"
VERSION = "1.2.0"


@dataclass(frozen=True)
class Keys:
    """The pinned release key and the Sigstore stack that signs keylessly and attests."""

    public: PublicKey
    secret: SecretKey
    stack: SigstoreStack


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory, sigstore_stack: SigstoreStack) -> Keys:
    directory = tmp_path_factory.mktemp("keys")
    public = keygen(directory / "release.pub", directory / "release.key")
    return Keys(public=public, secret=load_secret_key(directory / "release.key"), stack=sigstore_stack)


def admitted(path: Path, keys: Keys, *, version: str = VERSION, target: str = TARGET) -> TrustedRelease:
    """A TrustedRelease whose manifest lists `path` as the bundle of `target`, through `admit()`."""
    tag = f"v{version}"
    manifest = build_manifest(
        version=version,
        repository=REPOSITORY,
        repository_id=REPOSITORY_ID,
        commit="3f1c2a9b8e7d6c5b4a39281706f5e4d3c2b1a098",
        ref=f"refs/tags/{tag}",
        published_at=datetime(2026, 11, 29, 12, tzinfo=UTC),
        assets=[AssetInput(path=path, target=target, kind="bundle")],
        # The manifest's URL cannot carry a port; the simulator's is passed to stage() as `url`.
        download_base=f"https://localhost/{REPOSITORY}/releases/download/{tag}",
    )
    data = manifest.to_bytes()
    result = admit(
        PublishedRelease(
            data, sign(data, keys.secret, trusted_comment=f"herdr-mcp {tag}"), *evidence(keys.stack, data)
        ),
        discovered_tag=tag,
        local=LocalIdentity(
            version=Version("0.0.1"), contract=contract_identity(), state_schema=STATE_SCHEMA
        ),
        policy=AdmissionPolicy(
            public_keys=(keys.public,),
            repository=REPOSITORY,
            repository_id=REPOSITORY_ID,
            sigstore=sigstore_trust(keys.stack, REPOSITORY),
        ),
        highest_seen=None,
    )
    assert isinstance(result, TrustedRelease)
    return result
