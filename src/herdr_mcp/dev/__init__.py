"""The DEV plane: `herdr-mcp dev status|sync|rollback` (see `herdr_mcp.dev.plane`)."""
