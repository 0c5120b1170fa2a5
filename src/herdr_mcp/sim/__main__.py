"""`python -m herdr_mcp.sim` is gone: the simulator's command line is `herdr-mcp sim` (cli/sim.py),
also `python -m herdr_mcp sim`. The simulator package imports nothing of the command line, so
this only says where the command went (exit 2, `command_moved`)."""

import sys

from herdr_mcp.errors import EXIT_USAGE
from herdr_mcp.terminal import error_line

if __name__ == "__main__":
    print(
        error_line(
            "command_moved", "`python -m herdr_mcp.sim` is now `herdr-mcp sim` (or `python -m herdr_mcp sim`)"
        ),
        file=sys.stderr,
    )
    raise SystemExit(EXIT_USAGE)
