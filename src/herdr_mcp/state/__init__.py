"""Durable state of the runtime: `state.db` (see `store`) and what lives in it.

`STATE_SCHEMA` is the schema number that manifests call `state_schema`: the number of
migrations this code knows.
"""

from herdr_mcp.state.migrations import MIGRATIONS

STATE_SCHEMA = len(MIGRATIONS)
