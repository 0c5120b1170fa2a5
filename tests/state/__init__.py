"""Tests of state.db (herdr_mcp.state): the store, the ledger, the event log, continuity, handoff."""
