"""`python -m herdr_mcp.sim`: the same as `herdr-mcp sim`."""

from herdr_mcp.sim.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
