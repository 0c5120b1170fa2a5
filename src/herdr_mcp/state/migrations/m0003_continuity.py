"""Schema 3: the continuity journal, Work Memory and handoff transfers.

- A chain is the continuity identity of one long piece of Web work; it outlives conversations.
- Bindings point stable identities at a chain: a site's conversation or project (each belongs to
  at most one chain) and a Herdr workspace (which may serve several chains).
- Turns are finalized user/assistant messages, numbered per chain (`seq`), unique per
  (chain, turn_key) so an append is idempotent. A reclaimed turn keeps its row, hash and length;
  only its body goes, and only once a verified checkpoint covers it.
- Work Memory partitions are (project_ref, repo_id, work_chain_id), each on one chain; their
  checkpoints are numbered revisions (compare-and-swap), with evidence kept per partition.
- Transfers are handoff packages, stored whole so preparing one twice returns the same bytes;
  handoff documents record their lineage.

The FTS5 indexes are contentless (the text lives in the tables above) and are maintained by
`herdr_mcp.state.continuity` / `work_memory` in the same transaction as the row they index, from
`journal_text.index_form(text)`; their rowids are `turn_id` and `checkpoint_id`.
"""

from herdr_mcp.state.migrations import Migration

MIGRATION = Migration(
    "continuity",
    (
        """CREATE TABLE continuity_chains (
            continuity_id TEXT PRIMARY KEY,
            title TEXT,
            turn_count INTEGER NOT NULL DEFAULT 0 CHECK (turn_count >= 0),
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        ) STRICT""",
        "CREATE INDEX continuity_chains_updated ON continuity_chains (updated_at)",
        """CREATE TABLE continuity_bindings (
            binding_id INTEGER PRIMARY KEY,
            continuity_id TEXT NOT NULL REFERENCES continuity_chains (continuity_id) ON DELETE CASCADE,
            kind TEXT NOT NULL CHECK (kind IN ('conversation', 'project', 'workspace')),
            site TEXT NOT NULL CHECK (site IN ('chatgpt', 'zai', 'deepseek', 'herdr')),
            value TEXT NOT NULL,
            url TEXT,
            created_at INTEGER NOT NULL,
            seen_at INTEGER NOT NULL,
            CHECK ((kind = 'workspace') = (site = 'herdr')),
            UNIQUE (kind, site, value, continuity_id)
        ) STRICT""",
        # A conversation or a project journals into one chain; a workspace may serve several.
        """CREATE UNIQUE INDEX continuity_bindings_exclusive ON continuity_bindings (kind, site, value)
            WHERE kind IN ('conversation', 'project')""",
        "CREATE INDEX continuity_bindings_chain ON continuity_bindings (continuity_id)",
        """CREATE TABLE continuity_turns (
            turn_id INTEGER PRIMARY KEY,
            continuity_id TEXT NOT NULL REFERENCES continuity_chains (continuity_id) ON DELETE CASCADE,
            seq INTEGER NOT NULL CHECK (seq >= 1),
            turn_key TEXT NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
            site TEXT NOT NULL,
            conversation_id TEXT NOT NULL,
            browser_session_ref TEXT,
            body TEXT NOT NULL,
            body_sha256 TEXT NOT NULL,
            body_chars INTEGER NOT NULL,
            appended_at INTEGER NOT NULL,
            reclaimed_at INTEGER,
            reclaimed_by INTEGER REFERENCES work_memory_checkpoints (checkpoint_id),
            UNIQUE (continuity_id, seq),
            UNIQUE (continuity_id, turn_key)
        ) STRICT""",
        # `chain` holds the turn's continuity_id, so a search inside one chain is an index join.
        """CREATE VIRTUAL TABLE continuity_turns_fts USING fts5(
            body, chain, content = '', tokenize = 'unicode61 remove_diacritics 2'
        )""",
        """CREATE TABLE work_memory_partitions (
            partition_id INTEGER PRIMARY KEY,
            project_ref TEXT NOT NULL,
            repo_id TEXT NOT NULL,
            work_chain_id TEXT NOT NULL,
            continuity_id TEXT NOT NULL REFERENCES continuity_chains (continuity_id) ON DELETE CASCADE,
            current_revision INTEGER NOT NULL DEFAULT 0 CHECK (current_revision >= 0),
            created_at INTEGER NOT NULL,
            UNIQUE (project_ref, repo_id, work_chain_id)
        ) STRICT""",
        "CREATE INDEX work_memory_partitions_chain ON work_memory_partitions (continuity_id)",
        """CREATE TABLE work_memory_checkpoints (
            checkpoint_id INTEGER PRIMARY KEY,
            partition_id INTEGER NOT NULL REFERENCES work_memory_partitions (partition_id)
                ON DELETE CASCADE,
            revision INTEGER NOT NULL CHECK (revision >= 1),
            covers_through_seq INTEGER NOT NULL CHECK (covers_through_seq >= 1),
            content_json TEXT NOT NULL,
            request_sha256 TEXT NOT NULL,
            verified INTEGER NOT NULL CHECK (verified IN (0, 1)),
            problems_json TEXT NOT NULL,
            browser_session_ref TEXT,
            created_at INTEGER NOT NULL,
            UNIQUE (partition_id, revision)
        ) STRICT""",
        """CREATE INDEX work_memory_checkpoints_verified
            ON work_memory_checkpoints (partition_id, verified, revision)""",
        # Only each partition's latest verified checkpoint is indexed (older ones are superseded).
        """CREATE VIRTUAL TABLE work_memory_checkpoints_fts USING fts5(
            body, content = '', tokenize = 'unicode61 remove_diacritics 2'
        )""",
        """CREATE TABLE work_memory_evidence (
            evidence_id TEXT PRIMARY KEY,
            partition_id INTEGER NOT NULL REFERENCES work_memory_partitions (partition_id)
                ON DELETE CASCADE,
            kind TEXT NOT NULL
                CHECK (kind IN ('message', 'file', 'commit', 'command', 'task', 'note')),
            ref TEXT NOT NULL,
            note TEXT,
            turn_id INTEGER REFERENCES continuity_turns (turn_id),
            quote TEXT,
            body_sha256 TEXT,
            created_at INTEGER NOT NULL,
            CHECK ((kind = 'message') = (turn_id IS NOT NULL))
        ) STRICT""",
        "CREATE INDEX work_memory_evidence_partition ON work_memory_evidence (partition_id)",
        """CREATE TABLE work_memory_checkpoint_evidence (
            checkpoint_id INTEGER NOT NULL REFERENCES work_memory_checkpoints (checkpoint_id)
                ON DELETE CASCADE,
            evidence_id TEXT NOT NULL REFERENCES work_memory_evidence (evidence_id),
            position INTEGER NOT NULL,
            PRIMARY KEY (checkpoint_id, evidence_id)
        ) STRICT, WITHOUT ROWID""",
        """CREATE TABLE continuity_transfers (
            transfer_id TEXT PRIMARY KEY,
            continuity_id TEXT NOT NULL REFERENCES continuity_chains (continuity_id) ON DELETE CASCADE,
            parent_transfer_id TEXT REFERENCES continuity_transfers (transfer_id),
            request_sha256 TEXT NOT NULL,
            source_url TEXT NOT NULL,
            work_chain_id TEXT,
            through_seq INTEGER NOT NULL,
            checkpoint_id INTEGER REFERENCES work_memory_checkpoints (checkpoint_id),
            package_json TEXT NOT NULL,
            browser_session_ref TEXT,
            created_at INTEGER NOT NULL
        ) STRICT""",
        "CREATE INDEX continuity_transfers_chain ON continuity_transfers (continuity_id, created_at)",
        """CREATE TABLE continuity_handoff_documents (
            document_id TEXT PRIMARY KEY,
            continuity_id TEXT NOT NULL REFERENCES continuity_chains (continuity_id) ON DELETE CASCADE,
            through_seq INTEGER NOT NULL,
            checkpoint_id INTEGER REFERENCES work_memory_checkpoints (checkpoint_id),
            parent_transfer_id TEXT REFERENCES continuity_transfers (transfer_id),
            focus TEXT,
            document TEXT NOT NULL,
            document_sha256 TEXT NOT NULL,
            created_at INTEGER NOT NULL
        ) STRICT""",
        "CREATE INDEX continuity_handoff_documents_chain ON continuity_handoff_documents (continuity_id)",
    ),
)
