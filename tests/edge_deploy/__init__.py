"""Tests of `herdr-mcp edge deploy` (herdr_mcp.edge_deploy)."""
