"""Durable state of the runtime.

`STATE_SCHEMA` is the schema number that manifests call `state_schema`. This runtime does not
keep a state database yet (the SQLite store, its migrations and the idempotency ledger arrive
with issue 3), so the number is 0: "no durable state". The first migration will make it 1.
"""

STATE_SCHEMA = 0
