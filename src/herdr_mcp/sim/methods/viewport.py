"""Protocol 22's pane viewport and copy methods: pane.scroll, pane.selection.read, pane.copy_motion,
pane.copy_search; and integration.list.

No Herdr 0.9 source was read. The shapes are herdr_python_sdk's models (the protocol-22 schema:
PaneScrollParams, PaneSelectionReadParams -> PaneSelectionResponse, PaneCopyMotionParams ->
PaneCopyMotionResponse, PaneCopySearchParams -> PaneCopySearchResponse, IntegrationListResponse);
the behaviour is Herdr 0.8.2's copy mode, which these methods expose to a client
(src/app/input/copy_mode.rs at 1c76079):
- points are {row, col} over the pane's whole retained text, row 0 the oldest screen row (copy
  mode's absolute rows: viewport_top_row = max_offset_from_bottom - offset_from_bottom);
- `line_end` goes to the row's last character (last_character_col, 0 on an empty row),
  `first_non_blank` to its first non-whitespace column (first_non_blank_col, else 0);
- word motions cross rows; a word is a run of letters, digits and `_` or a run of other
  non-blank characters, a big word any run of non-blank characters (the copy-mode tests
  "word motions cross rows and respect separators", "big word motions skip punctuation runs");
- paragraph motions move a row at a time and stop on a blank row or at the first/last row
  (copy_mode_paragraph), keeping the column;
- search is smart-case (case-sensitive only when the query has an upper-case letter,
  submit_copy_mode_search) and picks the current match as search_match_index does: forward, the
  first match starting after the cursor (or after `previous`'s end), else the first; backward,
  the last match ending before the cursor (or `previous`'s start), else the last.
Judgment calls, until an answer of a real Herdr 0.9 is recorded: a match range's `end` is its last
character (inclusive, as a selection's is); a selection is character-wise from the earlier to the
later point, both included; `content_revision` is the pane's revision and a stale one in a request
is not refused; pane.scroll answers the pane's PaneInfo (the reference allows `ok` or
`pane_info`; pane.rename and pane.focus, which change what a pane shows, answer pane_info at 20,
while pane.input.set answers ok).

integration.list follows src/app/api/integrations.rs over src/integration/registry.rs
integration_recommendations (protocol 20's source, where the same records back the settings
screen): every target, with its label and first command name, `available` when one of its
commands is on PATH, and `not_installed` (the simulator installs nothing).
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

from herdr_mcp.sim.model import Pane
from herdr_mcp.sim.terminal import SCREEN_ROWS

if TYPE_CHECKING:
    from herdr_mcp.sim.server import Simulator
    from herdr_mcp.sim.waits import Waits

Params = dict[str, Any]
Point = tuple[int, int]

# Herdr: src/integration/registry.rs integration_target_label / integration_target_command_names
# (the non-Windows names), in IntegrationTarget::ALL's order (src/api/schema/integrations.rs).
INTEGRATIONS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("pi", "pi", ("pi",)),
    ("omp", "omp", ("omp",)),
    ("claude", "claude", ("claude",)),
    ("codex", "codex", ("codex",)),
    ("copilot", "copilot", ("copilot",)),
    ("devin", "devin", ("devin",)),
    ("droid", "droid", ("droid",)),
    ("kimi", "kimi", ("kimi",)),
    ("opencode", "opencode", ("opencode",)),
    ("kilo", "kilo", ("kilo", "kilo-code")),
    ("hermes", "hermes", ("hermes",)),
    ("qodercli", "qodercli", ("qodercli",)),
    ("qwen", "qwen", ("qwen",)),
    ("cursor", "cursor", ("cursor-agent",)),
    ("mastracode", "mastracode", ("mastracode",)),
    ("antigravity_cli", "antigravity-cli", ("agy",)),
    ("grok", "grok", ("grok",)),
)


def _point(raw: dict[str, Any]) -> Point:
    return int(raw["row"]), int(raw["col"])


def _shape(point: Point) -> dict[str, int]:
    return {"row": point[0], "col": point[1]}


def _clamp(rows: list[str], point: Point) -> Point:
    if not rows:
        return 0, 0
    row = min(point[0], len(rows) - 1)
    return row, min(point[1], max(0, len(rows[row]) - 1))


async def pane_scroll(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    world = sim.world
    pane = world.pane(params["pane_id"])
    most = max(0, len(world.text_rows(pane)) - SCREEN_ROWS)
    pane.scroll_offset = min(int(params["offset_from_bottom"]), most)
    return {"type": "pane_info", "pane": world.pane_info(pane)}


async def pane_selection_read(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = sim.world.pane(params["pane_id"])
    rows = sim.world.text_rows(pane)
    start, end = sorted((_point(params["anchor"]), _point(params["cursor"])))
    picked: list[str] = []
    for row in range(start[0], min(end[0], len(rows) - 1) + 1):
        text = rows[row]
        first = start[1] if row == start[0] else 0
        last = end[1] if row == end[0] else len(text) - 1
        picked.append(text[first : last + 1])
    return {"type": "pane_selection", "pane_id": pane.pane_id, "text": "\n".join(picked)}


def _word_class(char: str, big: bool) -> int:
    """0 blank, 1 word character, 2 other; a big word has no 2."""
    if char.isspace() or char == "":
        return 0
    if big or char.isalnum() or char == "_":
        return 1
    return 2


def _cells(rows: list[str]) -> list[tuple[Point, str]]:
    """Every cell in reading order; a row break reads as a blank."""
    cells: list[tuple[Point, str]] = []
    for row, text in enumerate(rows):
        cells.extend(((row, col), char) for col, char in enumerate(text))
        cells.append(((row, len(text)), " "))
    return cells


def _word_motion(rows: list[str], cursor: Point, motion: str) -> Point:
    big = "big_word" in motion
    cells = _cells(rows)
    if not cells:
        return cursor
    at = next((i for i, (point, _) in enumerate(cells) if point >= cursor), len(cells) - 1)
    kinds = [_word_class(char, big) for _, char in cells]
    i = at
    if motion.startswith("next") and motion.endswith("_start"):
        start_kind = kinds[i]
        while i < len(cells) and kinds[i] == start_kind and start_kind != 0:
            i += 1
        while i < len(cells) and kinds[i] == 0:
            i += 1
        if i >= len(cells):
            return cursor
    elif motion.startswith("next") and motion.endswith("_end"):
        i += 1
        while i < len(cells) and kinds[i] == 0:
            i += 1
        if i >= len(cells):
            return cursor
        while i + 1 < len(cells) and kinds[i + 1] == kinds[i]:
            i += 1
    else:  # previous_(big_)word_start
        i -= 1
        while i >= 0 and kinds[i] == 0:
            i -= 1
        if i < 0:
            return cursor
        while i > 0 and kinds[i - 1] == kinds[i]:
            i -= 1
    return cells[i][0]


def _paragraph(rows: list[str], cursor: Point, step: int) -> Point:
    row = cursor[0]
    while 0 <= row + step < len(rows):
        row += step
        if not rows[row].strip():
            break
    return row, cursor[1]


async def pane_copy_motion(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = sim.world.pane(params["pane_id"])
    rows = sim.world.text_rows(pane)
    cursor = _clamp(rows, _point(params["cursor"]))
    motion = params["motion"]
    text = rows[cursor[0]] if rows else ""
    if motion == "line_end":
        last = max((col for col, char in enumerate(text) if not char.isspace()), default=None)
        target = (cursor[0], last if last is not None else 0)
    elif motion == "first_non_blank":
        first = next((col for col, char in enumerate(text) if not char.isspace()), 0)
        target = (cursor[0], first)
    elif motion.endswith("paragraph"):
        target = _paragraph(rows, cursor, -1 if motion.startswith("previous") else 1)
    else:
        target = _word_motion(rows, cursor, motion)
    return _motion_answer(pane, target)


def _motion_answer(pane: Pane, target: Point) -> dict[str, Any]:
    return {
        "type": "pane_copy_motion",
        "pane_id": pane.pane_id,
        "content_revision": pane.revision,
        "cursor": _shape(target),
    }


def _matches(rows: list[str], query: str) -> list[tuple[Point, Point]]:
    sensitive = any(char.isupper() for char in query)
    needle = query if sensitive else query.lower()
    found: list[tuple[Point, Point]] = []
    for row, text in enumerate(rows):
        hay = text if sensitive else text.lower()
        start = hay.find(needle)
        while start >= 0 and needle:
            found.append(((row, start), (row, start + len(needle) - 1)))
            start = hay.find(needle, start + len(needle))
    return found


async def pane_copy_search(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    pane = sim.world.pane(params["pane_id"])
    matches = _matches(sim.world.text_rows(pane), params["query"])
    cursor = _point(params["cursor"])
    previous = params.get("previous")
    current: int | None = None
    if matches:
        if params["direction"] == "forward":
            origin = _point(previous["end"]) if previous else cursor
            current = next((i for i, (start, _) in enumerate(matches) if start > origin), 0)
        else:
            origin = _point(previous["start"]) if previous else cursor
            before = [i for i, (_, end) in enumerate(matches) if end < origin]
            current = before[-1] if before else len(matches) - 1
    answer: dict[str, Any] = {
        "type": "pane_copy_search",
        "pane_id": pane.pane_id,
        "content_revision": pane.revision,
        "matches": [{"start": _shape(start), "end": _shape(end)} for start, end in matches],
        "total": len(matches),
    }
    if current is not None:
        answer["current"] = current
    return answer


async def integration_list(sim: Simulator, waits: Waits, rid: str, params: Params) -> dict[str, Any]:
    integrations = [
        {
            "target": target,
            "label": label,
            "command": commands[0],
            "available": any(shutil.which(command) is not None for command in commands),
            "state": "not_installed",
        }
        for target, label, commands in INTEGRATIONS
    ]
    return {"type": "integration_list", "integrations": integrations}


HANDLERS = {
    "pane.scroll": pane_scroll,
    "pane.selection.read": pane_selection_read,
    "pane.copy_motion": pane_copy_motion,
    "pane.copy_search": pane_copy_search,
    "integration.list": integration_list,
}
