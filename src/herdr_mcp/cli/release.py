"""`herdr-mcp release ...`: the maintainer's commands, the same ones the release workflow runs.

    build               wheel + sdist with the pinned hatchling, SOURCE_DATE_EPOCH from HEAD
    check-reproducible  build HEAD twice in separate clean trees and compare every artifact
    bundle              the offline-installable wheelhouse of one target
    manifest            runtime-manifest.json from the tree and the built files (never by hand)
    keygen              a minisign-compatible release key pair (the secret is never printed)
    sign                a minisign signature over the manifest's exact bytes
    verify              minisign, Sigstore and provenance (the verifier admission runs), asset files

Every expected failure is one line `herdr-mcp: error: <code>: <message>` (under `--json` also
`{"error": {"code", "message"}}` on stdout) and its fault's exit status: 2 a bad argument, 3 a
release, signature or provenance that is refused, or a build that is not reproducible, 4 a file
or a build step that failed on this machine. `verify` always prints JSON; under `--json` the
others print one JSON object too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from herdr_mcp.cli.arguments import CommandParser, run_guarded, with_json
from herdr_mcp.errors import EXIT_REFUSED, LocalFault
from herdr_mcp.progress import printable_steps
from herdr_mcp.release.attestation import (
    MAX_BUNDLE_BYTES,
    IdentityPolicy,
    load_identity_policy,
)
from herdr_mcp.release.build import build, check_reproducible, sha256_file
from herdr_mcp.release.bundle import bundle, load_release_config, parse_bundle_filename
from herdr_mcp.release.evidence import EVIDENCE_TOO_LARGE, too_large_message
from herdr_mcp.release.manifest import MANIFEST_FILENAME, MAX_MANIFEST_BYTES, ManifestError, RuntimeManifest
from herdr_mcp.release.manifest_build import (
    AssetInput,
    build_manifest,
    contract_migration_from_file,
    resolve_repository,
    source_from_git,
)
from herdr_mcp.release.minisign import (
    MAX_SIGNATURE_FILE_BYTES,
    SECRET_KEY_ENV,
    keygen,
    load_pinned_keys,
    load_secret_key,
    sign,
)
from herdr_mcp.release.verification import (
    PROVENANCE_BUNDLE_NAME,
    SIGNATURE_NAME,
    SIGSTORE_BUNDLE_NAME,
    PublishedRelease,
    ReleaseTrust,
    SigstoreTrust,
    UnsafeSkipSigstore,
    verify_release,
)

PROJECT = "herdr-mcp"


def _steps() -> contextlib.AbstractContextManager[Callable[[str], None]]:
    """The steps of a build or bundle on stderr: rich's spinner on a terminal, else one line each;
    text from elsewhere (paths, pip's words) escaped before it reaches the terminal."""
    return printable_steps(sys.stderr)


def _print(args: argparse.Namespace, document: dict[str, Any], lines: list[str]) -> None:
    """The command's answer: `document` under `--json`, else `lines`."""
    print(json.dumps(document, sort_keys=True) if args.json else "\n".join(lines))


def _cmd_build(args: argparse.Namespace) -> int:
    with _steps() as say:
        files = [str(path) for path in build(args.source, args.out, progress=say)]
    _print(args, {"files": files}, files)
    return 0


def _cmd_check_reproducible(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="herdr-mcp-repro-") as scratch, _steps() as say:
        report = check_reproducible(args.source, args.work or Path(scratch), progress=say)
    lines = list(report.describe())
    _print(args, {"reproducible": report.reproducible, "report": lines}, lines)
    return 0 if report.reproducible else EXIT_REFUSED


def _cmd_bundle(args: argparse.Namespace) -> int:
    config = load_release_config(args.config) if args.config else load_release_config()
    with _steps() as say:
        archive = bundle(args.wheel, args.out, target=config.target(args.target), progress=say)
    _print(args, {"bundle": str(archive)}, [str(archive)])
    return 0


def _dist_assets(dist: Path) -> tuple[str, list[AssetInput]]:
    """The version and the publishable files of a dist directory (wheel, sdist, bundles)."""
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1:
        raise ManifestError("manifest_value", f"{dist} must hold exactly one wheel, found {len(wheels)}")
    try:
        name, parsed_version, _build, tags = parse_wheel_filename(wheels[0].name)
    except InvalidWheelFilename as exc:
        raise ManifestError(
            "manifest_value",
            f"{wheels[0].name} is not a valid wheel file name ({exc}); "
            f"put the wheel `release build` made in {dist}",
        ) from None
    if name != PROJECT:
        raise ManifestError(
            "manifest_value",
            f"{wheels[0].name} is a wheel of {name}, not of {PROJECT}; "
            f"put the wheel `release build` made in {dist}",
        )
    # The asset's platform: its compressed tag set (py3-none-any), each part's values sorted.
    platform = "-".join(
        ".".join(sorted({getattr(tag, part) for tag in tags})) for part in ("interpreter", "abi", "platform")
    )
    version = str(parsed_version)
    assets = [AssetInput(wheels[0], platform, "wheel")]
    for path in sorted(dist.glob("*.tar.gz")):
        target = parse_bundle_filename(path.name, PROJECT, version)
        if target is not None:
            assets.append(AssetInput(path, target, "bundle"))
        elif path.name == f"herdr_mcp-{version}.tar.gz":
            assets.append(AssetInput(path, "source", "sdist"))
    return version, assets


def _cmd_manifest(args: argparse.Namespace) -> int:
    version, assets = _dist_assets(args.dist)
    repository, repository_id = resolve_repository(args.repository, args.repository_id)
    commit, ref = source_from_git(args.source, tag=f"v{version}")
    migrate_from, state_schema_from = (None, None)
    if args.migrate_from is not None:
        migrate_from, state_schema_from = contract_migration_from_file(args.migrate_from)
    published = (
        datetime.fromisoformat(args.published_at.replace("Z", "+00:00"))
        if args.published_at
        else datetime.now(UTC)
    )
    manifest = build_manifest(
        version=version,
        repository=repository,
        repository_id=repository_id,
        commit=commit,
        ref=ref,
        published_at=published,
        assets=assets,
        migrate_from=migrate_from,
        migrate_state_schema_from=state_schema_from,
        state_schema_from=args.state_schema_from,
    )
    args.out.write_bytes(manifest.to_bytes())
    _print(args, {"manifest": str(args.out)}, [str(args.out)])
    return 0


def _cmd_keygen(args: argparse.Namespace) -> int:
    public = keygen(args.public_key, args.secret_key, overwrite=args.force)
    document = {
        "key_id": public.key_id_hex,
        "public_key": str(args.public_key),
        "secret_key": str(args.secret_key),
    }
    lines = [
        f"public key {public.key_id_hex} written to {args.public_key}",
        f"secret key written to {args.secret_key} (mode 0600); keep it out of every repository",
    ]
    _print(args, document, lines)
    return 0


def _cmd_sign(args: argparse.Namespace) -> int:
    data = _read_capped(args.manifest, MAX_MANIFEST_BYTES)
    manifest = RuntimeManifest.from_bytes(data)  # never sign what we would refuse to parse
    environ = {SECRET_KEY_ENV: os.environ.get(args.secret_key_env, "")} if args.secret_key_env else None
    secret = load_secret_key(args.secret_key, environ=environ)
    comment = f"timestamp:{int(time.time())}\tfile:{MANIFEST_FILENAME}\ttag:{manifest.tag}"
    out = args.out or args.manifest.with_name(args.manifest.name + ".minisig")
    out.write_text(sign(data, secret, trusted_comment=comment), encoding="utf-8")
    _print(args, {"signature": str(out)}, [str(out)])
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    """`herdr_mcp.release.verification.verify_release` (the verifier admission runs too), then the
    asset files in --dist, if given: size and sha256 as the manifest says.

    The evidence defaults to the published file names next to the manifest; a missing one is
    refused (`sigstore_missing`, `provenance_missing`) unless --unsafe-skip-sigstore.
    """
    data = _read_capped(args.manifest, MAX_MANIFEST_BYTES)
    folder = args.manifest.parent
    signature = _read_capped(args.signature or folder / SIGNATURE_NAME, MAX_SIGNATURE_FILE_BYTES)
    if args.unsafe_skip_sigstore:
        print(
            "herdr-mcp: warning: --unsafe-skip-sigstore: the keyless signature and the build "
            "provenance are NOT checked",
            file=sys.stderr,
        )
        sigstore: SigstoreTrust | UnsafeSkipSigstore = UnsafeSkipSigstore()
        bundle = provenance = None
    else:
        identity = (
            load_identity_policy()
            if args.identity_policy is None
            else IdentityPolicy.from_file(args.identity_policy)
        )
        sigstore = SigstoreTrust(identity_policy=identity, trusted_root=args.trusted_root)
        bundle = _read_optional(args.sigstore_bundle, folder / SIGSTORE_BUNDLE_NAME)
        provenance = _read_optional(args.attestation, folder / PROVENANCE_BUNDLE_NAME)
    verified = verify_release(
        PublishedRelease(
            manifest=data, signature=signature, sigstore_bundle=bundle, provenance_bundle=provenance
        ),
        ReleaseTrust(public_keys=tuple(load_pinned_keys(args.keys)), sigstore=sigstore),
    )
    manifest = verified.manifest
    report: dict[str, Any] = {
        "manifest": str(args.manifest),
        "version": manifest.version,
        "contract": manifest.contract.to_dict(),
        "minisign_key": verified.signature.key.key_id_hex,
        "sigstore": verified.sigstore,
    }
    if verified.provenance is not None:
        report["provenance"] = {"subjects": len(verified.provenance.subjects)}
        report["trusted_root"] = verified.provenance.trusted_root_age.warning or "fresh"
    if args.dist is not None:
        report["assets"] = _check_assets(args.dist, manifest)
    print(json.dumps(report, indent=2, sort_keys=True))
    return 0


def _read_capped(path: Path, cap: int) -> bytes:
    """A file of evidence, refused past `cap` (`evidence_too_large`, as on every other path:
    `release/evidence.py`) without reading more than `cap` + 1 bytes."""
    with path.open("rb") as handle:
        data = handle.read(cap + 1)
    if len(data) > cap:
        raise ManifestError(EVIDENCE_TOO_LARGE, too_large_message(str(path), cap, path.stat().st_size))
    return data


def _read_optional(given: Path | None, default: Path) -> bytes | None:
    """The file the user named (which must exist), else the default name if it exists."""
    if given is None and not default.exists():
        return None
    return _read_capped(given or default, MAX_BUNDLE_BYTES)


def _check_assets(dist: Path, manifest: RuntimeManifest) -> list[str]:
    checked = []
    for asset in manifest.assets:
        path = dist / asset.name
        if not path.is_file():
            raise ManifestError("asset_missing", f"{asset.name} is listed in the manifest but not in {dist}")
        size = path.stat().st_size
        if size != asset.size or sha256_file(path) != asset.sha256:
            raise ManifestError(
                "asset_digest_mismatch", f"{asset.name} in {dist} differs from the manifest (size or sha256)"
            )
        checked.append(asset.name)
    return checked


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="herdr-mcp release", description="maintainer release commands")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("build", help="wheel + sdist, reproducibly")
    p.add_argument("--source", type=Path, default=Path.cwd(), help="the checkout (default: here)")
    p.add_argument("--out", type=Path, default=Path("dist"), help="where the files go (default: dist)")
    p.set_defaults(run=_cmd_build)

    p = commands.add_parser("check-reproducible", help="build HEAD twice in clean trees and compare")
    p.add_argument("--source", type=Path, default=Path.cwd(), help="the checkout (default: here)")
    p.add_argument(
        "--work", type=Path, default=None, help="keep both builds here (default: a temporary dir, removed)"
    )
    p.set_defaults(run=_cmd_check_reproducible)

    p = commands.add_parser("bundle", help="the offline wheelhouse of one target")
    p.add_argument("--wheel", type=Path, required=True, help="the wheel to bundle")
    p.add_argument("--target", required=True, help="a target of release/config.toml, e.g. linux-x86_64-cp311")
    p.add_argument("--out", type=Path, default=Path("dist"), help="where the bundle goes (default: dist)")
    p.add_argument(
        "--config", type=Path, default=None, help="release configuration (default: release/config.toml)"
    )
    p.set_defaults(run=_cmd_bundle)

    p = commands.add_parser("manifest", help="runtime-manifest.json from the tree and --dist")
    p.add_argument("--dist", type=Path, required=True, help="the built files (one wheel, sdist, bundles)")
    p.add_argument("--source", type=Path, default=Path.cwd(), help="the checkout (default: here)")
    p.add_argument("--repository", default=None, help="owner/name (default: $GITHUB_REPOSITORY)")
    p.add_argument("--repository-id", type=int, default=None, help="(default: $GITHUB_REPOSITORY_ID)")
    p.add_argument("--published-at", default=None, help="RFC 3339 UTC time (default: now)")
    p.add_argument("--migrate-from", type=Path, default=None, help="previous manifest or contract catalog")
    p.add_argument(
        "--state-schema-from",
        type=int,
        default=None,
        help="declare a state migration (major migration) from this state schema to the tree's",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path(MANIFEST_FILENAME),
        help=f"the manifest to write (default {MANIFEST_FILENAME})",
    )
    p.set_defaults(run=_cmd_manifest)

    p = commands.add_parser("keygen", help="a release key pair (minisign-compatible, unencrypted secret)")
    p.add_argument("--public-key", type=Path, required=True, help="the public key file to write")
    p.add_argument("--secret-key", type=Path, required=True, help="the secret key file to write (0600)")
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.set_defaults(run=_cmd_keygen)

    p = commands.add_parser("sign", help="minisign signature over the manifest's exact bytes")
    p.add_argument("--manifest", type=Path, required=True, help="the runtime-manifest.json to sign")
    p.add_argument("--secret-key", type=Path, default=None, help=f"key file (else ${SECRET_KEY_ENV})")
    p.add_argument("--secret-key-env", default=None, help="name of an environment variable holding the key")
    p.add_argument("--out", type=Path, default=None, help="default: <manifest>.minisig")
    p.set_defaults(run=_cmd_sign)

    p = commands.add_parser("verify", help="verify a manifest, its signatures and its assets")
    p.add_argument("--manifest", type=Path, required=True, help="the runtime-manifest.json to verify")
    p.add_argument("--signature", type=Path, default=None, help="default: <manifest>.minisig")
    p.add_argument("--keys", type=Path, default=None, help="pinned public keys (default: packaged)")
    p.add_argument(
        "--sigstore-bundle", type=Path, default=None, help=f"default: {SIGSTORE_BUNDLE_NAME} beside it"
    )
    p.add_argument(
        "--attestation",
        type=Path,
        default=None,
        help=f"build provenance (default: {PROVENANCE_BUNDLE_NAME} beside it)",
    )
    p.add_argument("--identity-policy", type=Path, default=None, help="(default: packaged)")
    p.add_argument("--trusted-root", type=Path, default=None, help="Sigstore trust root (default: packaged)")
    p.add_argument(
        "--unsafe-skip-sigstore",
        action="store_true",
        help="UNSAFE: check only the minisign signature (e.g. before the workflow has signed)",
    )
    p.add_argument("--dist", type=Path, default=None, help="check these asset files against the manifest")
    p.set_defaults(run=_cmd_verify)
    return with_json(parser)


def main(argv: Sequence[str]) -> int:
    """`herdr-mcp release ...` inside the CLI's one catch; the exit status."""
    return run_guarded(lambda: run(argv), argv)


def run(argv: Sequence[str]) -> int:
    """Run one `release` subcommand; raises what the CLI's one catch reports."""
    args = build_parser().parse_args(list(argv))
    try:
        code: int = args.run(args)
    except OSError as exc:
        # A maintainer's input file that is not there is named as such, not as a generic io_error.
        raise LocalFault("file_unreadable", f"{exc.filename or ''}: {exc.strerror or exc}") from exc
    return code
