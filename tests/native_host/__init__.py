"""Tests of the native messaging host (herdr_mcp.native_host, browser_ipc.py)."""
