"""Progress on a terminal, drawn by `rich`: a bar for downloads, a spinner for the steps of a build.

Only on a terminal: on a pipe or a file the download shows nothing and the steps print one plain
line each (as they always did), so logs and `--json` output stay parseable. A download bar has no
refresh thread: it is redrawn from the loop that reads the download, at most every
`REDRAW_INTERVAL_S`, so a fast download is not slowed by the terminal. The spinner of a step
turns on rich's own refresh thread, since a step is one long subprocess (pip, hatchling).
Lines are shown as text, never as rich markup.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TransferSpeedColumn,
)
from rich.status import Status
from rich.table import Column
from rich.text import Text

from herdr_mcp.terminal import printable

#: A terminal redraws a download at most this often (seconds).
REDRAW_INTERVAL_S = 0.1


class DownloadBar:
    """`name ━━━━━━━━━╸━━━━━━━━━━ 12.3/45.6 MiB  27% 3.1 MB/s`, redrawn in place on one line."""

    def __init__(
        self, name: str, total: int, stream: TextIO, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._clock = clock
        self._progress = Progress(
            # The name gives way first on a narrow terminal: the figures stay whole on one line.
            TextColumn(
                "{task.description}",
                markup=False,
                table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1),
            ),
            BarColumn(bar_width=20),
            DownloadColumn(binary_units=True, table_column=Column(no_wrap=True)),
            TaskProgressColumn(table_column=Column(no_wrap=True)),
            TransferSpeedColumn(table_column=Column(no_wrap=True)),
            console=Console(file=stream),
            auto_refresh=False,
            expand=True,
        )
        self._task = self._progress.add_task(name, total=total)
        self._last = 0.0
        self._progress.start()

    def update(self, done: int) -> None:
        """`done` bytes of the total have arrived."""
        self._progress.update(self._task, completed=done)
        now = self._clock()
        if now - self._last >= REDRAW_INTERVAL_S:
            self._last = now
            self._progress.refresh()

    def finish(self) -> None:
        """Draw the last state and leave it on its own line."""
        self._progress.refresh()
        self._progress.stop()


def download_bar(name: str, total: int, stream: TextIO) -> DownloadBar | None:
    """A bar for a download of `total` bytes on `stream`, or None when `stream` is no terminal."""
    return DownloadBar(name, total, stream) if stream.isatty() else None


@contextlib.contextmanager
def steps(stream: TextIO) -> Iterator[Callable[[str], None]]:
    """A `say(line)` for the steps of long work (a build): on a terminal the running step turns
    behind a spinner and each finished one stays as a line, marked failed when the work raised;
    elsewhere every line is printed as it comes."""
    if not stream.isatty():
        yield lambda line: print(line, file=stream, flush=True)
        return
    console = Console(file=stream)
    status: Status | None = None
    current = Text()

    def say(line: str) -> None:
        nonlocal status, current
        if status is None:
            status = console.status(Text(line))
            status.start()
        else:
            console.print(Text.assemble(("✓ ", "green"), current))
            status.update(Text(line))
        current = Text(line)

    failed = False
    try:
        yield say
    except BaseException:
        failed = True
        raise
    finally:
        if status is not None:
            status.stop()
            console.print(Text.assemble(("✗ ", "red") if failed else ("✓ ", "green"), current))


@contextlib.contextmanager
def printable_steps(stream: TextIO) -> Iterator[Callable[[str], None]]:
    """`steps(stream)` for lines that carry text from elsewhere (paths, pip's words, a git
    describe): each is escaped (`terminal.printable`) before it reaches the terminal."""
    with steps(stream) as say:
        yield lambda line: say(printable(line))
