"""Tests of the frozen catalogs and the contract identity (herdr_mcp.contract)."""
