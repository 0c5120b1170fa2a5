"""Every `herdr-mcp` command the documents print runs as printed.

After `./scripts/serve` (or `./scripts/test`) the program is `.venv/bin/herdr-mcp`, not on PATH.
So a document whose shell lines call a bare `herdr-mcp` carries the PATH note (`PATH_NOTE`)
before the first of them, and one that names bare commands only in its prose carries it too;
lines written `.venv/bin/herdr-mcp ...` run from the clone as they are. And every command a
document names, bare or by path, in a shell block or in its prose, names subcommands the real
CLI has: each one's `--help` is asked of `herdr_mcp.cli.main` (an unknown subcommand or choice
is `invalid_argument` there, exit 2).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (
    "README.md",
    *sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").glob("*.md")),
    "edge/README.md",
    "extension/README.md",
    "release/README.md",
)
PATH_NOTE = 'export PATH="$PWD/.venv/bin:$PATH"'
#: Fenced blocks in these languages are shell; indented blocks are read as shell too.
SHELL_FENCES = {"sh", "bash", "shell", "console"}
#: Where a command word stands in a shell line: its start, `$(`, after `--` (npx ... -- cmd),
#: or after `;`, `|`, `&&`.
COMMAND_WORD = re.compile(r"(?:^|\$\(|\s--\s|[;|&]\s*)((?:\S*/)?herdr-mcp)(?=\s|$|\))")
#: A subcommand word, or alternatives of them (`pair|unpair|status`).
SUBCOMMAND = re.compile(r"[a-z][a-z0-9-]*(?:\|[a-z][a-z0-9-]*)*")
#: What the commands print, not commands: `herdr-mcp serving <url>`, `herdr-mcp link serving <url>`.
OUTPUT_LINE = re.compile(r"(?:link )?serving\b")


@dataclass(frozen=True)
class Command:
    document: str
    #: Offset of the command in the document (where a PATH note must come before).
    offset: int
    #: `herdr-mcp` or a path to it (`.venv/bin/herdr-mcp`).
    program: str
    #: The words after the program.
    rest: str
    #: In a shell block (True) or in the prose (False).
    shell: bool

    @property
    def bare(self) -> bool:
        return self.program == "herdr-mcp"

    def argvs(self) -> list[list[str]]:
        """The subcommand paths it names (alternatives expanded), for `--help`."""
        if OUTPUT_LINE.match(self.rest):
            return []
        words: list[list[str]] = []
        for word in self.rest.split():
            if not SUBCOMMAND.fullmatch(word):
                break
            words.append(word.split("|"))
        paths: list[list[str]] = [[]]
        for choices in words:
            paths = [[*path, choice] for path in paths for choice in choices]
        return [path for path in paths if path]


def shell_lines(text: str) -> list[tuple[int, str]]:
    """(offset, line) of each shell line: fenced sh/bash blocks, indented blocks; continuations
    joined, `$ ` prompts and trailing comments dropped."""
    found: list[tuple[int, str]] = []
    fence: str | None = None
    previous_blank = True
    offset = 0
    pending: tuple[int, str] | None = None
    for line in text.splitlines(keepends=True):
        start, offset = offset, offset + len(line)
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else stripped[3:].strip()
            previous_blank = False
            continue
        indented = fence is None and line.startswith("    ") and (previous_blank or pending is not None)
        in_shell = (fence is not None and fence in SHELL_FENCES) or indented
        previous_blank = not stripped
        if not in_shell or not stripped:
            continue
        if pending is not None:
            start, stripped = pending[0], pending[1] + " " + stripped
            pending = None
        if stripped.endswith("\\"):
            pending = (start, stripped[:-1].rstrip())
            continue
        stripped = stripped.removeprefix("$ ").split("  #", 1)[0].strip()
        found.append((start, stripped))
    return found


def commands_of(document: str) -> list[Command]:
    text = (ROOT / document).read_text(encoding="utf-8")
    commands = []
    for offset, line in shell_lines(text):
        for match in COMMAND_WORD.finditer(line):
            rest = line[match.end(1) :].split(")", 1)[0]
            commands.append(Command(document, offset, match.group(1), rest.strip(), shell=True))
    prose = re.sub(r"```.*?```", lambda block: " " * len(block.group(0)), text, flags=re.S)
    for match in re.finditer(r"`((?:\.venv/bin/)?herdr-mcp) ([^`]+)`", prose):
        rest = " ".join(match.group(2).split())  # a span may wrap over lines
        commands.append(Command(document, match.start(), match.group(1), rest, shell=False))
    return commands


ALL = [command for document in DOCUMENTS for command in commands_of(document)]


def test_the_documents_name_commands_in_both_forms() -> None:
    """The reading above finds what is there (so the tests below cannot pass on nothing)."""
    shell_bare = {command.document for command in ALL if command.shell and command.bare}
    assert {"README.md", "docs/continuity.md", "release/README.md"} <= shell_bare
    assert any(command.program == ".venv/bin/herdr-mcp" and command.shell for command in ALL)
    assert any(command.rest.startswith("connector approve") for command in ALL)
    assert len({tuple(argv) for command in ALL for argv in command.argvs()}) > 30


@pytest.mark.parametrize("document", DOCUMENTS)
def test_a_document_calling_bare_herdr_mcp_says_how_to_get_it_on_path(document: str) -> None:
    text = (ROOT / document).read_text(encoding="utf-8")
    bare = [command for command in ALL if command.document == document and command.bare and command.argvs()]
    if not bare:
        return
    note = text.find(PATH_NOTE)
    assert note >= 0, f"{document} calls bare `herdr-mcp` but has no PATH note ({PATH_NOTE})"
    for command in bare:
        if command.shell:
            line = text.count("\n", 0, command.offset) + 1
            assert note < command.offset, (
                f"{document}:{line}: `herdr-mcp {command.rest}` comes before the PATH note"
            )


#: Runs in a child: the `--help` of each argv through the CLI's own main; its exit status.
HELP_PROBE = """
import contextlib, io, json, sys
from herdr_mcp.cli import main
statuses = {}
for argv in json.load(sys.stdin):
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            status = main([*argv, "--help"])
    except SystemExit as exit:
        status = exit.code if isinstance(exit.code, int) else 1
    statuses[" ".join(argv)] = status
print(json.dumps(statuses))
"""


def test_every_documented_command_names_subcommands_the_cli_has() -> None:
    where: dict[str, str] = {}
    for command in ALL:
        for argv in command.argvs():
            where.setdefault(" ".join(argv), f"{command.document}: `{command.program} {command.rest}`")
    done = subprocess.run(
        [sys.executable, "-c", HELP_PROBE],
        input=json.dumps([key.split(" ") for key in where]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    statuses: dict[str, int] = json.loads(done.stdout.splitlines()[-1])
    print(f"\nEVIDENCE {len(statuses)} documented subcommand paths asked for --help")
    wrong = {where[key]: status for key, status in statuses.items() if status != 0}
    assert not wrong, wrong


def test_the_probe_refuses_a_subcommand_the_cli_lacks() -> None:
    """The check above can fail: a made-up subcommand and a made-up choice are not 0."""
    done = subprocess.run(
        [sys.executable, "-c", HELP_PROBE],
        input=json.dumps([["connector", "approve"], ["connector", "approvee"], ["connect", "cursr"]]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "connector approve": 0,
        "connector approvee": 2,
        "connect cursr": 2,
    }
