"""The Python engine: Python `re` over a walk of the tree, in a child process of its own (see the
package docstring for why). The runtime's side sends the query and reads the matches back;
`main` is the child's side."""

from __future__ import annotations

import json
import math
import os
import posixpath
import re
import signal
import stat
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import herdr_mcp
from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary import (
    ResolvedPath,
    Root,
    WalkEntry,
    open_directory,
    open_error,
    open_file_in,
    open_regular,
    walk,
)
from herdr_mcp.runtime.grep.children import SearchChild, stopping
from herdr_mcp.runtime.grep.ignore_rules import IgnoreLevel
from herdr_mcp.runtime.grep.query import BINARY_SNIFF_BYTES, GREP_MAX_FILE_BYTES, GrepQuery, Matches

# The Python engine's child also arms SIGALRM (default action: terminate) this long after its
# deadline, so it ends by itself even if the runtime that should kill it is gone.
_WORKER_ALARM_GRACE_S = 2


# --- Python engine: the runtime's side ---------------------------------------------------------

# The child imports this package from where the runtime imported it, in isolated mode (-I: no
# environment variables, user site or current directory on sys.path) and without site (-S): the
# engine needs only the standard library and herdr_mcp, and starts faster without site.
_WORKER_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from herdr_mcp.runtime.grep.python_engine import main; main()"
)


def _worker_command() -> list[str]:
    package_parent = Path(herdr_mcp.__file__).resolve().parent.parent
    return [sys.executable, "-I", "-S", "-c", _WORKER_BOOT, str(package_parent)]


def grep_python(query: GrepQuery, matches: Matches, deadline: float) -> None:
    """Run the Python engine in a child process; its matches stream into `matches`."""
    request = {
        **_query_to_json(query),
        "max_matches": matches.max_matches,
        "max_bytes": matches.max_bytes,
        "alarm_s": max(deadline - time.monotonic(), 0.0) + _WORKER_ALARM_GRACE_S,
    }
    with SearchChild(
        _worker_command(), cwd=query.root.path, deadline=deadline, stdin=json.dumps(request).encode()
    ) as child:
        ended = _read_worker_stream(child.stdout, matches)
        status = child.stop()
        if ended:
            return
        if child.interrupted:
            raise stopping()
        if child.timed_out:
            matches.timed_out = matches.truncated = True
            return
        raise ToolError(
            "engine_unavailable",
            f"The Python search engine stopped unexpectedly (exit {status}: "
            f"{child.error_text()[-300:] or 'no message'}); install ripgrep (rg) or retry.",
        )


def _read_worker_stream(stream: IO[bytes], matches: Matches) -> bool:
    """Consume the child's JSON lines; True once its end line arrived. Raises its ToolError."""
    for raw in stream:
        try:
            message = json.loads(raw)
        except ValueError:  # a line cut short by the kill
            return False
        if "match" in message:
            matches.items.append(message["match"])
        elif "end" in message:
            matches.truncated = bool(message["end"]["truncated"])
            return True
        elif "error" in message:
            details = dict(message["error"])
            raise ToolError(str(details.pop("code")), str(details.pop("message")), **details)
    return False


def _query_to_json(query: GrepQuery) -> dict[str, Any]:
    target = query.target
    return {
        "root": str(query.root.path),
        "root_kind": query.root.kind,
        "target_root": str(target.root.path),
        "target_root_kind": target.root.kind,
        "target": str(target.path),
        "relative": target.relative,
        "lexical": str(target.lexical),
        "base": query.base,
        "pattern": query.pattern,
        "regex": query.regex,
        "case_insensitive": query.case_insensitive,
        "glob": query.glob,
    }


def _query_from_json(data: Mapping[str, Any]) -> GrepQuery:
    target_root = Root(Path(data["target_root"]), data["target_root_kind"])
    target = ResolvedPath(
        root=target_root,
        path=Path(data["target"]),
        relative=data["relative"],
        lexical=Path(data["lexical"]),
        symlinked=False,
        exists=True,
    )
    return GrepQuery(
        root=Root(Path(data["root"]), data["root_kind"]),
        target=target,
        base=data["base"],
        pattern=data["pattern"],
        regex=data["regex"],
        case_insensitive=data["case_insensitive"],
        glob=data["glob"],
    )


# --- Python engine: the child's side -----------------------------------------------------------


