"""Tests of user services (herdr_mcp.service): launchd and systemd units."""
