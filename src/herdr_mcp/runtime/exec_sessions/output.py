"""Output capture: the spool files a session's streams go to, what a read may see of them, and
the chunks and answers read from them.

Each stream of a durable session is written, as it arrives, to `<spool_dir>/<session_id>/stdout`
and `.../stderr` (directory 0700, files 0600). A short herdr_exec starts in memory instead (a
`Spool` without a file, see `sessions`): its bytes are kept in a buffer of at most
`MEMORY_SPOOL_BYTES` until the session becomes durable (`Spool.to_file` writes what the buffer
holds, then the stream goes on into the file). The cap holds while streaming either way: once
`max_output_bytes` of a stream are stored, further bytes are counted in `total_bytes` but
dropped (`dropped_bytes` says how many). A chunk handed to a reader never ends inside a UTF-8
sequence.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from herdr_mcp.errors import ToolError

__all__ = [
    "DEFAULT_READ_BYTES",
    "MAX_READ_BYTES",
    "MEMORY_SPOOL_BYTES",
    "Spool",
    "StreamChoice",
    "StreamName",
    "StreamView",
    "check_read_bytes",
    "completed_answer",
    "output_answer",
    "read_chunk",
    "remove_spool",
    "utf8_chunk_length",
]

# The catalog default of herdr_exec_read.max_bytes.
DEFAULT_READ_BYTES = 65536
# The catalog maximum of herdr_exec_read.max_bytes; run() honours the same bound.
MAX_READ_BYTES = 262144
#: What a stream of a session in memory holds at most: what herdr_exec answers with (its first
#: DEFAULT_READ_BYTES). One byte more and the session becomes durable, so that the rest stays
#: readable with herdr_exec_read.
MEMORY_SPOOL_BYTES = DEFAULT_READ_BYTES
# What a session directory holds.
_SPOOL_FILES = ("stdout", "stderr", "metadata.json", ".metadata.json.tmp")
# The longest UTF-8 sequence, minus one: how far a chunk end may have to move.
_UTF8_LOOKAHEAD = 3

StreamName = Literal["stdout", "stderr"]
StreamChoice = Literal["stdout", "stderr", "both"]


def _utf8_sequence_length(lead: int) -> int:
    if lead < 0x80:
        return 1
    if 0xC0 <= lead < 0xE0:
        return 2
    if 0xE0 <= lead < 0xF0:
        return 3
    if 0xF0 <= lead < 0xF8:
        return 4
    return 1  # a stray continuation or invalid byte: it stands alone


def _incomplete_tail(chunk: bytes) -> tuple[int, int] | None:
    """(start, length) of a UTF-8 sequence cut off at the end of `chunk`, or None."""
    for index in range(len(chunk) - 1, max(len(chunk) - 5, -1), -1):
        byte = chunk[index]
        if byte & 0xC0 == 0x80:
            continue
        length = _utf8_sequence_length(byte)
        return (index, length) if len(chunk) - index < length else None
    return None


def utf8_chunk_length(data: bytes, limit: int, *, final: bool) -> int:
    """How many leading bytes of `data` to return so that no UTF-8 sequence is split.

    `data` holds the bytes available from the read position (a few more than `limit` when
    there are). The answer is at most `limit`, backed off to a sequence boundary, except when
    a single sequence is longer than `limit`: then that whole sequence (at most 4 bytes) is
    returned so the reader always makes progress. `final` says that no byte will ever follow
    `data`; an incomplete sequence at the very end is then returned as it is.
    """
    end = min(limit, len(data))
    if end == len(data) and final:
        return end
    tail = _incomplete_tail(data[:end])
    if tail is None:
        return end
    start, length = tail
    if start > 0:
        return start
    if length <= len(data):
        return length
    return len(data) if final else 0


@dataclass
class Spool:
    """One captured stream: the pipe we drain and where its bytes go, the capped 0600 file at
    `path` or, while `memory` is not None, that buffer (`path` is where the file will be)."""

    path: Path
    cap: int
    fd: int | None
    pipe: IO[bytes] | None = None
    total: int = 0
    stored: int = 0
    eof: bool = False
    write_error: str | None = None
    memory: bytearray | None = None

    @classmethod
    def create(cls, path: Path, cap: int) -> Spool:
        """A new 0600 spool file at `path` (never an existing file or a link) holding `cap` bytes at most."""
        return cls(path=path, cap=cap, fd=_create_file(path))

    @classmethod
    def in_memory(cls, path: Path, cap: int) -> Spool:
        """A stream kept in memory until `to_file` (its file would be `path`)."""
        return cls(path=path, cap=cap, fd=None, memory=bytearray())

    @property
    def dropped(self) -> int:
        """Bytes received past the cap (or after a write error)."""
        return self.total - self.stored

    def overflows(self, size: int) -> bool:
        """Whether storing `size` more bytes needs more than the memory buffer holds."""
        return self.memory is not None and min(self.stored + size, self.cap) > MEMORY_SPOOL_BYTES

    def append(self, data: bytes) -> None:
        """Count `data` and store what fits under the cap (in memory, up to its buffer)."""
        self.total += len(data)
        room = self.cap - self.stored
        if self.memory is not None:
            room = min(room, MEMORY_SPOOL_BYTES - self.stored)
            if room > 0:
                self.memory += data[:room]
                self.stored += min(room, len(data))
            return
        if room <= 0 or self.fd is None:
            return
        pending = memoryview(data)[:room]
        try:
            while pending:
                written = os.write(self.fd, pending)
                self.stored += written
                pending = pending[written:]
        except OSError as exc:
            # A full or broken disk must not stop the pipe from being drained; the rest of
            # the stream counts as dropped.
            self.write_error = f"{type(exc).__name__}: {exc}"
            self.close_file()

    def to_file(self) -> None:
        """Write what memory holds to a new spool file at `path` and go on there (the file is
        closed at once when the stream is over). Raises OSError; the stream stays in memory then."""
        if self.memory is None:
            return
        fd = _create_file(self.path)
        try:
            _write_all(fd, self.memory)
        except OSError:
            os.close(fd)
            raise
        self.memory = None
        self.fd = fd
        if self.eof:
            self.close_file()

    def close_file(self) -> None:
        """Close the spool file (the stream is over, or cannot be written)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def view(self, *, settled: bool) -> StreamView:
        """What a read may see now; `settled`: the session is over."""
        return StreamView(
            self.path,
            self.stored,
            self.total,
            self.dropped,
            final=self.eof,
            settled=settled,
            memory=self.memory,
        )


