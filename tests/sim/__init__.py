"""Tests of the Herdr simulator (herdr_mcp.sim) against Herdr's source."""
