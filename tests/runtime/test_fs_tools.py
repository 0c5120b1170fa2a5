"""The fs tools against real trees: an attack table, then each tool's behaviour and caps.

Every attack asserts the exact refusal code AND that the whole tmp tree (files, contents, modes,
mtimes, symlinks, .git internals) is unchanged. Nothing is mocked: real Git repositories, real
symlinks, real FIFOs, /dev/zero and /dev/null, a real 2 GiB sparse file.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import resource
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary import Offload, Policy, Root, RootCandidate, RootSet, SmallWork
from herdr_mcp.runtime.grep.query import GREP_LINE_MAX_BYTES, GrepEngine, glob_match
from herdr_mcp.runtime.tools.arguments import catalog_arguments, prepared
from herdr_mcp.runtime.tools.fs import access, editing, image, patching, placement, reading
from tests.support.git_trees import git, make_repo, snapshot

Result = TypeVar("Result")


def parsed(function: Callable[..., Result]) -> Callable[..., Result]:
    """The fs tool `function` called as the dispatcher calls it: with its arguments bounded,
    validated against the frozen catalog and given the catalog's defaults (`prepared`)."""
    tool = f"herdr_{function.__name__}"

    def call(roots: RootSet, policy: Policy, args: dict[str, Any], **options: Any) -> Result:
        return function(roots, policy, prepared(tool, args), **options)

    return call


fs_read, fs_list, fs_grep = parsed(reading.fs_read), parsed(reading.fs_list), parsed(reading.fs_grep)
fs_edit, fs_write, fs_patch = parsed(editing.fs_edit), parsed(editing.fs_write), parsed(patching.fs_patch)
fs_image = parsed(image.fs_image)

# Both engines always run: the test command installs ripgrep, and without it the rg cases fail
# (engine_unavailable) rather than being skipped.
ENGINES = ["python", "rg"]


@dataclass(frozen=True)
class World:
    """tmp/x/repo (managed) beside tmp/x/repo2, tmp/x/outside, tmp/x/ops (operational), a fake home."""

    tmp: Path
    home: Path
    repo: Path
    busy: Path
    ops: Path
    outside: Path
    roots: RootSet
    policy: Policy

    def rootset(self, *candidates: RootCandidate) -> RootSet:
        return RootSet.build(candidates, home=self.home)


@pytest.fixture
def world(tmp_path: Path) -> World:
    tmp = Path(os.path.realpath(tmp_path))
    home = tmp / "home" / "me"
    home.mkdir(parents=True)
    (home / "notes.txt").write_text("private\n")
    (tmp / "alias").symlink_to(home)
    base = tmp / "x"
    repo = make_repo(
        base / "repo",
        {
            "a.txt": "alpha\nbeta\n",
            "sub/b.txt": "b\n",
            "dup.txt": "x\nx\n",
            "dirty.txt": "clean\n",
            ".env": "TOKEN=1\n",
            "id_rsa": "KEY\n",
            "x.pem": "PEM\n",
            ".ssh/config": "Host *\n",
        },
    )
    (repo / "bad.txt").write_bytes(b"ok\n\xff\xfe\n")
    git(repo, "add", "bad.txt")
    git(repo, "commit", "-q", "-m", "bad")
    (repo / "dirty.txt").write_text("edited\n")
    (repo / "untracked.txt").write_text("new\n")
    (repo / "link_file").symlink_to("../outside/target.txt")
    (repo / "link_dir").symlink_to("../outside")
    (repo / "in_link").symlink_to("a.txt")
    (repo / "zero_link").symlink_to("/dev/zero")
    os.mkfifo(repo / "fifo")
    (base / "repo2").mkdir()
    (base / "repo2" / "victim.txt").write_text("victim\n")
    outside = base / "outside"
    outside.mkdir()
    (outside / "target.txt").write_text("target\n")
    ops = base / "ops"
    ops.mkdir()
    (ops / "o.txt").write_text("o\n")
    busy = make_repo(base / "busy", {"b.txt": "b\n"})
    roots = RootSet.build([RootCandidate(repo, "managed"), RootCandidate(ops, "operational")], home=home)
    return World(tmp, home, repo, busy, ops, outside, roots, Policy())


def _patch(*body: str) -> str:
    return "\n".join(["*** Begin Patch", *body, "*** End Patch"]) + "\n"


Attack = Callable[[World], object]


def read(path: str | Callable[[World], str], **extra: Any) -> Attack:
    return lambda w: fs_read(w.roots, w.policy, {"path": path(w) if callable(path) else path, **extra})


def write(path: str | Callable[[World], str], **extra: Any) -> Attack:
    args = {"content": "evil\n", **extra}
    return lambda w: fs_write(w.roots, w.policy, {"path": path(w) if callable(path) else path, **args})


def edit(path: str | Callable[[World], str], old: str = "alpha", **extra: Any) -> Attack:
    return lambda w: fs_edit(
        w.roots,
        w.policy,
        {"path": path(w) if callable(path) else path, "old_string": old, "new_string": "evil", **extra},
    )


def patch(*body: str, root: Callable[[World], Path] = lambda w: w.repo, **extra: Any) -> Attack:
    return lambda w: fs_patch(w.roots, w.policy, {"root": str(root(w)), "patch": _patch(*body), **extra})


def with_roots(make: Callable[[World], RootSet], attack: Attack) -> Attack:
    return lambda w: attack(World(w.tmp, w.home, w.repo, w.busy, w.ops, w.outside, make(w), w.policy))


def with_policy(policy: Policy | Callable[[World], Policy], attack: Attack) -> Attack:
    def run(w: World) -> object:
        chosen = policy(w) if callable(policy) else policy
        return attack(World(w.tmp, w.home, w.repo, w.busy, w.ops, w.outside, w.roots, chosen))

    return run


def dev_roots(w: World) -> RootSet:
    return w.rootset(RootCandidate("/dev", "operational"))


def busy_roots(w: World) -> RootSet:
    return w.rootset(RootCandidate(w.busy, "managed", busy=True))


READ_ONLY = Policy(read_only=True)
UPDATE_A = ("*** Update File: a.txt", "@@", "-alpha", "+patched")
# 18 directories named with 120 two-byte characters: 2,184 characters (within the schema's cap of
# 4096, which counts characters) but 4,344 bytes, over PATH_MAX (4096 on Linux, 1024 on macOS).
DEEP_PATH = "/".join(["é" * 120] * 18) + "/f.txt"

