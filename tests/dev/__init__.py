"""Tests of the DEV plane (herdr_mcp.dev)."""
