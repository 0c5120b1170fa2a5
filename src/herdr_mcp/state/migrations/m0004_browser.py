"""Schema 4: the browser plane (docs/browser-protocol.md): scope bindings, the agent states the
push events are derived from, and the lease that names the one runtime deriving them.

Every `*_at` column holds Unix time in milliseconds. The push events themselves are rows of the
`events` table (schema 1), so their `seq` is the herdr_since cursor.
"""

from herdr_mcp.state.migrations import Migration

MIGRATION = Migration(
    "browser",
    (
        # A web conversation scope bound to one Herdr workspace (state/bindings.py).
        """CREATE TABLE browser_bindings (
            scope TEXT PRIMARY KEY,
            workspace_id TEXT NOT NULL,
            label TEXT,
            active_conv_key TEXT,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        ) STRICT""",
        "CREATE INDEX browser_bindings_workspace ON browser_bindings (workspace_id)",
        # The last status the push plane recorded per agent pane (state/push.py): a transition
        # is written to `events` only when it differs from this row, in the same transaction.
        """CREATE TABLE push_agents (
            pane_id TEXT PRIMARY KEY,
            workspace_id TEXT NOT NULL,
            agent TEXT NOT NULL,
            status TEXT NOT NULL,
            seq INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        ) STRICT""",
        "CREATE INDEX push_agents_workspace ON push_agents (workspace_id, status)",
        # Which runtime derives push events (one at a time, so two generations never record
        # one transition twice); a lease that its holder renews.
        """CREATE TABLE push_lease (
            name TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            pid INTEGER NOT NULL,
            expires_at INTEGER NOT NULL
        ) STRICT""",
        "CREATE INDEX events_name ON events (name, seq)",
    ),
)