ATTACKS = [
    pytest.param(read("../repo2/victim.txt"), "path_outside_root", id="dotdot-escape-read"),
    pytest.param(write("sub/../../outside/new.txt"), "path_outside_root", id="dotdot-escape-write"),
    pytest.param(read(lambda w: str(w.outside / "target.txt")), "path_outside_root", id="absolute-outside"),
    pytest.param(read("/etc/passwd"), "path_outside_root", id="absolute-etc-passwd"),
    pytest.param(read("link_file"), "path_outside_root", id="symlink-file-out-read"),
    pytest.param(write("link_file", overwrite=True), "path_outside_root", id="symlink-file-out-write"),
    pytest.param(read("link_dir/target.txt"), "path_outside_root", id="symlink-dir-out-read"),
    pytest.param(write("link_dir/new.txt"), "path_outside_root", id="symlink-dir-out-write"),
    pytest.param(
        lambda w: fs_list(w.roots, w.policy, {"path": "link_dir"}),
        "path_outside_root",
        id="symlink-dir-out-list",
    ),
    pytest.param(
        lambda w: fs_grep(w.roots, w.policy, {"root": str(w.repo), "pattern": "t", "path": "link_dir"}),
        "path_outside_root",
        id="symlink-dir-out-grep",
    ),
    pytest.param(write("in_link", overwrite=True), "symlink_refused", id="symlink-inside-write"),
    pytest.param(edit("in_link"), "symlink_refused", id="symlink-inside-edit"),
    pytest.param(read("zero_link"), "path_outside_root", id="symlink-to-dev-zero"),
    pytest.param(
        read(lambda w: str(w.repo.parent / "repo2" / "victim.txt")), "path_outside_root", id="sibling-prefix"
    ),
    pytest.param(
        lambda w: fs_grep(w.roots, w.policy, {"root": str(w.repo.parent / "repo2"), "pattern": "v"}),
        "root_unknown",
        id="sibling-prefix-grep-root",
    ),
    pytest.param(
        with_roots(
            lambda w: w.rootset(RootCandidate(w.home, "operational")),
            read(lambda w: str(w.home / "notes.txt")),
        ),
        "path_outside_root",
        id="home-as-root",
    ),
    pytest.param(
        with_roots(
            lambda w: w.rootset(RootCandidate(w.home.parent, "operational")),
            read(lambda w: str(w.home / "notes.txt")),
        ),
        "path_outside_root",
        id="home-ancestor-as-root",
    ),
    pytest.param(
        with_roots(
            lambda w: w.rootset(RootCandidate(w.tmp / "alias", "managed")),
            read(lambda w: str(w.tmp / "alias/notes.txt")),
        ),
        "path_outside_root",
        id="home-through-symlink-alias",
    ),
    pytest.param(read(".env"), "secret_path", id="secret-env-read"),
    pytest.param(read("id_rsa"), "secret_path", id="secret-id-rsa-read"),
    pytest.param(read("x.pem"), "secret_path", id="secret-pem-read"),
    pytest.param(read(".ssh/config"), "secret_path", id="secret-ssh-config-read"),
    pytest.param(
        lambda w: fs_list(w.roots, w.policy, {"path": ".ssh"}),
        "secret_path",
        id="secret-ssh-dir-list",
    ),
    pytest.param(
        lambda w: fs_grep(w.roots, w.policy, {"root": str(w.repo), "pattern": "T", "path": ".env"}),
        "secret_path",
        id="secret-env-grep",
    ),
    pytest.param(
        lambda w: fs_image(w.roots, w.policy, {"path": "x.pem"}), "secret_path", id="secret-pem-image"
    ),
    pytest.param(write(".env.local"), "secret_path", id="secret-env-write"),
    pytest.param(edit(".env", old="TOKEN"), "secret_path", id="secret-env-edit"),
    pytest.param(patch("*** Add File: config/.env.production", "+X=1"), "secret_path", id="secret-patch-add"),
    pytest.param(read("fifo"), "special_file", id="fifo-read"),
    pytest.param(lambda w: fs_image(w.roots, w.policy, {"path": "fifo"}), "special_file", id="fifo-image"),
    pytest.param(edit("fifo"), "special_file", id="fifo-edit"),
    pytest.param(write("fifo", overwrite=True), "special_file", id="fifo-overwrite"),
    pytest.param(patch("*** Update File: fifo", "@@", "-x", "+y"), "special_file", id="fifo-patch"),
    pytest.param(lambda w: fs_list(w.roots, w.policy, {"path": "fifo"}), "not_a_directory", id="fifo-list"),
    pytest.param(with_roots(dev_roots, read("/dev/zero")), "special_file", id="dev-zero-read"),
    pytest.param(with_roots(dev_roots, read("/dev/null")), "special_file", id="dev-null-read"),
    pytest.param(
        with_roots(dev_roots, lambda w: fs_image(w.roots, w.policy, {"path": "/dev/zero"})),
        "special_file",
        id="dev-zero-image",
    ),
    pytest.param(read("bad.txt"), "not_utf8", id="invalid-utf8-read"),
    pytest.param(edit("bad.txt", old="ok"), "not_utf8", id="invalid-utf8-edit"),
    pytest.param(
        patch(*UPDATE_A, "*** Add File: ../outside/evil.txt", "+x"),
        "path_outside_root",
        id="patch-half-outside",
    ),
    pytest.param(
        patch(*UPDATE_A, "*** Add File: /tmp/evil.txt", "+x"), "path_invalid", id="patch-absolute-path"
    ),
    pytest.param(
        patch(*UPDATE_A, "*** Delete File: link_dir/target.txt"), "path_outside_root", id="patch-symlink-out"
    ),
    pytest.param(
        patch(*UPDATE_A, "*** Update File: in_link", "@@", "-beta", "+x"),
        "symlink_refused",
        id="patch-symlink-in",
    ),
    pytest.param(
        patch(*UPDATE_A, "*** Update File: sub/b.txt", "@@", "-nope", "+x"),
        "patch_conflict",
        id="patch-conflict",
    ),
    pytest.param(
        patch("*** Update File: sub/b.txt", "@@", "-nope", "+x", "*** Delete File: ../repo2/victim.txt"),
        "path_outside_root",
        id="patch-paths-checked-before-contents",
    ),
    pytest.param(patch(*UPDATE_A, "*** Add File: dup.txt", "+x"), "file_exists", id="patch-add-existing"),
    pytest.param(
        patch(*UPDATE_A, "*** Update File: sub/b.txt", "*** Move to: dup.txt", "@@", "-b", "+c"),
        "file_exists",
        id="patch-move-onto-existing",
    ),
    pytest.param(patch(*UPDATE_A, "*** Delete File: a.txt"), "patch_invalid", id="patch-same-file-twice"),
    pytest.param(
        patch("*** Add File: p", "+x", "*** Add File: p/q.txt", "+y"),
        "patch_invalid",
        id="patch-file-and-directory",
    ),
    pytest.param(
        patch(*UPDATE_A, "*** Add File: .git/hooks/pre-commit", "+x"), "path_invalid", id="patch-into-git"
    ),
    pytest.param(patch("*** Update File: a.txt", "garbage"), "patch_invalid", id="patch-garbage"),
    pytest.param(with_policy(READ_ONLY, write("new.txt")), "read_only_mode", id="read-only-write"),
    pytest.param(with_policy(READ_ONLY, edit("a.txt")), "read_only_mode", id="read-only-edit"),
    pytest.param(
        with_policy(READ_ONLY, patch(*UPDATE_A, dry_run=True)), "read_only_mode", id="read-only-patch"
    ),
    pytest.param(
        with_policy(lambda w: Policy(write_roots=(w.repo / "sub",)), edit("a.txt")),
        "write_root_not_allowed",
        id="outside-write-roots",
    ),
    pytest.param(
        write(lambda w: str(w.ops / "new.txt")), "operational_root_mutation_unsupported", id="ops-write"
    ),
    pytest.param(
        edit(lambda w: str(w.ops / "o.txt"), old="o"), "operational_root_mutation_unsupported", id="ops-edit"
    ),
    pytest.param(
        patch("*** Add File: n.txt", "+x", root=lambda w: w.ops),
        "operational_root_mutation_unsupported",
        id="ops-patch",
    ),
    pytest.param(edit("dirty.txt", old="edited"), "dirty_file_unconfirmed", id="dirty-edit"),
    pytest.param(write("untracked.txt", overwrite=True), "dirty_file_unconfirmed", id="untracked-overwrite"),
    pytest.param(patch("*** Delete File: dirty.txt"), "dirty_file_unconfirmed", id="dirty-patch-delete"),
    pytest.param(
        with_roots(busy_roots, edit(lambda w: str(w.busy / "b.txt"), old="b", confirm_dirty=True)),
        "project_busy_unconfirmed",
        id="busy-edit",
    ),
    pytest.param(
        with_roots(busy_roots, patch("*** Add File: n.txt", "+x", root=lambda w: w.busy)),
        "project_busy_unconfirmed",
        id="busy-patch",
    ),
    pytest.param(read("a.txt\0.png"), "path_invalid", id="nul-byte"),
    pytest.param(
        with_roots(
            lambda w: w.rootset(RootCandidate(w.repo, "managed"), RootCandidate(w.busy, "managed")),
            read("a.txt"),
        ),
        "path_ambiguous",
        id="relative-with-two-managed-roots",
    ),
    pytest.param(write("n" * 256), "name_too_long", id="name-over-name-max-write"),
    pytest.param(write("é" * 128), "name_too_long", id="name-over-name-max-in-bytes-write"),
    pytest.param(edit("é" * 128), "name_too_long", id="name-over-name-max-in-bytes-edit"),
    pytest.param(
        patch(*UPDATE_A, "*** Add File: sub/" + "é" * 128, "+x"),
        "name_too_long",
        id="name-over-name-max-patch",
    ),
    pytest.param(write(DEEP_PATH), "path_too_long", id="path-over-path-max-write"),
    pytest.param(
        patch("*** Add File: fresh/ok.txt", "+ok", f"*** Add File: {DEEP_PATH}", "+x"),
        "path_too_long",
        id="path-over-path-max-patch",
    ),
    pytest.param(
        patch("*** Add File: fresh/ok.txt", "+ok", f"*** Add File: {DEEP_PATH}", "+x", dry_run=True),
        "path_too_long",
        id="path-over-path-max-patch-dry-run",
    ),
    pytest.param(write(".GIT/hooks/pre-commit"), "path_invalid", id="write-into-git-other-case"),
    pytest.param(
        patch(*UPDATE_A, "*** Add File: .Git/hooks/pre-commit", "+x"),
        "path_invalid",
        id="patch-into-git-other-case",
    ),
    pytest.param(write("a.txt/.", overwrite=True), "not_a_directory", id="write-file-dot"),
    pytest.param(write("a.txt/", overwrite=True), "not_a_directory", id="write-file-slash"),
    pytest.param(write("a.txt/../dup.txt", overwrite=True), "not_a_directory", id="write-file-dotdot"),
    pytest.param(edit("a.txt/."), "not_a_directory", id="edit-file-dot"),
    pytest.param(read("a.txt/."), "not_a_directory", id="read-file-dot"),
    pytest.param(
        patch("*** Update File: a.txt/.", "@@", "-alpha", "+x"), "not_a_directory", id="patch-file-dot"
    ),
    pytest.param(write("brand-new/"), "path_invalid", id="write-new-directory-syntax"),
    pytest.param(write("a.txt"), "file_exists", id="write-without-overwrite"),
    pytest.param(write("nodir/x.txt"), "not_found", id="write-missing-parent"),
    pytest.param(write(".git/hooks/pre-commit"), "path_invalid", id="write-into-git"),
    pytest.param(edit("a.txt", old="gamma"), "edit_not_found", id="edit-not-found"),
    pytest.param(edit("dup.txt", old="x"), "edit_not_unique", id="edit-not-unique"),
    pytest.param(edit("missing.txt"), "not_found", id="edit-missing"),
    pytest.param(read("sub"), "not_a_file", id="read-directory"),
    pytest.param(lambda w: fs_list(w.roots, w.policy, {"path": "a.txt"}), "not_a_directory", id="list-file"),
    pytest.param(
        lambda w: fs_image(w.roots, w.policy, {"path": "a.txt"}), "unsupported_image", id="image-text"
    ),
    pytest.param(
        lambda w: fs_grep(w.roots, w.policy, {"root": str(w.repo / "sub"), "pattern": "b"}),
        "root_unknown",
        id="grep-root-subdir",
    ),
    pytest.param(
        lambda w: fs_grep(
            w.roots, w.policy, {"root": str(w.repo), "pattern": "a(", "regex": True}, engine="python"
        ),
        "pattern_invalid",
        id="grep-bad-regex-python",
    ),
    pytest.param(
        lambda w: fs_grep(
            w.roots, w.policy, {"root": str(w.repo), "pattern": "a(", "regex": True}, engine="rg"
        ),
        "pattern_invalid",
        id="grep-bad-regex-rg",
    ),
]


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("attack", "code"), ATTACKS)
def test_attack_is_refused_and_changes_nothing(world: World, attack: Attack, code: str) -> None:
    before = snapshot(world.tmp)
    with pytest.raises(ToolError) as caught:
        attack(world)
    assert caught.value.code == code, caught.value.message
    assert caught.value.message.endswith(".")
    assert snapshot(world.tmp) == before


