"""Schema 1: the idempotency ledger, exec sessions and the event log behind herdr_since.

Every `*_at` column holds Unix time in milliseconds.
"""

from herdr_mcp.state.migrations import Migration

MIGRATION = Migration(
    "core",
    (
        # One row per (kind, idempotency_key): recorded durably BEFORE the mutation acts.
        """CREATE TABLE operations (
            op_id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            idempotency_key TEXT NOT NULL,
            request_hash TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('in_flight', 'completed', 'failed')),
            result_json TEXT,
            runtime_instance TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            UNIQUE (kind, idempotency_key)
        ) STRICT""",
        "CREATE INDEX operations_expiry ON operations (expires_at)",
        "CREATE INDEX operations_state ON operations (state, runtime_instance)",
        # Exec sessions outlive the process that ran them: output stays in capped spool files.
        """CREATE TABLE exec_sessions (
            session_id TEXT PRIMARY KEY,
            op_id TEXT REFERENCES operations (op_id) ON DELETE SET NULL,
            command TEXT NOT NULL,
            cwd TEXT NOT NULL,
            pid INTEGER,
            -- Identifies the process behind pid (boot id and kernel start time), so that a later
            -- runtime never signals an unrelated process that reused the pid.
            pid_start TEXT,
            runtime_instance TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('running', 'finished', 'lost')),
            started_at INTEGER NOT NULL,
            finished_at INTEGER,
            exit_code INTEGER,
            signal TEXT,
            stdout_total INTEGER NOT NULL DEFAULT 0,
            stderr_total INTEGER NOT NULL DEFAULT 0,
            stdout_dropped INTEGER NOT NULL DEFAULT 0,
            stderr_dropped INTEGER NOT NULL DEFAULT 0
        ) STRICT""",
        "CREATE INDEX exec_sessions_finished ON exec_sessions (finished_at)",
        "CREATE INDEX exec_sessions_operation ON exec_sessions (op_id)",
        # Herdr events numbered for herdr_since; seq is the cursor and never goes back.
        """CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            name TEXT NOT NULL,
            workspace_id TEXT,
            data_json TEXT NOT NULL,
            at INTEGER NOT NULL
        ) STRICT""",
        "CREATE INDEX events_workspace ON events (workspace_id, seq)",
    ),
)
