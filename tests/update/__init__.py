"""Tests of the updater (herdr_mcp.update): discovery, admission, staging, install, major migrations."""
