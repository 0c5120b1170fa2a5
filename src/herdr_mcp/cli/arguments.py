"""What every `herdr-mcp` subcommand's parser shares: one-line argument errors and checked types.

A wrong argument gets one line on stderr, `<prog>: error: invalid_argument: <what>; see
`<prog> --help``, and exit 2, never argparse's multi-line usage block or, later, a traceback
from a value the parser let through (a port of 99999 reached `bind` as an OverflowError). The
types refuse what cannot work before anything starts: a port outside 0-65535, a directory that
is not there, a socket in a directory that does not exist (the simulator used to create it), an
interval that is not a positive number of seconds.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import NoReturn

#: Where a wrong argument's line points the user.
ERROR_CODE = "invalid_argument"


class CommandParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors are one line with a stable code (subparsers inherit it)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {ERROR_CODE}: {message}; see `{self.prog} --help`\n")


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


def fail(prog: str, code: str, message: str) -> int:
    """Print the one-line refusal `<prog>: error: <code>: <message>`; the exit status (2)."""
    print(f"{prog}: error: {code}: {message}", file=sys.stderr)
    return 2


def io_failure(prog: str, exc: OSError) -> int:
    """`fail` for a file system error nothing more specific caught (`io_error`)."""
    where = f" ({exc.filename})" if exc.filename else ""
    return fail(prog, "io_error", f"{exc.strerror or exc}{where}; check the path and its permissions")