def test_home_and_its_aliases_are_excluded_with_a_reason(world: World) -> None:
    roots = world.rootset(
        RootCandidate(world.home, "operational"),
        RootCandidate(world.home.parent, "operational"),
        RootCandidate(world.tmp / "alias", "managed"),
    )
    assert roots.roots == ()
    assert {item.code for item in roots.excluded} == {"home_or_ancestor"}


# --- Confirmations let the same mutations through -------------------------------------------


def test_confirmations_allow_dirty_and_busy_mutations(world: World) -> None:
    result = fs_edit(
        world.roots,
        world.policy,
        {"path": "dirty.txt", "old_string": "edited", "new_string": "again", "confirm_dirty": True},
    )
    assert result["start_line"] == 1
    assert (world.repo / "dirty.txt").read_text() == "again\n"
    busy = busy_roots(world)
    fs_edit(busy, world.policy, {"path": "b.txt", "old_string": "b", "new_string": "c", "confirm_busy": True})
    assert (world.busy / "b.txt").read_text() == "c\n"


# --- fs_read ------------------------------------------------------------------------------------


@pytest.fixture
def text_root(tmp_path: Path) -> tuple[RootSet, Path]:
    root = Path(os.path.realpath(tmp_path)) / "r"
    root.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    return RootSet.build([RootCandidate(root, "operational")], home=home), root


