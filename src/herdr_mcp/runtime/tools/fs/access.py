"""File access shared by the fs tools: the secret-path refusal, capped whole-file reads, and
UTF-8 decoding and encoding with the tools' error codes."""

from __future__ import annotations

import os

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary import FileIdentity, ResolvedPath, is_secret_path, open_regular

# fs_read streams in chunks this size: large enough that counting newlines runs at memory speed,
# small enough that a read of any file, however large, stays within a few MiB of memory.
READ_CHUNK_BYTES = 1 << 20
# fs_edit and fs_patch hold a file's old and new text in memory; 8 MiB is far above any source
# file and keeps one call's memory bounded. fs_write content has the same cap.
EDIT_MAX_BYTES = 8 << 20


def refuse_secret(target: ResolvedPath) -> None:
    """Refuse (`secret_path`) a target whose lexical or resolved path looks like a secret."""
    lexical = target.lexical_relative
    for shown in (lexical,) if lexical == target.relative else (lexical, target.relative):
        if is_secret_path(shown):
            raise ToolError(
                "secret_path", f"{shown} looks like a secret; fs tools never touch it.", path=shown
            )


def read_capped(fd: int, cap: int, shown: str) -> bytes:
    """The whole file, refusing (`too_large`) when it holds more than `cap` bytes."""
    parts: list[bytes] = []
    total = 0
    while chunk := os.read(fd, min(READ_CHUNK_BYTES, cap + 1 - total)):
        parts.append(chunk)
        total += len(chunk)
        if total > cap:
            raise ToolError(
                "too_large",
                f"{shown} is larger than {cap} bytes; fs tools edit text files up to that size.",
                path=shown,
                limit=cap,
            )
    return b"".join(parts)


def decode_text(data: bytes, shown: str) -> str:
    """`data` as UTF-8 text, refusing (`not_utf8`) with the offset of the first invalid byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(shown, exc.start) from exc


def not_utf8(shown: str, offset: int) -> ToolError:
    """The `not_utf8` refusal for `shown`, naming the offset of the invalid byte."""
    return ToolError(
        "not_utf8",
        f"{shown} is not UTF-8 text (invalid byte at offset {offset}); use herdr_fs_image for images "
        "or herdr_exec for binary files.",
        path=shown,
        offset=offset,
    )


def read_text(target: ResolvedPath) -> tuple[str, bytes, FileIdentity]:
    """A whole UTF-8 file (capped at EDIT_MAX_BYTES) with the identity it had when read."""
    shown = target.lexical_relative
    with open_regular(target) as (fd, st):
        data = read_capped(fd, EDIT_MAX_BYTES, shown)
    return decode_text(data, shown), data, FileIdentity.of(st)


def encode_text(text: str, shown: str) -> bytes:
    """New content for `shown` as UTF-8, refusing `not_utf8` and `too_large` (EDIT_MAX_BYTES)."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(
            "not_utf8", f"The new content for {shown} has an unpaired surrogate; send valid text.", path=shown
        ) from exc
    if len(data) > EDIT_MAX_BYTES:
        raise ToolError(
            "too_large",
            f"The new content for {shown} exceeds {EDIT_MAX_BYTES} bytes; split the file or the change.",
            path=shown,
            limit=EDIT_MAX_BYTES,
        )
    return data
