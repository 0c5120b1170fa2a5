"""The `exec_sessions` table of `state.db`: one row per exec session, so a later runtime can
answer for sessions it did not start (see runtime/exec_sessions for what it answers).

A row is inserted when a session starts (command, cwd, pid, the pid's identity, the runtime
instance, optionally the ledger operation it carries out) and updated when it settles (exit
status, totals, dropped bytes). Rows another runtime instance left `running` are marked `lost`
when a runtime starts. Writes are best effort: a database error is logged and the session goes
on in memory. Reads raise ToolError `state_unavailable`.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from herdr_mcp.errors import ToolError
from herdr_mcp.state.store import StateStore

__all__ = ["ExecSessionEnd", "ExecSessionRecords", "ExecSessionRow", "ExecSessionStart", "SessionState"]

_log = logging.getLogger(__name__)

#: `running` while its runtime drains it, `finished` once settled, `lost` when its runtime died.
SessionState = Literal["running", "finished", "lost"]

_SELECT_SESSION = (
    "SELECT session_id, state, pid, pid_start, exit_code, signal, stdout_total, stderr_total, "
    "stdout_dropped, stderr_dropped, started_at, finished_at FROM exec_sessions WHERE session_id = ?"
)


@dataclass(frozen=True)
class ExecSessionStart:
    """What is recorded when a session starts; times are Unix epoch milliseconds."""

    session_id: str
    op_id: str | None
    command: str
    cwd: str
    pid: int | None
    pid_start: str | None
    started_at_ms: int


@dataclass(frozen=True)
class ExecSessionEnd:
    """What is recorded when a session settles."""

    session_id: str
    finished_at_ms: int | None
    exit_code: int | None
    signal: str | None
    stdout_total: int
    stderr_total: int
    stdout_dropped: int
    stderr_dropped: int


@dataclass(frozen=True)
class ExecSessionRow:
    """A stored session as a later runtime reads it."""

    session_id: str
    state: SessionState
    pid: int | None
    pid_start: str | None
    exit_code: int | None
    signal: str | None
    stdout_total: int
    stderr_total: int
    stdout_dropped: int
    stderr_dropped: int
    started_at_ms: int
    finished_at_ms: int | None


class ExecSessionRecords:
    """The `exec_sessions` rows of one runtime instance."""

    def __init__(self, store: StateStore, runtime_instance: str) -> None:
        self._store = store
        self._instance = runtime_instance

    def mark_lost(self) -> None:
        """Every session another runtime left running: its pipes are gone with it."""
        with self._best_effort("mark lost sessions"), self._store.transaction() as tx:
            tx.execute(
                "UPDATE exec_sessions SET state = 'lost', finished_at = ? "
                "WHERE state = 'running' AND runtime_instance != ?",
                (int(time.time() * 1000), self._instance),
            )

    def insert(self, start: ExecSessionStart) -> None:
        """Record a session that started in this runtime."""
        with self._best_effort(f"record session {start.session_id}"), self._store.transaction() as tx:
            tx.execute(
                "INSERT INTO exec_sessions (session_id, op_id, command, cwd, pid, pid_start, "
                "runtime_instance, state, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?)",
                (
                    start.session_id,
                    start.op_id,
                    start.command,
                    start.cwd,
                    start.pid,
                    start.pid_start,
                    self._instance,
                    start.started_at_ms,
                ),
            )

    def finish(self, end: ExecSessionEnd) -> None:
        """Record how a session of this runtime ended."""
        # Whatever the row says (another runtime may have marked it lost meanwhile), the owner knows.
        with (
            self._best_effort(f"record the end of session {end.session_id}"),
            self._store.transaction() as tx,
        ):
            tx.execute(
                "UPDATE exec_sessions SET state = 'finished', finished_at = ?, exit_code = ?, signal = ?, "
                "stdout_total = ?, stderr_total = ?, stdout_dropped = ?, stderr_dropped = ? "
                "WHERE session_id = ?",
                (
                    end.finished_at_ms,
                    end.exit_code,
                    end.signal,
                    end.stdout_total,
                    end.stderr_total,
                    end.stdout_dropped,
                    end.stderr_dropped,
                    end.session_id,
                ),
            )

    def load(self, session_id: str) -> ExecSessionRow | None:
        """The row of `session_id`, whichever runtime started it."""
        rows = self._read(_SELECT_SESSION, (session_id,))
        if not rows:
            return None
        row = rows[0]
        return ExecSessionRow(
            session_id=row["session_id"],
            state=row["state"],
            pid=row["pid"],
            pid_start=row["pid_start"],
            exit_code=row["exit_code"],
            signal=row["signal"],
            stdout_total=row["stdout_total"],
            stderr_total=row["stderr_total"],
            stdout_dropped=row["stdout_dropped"],
            stderr_dropped=row["stderr_dropped"],
            started_at_ms=row["started_at"],
            finished_at_ms=row["finished_at"],
        )

    def expired(self, horizon_ms: int) -> list[str]:
        """Sessions over (finished or lost) at or before `horizon_ms`."""
        rows = self._read(
            "SELECT session_id FROM exec_sessions WHERE finished_at <= ? AND state != 'running'",
            (horizon_ms,),
        )
        return [row[0] for row in rows]

    def delete(self, session_ids: list[str]) -> None:
        """Forget these sessions."""
        with self._best_effort("forget expired sessions"), self._store.transaction() as tx:
            tx.executemany("DELETE FROM exec_sessions WHERE session_id = ?", [(sid,) for sid in session_ids])

    def session_of_operation(self, op_id: str) -> str | None:
        """The newest session that carries out ledger operation `op_id`."""
        rows = self._read(
            "SELECT session_id FROM exec_sessions WHERE op_id = ? ORDER BY started_at DESC LIMIT 1", (op_id,)
        )
        return rows[0][0] if rows else None

    def _read(self, query: str, parameters: tuple[Any, ...]) -> list[sqlite3.Row]:
        try:
            return self._store.connection().execute(query, parameters).fetchall()
        except sqlite3.Error as exc:
            raise ToolError(
                "state_unavailable",
                f"The runtime's state database could not be read ({exc}); retry, and restart the runtime "
                "if it persists.",
            ) from exc

    @contextlib.contextmanager
    def _best_effort(self, what: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error:
            _log.warning("state.db: could not %s", what, exc_info=True)
