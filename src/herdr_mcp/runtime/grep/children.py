"""The search processes of both engines: each is killed when its call's deadline passes, and
shutdown kills every one still running (`stop_searches`)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, cast

from herdr_mcp.errors import ToolError

# Every search process alive in this runtime, so shutdown can stop them: a runtime thread waiting
# on one would otherwise keep the process alive until the search's deadline.
_LIVE: set[SearchChild] = set()
_LIVE_LOCK = threading.Lock()


def stop_searches() -> None:
    """Kill every running search (runtime shutdown); their calls fail with `runtime_stopping`."""
    with _LIVE_LOCK:
        children = list(_LIVE)
    for child in children:
        child.interrupt()


def stopping() -> ToolError:
    """The refusal of a search that shutdown killed."""
    return ToolError("runtime_stopping", "The runtime is shutting down; retry the search once it is back.")


class SearchChild:
    """A search process that is killed when the deadline passes; `timed_out` says whether it was,
    `interrupted` whether shutdown killed it first."""

    def __init__(self, command: list[str], *, cwd: Path, deadline: float, stdin: bytes | None = None) -> None:
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed by __exit__)
        try:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._errors,
                cwd=cwd,
            )
        except BaseException:
            self._errors.close()
            raise
        self.stdout = cast(IO[bytes], self.process.stdout)  # stdout=PIPE
        self.timed_out = False
        self.interrupted = False
        with _LIVE_LOCK:
            _LIVE.add(self)
        self._timer = threading.Timer(max(deadline - time.monotonic(), 0.0), self._expire)
        self._timer.start()
        if stdin is not None and self.process.stdin is not None:
            try:
                self.process.stdin.write(stdin)
                self.process.stdin.close()
            except OSError:
                pass  # the child already died (broken pipe); its exit status tells why

    def _expire(self) -> None:
        if self.process.poll() is None:
            self.timed_out = True
            self.process.kill()

    def interrupt(self) -> None:
        """Kill the child for shutdown (a no-op once it has ended)."""
        if self.process.poll() is None:
            self.interrupted = True
            self.process.kill()

    def stop(self) -> int:
        """Kill the child if it still runs (the caps may have stopped reading); its exit status."""
        self._timer.cancel()
        if self.process.poll() is None:
            self.process.kill()
        return self.process.wait()

    def error_text(self) -> str:
        """The last 4 KiB of what the child wrote to stderr."""
        self._errors.seek(0, os.SEEK_END)
        self._errors.seek(max(self._errors.tell() - 4096, 0))
        return self._errors.read().decode("utf-8", "replace").strip()

    def __enter__(self) -> SearchChild:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        with _LIVE_LOCK:
            _LIVE.discard(self)
        self.stop()
        self.stdout.close()
        self._errors.close()
