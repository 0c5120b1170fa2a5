"""The '*** Begin Patch' format of herdr_fs_patch: parse, render, and apply hunks. Pure, no I/O.

Grammar (one item per line; '\\r' at a line end is ignored, blank lines around the patch too):

    *** Begin Patch
    *** Add File: <path>          then zero or more '+<text>' lines (the new file's lines)
    *** Delete File: <path>
    *** Update File: <path>
    *** Move to: <path>           optional, right after Update File
    @@ [context header]           starts a hunk; then ' <text>', '-<text>', '+<text>' lines
    *** End of File               optional, closes the last hunk of a file: it must match at the end
    *** End Patch

An empty line inside a hunk counts as an empty context line (planners often drop that space).
A header in unified-diff form (`@@ -12,3 +12,4 @@ def f():`) keeps only the text after the
ranges; line numbers are never trusted, hunks are located by their content.

Applying a hunk: find its old lines (context and '-' lines) at or after the end of the previous
hunk (after the header line when a header is given); an exact match wins, otherwise a match that
ignores trailing whitespace is accepted. `*** End of File` pins the old lines to the end of the
file. A hunk without old lines inserts after its header line, or at the end of the file. Context
lines keep the file's own text; CRLF files stay CRLF; a missing final newline stays missing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from herdr_mcp.errors import ToolError

__all__ = [
    "PATCH_MAX_FILES",
    "AddFile",
    "DeleteFile",
    "FileChange",
    "Hunk",
    "Patch",
    "UpdateFile",
    "apply_hunks",
    "new_file_content",
    "parse_patch",
    "render_patch",
]

# One patch is one reviewable change; 200 files is far above any hand-sized refactor and bounds
# the work (gates, git status, in-memory contents) a single call can ask for.
PATCH_MAX_FILES = 200

BEGIN = "*** Begin Patch"
END = "*** End Patch"
ADD = "*** Add File: "
DELETE = "*** Delete File: "
UPDATE = "*** Update File: "
MOVE = "*** Move to: "
END_OF_FILE = "*** End of File"

LineOp = Literal[" ", "-", "+"]
_UNIFIED_RANGES = re.compile(r"-\d+(?:,\d+)? \+\d+(?:,\d+)? @@ ?")


@dataclass(frozen=True)
class Hunk:
    """One '@@' block: optional context header, (op, text) lines, and the end-of-file pin."""

    header: str | None
    lines: tuple[tuple[LineOp, str], ...]
    end_of_file: bool = False

    @property
    def old(self) -> list[str]:
        """The lines the file must contain (context and removed)."""
        return [text for op, text in self.lines if op != "+"]

    @property
    def added(self) -> int:
        """How many lines the hunk adds."""
        return sum(1 for op, _ in self.lines if op == "+")

    @property
    def removed(self) -> int:
        """How many lines the hunk removes."""
        return sum(1 for op, _ in self.lines if op == "-")


@dataclass(frozen=True)
class AddFile:
    """Create `path` with `lines` (each written with a newline)."""

    path: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class DeleteFile:
    """Delete `path`."""

    path: str


@dataclass(frozen=True)
class UpdateFile:
    """Change `path` by `hunks`, and rename it to `move_to` when given."""

    path: str
    move_to: str | None
    hunks: tuple[Hunk, ...]


FileChange = AddFile | DeleteFile | UpdateFile


@dataclass(frozen=True)
class Patch:
    """A parsed patch: its file changes in order. A Patch that exists is well-formed."""

    changes: tuple[FileChange, ...]


def _invalid(message: str, line: int | None = None) -> ToolError:
    where = f"line {line}: " if line is not None else ""
    return ToolError(
        "patch_invalid",
        f"{where}{message}. Send '*** Begin Patch', file sections, then '*** End Patch'.",
        **({"line": line} if line is not None else {}),
    )


class _Parser:
    def __init__(self, lines: list[str], first_line: int) -> None:
        self.lines = lines
        self.index = 0
        self.first_line = first_line

    def line_number(self) -> int:
        return self.first_line + self.index

    def peek(self) -> str | None:
        return self.lines[self.index] if self.index < len(self.lines) else None

    def take(self) -> str:
        line = self.lines[self.index]
        self.index += 1
        return line

    def path_after(self, marker: str) -> str:
        number = self.line_number()
        path = self.take()[len(marker) :].strip()
        if not path:
            raise _invalid(f"'{marker.strip()}' needs a path", number)
        return path

    def changes(self) -> list[FileChange]:
        changes: list[FileChange] = []
        while (line := self.peek()) is not None:
            if line.startswith(ADD):
                changes.append(self.add_file())
            elif line.startswith(DELETE):
                changes.append(DeleteFile(self.path_after(DELETE)))
            elif line.startswith(UPDATE):
                changes.append(self.update_file())
            else:
                raise _invalid(
                    f"expected '*** Add File:', '*** Delete File:' or '*** Update File:', got {line[:80]!r}",
                    self.line_number(),
                )
        return changes

    def add_file(self) -> AddFile:
        path = self.path_after(ADD)
        lines: list[str] = []
        while (line := self.peek()) is not None and not line.startswith("*** "):
            if not line.startswith("+"):
                raise _invalid(
                    f"every line of an added file starts with '+', got {line[:80]!r}", self.line_number()
                )
            lines.append(self.take()[1:])
        return AddFile(path, tuple(lines))

    def update_file(self) -> UpdateFile:
        number = self.line_number()
        path = self.path_after(UPDATE)
        move_to = None
        if (line := self.peek()) is not None and line.startswith(MOVE):
            move_to = self.path_after(MOVE)
        hunks: list[Hunk] = []
        while (line := self.peek()) is not None and (line == "@@" or line.startswith("@@ ")):
            if hunks and hunks[-1].end_of_file:
                raise _invalid("'*** End of File' must close the last hunk of a file", self.line_number())
            hunks.append(self.hunk())
        if (line := self.peek()) is not None and not line.startswith("*** "):
            raise _invalid(f"expected a hunk starting with '@@', got {line[:80]!r}", self.line_number())
        if not hunks and move_to is None:
            raise _invalid(f"'*** Update File: {path}' has no hunks", number)
        return UpdateFile(path, move_to, tuple(hunks))

    def hunk(self) -> Hunk:
        number = self.line_number()
        header = self.take()[2:].strip()
        header = _UNIFIED_RANGES.sub("", header, count=1) if _UNIFIED_RANGES.match(header) else header
        lines: list[tuple[LineOp, str]] = []
        end_of_file = False
        while (line := self.peek()) is not None and not line.startswith("@@"):
            if line.rstrip() == END_OF_FILE:
                self.take()
                end_of_file = True
                break
            if line.startswith("*** "):
                break
            self.take()
            if line == "":
                lines.append((" ", ""))
            elif line[0] in (" ", "-", "+"):
                lines.append((_op(line[0]), line[1:]))
            else:
                raise _invalid(
                    f"hunk lines start with ' ', '-' or '+', got {line[:80]!r}", self.line_number() - 1
                )
        if not lines:
            raise _invalid("a hunk needs at least one line", number)
        return Hunk(header.strip() or None, tuple(lines), end_of_file)


def _op(char: str) -> LineOp:
    if char == "-":
        return "-"
    if char == "+":
        return "+"
    return " "


def parse_patch(text: str) -> Patch:
    """Parse patch text. Raises ToolError(`patch_invalid`) naming the offending line."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    first = 0
    while first < len(lines) and not lines[first].strip():
        first += 1
    last = len(lines)
    while last > first and not lines[last - 1].strip():
        last -= 1
    if first == last or lines[first].rstrip() != BEGIN:
        raise _invalid(f"the patch must start with '{BEGIN}'", first + 1 if first < len(lines) else 1)
    if last - first < 2 or lines[last - 1].rstrip() != END:
        raise _invalid(f"the patch must end with '{END}'", last)
    changes = _Parser(lines[first + 1 : last - 1], first + 2).changes()
    if not changes:
        raise _invalid("the patch has no file sections")
    if len(changes) > PATCH_MAX_FILES:
        raise _invalid(f"the patch touches {len(changes)} files; split it (at most {PATCH_MAX_FILES})")
    return Patch(tuple(changes))


