"""What is new in a pane's output since it was last read.

Herdr answers `pane.read` with the last N lines of a pane, so two reads overlap: the second is
the first shifted up by the lines that scrolled out, plus what was written since, and the line
that was being written may have grown. `new_output` finds the largest such overlap and returns
what follows it; with no overlap (the screen was cleared, or more than N lines were written) the
whole of the new read is new.
"""

from __future__ import annotations

#: Characters of new output one `agent_output` event carries at most (the newest).
MAX_OUTPUT_CHARS = 2_000


def new_output(previous: str, current: str) -> str:
    """The text `current` adds to `previous` (module docstring); "" when nothing was added."""
    if current == previous:
        return ""
    before = previous.split("\n")
    after = current.split("\n")
    for shift in range(len(before)):
        kept = before[shift:]
        count = len(kept)
        if count > len(after):
            continue
        if after[: count - 1] == kept[:-1] and after[count - 1].startswith(kept[-1]):
            grown = after[count - 1][len(kept[-1]) :]
            return "\n".join([grown, *after[count:]])
    return current


def clip(text: str, limit: int = MAX_OUTPUT_CHARS) -> tuple[str, bool]:
    """The newest `limit` characters of `text` and whether anything was cut."""
    if len(text) <= limit:
        return text, False
    return text[-limit:], True
