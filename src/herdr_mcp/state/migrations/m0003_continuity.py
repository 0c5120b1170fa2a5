"""Schema 3: the continuity journal, Work Memory and handoff transfers."""

from herdr_mcp.state.migrations import Migration

MIGRATION = Migration("continuity", ())