def render_patch(patch: Patch) -> str:
    """The text form of a patch; `parse_patch(render_patch(p)) == p`."""
    out = [BEGIN]
    for change in patch.changes:
        if isinstance(change, AddFile):
            out.append(ADD + change.path)
            out.extend("+" + line for line in change.lines)
        elif isinstance(change, DeleteFile):
            out.append(DELETE + change.path)
        else:
            out.append(UPDATE + change.path)
            if change.move_to is not None:
                out.append(MOVE + change.move_to)
            for hunk in change.hunks:
                out.append("@@" if hunk.header is None else f"@@ {hunk.header}")
                out.extend(op + text for op, text in hunk.lines)
                if hunk.end_of_file:
                    out.append(END_OF_FILE)
    out.append(END)
    return "\n".join(out) + "\n"


def new_file_content(lines: Sequence[str]) -> str:
    """The content of an added file: every line ends with a newline."""
    return "".join(line + "\n" for line in lines)


def _matches(lines: list[str], old: list[str], at: int, same: Callable[[str, str], bool]) -> bool:
    return all(same(lines[at + k], old[k]) for k in range(len(old)))


def _exact(a: str, b: str) -> bool:
    return a == b


def _loose(a: str, b: str) -> bool:
    return a.rstrip() == b.rstrip()


