"""The fs tools of the epoch-5 contract: read, list, grep, image, edit, write, patch.

Each tool is a synchronous function `(roots, policy, args) -> result` over arguments already
validated against the frozen catalog schema (defaults may be missing; the catalog defaults are
applied here). Every refusal is a ToolError with a stable code, raised before anything changes.

Reads resolve the path against the roots, refuse secret-looking paths, and open files and walk
directories through `boundary.files` (regular files only, never following a symlink, never
blocking on a FIFO). fs_grep's engines live in `runtime.grep`. Mutations (managed roots only) go
through `gates` in their fixed order and are written by `atomic`.
"""

from __future__ import annotations

import codecs
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary import (
    FileIdentity,
    Policy,
    ResolvedPath,
    Root,
    RootSet,
    atomic_write,
    check_acknowledged,
    check_target,
    is_secret_path,
    open_directory,
    open_regular,
    refuse_if_read_only,
    refuse_non_regular,
    remove_directories,
    remove_file,
    utf8_boundary,
    walk,
)
from herdr_mcp.runtime.grep import (
    GREP_LINE_MAX_BYTES,
    GREP_MAX_FILE_BYTES,
    GREP_TIMEOUT_S,
    GrepEngine,
    GrepQuery,
    Matches,
    glob_match,
    search,
)
from herdr_mcp.runtime.tools.patch import (
    AddFile,
    DeleteFile,
    FileChange,
    UpdateFile,
    apply_hunks,
    new_file_content,
    parse_patch,
)

__all__ = [
    "EDIT_MAX_BYTES",
    "GREP_LINE_MAX_BYTES",
    "GREP_MAX_FILE_BYTES",
    "GREP_TIMEOUT_S",
    "LIST_MAX_SCANNED",
    "PATCH_MAX_BYTES",
    "READ_CHUNK_BYTES",
    "READ_SEEK_SCAN_LIMIT",
    "TOTAL_LINES_SCAN_LIMIT",
    "GrepEngine",
    "ImageResult",
    "fs_edit",
    "fs_grep",
    "fs_image",
    "fs_list",
    "fs_patch",
    "fs_read",
    "fs_write",
    "glob_match",
]

# --- Catalog defaults (manifests/contracts/runtime-epoch-5.json; a test keeps them in sync). ---
READ_DEFAULT_MAX_BYTES = 16384
LIST_DEFAULT_MAX_ENTRIES = 200
GREP_DEFAULT_MAX_MATCHES = 50
GREP_DEFAULT_MAX_BYTES = 65536
IMAGE_DEFAULT_MAX_BYTES = 2097152

# --- Caps. ---
# fs_read streams in chunks this size: large enough that counting newlines runs at memory speed,
# small enough that a read of any file, however large, stays within a few MiB of memory.
READ_CHUNK_BYTES = 1 << 20
# fs_read counts total_lines by scanning the whole file only up to this size (a 64 MiB scan takes
# well under a second); above it total_lines is null and only total_bytes is reported.
TOTAL_LINES_SCAN_LIMIT = 64 << 20
# fs_read skips to start_line by scanning; beyond this many bytes it refuses (`too_large`) rather
# than let one call churn through gigabytes. herdr_exec (tail, sed -n) serves such files better.
READ_SEEK_SCAN_LIMIT = 512 << 20
# fs_edit and fs_patch hold a file's old and new text in memory; 8 MiB is far above any source
# file and keeps one call's memory bounded. fs_write content has the same cap.
EDIT_MAX_BYTES = 8 << 20
# fs_patch text cap: a patch is sent whole in one request; 4 MiB is far above a reviewable patch.
PATCH_MAX_BYTES = 4 << 20
# fs_list visits at most this many entries (matching or not) before reporting `truncated`, so a
# glob that matches nothing in a huge tree (node_modules) still answers quickly.
LIST_MAX_SCANNED = 50_000

# --- Arguments ---------------------------------------------------------------------------------


