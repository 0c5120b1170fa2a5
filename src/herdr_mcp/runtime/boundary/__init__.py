"""The boundary: which directories a remote planner may touch, and how every path is checked.

`RootSet` owns the admitted roots and resolves paths against them; `secrets` decides which
paths no fs tool touches; `gates` runs the mutation checks in their fixed order; `atomic` writes
through a temp file and a rename without ever following a symlink; `files` opens and walks
without following one.
"""

from herdr_mcp.runtime.boundary.atomic import FileIdentity, atomic_write, remove_directories, remove_file
from herdr_mcp.runtime.boundary.files import (
    EntryKind,
    Offload,
    SmallWork,
    Visit,
    WalkEntry,
    WalkLevel,
    WalkPrune,
    open_directory,
    open_file_in,
    open_regular,
    refuse_non_regular,
    utf8_boundary,
    walk,
    walk_listing,
)
from herdr_mcp.runtime.boundary.gates import (
    Policy,
    check_acknowledged,
    check_target,
    dirty_paths,
    refuse_if_read_only,
    root_mutations,
)
from herdr_mcp.runtime.boundary.paths import (
    ResolvedPath,
    is_git_name,
    is_within,
    normalize_lexical,
    open_beneath,
    open_error,
)
from herdr_mcp.runtime.boundary.roots import ExcludedRoot, Root, RootCandidate, RootKind, RootSet
from herdr_mcp.runtime.boundary.secrets import (
    RG_SECRET_EXCLUDE_GLOBS,
    is_secret_entry,
    is_secret_name,
    is_secret_path,
)

__all__ = [
    "RG_SECRET_EXCLUDE_GLOBS",
    "EntryKind",
    "ExcludedRoot",
    "FileIdentity",
    "Offload",
    "Policy",
    "ResolvedPath",
    "Root",
    "RootCandidate",
    "RootKind",
    "RootSet",
    "SmallWork",
    "Visit",
    "WalkEntry",
    "WalkLevel",
    "WalkPrune",
    "atomic_write",
    "check_acknowledged",
    "check_target",
    "dirty_paths",
    "is_git_name",
    "is_secret_entry",
    "is_secret_name",
    "is_secret_path",
    "is_within",
    "normalize_lexical",
    "open_beneath",
    "open_directory",
    "open_error",
    "open_file_in",
    "open_regular",
    "refuse_if_read_only",
    "refuse_non_regular",
    "remove_directories",
    "remove_file",
    "root_mutations",
    "utf8_boundary",
    "walk",
    "walk_listing",
]
