"""Ignore files as ripgrep reads them, for the Python engine, so both engines skip the same files.

rg (run without `--no-ignore`, with `--no-ignore-global --no-ignore-exclude`) skips what the
`.gitignore`, `.ignore` and `.rgignore` files around the search exclude. The semantics here are
ripgrep's (its `ignore` and `globset` crates, read at 13.0.0), not Git's, where the two differ:

- Each directory's files hold patterns matched against an entry's path relative to that
  directory. The directory of the entry is asked first, then its parents up to `/`; for each kind
  of file the first directory with a matching pattern decides, and within one file the last
  matching pattern (a `!pattern` re-includes). `.rgignore` outranks `.ignore`, which outranks
  `.gitignore`.
- `.gitignore` files count only in a Git repository (some directory on the way up has `.git`),
  and not above the directory holding the nearest `.git` (a nested repository's top stops its
  outer repository's files).
- The entries of an ignored directory are never visited. The searched path itself is never
  checked, so a `path` naming an ignored directory is searched (its own entries are still matched
  against the patterns, the ignored directory's name is not one of them).
- A pattern: `#` starts a comment, trailing blanks are dropped (unless escaped), `\\!`/`\\#`
  escape a leading `!`/`#`; a trailing `/` matches directories only; a pattern without `/`
  matches at any depth; `*` and `?` stay within a name, `**` spans directories, `[...]` is a
  class, `{a,b}` alternates, `\\` escapes. Paths are matched as bytes, as rg does. A line that is
  not a valid pattern is left out; a line that is not UTF-8 ends the file, as in rg.

Not read, by either engine: Git's global excludes file and `.git/info/exclude` (so an answer does
not depend on the workstation's Git configuration), and an ignore file that is a symlink (rg
follows it; the runtime never follows one).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["IGNORE_FILE_NAMES", "IgnoreLevel", "Rules", "parse_rules"]

# The files rg reads in each directory, in the order they outrank each other.
IGNORE_FILE_NAMES = (".rgignore", ".ignore", ".gitignore")
_GITIGNORE = 2
# An ignore file larger than this is read only this far (a real one is a few KiB).
_IGNORE_FILE_MAX_BYTES = 1 << 20


class _PatternError(ValueError):
    """A line that globset would not compile (rg leaves it out)."""


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[bytes]
    whitelist: bool
    only_dir: bool


@dataclass(frozen=True)
class Rules:
    """The patterns of one ignore file, in file order."""

    rules: tuple[_Rule, ...]

    def decide(self, relative: bytes, is_dir: bool) -> bool | None:
        """True (ignored), False (re-included by a `!` pattern) or None (no pattern matches)."""
        for rule in reversed(self.rules):
            if (is_dir or not rule.only_dir) and rule.regex.match(relative):
                return not rule.whitelist
        return None


def parse_rules(text: bytes) -> Rules:
    """The patterns of an ignore file's content."""
    rules = []
    for raw in text.split(b"\n"):
        try:
            line = raw.removesuffix(b"\r").decode("utf-8")
        except UnicodeDecodeError:
            break
        try:
            rule = _rule(line)
        except _PatternError:
            continue
        if rule is not None:
            rules.append(rule)
    return Rules(tuple(rules))


def _rule(line: str) -> _Rule | None:
    if line.startswith("#"):
        return None
    if not line.endswith("\\ "):
        line = line.rstrip()
    if not line:
        return None
    whitelist = anchored = False
    if line.startswith(("\\!", "\\#")):
        line = line[1:]
        anchored = line.startswith("/")
    else:
        if line.startswith("!"):
            whitelist, line = True, line[1:]
        if line.startswith("/"):
            anchored, line = True, line[1:]
    only_dir = line.endswith("/")
    if only_dir:
        line = line[:-1]
    if not anchored and "/" not in line and not (line.startswith("**/") or line == "**"):
        line = "**/" + line
    if line.endswith("/**"):
        line += "/*"
    return _Rule(re.compile(_glob_regex(line)), whitelist, only_dir)


def _literal(text: str) -> bytes:
    return b"".join(re.escape(bytes([byte])) for byte in text.encode("utf-8"))


