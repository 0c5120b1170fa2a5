"""Tests of the command line (herdr_mcp.cli) as a user types it."""
