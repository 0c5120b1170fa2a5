"""Tests of runtime generations (herdr_mcp.generations): control files, the gate, the supervisor."""
