"""The boundary: secret rules, root admission, path resolution, mutation gates, atomic writes.

Everything runs against real directories, real Git repositories and real symlinks in tmp dirs.
The repositories and the tree snapshot come from tests/support/git_trees.py (test_fs_tools.py uses them too).
"""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary import (
    FileIdentity,
    Policy,
    ResolvedPath,
    Root,
    RootCandidate,
    RootSet,
    atomic_write,
    check_acknowledged,
    check_target,
    dirty_paths,
    is_secret_path,
    is_within,
    normalize_lexical,
    remove_directories,
    remove_file,
    root_mutations,
)
from herdr_mcp.runtime.boundary.paths import directory_prefixes
from herdr_mcp.text import parse_name
from tests.support.git_trees import git, make_repo, snapshot

# --- Secret rules -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        ".ssh/config",
        "home/.ssh/known_hosts",
        ".gnupg/pubring.kbx",
        ".aws/credentials",
        ".docker/config.json",
        "x/.docker/config.json",
        ".netrc",
        ".pgpass",
        ".npmrc",
        ".pypirc",
        ".git-credentials",
        ".env",
        ".env.local",
        ".env.production",
        "app/.ENV",
        ".env.d/db",
        "id_rsa",
        "keys/id_ed25519",
        "id_ecdsa",
        "id_dsa",
        "server.pem",
        "tls/server.KEY",
        "cert.p12",
        "cert.pfx",
        "vault.kdbx",
        "api.secret",
        "github.token",
        "credentials.json",
        "credentials",
        "gcp-credentials.json",
        "secrets.yaml",
        "secrets.yml",
        "secret.txt",
        "client_secret.json",
        "token",
        ".token",
        "github_token.txt",
        "tokens.json",
        "secrets/db.conf",
    ],
)
def test_secret_paths(path: str) -> None:
    assert is_secret_path(path)


@pytest.mark.parametrize(
    "path",
    [
        ".env.example",
        ".env.sample",
        ".env.template",
        "id_rsa.pub",
        "keys/id_ed25519.pub",
        "src/credentials.py",
        "tokenizer.rs",
        "secret_sauce.md",
        "docker/config.json",
        "environment.txt",
        "README.md",
        "src/keyboard.py",
        "monkey.c",
        ".",
    ],
)
def test_ordinary_paths(path: str) -> None:
    assert not is_secret_path(path)


# --- Roots --------------------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A fake $HOME two levels down, so it has ancestors inside tmp_path."""
    path = tmp_path / "users" / "me"
    path.mkdir(parents=True)
    return path


def test_home_its_ancestors_and_aliases_are_never_roots(tmp_path: Path, home: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(home)
    project = home / "project"
    project.mkdir()
    roots = RootSet.build(
        [
            RootCandidate(home, "operational"),
            RootCandidate(home.parent, "operational"),
            RootCandidate(tmp_path, "operational"),
            RootCandidate(alias, "operational"),
            RootCandidate(str(home) + "/./", "managed"),
            RootCandidate(project, "managed"),
        ],
        home=home,
    )
    assert [root.path for root in roots.roots] == [project.resolve()]
    assert [item.code for item in roots.excluded] == ["home_or_ancestor"] * 5
    assert all(item.reason for item in roots.excluded)


def test_home_reached_through_a_symlinked_home_path_is_caught(tmp_path: Path) -> None:
    real_home = tmp_path / "real" / "me"
    real_home.mkdir(parents=True)
    linked_home = tmp_path / "me-link"
    linked_home.symlink_to(real_home)
    roots = RootSet.build(
        [RootCandidate(real_home, "managed"), RootCandidate(real_home.parent, "managed")], home=linked_home
    )
    assert roots.roots == ()


@pytest.mark.parametrize(
    ("make", "code"),
    [
        pytest.param(lambda t: str(t / "missing"), "not_found", id="missing"),
        pytest.param(lambda t: str(t / "file.txt"), "not_a_directory", id="file"),
        pytest.param(lambda t: "relative/dir", "path_invalid", id="relative"),
        pytest.param(lambda t: str(t / "dir") + "\0", "path_invalid", id="nul"),
        pytest.param(lambda t: str(t / ".ssh"), "secret_path", id="secret-dir"),
    ],
)
def test_unusable_candidates_are_excluded_with_a_code(
    tmp_path: Path, home: Path, make: object, code: str
) -> None:
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / ".ssh").mkdir()
    assert callable(make)
    roots = RootSet.build([RootCandidate(make(tmp_path), "operational")], home=home)
    assert roots.roots == ()
    assert [item.code for item in roots.excluded] == [code]