def _find(lines: list[str], old: list[str], start: int) -> int | None:
    """First index >= start where `old` occurs: exactly, else ignoring trailing whitespace."""
    for same in (_exact, _loose):
        for at in range(start, len(lines) - len(old) + 1):
            if _matches(lines, old, at, same):
                return at
    return None


def _conflict(path: str, number: int, why: str) -> ToolError:
    return ToolError(
        "patch_conflict",
        f"Hunk {number} of {path} does not apply: {why}. Re-read the file and regenerate the patch.",
        path=path,
        hunk=number,
    )


def _locate(lines: list[str], hunk: Hunk, cursor: int, path: str, number: int) -> int:
    """Where the hunk's old lines start in `lines`."""
    start = cursor
    if hunk.header is not None:
        found = _find(lines, [hunk.header], cursor)
        if found is None:
            raise _conflict(path, number, f"context header {hunk.header[:80]!r} not found")
        start = found + 1
    old = hunk.old
    if not old:
        return start if hunk.header is not None else len(lines)
    if hunk.end_of_file:
        at = len(lines) - len(old)
        if at >= start and (_matches(lines, old, at, _exact) or _matches(lines, old, at, _loose)):
            return at
        raise _conflict(path, number, "its lines are not at the end of the file")
    found = _find(lines, old, start)
    if found is None:
        raise _conflict(path, number, f"context and removed lines not found after line {start}")
    return found


def apply_hunks(content: str, hunks: Sequence[Hunk], *, path: str) -> str:
    """Apply hunks in order to `content`. Raises ToolError(`patch_conflict`) naming path and hunk."""
    eol = "\r\n" if "\r\n" in content and content.count("\n") == content.count("\r\n") else "\n"
    final_newline = content == "" or content.endswith(eol)
    lines = content.split(eol)
    if final_newline:
        lines.pop()
    cursor = 0
    for number, hunk in enumerate(hunks, 1):
        at = _locate(lines, hunk, cursor, path, number)
        replacement: list[str] = []
        original = at
        for op, text in hunk.lines:
            if op == "+":
                replacement.append(text)
                continue
            if op == " ":
                replacement.append(lines[original])
            original += 1
        lines[at:original] = replacement
        cursor = at + len(replacement)
    if not lines:
        return ""
    return eol.join(lines) + (eol if final_newline else "")
