"""runtime-manifest.json: building it from the tree, the one parser, the JSON Schema, and the tamper table.

The tamper table signs a manifest's exact bytes and then changes every field (top-level and nested)
after signing: each change is refused with a stable code, either by the signature
(`signature_invalid`, `signature_malformed`, `signature_key_not_pinned`) or, for bytes that were
signed as they are, by the parser (`manifest_unknown_field`, `manifest_float`, ...).

The example in manifests/examples/ is generated here: set HERDR_MCP_REGENERATE_EXAMPLES=1 to rewrite
it after the contract, the state schema or the manifest format changed.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from herdr_mcp.contract import CURRENT_EPOCH, ContractIdentity, contract_identity
from herdr_mcp.release.manifest import (
    MAX_SAFE_INTEGER,
    Asset,
    AssetKind,
    ContractMigration,
    ManifestError,
    Provenance,
    RuntimeManifest,
    Source,
    StateMigration,
)
from herdr_mcp.release.manifest_build import (
    AssetInput,
    build_manifest,
    contract_migration_from_file,
    resolve_repository,
    source_from_git,
)
from herdr_mcp.release.minisign import PublicKey, SecretKey, SignatureError, sign, verify
from herdr_mcp.state import STATE_SCHEMA

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "manifests" / "runtime-manifest.schema.json"
EXAMPLE_PATH = ROOT / "manifests" / "examples" / "runtime-manifest.example.json"
PREVIOUS_CATALOG = ROOT / "manifests" / "contracts" / f"runtime-epoch-{CURRENT_EPOCH - 1}.json"
CURRENT_CATALOG = ROOT / "manifests" / "contracts" / f"runtime-epoch-{CURRENT_EPOCH}.json"

REPOSITORY = "example-org/herdr-mcp"
REPOSITORY_ID = 812345678
COMMIT = "3f1c2a9b8e7d6c5b4a39281706f5e4d3c2b1a098"
VERSION = "1.1.0-rc.2"
PUBLISHED = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def write_assets(directory: Path, version: str = VERSION) -> list[AssetInput]:
    """Three small files standing in for the wheel, the sdist and a workstation bundle."""
    files: list[tuple[str, str, AssetKind, bytes]] = [
        (f"herdr_mcp-{version}-py3-none-any.whl", "py3-none-any", "wheel", b"wheel " * 64),
        (f"herdr_mcp-{version}.tar.gz", "source", "sdist", b"sdist " * 48),
        (f"herdr-mcp-{version}-linux-x86_64-cp311.tar.gz", "linux-x86_64-cp311", "bundle", b"bundle " * 96),
    ]
    inputs = []
    for name, target, kind, content in files:
        path = directory / name
        path.write_bytes(content)
        inputs.append(AssetInput(path=path, target=target, kind=kind))
    return inputs


def build(directory: Path, **overrides: Any) -> RuntimeManifest:
    arguments: dict[str, Any] = {
        "version": VERSION,
        "repository": REPOSITORY,
        "repository_id": REPOSITORY_ID,
        "commit": COMMIT,
        "ref": f"refs/tags/v{VERSION}",
        "published_at": PUBLISHED,
        "assets": write_assets(directory),
    }
    arguments.update(overrides)
    return build_manifest(**arguments)


def migrating(directory: Path) -> RuntimeManifest:
    """A manifest that moves the contract one epoch forward (from the previous frozen catalog)."""
    previous, state_schema_from = contract_migration_from_file(PREVIOUS_CATALOG)
    return build(directory, migrate_from=previous, migrate_state_schema_from=state_schema_from)


def code_of(data: bytes) -> str:
    with pytest.raises(ManifestError) as caught:
        RuntimeManifest.from_bytes(data)
    return caught.value.code


def as_bytes(document: Any) -> bytes:
    """Any JSON spelling (the parser does not require canonical input)."""
    return json.dumps(document).encode("utf-8")


# --- building ------------------------------------------------------------------------------------


def test_build_computes_contract_state_and_assets(tmp_path: Path) -> None:
    manifest = build(tmp_path)
    assert manifest.contract == contract_identity()
    assert manifest.state_schema == STATE_SCHEMA
    assert manifest.tag == f"v{VERSION}"
    assert manifest.source == Source(REPOSITORY, REPOSITORY_ID, COMMIT, f"refs/tags/v{VERSION}")
    assert manifest.provenance == Provenance(
        workflow=".github/workflows/release.yml",
        issuer="https://token.actions.githubusercontent.com",
        predicate_type="https://slsa.dev/provenance/v1",
        runner_environment="github-hosted",
    )
    assert manifest.published_at == "2026-11-29T12:00:00Z"
    assert manifest.contract_migration is None
    wheel = manifest.asset(f"herdr_mcp-{VERSION}-py3-none-any.whl")
    assert wheel.size == len(b"wheel " * 64)
    assert wheel.sha256 == hashlib.sha256(b"wheel " * 64).hexdigest()
    assert wheel.url == f"https://github.com/{REPOSITORY}/releases/download/v{VERSION}/{wheel.name}"
    assert [asset.kind for asset in manifest.assets] == ["wheel", "sdist", "bundle"]


def test_to_bytes_is_canonical_deterministic_and_round_trips(tmp_path: Path) -> None:
    first = build(tmp_path).to_bytes()
    second = build(tmp_path).to_bytes()
    assert first == second
    assert first.endswith(b"}\n")
    assert first == rfc8785.dumps(json.loads(first)) + b"\n"
    assert RuntimeManifest.from_bytes(first).to_bytes() == first
    assert RuntimeManifest.from_bytes(first) == build(tmp_path)


def test_published_at_is_converted_to_utc_and_must_be_aware(tmp_path: Path) -> None:
    plus_two = datetime(2026, 11, 29, 14, 0, 0, 999, tzinfo=timezone(timedelta(hours=2)))
    assert build(tmp_path, published_at=plus_two).published_at == "2026-11-29T12:00:00Z"
    with pytest.raises(ManifestError) as caught:
        build(tmp_path, published_at=datetime(2026, 11, 29, 12, 0, 0))
    assert (caught.value.code, caught.value.field) == ("manifest_value", "published_at")


def test_download_base_overrides_the_github_url(tmp_path: Path) -> None:
    manifest = build(tmp_path, download_base="https://mirror.example.org/herdr/v1/")
    assert all(a.url == f"https://mirror.example.org/herdr/v1/{a.name}" for a in manifest.assets)


@pytest.mark.parametrize(
    ("overrides", "code", "field"),
    [
        ({"version": "1.1"}, "manifest_value", "version"),
        ({"version": "1.1.0-whatever"}, "manifest_value", "version"),
        ({"ref": "refs/heads/main"}, "manifest_value", "source.ref"),
        ({"ref": "refs/tags/v1.0.0"}, "manifest_value", "source.ref"),
        ({"repository": "not a repository"}, "manifest_value", "source.repository"),
        ({"commit": "HEAD"}, "manifest_value", "source.commit"),
        ({"repository_id": 0}, "manifest_value", "source.repository_id"),
        ({"assets": []}, "manifest_value", "assets"),
        ({"download_base": "http://example.org"}, "manifest_value", "assets[0].url"),
    ],
)
def test_build_refuses_inputs_that_make_a_malformed_manifest(
    tmp_path: Path, overrides: dict[str, Any], code: str, field: str
) -> None:
    with pytest.raises(ManifestError) as caught:
        build(tmp_path, **overrides)
    assert (caught.value.code, caught.value.field) == (code, field)
    assert field in caught.value.message


def test_build_refuses_a_missing_asset_and_duplicate_names(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as caught:
        build(tmp_path, assets=[AssetInput(tmp_path / "absent.whl", "any", "wheel")])
    assert caught.value.code == "manifest_asset_unreadable"
    (tmp_path / "a").mkdir()
    twice = [*write_assets(tmp_path), *write_assets(tmp_path / "a")]
    with pytest.raises(ManifestError) as caught:
        build(tmp_path, assets=twice)
    assert (caught.value.code, caught.value.field) == ("manifest_value", "assets[3]")


def test_a_constructed_manifest_is_validated_too() -> None:
    with pytest.raises(ManifestError) as caught:
        Asset(name="x.whl", target="any", kind="wheel", size=True, sha256="0" * 64, url="https://h/x.whl")
    assert (caught.value.code, caught.value.field) == ("manifest_type", "size")
    with pytest.raises(ManifestError) as caught:
        ContractMigration(from_contract=ContractIdentity(4, "sha256:" + "A" * 64, 18), state_schema_from=1)
    assert (caught.value.code, caught.value.field) == ("manifest_value", "from.hash")


def test_the_example_is_generated_from_the_code(tmp_path: Path) -> None:
    """manifests/examples/runtime-manifest.example.json is this manifest, pretty-printed for readers
    (what a release publishes is `to_bytes()`, the canonical form of the same document)."""
    manifest = migrating(tmp_path)
    text = json.dumps(manifest.to_dict(), indent=2, ensure_ascii=False) + "\n"
    if os.environ.get("HERDR_MCP_REGENERATE_EXAMPLES") == "1":
        EXAMPLE_PATH.write_text(text, encoding="utf-8")
    assert EXAMPLE_PATH.read_text(encoding="utf-8") == text, (
        "the example is stale: rerun with HERDR_MCP_REGENERATE_EXAMPLES=1"
    )
    assert RuntimeManifest.from_bytes(EXAMPLE_PATH.read_bytes()) == manifest


# --- contract migration --------------------------------------------------------------------------


def test_migration_from_the_previous_catalog_is_added(tmp_path: Path) -> None:
    previous, state_schema_from = contract_migration_from_file(PREVIOUS_CATALOG)
    assert previous == contract_identity(CURRENT_EPOCH - 1)
    assert state_schema_from is None
    manifest = build(tmp_path, migrate_from=previous)
    assert manifest.contract_migration == ContractMigration(previous, STATE_SCHEMA)
    document = json.loads(manifest.to_bytes())
    assert document["contract_migration"] == {"from": previous.to_dict(), "state_schema_from": STATE_SCHEMA}


def test_no_migration_when_the_contract_is_unchanged(tmp_path: Path) -> None:
    same, _ = contract_migration_from_file(CURRENT_CATALOG)
    manifest = build(tmp_path, migrate_from=same)
    assert manifest.contract_migration is None
    assert b"contract_migration" not in manifest.to_bytes()


def test_migration_from_a_previous_manifest(tmp_path: Path) -> None:
    ordinary = tmp_path / "ordinary.json"
    ordinary.write_bytes(build(tmp_path).to_bytes())
    assert contract_migration_from_file(ordinary) == (contract_identity(), STATE_SCHEMA)
    assert build(tmp_path, migrate_from=contract_identity()).contract_migration is None

    older = RuntimeManifest.from_bytes(build(tmp_path).to_bytes())
    older_document = older.to_dict() | {"contract": contract_identity(CURRENT_EPOCH - 1).to_dict()}
    previous_file = tmp_path / "previous.json"
    previous_file.write_bytes(as_bytes(older_document))
    previous, state_schema_from = contract_migration_from_file(previous_file)
    manifest = build(tmp_path, migrate_from=previous, migrate_state_schema_from=state_schema_from)
    assert manifest.contract_migration == ContractMigration(
        contract_identity(CURRENT_EPOCH - 1), STATE_SCHEMA
    )


def test_migration_across_two_epochs_is_refused(tmp_path: Path) -> None:
    catalog = json.loads(PREVIOUS_CATALOG.read_text(encoding="utf-8"))
    catalog["epoch"] = CURRENT_EPOCH - 2
    older = tmp_path / f"runtime-epoch-{CURRENT_EPOCH - 2}.json"
    older.write_text(json.dumps(catalog), encoding="utf-8")
    previous, _ = contract_migration_from_file(older)
    with pytest.raises(ManifestError) as caught:
        build(tmp_path, migrate_from=previous)
    assert caught.value.code == "contract_migration_not_adjacent"
    assert f"epoch {CURRENT_EPOCH - 2}" in caught.value.message
    assert f"epoch {CURRENT_EPOCH}" in caught.value.message


@pytest.mark.parametrize(
    "previous",
    [
        ContractIdentity(CURRENT_EPOCH + 1, contract_identity().hash, 18),
        ContractIdentity(CURRENT_EPOCH, "sha256:" + "0" * 64, 18),
    ],
    ids=["newer-epoch", "same-epoch-other-hash"],
)
def test_other_previous_contracts_are_refused(tmp_path: Path, previous: ContractIdentity) -> None:
    with pytest.raises(ManifestError) as caught:
        build(tmp_path, migrate_from=previous)
    assert caught.value.code == "contract_migration_not_adjacent"


def test_a_migration_that_changes_the_state_schema_is_refused(tmp_path: Path) -> None:
    previous = contract_identity(CURRENT_EPOCH - 1)
    with pytest.raises(ManifestError) as caught:
        build(tmp_path, migrate_from=previous, migrate_state_schema_from=STATE_SCHEMA + 1)
    assert caught.value.code == "contract_migration_state_schema"


def test_migration_source_must_be_a_manifest_or_a_catalog(tmp_path: Path) -> None:
    for name, content in [
        ("other.json", "{}"),
        ("text.json", "not json"),
        ("bad.json", '{"epoch": 4, "tools": 1}'),
    ]:
        path = tmp_path / name
        path.write_text(content, encoding="utf-8")
        with pytest.raises(ManifestError) as caught:
            contract_migration_from_file(path)
        assert caught.value.code == "contract_migration_source_invalid"
    with pytest.raises(ManifestError) as caught:
        contract_migration_from_file(tmp_path / "absent.json")
    assert caught.value.code == "contract_migration_source_invalid"


# --- source ----------------------------------------------------------------------------------------


@pytest.fixture
def git_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, value in {
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }.items():
        monkeypatch.setenv(name, value)
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "f").write_text("x", encoding="utf-8")
    subprocess.run(["git", "-C", str(repo), "add", "f"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", "one"], check=True)
    return repo


def _head(repo: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


def test_source_from_git_reads_branch_and_tag(git_repo: Path) -> None:
    head = _head(git_repo)
    assert source_from_git(git_repo) == (head, "refs/heads/main")
    subprocess.run(["git", "-C", str(git_repo), "tag", "v1.2.3"], check=True)
    assert source_from_git(git_repo) == (head, "refs/tags/v1.2.3")
    assert source_from_git(git_repo, tag="v1.2.3") == (head, "refs/tags/v1.2.3")


def test_source_from_git_refuses_what_it_cannot_name(git_repo: Path, tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as caught:
        source_from_git(git_repo, tag="v9.9.9")
    assert caught.value.code == "source_tag_mismatch"
    subprocess.run(["git", "-C", str(git_repo), "checkout", "-q", "--detach"], check=True)
    with pytest.raises(ManifestError) as caught:
        source_from_git(git_repo)
    assert caught.value.code == "source_ref_unknown"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ManifestError) as caught:
        source_from_git(tmp_path / "empty")
    assert caught.value.code == "source_git_failed"


def test_resolve_repository_prefers_arguments_then_github_environment() -> None:
    environ = {"GITHUB_REPOSITORY": "o/r", "GITHUB_REPOSITORY_ID": "42"}
    assert resolve_repository(environ=environ) == ("o/r", 42)
    assert resolve_repository("a/b", 7, environ=environ) == ("a/b", 7)
    for partial in (
        {},
        {"GITHUB_REPOSITORY": "o/r"},
        {"GITHUB_REPOSITORY": "o/r", "GITHUB_REPOSITORY_ID": "x"},
    ):
        with pytest.raises(ManifestError) as caught:
            resolve_repository(environ=partial)
        assert caught.value.code == "source_repository_unknown"


# --- the parse boundary ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A well-formed manifest document with every optional part present."""
    return migrating(tmp_path_factory.mktemp("doc")).to_dict()


