"""The mutation gate knows a Git directory by what it is, not by its name (issue 23, defect 3).

Found: in a worktree whose `.git` is a file saying `gitdir: ./.bare`, herdr_fs_write and
herdr_fs_edit changed `.bare/config` (a core.fsmonitor command) and `.bare/hooks/pre-commit`,
which the user's next `git status` ran. Every layout here is made by real Git, and a real runtime
(served in process, the simulator as Herdr) is driven through the `mcp` client: fs_write,
fs_edit and fs_patch (add, update, delete, move) into each Git directory are refused with
`path_invalid` naming it, nothing on disk changes, and ordinary files of the same roots are still
written. The last tests call the gate directly to show its fallback without Git.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary import Policy, RootCandidate, RootSet, check_target, git_dirs
from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.git_trees import git, make_repo, snapshot
from tests.support.runtime_harness import ToolSession, in_process_session
from tests.support.sim_helpers import short_tmp_dir

FSMONITOR = "[core]\n\tfsmonitor = echo herdr-test-fsmonitor\n"


@dataclass
class Layouts:
    session: ToolSession
    worktree: Path  # `.git` is a file: `gitdir: ./.bare`
    nested: Path  # a plain repo holding a repo made with --separate-git-dir=store
    superproject: Path  # a repo with a submodule `sub`
    later: Path  # a plain repo; a Git directory appears in it while the runtime runs

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.session.call(name, arguments)


def _worktree_layout(path: Path) -> Path:
    """The bare-repository worktree layout: `.bare` holds the repository, `.git` points at it."""
    path.mkdir()
    git(path, "init", "-q", "--bare", ".bare")
    (path / ".git").write_text("gitdir: ./.bare\n")
    git(path, "config", "core.bare", "false")
    (path / "a.txt").write_text("a\n")
    git(path, "add", "a.txt")
    git(path, "commit", "-q", "-m", "init")
    return Path(os.path.realpath(path))


@pytest.fixture(scope="module")
def layouts() -> Iterator[Layouts]:
    with short_tmp_dir() as tmp:
        worktree = _worktree_layout(tmp / "wt")
        nested = make_repo(tmp / "nested", {"a.txt": "a\n"})
        git(nested, "init", "-q", f"--separate-git-dir={nested / 'store'}", "inner")
        library = make_repo(tmp / "library", {"lib.txt": "lib\n"})
        superproject = make_repo(tmp / "super", {"a.txt": "a\n"})
        git(superproject, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "sub")
        git(superproject, "commit", "-q", "-m", "submodule")
        later = make_repo(tmp / "later", {"a.txt": "a\n"})
        roots = [worktree, nested, superproject, later]
        with (
            SimulatorThread(SimConfig.for_roots(roots), tmp / "herdr.sock"),
            in_process_session(tmp / "herdr.sock", tmp / "config") as session,
        ):
            yield Layouts(session, worktree, nested, superproject, later)


def _refused(answer: dict[str, Any], git_dir: Path) -> None:
    assert answer.get("error", {}).get("code") == "path_invalid", answer
    assert answer["error"].get("git_dir", str(git_dir)) == str(git_dir), answer


def _writes_into(layouts: Layouts, root: Path, existing: str, new: str) -> list[dict[str, Any]]:
    """Every mutation tool aimed at one existing and one new file inside a Git directory."""
    return [
        layouts.call(
            "herdr_fs_write",
            {"path": str(root / existing), "content": FSMONITOR, "overwrite": True, "confirm_dirty": True},
        ),
        layouts.call("herdr_fs_write", {"path": str(root / new), "content": "#!/bin/sh\ntouch /tmp/x\n"}),
        layouts.call(
            "herdr_fs_edit",
            {
                "path": str(root / existing),
                "old_string": "[core]",
                "new_string": FSMONITOR,
                "confirm_dirty": True,
            },
        ),
        layouts.call(
            "herdr_fs_patch",
            {
                "root": str(root),
                "patch": f"*** Begin Patch\n*** Add File: {new}\n+#!/bin/sh\n*** End Patch\n",
                "confirm_dirty": True,
            },
        ),
        layouts.call(
            "herdr_fs_patch",
            {"root": str(root), "patch": f"*** Begin Patch\n*** Delete File: {existing}\n*** End Patch\n"},
        ),
        layouts.call(
            "herdr_fs_patch",
            {
                "root": str(root),
                "patch": "*** Begin Patch\n*** Update File: a.txt\n*** Move to: "
                f"{new}\n@@\n-a\n+b\n*** End Patch\n",
                "confirm_dirty": True,
            },
        ),
    ]


def test_a_worktree_whose_git_file_points_at_bare_is_protected(layouts: Layouts) -> None:
    root = layouts.worktree
    before = snapshot(root)
    answers = _writes_into(layouts, root, ".bare/config", ".bare/hooks/pre-commit")
    for answer in answers:
        _refused(answer, root / ".bare")
    assert "is inside the Git directory" in answers[0]["error"]["message"]
    assert snapshot(root) == before
    ordinary = layouts.call("herdr_fs_write", {"path": str(root / "src.txt"), "content": "fine\n"})
    assert ordinary.get("created") is True, ordinary
    (root / "src.txt").unlink()


def test_a_nested_repository_with_a_separate_git_dir_is_protected(layouts: Layouts) -> None:
    root = layouts.nested
    assert (root / "inner" / ".git").is_file()
    before = snapshot(root)
    for answer in _writes_into(layouts, root, "store/config", "store/hooks/pre-commit"):
        _refused(answer, root / "store")
    assert snapshot(root) == before
    inside = layouts.call("herdr_fs_write", {"path": str(root / "inner" / "x.txt"), "content": "x\n"})
    assert inside.get("created") is True, inside
    (root / "inner" / "x.txt").unlink()


def test_a_submodule_and_its_git_dir_under_modules_are_protected(layouts: Layouts) -> None:
    root = layouts.superproject
    modules = root / ".git" / "modules" / "sub"
    assert (root / "sub" / ".git").read_text().startswith("gitdir:")
    before = snapshot(root)
    for relative in ("sub/.git", ".git/modules/sub/config", ".git/modules/sub/hooks/pre-commit"):
        answer = layouts.call(
            "herdr_fs_write",
            {"path": str(root / relative), "content": FSMONITOR, "overwrite": True, "confirm_dirty": True},
        )
        assert answer.get("error", {}).get("code") == "path_invalid", (relative, answer)
    assert snapshot(root) == before
    assert modules.is_dir()
    inside = layouts.call(
        "herdr_fs_write", {"path": str(root / "sub" / "new.txt"), "content": "x\n", "confirm_dirty": True}
    )
    assert inside.get("created") is True, inside
    (root / "sub" / "new.txt").unlink()


def test_a_git_dir_that_appears_while_the_runtime_runs_is_protected(layouts: Layouts) -> None:
    # Nothing may be cached: the same path is writable, then a Git directory, then refused.
    root = layouts.later
    (root / "hidden").mkdir()
    first = layouts.call("herdr_fs_write", {"path": str(root / "hidden" / "config"), "content": "plain\n"})
    assert first.get("created") is True, first
    (root / "hidden" / "config").unlink()
    git(root, "init", "-q", "--bare", "hidden")
    (root / "work").mkdir()
    (root / "work" / ".git").write_text("gitdir: ../hidden\n")
    before = snapshot(root)
    for answer in _writes_into(layouts, root, "hidden/config", "hidden/hooks/pre-commit"):
        _refused(answer, root / "hidden")
    assert snapshot(root) == before


def test_a_git_file_pointing_through_a_symlink_names_the_real_git_dir(layouts: Layouts) -> None:
    root = layouts.later
    git(root, "init", "-q", "--bare", "real-store")
    (root / "alias").symlink_to("real-store")
    (root / "linked").mkdir()
    (root / "linked" / ".git").write_text("gitdir: ../alias\n")
    answer = layouts.call(
        "herdr_fs_write",
        {"path": str(root / "real-store" / "config"), "content": FSMONITOR, "overwrite": True},
    )
    _refused(answer, root / "real-store")
    through_link = layouts.call(
        "herdr_fs_write", {"path": str(root / "alias" / "config"), "content": FSMONITOR, "overwrite": True}
    )
    assert through_link["error"]["code"] == "symlink_refused", through_link


@pytest.fixture
def implicit_bare_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's Git configuration says safe.bareRepository=explicit."""
    config = tmp_path / "gitconfig"
    config.write_text("[safe]\n\tbareRepository = explicit\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))


@pytest.mark.usefixtures("implicit_bare_refused")
def test_a_user_refusing_implicit_bare_repositories_still_gets_the_refusal(layouts: Layouts) -> None:
    # With safe.bareRepository=explicit Git will not discover `.bare` from inside it; the gate
    # overrides that for its question (and the structural check would catch it anyway).
    answer = layouts.call(
        "herdr_fs_write",
        {"path": str(layouts.worktree / ".bare" / "description"), "content": "x\n", "overwrite": True},
    )
    _refused(answer, layouts.worktree / ".bare")


# --- the gate itself, with Git and without -------------------------------------------------------


def _target(root: Path, relative: str) -> Any:
    roots = RootSet.build([RootCandidate(root, "managed")], home=root.parent / "nohome")
    return roots.resolve(str(root / relative), for_write=True)


@pytest.fixture
def bare_worktree() -> Iterator[Path]:
    with short_tmp_dir() as tmp:
        yield _worktree_layout(tmp / "wt")


def test_without_git_the_gate_reads_git_files_and_git_dirs_itself(
    bare_worktree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = bare_worktree
    git(root, "init", "-q", f"--separate-git-dir={root / 'store'}", "inner")
    git(root, "worktree", "add", "-q", "--detach", str(root / "linked"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert shutil.which("git") is None
    refused = {}
    private = ".bare/worktrees/linked"
    for relative in (".bare/config", ".bare/hooks/new", "store/config", f"{private}/HEAD"):
        with pytest.raises(ToolError) as caught:
            check_target(Policy(), _target(root, relative))
        refused[relative] = (caught.value.code, caught.value.details.get("git_dir"))
    assert refused == {
        ".bare/config": ("path_invalid", str(root / ".bare")),
        ".bare/hooks/new": ("path_invalid", str(root / ".bare")),
        "store/config": ("path_invalid", str(root / "store")),
        f"{private}/HEAD": ("path_invalid", str(root / private)),
    }
    check_target(Policy(), _target(root, "src/new.txt"))


def test_a_target_outside_any_git_dir_passes_with_git(bare_worktree: Path) -> None:
    for relative in ("a.txt", "new/deeper/file.txt", ".bare-not/config", "bare/config"):
        check_target(Policy(), _target(bare_worktree, relative))


@pytest.mark.usefixtures("implicit_bare_refused")
def test_git_itself_names_a_bare_git_dir_even_where_implicit_bare_repositories_are_refused(
    bare_worktree: Path,
) -> None:
    hooks = bare_worktree / ".bare" / "hooks"
    refused = subprocess.run(
        ["git", "-C", str(hooks), "rev-parse", "--git-dir"], capture_output=True, text=True
    )
    assert refused.returncode != 0 and "safe.bareRepository" in refused.stderr
    assert git_dirs._asked_of_git(hooks) == [bare_worktree / ".bare"] * 2


def test_a_target_outside_any_repository_is_not_refused(tmp_path: Path) -> None:
    # Git answers "not a git repository"; the ancestors hold no Git directory either.
    plain = Path(os.path.realpath(tmp_path)) / "plain"
    (plain / "sub").mkdir(parents=True)
    assert git_dirs._asked_of_git(plain / "sub") == []
    check_target(Policy(), _target(plain, "sub/file.txt"))
