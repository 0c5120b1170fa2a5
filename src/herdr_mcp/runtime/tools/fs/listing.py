"""fs_list's walk and where it stops: a listing cut where globs can name the rest.

The frozen catalog gives herdr_fs_list no cursor, only `path`, `recursive`, `glob` and
`max_entries` (at most 2,000). So a listing that does not fit is cut where the rest can be named
by globs, and the answer says which (`next_calls`): each is the same call with a glob of the form
`<literal path prefix>[!/<range>]**`, matching (whole path, since it holds a `/`) one group of a
directory's names after the cut (those sharing a prefix with the last name listed and going on
with a greater character, `rest_globs`), with everything under them. No such glob names "the
rest of this directory and the rest of its parent", so where the cut falls matters: among the
places in the second half of the cap, the cut goes where the rest needs the fewest globs (one,
where a directory ends at a round name and nothing after it is left above), the latest such
place, and only where the globs can be spelt.

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from herdr_mcp.runtime.boundary import WalkLevel, WalkPrune, walk_listing
from herdr_mcp.runtime.grep.query import glob_match
from herdr_mcp.text import shown_path

#: The catalog's maxLength of `glob`: a continuation glob longer than this cannot be asked for.
GLOB_MAX_CHARS = 512
#: In a literal prefix from `parse_resume`: any one character but `/` (a glob's `?`). No file
#: name holds it.
WILDCARD = "\x00"
#: At most this many places are tried for a cut whose rest the globs can name.
_MAX_TRIES = 64

# A place a listing may be cut: before entry `index` of `level`, with so many secrets hidden.
_Place = tuple[WalkLevel, int, int]


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
    prune = _prune(glob, prefix) if glob and prefix is not None else None
    pattern = glob if glob and prefix is None else None
    listing = Listing()
    entries = listing.entries
    hidden = scanned = 0
    # Where a cut may fall: before each listed entry, and where the listing stopped. Kept as runs
    # of consecutive entries of one directory with the same count of hidden secrets before them:
    # (entries listed before the run, its level, the index there of its first entry, hidden).
    runs = _Places()
    run_level: WalkLevel | None = None
    run_next = 0
    stopped = False
    visits = walk_listing(top_fd, root_relative, recursive=recursive, prune=prune)
    with contextlib.closing(visits):
        for level, index, relative, kind, size, secret in visits:
            scanned += 1
            if scanned > max_scanned:
                stopped = True
            elif secret:
                hidden += 1
                run_level = None
                continue
            elif pattern is not None and not glob_match(pattern, relative):
                run_level = None
                continue
            elif len(entries) == max_entries:
                stopped = True
            if level is not run_level or index != run_next or stopped:
                runs.add(len(entries), level, index, hidden)
                run_level = level
            if stopped:
                break
            run_next = index + 1
            item = {"path": relative, "type": kind, "size": size if kind == "file" else None}
            if not relative.isascii() or "\\x" in relative:
                shown_path(item)
            entries.append(item)
    listing.hidden = hidden
    if stopped:
        listing.truncated = True
        if pattern is None:
            _cut(listing, runs, max_entries)
    return listing


class _Places:
    """The places a listing may be cut, by the count of entries listed before each."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.runs: list[tuple[WalkLevel, int, int]] = []

    def add(self, count: int, level: WalkLevel, index: int, hidden: int) -> None:
        if self.starts and self.starts[-1] == count:  # the stop, at the place of the next entry
            self.runs[-1] = (level, index, hidden)
        else:
            self.starts.append(count)
            self.runs.append((level, index, hidden))

    def __len__(self) -> int:
        return self.starts[-1] + 1 if self.starts else 0

    def __getitem__(self, count: int) -> _Place:
        at = bisect.bisect_right(self.starts, count) - 1
        level, index, hidden = self.runs[at]
        return level, index + count - self.starts[at], hidden