def test_duplicates_merge_busy_workspaces_and_managed_wins(tmp_path: Path, home: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (tmp_path / "p-link").symlink_to(project)
    roots = RootSet.build(
        [
            RootCandidate(tmp_path / "p-link", "operational", busy=True, workspace_ids=frozenset({"w1"})),
            RootCandidate(project, "managed", busy=False, workspace_ids=frozenset({"w2"})),
        ],
        home=home,
    )
    assert roots.roots == (Root(project.resolve(), "managed", True, frozenset({"w1", "w2"})),)


def test_root_for_needs_an_exact_root(tmp_path: Path, home: Path) -> None:
    project = tmp_path / "p"
    (project / "sub").mkdir(parents=True)
    (tmp_path / "p-link").symlink_to(project)
    roots = RootSet.build([RootCandidate(project, "managed")], home=home)
    assert roots.root_for(str(project)).path == project.resolve()
    assert roots.root_for(str(project) + "/").path == project.resolve()
    assert roots.root_for(str(tmp_path / "p-link")).path == project.resolve()
    for wrong in (str(project / "sub"), "p", str(tmp_path), str(project) + "\0"):
        with pytest.raises(ToolError) as caught:
            roots.root_for(wrong)
        assert caught.value.code == "root_unknown"


# --- Resolution ---------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path, home: Path) -> tuple[RootSet, Path]:
    """/x/repo (managed root) next to /x/repo2 (not a root) and /x/outside, with symlinks."""
    base = tmp_path / "x"
    repo = base / "repo"
    (repo / "sub").mkdir(parents=True)
    (repo / "a.txt").write_text("a\n")
    (base / "repo2").mkdir()
    (base / "repo2" / "victim.txt").write_text("v\n")
    (base / "outside").mkdir()
    (base / "outside" / "target.txt").write_text("t\n")
    (repo / "link_file").symlink_to("../outside/target.txt")
    (repo / "link_dir").symlink_to("../outside")
    (repo / "in_link").symlink_to("a.txt")
    (repo / "sub_link").symlink_to("sub")
    return RootSet.build([RootCandidate(repo, "managed")], home=home), repo.resolve()


@pytest.mark.parametrize(
    ("path", "code"),
    [
        pytest.param("../repo2/victim.txt", "path_outside_root", id="dotdot-sibling"),
        pytest.param("sub/../../outside/target.txt", "path_outside_root", id="dotdot-deep"),
        pytest.param("/etc/passwd", "path_outside_root", id="absolute-outside"),
        pytest.param("{base}/repo2/victim.txt", "path_outside_root", id="sibling-prefix"),
        pytest.param("link_file", "path_outside_root", id="symlink-file-out"),
        pytest.param("link_dir/target.txt", "path_outside_root", id="symlink-dir-out"),
        pytest.param("link_dir/new.txt", "path_outside_root", id="symlink-dir-out-new-file"),
        pytest.param("a\0b", "path_invalid", id="nul"),
        pytest.param("", "path_invalid", id="empty"),
        pytest.param("missing.txt", "not_found", id="missing"),
        pytest.param("a.txt/below", "not_a_directory", id="file-as-parent"),
        pytest.param("a.txt/.", "not_a_directory", id="file-dot"),
        pytest.param("a.txt/", "not_a_directory", id="file-slash"),
        pytest.param("a.txt/./", "not_a_directory", id="file-dot-slash"),
        pytest.param("a.txt/../sub", "not_a_directory", id="file-dotdot"),
        pytest.param("n" * 256, "name_too_long", id="name-over-name-max"),
        pytest.param("sub/" + "é" * 128 + "/x", "name_too_long", id="name-over-name-max-in-bytes"),
        pytest.param("/".join(["é" * 120] * 18), "path_too_long", id="path-over-path-max-in-bytes"),
    ],
)
def test_resolve_refusals(tree: tuple[RootSet, Path], path: str, code: str) -> None:
    roots, repo = tree
    with pytest.raises(ToolError) as caught:
        roots.resolve(path.format(base=repo.parent), for_write=code != "not_found")
    assert caught.value.code == code


def test_resolve_inside(tree: tuple[RootSet, Path]) -> None:
    roots, repo = tree
    plain = roots.resolve("sub/../a.txt", for_write=False)
    assert (plain.path, plain.relative, plain.symlinked, plain.exists) == (
        repo / "a.txt",
        "a.txt",
        False,
        True,
    )
    assert roots.resolve(str(repo), for_write=False).relative == "."
    linked = roots.resolve("in_link", for_write=False)
    assert (linked.path, linked.relative, linked.lexical_relative, linked.symlinked) == (
        repo / "a.txt",
        "a.txt",
        "in_link",
        True,
    )
    new = roots.resolve("sub_link/n/m/new.txt", for_write=True)
    assert (new.path, new.exists, new.missing_parents, new.symlinked) == (
        repo / "sub/n/m/new.txt",
        False,
        2,
        True,
    )


def test_relative_paths_need_a_single_managed_root(tmp_path: Path, home: Path) -> None:
    one, two, ops = tmp_path / "one", tmp_path / "two", tmp_path / "ops"
    for path in (one, two, ops):
        path.mkdir()
    mixed = RootSet.build([RootCandidate(one, "managed"), RootCandidate(ops, "operational")], home=home)
    assert mixed.resolve("f", for_write=True).path == one.resolve() / "f"
    only_ops = RootSet.build([RootCandidate(ops, "operational")], home=home)
    assert only_ops.resolve("f", for_write=True).path == ops.resolve() / "f"
    two_managed = RootSet.build([RootCandidate(one, "managed"), RootCandidate(two, "managed")], home=home)
    with pytest.raises(ToolError) as caught:
        two_managed.resolve("f", for_write=True)
    assert caught.value.code == "path_ambiguous"
    assert two_managed.resolve(str(two / "f"), for_write=True).root.path == two.resolve()
    with pytest.raises(ToolError) as caught:
        RootSet.build([], home=home).resolve("f", for_write=True)
    assert caught.value.code == "path_outside_root"


def test_the_deepest_root_owns_a_path(tmp_path: Path, home: Path) -> None:
    outer = tmp_path / "outer"
    inner = outer / "inner"
    inner.mkdir(parents=True)
    roots = RootSet.build(
        [RootCandidate(outer, "managed"), RootCandidate(inner, "managed", busy=True)], home=home
    )
    resolved = roots.resolve(str(inner / "f"), for_write=True)
    assert (resolved.root.path, resolved.relative, resolved.root.busy) == (inner.resolve(), "f", True)
    assert roots.resolve(str(outer / "f"), for_write=True).root.path == outer.resolve()


def test_normalize_lexical_and_is_within() -> None:
    assert normalize_lexical("/a/./b/../../../c//d", base=None) == Path("/c/d")
    assert normalize_lexical("../x", base=Path("/r/s")) == Path("/r/x")
    assert is_within(Path("/x/repo/a"), Path("/x/repo"))
    assert is_within(Path("/x/repo"), Path("/x/repo"))
    assert not is_within(Path("/x/repo2"), Path("/x/repo"))


# --- Property: whatever the path, a resolved path really lives inside its root -----------------

_SYMLINKS = ("in_dir", "out_dir", "f_in", "f_out", "dangling", "loop")


@pytest.fixture(scope="module")
def maze(tmp_path_factory: pytest.TempPathFactory) -> tuple[RootSet, Path]:
    base = Path(os.path.realpath(tmp_path_factory.mktemp("maze")))
    root = base / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "f.txt").write_text("f")
    (base / "root2").mkdir()
    (base / "outside").mkdir()
    (base / "outside" / "s.txt").write_text("s")
    (root / "a" / "in_dir").symlink_to("b")
    (root / "out_dir").symlink_to("../outside")
    (root / "f_in").symlink_to("a/f.txt")
    (root / "f_out").symlink_to("../outside/s.txt")
    (root / "dangling").symlink_to("nowhere")
    (root / "loop").symlink_to("loop")
    home = base / "home"
    home.mkdir()
    return RootSet.build([RootCandidate(root, "managed")], home=home), root


