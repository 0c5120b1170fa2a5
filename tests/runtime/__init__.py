"""Tests of the runtime (herdr_mcp.runtime): tools, boundary, exec, audit, push, the browser plane, stdio."""
