"""Tests of the Herdr client and its reference (herdr_mcp.herdr)."""
