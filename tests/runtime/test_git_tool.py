"""herdr_git against real repositories in temporary directories."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.tools import git as git_module
from herdr_mcp.runtime.tools.arguments import prepared
from herdr_mcp.runtime.tools.git import git_facts, git_toplevel, project_git_summary
from tests.support.processes import alive
from tests.support.waiting import wait_until


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No developer or system config, and no repository above the test directories.
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for name in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(name, "Test Author")
    for name in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(name, "test@example.com")


def git(cwd: Path, *args: str) -> str:
    completed = subprocess.run(
        ["git", "-C", str(cwd), "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args],
        check=True,
        capture_output=True,
        text=True,
    )
    return completed.stdout.strip()


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """Two commits, then: a.txt modified, staged.txt staged, u.txt untracked, old.txt -> new.txt."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    write(root / "a.txt", "alpha\n")
    write(root / "b.txt", "beta\n")
    write(root / "old.txt", "old contents that are long enough to be a rename\n")
    write(root / "sub" / "c.txt", "gamma\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first commit")
    write(root / "a.txt", "alpha\nsecond line\n")
    git(root, "commit", "-q", "-am", "second: Änderung")
    write(root / "a.txt", "alpha changed\nsecond line\n")
    write(root / "staged.txt", "staged\n")
    git(root, "add", "staged.txt")
    write(root / "u.txt", "untracked\n")
    git(root, "mv", "old.txt", "new.txt")
    return root


def facts(root: Path, args: dict[str, Any], **options: Any) -> dict[str, Any]:
    """`git_facts` called as herdr_git's handler calls it: `args` (with `root`) bounded, validated
    against the frozen catalog and given its defaults by the dispatcher's own step (`prepared`)."""
    return git_facts(root, prepared("herdr_git", {"root": str(root), **args}), **options)


