"""Tests of the link (herdr_mcp.link): its server, its upstream client, its side of the Edge."""
