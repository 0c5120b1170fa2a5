"""The local bearer token that guards `/mcp`.

The token lives in a 0600 file in the config dir and is created on first start. A file that
other users can read is refused rather than silently used: someone may already have copied it.
Comparison is constant-time. `/health` stays open so the updater and the link can probe.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import stat
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

TOKEN_BYTES = 32


class TokenFileError(Exception):
    """The token file exists but cannot be trusted or read."""


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
    if len(token) < 16:
        raise TokenFileError(f"token file {path} holds no usable token; delete it to create a new one")
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


class BearerGate:
    """ASGI middleware: requests under `protected_prefix` need `Authorization: Bearer <token>`."""

    def __init__(self, app: ASGIApp, token: str, protected_prefix: str = "/mcp") -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._prefix = protected_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._is_protected(scope["path"]):
            supplied = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(supplied, self._expected):
                await _unauthorized(send)
                return
        await self.app(scope, receive, send)

    def _is_protected(self, path: str) -> bool:
        return path == self._prefix or path.startswith(self._prefix + "/")


async def _unauthorized(send: Send) -> None:
    body = json.dumps(
        {
            "error": "unauthorized",
            "error_description": "send the local bearer token from the herdr-mcp token file "
            "(herdr-mcp token --path shows where it is)",
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="herdr-mcp"'),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
