"""Process state from /proc, for tests that prove a process (or a helper it started) is gone."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie nobody reaped yet counts as gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return text[text.rfind(")") + 2 :].split()[0] not in ("Z", "X")
