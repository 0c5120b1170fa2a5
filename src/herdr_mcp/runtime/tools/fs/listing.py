"""fs_list's walk and where it stops: a listing cut so that one glob per call lists the rest.

The frozen catalog gives herdr_fs_list no cursor, only `path`, `recursive`, `glob` and
`max_entries` (at most 2,000). So a listing that does not fit is cut where the rest can be named
by globs, and the answer says which (`next_calls`): each is the same call with a glob of the form
`<literal path prefix>[!/<range>]**`, matching (whole path, since it holds a `/`) the entries of
one directory from a given name on, with everything under them. Such a glob cannot name "the
rest of this directory and the rest of its parent", so where the cut falls matters: among the
places in the second half of the cap, the cut goes where the rest needs the fewest globs (one,
where a directory ends and nothing after it is left above), the latest such place, and only at
a place where the globs exist (a name range the glob alphabet can spell).

A call whose glob has exactly that form (`parse_resume`) walks only the part of the tree the
glob can match (`WalkPrune`): the directories on its literal path are entered, not visited, and
only the names of the last one it accepts are visited, so continuing costs what the rest costs.
Its answers are those of the glob rule (`glob_match`) in every case: the pruned part holds no
match. Secret-looking entries are counted where the walk meets them, so the counts of the calls
of one listing add up to that of one uncapped walk.

docs/runtime.md (fs tools, herdr_fs_list) and docs/design/fs-list-cursor.md say why, and what a
cursor would add in the next epoch.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from herdr_mcp.runtime.boundary import WalkLevel, WalkPrune, walk_listing
from herdr_mcp.runtime.grep.query import glob_match
from herdr_mcp.text import shown_path

#: The catalog's maxLength of `glob`: a continuation glob longer than this cannot be asked for.
GLOB_MAX_CHARS = 512
#: At most this many places are tried for a cut whose rest the globs can name.
_MAX_TRIES = 64

# (levels with entries left, entries listed before it, hidden before it, where each level is)
_Place = tuple[int, int, int, list[tuple[WalkLevel, int]]]


@dataclass
class Listing:
    entries: list[dict[str, Any]] = field(default_factory=list)
    hidden: int = 0
    truncated: bool = False
    #: The globs that list the rest, deepest directory first (empty when complete, or when the
    #: rest cannot be named: a glob of another form, or names the glob alphabet cannot spell).
    rest: list[str] = field(default_factory=list)


def list_directory(
    top_fd: int,
    root_relative: str,
    *,
    recursive: bool,
    glob: str | None,
    max_entries: int,
    max_scanned: int,
) -> Listing:
    """The entries under the open directory `top_fd` (owned) as fs_list answers them.

    Depth-first in name order; secret-looking entries counted, not listed; at most `max_entries`
    listed and `max_scanned` visited. When cut short, `truncated` and, where they exist, the
    globs of the rest (`rest`)."""
    prefix = parse_resume(glob) if glob else None
    if prefix is not None and "/" in prefix and not recursive:
        prefix = None  # its matches lie below the top, which a flat listing never reaches
    prune = WalkPrune(tuple(prefix.split("/")[:-1]), _matcher(glob)) if glob and prefix is not None else None
    pattern = glob if glob and prefix is None else None
    continuable = pattern is None
    floor = max(1, (max_entries + 1) // 2)
    listing = Listing()
    entries = listing.entries
    hidden = scanned = 0
    fewest = 0  # the fewest globs any place seen so far needs (0: none seen)
    places: list[_Place] = []
    levels: list[WalkLevel] = []
    stop: tuple[WalkLevel, int] | None = None
    visits = walk_listing(top_fd, root_relative, recursive=recursive, prune=prune, levels=levels)
    with contextlib.closing(visits):
        for level, index, relative, kind, size, secret in visits:
            scanned += 1
            if scanned > max_scanned:
                stop = (level, index)
                break
            if secret:
                hidden += 1
                continue
            if pattern is not None and not glob_match(pattern, relative):
                continue
            count = len(entries)
            if count == max_entries:
                stop = (level, index)
                break
            if continuable and count >= floor and (level.waiting < fewest or not fewest):
                # A cut before this entry: everything listed so far, the rest in `waiting + 1`
                # globs. Kept only while no place needing fewer was seen (later wins a tie).
                fewest = level.waiting + 1
                places.append((fewest, count, hidden, _where(levels, index)))
            item = {"path": relative, "type": kind, "size": size if kind == "file" else None}
            if not relative.isascii() or "\\x" in relative:
                shown_path(item)
            entries.append(item)
        if stop is not None:
            listing.truncated = True
            if continuable:
                stop_level, stop_index = stop
                places.append((stop_level.waiting + 1, len(entries), hidden, _where(levels, stop_index)))
    listing.hidden = hidden
    if listing.truncated and continuable:
        _cut(listing, places)
    return listing


def _where(levels: list[WalkLevel], index: int) -> list[tuple[WalkLevel, int]]:
    """Where each open level goes on from, for a cut before entry `index` of the deepest."""
    where = [(level, level.resume) for level in levels]
    where[-1] = (levels[-1], index)
    return where


def _cut(listing: Listing, places: list[_Place]) -> None:
    """Cut at the place whose rest takes the fewest globs (the latest of those) that exist."""
    places.sort(key=lambda place: (place[0], -place[1]))
    for _, count, hidden, where in places[:_MAX_TRIES]:
        rest = _rest_globs(where)
        if rest is not None and (count > 0 or rest):
            del listing.entries[count:]
            listing.hidden = hidden
            listing.rest = rest or []
            return


def _rest_globs(where: list[tuple[WalkLevel, int]]) -> list[str] | None:
    globs = []
    for level, start in reversed(where):
        count = len(level.entries)
        if start >= count:
            continue
        first, end = level.place(start), level.place(count - 1) + 1
        if end - first != count - start:
            return None  # names the walk left out lie among the rest: no range spells it
        glob = resume_glob(level.prefix, level.names, first, end)
        if glob is None:
            return None
        globs.append(glob)
    return globs


def _matcher(glob: str) -> Callable[[str], bool]:
    def keep(relative: str) -> bool:
        return glob_match(glob, relative)

    return keep


# --- Continuation globs ------------------------------------------------------------------------


def _common(a: str, b: str) -> int:
    """The length of the common prefix of `a` and `b`."""
    size = min(len(a), len(b))
    index = 0
    while index < size and a[index] == b[index]:
        index += 1
    return index


def resume_glob(prefix: str, names: list[str], first: int, end: int) -> str | None:
    """A glob matching `prefix + names[k]` (and everything under it) for `first <= k < end` and
    no other name of `names` (the whole directory, in name order), or None when there is none of
    the form `<literal>[!/<range>]**`.

    The names from `first` on share a prefix `p` up to a position `L`; there `names[first]` has a
    character `c` that no earlier name beginning with `p` has (they have smaller ones, in a range
    the class leaves out). So the glob is `prefix + p + [!/lo-hi] + **`, lo-hi covering the
    characters the earlier names have at `L`. It exists when the name before `first` differs from
    `names[first]` no later than the names from `first` to `end` do among themselves, when the
    name after `end` does not begin with `p`, and when the characters can be spelt."""
    head, last = names[first], names[end - 1]
    at = min(_common(head, last), len(head) - 1)
    if first > 0 and _common(names[first - 1], head) > at:
        return None
    stem = head[:at]
    if end < len(names) and names[end].startswith(stem):
        return None
    low = bisect.bisect_left(names, stem, 0, first)
    if low < first and names[low] == stem:
        low += 1  # the name `p` itself: its own path is too short, what is under it has `/` at L
    body = ""
    if low < first:
        spelt = _range(names[low][at], names[first - 1][at], head[at])
        if spelt is None:
            return None
        body = spelt
    literal = _literal(prefix + stem)
    if literal is None:
        return None
    glob = f"{literal}[!/{body}]**"
    return glob if len(glob) <= GLOB_MAX_CHARS else None


# Characters a glob class cannot hold as a range's end without changing its meaning (`]` ends
# the class, `-` and `[` make Python's regex warn or read a set operation).
_UNSAFE_IN_CLASS = frozenset("[]-")


def _spellable(char: str) -> bool:
    # A lone surrogate (a byte of a name that is not UTF-8) cannot travel in a JSON argument.
    return not 0xD800 <= ord(char) <= 0xDFFF


def _range(low: str, high: str, above: str) -> str | None:
    """A class body leaving out every character from `low` to `high` and nothing from `above` on.

    The ends may move outwards (down from `low`, up towards `above`) past characters a class
    cannot hold: leaving out more characters below `above` leaves out no name that exists, since
    `low` and `high` are the smallest and largest ones there."""
    start = ord(low)
    while start > 1 and (chr(start) in _UNSAFE_IN_CLASS or not _spellable(chr(start))):
        start -= 1
    end = ord(high)
    while end < ord(above) and (chr(end) in _UNSAFE_IN_CLASS or not _spellable(chr(end))):
        end += 1
    if end >= ord(above) or chr(start) in _UNSAFE_IN_CLASS or not _spellable(chr(start)):
        return None
    return chr(start) if start == end else f"{chr(start)}-{chr(end)}"


def _literal(text: str) -> str | None:
    """`text` as glob characters that match exactly it, or None when it holds one that cannot be
    (`[`, whose only spelling is a class that Python's regex reads as a nested set)."""
    out = []
    for char in text:
        if char in "*?":
            out.append(f"[{char}]")
        elif char == "[" or not _spellable(char):
            return None
        else:
            out.append(char)
    return "".join(out)


def parse_resume(glob: str) -> str | None:
    """The literal prefix of `glob` when it has the continuation form `<literal>[!/...]**`,
    spelt as `resume_glob` spells one (`[*]` and `[?]` for those characters), else None."""
    if not glob.endswith("]**"):
        return None
    out: list[str] = []
    index = 0
    while index < len(glob):
        char = glob[index]
        if char == "[":
            # The glob rule: a class ends at the first `]` after its first character.
            close = glob.find("]", index + 2)
            body = glob[index + 1 : close]
            if close == len(glob) - 3 and body.startswith("!/"):
                literal = "".join(out)
                if any(part == "" for part in literal.split("/")[:-1]) or literal.startswith("/"):
                    return None
                return literal
            if close == -1 or body not in ("*", "?"):
                return None
            out.append(body)
            index = close + 1
            continue
        if char in "*?":
            return None
        out.append(char)
        index += 1
    return None
