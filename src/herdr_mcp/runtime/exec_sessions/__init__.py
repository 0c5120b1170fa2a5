"""Shell sessions for herdr_exec and herdr_exec_start/read/kill, one module per concept:

- `sessions`: `ExecSessions`, the owner of every session of one runtime (start, run, read,
  kill, prune, shutdown);
- `live`: a session this runtime started (its pipes drained into the spool, its exit, what it
  leaves behind);
- `output`: the capped spool files and what reads of them return (UTF-8 safe chunks);
- `stored`: sessions of an earlier runtime, from their `state.db` rows
  (`herdr_mcp.state.exec_sessions` holds the SQL);
- `processes`: what belongs to a session and signalling only that;
- `login_environment`: the user's login environment, captured once for `bash -c`.
"""

from herdr_mcp.runtime.exec_sessions.output import DEFAULT_READ_BYTES, utf8_chunk_length
from herdr_mcp.runtime.exec_sessions.sessions import (
    DEFAULT_GRACE_MS,
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_RETENTION_SECONDS,
    ExecSessions,
)
from herdr_mcp.runtime.exec_sessions.stored import KillResult

__all__ = [
    "DEFAULT_GRACE_MS",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_READ_BYTES",
    "DEFAULT_RETENTION_SECONDS",
    "ExecSessions",
    "KillResult",
    "utf8_chunk_length",
]
