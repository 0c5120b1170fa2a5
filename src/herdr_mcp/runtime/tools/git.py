"""herdr_git: read-only Git facts for a managed root, and the Git helpers of herdr_inspect.

Every call runs the `git` binary once or twice with an argv we build ourselves:

- `-C <root>`, `--no-optional-locks` (never take the index lock a user's Git may need),
  `--no-pager`, `--literal-pathspecs` (a path is a path, never a glob or `:(magic)`),
  `-c core.quotepath=off -c color.ui=false -c core.fsmonitor=false`;
- a caller's path is refused when it looks like an option, must stay inside the root
  lexically, and always follows `--`;
- diff never runs external diff drivers or textconv filters, never opens submodules, and never
  shows what it would show of a secret-looking path (the fs tools' rule, `boundary/secrets.py`):
  those paths are left out of the patch and named in `withheld`; log never verifies signatures;
- the environment drops variables that would point Git at another repository, and sets
  GIT_TERMINAL_PROMPT=0 and LC_ALL=C (stable messages for the error mapping);
- stdout is read while Git runs and only up to the cap (+1 byte to know it was exceeded); past
  the cap Git is killed. Every call has a deadline (`git_timeout`).

Running Git itself (the argv, environment, caps and deadline above) is `runtime.git_command`.
The functions block (up to the deadline); the runtime calls them from a worker thread.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary.secrets import is_secret_path
from herdr_mcp.runtime.git_command import GitOutput, raise_for_failure, run_git
from herdr_mcp.text import show_name, shown_path

__all__ = ["git_facts", "git_toplevel", "project_git_summary"]

# Git on a healthy repository answers these questions in milliseconds; ten seconds means a
# network filesystem or a huge repository, and the planner should hear about it.
GIT_TIMEOUT_SECONDS = 10.0
# herdr_inspect asks this for every project; it must stay cheap.
TOPLEVEL_TIMEOUT_SECONDS = 5.0
# --numstat lines are short; a quarter MiB covers thousands of files.
_NUMSTAT_CAP = 256 * 1024
# herdr_inspect's summary needs a count and a few names, not every untracked file.
_SUMMARY_STATUS_CAP = 1024 * 1024


@dataclass
class _Status:
    branch: str | None = None
    head: str | None = None
    upstream: str | None = None
    ahead: int | None = None
    behind: int | None = None
    files: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False


def git_facts(root: Path, args: Mapping[str, Any], *, timeout: float = GIT_TIMEOUT_SECONDS) -> dict[str, Any]:
    """Answer one herdr_git call for `root` (already resolved and admitted by the caller).

    `args` are the tool arguments as the dispatcher parsed them (`runtime.tools.arguments`:
    valid against the catalog, `staged`, `max_count` and `max_bytes` filled with the catalog
    defaults; `root` is the caller's to resolve and ignored here). `path` limits status as
    well as diff and log. Each Git run gets `timeout` seconds. Results:

    - status: `{"action", "branch", "detached", "head", "upstream", "ahead", "behind", "clean",
      "files": [{"path", "index", "worktree", "orig_path"?}], "truncated"}`; `index`/`worktree`
      are Git's porcelain status letters (`.` unchanged, `M`, `A`, `D`, `R`, `C`, `T`, `U`, and
      `?` for untracked). The raw listing is capped at max_bytes.
    - diff: `{"action", "staged", "diff", "truncated", "files_changed", "files": [{"path",
      "added", "deleted", "orig_path"?}], "files_truncated", "withheld": [paths], "message"?}`;
      added/deleted are null for binary. A changed path the fs tools refuse as secret-looking
      (either side of a rename) is left out of `diff` and `files` and listed in `withheld`, and
      `message` says so; an ordinary file on the other side of such a rename is shown as added
      or deleted, never as a rename of the secret.
    - log: `{"action", "commits": [{"sha", "author", "author_email", "date", "subject"}],
      "truncated"}`; an unborn branch has no commits.

    Raises ToolError: `invalid_arguments` (a path with NUL), `argument_looks_like_option`,
    `path_outside_root`, `root_not_found`, `not_a_git_repository`, `git_timeout`,
    `git_unavailable`, `git_failed`.
    """
    action: str = args["action"]
    path = _checked_path(args.get("path"))
    staged: bool = args["staged"]
    max_count: int = args["max_count"]
    max_bytes: int = args["max_bytes"]
    if not root.is_dir():
        raise ToolError(
            "root_not_found", f"The root {root} is not a directory; use a root from herdr_inspect."
        )
    if action == "status":
        return {"action": "status", **_status_result(_status(root, path, max_bytes, timeout))}
    if action == "diff":
        return {"action": "diff", **_diff(root, path, staged, max_bytes, timeout)}
    return {"action": "log", **_log(root, path, max_count, max_bytes, timeout)}


def git_toplevel(path: Path) -> Path | None:
    """The realpath of the work tree top containing directory `path`, or None.

    None for anything that is not a directory inside a Git work tree (including a bare
    repository or the inside of `.git`), and when Git is missing, slow or failing.
    """
    if not path.is_dir():
        return None
    try:
        output = run_git(
            path, ["rev-parse", "--show-toplevel"], max_bytes=4096, timeout=TOPLEVEL_TIMEOUT_SECONDS
        )
    except ToolError:
        return None
    text = output.stdout.decode("utf-8", errors="surrogateescape").rstrip("\n")
    if output.returncode != 0 or output.truncated or not text:
        return None
    return Path(os.path.realpath(text))


def project_git_summary(root: Path, *, max_files: int = 50) -> dict[str, Any]:
    """A small picture of a project for herdr_inspect.

    Returns `{"branch", "head", "dirty", "changed_files": [first max_files paths],
    "changed_count", "changed_count_capped"}`; untracked files count as changes;
    `changed_count_capped` means the status listing was too long to count fully, so
    changed_count is a lower bound.
    Raises ToolError like `git_facts` (`not_a_git_repository`, `git_timeout`, ...).
    """
    status = _status(root, None, _SUMMARY_STATUS_CAP, GIT_TIMEOUT_SECONDS)
    return {
        "branch": status.branch,
        "head": status.head,
        "dirty": bool(status.files) or status.truncated,
        "changed_files": [entry["path"] for entry in status.files[:max_files]],
        "changed_count": len(status.files),
        "changed_count_capped": status.truncated,
    }


# Arguments ------------------------------------------------------------------------------


def _checked_path(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    if value.startswith("-"):
        raise ToolError(
            "argument_looks_like_option",
            "path starts with '-', which Git could read as an option; name the path without a leading '-'.",
            argument="path",
        )
    if "\0" in value:
        raise ToolError("invalid_arguments", "path must not contain NUL characters.", argument="path")
    if posixpath.isabs(value):
        raise ToolError(
            "path_outside_root", "path must be relative to the root; drop the leading '/'.", argument="path"
        )
    normalized = posixpath.normpath(value)
    if normalized == ".." or normalized.startswith("../"):
        raise ToolError(
            "path_outside_root",
            "path leaves the root through '..'; give a path inside the root.",
            argument="path",
        )
    if normalized.startswith("-"):
        raise ToolError(
            "argument_looks_like_option",
            "path normalizes to a name starting with '-'; name the path without a leading '-'.",
            argument="path",
        )
    return normalized


def _pathspec(path: str | None) -> list[str]:
    return ["--"] if path is None else ["--", path]


# Actions --------------------------------------------------------------------------------


def _status(root: Path, path: str | None, max_bytes: int, timeout: float) -> _Status:
    argv = ["status", "--porcelain=v2", "--branch", "-z", *_pathspec(path)]
    output = run_git(root, argv, max_bytes=max_bytes, timeout=timeout)
    raise_for_failure(output)
    return _parse_status(output.stdout[:max_bytes], output.truncated)


def _status_result(status: _Status) -> dict[str, Any]:
    return {
        "branch": status.branch,
        "detached": status.branch is None,
        "head": status.head,
        "upstream": status.upstream,
        "ahead": status.ahead,
        "behind": status.behind,
        "clean": not status.files and not status.truncated,
        "files": status.files,
        "truncated": status.truncated,
    }


def _parse_status(data: bytes, truncated: bool) -> _Status:
    """Parse `git status --porcelain=v2 --branch -z`, dropping a record cut off by the cap."""
    status = _Status(truncated=truncated)
    records = data.split(b"\0")[:-1]  # the last piece is empty, or cut off
    index = 0
    while index < len(records):
        record = records[index]
        index += 1
        kind = record[:2]
        if kind == b"# ":
            _parse_status_header(status, _text(record[2:]))
        elif kind == b"1 ":
            fields = record.split(b" ", 8)
            status.files.append(_status_entry(fields[1], fields[8]))
        elif kind == b"2 ":
            if index >= len(records):
                break  # its original path was cut off
            fields = record.split(b" ", 9)
            entry = _status_entry(fields[1], fields[9])
            entry["orig_path"] = os.fsdecode(records[index])
            index += 1
            status.files.append(shown_path(entry, "orig_path"))
        elif kind == b"u ":
            fields = record.split(b" ", 10)
            status.files.append(_status_entry(fields[1], fields[10]))
        elif kind == b"? ":
            status.files.append(shown_path({"path": os.fsdecode(record[2:]), "index": "?", "worktree": "?"}))
    return status


def _parse_status_header(status: _Status, header: str) -> None:
    name, _, value = header.partition(" ")
    if name == "branch.oid":
        status.head = None if value == "(initial)" else value
    elif name == "branch.head":
        status.branch = None if value == "(detached)" else value
    elif name == "branch.upstream":
        status.upstream = value
    elif name == "branch.ab":
        ahead, _, behind = value.partition(" ")
        status.ahead = int(ahead.lstrip("+"))
        status.behind = int(behind.lstrip("-"))


def _status_entry(xy: bytes, path: bytes) -> dict[str, Any]:
    letters = _text(xy)
    return shown_path({"path": os.fsdecode(path), "index": letters[:1], "worktree": letters[1:2]})


def _diff(root: Path, path: str | None, staged: bool, max_bytes: int, timeout: float) -> dict[str, Any]:
    # Renames but never copies, whatever diff.renames says (fewer ways for a shown path to be
    # paired with another one); submodules as their commit ids only (diff.submodule=diff would
    # print the inside of a repository whose paths this check never sees); paths relative to
    # the root, which is what the secret rules and the pathspecs below are relative to.
    common = [
        "--no-ext-diff",
        "--no-textconv",
        "--no-color",
        "--find-renames",
        "--submodule=short",
        "--relative",
        *(["--cached"] if staged else []),
    ]
    # 1. The patch and the list of changed files, for the caller's path.
    patch = run_git(root, ["diff", *common, *_pathspec(path)], max_bytes=max_bytes, timeout=timeout)
    raise_for_failure(patch)
    listing = _numstat(root, common, _pathspec(path), timeout)
    withheld = sorted({shown for change in listing.changes for shown in change.secret_paths()})
    if not withheld and not listing.truncated:
        return _diff_result(staged, patch, max_bytes, listing, withheld)
    # 2. Secret paths (or paths past the listing cap, which could be secret) were in range: both
    #    again, with every secret path excluded and, past the cap, only the listed paths included.
    #    Rename detection only pairs paths inside the pathspec, so no secret is paired with a
    #    path that is shown.
    message = _WITHHELD_MESSAGE.format(count=len(withheld)) if withheld else None
    pathspec = _withholding_pathspec(path, listing)
    if pathspec is None:  # everything listed was secret, and nothing is known past the cut
        return _diff_result(staged, None, max_bytes, _Numstat([], True), withheld, message=message)
    patch = run_git(root, ["diff", *common, *pathspec], max_bytes=max_bytes, timeout=timeout, magic=True)
    raise_for_failure(patch)
    shown = _numstat(root, common, pathspec, timeout, magic=True)
    # 3. Check the second listing too: a path can change between two runs of Git, and a listed
    #    path that became a directory covers what is below it. It names only paths of the first
    #    listing, so it is complete unless something was added; if it is cut off, or names a
    #    secret path, nothing of this patch is returned.
    late = sorted({secret for change in shown.changes for secret in change.secret_paths()})
    if late or shown.truncated:
        everything = sorted({*withheld, *late})
        return _diff_result(staged, None, max_bytes, _Numstat([], True), everything, message=_LATE_MESSAGE)
    return _diff_result(staged, patch, max_bytes, shown, withheld, cut=listing.truncated, message=message)


_WITHHELD_MESSAGE = (
    "The changes of {count} secret-looking path(s) are withheld (listed in withheld): herdr_git shows "
    "no more of them than herdr_fs_read, which refuses them as secret_path. Look at them on the "
    "workstation itself if you need to."
)
_LATE_MESSAGE = (
    "Secret-looking paths changed while the diff was taken, or lie below a listed path, so no diff is "
    "shown (the secret paths found are listed in withheld); retry, or pass a narrower path."
)


def _diff_result(
    staged: bool,
    patch: GitOutput | None,
    max_bytes: int,
    listing: _Numstat,
    withheld: list[str],
    *,
    cut: bool = False,
    message: str | None = None,
) -> dict[str, Any]:
    """The diff answer; `patch` None means none is shown (the answer then counts as cut off)."""
    files = [change.entry() for change in listing.changes]
    text = b"" if patch is None else patch.stdout[: _utf8_prefix(patch.stdout, max_bytes)]
    result: dict[str, Any] = {
        "staged": staged,
        "diff": _text(text),
        "truncated": patch is None or patch.truncated or cut,
        "files_changed": len(files),
        "files": files,
        "files_truncated": listing.truncated or cut,
        "withheld": withheld,
    }
    if message is not None:
        result["message"] = message
    return result


def _withholding_pathspec(path: str | None, listing: _Numstat) -> list[str] | None:
    """Pathspecs (with explicit magic: run without --literal-pathspecs) for the caller's path
    minus every secret path of `listing`; when the listing was cut off, only its non-secret
    paths, as nothing is known of the paths after the cut (None when there are none)."""
    if listing.truncated:
        included = [
            raw for change in listing.changes if not change.secret_paths() for raw in change.raw_paths()
        ]
        if not included:
            return None
    else:
        included = [path if path is not None else "."]
    return [
        "--",
        *(":(literal)" + included_path for included_path in included),
        *(":(exclude,literal)" + secret for secret in _raw_secret_paths(listing)),
    ]


def _raw_secret_paths(listing: _Numstat) -> list[str]:
    return sorted({raw for change in listing.changes for raw in change.raw_paths() if is_secret_path(raw)})


@dataclass(frozen=True)
class _Change:
    """One `--numstat -z` record. Paths are kept as Git wrote them (bytes decoded with
    surrogateescape), so they can go back to Git as pathspecs unchanged."""

    added: int | None
    deleted: int | None
    path: str
    orig_path: str | None = None

    def raw_paths(self) -> list[str]:
        return [self.path] if self.orig_path is None else [self.orig_path, self.path]

    def secret_paths(self) -> list[str]:
        """The secret-looking paths of this change, as shown to the caller."""
        return [_shown(raw) for raw in self.raw_paths() if is_secret_path(raw)]

    def entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = shown_path({"path": self.path, "added": self.added, "deleted": self.deleted})
        if self.orig_path is not None:
            entry["orig_path"] = self.orig_path
            shown_path(entry, "orig_path")
        return entry


@dataclass(frozen=True)
class _Numstat:
    changes: list[_Change]
    truncated: bool


def _numstat(
    root: Path, common: Sequence[str], pathspec: Sequence[str], timeout: float, *, magic: bool = False
) -> _Numstat:
    argv = ["diff", *common, "--numstat", "-z", *pathspec]
    output = run_git(root, argv, max_bytes=_NUMSTAT_CAP, timeout=timeout, magic=magic)
    raise_for_failure(output)
    return _Numstat(_parse_numstat(output.stdout[:_NUMSTAT_CAP]), output.truncated)


def _parse_numstat(data: bytes) -> list[_Change]:
    """Parse `git diff --numstat -z`: `added TAB deleted TAB path NUL`, or for a rename
    `added TAB deleted TAB NUL old NUL new NUL`; a record cut off by the cap is dropped."""
    records = data.split(b"\0")[:-1]
    changes: list[_Change] = []
    index = 0
    while index < len(records):
        parts = records[index].split(b"\t", 2)
        index += 1
        if len(parts) != 3:
            continue
        added, deleted, path = parts
        counts = (int(added) if added.isdigit() else None, int(deleted) if deleted.isdigit() else None)
        if path:
            changes.append(_Change(*counts, path=os.fsdecode(path)))
            continue
        if index + 1 >= len(records):
            break  # the rename's paths were cut off
        changes.append(
            _Change(*counts, path=os.fsdecode(records[index + 1]), orig_path=os.fsdecode(records[index]))
        )
        index += 2
    return changes


def _shown(raw: str) -> str:
    """A path from Git as the caller sees it: the fs tools' rule (docs/runtime.md "Text"), a byte
    that is not UTF-8 is `\\xNN`, so the path can be passed to them as it is."""
    return show_name(raw)[0]


_LOG_FIELDS = 5


def _log(root: Path, path: str | None, max_count: int, max_bytes: int, timeout: float) -> dict[str, Any]:
    argv = [
        "log",
        "--no-color",
        "--no-show-signature",
        f"--max-count={max_count}",
        "--format=%H%x00%an%x00%ae%x00%aI%x00%s",
        "-z",
        *_pathspec(path),
    ]
    output = run_git(root, argv, max_bytes=max_bytes, timeout=timeout)
    if output.returncode != 0 and "does not have any commits" in output.stderr:
        return {"commits": [], "truncated": False}
    raise_for_failure(output)
    pieces = output.stdout[:max_bytes].split(b"\0")
    if output.truncated or pieces[-1] == b"":
        pieces.pop()  # cut off by the cap, or the empty piece after the last NUL
    commits = []
    for start in range(0, len(pieces) - _LOG_FIELDS + 1, _LOG_FIELDS):
        sha, author, email, date, subject = (_text(piece) for piece in pieces[start : start + _LOG_FIELDS])
        commits.append(
            {"sha": sha, "author": author, "author_email": email, "date": date, "subject": subject}
        )
    return {"commits": commits, "truncated": output.truncated}


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _utf8_prefix(data: bytes, limit: int) -> int:
    """The length of data[:limit] backed off so it does not end inside a UTF-8 sequence."""
    if len(data) <= limit:
        return len(data)
    for index in range(limit - 1, max(limit - 4, -1), -1):
        byte = data[index]
        if byte & 0xC0 == 0x80:
            continue
        length = 2 if byte >= 0xC0 else 1
        length = 3 if byte >= 0xE0 else length
        length = 4 if byte >= 0xF0 else length
        return index if limit - index < length else limit
    return limit