def _cut(listing: Listing, places: _Places, max_entries: int) -> None:
    """Cut where the rest takes the fewest globs (the latest such place), looking first in the
    second half of the cap, then before it; leave the listing as it is if no rest can be spelt.

    `places[k]` is the place before the k-th entry listed (the last one, where it stopped); a cut
    there keeps `k` entries. A cut keeping none is only taken when it stopped at the scan limit
    before listing any (the secrets it passed are the progress). A place needs at least one glob
    for each directory with entries left (`waiting + 1`), so places are tried in that order and
    the search ends at one that needs no more."""
    floor = max(1, (max_entries + 1) // 2)
    counts = range(1 if len(places) > 1 else 0, len(places))

    chains: dict[int, list[str] | None] = {}
    best: tuple[int, list[str]] | None = None
    for count in islice(_in_preference(places, counts, floor), _MAX_TRIES):
        level, index, _ = places[count]
        if best is not None and (count < floor) != (best[0] < floor):
            break  # a cut in the second half was found: one before it is not better
        if best is not None and level.waiting + 1 >= len(best[1]):
            break  # no place from here on can need fewer globs
        if id(level) not in chains:
            chains[id(level)] = _chain_globs(level) if _prefix_spelt(level) else None
        if chains[id(level)] is None:
            continue
        deepest = _rest_globs(level, index)
        if deepest is None:
            continue
        above = chains[id(level)]
        if above is None:
            continue
        if best is None or len(deepest) + len(above) < len(best[1]):
            best = (count, [*deepest, *above])
    if best is not None:
        count, rest = best
        del listing.entries[count:]
        listing.hidden = places[count][2]
        listing.rest = rest


def _in_preference(places: _Places, counts: range, floor: int) -> Iterator[int]:
    """`counts` in the second half of the cap first, then before it; in each, those needing
    fewer directories' globs first (`waiting`, the same along a run), later first among equals."""
    bounds = [*places.starts[1:], len(places)]
    for low, high in ((max(floor, counts.start), counts.stop), (counts.start, min(floor, counts.stop))):
        by_waiting: dict[int, list[range]] = {}
        for at in range(len(places.starts) - 1, -1, -1):
            first, end = max(places.starts[at], low), min(bounds[at], high)
            if first < end:
                by_waiting.setdefault(places.runs[at][0].waiting, []).append(range(end - 1, first - 1, -1))
        for waiting in sorted(by_waiting):
            for run in by_waiting[waiting]:
                yield from run


def _prefix_spelt(level: WalkLevel) -> bool:
    """Whether `_literal` spells the path of `level` so that it names only that directory: an
    `_unspelt` character of a directory's name becomes `?`, which must match no other name beside
    it."""
    for above, resume in level.chain:
        name = above.entries[resume - 1].name
        if any(_unspelt(char) for char in name):
            pattern = "".join(WILDCARD if _unspelt(char) else char for char in name)
            if sum(matches_component(pattern, other) for other in above.names) != 1:
                return False
    return True


def matches_component(pattern: str, name: str) -> bool:
    """Whether `name` is `pattern`, a WILDCARD standing for any one character."""
    if WILDCARD not in pattern:
        return pattern == name
    return len(pattern) == len(name) and all(p in (WILDCARD, n) for p, n in zip(pattern, name, strict=True))


def _chain_globs(level: WalkLevel) -> list[str] | None:
    """The globs of what the directories above `level` hold after it, nearest first."""
    globs: list[str] = []
    for above, start in reversed(level.chain):
        rest = _rest_globs(above, start)
        if rest is None:
            return None
        globs += rest
    return globs


def _rest_globs(level: WalkLevel, start: int) -> list[str] | None:
    """The globs of `level.entries[start:]` (with everything under them), in name order."""
    count = len(level.entries)
    if start >= count:
        return []
    first, end = level.place(start), level.place(count - 1) + 1
    if end - first != count - start:
        return None  # names the walk left out lie among the rest: no range spells it
    return rest_globs(level.prefix, level.names, first, end)


def _prune(glob: str, prefix: str) -> WalkPrune:
    """The part of the tree a continuation glob can match: its literal path, then what it keeps."""
    components = prefix.split("/")[:-1]

    def component(depth: int, name: str) -> bool:
        return matches_component(components[depth], name)

    def keep(relative: str) -> bool:
        return glob_match(glob, relative)

    return WalkPrune(len(components), component, keep)


# --- Continuation globs ------------------------------------------------------------------------


def _alone(glob: str, prefix: str, stem: str, names: list[str], cursor: int, stop: int) -> bool:
    """Whether `glob` matches no name outside `names[cursor:stop]` though its literal part spells
    an `_unspelt` character of `stem` as `?`. Only names sharing `stem` up to the first such
    character can match; they lie together in `names`."""
    wild = next((at for at, char in enumerate(stem) if _unspelt(char)), None)
    if wild is None:
        return True
    low = bisect.bisect_left(names, stem[:wild])
    for index in range(low, _block_end(names, stem[:wild], low)):
        if not cursor <= index < stop and glob_match(glob, prefix + names[index]):
            return False
    return True


def _block_end(names: list[str], stem: str, low: int) -> int:
    """The index after the last name beginning with `stem` (`names` sorted, `names[low]` one)."""
    if not stem:
        return len(names)
    following = stem[:-1] + chr(ord(stem[-1]) + 1) if ord(stem[-1]) < 0x10FFFF else None
    return len(names) if following is None else bisect.bisect_left(names, following, low)


def rest_globs(prefix: str, names: list[str], first: int, end: int) -> list[str] | None:
    """Globs that together match `prefix + names[k]` (and everything under it) for
    `first <= k < end`, each such name once, and no other name of `names` (the whole directory,
    in name order); None when a character cannot be spelt in a glob.

    The names after `prev = names[first - 1]` are, in name order, those that extend `prev`, then
    for each shorter prefix `prev[:j]` those that go on with a character greater than `prev[j]`.
    Each such group is one glob, `prefix + prev[:j] + [!/lo-hi] + **`: the class leaves out `/`
    and the characters `lo`..`hi` the names up to `prev` have at `j` (none greater than
    `prev[j]`, so none of the group). Groups past `end` (names a continuation glob already left
    out) are not asked for; one that straddles `end` cannot be spelt."""
    if first == 0:
        if end != len(names):
            return None
        literal = _literal(prefix)
        return None if len(literal) > GLOB_MAX_CHARS - 6 else [f"{literal}[!/]**"]
    prev = names[first - 1]
    globs: list[str] = []
    cursor = first
    for at in range(len(prev), -1, -1):
        stem = prev[:at]
        if cursor >= end:
            break
        stop = _block_end(names, stem, 0)
        if cursor >= stop:
            continue
        if stop > end:
            return None
        body = ""
        if at < len(prev):
            low = bisect.bisect_left(names, stem, 0, first)
            if names[low] == stem:
                low += 1  # `stem` itself: too short to match, and below it comes `/`
            spelt = _range(names[low][at], prev[at], names[cursor][at])
            if spelt is None:
                return None
            body = spelt
        glob = f"{_literal(prefix + stem)}[!/{body}]**"
        if len(glob) > GLOB_MAX_CHARS:
            return None
        if not _alone(glob, prefix, stem, names, cursor, stop):
            return None
        globs.append(glob)
        cursor = stop
    return globs


# Characters a glob class cannot hold as a range's end as they are (`]` ends the class, `-` and
# `[` make Python's regex warn or read a set operation), and lone surrogates (a byte of a name
# that is not UTF-8), which cannot travel in a JSON argument.
def _awkward(code: int) -> bool:
    return code in (0x2D, 0x5B, 0x5D) or 0xD800 <= code <= 0xDFFF


def _range(low: str, high: str, above: str) -> str | None:
    """A class body leaving out every character from `low` to `high` and none from `above` on.

    The ends may move outwards past characters a class cannot hold (down from `low`, up towards
    `above`): leaving out more characters below `above` leaves out no name that exists, since
    `low` and `high` are the smallest and largest there. A `-` that cannot be moved past is
    written last, where a class reads it as itself."""
    start = ord(low)
    while start > 1 and _awkward(start):
        start -= 1
    end = ord(high)
    while _awkward(end) and end + 1 < ord(above):
        end += 1
    if not _awkward(end):
        return chr(start) if start == end else f"{chr(start)}-{chr(end)}"
    if end != 0x2D:
        return None
    below = ord(",")  # the character before `-`; `start` is at most that
    return ("," if start == below else f"{chr(start)}-,") + "-"


def _unspelt(char: str) -> bool:
    """`[` (its only class, `[[]`, Python's regex reads as a nested set) and a byte of a name
    that is not UTF-8 (a lone surrogate, which no JSON argument carries) have no glob of their
    own; they are spelt `?`, which matches any other character there too."""
    return char == "[" or 0xD800 <= ord(char) <= 0xDFFF


def _literal(text: str) -> str:
    """`text` as glob characters that match it: `*` and `?` as the classes `[*]` and `[?]`, an
    `_unspelt` character as `?` (`rest_globs` and `_prefix_spelt` check that it matches no other
    name there)."""
    out = []
    for char in text:
        if char in "*?":
            out.append(f"[{char}]")
        elif _unspelt(char):
            out.append("?")
        else:
            out.append(char)
    return "".join(out)


def parse_resume(glob: str) -> str | None:
    """The literal prefix of `glob` when it has the continuation form `<literal>[!/...]**`,
    spelt as `rest_globs` spells one (`[*]` and `[?]` for those characters, `?` for any one
    character, given back as WILDCARD), else None."""
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
        if char == "*":
            return None
        out.append(WILDCARD if char == "?" else char)
        index += 1
    return None