_SEGMENT = st.sampled_from(
    ["a", "b", "..", ".", "", "f.txt", "new", "root", "root2", "outside", "s.txt", *_SYMLINKS]
)


@settings(max_examples=400, deadline=None)
@given(
    segments=st.lists(_SEGMENT, max_size=7),
    anchor=st.sampled_from(["relative", "root", "base"]),
    write=st.booleans(),
)
def test_resolved_paths_never_leave_their_root(
    maze: tuple[RootSet, Path], segments: list[str], anchor: str, write: bool
) -> None:
    roots, root = maze
    tail = "/".join(segments)
    path = {"relative": tail, "root": f"{root}/{tail}", "base": f"{root.parent}/{tail}"}[anchor]
    refusal: str | None = None
    try:
        resolved = roots.resolve(path, for_write=write)
    except ToolError as exc:
        refusal = exc.code
    if refusal is not None:
        assert refusal in {"path_outside_root", "path_invalid", "not_found", "not_a_directory"}
        return
    assert is_within(Path(os.path.realpath(resolved.path)), root)
    lexical = Path(posixpath.normpath(path if path.startswith("/") else f"{root}/{path}"))
    assert resolved.lexical == lexical
    if not set(segments) & set(_SYMLINKS):
        assert resolved.path == lexical
        assert not resolved.symlinked