def by_path(files: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {entry["path"]: entry for entry in files}


def refusal(root: Path, **args: Any) -> str:
    with pytest.raises(ToolError) as error:
        facts(root, args)
    return error.value.code


def test_status_reports_branch_head_and_every_kind_of_change(repo: Path) -> None:
    result = facts(repo, {"action": "status"})
    assert result["action"] == "status"
    assert (result["branch"], result["detached"]) == ("main", False)
    assert result["head"] == git(repo, "rev-parse", "HEAD")
    assert (result["upstream"], result["ahead"], result["behind"]) == (None, None, None)
    assert (result["clean"], result["truncated"]) == (False, False)
    assert by_path(result["files"]) == {
        "a.txt": {"path": "a.txt", "index": ".", "worktree": "M"},
        "staged.txt": {"path": "staged.txt", "index": "A", "worktree": "."},
        "u.txt": {"path": "u.txt", "index": "?", "worktree": "?"},
        "new.txt": {"path": "new.txt", "index": "R", "worktree": ".", "orig_path": "old.txt"},
    }


def test_status_of_a_clone_counts_ahead_and_behind(repo: Path, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    write(clone / "b.txt", "beta 2\n")
    git(clone, "commit", "-q", "-am", "ahead by one")
    result = facts(clone, {"action": "status"})
    assert (result["upstream"], result["ahead"], result["behind"]) == ("origin/main", 1, 0)
    assert (result["clean"], result["files"]) == (True, [])


def test_status_of_an_unborn_branch(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    root.mkdir()
    git(root, "init", "-q")
    write(root / "first.txt", "x\n")
    result = facts(root, {"action": "status"})
    assert (result["branch"], result["head"]) == ("main", None)
    assert result["files"] == [{"path": "first.txt", "index": "?", "worktree": "?"}]
    assert facts(root, {"action": "log"}) == {"action": "log", "commits": [], "truncated": False}
    assert project_git_summary(root)["head"] is None


def test_working_tree_diff(repo: Path) -> None:
    result = facts(repo, {"action": "diff"})
    assert (result["staged"], result["truncated"], result["files_truncated"]) == (False, False, False)
    assert "-alpha\n+alpha changed\n" in result["diff"]
    assert "staged.txt" not in result["diff"]
    assert result["files"] == [{"path": "a.txt", "added": 1, "deleted": 1}]
    assert result["files_changed"] == 1


def test_staged_diff_shows_additions_and_renames(repo: Path) -> None:
    result = facts(repo, {"action": "diff", "staged": True})
    assert "+staged\n" in result["diff"]
    assert "rename from old.txt" in result["diff"]
    assert by_path(result["files"]) == {
        "staged.txt": {"path": "staged.txt", "added": 1, "deleted": 0},
        "new.txt": {"path": "new.txt", "orig_path": "old.txt", "added": 0, "deleted": 0},
    }


def test_path_limits_diff_and_log(repo: Path) -> None:
    write(repo / "sub" / "c.txt", "gamma changed\n")
    diff = facts(repo, {"action": "diff", "path": "sub"})
    assert [entry["path"] for entry in diff["files"]] == ["sub/c.txt"]
    assert "a.txt" not in diff["diff"]
    log = facts(repo, {"action": "log", "path": "./b.txt"})
    assert [commit["subject"] for commit in log["commits"]] == ["first commit"]


def test_log_shape_and_limits(repo: Path) -> None:
    result = facts(repo, {"action": "log"})
    assert [commit["subject"] for commit in result["commits"]] == ["second: Änderung", "first commit"]
    newest = result["commits"][0]
    assert newest["sha"] == git(repo, "rev-parse", "HEAD")
    assert (newest["author"], newest["author_email"]) == ("Test Author", "test@example.com")
    assert datetime.fromisoformat(newest["date"]).tzinfo is not None
    assert result["truncated"] is False
    assert len(facts(repo, {"action": "log", "max_count": 1})["commits"]) == 1
    cut = facts(repo, {"action": "log", "max_bytes": 150})
    assert cut["truncated"] is True
    assert [commit["subject"] for commit in cut["commits"]] == ["second: Änderung"]


def test_big_diff_is_cut_at_max_bytes_on_a_character_boundary(repo: Path) -> None:
    write(repo / "big.txt", "ä" * 10)
    git(repo, "add", "big.txt")
    write(repo / "big.txt", "ö€" * 200_000)
    result = facts(repo, {"action": "diff", "path": "big.txt", "max_bytes": 1001})
    assert result["truncated"] is True
    assert 990 <= len(result["diff"].encode()) <= 1001
    assert "\ufffd" not in result["diff"]
    assert result["files"] == [{"path": "big.txt", "added": 1, "deleted": 1}]


@pytest.mark.parametrize("path", ["--output=OUT", "-p", "./--output=OUT"])
def test_option_like_paths_are_refused_and_never_reach_git(repo: Path, tmp_path: Path, path: str) -> None:
    target = tmp_path / "created-by-git"
    path = path.replace("OUT", str(target))
    for action in ("status", "diff", "log"):
        assert refusal(repo, action=action, path=path) == "argument_looks_like_option"
    assert not target.exists()


@pytest.mark.parametrize("path", ["..", "../repo", "sub/../../x", "/etc/passwd"])
def test_paths_outside_the_root_are_refused(repo: Path, path: str) -> None:
    assert refusal(repo, action="diff", path=path) == "path_outside_root"


def test_bad_arguments_are_refused(repo: Path) -> None:
    assert refusal(repo, action="push") == "invalid_arguments"
    assert refusal(repo, action="log", max_count=True) == "invalid_arguments"
    assert refusal(repo, action="log", max_count=101) == "invalid_arguments"
    assert refusal(repo, action="diff", max_bytes=0) == "invalid_arguments"
    assert refusal(repo, action="diff", staged="yes") == "invalid_arguments"


def test_glob_paths_are_literal(repo: Path) -> None:
    result = facts(repo, {"action": "diff", "path": "*.txt"})
    assert (result["diff"], result["files"]) == ("", [])


def test_external_diff_programs_never_run(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "external-diff-ran"
    script = tmp_path / "external-diff"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", str(script))
    git(repo, "config", "diff.external", str(script))
    assert "-alpha" in facts(repo, {"action": "diff"})["diff"]
    assert not marker.exists()


def test_a_directory_outside_git_is_not_a_repository(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    for action in ("status", "diff", "log"):
        assert refusal(plain, action=action) == "not_a_git_repository"
    assert refusal(tmp_path / "missing", action="status") == "root_not_found"
    assert git_toplevel(plain) is None


def test_git_toplevel_resolves_the_work_tree(repo: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(repo)
    assert git_toplevel(repo / "sub") == repo.resolve()
    assert git_toplevel(link) == repo.resolve()
    assert git_toplevel(repo / "a.txt") is None
    assert git_toplevel(repo / ".git") is None


def test_project_git_summary(repo: Path) -> None:
    summary = project_git_summary(repo, max_files=2)
    assert summary["branch"] == "main"
    assert summary["head"] == git(repo, "rev-parse", "HEAD")
    assert (summary["dirty"], summary["changed_count"], summary["changed_count_capped"]) == (True, 4, False)
    assert len(summary["changed_files"]) == 2
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "everything")
    assert project_git_summary(repo) | {"head": None} == {
        "branch": "main",
        "head": None,
        "dirty": False,
        "changed_files": [],
        "changed_count": 0,
        "changed_count_capped": False,
    }


def test_slow_git_is_stopped_with_its_helpers(repo: Path, tmp_path: Path) -> None:
    # A clean filter from the repository's own config makes `git diff` wait on a helper that
    # would run for 30 s; it says its pid first.
    pid_file = tmp_path / "filter-pid"
    write(repo / ".gitattributes", "*.slow filter=slow\n")
    write(repo / "data.slow", "one\n")
    git(repo, "add", ".gitattributes", "data.slow")
    git(repo, "commit", "-q", "-m", "slow file")
    git(
        repo,
        "config",
        "filter.slow.clean",
        f"echo $$ > {pid_file}.part && mv {pid_file}.part {pid_file}; exec sleep 30",
    )
    write(repo / "data.slow", "two\n")
    with pytest.raises(ToolError) as error:
        facts(repo, {"action": "diff", "path": "data.slow"}, timeout=1.0)
    assert error.value.code == "git_timeout"
    assert pid_file.exists(), "the filter did not start within the timeout"
    helper = int(pid_file.read_text())
    wait_until(lambda: not alive(helper), "the filter to be stopped with the killed git", timeout=10)


# Secret-looking paths: herdr_git shows no more of them than the fs tools do ---------------------

SECRET_OLD = "API_KEY=old-do-not-leak"
SECRET_NEW = "API_KEY=new-do-not-leak"


def shows(result: dict[str, Any], *needles: str) -> list[str]:
    """The needles that appear anywhere in a result (its diff text, file lists, messages)."""
    text = json.dumps(result, ensure_ascii=False)
    return [needle for needle in needles if needle in text]


@pytest.fixture
def secret_repo(tmp_path: Path) -> Path:
    """A committed `.env.production` (read by fs_read as secret_path) and an ordinary file."""
    root = tmp_path / "secret-repo"
    root.mkdir()
    git(root, "init", "-q")
    write(root / ".env.production", f"{SECRET_OLD}\nDEBUG=0\nREGION=eu\nPORT=1\n")
    write(root / "notes.txt", "one\ntwo\nthree\nfour\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "with a secret")
    return root


@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize("path", [None, ".env.production", "."])
def test_diff_withholds_changes_of_a_committed_secret_file(
    secret_repo: Path, staged: bool, path: str | None
) -> None:
    write(secret_repo / ".env.production", f"{SECRET_NEW}\nDEBUG=0\nREGION=eu\nPORT=1\n")
    write(secret_repo / "notes.txt", "one\ntwo\nthree\nfour\nfive\n")
    if staged:
        git(secret_repo, "add", "-A")
    args: dict[str, Any] = {"action": "diff", "staged": staged} | ({"path": path} if path else {})
    result = facts(secret_repo, args)
    assert shows(result, SECRET_OLD, SECRET_NEW) == []
    assert result["withheld"] == [".env.production"]
    assert "withheld" in result["message"] and "secret" in result["message"]
    assert ".env.production" not in result["diff"]
    if path == ".env.production":
        assert (result["diff"], result["files"]) == ("", [])
    else:
        assert "+five\n" in result["diff"]
        assert result["files"] == [{"path": "notes.txt", "added": 1, "deleted": 0}]


def test_diff_without_secrets_says_nothing_is_withheld(secret_repo: Path) -> None:
    write(secret_repo / "notes.txt", "one\n")
    result = facts(secret_repo, {"action": "diff"})
    assert (result["withheld"], "message" in result) == ([], False)
    assert "-four\n" in result["diff"]


@pytest.mark.parametrize("renames", ["true", "false", "copies"])
def test_a_secret_renamed_to_an_ordinary_name_shows_none_of_its_old_contents(
    secret_repo: Path, renames: str
) -> None:
    # The new file is ordinary (fs_read reads it), the old one is not: its lines that did not
    # survive the rename must stay hidden, whatever the repository configures for renames.
    git(secret_repo, "config", "diff.renames", renames)
    git(secret_repo, "mv", ".env.production", "env.txt")
    write(secret_repo / "env.txt", f"{SECRET_NEW}\nDEBUG=0\nREGION=eu\nPORT=1\n")
    git(secret_repo, "add", "-A")
    result = facts(secret_repo, {"action": "diff", "staged": True})
    assert shows(result, SECRET_OLD) == []
    assert result["withheld"] == [".env.production"]
    assert "rename from" not in result["diff"]
    assert all("orig_path" not in entry for entry in result["files"])


def test_a_copy_of_a_changed_secret_is_not_diffed_against_it(secret_repo: Path) -> None:
    git(secret_repo, "config", "diff.renames", "copies")
    write(secret_repo / "copied.txt", f"{SECRET_NEW}\nDEBUG=0\nREGION=eu\nPORT=1\nEXTRA=1\n")
    write(secret_repo / ".env.production", f"{SECRET_NEW}\nDEBUG=0\nREGION=eu\nPORT=1\n")
    git(secret_repo, "add", "-A")
    result = facts(secret_repo, {"action": "diff", "staged": True})
    assert shows(result, SECRET_OLD) == []
    assert "copy from" not in result["diff"]
    assert result["withheld"] == [".env.production"]


def test_an_ordinary_file_renamed_to_a_secret_name_is_withheld(secret_repo: Path) -> None:
    git(secret_repo, "mv", "notes.txt", ".env.local")
    write(secret_repo / ".env.local", "one\ntwo\nthree\nfour\nTOKEN=added-do-not-leak\n")
    git(secret_repo, "add", "-A")
    result = facts(secret_repo, {"action": "diff", "staged": True})
    assert shows(result, "TOKEN=added-do-not-leak") == []
    assert result["withheld"] == [".env.local"]


def test_binary_and_nested_secrets_are_withheld(secret_repo: Path) -> None:
    (secret_repo / "keys").mkdir()
    (secret_repo / "keys" / "server.key").write_bytes(b"\x00\x01binary-key-do-not-leak\x00")
    write(secret_repo / "deploy" / ".ssh" / "config", "Host do-not-leak\n")
    write(secret_repo / "notes.txt", "changed\n")
    git(secret_repo, "add", "-A")
    result = facts(secret_repo, {"action": "diff", "staged": True})
    assert shows(result, "binary-key-do-not-leak", "Host do-not-leak", "server.key", "deploy/.ssh") == [
        "server.key",
        "deploy/.ssh",
    ]
    assert result["withheld"] == ["deploy/.ssh/config", "keys/server.key"]
    assert "server.key" not in result["diff"] and ".ssh" not in result["diff"]
    assert [entry["path"] for entry in result["files"]] == ["notes.txt"]


def test_a_submodule_diff_never_opens_the_submodule(secret_repo: Path, tmp_path: Path) -> None:
    # diff.submodule=diff in the repository's config would print the submodule's own changes,
    # paths and all, where herdr_git's secret check sees only the submodule's name.
    inner = tmp_path / "inner"
    inner.mkdir()
    git(inner, "init", "-q")
    write(inner / ".env", f"{SECRET_OLD}\n")
    git(inner, "add", "-A")
    git(inner, "commit", "-q", "-m", "inner")
    git(secret_repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(inner), "sub")
    git(secret_repo, "commit", "-q", "-m", "submodule")
    write(secret_repo / "sub" / ".env", f"{SECRET_NEW}\n")
    git(secret_repo / "sub", "commit", "-q", "-am", "inner change")
    git(secret_repo, "config", "diff.submodule", "diff")
    result = facts(secret_repo, {"action": "diff"})
    assert shows(result, SECRET_OLD, SECRET_NEW) == []
    assert "Subproject commit" in result["diff"]


def test_no_action_shows_secret_contents(secret_repo: Path) -> None:
    # Every action and output form, over every kind of change to secret paths at once.
    write(secret_repo / ".env.production", f"{SECRET_NEW}\nDEBUG=0\nREGION=eu\nPORT=1\n")
    git(secret_repo, "commit", "-q", "-am", "rotate the key")
    write(secret_repo / ".env.production", f"{SECRET_OLD}-worktree\n")
    write(secret_repo / "credentials.json", '{"token": "staged-do-not-leak"}\n')
    git(secret_repo, "add", "credentials.json")
    write(secret_repo / ".env", "UNTRACKED=do-not-leak\n")
    needles = (SECRET_OLD, SECRET_NEW, "staged-do-not-leak", "UNTRACKED=do-not-leak")
    for action in ("status", "diff", "log"):
        for staged in (False, True):
            for path in (None, ".env.production", "credentials.json", ".env", "."):
                args: dict[str, Any] = {"action": action, "staged": staged}
                result = facts(secret_repo, args | ({"path": path} if path else {}))
                assert shows(result, *needles) == [], (action, staged, path)
    assert [commit["subject"] for commit in facts(secret_repo, {"action": "log"})["commits"]] == [
        "rotate the key",
        "with a secret",
    ]


def test_past_the_listing_cap_only_listed_paths_are_diffed(
    secret_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing is known of the paths after the cut, so none of them may reach the patch.
    for number in range(10):
        write(secret_repo / f"n{number}.txt", f"file {number}\n")
    write(secret_repo / "z" / ".env", "LATE=do-not-leak\n")
    git(secret_repo, "add", "-A")
    monkeypatch.setattr(git_module, "_NUMSTAT_CAP", 60)
    result = facts(secret_repo, {"action": "diff", "staged": True})
    assert shows(result, "LATE=do-not-leak", "z/.env") == []
    assert (result["truncated"], result["files_truncated"]) == (True, True)
    listed = [entry["path"] for entry in result["files"]]
    assert listed and len(listed) < 10
    assert all(f"+file {path[1]}\n" in result["diff"] for path in listed)
    assert "+file 9\n" not in result["diff"]


def test_a_secret_below_a_listed_path_withholds_the_whole_patch(
    secret_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `a` was a file and is now a directory holding a secret; `a-0.txt`... sort between `a` and
    # `a/.env`, so a cut listing names `a` but not `a/.env`, and the pathspec `a` covers both.
    write(secret_repo / "a", "plain file\n")
    git(secret_repo, "add", "a")
    git(secret_repo, "commit", "-q", "-m", "a file")
    git(secret_repo, "rm", "-q", "a")
    write(secret_repo / "a" / ".env", "BELOW=do-not-leak\n")
    for number in range(10):
        write(secret_repo / f"a-{number}.txt", f"file {number}\n")
    git(secret_repo, "add", "-A")
    monkeypatch.setattr(git_module, "_NUMSTAT_CAP", 60)
    result = facts(secret_repo, {"action": "diff", "staged": True})
    assert shows(result, "BELOW=do-not-leak") == []
    assert (result["diff"], result["files"], result["truncated"]) == ("", [], True)
    assert "no diff is shown" in result["message"]


def test_a_cut_listing_of_secrets_only_diffs_nothing(
    secret_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Five `1 TAB 0 TAB .env.N NUL` records fill 55 bytes; the cut falls inside z.txt's record.
    for number in range(5):
        write(secret_repo / f".env.{number}", f"SECRET_{number}=do-not-leak\n")
    write(secret_repo / "z.txt", "after the cut\n")
    git(secret_repo, "add", "-A")
    monkeypatch.setattr(git_module, "_NUMSTAT_CAP", 60)
    result = facts(secret_repo, {"action": "diff", "staged": True})
    assert shows(result, "do-not-leak", "after the cut") == []
    assert (result["diff"], result["files"], result["truncated"]) == ("", [], True)
    assert result["withheld"] == [f".env.{number}" for number in range(5)]
    assert "are withheld" in result["message"]
