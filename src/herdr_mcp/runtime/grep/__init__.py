"""The search behind herdr_fs_grep: ripgrep when it is on PATH, else a Python engine. Either one
runs as a child process that is killed at the call's deadline.

Why a child process for the Python engine too: Python's `re` backtracks, and one search holds the
GIL until it returns. Run in a runtime thread, `(a+)+$` on a 100,000-character line never
returned, starved the event loop (/health stopped answering) and could not be stopped. In a child
it has its own interpreter: the runtime's thread only waits on a pipe, and the kill at the
deadline bounds every pattern, every tree and every filesystem. A linear-time regex engine (RE2)
would bound the matching but not a walk of a huge or hung tree, and would add a compiled
dependency; it is not needed once the child can be killed.

One deadline per call (GREP_TIMEOUT_S), shared by rg's two runs (see `rg.grep_rg`). When it passes,
the child is killed and the call fails with `grep_timeout`, carrying the matches found so far.

Dialects: rg reads Rust regex syntax (no backreferences or lookaround); the Python engine reads
Python `re` syntax. Literals, classes, anchors, alternation and repetition mean the same in both.
A pattern the engine rejects is `pattern_invalid` with the engine's own reason.

Modules: `query` (the query, the glob rule, the capped match list, the shared limits), `search`
(picks the engine and maps the deadline to `grep_timeout`), `rg` and `python_engine` (the two
engines), `ignore_rules` (the Python engine's reading of `.gitignore`, `.ignore` and `.rgignore`, as
rg reads them, so both skip the same files), `children` (the search processes and their deadline,
shutdown's `stop_searches`). The Python engine's child is `python_engine.main`: it reads one query
(JSON) on stdin and writes one JSON line per match, then an end (or error) line.
"""
