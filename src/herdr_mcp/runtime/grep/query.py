"""What a grep asks and what it collects: the query, the glob rule, the match list under its
count and byte caps, and the limits both engines share."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary import ResolvedPath, Root, is_git_name, is_secret_path, utf8_boundary

# Both engines skip files above this size (rg --max-filesize): larger files are data or build
# output, and a single minified line of them could otherwise fill memory.
GREP_MAX_FILE_BYTES = 32 << 20
# Each returned line is clipped to this many bytes, so one minified line cannot eat the max_bytes
# budget of every other match.
GREP_LINE_MAX_BYTES = 2048
# One call searches at most this long, whatever the engine; then it fails with `grep_timeout`.
GREP_TIMEOUT_S = 20.0
# A file whose first 64 KiB contain a NUL byte is binary and skipped; 64 KiB is ripgrep's default
# buffer, so both engines decide alike for NULs that early.
BINARY_SNIFF_BYTES = 64 << 10

GrepEngine = Literal["auto", "rg", "python"]


# --- Globs -------------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
            continue
        if pattern.startswith("**", index):
            out.append(".*")
            index += 2
            continue
        char = pattern[index]
        index += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (close := pattern.find("]", index + 1)) != -1:
            body = pattern[index:close]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]")
            index = close + 1
        else:
            out.append(re.escape(char))
    try:
        return re.compile("".join(out) + r"\Z", re.DOTALL)
    except re.error as exc:
        raise ToolError(
            "invalid_arguments", f"The glob {pattern!r} is malformed: {exc}.", argument="glob"
        ) from exc


def glob_match(pattern: str, relative: str) -> bool:
    """Glob match on a relative POSIX path.

    `*` and `?` stay within one path component, `**` spans components (`**/` also matches
    nothing), `[...]` is a character class (`[!...]` negated). A pattern without `/` matches the
    last component at any depth (`*.py` finds `a/b/c.py`); one with `/` matches the whole path.
    """
    subject = relative if "/" in pattern else posixpath.basename(relative)
    return _glob_regex(pattern).match(subject) is not None


# --- Query and results -------------------------------------------------------------------------


@dataclass
class Matches:
    """Collects matches under the count and byte caps; `add` says whether to keep going."""

    max_matches: int
    max_bytes: int
    items: list[dict[str, Any]] = field(default_factory=list)
    used_bytes: int = 0
    truncated: bool = False
    capped: bool = False  # the count or byte cap refused a match (not the deadline)
    timed_out: bool = False
    on_add: Callable[[dict[str, Any]], None] | None = None

    def add(self, path: str, line: int, raw: bytes) -> bool:
        """Keep one matching line (clipped) unless a cap refuses it."""
        text = _clip_line(raw)
        size = len(text.encode("utf-8"))
        if len(self.items) == self.max_matches or self.used_bytes + size > self.max_bytes:
            self.truncated = self.capped = True
            return False
        item = {"path": path, "line": line, "text": text}
        self.items.append(item)
        self.used_bytes += size
        if self.on_add is not None:
            self.on_add(item)
        return True


def _clip_line(raw: bytes) -> str:
    raw = raw.removesuffix(b"\n").removesuffix(b"\r")
    if len(raw) > GREP_LINE_MAX_BYTES:
        raw = raw[: utf8_boundary(raw, GREP_LINE_MAX_BYTES)]
    return raw.decode("utf-8", "replace")


@dataclass(frozen=True)
class GrepQuery:
    """One search: under `target` (inside `root`), `base` is the target relative to `root`."""

    root: Root
    target: ResolvedPath
    base: str  # the search path relative to `root` (the target's own root may be nested deeper)
    pattern: str
    regex: bool
    case_insensitive: bool
    glob: str | None

    def wants(self, root_relative: str) -> bool:
        """Whether a file (root-relative path) may be searched: not secret, not in .git, glob."""
        if is_secret_path(root_relative) or any(is_git_name(part) for part in root_relative.split("/")):
            return False
        return self.glob is None or glob_match(self.glob, root_relative)