def edited(document: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`document` with the value at `path` (`assets[0].size`) replaced; `DELETE` removes it."""
    copied = copy.deepcopy(document)
    *parents, last = _steps(path)
    target: Any = copied
    for step in parents:
        target = target[step]
    if value is DELETE:
        del target[last]
    else:
        target[last] = value
    return copied


DELETE = object()


def _steps(path: str) -> list[str | int]:
    steps: list[str | int] = []
    for part in path.split("."):
        name, _, index = part.partition("[")
        if name:
            steps.append(name)
        if index:
            steps.append(int(index.rstrip("]")))
    return steps


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", "manifest_not_json"),
        (b"{", "manifest_not_json"),
        (b"\xff\xfe{}", "manifest_not_json"),
        (b'{"a": NaN}', "manifest_not_json"),
        (b"[" * 100_000 + b"]" * 100_000, "json_too_deep"),
        (b" " * (1024 * 1024 + 1), "evidence_too_large"),
        (b"[]", "manifest_type"),
        (b'{"a": 1.5}', "manifest_float"),
        (b'{"a": 1e3}', "manifest_float"),
        (b'{"a": 9007199254740992}', "manifest_integer_too_large"),
        (b'{"a": -9007199254740992}', "manifest_integer_too_large"),
        (b'{"a": 1' + b"0" * 5000 + b"}", "manifest_integer_too_large"),
        (b'{"a": 1, "a": 1}', "manifest_duplicate_key"),
        (b'{"a": {"b": 1, "b": 2}}', "manifest_duplicate_key"),
    ],
    ids=lambda value: value[:24].decode("utf-8", "replace") if isinstance(value, bytes) else value,
)
def test_json_level_refusals(data: bytes, code: str) -> None:
    assert code_of(data) == code


def test_the_integer_limit_is_inclusive(document: dict[str, Any]) -> None:
    largest = edited(document, "source.repository_id", MAX_SAFE_INTEGER)
    assert RuntimeManifest.from_bytes(as_bytes(largest)).source.repository_id == MAX_SAFE_INTEGER


def test_unknown_fields_are_named_by_their_path(document: dict[str, Any]) -> None:
    for path in [
        "extra",
        "contract.extra",
        "contract_migration.extra",
        "contract_migration.from.extra",
        "source.extra",
        "provenance.extra",
        "assets[1].extra",
    ]:
        with pytest.raises(ManifestError) as caught:
            RuntimeManifest.from_bytes(as_bytes(edited(document, path, "x")))
        assert (caught.value.code, caught.value.field) == ("manifest_unknown_field", path)
        assert path in str(caught.value)


def test_a_newer_schema_version_is_reported_before_its_new_fields(document: dict[str, Any]) -> None:
    newer = edited(edited(document, "schema_version", 2), "signatures", [])
    with pytest.raises(ManifestError) as caught:
        RuntimeManifest.from_bytes(as_bytes(newer))
    assert (caught.value.code, caught.value.field) == ("manifest_value", "schema_version")


# --- the JSON Schema agrees with the parser -------------------------------------------------------


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _schema_accepts(validator: Draft202012Validator, document: Any) -> bool:
    return not list(validator.iter_errors(document))


def test_schema_and_parser_accept_the_good_examples(
    validator: Draft202012Validator, document: dict[str, Any]
) -> None:
    goods = [
        document,
        edited(document, "contract_migration", DELETE),
        json.loads(EXAMPLE_PATH.read_text(encoding="utf-8")),
        edited(
            edited(edited(document, "version", "2.0.0"), "tag", "v2.0.0"), "source.ref", "refs/tags/v2.0.0"
        ),
        edited(document, "provenance.runner_environment", "self-hosted"),
        edited(document, "assets[0].size", MAX_SAFE_INTEGER),
    ]
    for good in goods:
        assert _schema_accepts(validator, good)
        RuntimeManifest.from_bytes(as_bytes(good))


REQUIRED = [
    *("schema_version", "product", "version", "tag", "state_schema", "contract", "source", "provenance"),
    *("published_at", "assets", "contract.epoch", "contract.hash", "contract.tool_count"),
    *("contract_migration.from", "contract_migration.state_schema_from", "contract_migration.from.hash"),
    *("source.repository", "source.repository_id", "source.commit", "source.ref"),
    *(
        "provenance.workflow",
        "provenance.issuer",
        "provenance.predicate_type",
        "provenance.runner_environment",
    ),
    *(
        "assets[0].name",
        "assets[0].target",
        "assets[0].kind",
        "assets[0].size",
        "assets[0].sha256",
        "assets[0].url",
    ),
]

#: (path, bad value, the parser's code): each must be refused by the schema too.
BAD_VALUES: list[tuple[str, Any, str]] = [
    ("schema_version", 2, "manifest_value"),
    ("schema_version", True, "manifest_type"),
    ("product", "herdr", "manifest_value"),
    ("version", 110, "manifest_type"),
    ("version", "1.1", "manifest_value"),
    ("version", "01.1.0", "manifest_value"),
    ("version", "1.1.0+build.5", "manifest_value"),
    ("version", "1.1.0-rc.2\n", "manifest_value"),
    ("tag", "1.1.0-rc.2", "manifest_value"),
    ("state_schema", 0, "manifest_value"),
    ("state_schema", "3", "manifest_type"),
    ("state_schema", 1.5, "manifest_float"),
    ("state_schema", MAX_SAFE_INTEGER + 1, "manifest_integer_too_large"),
    ("contract", [], "manifest_type"),
    ("contract.epoch", True, "manifest_type"),
    ("contract.hash", "sha256:" + "A" * 64, "manifest_value"),
    ("contract.hash", "0" * 64, "manifest_value"),
    ("contract.tool_count", -1, "manifest_value"),
    ("contract_migration", None, "manifest_type"),
    ("contract_migration.from.epoch", 0, "manifest_value"),
    ("contract_migration.state_schema_from", "1", "manifest_type"),
    ("source.repository", "no-slash", "manifest_value"),
    ("source.repository", "owner/..", "manifest_value"),
    ("source.repository_id", 0, "manifest_value"),
    ("source.commit", "0" * 39, "manifest_value"),
    ("source.commit", "0" * 40 + "\n", "manifest_value"),
    ("source.ref", "refs/heads/main", "manifest_value"),
    ("provenance.workflow", "/etc/release.yml", "manifest_value"),
    ("provenance.issuer", "http://token.actions.githubusercontent.com", "manifest_value"),
    ("provenance.runner_environment", "laptop", "manifest_value"),
    ("published_at", "2026-11-29T12:00:00+00:00", "manifest_value"),
    ("published_at", "2026-11-29T12:00:00.5Z", "manifest_value"),
    ("published_at", 1795000000, "manifest_type"),
    ("assets", [], "manifest_value"),
    ("assets", {}, "manifest_type"),
    ("assets[0]", "herdr.whl", "manifest_type"),
    ("assets[0].name", "../herdr.whl", "manifest_value"),
    ("assets[0].name", "dir/herdr.whl", "manifest_value"),
    ("assets[0].target", "", "manifest_value"),
    ("assets[0].kind", "zip", "manifest_value"),
    ("assets[0].size", 0, "manifest_value"),
    ("assets[0].size", "12", "manifest_type"),
    ("assets[0].sha256", "sha256:" + "0" * 64, "manifest_value"),
    ("assets[0].url", "http://github.com/x", "manifest_value"),
    ("assets[0].url", "https://github.com/x?name=a.whl", "manifest_value"),
    ("assets[0].url", "https://user@github.com/a.whl", "manifest_value"),
    ("assets[0].url", "https://github.com/" + "a" * 2100, "manifest_value"),
]

#: What only the parser can check (documented in the schema's description): the schema accepts these.
PARSER_ONLY: list[tuple[Callable[[dict[str, Any]], dict[str, Any]], str]] = [
    (lambda d: edited(d, "tag", "v9.9.9"), "manifest_value"),
    (lambda d: edited(d, "source.ref", "refs/tags/v9.9.9"), "manifest_value"),
    (lambda d: edited(d, "assets[1]", d["assets"][0]), "manifest_value"),
    (
        lambda d: edited(d, "assets[0].url", "https://github.com/o/r/releases/download/v1/other.whl"),
        "manifest_value",
    ),
    (
        lambda d: edited(
            edited(edited(d, "version", "1.1.0-foo"), "tag", "v1.1.0-foo"),
            "source.ref",
            "refs/tags/v1.1.0-foo",
        ),
        "manifest_value",
    ),
    (lambda d: edited(d, "published_at", "2026-02-30T12:00:00Z"), "manifest_value"),
    *(
        (
            lambda d, v=spelling: edited(
                edited(edited(d, "version", v), "tag", f"v{v}"), "source.ref", f"refs/tags/v{v}"
            ),
            "manifest_value",
        )
        for spelling in ("1.1.0-1", "1.1.0-rc1", "1.1.0-alpha.1.beta")
    ),
]


@pytest.mark.parametrize("path", REQUIRED)
def test_missing_fields_are_refused_by_both(
    validator: Draft202012Validator, document: dict[str, Any], path: str
) -> None:
    bad = edited(document, path, DELETE)
    assert not _schema_accepts(validator, bad)
    with pytest.raises(ManifestError) as caught:
        RuntimeManifest.from_bytes(as_bytes(bad))
    assert (caught.value.code, caught.value.field) == ("manifest_missing_field", path)


@pytest.mark.parametrize(
    ("path", "value", "code"), BAD_VALUES, ids=[f"{p}={v!r}"[:60] for p, v, _ in BAD_VALUES]
)
def test_bad_values_are_refused_by_both(
    validator: Draft202012Validator, document: dict[str, Any], path: str, value: Any, code: str
) -> None:
    bad = edited(document, path, value)
    assert not _schema_accepts(validator, bad)
    assert code_of(as_bytes(bad)) == code


@pytest.mark.parametrize("number", ["1.0", "18.0", "1e1"])
def test_integral_floats_are_refused_by_the_parser_alone(
    validator: Draft202012Validator, document: dict[str, Any], number: str
) -> None:
    data = as_bytes(document).replace(b'"tool_count": 18', b'"tool_count": ' + number.encode(), 1)
    assert b'"tool_count": ' + number.encode() in data
    assert _schema_accepts(validator, json.loads(data))  # JSON Schema calls 18.0 an integer
    assert code_of(data) == "manifest_float"


@pytest.mark.parametrize(("change", "code"), PARSER_ONLY)
def test_cross_field_rules_are_the_parsers(
    validator: Draft202012Validator,
    document: dict[str, Any],
    change: Callable[[dict[str, Any]], dict[str, Any]],
    code: str,
) -> None:
    bad = change(document)
    assert _schema_accepts(validator, bad)
    assert code_of(as_bytes(bad)) == code


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(path=st.sampled_from([*REQUIRED, "extra", "assets[1]", "contract_migration"]), value=JSON_VALUES)
def test_any_edit_yields_a_manifest_or_a_manifest_error(
    document: dict[str, Any], path: str, value: Any
) -> None:
    """The parse boundary raises one domain error and nothing else, whatever the document holds."""
    with contextlib.suppress(ManifestError):
        RuntimeManifest.from_bytes(as_bytes(edited(document, path, value)))


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200))
def test_any_bytes_yield_a_manifest_error(data: bytes) -> None:
    with pytest.raises(ManifestError):
        RuntimeManifest.from_bytes(data)


# --- the tamper table -------------------------------------------------------------------------------


def _leaf_paths(value: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaf_paths(item, f"{prefix}.{key}" if prefix else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaf_paths(item, f"{prefix}[{index}]")
    else:
        yield prefix


def _sample() -> RuntimeManifest:
    """A manifest of the same shape as the signed one, to name the table's rows at collection time."""
    asset = Asset(name="a.whl", target="any", kind="wheel", size=1, sha256="0" * 64, url="https://h/a.whl")
    return RuntimeManifest(
        version="1.0.0",
        tag="v1.0.0",
        state_schema=1,
        contract=ContractIdentity(2, "sha256:" + "0" * 64, 1),
        contract_migration=ContractMigration(ContractIdentity(1, "sha256:" + "1" * 64, 1), 1),
        source=Source("o/r", 1, "0" * 40, "refs/tags/v1.0.0"),
        published_at="2026-01-01T00:00:00Z",
        assets=tuple(
            Asset(**(asset.to_dict() | {"name": name, "url": f"https://h/{name}"}))
            for name in ("a", "b", "c")
        ),
    )


LEAVES = list(_leaf_paths(_sample().to_dict()))


def _changed(value: Any) -> Any:
    """Another value of the same JSON type."""
    if isinstance(value, int):
        return value + 1
    assert isinstance(value, str)
    return value[:-1] + ("1" if value[-1:] != "1" else "2")


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, str, PublicKey, SecretKey]:
    """A release manifest (with a contract migration and three assets) and its minisign signature."""
    manifest = migrating(tmp_path_factory.mktemp("signed"))
    data = manifest.to_bytes()
    secret_key = SecretKey.generate()
    signature = sign(data, secret_key, trusted_comment=f"herdr-mcp {manifest.version} runtime-manifest.json")
    return data, signature, secret_key.public_key, secret_key