def _create_file(path: Path) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
    return os.open(path, flags, 0o600)


def _write_all(fd: int, data: bytes | bytearray) -> None:
    pending = memoryview(data)
    while pending:
        pending = pending[os.write(fd, pending) :]


@dataclass(frozen=True)
class StreamView:
    """What a read may see of one stream right now, whether it is live or from an earlier runtime."""

    path: Path
    stored: int  # bytes in the spool file that may be read
    total: int
    dropped: int
    final: bool  # no byte will ever be added to the file
    settled: bool  # the session is over: reading up to `stored` reaches the end
    memory: bytearray | None = None  # the bytes, when the stream is still in memory

    def read(self, offset: int, limit: int) -> bytes:
        """Up to `limit` stored bytes from `offset` (b"" past the end or when the file is gone)."""
        if offset >= self.stored:
            return b""
        if self.memory is not None:
            return bytes(self.memory[offset : min(offset + limit, self.stored)])
        try:
            with self.path.open("rb") as handle:
                handle.seek(offset)
                return handle.read(min(limit, self.stored - offset))
        except FileNotFoundError:  # the spool directory was removed by hand
            return b""


def remove_spool(directory: Path) -> None:
    """Remove a session's spool directory: the files a session writes, then the directory (what
    else was put there falls back to rmtree). Runs on the loop at every new session once the
    limit is reached; rmtree's generic walk cost four times as much."""
    try:
        for name in _SPOOL_FILES:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / name)
        os.rmdir(directory)
    except FileNotFoundError:
        return
    except OSError:
        shutil.rmtree(directory, ignore_errors=True)


def check_read_bytes(max_bytes: int) -> None:
    """Raise ToolError `invalid_arguments` unless 1 <= `max_bytes` <= the catalog maximum."""
    if not 1 <= max_bytes <= MAX_READ_BYTES:
        raise ToolError("invalid_arguments", f"max_bytes must be between 1 and {MAX_READ_BYTES}.")


def output_answer(
    head: dict[str, Any], view: Callable[[StreamName], StreamView], max_bytes: int, duration_ms: int
) -> dict[str, Any]:
    """`head` plus the first `max_bytes` of both streams and their totals, as `run()` answers."""
    stdout, stderr = view("stdout"), view("stderr")
    out = read_chunk(stdout, 0, max_bytes)
    err = read_chunk(stderr, 0, max_bytes)
    return head | {
        "stdout": out["text"],
        "stderr": err["text"],
        "stdout_total_bytes": stdout.total,
        "stderr_total_bytes": stderr.total,
        "stdout_next_offset": out["next_offset"],
        "stderr_next_offset": err["next_offset"],
        "truncated": out["next_offset"] < stdout.total or err["next_offset"] < stderr.total,
        "duration_ms": duration_ms,
    }


def completed_answer(
    state: dict[str, Any], view: Callable[[StreamName], StreamView], max_bytes: int, duration_ms: int
) -> dict[str, Any]:
    """The answer of a completed command: its exit status from `state`, then as `output_answer`."""
    head = {
        "session_id": state["session_id"],
        "completed": True,
        "exit_code": state["exit_code"],
        "signal": state["signal"],
    }
    return output_answer(head, view, max_bytes, duration_ms)


def read_chunk(view: StreamView, offset: int, max_bytes: int) -> dict[str, Any]:
    """Up to `max_bytes` of a stream from `offset`, never ending inside a UTF-8 sequence, with
    where the next read continues and whether the end was reached (a herdr_exec_read stream)."""
    data = view.read(offset, max_bytes + _UTF8_LOOKAHEAD)
    length = utf8_chunk_length(data, max_bytes, final=view.final)
    next_offset = offset + length
    return {
        "text": data[:length].decode("utf-8", errors="replace"),
        "offset": offset,
        "next_offset": next_offset,
        "total_bytes": view.total,
        "dropped_bytes": view.dropped,
        # Only once the session has settled, so that a reader who stops at eof has the exit status.
        "eof": view.settled and next_offset >= view.stored,
    }
