"""Looks at what exited shells left behind, off the event loop, one `/proc` scan for many.

After a session's shell exits (it stays a zombie on Linux, so its process-group id cannot be
reused), the session looks for its processes still alive: its group, and those carrying its
variable (see `processes`). A look is a scan of `/proc` (`ProcessTable.read`), hundreds of
microseconds of Python on a busy machine, so it is never taken on the event loop and never
once per shell when several exit at about the same time: `Looks.look` may be called from any
thread (a spawn thread that saw its command end, or the look thread for exits the loop saw), and
every call that arrives while a scan is under way is answered by the next scan, together.

When no process at all was created since a shell (the last pid handed out is still the shell's:
`processes.last_pid`), nothing can be left and no scan is needed; this answers most looks on a
quiet machine. A look only reads the sessions' state; taking its answer in (reaping the shell, marking the
session done) is `LiveSession.take_look`'s, on the loop, or the spawn thread's before it hands
the session over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from herdr_mcp.runtime.exec_sessions.processes import ProcessTable, last_pid, own_shells

if TYPE_CHECKING:
    from herdr_mcp.runtime.exec_sessions.live import LiveSession
    from herdr_mcp.runtime.exec_sessions.workers import Workers

__all__ = ["Looks", "LoopLooks"]

_log = logging.getLogger(__name__)

# How often a finished session's leftover processes are looked at: they are reported and
# killable at any moment regardless; this only bounds how long a zombie shell is kept after
# they end (and, where shells are not kept, the window in which a group id could be reused).
DESCENDANT_POLL_SECONDS = 1.0


@dataclass(eq=False)
class _Request:
    sessions: Sequence[LiveSession]
    done: threading.Event = field(default_factory=threading.Event)
    found: list[bool] | None = None
    error: BaseException | None = None


class Looks:
    """Coalesces looks: at most one scan at a time; requests made meanwhile share the next."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[_Request] = []
        self._scanning = False
        #: Scans taken, and looks answered without one (for tests and diagnostics).
        self.scans = 0
        self.proofs = 0

    def look(self, sessions: Sequence[LiveSession]) -> list[bool]:
        """For each session (its shell has exited), whether anything of it other than its shell
        is alive. Blocks (a worker thread) until a scan that started after this call has answered,
        unless no process was created since the shell (`processes.last_pid`)."""
        if len(sessions) == 1 and sessions[0].pid is not None and last_pid() == sessions[0].pid:
            self.proofs += 1
            return [False]
        request = _Request(sessions)
        with self._lock:
            self._pending.append(request)
            leading = not self._scanning
            self._scanning = True
        if leading:
            self._lead()
        else:
            request.done.wait()
        if request.error is not None:
            raise request.error
        assert request.found is not None
        return request.found

    def _lead(self) -> None:
        """Scan for every pending request until none is left (the other callers wait)."""
        while True:
            with self._lock:
                batch, self._pending = self._pending, []
                if not batch:
                    self._scanning = False
                    return
            try:
                found = _scan([session for request in batch for session in request.sessions])
            except BaseException as exc:  # every caller of this scan gets it
                for request in batch:
                    request.error = exc
                    request.done.set()
                continue
            self.scans += 1
            start = 0
            for request in batch:
                request.found = found[start : start + len(request.sessions)]
                start += len(request.sessions)
                request.done.set()


def _scan(sessions: Sequence[LiveSession]) -> list[bool]:
    starts = [session.since for session in sessions]
    since = None if None in starts else min(start for start in starts if start is not None)
    # Many commands at once: the shells of the others are neither read nor their sessions'
    # environments (ProcessTable.read, marked).
    table = ProcessTable.read(since, shells=own_shells())
    return [session.survivors(table)[0] for session in sessions]


class LoopLooks:
    """The looks for exits the event loop saw (a command it drained), taken in the look thread;
    then every `DESCENDANT_POLL_SECONDS` for the sessions whose shells left processes, until
    they are gone. `left(session)` is called on the loop for a session something of which is
    still alive after its shell's exit (or when that could not be looked at); every session's
    `checked` is set once its first look is taken in."""

    def __init__(
        self,
        looks: Looks,
        thread: Workers,
        sessions: Callable[[], Iterable[LiveSession]],
        left: Callable[[LiveSession], None],
    ) -> None:
        self._looks = looks
        self._thread = thread
        self._sessions = sessions
        self._left = left
        self._queued: list[LiveSession] = []
        self._looking: asyncio.Future[None] | None = None
        self._watcher: asyncio.Task[None] | None = None

    def look_at(self, session: LiveSession) -> None:
        """Queue a look at what `session`'s exited shell left (one scan for all queued)."""
        self._queued.append(session)
        if self._looking is None:
            self._start()

    def taken_in(self, session: LiveSession, left: bool | None) -> None:
        """What a look after the shell's exit found (`left`; None: unknown) is taken in."""
        if left is None or left:
            self._left(session)
            if self._watcher is None or self._watcher.done():
                self._watcher = session.loop.create_task(self._watch(), name="exec-descendants")
        session.checked.set()

    async def stop(self) -> None:
        """Stop watching; wait for the look under way (its answers are taken in)."""
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None

    async def settled(self) -> None:
        """Wait until no look is under way."""
        while self._looking is not None:
            await asyncio.wait([self._looking])

    def _start(self) -> None:
        batch, self._queued = self._queued, []
        loop = batch[0].loop
        self._looking = loop.create_future()
        self._thread.submit(
            loop, self._looks.look, (batch,), lambda found, error: self._looked(batch, found, error)
        )

    def _looked(
        self, batch: list[LiveSession], found: Sequence[bool] | None, error: BaseException | None
    ) -> None:
        looking, self._looking = self._looking, None
        if error is not None:  # a look that failed is taken again by the watcher
            _log.warning("could not look for processes exec sessions left", exc_info=error)
        for index, session in enumerate(batch):
            self.taken_in(session, None if found is None else session.take_look(found[index]))
        if looking is not None:
            looking.set_result(None)
        if self._queued:
            self._start()

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(DESCENDANT_POLL_SECONDS)
            left = [s for s in self._sessions() if s.exited.is_set() and not s.descendants_gone]
            if not left:
                return
            for session in left:
                self.look_at(session)