def admit(data: bytes, signature: str, keys: list[PublicKey]) -> RuntimeManifest:
    """The order a workstation uses: verify the exact bytes, then parse them."""
    verify(data, signature, keys)
    return RuntimeManifest.from_bytes(data)


def refusal(data: bytes, signature: str, keys: list[PublicKey]) -> str:
    with pytest.raises((SignatureError, ManifestError)) as caught:
        admit(data, signature, keys)
    assert isinstance(caught.value, SignatureError | ManifestError)
    return caught.value.code


def test_the_signed_manifest_is_admitted(signed: tuple[bytes, str, PublicKey, SecretKey]) -> None:
    data, signature, public_key, _ = signed
    manifest = admit(data, signature, [public_key])
    assert manifest.contract_migration is not None
    assert manifest.to_bytes() == data


def test_the_table_covers_every_field(signed: tuple[bytes, str, PublicKey, SecretKey]) -> None:
    assert set(LEAVES) == set(_leaf_paths(json.loads(signed[0])))
    assert {path.split(".")[0].split("[")[0] for path in LEAVES} == set(json.loads(signed[0]))
    assert len(LEAVES) == 39


@pytest.mark.parametrize("path", LEAVES)
def test_tamper_every_field_after_signing(signed: tuple[bytes, str, PublicKey, SecretKey], path: str) -> None:
    data, signature, public_key, _ = signed
    document = json.loads(data)
    original = json.loads(data)
    for step in _steps(path):
        original = original[step]
    tampered = rfc8785.dumps(edited(document, path, _changed(original))) + b"\n"
    assert tampered != data
    assert refusal(tampered, signature, [public_key]) == "signature_invalid"


