"""The local bearer token files: created 0600 on first use, refused when others can read them.

The runtime's token is `<config dir>/token` and the link's `<config dir>/link-token`
(`layout.py`). A file that other users can read is refused rather than silently used: someone
may already have copied it. Creating one is race-free: a temp file is linked into place, and a
process that loses the race uses the winner's token.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from herdr_mcp.errors import LocalFault

TOKEN_BYTES = 32
#: A token is 43 characters; a token file is never more than a line.
MAX_TOKEN_FILE_BYTES = 4096
#: Shorter than this is not a token we wrote.
MIN_TOKEN_CHARS = 16


class TokenFileError(LocalFault):
    """The token file exists but cannot be trusted or read (code `token_unavailable`)."""

    def __init__(self, message: str) -> None:
        super().__init__("token_unavailable", message)

    def __str__(self) -> str:
        return self.message


def load_or_create_token(path: Path) -> str:
    """Return the token in `path`, creating the file (0600, parent 0700) when it is missing."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return _create_token(path)
    except OSError as exc:
        raise TokenFileError(f"cannot open token file {path}: {exc.strerror}") from exc
    with os.fdopen(fd, "r", encoding="utf-8") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise TokenFileError(f"token file {path} is not a regular file")
        if info.st_mode & 0o077:
            raise TokenFileError(
                f"token file {path} is readable by other users (mode {stat.S_IMODE(info.st_mode):o}); "
                "delete it so a new one is created, or chmod 600 it if you trust its content"
            )
        token = handle.read().strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenFileError(f"token file {path} holds no usable token; delete it to create a new one")
    return token


def read_token(path: Path) -> str:
    """The token in an existing `path` (a regular 0600 file), never creating one; raises
    `TokenFileError`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise TokenFileError(f"cannot open token file {path}: {exc.strerror}") from exc
    with os.fdopen(fd, "r", encoding="utf-8") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
            raise TokenFileError(f"token file {path} must be a regular file with mode 0600")
        token = handle.read(MAX_TOKEN_FILE_BYTES).strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenFileError(f"token file {path} holds no usable token")
    return token


def _create_token(path: Path) -> str:
    token = secrets.token_urlsafe(TOKEN_BYTES)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(token + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        # link() fails if another process created the token meanwhile; then we use theirs.
        try:
            os.link(temp, path)
        except FileExistsError:
            return load_or_create_token(path)
    finally:
        temp.unlink(missing_ok=True)
    return token