def _str(args: Mapping[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str):
        raise ToolError("invalid_arguments", f"{name} must be a string.", argument=name)
    return value


def _opt_str(args: Mapping[str, Any], name: str) -> str | None:
    value = args.get(name)
    return None if value is None or value == "" else _str(args, name)


def _int(args: Mapping[str, Any], name: str, default: int) -> int:
    value = args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ToolError("invalid_arguments", f"{name} must be a positive integer.", argument=name)
    return value


def _bool(args: Mapping[str, Any], name: str) -> bool:
    value = args.get(name, False)
    if not isinstance(value, bool):
        raise ToolError("invalid_arguments", f"{name} must be true or false.", argument=name)
    return value


# --- Shared file access ------------------------------------------------------------------------


def _refuse_secret(target: ResolvedPath) -> None:
    for shown in (target.lexical_relative, target.relative):
        if is_secret_path(shown):
            raise ToolError(
                "secret_path", f"{shown} looks like a secret; fs tools never touch it.", path=shown
            )


def _read_capped(fd: int, cap: int, shown: str) -> bytes:
    """The whole file, refusing (`too_large`) when it holds more than `cap` bytes."""
    parts: list[bytes] = []
    total = 0
    while chunk := os.read(fd, min(READ_CHUNK_BYTES, cap + 1 - total)):
        parts.append(chunk)
        total += len(chunk)
        if total > cap:
            raise ToolError(
                "too_large",
                f"{shown} is larger than {cap} bytes; fs tools edit text files up to that size.",
                path=shown,
                limit=cap,
            )
    return b"".join(parts)


def _decode(data: bytes, shown: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _not_utf8(shown, exc.start) from exc


def _not_utf8(shown: str, offset: int) -> ToolError:
    return ToolError(
        "not_utf8",
        f"{shown} is not UTF-8 text (invalid byte at offset {offset}); use herdr_fs_image for images "
        "or herdr_exec for binary files.",
        path=shown,
        offset=offset,
    )


def _read_text(target: ResolvedPath) -> tuple[str, bytes, FileIdentity]:
    """A whole UTF-8 file (capped at EDIT_MAX_BYTES) with the identity it had when read."""
    shown = target.lexical_relative
    with open_regular(target) as (fd, st):
        data = _read_capped(fd, EDIT_MAX_BYTES, shown)
    return _decode(data, shown), data, FileIdentity.of(st)


def _encode(text: str, shown: str) -> bytes:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(
            "not_utf8", f"The new content for {shown} has an unpaired surrogate; send valid text.", path=shown
        ) from exc
    if len(data) > EDIT_MAX_BYTES:
        raise ToolError(
            "too_large",
            f"The new content for {shown} exceeds {EDIT_MAX_BYTES} bytes; split the file or the change.",
            path=shown,
            limit=EDIT_MAX_BYTES,
        )
    return data


# --- fs_read -----------------------------------------------------------------------------------


class _Scanner:
    """Reads a file once, front to back, in chunks: counts newlines and validates UTF-8."""

    def __init__(self, fd: int, shown: str) -> None:
        self.fd = fd
        self.shown = shown
        self.offset = 0
        self.newlines = 0
        self.eof = False
        self.ends_with_newline = True
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")

    def read(self) -> bytes:
        chunk = os.read(self.fd, READ_CHUNK_BYTES)
        pending = len(self._decoder.getstate()[0])
        try:
            self._decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            raise _not_utf8(self.shown, self.offset - pending + exc.start) from exc
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
    taken = 0
    position = -1
    while want is None or taken < want:
        found = window.find(b"\n", position + 1)
        if found == -1:
            break
        position = found
        taken += 1
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
    start_line = _int(args, "start_line", 1)
    end_line = args.get("end_line")
    max_bytes = _int(args, "max_bytes", READ_DEFAULT_MAX_BYTES)
    if end_line is not None:
        end_line = _int(args, "end_line", 1)
        if end_line < start_line:
            raise ToolError(
                "invalid_arguments", "end_line must not be before start_line.", argument="end_line"
            )
    target = roots.resolve(_str(args, "path"), for_write=False)
    _refuse_secret(target)
    shown = target.lexical_relative
    with open_regular(target) as (fd, st):
        scanner = _Scanner(fd, shown)
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
    return {
        "path": str(target.path),
        "root": str(target.root.path),
        "start_line": start_line,
        "end_line": start_line + page.lines - 1 if page.lines else None,
        "content": _decode(page.content, shown),
        "total_lines": total_lines,
        "total_bytes": st.st_size,
        "truncated": page.truncated,
        "next_start_line": start_line + page.lines if page.truncated else None,
        "line_clipped": page.line_clipped,
    }


# --- fs_list -----------------------------------------------------------------------------------


def fs_list(roots: RootSet, policy: Policy, args: Mapping[str, Any]) -> dict[str, Any]:
    """herdr_fs_list: entries of a directory, optionally recursive and filtered by a glob.

    Entries are depth-first in name order, each {path (relative to the listed directory), type
    file|dir|symlink|other, size (bytes for files, null otherwise)}. Symlinks are listed, never
    followed; `.git` (any letter case) is listed, never descended. Secret-looking entries are
    left out and counted in `hidden_secret_entries`. `truncated` is true when max_entries or
    LIST_MAX_SCANNED stopped the listing. Raises ToolError: path codes, secret_path, not_a_directory.
    """
    del policy
    recursive = _bool(args, "recursive")
    pattern = _opt_str(args, "glob")
    max_entries = _int(args, "max_entries", LIST_DEFAULT_MAX_ENTRIES)
    target = roots.resolve(_str(args, "path"), for_write=False)
    _refuse_secret(target)
    entries: list[dict[str, Any]] = []
    hidden = 0
    scanned = 0
    truncated = False
    for entry in walk(open_directory(target), target.relative, recursive=recursive):
        scanned += 1
        if scanned > LIST_MAX_SCANNED:
            truncated = True
            break
        if entry.secret:
            hidden += 1
            continue
        if pattern is not None and not glob_match(pattern, entry.relative):
            continue
        if len(entries) == max_entries:
            truncated = True
            break
        entries.append(
            {"path": entry.relative, "type": entry.kind, "size": entry.size if entry.kind == "file" else None}
        )
    return {
        "path": str(target.path),
        "root": str(target.root.path),
        "entries": entries,
        "truncated": truncated,
        "hidden_secret_entries": hidden,
    }


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
    pattern = _str(args, "pattern")
    if "\n" in pattern or "\0" in pattern:
        raise ToolError(
            "pattern_invalid", "The pattern must be a single line without NUL; search line by line."
        )
    root = roots.root_for(_str(args, "root"))
    path = _opt_str(args, "path")
    target = roots.resolve(path if path is not None else str(root.path), for_write=False, root=root)
    _refuse_secret(target)
    base = "." if target.path == root.path else target.path.relative_to(root.path).as_posix()
    query = GrepQuery(
        root=root,
        target=target,
        base=base,
        pattern=pattern,
        regex=_bool(args, "regex"),
        case_insensitive=_bool(args, "case_insensitive"),
        glob=_opt_str(args, "glob"),
    )
    matches = Matches(
        max_matches=_int(args, "max_matches", GREP_DEFAULT_MAX_MATCHES),
        max_bytes=_int(args, "max_bytes", GREP_DEFAULT_MAX_BYTES),
    )
    used = search(query, matches, engine=engine, timeout_s=timeout_s)
    return {
        "root": str(root.path),
        "path": base,
        "matches": matches.items,
        "engine": used,
        "truncated": matches.truncated,
    }


# --- fs_image ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageResult:
    """An image for MCP image content: raw bytes, media type, and metadata for the text part."""

    data: bytes
    mime_type: str
    info: dict[str, Any]


def _png_size(data: bytes) -> tuple[int, int] | None:
    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _gif_size(data: bytes) -> tuple[int, int] | None:
    if len(data) < 10:
        return None
    width, height = struct.unpack("<HH", data[6:10])
    return width, height


# JPEG start-of-frame markers carry the dimensions; C4 (DHT), C8 (JPG) and CC (DAC) share the
# range but are not frames.
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    index = 2
    while index + 4 <= len(data):
        if data[index] != 0xFF:
            return None
        marker = data[index + 1]
        if marker == 0xFF:
            index += 1
            continue
        if marker in _JPEG_STANDALONE:
            index += 2
            continue
        (length,) = struct.unpack(">H", data[index + 2 : index + 4])
        if marker in _JPEG_FRAMES:
            if index + 9 > len(data):
                return None
            height, width = struct.unpack(">HH", data[index + 5 : index + 9])
            return width, height
        if marker in (0xD9, 0xDA) or length < 2:
            return None
        index += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


def _image_kind(data: bytes) -> tuple[str, tuple[int, int] | None] | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png", _png_size(data)
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif", _gif_size(data)
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg", _jpeg_size(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp", _webp_size(data)
    return None


def fs_image(roots: RootSet, policy: Policy, args: Mapping[str, Any]) -> ImageResult:
    """herdr_fs_image: a PNG, JPEG, GIF or WebP file with its media type and pixel dimensions.

    The type comes from magic bytes and the dimensions from the headers (no image library).
    Raises ToolError: path codes, secret_path, not_a_file, special_file, too_large,
    unsupported_image.
    """
    del policy
    max_bytes = _int(args, "max_bytes", IMAGE_DEFAULT_MAX_BYTES)
    target = roots.resolve(_str(args, "path"), for_write=False)
    _refuse_secret(target)
    shown = target.lexical_relative
    with open_regular(target) as (fd, st):
        if st.st_size > max_bytes:
            raise ToolError(
                "too_large",
                f"{shown} is {st.st_size} bytes, above max_bytes={max_bytes}; raise max_bytes "
                "(up to 10 MiB).",
                path=shown,
                limit=max_bytes,
            )
        data = _read_capped(fd, max_bytes, shown)
    kind = _image_kind(data)
    if kind is None or kind[1] is None:
        raise ToolError(
            "unsupported_image",
            f"{shown} is not a readable PNG, JPEG, GIF or WebP image; read text with herdr_fs_read.",
            path=shown,
        )
    mime_type, (width, height) = kind[0], kind[1]
    info = {
        "path": str(target.path),
        "root": str(target.root.path),
        "size": len(data),
        "width": width,
        "height": height,
        "mime_type": mime_type,
    }
    return ImageResult(data=data, mime_type=mime_type, info=info)


# --- fs_edit / fs_write ------------------------------------------------------------------------


def fs_edit(roots: RootSet, policy: Policy, args: Mapping[str, Any]) -> dict[str, Any]:
    """herdr_fs_edit: replace one exact, unique occurrence of old_string with new_string.

    Gates (see boundary.gates) run before the file is read; the write is atomic and refused with
    `file_changed` if the file changed meanwhile. Result: path, root, start_line (where the
    replaced text began), bytes_written. Raises ToolError: gate and path codes, not_found,
    not_a_file, special_file, not_utf8, too_large, edit_not_found, edit_not_unique.
    """
    refuse_if_read_only(policy)
    old = _str(args, "old_string")
    new = _str(args, "new_string")
    if not old:
        raise ToolError("invalid_arguments", "old_string must not be empty.", argument="old_string")
    target = roots.resolve(_str(args, "path"), for_write=True)
    check_target(policy, target)
    shown = target.lexical_relative
    if not target.exists:
        raise ToolError("not_found", f"{shown} does not exist; create it with herdr_fs_write.", path=shown)
    text, _, identity = _read_text(target)
    first = text.find(old)
    if first == -1:
        raise ToolError(
            "edit_not_found",
            f"old_string does not occur in {shown}; re-read the file and copy it exactly.",
            path=shown,
        )
    if text.find(old, first + 1) != -1:
        raise ToolError(
            "edit_not_unique",
            f"old_string occurs more than once in {shown}; include more surrounding context.",
            path=shown,
            occurrences=text.count(old),
        )
    check_acknowledged(
        target.root,
        [target],
        confirm_busy=_bool(args, "confirm_busy"),
        confirm_dirty=_bool(args, "confirm_dirty"),
    )
    data = _encode(text[:first] + new + text[first + len(old) :], shown)
    atomic_write(target, data, expect=identity)
    return {
        "path": str(target.path),
        "root": str(target.root.path),
        "start_line": text.count("\n", 0, first) + 1,
        "bytes_written": len(data),
    }


def fs_write(roots: RootSet, policy: Policy, args: Mapping[str, Any]) -> dict[str, Any]:
    """herdr_fs_write: create a text file, or replace it when overwrite is true.

    The parent directory must already exist inside the root. Result: path, root, created,
    bytes_written. Raises ToolError: gate and path codes, not_found (missing parent), file_exists,
    not_a_file, special_file, not_utf8, too_large.
    """
    refuse_if_read_only(policy)
    target = roots.resolve(_str(args, "path"), for_write=True)
    check_target(policy, target)
    shown = target.lexical_relative
    data = _encode(_str(args, "content"), shown)
    if target.missing_parents:
        raise ToolError(
            "not_found",
            f"The parent directory of {shown} does not exist; create it first (herdr_fs_patch creates "
            "directories for added files).",
            path=shown,
        )
    identity = None
    if target.exists:
        st = os.lstat(target.path)
        refuse_non_regular(st, shown)
        if not _bool(args, "overwrite"):
            raise ToolError("file_exists", f"{shown} exists; pass overwrite=true to replace it.", path=shown)
        identity = FileIdentity.of(st)
    check_acknowledged(
        target.root,
        [target],
        confirm_busy=_bool(args, "confirm_busy"),
        confirm_dirty=_bool(args, "confirm_dirty"),
    )
    atomic_write(target, data, expect=identity, create_only=identity is None)
    return {
        "path": str(target.path),
        "root": str(target.root.path),
        "created": identity is None,
        "bytes_written": len(data),
    }


# --- fs_patch ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Step:
    """One file operation of a checked patch, with what is needed to undo it."""

    target: ResolvedPath
    data: bytes | None  # new content; None deletes the file
    original: bytes | None  # content before the patch; None when the file is new
    identity: FileIdentity | None


@dataclass
class _Plan:
    steps: list[_Step] = field(default_factory=list)
    report: list[dict[str, Any]] = field(default_factory=list)
    seen: set[Path] = field(default_factory=set)

    def claim(self, target: ResolvedPath, shown: str) -> None:
        """Each path once per patch, and never both a file and a directory of another file."""
        if target.path in self.seen:
            raise ToolError(
                "patch_invalid",
                f"{shown} appears in more than one section; combine its changes into one section.",
                path=shown,
            )
        if any(seen in target.path.parents or target.path in seen.parents for seen in self.seen):
            raise ToolError(
                "patch_invalid",
                f"{shown} is used as a file and as a directory in this patch; keep one of them.",
                path=shown,
            )
        self.seen.add(target.path)


def _patch_target(roots: RootSet, policy: Policy, root: Root, path: str) -> ResolvedPath:
    if path.startswith("/"):
        raise ToolError("path_invalid", f"Patch paths are relative to root; {path} is absolute.", path=path)
    target = roots.resolve(path, for_write=True, root=root)
    if target.root != root:
        raise ToolError(
            "path_outside_root",
            f"{path} lies in the nested root {target.root.path}; patch it there separately.",
            path=path,
        )
    if target.relative == ".":
        raise ToolError("path_invalid", f"{path} names the root directory itself; name a file.", path=path)
    check_target(policy, target)
    return target


def _require_existing(target: ResolvedPath, shown: str) -> None:
    if not target.exists:
        raise ToolError(
            "not_found", f"{shown} does not exist; check the path (or use '*** Add File:').", path=shown
        )


def _existing_bytes(target: ResolvedPath, shown: str) -> tuple[bytes, FileIdentity]:
    """A file about to be deleted: any content (text or not), kept in memory for the undo."""
    _require_existing(target, shown)
    with open_regular(target) as (fd, st):
        return _read_capped(fd, EDIT_MAX_BYTES, shown), FileIdentity.of(st)


def _line_count(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def _plan_patch(roots: RootSet, policy: Policy, root: Root, text: str) -> _Plan:
    """Parse; resolve and gate EVERY path first; then check every file and compute its content."""
    patch = parse_patch(text)
    plan = _Plan()
    located: list[tuple[FileChange, ResolvedPath, ResolvedPath | None]] = []
    for change in patch.changes:
        target = _patch_target(roots, policy, root, change.path)
        plan.claim(target, change.path)
        destination = None
        if isinstance(change, UpdateFile) and change.move_to is not None:
            destination = _patch_target(roots, policy, root, change.move_to)
            plan.claim(destination, change.move_to)
        located.append((change, target, destination))
    for change, target, destination in located:
        if isinstance(change, AddFile):
            _refuse_existing(target, change.path, "use '*** Update File:'")
            content = new_file_content(change.lines)
            plan.steps.append(_Step(target, _encode(content, change.path), None, None))
            plan.report.append(
                {"path": change.path, "action": "add", "added_lines": len(change.lines), "removed_lines": 0}
            )
        elif isinstance(change, DeleteFile):
            old_bytes, identity = _existing_bytes(target, change.path)
            plan.steps.append(_Step(target, None, old_bytes, identity))
            plan.report.append(
                {
                    "path": change.path,
                    "action": "delete",
                    "added_lines": 0,
                    "removed_lines": _line_count(old_bytes),
                }
            )
        else:
            _plan_update(plan, change, target, destination)
    return plan


def _refuse_existing(target: ResolvedPath, shown: str, hint: str) -> None:
    if target.exists or os.path.lexists(target.path):
        raise ToolError("file_exists", f"{shown} already exists; {hint}.", path=shown)


def _plan_update(
    plan: _Plan, change: UpdateFile, target: ResolvedPath, destination: ResolvedPath | None
) -> None:
    _require_existing(target, change.path)
    old_text, old_bytes, identity = _read_text(target)
    new_bytes = _encode(apply_hunks(old_text, change.hunks, path=change.path), change.path)
    entry: dict[str, Any] = {
        "path": change.path,
        "action": "update",
        "added_lines": sum(hunk.added for hunk in change.hunks),
        "removed_lines": sum(hunk.removed for hunk in change.hunks),
    }
    if destination is None:
        plan.steps.append(_Step(target, new_bytes, old_bytes, identity))
    else:
        _refuse_existing(destination, str(change.move_to), "move to a new path")
        plan.steps.append(_Step(destination, new_bytes, None, None))
        plan.steps.append(_Step(target, None, old_bytes, identity))
        entry.update(action="move", to=change.move_to)
    plan.report.append(entry)


def _apply_plan(plan: _Plan) -> None:
    """Write every file, then delete; on any failure undo what was done and re-raise, saying
    whether the undo restored everything."""
    done: list[tuple[_Step, list[Path]]] = []
    ordered = [step for step in plan.steps if step.data is not None] + [
        s for s in plan.steps if s.data is None
    ]
    try:
        for step in ordered:
            if step.data is None:
                remove_file(step.target, expect=step.identity)
                done.append((step, []))
            else:
                created = atomic_write(
                    step.target,
                    step.data,
                    create_parents=True,
                    create_only=step.original is None,
                    expect=step.identity,
                )
                done.append((step, created))
    except ToolError as exc:
        if not done:
            raise
        left = _undo(done)
        if not left:
            raise ToolError(
                exc.code, f"{exc.message} The files already written were restored.", **exc.details
            ) from exc
        raise ToolError(
            exc.code,
            f"{exc.message} Restoring what was already written failed for {', '.join(left)}; inspect "
            "them with herdr_git status and fix them by hand.",
            **exc.details,
            not_restored=left,
        ) from exc


def _undo(done: Sequence[tuple[_Step, list[Path]]]) -> list[str]:
    """Reverse the steps done, newest first; the root-relative paths that could not be restored."""
    left: list[str] = []
    for step, created in reversed(done):
        try:
            if step.original is None:
                remove_file(step.target)
            else:
                atomic_write(step.target, step.original)
        except ToolError:
            left.append(step.target.relative)
            continue
        left.extend(remove_directories(step.target.root, created))
    return left


def fs_patch(roots: RootSet, policy: Policy, args: Mapping[str, Any]) -> dict[str, Any]:
    """herdr_fs_patch: apply a multi-file patch inside one managed root, all or nothing.

    Checklist, every step for every file before any file is written:
    1. read-only mode; `root` names an admitted root (root_unknown); the patch parses.
    2. every path (and Move to) resolves inside `root` and passes gates 2-5 (path codes, with
       name_too_long and path_too_long counted in bytes, so no directory is created for a file
       that cannot be; operational_root_mutation_unsupported, write_root_not_allowed,
       secret_path, symlink_refused); none appears twice. dry_run runs all of this too.
    3. added files and move targets do not exist (file_exists); updated/deleted files exist, are
       regular UTF-8 files within EDIT_MAX_BYTES, and every hunk applies (patch_conflict).
    4. busy project and dirty files are acknowledged (gates 6-7).
    5. unless dry_run: write new contents atomically (creating missing directories), then delete;
       a failure midway restores what was already written and removes the directories it
       created; the error says so, or names what could not be restored (`not_restored`).
    Result: root, dry_run, files [{path, action add|update|delete|move, added_lines,
    removed_lines, (to)}].
    """
    refuse_if_read_only(policy)
    root = roots.root_for(_str(args, "root"))
    text = _str(args, "patch")
    if len(text.encode("utf-8", "surrogatepass")) > PATCH_MAX_BYTES:
        raise ToolError(
            "too_large", f"The patch exceeds {PATCH_MAX_BYTES} bytes; split it.", limit=PATCH_MAX_BYTES
        )
    plan = _plan_patch(roots, policy, root, text)
    check_acknowledged(
        root,
        [step.target for step in plan.steps if step.original is not None],
        confirm_busy=_bool(args, "confirm_busy"),
        confirm_dirty=_bool(args, "confirm_dirty"),
    )
    dry_run = _bool(args, "dry_run")
    if not dry_run:
        _apply_plan(plan)
    return {"root": str(root.path), "dry_run": dry_run, "files": plan.report}