@pytest.mark.parametrize(
    "change",
    [
        lambda d: edited(d, "contract_migration", DELETE),
        lambda d: edited(d, "assets[0].sha256", "f" * 64),
        lambda d: edited(d, "assets[2].url", "https://attacker.example/" + d["assets"][2]["name"]),
        lambda d: edited(d, "contract.hash", "sha256:" + "e" * 64),
        lambda d: edited(d, "published_at", "2030-01-01T00:00:00Z"),
        lambda d: edited(
            edited(edited(d, "version", "9.0.0"), "tag", "v9.0.0"), "source.ref", "refs/tags/v9.0.0"
        ),
        lambda d: edited(d, "assets", d["assets"][:1]),
    ],
    ids=[
        "drop-migration",
        "asset-digest",
        "asset-url",
        "contract-hash",
        "published-at",
        "version",
        "drop-assets",
    ],
)
def test_plausible_forgeries_parse_but_fail_the_signature(
    signed: tuple[bytes, str, PublicKey, SecretKey], change: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    data, signature, public_key, _ = signed
    forged = rfc8785.dumps(change(json.loads(data))) + b"\n"
    RuntimeManifest.from_bytes(forged)  # well-formed: only the signature stops it
    assert refusal(forged, signature, [public_key]) == "signature_invalid"


def test_tamper_table(signed: tuple[bytes, str, PublicKey, SecretKey]) -> None:
    data, signature, public_key, secret_key = signed
    document = json.loads(data)
    canonical = rfc8785.dumps(document)
    first, sig_line, trusted, global_line = signature.splitlines(keepends=True)
    pinned = [public_key]

    def signed_as_is(raw: bytes) -> tuple[bytes, str, list[PublicKey]]:
        """Bytes the maintainer's key really signed: only the parser can refuse them."""
        return raw, sign(raw, secret_key, trusted_comment="signed as is"), pinned

    float_state = canonical.replace(b'"state_schema":', b'"state_schema":1.0,"x":', 1)
    huge_id = canonical.replace(b'"repository_id":', b'"repository_id":9007199254740993,"x":', 1)
    nested = rfc8785.dumps(edited(document, "contract_migration.from.note", "x"))
    table: dict[str, tuple[tuple[bytes, str, list[PublicKey]], str]] = {
        "same JSON, other spelling": (
            (json.dumps(document, indent=1).encode(), signature, pinned),
            "signature_invalid",
        ),
        "trailing newline removed": ((data.rstrip(b"\n"), signature, pinned), "signature_invalid"),
        "field added": (
            (rfc8785.dumps(document | {"note": "x"}) + b"\n", signature, pinned),
            "signature_invalid",
        ),
        "trusted comment changed": (
            (data, signature.replace("runtime-manifest", "x"), pinned),
            "signature_invalid",
        ),
        "signature truncated to two lines": ((data, first + sig_line, pinned), "signature_malformed"),
        "signature line cut short": (
            (data, first + sig_line[:40] + "\n" + trusted + global_line, pinned),
            "signature_malformed",
        ),
        "global signature cut short": (
            (data, first + sig_line + trusted + global_line[:20], pinned),
            "signature_malformed",
        ),
        "empty signature": ((data, "", pinned), "signature_malformed"),
        "unpinned key": ((data, signature, [SecretKey.generate().public_key]), "signature_key_not_pinned"),
        "nothing pinned": ((data, signature, []), "no_pinned_keys"),
        "unknown field, signed": (signed_as_is(canonical[:-1] + b',"note":"x"}'), "manifest_unknown_field"),
        "unknown nested field, signed": (signed_as_is(nested), "manifest_unknown_field"),
        "float, signed": (signed_as_is(float_state), "manifest_float"),
        "integer over 2^53, signed": (signed_as_is(huge_id), "manifest_integer_too_large"),
        "duplicate key, signed": (signed_as_is(b'{"product":"x",' + canonical[1:]), "manifest_duplicate_key"),
    }
    results = {name: refusal(*case) for name, (case, _) in table.items()}
    assert results == {name: code for name, (_, code) in table.items()}


def test_a_state_migration_is_built_parsed_and_schema_valid(
    tmp_path: Path, validator: Draft202012Validator
) -> None:
    """`state_migration` (a major migration, docs/updater.md): built from `state_schema_from`
    below this tree's schema, read back by the one parser, accepted by the JSON Schema."""
    manifest = build(tmp_path, state_schema_from=STATE_SCHEMA - 1)
    assert manifest.state_migration == StateMigration(STATE_SCHEMA - 1)
    document = manifest.to_dict()
    assert document["state_migration"] == {"state_schema_from": STATE_SCHEMA - 1}
    assert RuntimeManifest.from_bytes(manifest.to_bytes()) == manifest
    assert _schema_accepts(validator, document)
    # The tree's own schema declares no step; a contract migration from the step's schema fits it.
    assert build(tmp_path, state_schema_from=STATE_SCHEMA).state_migration is None
    both = build(
        tmp_path, state_schema_from=STATE_SCHEMA - 1, migrate_from=contract_identity(CURRENT_EPOCH - 1)
    )
    assert both.contract_migration is not None
    assert both.contract_migration.state_schema_from == STATE_SCHEMA - 1


@pytest.mark.parametrize("value", [STATE_SCHEMA + 1, 0, -1])
def test_a_state_migration_that_does_not_move_forward_is_not_built(tmp_path: Path, value: int) -> None:
    with pytest.raises(ManifestError) as caught:
        build(tmp_path, state_schema_from=value)
    assert caught.value.code == "state_migration_invalid"


def test_a_parsed_state_migration_must_start_below_the_state_schema(
    tmp_path: Path, validator: Draft202012Validator
) -> None:
    document = build(tmp_path).to_dict()
    document["state_migration"] = {"state_schema_from": STATE_SCHEMA}
    with pytest.raises(ManifestError) as caught:
        RuntimeManifest.from_bytes(json.dumps(document).encode())
    assert (caught.value.code, caught.value.field) == ("manifest_value", "state_migration.state_schema_from")
    document["state_migration"] = {"state_schema_from": 1, "steps": [2]}
    with pytest.raises(ManifestError) as caught:
        RuntimeManifest.from_bytes(json.dumps(document).encode())
    assert (caught.value.code, caught.value.field) == ("manifest_unknown_field", "state_migration.steps")
    assert not _schema_accepts(validator, document)
