"""Roots: the directories a remote planner may touch, and the resolver for paths inside them.

The runtime derives `RootCandidate`s from the live Herdr snapshot (projects with Git become
managed roots, exact non-Git workspace/pane cwds become operational roots) and builds one frozen
`RootSet` per snapshot. The set is the single owner of "which directories are admitted": it
canonicalizes, refuses $HOME and its ancestors (by device and inode, so symlink aliases are
caught), merges duplicates, and remembers what it excluded and why for herdr_inspect warnings.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary.paths import (
    ResolvedPath,
    check_lengths,
    lexical_text,
    names_directory,
    relative_text,
    within,
)
from herdr_mcp.runtime.boundary.secrets import is_secret_path
from herdr_mcp.text import parse_name

__all__ = ["ExcludedRoot", "Root", "RootCandidate", "RootKind", "RootSet"]

RootKind = Literal["managed", "operational"]
_ExclusionCode = Literal["path_invalid", "not_found", "not_a_directory", "home_or_ancestor", "secret_path"]


@dataclass(frozen=True)
class Root:
    """An admitted root: `path` is the canonical realpath of an existing directory.

    `managed` roots are Git-backed projects (read and write); `operational` roots are exact
    non-Git live workspace/pane cwds (read only for fs tools). `busy` means a Herdr agent is
    working there; `workspace_ids` are the Herdr workspaces that reported it.
    """

    path: Path
    kind: RootKind
    busy: bool = False
    workspace_ids: frozenset[str] = frozenset()


@dataclass(frozen=True)
class RootCandidate:
    """A root as the Herdr snapshot reports it, before admission."""

    path: str | os.PathLike[str]
    kind: RootKind
    busy: bool = False
    workspace_ids: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ExcludedRoot:
    """A candidate that was not admitted: `code` is stable, `reason` says why in words."""

    path: str
    code: _ExclusionCode
    reason: str


def _identities(paths: Iterable[Path]) -> frozenset[tuple[int, int]]:
    found = set()
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        found.add((st.st_dev, st.st_ino))
    return frozenset(found)


def _home_and_ancestors(home: Path) -> frozenset[tuple[int, int]]:
    """(st_dev, st_ino) of $HOME and every ancestor, both as named and as realpath."""
    named = Path(os.path.abspath(home))
    real = Path(os.path.realpath(home))
    return _identities([named, *named.parents, real, *real.parents])


def _merge(old: Root, new: Root) -> Root:
    return Root(
        path=old.path,
        kind="managed" if "managed" in (old.kind, new.kind) else "operational",
        busy=old.busy or new.busy,
        workspace_ids=old.workspace_ids | new.workspace_ids,
    )


@dataclass(frozen=True)
class RootSet:
    """The admitted roots of one snapshot (sorted by path) and the candidates that were excluded."""

    roots: tuple[Root, ...]
    excluded: tuple[ExcludedRoot, ...] = field(default=())

    @classmethod
    def build(cls, candidates: Iterable[RootCandidate], *, home: Path | None = None) -> RootSet:
        """Admit candidates: realpath, directories only, never $HOME or an ancestor; merge duplicates.

        Duplicates (same realpath) merge: busy is OR-ed, workspace ids are united, and managed wins
        over operational. Raises nothing; refusals land in `excluded`.
        """
        forbidden = _home_and_ancestors(Path.home() if home is None else home)
        admitted: dict[Path, Root] = {}
        excluded: list[ExcludedRoot] = []
        for candidate in candidates:
            raw = os.fspath(candidate.path)
            reason = _refusal(raw, forbidden)
            if reason is not None:
                excluded.append(ExcludedRoot(raw, reason[0], reason[1]))
                continue
            root = Root(Path(os.path.realpath(raw)), candidate.kind, candidate.busy, candidate.workspace_ids)
            previous = admitted.get(root.path)
            admitted[root.path] = root if previous is None else _merge(previous, root)
        return cls(tuple(admitted[path] for path in sorted(admitted)), tuple(excluded))

    def root_for(self, root_arg: str) -> Root:
        """The root a tool's `root` argument names: it must equal an admitted root after realpath.

        Raises ToolError(`root_unknown`). `\\xNN` escapes name bytes (`herdr_mcp.text.parse_name`).
        """
        root_arg = parse_name(root_arg)
        if "\0" in root_arg or not root_arg.startswith("/"):
            raise ToolError(
                "root_unknown",
                "root must be an absolute project root exactly as herdr_inspect reports it.",
                root=root_arg,
            )
        real = Path(os.path.realpath(root_arg))
        for root in self.roots:
            if root.path == real:
                return root
        raise ToolError(
            "root_unknown",
            f"{root_arg} is not a root; call herdr_inspect and pass one of its projects[].root values.",
            root=root_arg,
        )

    def resolve(self, path: str, *, for_write: bool, root: Root | None = None) -> ResolvedPath:
        """Check a caller's path against the roots; return where it really lives.

        Checklist, in order:
        1. NUL bytes and empty paths are refused (`path_invalid`).
        2. Relative paths join `root` when given, else the single managed root (or the single root
           when no managed root exists); otherwise `path_ambiguous`.
        3. Lexical check: `..` is folded without touching the disk and the result must lie inside a
           root, component-wise (`path_outside_root`); the deepest root wins when roots nest, and
           it must be `root` or nested inside it when `root` is given.
        4. Realpath check: the realpath of the target (of its deepest existing ancestor when it does
           not exist) must lie inside that same root (`path_outside_root`); an existing ancestor
           that is not a directory is `not_a_directory`.
        5. Directory syntax is read as the kernel reads it: what precedes a `..`, and the target of
           a path ending in `/` or `/.`, must not be an existing non-directory (`not_a_directory`;
           `README.md/.` never means README.md).
        6. With `for_write`, every name below the root fits NAME_MAX and the whole path PATH_MAX,
           in bytes (`name_too_long`, `path_too_long`), so nothing is created that cannot be
           finished. Without `for_write` the target must exist (`not_found`).
        """
        # The fs tools show a byte of a name that is not UTF-8 as `\\xNN`; it is taken back here
        # (docs/runtime.md "Text"), so whatever herdr_fs_list showed can be named.
        # The checks work on normalized absolute paths as text (`paths.within`): `Path` objects
        # cost more than the lstat calls (most of a 4 KiB fs_read, measured for issue 24).
        path = parse_name(path)
        if not path or "\0" in path:
            raise ToolError("path_invalid", "The path is empty or contains a NUL byte; pass a real path.")
        if path.startswith("/"):
            lexical, prefixes = lexical_text(path, None)
            base = root
        else:
            base = root if root is not None else self._default_root()
            lexical, prefixes = lexical_text(path, str(base.path))
        owner = self._owner(lexical, path, base)
        owner_path = str(owner.path)
        real, missing, found = _realpath(lexical, owner_path, path)
        status = found if isinstance(found, os.stat_result) else None
        if not within(real, owner_path):
            raise ToolError(
                "path_outside_root",
                f"{path} leads outside its root {owner.path} through a symlink; use a path inside the root.",
                path=path,
            )
        _refuse_files_used_as_directories(prefixes, owner_path, path)
        if for_write:
            check_lengths(Path(real), owner.path, path)
        exists = missing == 0 and (found is not False or os.path.exists(real))
        if not exists and not for_write:
            raise ToolError(
                "not_found", f"{path} does not exist; check the path with herdr_fs_list.", path=path
            )
        real_path = Path(real)
        return ResolvedPath(
            root=owner,
            path=real_path,
            relative=relative_text(real, owner_path),
            lexical=real_path if lexical == real else Path(lexical),
            symlinked=real != lexical,
            exists=exists,
            missing_parents=max(missing - 1, 0),
            names_directory=names_directory(path),
            status=status,
        )

    def _default_root(self) -> Root:
        managed = [root for root in self.roots if root.kind == "managed"]
        if len(managed) == 1:
            return managed[0]
        if not managed and len(self.roots) == 1:
            return self.roots[0]
        if not self.roots:
            raise ToolError(
                "path_outside_root", "No roots are known; call herdr_inspect and use an absolute path."
            )
        raise ToolError(
            "path_ambiguous",
            "A relative path needs exactly one managed root; pass an absolute path from herdr_inspect.",
        )

    def _owner(self, lexical: str, shown: str, base: Root | None) -> Root:
        containing = [root for root in self.roots if within(lexical, str(root.path))]
        if base is not None:
            containing = [root for root in containing if within(str(root.path), str(base.path))]
        if not containing:
            where = f"root {base.path}" if base is not None else "any root from herdr_inspect"
            raise ToolError(
                "path_outside_root",
                f"{shown} is outside {where}; use a path inside a root.",
                path=shown,
            )
        # The roots that contain a path lie within one another: the deepest is the longest.
        return max(containing, key=lambda root: len(str(root.path)))


def _refusal(raw: str, forbidden: frozenset[tuple[int, int]]) -> tuple[_ExclusionCode, str] | None:
    """Why a candidate path may not become a root, or None when it may."""
    if "\0" in raw or not raw.startswith("/"):
        return "path_invalid", "not an absolute path"
    try:
        st = os.stat(raw)
    except OSError as exc:
        return "not_found", f"cannot be inspected ({exc.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "not_a_directory", "is not a directory"
    if (st.st_dev, st.st_ino) in forbidden:
        return "home_or_ancestor", "is the home directory or one of its ancestors, which is never a root"
    if is_secret_path(os.path.realpath(raw)):
        return "secret_path", "lies in a secret-looking directory"
    return None


def _refuse_files_used_as_directories(prefixes: list[str], owner: str, shown: str) -> None:
    """Step 5. Only prefixes that lie inside the owner root, by name and by realpath, are looked
    at: probing anything else (`link_out/x/..`) would tell a caller what exists outside the roots."""
    for prefix in prefixes:
        inside = within(prefix, owner) and within(os.path.realpath(prefix), owner)
        if inside and os.path.lexists(prefix) and not os.path.isdir(prefix):
            raise ToolError(
                "not_a_directory",
                f"{shown}: {relative_text(prefix, owner)} is not a directory, yet the path "
                "uses it as one; name the file without a trailing '/', '/.' or '/..'.",
                path=shown,
            )


def _plain(lexical: str) -> os.stat_result | None:
    """The lstat of `lexical` (normalized, absolute) when every component exists and none is a
    symlink: then it is its own realpath, found with the lstat per component realpath makes, and
    its lstat is known. None otherwise (realpath decides)."""
    try:
        end = 0
        while True:
            end = lexical.find("/", end + 1)
            info = os.lstat(lexical if end < 0 else lexical[:end])
            if stat.S_ISLNK(info.st_mode):
                return None
            if end < 0:
                return info
    except OSError:
        return None


def _realpath(lexical: str, owner: str, shown: str) -> tuple[str, int, os.stat_result | bool]:
    """Realpath of `lexical`, or of its deepest existing ancestor plus the missing components.

    Returns (path, number of missing components, and whether the path was seen to exist: its
    lstat when no symlink was on the way, True when found through one, else False). Never
    follows a symlink out of the check: the caller compares the result against the owner root.
    """
    status = _plain(lexical)
    if status is not None:
        return lexical, 0, status
    try:
        # Where every component exists (and no symlink loops) the strict realpath is the same
        # path, found with one lstat per component and no more.
        return os.path.realpath(lexical, strict=True), 0, True
    except OSError:
        pass
    if os.path.lexists(lexical):
        return os.path.realpath(lexical), 0, False
    missing: list[str] = []
    ancestor = lexical
    while not os.path.lexists(ancestor):
        parent = os.path.dirname(ancestor)
        if ancestor in (owner, parent):
            raise ToolError("not_found", f"The root {owner} no longer exists; call herdr_inspect again.")
        missing.insert(0, os.path.basename(ancestor))
        ancestor = parent
    real_ancestor = os.path.realpath(ancestor)
    if not os.path.isdir(real_ancestor):
        raise ToolError(
            "not_a_directory",
            f"{shown}: {ancestor} exists but is not a directory; check the path.",
            path=shown,
        )
    return os.path.join(real_ancestor, *missing), len(missing), False