def main() -> None:
    """The Python engine's child: one query on stdin; JSON lines on stdout, flushed per match."""
    request = json.loads(sys.stdin.buffer.read())
    signal.alarm(math.ceil(request["alarm_s"]))
    out = sys.stdout.buffer

    def emit(message: dict[str, Any]) -> None:
        # ASCII: a path's bytes that are not UTF-8 (surrogateescape) travel as `\\udcNN` escapes
        # and come back unchanged; fs_grep shows them as `\\xNN` once the search is done.
        out.write(json.dumps(message, ensure_ascii=True).encode("ascii") + b"\n")
        out.flush()

    matches = Matches(
        max_matches=request["max_matches"],
        max_bytes=request["max_bytes"],
        on_add=lambda item: emit({"match": item}),
    )
    query = _query_from_json(request)
    try:
        _search_python(query, matches)
    except ToolError as exc:
        emit({"error": exc.to_dict()})
        return
    except OSError as exc:  # the searched path vanished or changed type meanwhile
        emit({"error": open_error(exc, query.base).to_dict()})
        return
    emit({"end": {"truncated": matches.truncated}})


def _python_regex(query: GrepQuery) -> re.Pattern[str]:
    source = query.pattern if query.regex else re.escape(query.pattern)
    try:
        return re.compile(source, re.IGNORECASE if query.case_insensitive else 0)
    except re.error as exc:
        raise ToolError(
            "pattern_invalid", f"The regular expression is invalid: {exc}; fix it or set regex=false."
        ) from exc


def _search_python(query: GrepQuery, matches: Matches) -> None:
    rx = _python_regex(query)
    for root_relative, fd in _grep_files(query):
        try:
            if not _search_file(fd, rx, root_relative, matches):
                return
        finally:
            os.close(fd)


def _search_file(fd: int, rx: re.Pattern[str], path: str, matches: Matches) -> bool:
    """Search one open file; False when the caps say stop."""
    head = os.read(fd, BINARY_SNIFF_BYTES)
    if b"\0" in head:
        return True
    os.lseek(fd, 0, os.SEEK_SET)
    with os.fdopen(os.dup(fd), "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if b"\0" in raw:
                return True
            line = raw.removesuffix(b"\n").decode("utf-8", "replace")
            if rx.search(line) and not matches.add(path, number, raw):
                return False
    return True


def _grep_files(query: GrepQuery) -> Iterator[tuple[str, int]]:
    """(root-relative path, open fd) of every file the query may search, in name order."""
    target = query.target
    if not stat.S_ISDIR(os.lstat(target.path).st_mode):
        if query.wants(query.base) and os.lstat(target.path).st_size <= GREP_MAX_FILE_BYTES:
            with open_regular(target) as (fd, _):
                yield query.base, os.dup(fd)
        return
    skip = _ignored_by_files(target.path)
    for entry in walk(open_directory(target), query.base, recursive=True, skip=skip):
        root_relative = posixpath.normpath(posixpath.join(query.base, entry.relative))
        if entry.kind != "file" or entry.size > GREP_MAX_FILE_BYTES or not query.wants(root_relative):
            continue
        opened = open_file_in(entry.dir_fd, entry.name)
        if opened is not None:
            yield root_relative, opened


def _ignored_by_files(top: Path) -> Callable[[WalkEntry], bool]:
    """The walk's `skip`: what the ignore files around `top` exclude, as rg reads them
    (`ignore_rules`). `top` itself is never asked about, so a named ignored directory is searched."""
    above = IgnoreLevel.above(top)
    # The levels of the directory being listed and its ancestors (the walk is depth-first, so
    # this is all it needs: memory stays proportional to depth, not to the tree).
    chain: list[tuple[str, IgnoreLevel]] = []

    def skip(entry: WalkEntry) -> bool:
        prefix = entry.relative[: len(entry.relative) - len(entry.name)]  # "" or "a/b/"
        while chain and not prefix.startswith(chain[-1][0]):
            chain.pop()
        if chain and chain[-1][0] == prefix:
            level = chain[-1][1]
        else:
            # The parent's level is on top: this directory was one of its entries.
            level = IgnoreLevel.of_directory(entry.dir_fd, top / prefix, chain[-1][1] if chain else above)
            chain.append((prefix, level))
        return level.ignores(os.fsencode(entry.name), entry.kind == "dir")

    return skip
