"""`herdr-mcp handoff`: build and print a handoff document from a continuity chain.

No language model runs here. The document is built deterministically from what the journal
knows for sure: the chain's latest verified Work Memory checkpoint (goal, constraints, progress,
decisions, critical context, next steps), the raw turns after it, the checkpoint's evidence and
the chain's bindings. `--focus` is stated in the Goal and its best matches in the chain are
listed under Critical Context. The document is validated with the same validator a refined one
must pass, and its lineage (chain, turns, checkpoint, parent transfer) is recorded in state.db.

How a local coding agent uses it:

1. `herdr-mcp handoff --chain cont_... --focus "finish the login fix" > handoff.md`
   (or select the chain by `--conversation-url`, `--workspace`, or `--site` with `--project-id`).
2. Read it and refine it with your own judgement: turn the raw message excerpts under Progress
   into what was actually achieved, add decisions and constraints the checkpoint missed, and make
   Next Steps concrete. Keep the six `##` sections, in order; write "None" where there is nothing.
3. `herdr-mcp handoff --check handoff.md` validates the refined document (exit 0), or names the
   sections that are missing, duplicated, out of order or empty (exit 2).
4. Start the next session with the document, and re-inspect live state before changing anything.

Exit codes: 0 success; 2 a refusal (unknown or ambiguous chain, fewer than two messages, an
invalid document, no state.db); 4 a state.db that cannot be used. `--json` prints one JSON
object on stdout in every case (a refusal as `{"error": {"code", "message", ...}}`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from herdr_mcp.cli.arguments import CommandParser, run_guarded
from herdr_mcp.errors import ToolError
from herdr_mcp.layout import default_config_dir
from herdr_mcp.state import continuity, continuity_identity, handoff, journal
from herdr_mcp.state.store import STATE_FILE_NAME, StateStore
from herdr_mcp.terminal import printable


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="herdr-mcp handoff",
        description="Build a handoff document (Goal, Constraints & Preferences, Progress, Key Decisions, "
        "Critical Context, Next Steps) from a continuity chain, or check one.",
    )
    parser.add_argument("--config-dir", type=Path, help="the runtime's config dir (holds state.db)")
    select = parser.add_mutually_exclusive_group(required=True)
    select.add_argument("--chain", metavar="ID", help="the chain's continuity_id")
    select.add_argument("--conversation-url", metavar="URL", help="a full conversation URL journaled here")
    select.add_argument("--workspace", metavar="ID", help="a Herdr workspace bound to exactly one chain")
    select.add_argument("--project-id", metavar="ID", help="a site's project id (with --site)")
    select.add_argument("--check", metavar="FILE", help="validate a handoff document ('-' for stdin)")
    parser.add_argument("--site", choices=continuity_identity.SITES, help="the site of --project-id")
    parser.add_argument("--focus", metavar="TEXT", help="what the next session should concentrate on")
    parser.add_argument("--work-chain", metavar="ID", help="the Work Memory work_chain_id to draw from")
    parser.add_argument(
        "--max-turns",
        type=int,
        default=handoff.DEFAULT_DOCUMENT_TURNS,
        metavar="N",
        help=f"raw messages after the checkpoint to include (1..{handoff.MAX_DOCUMENT_TURNS})",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _selection(args: argparse.Namespace) -> dict[str, Any]:
    if args.chain:
        return {"continuity_id": args.chain}
    if args.conversation_url:
        return {"conversation_url": args.conversation_url}
    if args.workspace:
        return {"workspace_id": args.workspace}
    if args.site is None:
        raise ToolError("invalid_arguments", "--project-id belongs to a site: pass --site as well.")
    return {"site": args.site, "project_id": args.project_id}


def _open_store(config_dir: Path) -> StateStore:
    path = config_dir / STATE_FILE_NAME
    if not path.is_file():
        raise journal.journal_unavailable(f"{path} does not exist; run `herdr-mcp serve` first")
    return StateStore.open(path)


def _chain_for(store: StateStore, selection: dict[str, Any]) -> str:
    if "continuity_id" in selection:
        return str(selection["continuity_id"])
    answer = continuity.resume(store, {**selection, "max_turns": 1, "max_chars": 200})
    return str(answer["continuity_id"])


def _check(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolError("handoff_document_unreadable", f"Cannot read {path}: {exc}.") from exc
    document = handoff.HandoffDocument.parse(text)
    return {"valid": True, "sections": [name for name, _ in document.sections]}


def _build(args: argparse.Namespace) -> dict[str, Any]:
    if not 1 <= args.max_turns <= handoff.MAX_DOCUMENT_TURNS:
        raise ToolError("invalid_arguments", f"--max-turns must be from 1 to {handoff.MAX_DOCUMENT_TURNS}.")
    store = _open_store(args.config_dir or default_config_dir())
    try:
        continuity_id = _chain_for(store, _selection(args))
        return handoff.build_document(
            store, continuity_id, focus=args.focus, work_chain_id=args.work_chain, max_turns=args.max_turns
        )
    finally:
        store.close()


def _candidate_notes(exc: ToolError) -> None:
    """Name the chains an ambiguous selection matched under the error line (text output)."""
    for entry in exc.details.get("candidates", []):
        head = (
            f"  {entry['continuity_id']}  {entry['title'] or '(untitled)'}  "
            f"workspaces={','.join(entry['workspace_ids']) or '-'}  updated {entry['updated_at']}"
        )
        exc.add_note(head)
        exc.add_note(f"    {entry['recent_summary']}")


def main(argv: list[str]) -> int:
    """Run `herdr-mcp handoff` with `argv` (the arguments after `handoff`) inside the CLI's one
    catch; returns the exit code."""
    return run_guarded(lambda: run(argv), argv)


def run(argv: list[str]) -> int:
    """`herdr-mcp handoff`; raises what the CLI's one catch reports."""
    args = build_parser().parse_args(argv)
    try:
        result = _check(args.check) if args.check else _build(args)
    except ToolError as exc:
        _candidate_notes(exc)
        raise
    # Journal text comes from web conversations and Herdr output: escaped before a terminal
    # (JSON's default ASCII escaping covers --json).
    if args.json:
        print(json.dumps(result))
    elif args.check:
        print(printable(f"valid: {', '.join(result['sections'])}"))
    else:
        sys.stdout.write(printable(result["document"], keep_newlines=True))
    return 0