def _reference_resolve(roots: RootSet, path: str, *, for_write: bool) -> tuple[Any, ...]:
    """RootSet.resolve as it was written with pathlib before issue 24 (the oracle of the text
    version): what it answers, as a tuple, or the refusal's code and message."""
    try:
        path = parse_name(path)
        if not path or "\0" in path:
            raise ToolError("path_invalid", "The path is empty or contains a NUL byte; pass a real path.")
        if path.startswith("/"):
            lexical = normalize_lexical(path, base=None)
            prefixes = directory_prefixes(path, base=None)
            base = None
        else:
            base = roots._default_root()
            lexical = normalize_lexical(path, base=base.path)
            prefixes = directory_prefixes(path, base=base.path)
        containing = [root for root in roots.roots if is_within(lexical, root.path)]
        if base is not None:
            containing = [root for root in containing if is_within(root.path, base.path)]
        if not containing:
            where = f"root {base.path}" if base is not None else "any root from herdr_inspect"
            raise ToolError(
                "path_outside_root", f"{path} is outside {where}; use a path inside a root.", path=path
            )
        owner = max(containing, key=lambda root: len(root.path.parts))
        if os.path.lexists(lexical):
            real, missing = Path(os.path.realpath(lexical)), 0
        else:
            names: list[str] = []
            ancestor = lexical
            while not os.path.lexists(ancestor):
                if ancestor == owner.path or ancestor == ancestor.parent:
                    raise ToolError(
                        "not_found", f"The root {owner.path} no longer exists; call herdr_inspect again."
                    )
                names.insert(0, ancestor.name)
                ancestor = ancestor.parent
            real_ancestor = Path(os.path.realpath(ancestor))
            if not os.path.isdir(real_ancestor):
                raise ToolError(
                    "not_a_directory",
                    f"{path}: {ancestor} exists but is not a directory; check the path.",
                    path=path,
                )
            real, missing = real_ancestor.joinpath(*names), len(names)
        if not is_within(real, owner.path):
            raise ToolError(
                "path_outside_root",
                f"{path} leads outside its root {owner.path} through a symlink; use a path inside the root.",
                path=path,
            )
        for prefix in prefixes:
            inside = is_within(prefix, owner.path) and is_within(Path(os.path.realpath(prefix)), owner.path)
            if inside and os.path.lexists(prefix) and not os.path.isdir(prefix):
                shown = "." if prefix == owner.path else prefix.relative_to(owner.path).as_posix()
                raise ToolError(
                    "not_a_directory",
                    f"{path}: {shown} is not a directory, yet the path "
                    "uses it as one; name the file without a trailing '/', '/.' or '/..'.",
                    path=path,
                )
        exists = missing == 0 and os.path.exists(real)
        if not exists and not for_write:
            raise ToolError(
                "not_found", f"{path} does not exist; check the path with herdr_fs_list.", path=path
            )
        relative = "." if real == owner.path else real.relative_to(owner.path).as_posix()
        return (owner, real, relative, lexical, real != lexical, exists, max(missing - 1, 0))
    except ToolError as exc:
        return (exc.code, exc.message)


