"""The ripgrep engine: rg --json in a child process, read back under the caps."""

from __future__ import annotations

import base64
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary import RG_SECRET_EXCLUDE_GLOBS, ResolvedPath, open_regular
from herdr_mcp.runtime.grep.children import SearchChild, stopping
from herdr_mcp.runtime.grep.query import BINARY_SNIFF_BYTES, GREP_MAX_FILE_BYTES, GrepQuery, Matches


def _rg_command(rg: str, query: GrepQuery, max_matches: int, *, sort: bool) -> list[str]:
    command = [
        rg,
        "--json",
        "--no-config",
        "--hidden",
        # .gitignore, .ignore and .rgignore are read (the Python engine reads them alike, see
        # `ignore_rules`); Git's global excludes and .git/info/exclude are not, by either.
        "--no-ignore-global",
        "--no-ignore-exclude",
        "--no-follow",
        *(["--sort", "path"] if sort else []),
        "--encoding",
        "none",
        "--max-filesize",
        str(GREP_MAX_FILE_BYTES),
        "--max-count",
        str(max_matches + 1),
        "--iglob",
        "!.git",
    ]
    for secret_glob in RG_SECRET_EXCLUDE_GLOBS:
        command += ["--iglob", "!" + secret_glob]
    if not query.regex:
        command.append("--fixed-strings")
    if query.case_insensitive:
        command.append("--ignore-case")
    return [*command, "--", query.pattern, str(query.target.path)]


def _rg_text(field_value: Mapping[str, Any]) -> bytes:
    if "text" in field_value:
        return str(field_value["text"]).encode("utf-8", "surrogateescape")
    return base64.b64decode(str(field_value.get("bytes", "")))


def _rg_single_file_is_binary(target: ResolvedPath) -> bool:
    """rg searches an explicitly named binary file anyway; apply the traversal rule ourselves."""
    with open_regular(target) as (fd, st):
        return st.st_size > GREP_MAX_FILE_BYTES or b"\0" in os.read(fd, BINARY_SNIFF_BYTES)


def _path_order(match: dict[str, Any]) -> tuple[list[str], int]:
    """rg's `--sort path` order: depth-first, names compared per component."""
    return str(match["path"]).split("/"), int(match["line"])


def grep_rg(rg: str, query: GrepQuery, matches: Matches, deadline: float) -> None:
    """Search with rg: in parallel first; sorted (single-threaded) only when the caps cut it short.

    `--sort path` makes rg use one thread, about half the speed on two cores. When every match
    fits the caps, sorting them here gives the same answer; when the caps stop the search, which
    matches come first matters, so the search runs again sorted, within the same deadline.
    """
    target = query.target
    if not stat.S_ISDIR(os.lstat(target.path).st_mode) and (
        not query.wants(query.base) or _rg_single_file_is_binary(target)
    ):
        return
    parallel = Matches(max_matches=matches.max_matches, max_bytes=matches.max_bytes)
    _run_rg(rg, query, parallel, sort=False, deadline=deadline)
    if parallel.capped and not parallel.timed_out:
        _run_rg(rg, query, matches, sort=True, deadline=deadline)
        return
    matches.items.extend(sorted(parallel.items, key=_path_order))
    matches.used_bytes += parallel.used_bytes
    matches.truncated = parallel.truncated
    matches.timed_out = parallel.timed_out


def _run_rg(rg: str, query: GrepQuery, matches: Matches, *, sort: bool, deadline: float) -> None:
    """One rg run into `matches`, killed at the deadline (then `matches.timed_out`)."""
    command = _rg_command(rg, query, matches.max_matches, sort=sort)
    with SearchChild(command, cwd=query.root.path, deadline=deadline) as child:
        finished = _read_rg_stream(child.stdout, query, matches)
        status = child.stop()
        if child.interrupted:
            raise stopping()
        if child.timed_out:
            matches.timed_out = matches.truncated = True
            return
        if finished and status == 2 and not matches.items:
            message = child.error_text()
            if "regex" in message or "error parsing" in message:
                raise ToolError(
                    "pattern_invalid",
                    f"The regular expression is invalid ({message.splitlines()[-1]}); fix it or "
                    "set regex=false.",
                )
        if finished and status not in (0, 1, 2):
            matches.truncated = True


def _read_rg_stream(stream: IO[bytes], query: GrepQuery, matches: Matches) -> bool:
    """Consume rg --json output; False when the caps (or a kill) stopped reading early."""
    for raw in stream:
        try:
            message = json.loads(raw)
        except ValueError:  # a line cut short by a kill
            matches.truncated = True
            return False
        if not isinstance(message, dict) or message.get("type") != "match":
            continue
        data = message["data"]
        absolute = Path(os.fsdecode(_rg_text(data["path"])))
        try:
            root_relative = absolute.relative_to(query.root.path).as_posix()
        except ValueError:
            continue
        if not query.wants(root_relative):
            continue
        if not matches.add(root_relative, int(data["line_number"]), _rg_text(data["lines"])):
            return False
    return True
