"""Process state from /proc, for tests that prove a process (or a helper it started) is gone."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie nobody reaped yet counts as gone once all its threads are).

    A process's main thread shows as a zombie as soon as it has exited, while the process's other
    threads may still be exiting, holding the descriptors they all share: a SIGKILLed runtime's
    listening port was still taken then (test_generation_supervisor, CI under load)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    if text[text.rfind(")") + 2 :].split()[0] not in ("Z", "X"):
        return True
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except FileNotFoundError:
        return False


def read_until(stream: IO[str], wanted: str) -> list[str]:
    """Read `stream` line by line until a line that is `wanted` (stripped); the lines read.
    Raises AssertionError, with them, when the stream ends first."""
    seen = []
    for line in stream:
        seen.append(line)
        if line.strip() == wanted:
            return seen
    raise AssertionError(f"{wanted!r} never came: {''.join(seen)}")