@settings(max_examples=600, deadline=None)
@given(segments=st.lists(_SEGMENT, max_size=7), anchor=st.sampled_from(["relative", "root", "base"]))
def test_resolution_on_text_answers_as_the_pathlib_one_did(
    maze: tuple[RootSet, Path], segments: list[str], anchor: str
) -> None:
    roots, root = maze
    tail = "/".join(segments)
    path = {"relative": tail, "root": f"{root}/{tail}", "base": f"{root.parent}/{tail}"}[anchor]
    for write in (False, True):
        expected = _reference_resolve(roots, path, for_write=write)
        refusal: tuple[str, str] | None = None
        try:
            got = roots.resolve(path, for_write=write)
        except ToolError as exc:
            refusal = (exc.code, exc.message)
        if refusal is not None:
            assert refusal == expected, path
            continue
        if not write:
            answer = (
                got.root,
                got.path,
                got.relative,
                got.lexical,
                got.symlinked,
                got.exists,
                got.missing_parents,
            )
            assert answer == expected, path
        # The lstat the resolver keeps is the target's own, taken when no symlink was on the way.
        if got.status is not None:
            assert not got.symlinked
            assert got.status.st_ino == os.lstat(got.path).st_ino


# --- Gates --------------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = make_repo(
        tmp_path / "repo",
        {"clean.txt": "c\n", "mod.txt": "m\n", "staged.txt": "s\n", ".gitignore": "*.log\n"},
    )
    (path / "mod.txt").write_text("changed\n")
    (path / "staged.txt").write_text("changed\n")
    git(path, "add", "staged.txt")
    (path / "untracked.txt").write_text("u\n")
    (path / "debug.log").write_text("ignored\n")
    (path / "star*.txt").write_text("literal\n")
    return path


def test_dirty_paths(repo: Path) -> None:
    root = Root(repo, "managed")
    asked = ["clean.txt", "mod.txt", "staged.txt", "untracked.txt", "debug.log", "new.txt", "star*.txt"]
    assert dirty_paths(root, asked) == ["mod.txt", "staged.txt", "untracked.txt", "debug.log", "star*.txt"]


def test_dirty_paths_from_a_subdirectory_root(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "mono", {"pkg/a.txt": "a\n", "pkg/b.txt": "b\n", "a.txt": "top\n"})
    (repo / "pkg" / "a.txt").write_text("changed\n")
    (repo / "a.txt").write_text("changed\n")
    assert dirty_paths(Root(repo / "pkg", "managed"), ["a.txt", "b.txt"]) == ["a.txt"]