class _GlobParser:
    """globset's reading of a glob (literal separators, backslash escapes), as a bytes regex."""

    def __init__(self, glob: str) -> None:
        self.glob = glob
        self.index = 0
        # Token lists: the outer one, and while inside `{...}` one per alternative.
        self.stack: list[list[bytes]] = [[]]
        self.prev: str | None = None

    def next_char(self) -> str | None:
        if self.index >= len(self.glob):
            self.prev = self.glob[-1] if self.glob else None
            return None
        char = self.glob[self.index]
        self.prev = self.glob[self.index - 1] if self.index else None
        self.index += 1
        return char

    def peek(self) -> str | None:
        return self.glob[self.index] if self.index < len(self.glob) else None

    def push(self, token: bytes) -> None:
        self.stack[-1].append(token)

    def parse(self) -> bytes:
        while (char := self.next_char()) is not None:
            if char == "?":
                self.push(b"[^/]")
            elif char == "*":
                self.star()
            elif char == "[":
                self.push(self.char_class())
            elif char == "{":
                if len(self.stack) > 1:
                    raise _PatternError("nested alternates")
                self.stack.append([])
            elif char == "}":
                self.close_alternates()
            elif char == "," and len(self.stack) > 1:
                self.stack.append([])
            elif char == "\\":
                escaped = self.next_char()
                if escaped is None:
                    raise _PatternError("dangling escape")
                self.push(_literal(escaped))
            else:
                self.push(_literal(char))
        if len(self.stack) > 1:
            raise _PatternError("unclosed alternates")
        tokens = self.stack[0]
        if tokens == [_RECURSIVE_PREFIX]:
            return b".*\\Z"
        return b"".join(tokens) + b"\\Z"

    def close_alternates(self) -> None:
        branches = []
        while len(self.stack) >= 2:
            branches.append(b"".join(self.stack.pop()))
        branches = [branch for branch in reversed(branches) if branch]
        if branches:
            self.push(b"(?:" + b"|".join(branches) + b")")

    def star(self) -> None:
        previous = self.prev
        if self.peek() != "*":
            self.push(b"[^/]*")
            return
        self.next_char()
        if not self.stack[-1]:
            if self.peek() not in (None, "/"):
                self.push(b"[^/]*[^/]*")
            else:
                self.push(_RECURSIVE_PREFIX)
                self.next_char()
            return
        if previous != "/":
            self.push(b"[^/]*[^/]*")
            return
        upcoming = self.peek()
        if upcoming is None or (upcoming in (",", "}") and len(self.stack) >= 2):
            suffix = True
            if upcoming is None:
                self.next_char()
        elif upcoming == "/":
            self.next_char()
            suffix = False
        else:
            self.push(b"[^/]*[^/]*")
            return
        last = self.stack[-1].pop()
        if last in (_RECURSIVE_PREFIX, _RECURSIVE_SUFFIX):
            self.push(last)
        else:
            self.push(_RECURSIVE_SUFFIX if suffix else _RECURSIVE_ZERO_OR_MORE)

    def char_class(self) -> bytes:
        negated = self.peek() in ("!", "^")
        if negated:
            self.next_char()
        ranges: list[list[str]] = []
        first, in_range = True, False
        while True:
            char = self.next_char()
            if char is None:
                raise _PatternError("unclosed class")
            if char == "]" and not first:
                break
            if char == "-" and not first and not in_range:
                in_range = True
            elif in_range:
                if char < ranges[-1][0]:
                    raise _PatternError("invalid range")
                ranges[-1][1] = char
                in_range = False
            else:
                ranges.append([char, char])
            first = False
        if in_range:
            ranges.append(["-", "-"])
        body = b"".join(
            _literal(low) if low == high else _literal(low) + b"-" + _literal(high) for low, high in ranges
        )
        return b"[" + (b"^" if negated else b"") + body + b"]"


_RECURSIVE_PREFIX = b"(?:/?|.*/)"
_RECURSIVE_SUFFIX = b"/.*"
_RECURSIVE_ZERO_OR_MORE = b"(?:/|/.*/)"


def _glob_regex(glob: str) -> bytes:
    return _GlobParser(glob).parse()


def read_ignore_file(dir_fd: int, name: str) -> Rules | None:
    """The rules of `name` in an open directory: a regular file, never followed if a symlink."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], _IGNORE_FILE_MAX_BYTES
        while left > 0 and (chunk := os.read(fd, min(left, 65536))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    rules = parse_rules(b"".join(chunks))
    return rules if rules.rules else None


def _has_git(dir_fd: int) -> bool:
    try:
        os.stat(".git", dir_fd=dir_fd)
    except OSError:
        return False
    return True


@dataclass
class IgnoreLevel:
    """One directory's ignore files, linked to its parent's; `consulted` lists, innermost first,
    the levels (with the kinds of file) that can decide for an entry of this directory."""

    path: bytes  # the directory, absolute
    files: tuple[Rules | None, ...]
    has_git: bool
    parent: IgnoreLevel | None = None
    consulted: tuple[tuple[IgnoreLevel, tuple[int, ...]], ...] = field(default=(), init=False)

    @classmethod
    def of_directory(cls, dir_fd: int, path: Path | bytes, parent: IgnoreLevel | None) -> IgnoreLevel:
        """The level of an open directory, its ignore files read now."""
        files = tuple(read_ignore_file(dir_fd, name) for name in IGNORE_FILE_NAMES)
        level = cls(os.fsencode(path), files, _has_git(dir_fd), parent)
        level.consulted = level._consulted()
        return level

    @classmethod
    def above(cls, directory: Path) -> IgnoreLevel | None:
        """The levels of `directory`'s ancestors (not itself), `/` first; None at `/`."""
        level = None
        for ancestor in reversed(directory.parents):
            try:
                fd = os.open(ancestor, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                level = cls.of_directory(fd, ancestor, level)
            finally:
                os.close(fd)
        return level

    def _chain(self) -> list[IgnoreLevel]:
        chain: list[IgnoreLevel] = []
        level: IgnoreLevel | None = self
        while level is not None:
            chain.append(level)
            level = level.parent
        return chain

    def _consulted(self) -> tuple[tuple[IgnoreLevel, tuple[int, ...]], ...]:
        chain = self._chain()
        in_repository = any(level.has_git for level in chain)
        consulted = []
        past_git = False
        for level in chain:
            kinds = tuple(
                kind
                for kind, rules in enumerate(level.files)
                if rules is not None and (kind != _GITIGNORE or (in_repository and not past_git))
            )
            if kinds:
                consulted.append((level, kinds))
            past_git = past_git or level.has_git
        return tuple(consulted)

    def ignores(self, name: bytes, is_dir: bool) -> bool:
        """Whether the entry `name` of this directory is ignored."""
        if not self.consulted:
            return False
        absolute = self.path.rstrip(b"/") + b"/" + name
        decided: list[bool | None] = [None] * len(IGNORE_FILE_NAMES)
        for level, kinds in self.consulted:
            relative = absolute[len(level.path.rstrip(b"/")) + 1 :]
            for kind in kinds:
                if decided[kind] is None:
                    rules = level.files[kind]
                    assert rules is not None
                    decided[kind] = rules.decide(relative, is_dir)
        return next((verdict for verdict in decided if verdict is not None), False)
