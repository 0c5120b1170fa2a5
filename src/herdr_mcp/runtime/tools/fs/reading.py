"""The read-only fs tools: fs_read (a line range, streamed), fs_list (a directory) and fs_grep
(matching lines; its engines live in `runtime.grep`).

Paths resolve against the roots and secret-looking paths are refused; files and directories are
opened through `boundary.files` (regular files only, never following a symlink, never blocking
on a FIFO).
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary import Policy, RootSet, open_directory, open_regular, utf8_boundary
from herdr_mcp.runtime.grep.query import GREP_TIMEOUT_S, GrepEngine, GrepQuery, Matches
from herdr_mcp.runtime.grep.search import search
from herdr_mcp.runtime.tools.fs.access import READ_CHUNK_BYTES, decode_text, not_utf8, refuse_secret
from herdr_mcp.runtime.tools.fs.listing import list_directory
from herdr_mcp.text import shown_answer, shown_path

# fs_read counts total_lines by scanning the whole file only up to this size (a 64 MiB scan takes
# well under a second); above it total_lines is null and only total_bytes is reported.
TOTAL_LINES_SCAN_LIMIT = 64 << 20
# fs_read skips to start_line by scanning; beyond this many bytes it refuses (`too_large`) rather
# than let one call churn through gigabytes. herdr_exec (tail, sed -n) serves such files better.
READ_SEEK_SCAN_LIMIT = 512 << 20
# fs_list visits at most this many entries (matching or not) before reporting `truncated`, so a
# glob that matches nothing in a huge tree (node_modules) still answers quickly.
LIST_MAX_SCANNED = 50_000

# --- fs_read -----------------------------------------------------------------------------------


class _Scanner:
    """Reads a file once, front to back, in chunks: counts newlines and validates UTF-8.

    `size` is the file's size when opened: the first read asks for that much and one byte more,
    so a small file costs one read, without a READ_CHUNK_BYTES buffer (`os.read` allocates what
    it is asked for); coming back short at that size, it is the whole file. A file that grew
    meanwhile is read on in READ_CHUNK_BYTES chunks."""

    def __init__(self, fd: int, shown: str, size: int = READ_CHUNK_BYTES) -> None:
        self.fd = fd
        self.shown = shown
        self.offset = 0
        self.newlines = 0
        self.eof = False
        self.ends_with_newline = True
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._size = size
        self._request = max(1, min(READ_CHUNK_BYTES, size + 1))
        self._ended = False

    def read(self) -> bytes:
        if self._ended:
            chunk = b""
        else:
            request = self._request
            chunk = os.read(self.fd, request)
            # A read of a regular file comes back short only at its end: one that also reached
            # the size the file had when opened ends the file as read (no read to confirm it);
            # a short read before that size (some FUSE filesystems) is read on from.
            self._ended = len(chunk) < request and self.offset + len(chunk) >= self._size
            self._request = READ_CHUNK_BYTES
        pending = len(self._decoder.getstate()[0])
        try:
            self._decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            raise not_utf8(self.shown, self.offset - pending + exc.start) from exc
        if not chunk:
            self.eof = True
            return chunk
        self.newlines += chunk.count(b"\n")
        self.offset += len(chunk)
        self.ends_with_newline = chunk.endswith(b"\n")
        return chunk


def _skip_lines(scanner: _Scanner, count: int, start_line: int) -> tuple[bytes, int]:
    """Consume `count` lines; return the bytes after them and how many were actually skipped."""
    buf = b""
    skipped = 0
    while skipped < count:
        if not buf:
            if scanner.eof:
                break
            if scanner.offset >= READ_SEEK_SCAN_LIMIT:
                raise ToolError(
                    "too_large",
                    f"Line {start_line} of {scanner.shown} lies beyond the first {READ_SEEK_SCAN_LIMIT} "
                    "bytes; use herdr_exec (tail, sed -n) for such large files.",
                    path=scanner.shown,
                    limit=READ_SEEK_SCAN_LIMIT,
                )
            buf = scanner.read()
            continue
        available = buf.count(b"\n")
        if available < count - skipped:
            skipped += available
            buf = b""
            continue
        position = -1
        for _ in range(count - skipped):
            position = buf.index(b"\n", position + 1)
        return buf[position + 1 :], count
    return buf, skipped


@dataclass(frozen=True)
class _Page:
    content: bytes
    lines: int
    truncated: bool
    line_clipped: bool


def _take_page(scanner: _Scanner, buf: bytes, want: int | None, max_bytes: int) -> _Page:
    """Whole lines from `buf` (refilled from the scanner) within max_bytes and the line range."""
    while len(buf) <= max_bytes and not scanner.eof:
        if want is not None and buf.count(b"\n") >= want:
            break
        buf += scanner.read()
    window = buf[:max_bytes]
    # The whole lines in the window, up to `want` of them, and where the last one taken ends.
    taken = window.count(b"\n")
    if want is None or taken <= want:
        position = window.rfind(b"\n")
    else:
        taken = want
        position = len(window) - len(window.split(b"\n", want)[want]) - 1
    if want is not None and taken == want:
        return _Page(buf[: position + 1], taken, truncated=False, line_clipped=False)
    if len(buf) <= max_bytes and scanner.eof:
        partial = 1 if len(buf) > position + 1 else 0
        return _Page(buf, taken + partial, truncated=False, line_clipped=False)
    if taken:
        return _Page(buf[: position + 1], taken, truncated=True, line_clipped=False)
    return _Page(buf[: utf8_boundary(buf, max_bytes)], 1, truncated=True, line_clipped=True)


def fs_read(roots: RootSet, policy: Policy, args: Mapping[str, Any]) -> dict[str, Any]:
    """herdr_fs_read: a line range of a UTF-8 text file, capped by bytes, streamed.

    Memory stays flat for any file size: the file is read in READ_CHUNK_BYTES chunks, once.
    Every byte read is validated as UTF-8 (`not_utf8` names the offset). `total_lines` is counted
    by a streaming scan only for files up to TOTAL_LINES_SCAN_LIMIT bytes, else it is null.
    When one line alone exceeds max_bytes, its first max_bytes (whole characters) are returned
    with `line_clipped` and reading continues at the next line.
    Raises ToolError: path codes, secret_path, not_a_file, special_file, not_utf8, too_large.
    """
    del policy
    start_line: int = args["start_line"]
    end_line: int | None = args.get("end_line")
    max_bytes: int = args["max_bytes"]
    if end_line is not None and end_line < start_line:
        raise ToolError("invalid_arguments", "end_line must not be before start_line.", argument="end_line")
    target = roots.resolve(args["path"], for_write=False)
    refuse_secret(target)
    shown = target.lexical_relative
    with open_regular(target, target.status) as (fd, st):
        scanner = _Scanner(fd, shown, st.st_size)
        buf, skipped = _skip_lines(scanner, start_line - 1, start_line)
        if skipped < start_line - 1 or (not buf and scanner.eof):
            page = _Page(b"", 0, truncated=False, line_clipped=False)
        else:
            want = None if end_line is None else end_line - start_line + 1
            page = _take_page(scanner, buf, want, max_bytes)
        total_lines = None
        if st.st_size <= TOTAL_LINES_SCAN_LIMIT:
            while not scanner.eof and scanner.offset <= TOTAL_LINES_SCAN_LIMIT:
                scanner.read()
            if scanner.eof:
                total_lines = scanner.newlines + (0 if scanner.ends_with_newline else 1)
    return shown_answer(
        {
            "path": str(target.path),
            "root": str(target.root.path),
            "start_line": start_line,
            "end_line": start_line + page.lines - 1 if page.lines else None,
            "content": decode_text(page.content, shown),
            "total_lines": total_lines,
            "total_bytes": st.st_size,
            "truncated": page.truncated,
            "next_start_line": start_line + page.lines if page.truncated else None,
            "line_clipped": page.line_clipped,
        }
    )


# --- fs_list -----------------------------------------------------------------------------------


def fs_list(roots: RootSet, policy: Policy, args: Mapping[str, Any]) -> dict[str, Any]:
    """herdr_fs_list: entries of a directory, optionally recursive and filtered by a glob.

    Entries are depth-first in name order, each {path (relative to the listed directory), type
    file|dir|symlink|other, size (bytes for files, null otherwise)}. Symlinks are listed, never
    followed; `.git` (any letter case) is listed, never descended. Secret-looking entries are
    left out and counted in `hidden_secret_entries`. `truncated` is true when max_entries or
    LIST_MAX_SCANNED stopped the listing; then `next_calls` holds the arguments of the calls
    that list the rest, each entry once (empty when the rest cannot be named by a glob; see
    `listing`). Raises ToolError: path codes, secret_path, not_a_directory.
    """
    del policy
    recursive: bool = args["recursive"]
    pattern: str | None = args.get("glob") or None
    max_entries: int = args["max_entries"]
    target = roots.resolve(args["path"], for_write=False)
    refuse_secret(target)
    listing = list_directory(
        open_directory(target),
        target.relative,
        recursive=recursive,
        glob=pattern,
        max_entries=max_entries,
        max_scanned=LIST_MAX_SCANNED,
    )
    answer = shown_answer(
        {
            "path": str(target.path),
            "root": str(target.root.path),
            "entries": listing.entries,
            "truncated": listing.truncated,
            "hidden_secret_entries": listing.hidden,
        }
    )
    answer["next_calls"] = [
        {"path": answer["path"], "recursive": recursive, "glob": glob, "max_entries": max_entries}
        for glob in listing.rest
    ]
    return answer


# --- fs_grep -----------------------------------------------------------------------------------


def fs_grep(
    roots: RootSet,
    policy: Policy,
    args: Mapping[str, Any],
    *,
    engine: GrepEngine = "auto",
    timeout_s: float = GREP_TIMEOUT_S,
) -> dict[str, Any]:
    """herdr_fs_grep: matching lines under a root (or a path inside it), capped by count and bytes.

    Literal by default (`regex` for a regular expression: Rust syntax with rg, Python `re` in the
    fallback; simple patterns mean the same in both), `case_insensitive`, `glob` on the
    root-relative path (see `glob_match`). Skips .git, secret-looking files, symlinks, non-regular
    files, files above GREP_MAX_FILE_BYTES and binary files (a NUL in the first 64 KiB; a later
    NUL ends the file's search). Lines are clipped to GREP_LINE_MAX_BYTES. Results are in path
    order and identical for both engines on such trees; `engine` forces one ("rg" requires it on
    PATH). Both engines run as child processes killed after `timeout_s` (see runtime.grep).
    Raises ToolError: root_unknown, path codes, secret_path, pattern_invalid, engine_unavailable,
    grep_timeout (with the matches found before the deadline).
    """
    del policy
    pattern: str = args["pattern"]
    if "\n" in pattern or "\0" in pattern:
        raise ToolError(
            "pattern_invalid", "The pattern must be a single line without NUL; search line by line."
        )
    root = roots.root_for(args["root"])
    path: str | None = args.get("path") or None
    target = roots.resolve(path if path is not None else str(root.path), for_write=False, root=root)
    refuse_secret(target)
    base = "." if target.path == root.path else target.path.relative_to(root.path).as_posix()
    query = GrepQuery(
        root=root,
        target=target,
        base=base,
        pattern=pattern,
        regex=args["regex"],
        case_insensitive=args["case_insensitive"],
        glob=args.get("glob") or None,
    )
    matches = Matches(max_matches=args["max_matches"], max_bytes=args["max_bytes"])
    try:
        used = search(query, matches, engine=engine, timeout_s=timeout_s)
    except ToolError as exc:
        if isinstance(exc.details.get("matches"), list):
            exc.details["matches"] = [shown_path(item) for item in exc.details["matches"]]
        raise
    # Paths are escaped only now: both engines order matches by the names as they are on disk.
    return shown_answer(
        {
            "root": str(root.path),
            "path": base,
            "matches": [shown_path(item) for item in matches.items],
            "engine": used,
            "truncated": matches.truncated,
        }
    )