def test_dirty_paths_outside_git_reports_everything(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert dirty_paths(Root(plain.resolve(), "managed"), ["x"]) == ["x"]


def _target(roots: RootSet, path: str) -> ResolvedPath:
    return roots.resolve(path, for_write=True)


def test_gates_answer_in_their_fixed_order(tmp_path: Path, home: Path) -> None:
    managed = make_repo(tmp_path / "m", {"a.txt": "a\n", ".env": "S=1\n"})
    (managed / "link.txt").symlink_to("a.txt")
    (managed / "a.txt").write_text("dirty\n")
    ops = tmp_path / "ops"
    ops.mkdir()
    roots = RootSet.build(
        [RootCandidate(managed, "managed", busy=True), RootCandidate(ops, "operational")], home=home
    )
    elsewhere = Policy(write_roots=(tmp_path / "nowhere",))

    def all_gates(policy: Policy, target: ResolvedPath) -> None:
        check_target(policy, target)
        check_acknowledged(target.root, [target], confirm_busy=False, confirm_dirty=False)

    def first_refusal(policy: Policy, path: str) -> str:
        target = _target(roots, path)
        with pytest.raises(ToolError) as caught:
            all_gates(policy, target)
        return caught.value.code

    assert first_refusal(Policy(read_only=True, write_roots=()), str(ops / "x")) == "read_only_mode"
    assert first_refusal(elsewhere, str(ops / "x")) == "operational_root_mutation_unsupported"
    assert first_refusal(elsewhere, str(managed / ".env")) == "write_root_not_allowed"
    assert first_refusal(Policy(), str(managed / ".env")) == "secret_path"
    assert first_refusal(Policy(), str(managed / "link.txt")) == "symlink_refused"
    assert first_refusal(Policy(), str(managed / ".git" / "config")) == "path_invalid"
    assert first_refusal(Policy(), str(managed / "a.txt")) == "project_busy_unconfirmed"
    assert first_refusal(Policy(write_roots=(managed,)), str(managed / "a.txt")) == "project_busy_unconfirmed"
    target = _target(roots, str(managed / "a.txt"))
    with pytest.raises(ToolError) as caught:
        check_acknowledged(target.root, [target], confirm_busy=True, confirm_dirty=False)
    assert (caught.value.code, caught.value.details) == ("dirty_file_unconfirmed", {"paths": ["a.txt"]})
    check_acknowledged(target.root, [target], confirm_busy=True, confirm_dirty=True)


def test_root_mutations_says_what_the_gates_would_answer(tmp_path: Path) -> None:
    managed = Root(tmp_path / "m", "managed")
    ops = Root(tmp_path / "ops", "operational")
    inner = (managed.path / "docs",)
    assert root_mutations(Policy(), managed) == "allowed"
    assert root_mutations(Policy(read_only=True), managed) == "read_only_mode"
    assert root_mutations(Policy(read_only=True), ops) == "read_only_mode"
    assert root_mutations(Policy(), ops) == "operational_root_mutation_unsupported"
    assert root_mutations(Policy(write_roots=(tmp_path,)), managed) == "allowed"
    assert root_mutations(Policy(write_roots=inner), managed) == "allowed_in_write_roots"
    assert root_mutations(Policy(write_roots=(tmp_path / "elsewhere",)), managed) == "write_root_not_allowed"


# --- Atomic writes ------------------------------------------------------------------------------


@pytest.fixture
def plain_root(tmp_path: Path, home: Path) -> tuple[RootSet, Path]:
    path = tmp_path / "r"
    (path / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    return RootSet.build([RootCandidate(path, "managed")], home=home), path.resolve()


def _leftovers(directory: Path) -> list[str]:
    return [name for name in os.listdir(directory) if name.endswith(".herdr-tmp")]


def test_atomic_write_keeps_the_mode_and_leaves_no_temp_files(plain_root: tuple[RootSet, Path]) -> None:
    roots, root = plain_root
    existing = root / "sub" / "e.txt"
    existing.write_text("old")
    existing.chmod(0o640)
    atomic_write(_target(roots, "sub/e.txt"), b"new", expect=FileIdentity.of(existing.stat()))
    assert (existing.read_bytes(), stat.S_IMODE(existing.stat().st_mode)) == (b"new", 0o640)
    atomic_write(_target(roots, "sub/n.txt"), b"n", create_only=True)
    assert stat.S_IMODE((root / "sub" / "n.txt").stat().st_mode) == 0o644
    assert _leftovers(root / "sub") == []


def test_atomic_write_refuses_a_symlink_swapped_in_as_target(
    plain_root: tuple[RootSet, Path], tmp_path: Path
) -> None:
    roots, root = plain_root
    (root / "t.txt").write_text("t")
    target = _target(roots, "t.txt")
    victim = tmp_path / "outside" / "victim.txt"
    victim.write_text("keep")
    (root / "t.txt").unlink()
    (root / "t.txt").symlink_to(victim)
    with pytest.raises(ToolError) as caught:
        atomic_write(target, b"evil")
    assert caught.value.code == "symlink_refused"
    assert victim.read_text() == "keep"
    assert _leftovers(root) == []


def test_atomic_write_refuses_a_parent_swapped_for_a_symlink(
    plain_root: tuple[RootSet, Path], tmp_path: Path
) -> None:
    roots, root = plain_root
    target = _target(roots, "sub/new.txt")
    (root / "sub").rename(root / "sub-moved")
    (root / "sub").symlink_to(tmp_path / "outside")
    with pytest.raises(ToolError) as caught:
        atomic_write(target, b"evil")
    assert caught.value.code in {"symlink_refused", "not_a_directory"}
    assert os.listdir(tmp_path / "outside") == []


def test_atomic_write_refuses_concurrent_changes(plain_root: tuple[RootSet, Path]) -> None:
    roots, root = plain_root
    (root / "c.txt").write_text("v1")
    identity = FileIdentity.of((root / "c.txt").stat())
    (root / "c.txt").write_text("v2 by someone else")
    with pytest.raises(ToolError) as caught:
        atomic_write(_target(roots, "c.txt"), b"mine", expect=identity)
    assert caught.value.code == "file_changed"
    target = _target(roots, "late.txt")
    (root / "late.txt").write_text("appeared")
    with pytest.raises(ToolError) as caught:
        atomic_write(target, b"mine", create_only=True)
    assert caught.value.code == "file_exists"
    assert ((root / "c.txt").read_text(), (root / "late.txt").read_text()) == (
        "v2 by someone else",
        "appeared",
    )
    assert _leftovers(root) == []


def test_atomic_write_creates_parents_and_they_can_be_removed(plain_root: tuple[RootSet, Path]) -> None:
    roots, root = plain_root
    target = _target(roots, "d1/d2/f.txt")
    created = atomic_write(target, b"x", create_parents=True)
    assert created == [root / "d1", root / "d1" / "d2"]
    remove_file(_target(roots, "d1/d2/f.txt"))
    assert remove_directories(target.root, created) == []
    assert not (root / "d1").exists()


def test_a_failed_write_removes_the_directories_it_created_past_path_max(
    plain_root: tuple[RootSet, Path],
) -> None:
    # Found: a write whose path exceeded PATH_MAX created every directory (each opened relative to
    # its parent), failed, then could not remove them by their over-long absolute paths.
    roots, root = plain_root
    relative = "/".join(["d" * 200] * 21) + "/f.txt"
    target = ResolvedPath(
        root=roots.roots[0],
        path=root / relative,
        relative=relative,
        lexical=root / relative,
        symlinked=False,
        exists=False,
        missing_parents=21,
    )
    before = snapshot(root)
    with pytest.raises(ToolError) as caught:
        atomic_write(target, b"x", create_parents=True, create_only=True)
    assert caught.value.code == "io_error"
    assert snapshot(root) == before


def test_removing_created_directories_reports_what_stays(plain_root: tuple[RootSet, Path]) -> None:
    roots, root = plain_root
    target = _target(roots, "d1/d2/f.txt")
    created = atomic_write(target, b"x", create_parents=True)
    assert remove_directories(target.root, created) == ["d1/d2", "d1"]
    assert (root / "d1" / "d2" / "f.txt").read_bytes() == b"x"


def test_remove_file_refuses_symlinks_and_directories(plain_root: tuple[RootSet, Path]) -> None:
    roots, root = plain_root
    (root / "f.txt").write_text("f")
    target = _target(roots, "f.txt")
    (root / "f.txt").unlink()
    (root / "f.txt").symlink_to("sub")
    with pytest.raises(ToolError) as caught:
        remove_file(target)
    assert caught.value.code == "symlink_refused"
    with pytest.raises(ToolError) as caught:
        remove_file(_target(roots, "sub"))
    assert caught.value.code == "not_a_file"
    assert (root / "f.txt").is_symlink()
