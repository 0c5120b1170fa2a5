"""What every `herdr-mcp` subcommand shares: its parser, `--json`, checked types, the one catch.

The conventions (the README's CLI table lists them per subcommand):

- A wrong argument is a `UsageFault("invalid_argument")`: one line
  `herdr-mcp: error: invalid_argument: <what>; see `<prog> --help``, exit 2, never argparse's
  multi-line usage block or, later, a traceback from a value the parser let through (a port of
  99999 reached `bind` as an OverflowError). The types refuse what cannot work before anything
  starts: a port outside 0-65535, a directory that is not there, a socket in a directory that
  does not exist (the simulator used to create it), an interval that is not a positive number.
- `--json` is accepted after the subcommand at every level (`with_json`), and before it where
  it was before (`dev --json status`).
- Every failure ends in `run_guarded`, the one catch: a `HerdrMcpError` is one line on stderr
  `herdr-mcp: error: <code>: <message>` (under `--json` also one object
  `{"error": {"code", "message"}}` on stdout, for the program that reads it) and its fault's
  exit status (`errors.py`: 2 usage, 3 refused, 4 local); an `OSError` nothing more specific
  caught is a `LocalFault("io_error")`; anything else is a bug and keeps its traceback (exit 1).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from herdr_mcp.errors import EXIT_INTERRUPTED, EXIT_OK, HerdrMcpError, LocalFault, UsageFault
from herdr_mcp.terminal import error_line, printable

#: Where a wrong argument's line points the user.
ERROR_CODE = "invalid_argument"
JSON_HELP = 'print one JSON object on stdout; a failure too, as {"error": {"code", "message"}}'


class CommandParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors are a `UsageFault` with a stable code (subparsers inherit
    it), so they reach the one catch like every other failure."""

    def error(self, message: str) -> NoReturn:
        raise UsageFault(ERROR_CODE, f"{message}; see `{self.prog} --help`")


def with_json(parser: argparse.ArgumentParser, *, nested: bool = False) -> argparse.ArgumentParser:
    """`parser` with `--json` on it and on every subcommand below it, so `--json` is accepted
    after the subcommand wherever it stands. Below the top, `--json` only ever sets the flag
    (its default is not applied), so `dev --json status` stays JSON too."""
    option = next((action for action in parser._actions if "--json" in action.option_strings), None)
    if option is None:
        option = parser.add_argument("--json", action="store_true", help=JSON_HELP)
    option.default = argparse.SUPPRESS if nested else False
    option.help = option.help or JSON_HELP
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in {id(child): child for child in action.choices.values()}.values():
                with_json(child, nested=True)
    return parser


def json_requested(argv: Sequence[str]) -> bool:
    """Whether `--json` is among the options of `argv` (before a `--`): known before parsing,
    so a refusal of the arguments themselves is JSON too."""
    arguments = list(argv)
    options = arguments[: arguments.index("--")] if "--" in arguments else arguments
    return "--json" in options


def report(exc: HerdrMcpError, *, as_json: bool) -> int:
    """Print `exc` the one way (see the module docstring); its exit status."""
    if as_json:
        print(json.dumps({"error": exc.to_dict()}, sort_keys=True), flush=True)
    print(error_line(exc.code, exc.message), file=sys.stderr)
    for note in getattr(exc, "__notes__", ()):
        print(printable(note), file=sys.stderr)
    return exc.exit_status


def run_guarded(command: Callable[[], int], argv: Sequence[str]) -> int:
    """Run one command (`argv` are its arguments) inside the one catch of the CLI."""
    as_json = json_requested(argv)
    try:
        return command()
    except HerdrMcpError as exc:
        return report(exc, as_json=as_json)
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python's exit-time flush quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except OSError as exc:
        return report(io_fault(exc), as_json=as_json)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def io_fault(exc: OSError) -> LocalFault:
    """The `LocalFault("io_error")` of a file system error nothing more specific caught."""
    where = f" ({exc.filename})" if exc.filename else ""
    return LocalFault("io_error", f"{exc.strerror or exc}{where}; check the path and its permissions")


def port(value: str) -> int:
    """A TCP port to listen on: 0-65535, 0 picking a free one."""
    number = _integer(value, "a port")
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port: use 1-65535, or 0 for any free port")
    return number


def fixed_port(value: str) -> int:
    """A TCP port others will be told about (a service's): 1-65535."""
    number = _integer(value, "a port")
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a usable fixed port: use 1-65535")
    return number


def existing_dir(value: str) -> Path:
    """A directory that exists."""
    path = Path(value).expanduser()
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise argparse.ArgumentTypeError(f"{path} {what}; pass an existing directory")
    return path


def dir_path(value: str) -> Path:
    """A directory that may not exist yet (it is created on first use), but is not a file."""
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} exists and is not a directory; pass a directory")
    return path


def file_path(value: str) -> Path:
    """A file that may not exist yet (it is created on first use) in a directory that does."""
    path = Path(value).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a directory; pass a file path")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(
            f"the directory of {path} does not exist; create it or pick a path in an existing one"
        )
    return path


def socket_path(value: str) -> Path:
    """A Unix socket to create: its directory must exist (it is never created for it)."""
    path = Path(value).expanduser()
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(
            f"the directory of {path} does not exist; create it or pick a socket path in an existing one"
        )
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} is a directory; pass a socket path")
    return path


def seconds(value: str) -> float:
    """A positive, finite number of seconds."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not math.isfinite(number) or number <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of seconds; use for example 2")
    return number


def _integer(value: str, what: str) -> int:
    try:
        return int(value, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not {what} (a whole number)") from None
