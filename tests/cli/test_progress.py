"""herdr_mcp/progress.py: rich's bar and spinner on a terminal, plain lines (or nothing) elsewhere."""

from __future__ import annotations

import io
import re

import pytest

from herdr_mcp.progress import download_bar, printable_steps, steps

_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _frames(drawn: str) -> list[str]:
    """What a terminal shows, frame by frame: escapes dropped, split where the cursor went back."""
    return [frame for frame in re.split(r"[\r\n]", _ESCAPE.sub("", drawn)) if frame.strip()]


def test_no_download_bar_off_a_terminal() -> None:
    assert download_bar("asset.tar.gz", 100, io.StringIO()) is None


def test_the_download_bar_ends_on_one_line_with_the_whole_size() -> None:
    terminal = Terminal()
    bar = download_bar("herdr-mcp-1.2.0-linux-x86_64-cp311.tar.gz", 3 * 1024 * 1024, terminal)
    assert bar is not None
    bar.update(1024 * 1024)
    bar.update(3 * 1024 * 1024)
    bar.finish()
    drawn = terminal.getvalue()
    last = _frames(drawn)[-1]
    assert last.startswith("herdr-mcp-1.2.0-linux-x86_64")  # cut to fit 80 columns (StringIO)
    assert " ━━━━━━━━━━━━━━━━━━━━ " in last
    assert re.search(r"3\.0/3\.0 MiB 100%", last), repr(last)
    assert drawn.endswith("\n\x1b[?25h")  # the cursor comes back


def test_a_long_name_gives_way_on_a_narrow_terminal() -> None:
    terminal = Terminal()
    bar = download_bar("x" * 200 + ".tar.gz", 1024, terminal)
    assert bar is not None
    bar.update(1024)
    bar.finish()
    last = _frames(terminal.getvalue())[-1]
    assert len(last) <= 80  # io.StringIO terminals are 80 columns to rich
    assert "…" in last and "1.0/1.0 KiB 100%" in last


def test_steps_off_a_terminal_are_plain_lines() -> None:
    stream = io.StringIO()
    with steps(stream) as say:
        say("creating the build environment [hatchling]")
        say("building the wheel")
    assert stream.getvalue() == "creating the build environment [hatchling]\nbuilding the wheel\n"


def test_steps_on_a_terminal_are_ticked_off_and_shown_as_text() -> None:
    terminal = Terminal()
    with steps(terminal) as say:
        say("creating the build environment [bold]not markup[/bold]")
        say("building the wheel")
    frames = _frames(terminal.getvalue())
    assert "✓ creating the build environment [bold]not markup[/bold]" in frames
    assert frames[-1] == "✓ building the wheel"


def test_a_step_that_raised_is_marked_failed() -> None:
    terminal = Terminal()

    def build() -> None:
        with steps(terminal) as say:
            say("cloning")
            say("building the sdist")
            raise RuntimeError("hatchling failed")

    with pytest.raises(RuntimeError):
        build()
    frames = _frames(terminal.getvalue())
    assert "✓ cloning" in frames
    assert frames[-1] == "✗ building the sdist"


def test_printable_steps_escape_what_came_from_elsewhere() -> None:
    """`dev sync`, `dev rollback` and the release commands say steps naming paths and a git
    describe: a control character there reaches neither a terminal nor a log as itself."""
    line = "building /tmp/\x1b]0;pwned\x07repo at v1.2.0"
    for stream in (io.StringIO(), Terminal()):
        with printable_steps(stream) as say:
            say(line)
            say("installing it as generation g2")
        drawn = stream.getvalue()
        assert "\x07" not in drawn and "]0;pwned" in drawn, repr(drawn)
    assert "✓ installing it as generation g2" in _frames(drawn)