def _read(roots: RootSet, path: str, **args: Any) -> dict[str, Any]:
    return fs_read(roots, Policy(), {"path": path, **args})


def test_read_line_ranges_and_pagination(text_root: tuple[RootSet, Path]) -> None:
    roots, root = text_root
    lines = [f"line {n}\n" for n in range(1, 11)]
    (root / "t.txt").write_text("".join(lines))
    whole = _read(roots, "t.txt")
    assert (whole["content"], whole["total_lines"], whole["total_bytes"]) == ("".join(lines), 10, 71)
    assert (whole["start_line"], whole["end_line"], whole["truncated"], whole["next_start_line"]) == (
        1,
        10,
        False,
        None,
    )
    middle = _read(roots, "t.txt", start_line=3, end_line=5)
    assert (middle["content"], middle["end_line"], middle["next_start_line"]) == (
        "".join(lines[2:5]),
        5,
        None,
    )
    pages, start = [], 1
    while start is not None:
        page = _read(roots, "t.txt", start_line=start, max_bytes=15)
        assert len(page["content"].encode()) <= 15
        pages.append(page["content"])
        start = page["next_start_line"]
    assert "".join(pages) == "".join(lines)
    beyond = _read(roots, "t.txt", start_line=11)
    assert (beyond["content"], beyond["end_line"], beyond["truncated"]) == ("", None, False)


def test_read_never_cuts_a_character_and_clips_only_overlong_lines(text_root: tuple[RootSet, Path]) -> None:
    roots, root = text_root
    (root / "u.txt").write_text("é" * 10 + "\nnext\n")
    page = _read(roots, "u.txt", max_bytes=5)
    assert (page["content"], page["line_clipped"], page["truncated"], page["next_start_line"]) == (
        "éé",
        True,
        True,
        2,
    )
    assert _read(roots, "u.txt", start_line=2)["content"] == "next\n"
    (root / "n.txt").write_text("a\nb")
    page = _read(roots, "n.txt")
    assert (page["content"], page["total_lines"], page["end_line"]) == ("a\nb", 2, 2)
    (root / "e.txt").write_text("")
    page = _read(roots, "e.txt")
    assert (page["content"], page["total_lines"], page["end_line"]) == ("", 0, None)


@pytest.mark.parametrize("offset", [5, access.READ_CHUNK_BYTES - 1, access.READ_CHUNK_BYTES + 7])
def test_not_utf8_names_the_byte_offset(text_root: tuple[RootSet, Path], offset: int) -> None:
    roots, root = text_root
    # A valid two-byte character straddles the chunk boundary; the invalid byte sits at `offset`.
    prefix = b"a" * (access.READ_CHUNK_BYTES - 1) + "é".encode() if offset > access.READ_CHUNK_BYTES else b""
    data = prefix + b"b" * (offset - len(prefix)) + b"\xff" + b"\n"
    (root / "bad.txt").write_bytes(data)
    with pytest.raises(ToolError) as caught:
        _read(roots, "bad.txt")
    assert (caught.value.code, caught.value.details["offset"]) == ("not_utf8", offset)
    assert str(offset) in caught.value.message


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


