"""The sessions one runtime holds, and what bounds them: retention and `max_sessions`.

Finished sessions stay readable for `retention_seconds`; pruning is lazy (on start, run and
read, at most once a second, and for rows of earlier runtimes at most once a minute, or at
every call when the retention is shorter) and removes the spool directory and the row. At most
`max_sessions` are kept: starting another one drops the oldest finished session with nothing
left running (at once from memory; its files in a worker thread), and is refused with
`too_many_sessions` when there is none. Sessions in memory that still run are not counted
(`sessions`: they are bounded by the calls waiting for them); a session that becomes durable
while every other one still runs goes beyond the limit rather than being killed for want of room.

Bookkeeping costs no scan of the table per call: a running count of the sessions in memory that
still run, and a dict of the finished ones with nothing left running (`idle`), which is what
pruning and room-making look at.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.exec_sessions.live import LiveSession, epoch_ms
from herdr_mcp.runtime.exec_sessions.output import remove_spool
from herdr_mcp.state.exec_sessions import ExecSessionRecords

__all__ = ["SessionIds", "SessionTable"]

# How often finished sessions in memory, and rows of earlier runtimes, are looked at for expiry
# (at most; retention is an hour, or the retention_seconds given, when that is shorter).
_PRUNE_SECONDS = 1.0
_RECORD_PRUNE_SECONDS = 60.0


class SessionIds:
    """Fresh session ids (`x` and 16 hex digits of the OS's randomness), read in batches."""

    def __init__(self) -> None:
        self._batch = b""

    def next(self) -> str:
        if not self._batch:
            self._batch = os.urandom(8 * 64)
        chunk, self._batch = self._batch[:8], self._batch[8:]
        return "x" + chunk.hex()


class SessionTable:
    """The live sessions of one runtime by id, on its event loop."""

    def __init__(
        self,
        spool_dir: Path,
        records: ExecSessionRecords | None,
        *,
        max_sessions: int,
        retention_seconds: float,
        remove_later: Callable[[LiveSession], None],
    ) -> None:
        """`remove_later(session)` removes a dropped session's spool files off the loop."""
        self._spool_dir = spool_dir
        self._records = records
        self.max_sessions = max_sessions
        self._retention_seconds = retention_seconds
        self._remove_later = remove_later
        self._sessions: dict[str, LiveSession] = {}
        # Sessions in memory that still run (not counted against max_sessions).
        self._unkept = 0
        # Finished sessions with nothing left running: what pruning and room-making may drop.
        self._idle: dict[str, LiveSession] = {}
        self._pruned = -math.inf
        self._records_pruned = -math.inf

    def get(self, session_id: str) -> LiveSession | None:
        return self._sessions.get(session_id)

    def values(self) -> Iterable[LiveSession]:
        return self._sessions.values()

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._sessions

    def add(self, session: LiveSession) -> None:
        """Hold a session that was just spawned (one in memory is not counted yet)."""
        self._sessions[session.session_id] = session
        if not session.durable:
            session.unkept = True
            self._unkept += 1

    def kept_now(self, session: LiveSession) -> None:
        """`session` counts against max_sessions from now on (it settled or became durable)."""
        if session.unkept:
            session.unkept = False
            self._unkept -= 1

    def idle(self, session: LiveSession) -> None:
        """`session` finished and nothing of it runs any more (LiveSession.on_idle)."""
        if self._sessions.get(session.session_id) is session:
            self._idle[session.session_id] = session

    def prune(self) -> None:
        """Drop what outlived its retention (rate-limited, see the module docs)."""
        now = time.monotonic()
        if now - self._pruned >= min(_PRUNE_SECONDS, self._retention_seconds):
            self._pruned = now
            horizon = now - self._retention_seconds
            for session in list(self._idle.values()):
                finished = session.finished_monotonic
                if finished is not None and finished <= horizon:
                    self.discard(session)
        if now - self._records_pruned >= min(_RECORD_PRUNE_SECONDS, self._retention_seconds):
            self.prune_records()

    def prune_records(self) -> None:
        """Forget sessions of earlier runtimes whose retention has ended: rows and spool files."""
        self._records_pruned = time.monotonic()
        if self._records is None:
            return
        horizon_ms = epoch_ms() - round(self._retention_seconds * 1000)
        expired = [sid for sid in self._records.expired(horizon_ms) if sid not in self._sessions]
        if not expired:
            return
        self._records.delete(expired)
        for session_id in expired:
            remove_spool(self._spool_dir / session_id)

    def make_room(self, limit: int | None = None) -> None:
        """Drop the oldest finished sessions until fewer than `limit` (max_sessions) are kept;
        raise ToolError `too_many_sessions` when every kept one still runs."""
        while len(self._sessions) - self._unkept >= (self.max_sessions if limit is None else limit):
            finished = self._idle.values()
            if not finished:
                raise ToolError(
                    "too_many_sessions",
                    f"All {self.max_sessions} sessions, or processes they started, are still running; "
                    "stop one with herdr_exec_kill or wait for one to finish.",
                )
            oldest = min(finished, key=lambda session: session.finished_monotonic or 0.0)
            # The new command need not wait for the old files: under disk load their removal
            # cost milliseconds (measured 4 ms of a 33 ms herdr_exec). The session is forgotten
            # at once; the runtime's shutdown waits for the worker thread.
            self.discard(oldest, files_later=True)

    def trim(self) -> None:
        """`make_room` for a session that is already running: beyond the limit when it must."""
        try:
            self.make_room(self.max_sessions + 1)
        except ToolError:
            return

    def discard(self, session: LiveSession, *, files_later: bool = False) -> None:
        """Forget `session`: from memory, and its files and row when it is durable."""
        del self._sessions[session.session_id]
        self._idle.pop(session.session_id, None)
        self.kept_now(session)
        if not session.durable:
            return  # nothing of it is anywhere but in memory
        if files_later:
            self._remove_later(session)
        else:
            remove_spool(session.directory)
        if self._records is not None:
            self._records.delete([session.session_id])
