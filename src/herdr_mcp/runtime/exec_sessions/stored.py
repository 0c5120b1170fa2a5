"""A session known only from its `exec_sessions` row: started by an earlier runtime.

Surviving a restart
-------------------
With a `StateStore`, every session has a row in `state.db` (state/exec_sessions.py). A later
runtime answers `read`, `kill` and `result_of` for sessions it does not hold in memory from
that row and the spool files:

- A finished session stays readable until its retention ends, exactly as before the restart.
- A session whose row still says running but belongs to another runtime instance when this one
  starts is `lost`: its pipes died with the runtime that drained them, so its output up to that
  moment is all there will ever be. It reads as `running: false, lost: true, exit_code: null`.
  (If that other runtime is in fact still alive, its own finish update wins over `lost`.)
- Killing a lost session signals its process group only when the pid still names the very
  process that was started (same boot, same kernel start time); when that cannot be confirmed
  nothing is sent to the group, and the answer's `kill_result` says what was done. Processes
  that carry the session's variable (Linux) are its own whatever happened to the group: `read`
  reports them and `kill` stops them, for finished sessions too.
"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from herdr_mcp.runtime.exec_sessions.live import descendants_fields
from herdr_mcp.runtime.exec_sessions.output import StreamName, StreamView
from herdr_mcp.runtime.exec_sessions.processes import (
    ProcessTable,
    group_alive,
    orphan_group_status,
    signal_group,
    signal_marked,
    start_ticks,
)
from herdr_mcp.state.exec_sessions import ExecSessionRow, SessionState

__all__ = ["KillResult", "StoredSession", "kill_stored"]

#: What killing a session of an earlier runtime did (`kill_result` of its answer).
KillResult = Literal["terminated", "killed", "already_gone", "unverified"]

# After SIGKILL the leader dies at once unless it is stuck in the kernel; do not wait forever.
_EXIT_WAIT_SECONDS = 5.0
_POLL_SECONDS = 0.02
_KILL_MESSAGES: dict[KillResult, str] = {
    "terminated": "Processes of the session were still running and stopped on SIGTERM.",
    "killed": "Processes of the session were still running and needed SIGKILL after the grace period.",
    "already_gone": "No process of this session is running any more; nothing was sent.",
    "unverified": (
        "A process that may belong to this session still exists, but it cannot be confirmed to be the "
        "one that was started (its pid may have been reused), so nothing was sent; check it with ps "
        "and stop it by hand if it is yours."
    ),
}


@dataclass(frozen=True)
class StoredSession:
    """A session known only from its `exec_sessions` row (started by an earlier runtime)."""

    session_id: str
    directory: Path
    state: SessionState
    pid: int | None
    pid_start: str | None
    exit_code: int | None
    signal_name: str | None
    totals: dict[StreamName, int]
    dropped: dict[StreamName, int]
    started_at_ms: int
    finished_at_ms: int | None

    @classmethod
    def from_row(cls, row: ExecSessionRow, spool_dir: Path) -> StoredSession:
        """The session a row describes; its spool files are under `spool_dir`."""
        return cls(
            session_id=row.session_id,
            directory=spool_dir / row.session_id,
            state=row.state,
            pid=row.pid,
            pid_start=row.pid_start,
            exit_code=row.exit_code,
            signal_name=row.signal,
            totals={"stdout": row.stdout_total, "stderr": row.stderr_total},
            dropped={"stdout": row.stdout_dropped, "stderr": row.stderr_dropped},
            started_at_ms=row.started_at_ms,
            finished_at_ms=row.finished_at_ms,
        )

    @property
    def running(self) -> bool:
        """Still running under another, live runtime (a lost session is not running)."""
        return self.state == "running"

    def view(self, stream: StreamName) -> StreamView:
        """What a read of `stream` may see: the recorded totals when finished, else the file as it is."""
        path = self.directory / stream
        try:
            size = path.stat().st_size
        except OSError:
            size = 0
        if self.state == "finished":
            total, dropped = self.totals[stream], self.dropped[stream]
            return StreamView(path, min(size, total - dropped), total, dropped, final=True, settled=True)
        # Lost: what is in the file is all there is (the totals were never recorded).
        # Running: the other runtime is still appending.
        return StreamView(path, size, size, 0, final=not self.running, settled=not self.running)

    def state_answer(self) -> dict[str, Any]:
        """`session_id`, `running`, `exit_code`, `signal`, and `lost: true` for a lost session."""
        answer: dict[str, Any] = {
            "session_id": self.session_id,
            "running": self.running,
            "exit_code": self.exit_code,
            "signal": self.signal_name,
        }
        if self.state == "lost":
            answer["lost"] = True
        return answer

    def marked(self, table: ProcessTable | None) -> set[int] | None:
        """Live processes carrying this session's variable, its shell included; None where they
        cannot be found (no /proc) or another runtime still owns the session."""
        if table is None or self.state == "running":
            return None
        return table.marked(self.session_id, start_ticks(self.pid_start))

    def descendants_answer(self) -> dict[str, Any]:
        """As for a live session; a lost shell that still runs is not its own descendant."""
        marked = self.marked(ProcessTable.read())
        if marked is None:
            return {"descendants_running": None}
        return descendants_fields(sorted(marked - {self.pid if self.pid is not None else -1}))


async def kill_stored(session: StoredSession, grace_ms: int) -> dict[str, Any]:
    """Kill a session this runtime holds no pipes of; see `ExecSessions.kill`."""
    answer = session.state_answer() | {
        "stdout_total_bytes": session.view("stdout").total,
        "stderr_total_bytes": session.view("stderr").total,
    }
    if session.state == "finished" and not session.marked(ProcessTable.read()):
        return answer | {"already_finished": True, "escalated": False} | session.descendants_answer()
    outcome = await _stop_orphan(session, grace_ms)
    if outcome != "unverified":
        answer["running"] = False
    return (
        answer
        | {
            "already_finished": outcome == "already_gone",
            "escalated": outcome == "killed",
            "kill_result": outcome,
            "message": _KILL_MESSAGES[outcome],
        }
        | session.descendants_answer()
    )


async def _stop_orphan(session: StoredSession, grace_ms: int) -> KillResult:
    """TERM, then KILL after `grace_ms`, to what an earlier runtime's session left: its process
    group only when its pid still names the shell that was started (a lost session), and the
    processes carrying its variable (each checked again before the signal)."""
    status: Literal["alive", "gone", "unsure"] = "gone"
    if session.state == "lost" and session.pid is not None:
        status = orphan_group_status(session.pid, session.pid_start)
    group = session.pid if status == "alive" else None

    def outside() -> set[int]:
        table = ProcessTable.read()
        marked = session.marked(table) or set()
        return marked - table.group(group) if table is not None and group is not None else marked

    def left() -> bool:
        return (group is not None and group_alive(group)) or bool(outside())

    def send(signum: signal.Signals) -> None:
        if group is not None:
            signal_group(group, signum)
        for pid in sorted(outside()):
            signal_marked(pid, session.session_id, signum)

    if not left():
        return "unverified" if status == "unsure" else "already_gone"
    loop = asyncio.get_running_loop()
    send(signal.SIGTERM)
    deadline = loop.time() + grace_ms / 1000
    while left():
        if loop.time() >= deadline:
            send(signal.SIGKILL)
            give_up = loop.time() + _EXIT_WAIT_SECONDS
            while left() and loop.time() < give_up:
                await asyncio.sleep(_POLL_SECONDS)
            return "killed"
        await asyncio.sleep(_POLL_SECONDS)
    return "terminated"
