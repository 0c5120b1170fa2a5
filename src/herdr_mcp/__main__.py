import sys

from herdr_mcp.cli import main

sys.exit(main())
