"""`herdr-mcp audit`: show the audit log of tool calls (`audit.jsonl` and its rotated files).

Records come out oldest first, across the rotated files. `--since` takes a duration back from
now (`30m`, `1h`, `2d`, `1w`; also `s`) or an ISO 8601 time (`2026-12-01T09:30Z`; without an
offset it is local time, as in `journalctl --since`). `--tool` keeps one tool's calls. `--json`
prints each record as one JSON object per line (JSON Lines, like the file, so `jq` and `grep`
work on the stream and memory stays flat however long the log is).

Every value came from a remote caller, so text output shows control and invisible characters
as escapes, and JSON output is ASCII with `\\u` escapes. A line that is not a record (torn by a
crash mid-write, or damaged) is skipped and reported on stderr.

Exit codes: 0 success (also when there is no log yet); 2 bad arguments; 4 an unreadable log
(`audit_unreadable`). Under `--json` a failure is also one `{"error": {"code", "message"}}` on
stdout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from herdr_mcp.cli.arguments import CommandParser, run_guarded
from herdr_mcp.errors import LocalFault, UsageFault
from herdr_mcp.layout import default_config_dir
from herdr_mcp.runtime.audit import IDENTIFIER_ARGUMENTS, Unreadable, audit_files, read_records
from herdr_mcp.terminal import printable

#: Skipped lines named one by one on stderr before only their count is given.
MAX_SKIP_NOTES = 10
_DURATION = re.compile(r"(\d{1,9})([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class AuditUsageError(UsageFault):
    """A bad argument to `herdr-mcp audit`; `code` is stable, the message names the fix."""


def build_parser() -> argparse.ArgumentParser:
    """The parser of `herdr-mcp audit` (a bad argument is `invalid_argument`, as everywhere)."""
    parser = CommandParser(
        prog="herdr-mcp audit",
        description="Show the audit log of tool calls, oldest first.",
    )
    parser.add_argument("--config-dir", type=Path, help="the runtime's config dir (holds audit.jsonl)")
    parser.add_argument(
        "--since", metavar="T", help="only calls from T on: 30m, 1h, 2d, 1w, or an ISO 8601 time"
    )
    parser.add_argument("--tool", metavar="NAME", help="only calls of this tool (e.g. herdr_exec)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    return parser


def parse_since(value: str, now: dt.datetime) -> dt.datetime:
    """The moment `--since` names: a duration before `now`, or an ISO 8601 time (local when it
    has no offset). Raises AuditUsageError."""
    text = value.strip()
    duration = _DURATION.fullmatch(text)
    if duration:
        return now - dt.timedelta(seconds=int(duration[1]) * _UNIT_SECONDS[duration[2]])
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise AuditUsageError(
            "invalid_since",
            f"--since {value!r} is neither a duration nor an ISO 8601 time; "
            "pass e.g. 30m, 1h, 2d, 1w or 2026-12-01T09:30Z",
        ) from None
    return moment if moment.tzinfo is not None else moment.astimezone()


def _record_time(record: dict[str, Any]) -> dt.datetime | None:
    try:
        moment = dt.datetime.fromisoformat(record["time"])
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def _value(value: object) -> str:
    """`value` as it is, or in double quotes (`\\` and `"` escaped) when it is empty or holds a
    blank or a quote; control characters are escaped afterwards, by `printable`."""
    text = str(value)
    if text and not any(char.isspace() or char in '"\\' for char in text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def format_record(record: dict[str, Any]) -> str:
    """One terminal-safe line: time, tool, outcome, duration, then what the call touched."""
    duration = record.get("duration_ms")
    head = [
        str(record.get("time")),
        str(record.get("tool")),
        str(record.get("outcome")),
        f"{duration}ms" if isinstance(duration, int | float) else "-",
    ]
    parts: list[str] = []
    if record.get("session"):
        parts.append(f"session={_value(record['session'])}")
    parts.extend(f"{name}={_value(record[name])}" for name in IDENTIFIER_ARGUMENTS if name in record)
    if record.get("dry_run") is True:
        parts.append("dry_run")
    paths = record.get("paths")
    if isinstance(paths, list):
        parts.extend(f"path={_value(path)}" for path in paths)
    if record.get("paths_omitted"):
        parts.append(f"(+{record['paths_omitted']} paths)")
    if "command" in record:
        parts.append(f"command={_value(record['command'])}")
    return printable("  ".join([*head, " ".join(parts)] if parts else head))


def _select(
    entries: Iterable[dict[str, Any] | Unreadable], since: dt.datetime | None, tool: str | None
) -> Iterable[dict[str, Any] | Unreadable]:
    for entry in entries:
        if isinstance(entry, Unreadable):
            yield entry
            continue
        if tool is not None and entry["tool"] != tool:
            continue
        if since is not None:
            moment = _record_time(entry)
            if moment is None or moment < since:
                continue
        yield entry


def _show(args: argparse.Namespace, config_dir: Path, since: dt.datetime | None) -> int:
    if not audit_files(config_dir):
        print(
            printable(
                f"herdr-mcp audit: no audit log in {config_dir} yet (written from the first tool call on)"
            ),
            file=sys.stderr,
        )
        return 0
    skipped = 0
    for entry in _select(read_records(config_dir), since, args.tool):
        if isinstance(entry, Unreadable):
            skipped += 1
            if skipped <= MAX_SKIP_NOTES:
                why = "torn (its writer stopped mid-record)" if entry.torn else "not a record"
                print(
                    printable(f"herdr-mcp audit: skipped line {entry.line_number} of {entry.file}: {why}"),
                    file=sys.stderr,
                )
            continue
        print(json.dumps(entry, ensure_ascii=True) if args.json else format_record(entry))
    if skipped > MAX_SKIP_NOTES:
        print(f"herdr-mcp audit: skipped {skipped} unreadable lines in all", file=sys.stderr)
    return 0


def main(argv: Sequence[str]) -> int:
    """Run `herdr-mcp audit` with `argv` (the arguments after `audit`) inside the CLI's one catch."""
    return run_guarded(lambda: run(argv), argv)


def run(argv: Sequence[str]) -> int:
    """`herdr-mcp audit`; raises what the CLI's one catch reports."""
    args = build_parser().parse_args(list(argv))
    since = parse_since(args.since, dt.datetime.now(dt.UTC)) if args.since is not None else None
    config_dir: Path = args.config_dir or default_config_dir()
    if not config_dir.is_dir():
        raise AuditUsageError(
            "config_dir_not_found",
            f"{config_dir} is not a directory; pass the runtime's --config-dir "
            "(`herdr-mcp token --path` shows where the default one is)",
        )
    try:
        return _show(args, config_dir, since)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise LocalFault("audit_unreadable", f"cannot read the audit log: {exc}") from exc