def _peak_growth_bytes(action: Callable[[], object]) -> int:
    """Peak RSS growth during `action`: VmHWM after resetting it (Linux), else ru_maxrss."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        baseline = _status_kib("VmRSS")
        action()
        return (_status_kib("VmHWM") - baseline) * 1024
    except OSError:
        scale = 1 if sys.platform == "darwin" else 1024
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
        action()
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale - before


def test_a_2_gib_sparse_file_is_read_with_flat_memory(text_root: tuple[RootSet, Path]) -> None:
    roots, root = text_root
    with open(root / "huge.bin", "wb") as handle:
        handle.truncate(2 << 30)
    results: list[dict[str, Any]] = []
    growth = _peak_growth_bytes(lambda: results.append(_read(roots, "huge.bin")))
    page = results[0]
    assert (page["total_bytes"], page["total_lines"], page["truncated"]) == (2 << 30, None, True)
    read_default = catalog_arguments().schemas["herdr_fs_read"]["properties"]["max_bytes"]["default"]
    assert page["content"] == "\0" * read_default
    assert growth < 64 << 20, f"peak RSS grew by {growth} bytes"


@pytest.mark.slow
def test_seeking_far_into_a_huge_file_is_capped(text_root: tuple[RootSet, Path]) -> None:
    roots, root = text_root
    with open(root / "huge.bin", "wb") as handle:
        handle.truncate(reading.READ_SEEK_SCAN_LIMIT + (1 << 20))
    errors: list[ToolError] = []

    def seek() -> None:
        with pytest.raises(ToolError) as caught:
            _read(roots, "huge.bin", start_line=2)
        errors.append(caught.value)

    growth = _peak_growth_bytes(seek)
    assert errors[0].code == "too_large"
    assert growth < 64 << 20, f"peak RSS grew by {growth} bytes"


def test_total_lines_is_null_above_the_scan_limit(text_root: tuple[RootSet, Path]) -> None:
    roots, root = text_root
    with open(root / "big.txt", "wb") as handle:
        handle.write(b"first\nsecond\n")
        handle.truncate(reading.TOTAL_LINES_SCAN_LIMIT + 1)
    page = _read(roots, "big.txt", end_line=2)
    assert (page["content"], page["total_lines"], page["total_bytes"]) == (
        "first\nsecond\n",
        None,
        reading.TOTAL_LINES_SCAN_LIMIT + 1,
    )


# --- fs_list ------------------------------------------------------------------------------------


@pytest.fixture
def listing(text_root: tuple[RootSet, Path]) -> tuple[RootSet, Path]:
    roots, root = text_root
    for name in (
        "a.py",
        "b.txt",
        "pkg/c.py",
        "pkg/deep/d.py",
        "pkg/.env",
        ".git/HEAD",
        ".ssh/id",
        "z/id_rsa",
    ):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")
    (root / "pkg_link").symlink_to("pkg")
    os.mkfifo(root / "pipe")
    return roots, root


def _list(roots: RootSet, **args: Any) -> dict[str, Any]:
    return fs_list(roots, Policy(), {"path": ".", **args})


def test_list_flat_and_recursive(listing: tuple[RootSet, Path]) -> None:
    roots, _ = listing
    flat = _list(roots)
    assert [(e["path"], e["type"]) for e in flat["entries"]] == [
        (".git", "dir"),
        ("a.py", "file"),
        ("b.txt", "file"),
        ("pipe", "other"),
        ("pkg", "dir"),
        ("pkg_link", "symlink"),
        ("z", "dir"),
    ]
    assert (flat["hidden_secret_entries"], flat["truncated"]) == (1, False)
    assert flat["entries"][1]["size"] == 1
    deep = _list(roots, recursive=True)
    paths = [e["path"] for e in deep["entries"]]
    assert paths == [
        ".git",
        "a.py",
        "b.txt",
        "pipe",
        "pkg",
        "pkg/c.py",
        "pkg/deep",
        "pkg/deep/d.py",
        "pkg_link",
        "z",
    ]
    assert deep["hidden_secret_entries"] == 3


def test_list_glob_and_cap(listing: tuple[RootSet, Path]) -> None:
    roots, _ = listing
    assert [e["path"] for e in _list(roots, recursive=True, glob="*.py")["entries"]] == [
        "a.py",
        "pkg/c.py",
        "pkg/deep/d.py",
    ]
    assert [e["path"] for e in _list(roots, recursive=True, glob="pkg/**/*.py")["entries"]] == [
        "pkg/c.py",
        "pkg/deep/d.py",
    ]
    assert [e["path"] for e in _list(roots, recursive=True, glob="pkg/*")["entries"]] == [
        "pkg/c.py",
        "pkg/deep",
    ]
    capped = _list(roots, recursive=True, glob="**/*.py", max_entries=2)
    assert ([e["path"] for e in capped["entries"]], capped["truncated"]) == (["a.py", "pkg/c.py"], True)
    sub = fs_list(roots, Policy(), {"path": "pkg"})
    assert [e["path"] for e in sub["entries"]] == ["c.py", "deep"]


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("*.py", "a/b/c.py", True),
        ("a/*.py", "a/b/c.py", False),
        ("a/**/*.py", "a/c.py", True),
        ("a/**/*.py", "a/b/c/d.py", True),
        ("**", "x/y", True),
        ("[!a]?.txt", "bc.txt", True),
        ("[!a]?.txt", "ac.txt", False),
        ("src/[ab].rs", "src/b.rs", True),
    ],
)
def test_glob_match(pattern: str, path: str, expected: bool) -> None:
    assert glob_match(pattern, path) is expected


# --- fs_grep ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def grep_tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[RootSet, Path]:
    base = Path(os.path.realpath(tmp_path_factory.mktemp("grep")))
    root = base / "tree"
    files = {
        "a.py": "import os\nneedle = 1\nNEEDLE = 2\n",
        "b.txt": "no match here\n" * 3 + "needle at the end",
        "sub/c.py": "def needle():\n    return 'needle needle'\n",
        "sub/deeper/d.txt": "Needle\r\nneedle\r\n",
        ".hidden/h.txt": "needle hidden\n",
        "ignored.log": "needle in a file .gitignore excludes: skipped (issue 23)\n",
        ".gitignore": "*.log\n",
        "-dash.txt": "--needle-- option-like\n",
        "bad.txt": "needle \udcff\n",
        ".env": "needle=secret\n",
        "secrets.yaml": "needle: secret\n",
        "keys/server.pem": "needle\n",
        ".git/config": "needle in git\n",
        ".Git/HEAD": "needle in .git on a case-insensitive disk\n",
        "long.txt": "needle " + "x" * 5000 + "\n",
    }
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode("utf-8", "surrogateescape"))
    (root / "binary.bin").write_bytes(b"\0\0needle\n")
    (root / "link.py").symlink_to("a.py")
    (root / "sub_link").symlink_to("sub")
    os.mkfifo(root / "pipe")
    home = base / "home"
    home.mkdir()
    return RootSet.build([RootCandidate(root, "operational")], home=home), root


def _grep(roots: RootSet, root: Path, engine: GrepEngine, **args: Any) -> dict[str, Any]:
    return fs_grep(roots, Policy(), {"root": str(root), "pattern": "needle", **args}, engine=engine)


GREP_VARIANTS = [
    pytest.param({}, id="literal"),
    pytest.param({"case_insensitive": True}, id="case-insensitive"),
    pytest.param({"pattern": "^needle", "regex": True}, id="regex-anchor"),
    pytest.param({"pattern": r"needle\(\)|return", "regex": True}, id="regex-alternation"),
    pytest.param({"pattern": "--needle--"}, id="pattern-like-an-option"),
    pytest.param({"glob": "*.py"}, id="glob-basename"),
    pytest.param({"glob": "sub/**/*.txt"}, id="glob-path"),
    pytest.param({"path": "sub"}, id="subdirectory"),
    pytest.param({"path": "sub/c.py"}, id="single-file"),
    pytest.param({"path": "binary.bin"}, id="single-binary-file"),
    pytest.param({"max_matches": 3}, id="max-matches"),
    pytest.param({"max_bytes": 40}, id="max-bytes"),
]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("variant", GREP_VARIANTS)
def test_rg_and_python_agree(grep_tree: tuple[RootSet, Path], variant: dict[str, Any]) -> None:
    roots, root = grep_tree
    by_rg = _grep(roots, root, "rg", **variant)
    by_python = _grep(roots, root, "python", **variant)
    assert (by_rg["engine"], by_python["engine"]) == ("rg", "python")
    assert by_rg["matches"] == by_python["matches"]
    assert by_rg["truncated"] == by_python["truncated"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("engine", ENGINES)
def test_grep_skips_what_it_must_and_caps(grep_tree: tuple[RootSet, Path], engine: GrepEngine) -> None:
    roots, root = grep_tree
    result = _grep(roots, root, engine, max_matches=1000)
    paths = sorted({match["path"] for match in result["matches"]})
    assert paths == sorted(
        [
            "-dash.txt",
            ".hidden/h.txt",
            "a.py",
            "b.txt",
            "bad.txt",
            "long.txt",
            "sub/c.py",
            "sub/deeper/d.txt",
        ]
    )
    assert {"path": "sub/deeper/d.txt", "line": 2, "text": "needle"} in result["matches"]
    assert {"path": "b.txt", "line": 4, "text": "needle at the end"} in result["matches"]
    assert {"path": "bad.txt", "line": 1, "text": "needle \ufffd"} in result["matches"]
    long_line = next(m for m in result["matches"] if m["path"] == "long.txt")
    assert len(long_line["text"]) == GREP_LINE_MAX_BYTES
    capped = _grep(roots, root, engine, max_matches=2)
    assert (len(capped["matches"]), capped["truncated"]) == (2, True)
    tiny = _grep(roots, root, engine, max_bytes=5)
    assert (tiny["matches"], tiny["truncated"]) == ([], True)


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_paths_stay_relative_to_the_named_root_across_nested_roots(
    tmp_path: Path, engine: GrepEngine
) -> None:
    outer = Path(os.path.realpath(tmp_path)) / "outer"
    (outer / "inner" / "pkg").mkdir(parents=True)
    (outer / "inner" / "pkg" / "m.py").write_text("needle\n")
    roots = RootSet.build(
        [RootCandidate(outer, "operational"), RootCandidate(outer / "inner", "operational")],
        home=tmp_path / "home",
    )
    for path in ("inner", "inner/pkg/m.py"):
        result = _grep(roots, outer, engine, path=path)
        assert result["path"] == path
        assert result["matches"] == [{"path": "inner/pkg/m.py", "line": 1, "text": "needle"}]


@pytest.fixture
def slow_tree(tmp_path: Path) -> tuple[RootSet, Path]:
    """One line that makes a backtracking engine run for ages, beside many ordinary files."""
    root = Path(os.path.realpath(tmp_path)) / "slow"
    (root / "many").mkdir(parents=True)
    (root / "big.txt").write_text("a" * 100_000 + "b\n")
    for index in range(300):
        (root / "many" / f"{index}.txt").write_text("a" * 1000 + "\n")
    return RootSet.build([RootCandidate(root, "operational")], home=tmp_path / "home"), root


@pytest.mark.parametrize("engine", ENGINES)
def test_grep_ends_at_its_deadline_with_a_timeout_code(
    slow_tree: tuple[RootSet, Path], engine: GrepEngine
) -> None:
    # Found: without rg, `(a+)+$` on one 100,000-character line never returned and held the GIL,
    # so no other thread of the runtime (its event loop included) ran again.
    roots, root = slow_tree
    deadline = 2.0 if engine == "python" else 0.001
    ticks: list[float] = [time.monotonic()]
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.01):
            ticks.append(time.monotonic())

    ticker = threading.Thread(target=tick)
    ticker.start()
    started = time.monotonic()
    try:
        with pytest.raises(ToolError) as caught:
            fs_grep(
                roots,
                Policy(),
                {"root": str(root), "pattern": "(a+)+$", "regex": True},
                engine=engine,
                timeout_s=deadline,
            )
    finally:
        stop.set()
        ticker.join()
    elapsed = time.monotonic() - started
    ticks.append(time.monotonic())
    assert caught.value.code == "grep_timeout"
    assert caught.value.details["timeout_s"] == deadline
    assert caught.value.message.endswith(".")
    assert deadline <= elapsed < deadline + 8
    assert max(b - a for a, b in itertools.pairwise(ticks)) < 2.0


def test_list_never_descends_into_git_in_another_case(tmp_path: Path) -> None:
    root = Path(os.path.realpath(tmp_path)) / "r"
    (root / ".GIT" / "objects").mkdir(parents=True)
    (root / "a.txt").write_text("a\n")
    roots = RootSet.build([RootCandidate(root, "operational")], home=tmp_path / "home")
    listed = fs_list(roots, Policy(), {"path": ".", "recursive": True})
    assert [e["path"] for e in listed["entries"]] == [".GIT", "a.txt"]


# --- fs_image -----------------------------------------------------------------------------------


def _riff(chunk: bytes) -> bytes:
    return b"RIFF" + struct.pack("<I", len(chunk) + 4) + b"WEBP" + chunk


IMAGES = [
    pytest.param(
        b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dIHDR" + struct.pack(">II", 640, 480) + b"\x08\x06\0\0\0",
        "image/png",
        (640, 480),
        id="png",
    ),
    pytest.param(b"GIF89a" + struct.pack("<HH", 33, 17) + b"\0\0\0;", "image/gif", (33, 17), id="gif"),
    pytest.param(
        b"\xff\xd8"
        + b"\xff\xe0"
        + struct.pack(">H", 16)
        + b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0"
        + b"\xff\xff\xc2"
        + struct.pack(">HBHHB", 11, 8, 300, 200, 1)
        + b"\x01\x11\x00",
        "image/jpeg",
        (200, 300),
        id="jpeg-progressive-with-fill-byte",
    ),
    pytest.param(
        _riff(b"VP8 " + struct.pack("<I", 10) + b"\x00\x00\x00\x9d\x01\x2a" + struct.pack("<HH", 120, 90)),
        "image/webp",
        (120, 90),
        id="webp-lossy",
    ),
    pytest.param(
        _riff(b"VP8L" + struct.pack("<I", 5) + b"\x2f" + struct.pack("<I", (99 - 1) | ((77 - 1) << 14))),
        "image/webp",
        (99, 77),
        id="webp-lossless",
    ),
    pytest.param(
        _riff(
            b"VP8X"
            + struct.pack("<I", 10)
            + b"\0\0\0\0"
            + (1999).to_bytes(3, "little")
            + (2999).to_bytes(3, "little")
        ),
        "image/webp",
        (2000, 3000),
        id="webp-extended",
    ),
]


@pytest.mark.parametrize(("data", "mime", "size"), IMAGES)
def test_images_by_magic_bytes(
    text_root: tuple[RootSet, Path], data: bytes, mime: str, size: tuple[int, int]
) -> None:
    roots, root = text_root
    (root / "picture.bin").write_bytes(data)
    image = fs_image(roots, Policy(), {"path": "picture.bin"})
    assert (image.data, image.mime_type) == (data, mime)
    assert image.info == {
        "path": str(root / "picture.bin"),
        "root": str(root),
        "size": len(data),
        "width": size[0],
        "height": size[1],
        "mime_type": mime,
    }


def test_images_above_max_bytes_or_truncated_are_refused(text_root: tuple[RootSet, Path]) -> None:
    roots, root = text_root
    (root / "p.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dIHDR" + struct.pack(">II", 1, 1))
    with pytest.raises(ToolError) as caught:
        fs_image(roots, Policy(), {"path": "p.png", "max_bytes": 10})
    assert caught.value.code == "too_large"
    (root / "cut.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0")
    with pytest.raises(ToolError) as caught:
        fs_image(roots, Policy(), {"path": "cut.png"})
    assert caught.value.code == "unsupported_image"


# --- fs_write / fs_edit / fs_patch --------------------------------------------------------------


def test_write_creates_and_overwrites_keeping_the_mode(world: World) -> None:
    created = fs_write(world.roots, world.policy, {"path": "sub/new.txt", "content": "héllo\n"})
    assert (created["created"], created["bytes_written"]) == (True, 7)
    assert (world.repo / "sub/new.txt").read_text() == "héllo\n"
    (world.repo / "a.txt").chmod(0o600)
    replaced = fs_write(
        world.roots,
        world.policy,
        {"path": "a.txt", "content": "new\n", "overwrite": True, "confirm_dirty": True},
    )
    assert replaced["created"] is False
    assert ((world.repo / "a.txt").read_text(), (world.repo / "a.txt").stat().st_mode & 0o777) == (
        "new\n",
        0o600,
    )


def test_patch_dry_run_then_apply(world: World) -> None:
    text = _patch(
        "*** Add File: pkg/new/mod.py",
        "+print('hi')",
        "*** Update File: a.txt",
        "@@",
        " alpha",
        "-beta",
        "+gamma",
        "+delta",
        "*** Update File: sub/b.txt",
        "*** Move to: sub/moved.txt",
        "@@",
        "-b",
        "+moved",
        "*** Delete File: dup.txt",
    )
    expected_files = [
        {"path": "pkg/new/mod.py", "action": "add", "added_lines": 1, "removed_lines": 0},
        {"path": "a.txt", "action": "update", "added_lines": 2, "removed_lines": 1},
        {"path": "sub/b.txt", "action": "move", "added_lines": 1, "removed_lines": 1, "to": "sub/moved.txt"},
        {"path": "dup.txt", "action": "delete", "added_lines": 0, "removed_lines": 2},
    ]
    before = snapshot(world.tmp)
    dry = fs_patch(world.roots, world.policy, {"root": str(world.repo), "patch": text, "dry_run": True})
    assert (dry["dry_run"], dry["files"]) == (True, expected_files)
    assert snapshot(world.tmp) == before
    done = fs_patch(world.roots, world.policy, {"root": str(world.repo), "patch": text})
    assert (done["dry_run"], done["files"]) == (False, expected_files)
    assert (world.repo / "pkg/new/mod.py").read_text() == "print('hi')\n"
    assert (world.repo / "a.txt").read_text() == "alpha\ngamma\ndelta\n"
    assert (world.repo / "sub/moved.txt").read_text() == "moved\n"
    assert not (world.repo / "sub/b.txt").exists()
    assert not (world.repo / "dup.txt").exists()
    assert not [p for p in world.repo.rglob("*.herdr-tmp")]


def test_patch_deletes_binary_files(world: World) -> None:
    (world.repo / "blob.bin").write_bytes(b"\0\xff\n\0")
    git(world.repo, "add", "blob.bin")
    git(world.repo, "commit", "-q", "-m", "blob")
    done = fs_patch(
        world.roots, world.policy, {"root": str(world.repo), "patch": _patch("*** Delete File: blob.bin")}
    )
    assert done["files"] == [{"path": "blob.bin", "action": "delete", "added_lines": 0, "removed_lines": 2}]
    assert not (world.repo / "blob.bin").exists()


def _contents(top: Path) -> dict[str, tuple[object, ...]]:
    """The snapshot without timestamps: a rollback restores content, not mtimes."""
    return {path: (kind, size, detail) for path, (kind, _, size, _, detail) in snapshot(top).items()}


def test_a_failure_midway_rolls_back_what_was_written(world: World) -> None:
    # Every check passes; the third file fails only while it is written (the process may not write
    # files above 64 KiB: EFBIG, as on a full disk), after a.txt and new directories were written.
    text = _patch(
        *UPDATE_A,
        "*** Add File: fresh/dir/ok.txt",
        "+ok",
        "*** Add File: fresh/other/deep/big.txt",
        *["+" + "x" * 1023] * 128,
    )
    before = _contents(world.tmp)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, hard))
    try:
        with pytest.raises(ToolError) as caught:
            fs_patch(world.roots, world.policy, {"root": str(world.repo), "patch": text})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert caught.value.code == "io_error"
    assert caught.value.message.endswith("The files already written were restored.")
    assert _contents(world.tmp) == before


def test_names_at_name_max_bytes_are_written(world: World) -> None:
    # 85 three-byte characters: 255 bytes, the most a name may hold; the temp file's name must be
    # cut by bytes, not characters, to fit beside it.
    name = "€" * 85
    fs_write(world.roots, world.policy, {"path": name, "content": "w\n"})
    text = _patch(f"*** Add File: sub/{name}", "+p")
    fs_patch(world.roots, world.policy, {"root": str(world.repo), "patch": text})
    assert ((world.repo / name).read_text(), (world.repo / "sub" / name).read_text()) == ("w\n", "p\n")
    assert not [p for p in world.repo.rglob("*.herdr-tmp")]


def test_patch_on_a_dirty_file_needs_confirmation(world: World) -> None:
    text = _patch("*** Update File: dirty.txt", "@@", "-edited", "+confirmed")
    args = {"root": str(world.repo), "patch": text}
    with pytest.raises(ToolError) as caught:
        fs_patch(world.roots, world.policy, args)
    assert caught.value.code == "dirty_file_unconfirmed"
    fs_patch(world.roots, world.policy, {**args, "confirm_dirty": True})
    assert (world.repo / "dirty.txt").read_text() == "confirmed\n"


# --- Where a read runs: on the event loop when small and on a local disk (tools/fs/placement) --

MOUNTINFO = (
    "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
    "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
    "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"
    "40 27 0:50 / /home/u/my\\040repo rw shared:7 - nfs4 server:/x rw\n"
    "not a mountinfo line\n"
)


def test_the_mount_table_is_read_with_its_escapes() -> None:
    assert placement.read_mounts(MOUNTINFO) == [
        ("/", "ext4"),
        ("/proc", "proc"),
        ("/mnt/parent", "ext3"),
        ("/home/u/my repo", "nfs4"),
    ]


@pytest.mark.parametrize(
    ("mounts", "local"),
    [
        ([("/", "ext4")], True),
        ([("/", "ext4"), ("/work/repo/cache", "tmpfs")], True),
        ([("/", "nfs"), ("/work", "xfs")], True),  # the root is on the deepest mount holding it
        ([("/", "ext4"), ("/work/repo2", "nfs")], True),  # a sibling, not inside
        ([("/", "ext4"), ("/work/repo/vendor", "nfs")], False),  # something else mounted inside
        ([("/", "ext4"), ("/work", "fuse.sshfs")], False),
        ([("/", "ext4"), ("/work", "zfs")], False),  # a directory's size there counts entries
        ([("/", "ext4"), ("/work", "ext4"), ("/work", "nfs")], False),  # the later mount covers it
        ([], False),
    ],
)
def test_roots_are_local_only_on_local_disk_filesystems(mounts: list[tuple[str, str]], local: bool) -> None:
    roots = RootSet((Root(Path("/work/repo"), "managed"), Root(Path("/srv/ops"), "operational")))
    assert placement.roots_on_local_disks(roots, [*mounts, ("/srv", "ext4")] if mounts else []) is local


def test_the_verdict_is_kept_for_a_root_set_and_read_again_later(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("1 0 1:1 / / rw - ext4 /dev/x rw\n")
    now = [0.0]
    where = placement.Placement(mountinfo, clock=lambda: now[0])
    roots = RootSet((Root(Path("/work/repo"), "managed"),))
    assert where.local(roots)
    mountinfo.write_text("1 0 1:1 / / rw - nfs server:/ rw\n")
    assert where.local(roots)  # the same roots, within MOUNTS_RECHECK_S
    assert not where.local(RootSet((Root(Path("/work/repo"), "managed"),)))  # another root set
    mountinfo.write_text("1 0 1:1 / / rw - xfs /dev/x rw\n")
    now[0] += placement.MOUNTS_RECHECK_S
    assert where.local(roots)
    mountinfo.unlink()
    now[0] += placement.MOUNTS_RECHECK_S
    assert not where.local(roots)  # no mount table (macOS): every read in a worker thread


def test_small_work_refuses_larger_files_and_directories_before_opening_them(
    listing: tuple[RootSet, Path],
) -> None:
    roots, root = listing
    (root / "big.txt").write_text("y\n" * 600)
    with SmallWork(1000, 1 << 20):
        assert _read(roots, "a.py")["content"] == "x"
        with pytest.raises(Offload):
            _read(roots, "big.txt")
        assert _list(roots)["entries"]
    with SmallWork(1 << 20, 0), pytest.raises(Offload):
        _list(roots)
    # Outside the block nothing is bounded.
    assert _read(roots, "big.txt")["total_lines"] == 600


def test_small_reads_run_on_the_event_loop_and_larger_ones_in_a_thread(
    text_root: tuple[RootSet, Path],
) -> None:
    roots, root = text_root
    (root / "small.txt").write_text("s\n" * 100)
    (root / "large.txt").write_text("l\n" * (placement.INLINE_READ_MAX_BYTES // 2 + 1))
    threads: list[int] = []

    def traced(roots: RootSet, policy: Policy, args: dict[str, Any]) -> dict[str, Any]:
        threads.append(threading.get_ident())
        return fs_read(roots, policy, args)

    async def read(where: placement.Placement, name: str) -> dict[str, Any]:
        return await where.run(traced, roots, Policy(), {"path": name})

    loop_thread = threading.get_ident()
    local = placement.Placement(clock=lambda: 0.0)
    local._roots, local._checked, local._local = roots, 0.0, True  # as on a local disk
    assert asyncio.run(read(local, "small.txt")) == _read(roots, "small.txt")
    assert threads == [loop_thread]
    threads.clear()
    # Larger than the bound: refused before it was opened, then read whole in a worker thread.
    assert asyncio.run(read(local, "large.txt")) == _read(roots, "large.txt")
    assert threads[0] == loop_thread and len(threads) == 2 and threads[1] != loop_thread
    threads.clear()
    remote = placement.Placement(clock=lambda: 0.0)
    remote._roots, remote._checked, remote._local = roots, 0.0, False  # as on NFS
    assert asyncio.run(read(remote, "small.txt")) == _read(roots, "small.txt")
    assert len(threads) == 1 and threads[0] != loop_thread
