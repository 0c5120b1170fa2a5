"""Schema 2: agent tasks (herdr_prompt / agent.task.dispatch) and the parent inbox."""

from herdr_mcp.state.migrations import Migration

MIGRATION = Migration(
    "tasks",
    (
        """CREATE TABLE tasks (
            task_id TEXT PRIMARY KEY,
            turn_id TEXT NOT NULL UNIQUE,
            op_id TEXT REFERENCES operations (op_id) ON DELETE SET NULL,
            browser_session_ref TEXT,
            target TEXT NOT NULL,
            pane_id TEXT,
            workspace_id TEXT,
            agent_name TEXT,
            status_at_submit TEXT,
            seq_at_submit INTEGER,
            prior_settle_pending INTEGER NOT NULL DEFAULT 0,
            saw_activity INTEGER NOT NULL DEFAULT 0,
            state TEXT NOT NULL
                CHECK (state IN ('submitting', 'submitted', 'working', 'completed', 'blocked', 'failed')),
            submitted_at INTEGER NOT NULL,
            settled_at INTEGER,
            detail_json TEXT
        ) STRICT""",
        "CREATE INDEX tasks_open ON tasks (state, pane_id)",
        # One row per task and outcome: a settle is delivered to the inbox exactly once.
        """CREATE TABLE inbox (
            inbox_id INTEGER PRIMARY KEY AUTOINCREMENT,
            task_id TEXT NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
            browser_session_ref TEXT,
            outcome TEXT NOT NULL CHECK (outcome IN ('completed', 'blocked', 'failed')),
            summary_json TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            acked_at INTEGER,
            UNIQUE (task_id, outcome)
        ) STRICT""",
        "CREATE INDEX inbox_unacked ON inbox (browser_session_ref, acked_at, inbox_id)",
    ),
)
