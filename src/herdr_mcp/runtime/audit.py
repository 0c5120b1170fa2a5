"""The audit log of tool calls: one JSON line per tools/call in `audit.jsonl` in the config dir.

Why a file of its own and not a table in state.db: a table is a migration, and a migration is a
state-schema bump, which an update never makes (SPEC 6; admission refuses it), so the log could
only arrive with a contract migration. An append-only file also stays readable when state.db is
refused (schema too new, locked, corrupt), which is when an auditor most wants it.

What a record holds (`describe_call`): the time the call arrived (UTC, ISO 8601, ms), the MCP
session id (null on transports without one), the runtime instance and version, the tool name as
sent, the paths named by the arguments (`path`, `root`, `project_root` and the file headers of a
patch, as given), the exec command line (the command as run with the spans of secret values
replaced, heredoc bodies withheld, capped: `redaction.py`), a few identifiers (workspace,
session_id, target, method, action, intent, idempotency_key, dry_run), the sha256 of the RFC 8785
JCS of the arguments as received, the outcome (`ok`, the stable error code, or `cancelled`) and
the duration in ms. Only argument names on these lists are ever copied, so file contents, edit
strings, patch bodies, prompt text, grep patterns and passthrough params never reach the log,
for any tool, including one added later. The secrets the runtime knows (`KnownSecrets`: its
bearer, the link's, the Edge device secret) reach no field of the file.

Writing: `append` writes its record with one write(2) before it returns, so a call's answer
leaves only after its record is in the file (it survives the runtime being killed); a sync
thread makes what was written durable with one fdatasync for everything written since its last
one, at most every SYNC_INTERVAL_S (group commit; docs/runtime.md has the measurements). Several
processes (A/B generations share the config dir) serialise on `flock` of `audit.lock`:
a record never interleaves with another, whatever its size, and rotation is done by one
process at a time. A record torn by a crash is ended with a newline by the next writer, so it
spoils only its own line (the reader skips it and says so).

Why one module of over 600 lines: the record's description (what a call is logged as, the
argument digest, redaction) and its append (the file, rotation, the health the dispatcher
checks) keep one promise together: every call recorded before its answer leaves, never a
secret; it is read top to bottom as that promise.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import stat
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rfc8785

from herdr_mcp.errors import LocalFault
from herdr_mcp.layout import AUDIT_FILE, AUDIT_KEEP_FILES, AUDIT_MAX_FILE_BYTES, Layout
from herdr_mcp.runtime.redaction import MIN_KNOWN_SECRET_CHARS, REDACTED, redact_command, redact_known
from herdr_mcp.runtime.tools.patch import ADD, DELETE, MOVE, UPDATE
from herdr_mcp.text import safe_json

AUDIT_FILE_NAME = AUDIT_FILE
LOCK_FILE_NAME = "audit.lock"
RECORD_VERSION = 1

#: Rotate when the current file would grow past this, and the rotated files kept: defined in
#: `layout.py` with the file's name (the updater keeps room for them: `update/diskspace.py`).
MAX_FILE_BYTES = AUDIT_MAX_FILE_BYTES
KEEP_FILES = AUDIT_KEEP_FILES

#: The sync thread makes written records durable at most this often: once per call cost a
#: thread wake-up per call (GIL hand-offs, measured +0.1-0.2 on the runtime benchmark's ratio);
#: 50 ms keeps the window in which an OS crash or power loss can lose answered calls short, and
#: a process crash loses nothing (records are written before the answer leaves).
SYNC_INTERVAL_S = 0.05

#: Caps that bound a record (worst case ~30 KiB before JSON escaping): a path the schema allows
#: is up to 4,096 characters, but the head of it identifies the file.
MAX_PATH_CHARS = 1024
MAX_PATHS = 16
MAX_COMMAND_CHARS = 4096
MAX_IDENTIFIER_CHARS = 128
MAX_TOOL_NAME_CHARS = 128
#: Redaction looks at this much of a command; the schema caps commands at 65,536 characters and
#: anything past MAX_COMMAND_CHARS is cut from the record anyway.
MAX_COMMAND_SCAN_CHARS = 65_536

PATH_ARGUMENTS = ("root", "path", "project_root")
IDENTIFIER_ARGUMENTS = ("workspace", "session_id", "target", "method", "action", "intent", "idempotency_key")
FLAG_ARGUMENTS = ("dry_run",)
PATCH_HEADERS = (ADD, DELETE, UPDATE, MOVE)


class AuditUnavailable(LocalFault):
    """The audit log cannot be written; `code` is stable, the message says what to do."""

    code = "audit_unavailable"

    def __init__(self, message: str) -> None:
        super().__init__(self.code, message)

    def __str__(self) -> str:
        return self.message


# --- what a record says about a call ---------------------------------------------------------


def describe_call(
    *,
    tool: str,
    arguments: Mapping[str, Any],
    session: str | None,
    runtime: str,
    version: str,
    started: dt.datetime,
    outcome: str,
    duration_ms: float,
    known_secrets: Sequence[str] = (),
) -> dict[str, Any]:
    """The audit record of one tools/call; see the module docstring for what is (never) in it.
    `known_secrets` (`KnownSecrets.values`) are replaced wherever they appear in the record."""
    record: dict[str, Any] = {
        "v": RECORD_VERSION,
        "time": format_time(started),
        "session": _cap(session, MAX_IDENTIFIER_CHARS) if session is not None else None,
        "runtime": runtime,
        "version": version,
        "tool": _cap(tool, MAX_TOOL_NAME_CHARS),
        "outcome": outcome,
        "duration_ms": round(duration_ms, 1),
        "args_sha256": arguments_digest(arguments),
    }
    paths = touched_paths(arguments, known_secrets)
    if paths:
        record["paths"] = paths[:MAX_PATHS]
        if len(paths) > MAX_PATHS:
            record["paths_omitted"] = len(paths) - MAX_PATHS
    command = arguments.get("command")
    if isinstance(command, str):
        record["command"] = recorded_command(command, known_secrets)
        record["command_sha256"] = hashlib.sha256(command.encode("utf-8", "surrogatepass")).hexdigest()
    for name in IDENTIFIER_ARGUMENTS:
        value = arguments.get(name)
        if isinstance(value, str):
            record[name] = _cap(redact_known(value, known_secrets), MAX_IDENTIFIER_CHARS)
    for name in FLAG_ARGUMENTS:
        value = arguments.get(name)
        if isinstance(value, bool):
            record[name] = value
    return record


def format_time(moment: dt.datetime) -> str:
    """UTC, ISO 8601, milliseconds, `Z`: `2026-12-01T09:30:00.123Z`."""
    utc = moment if moment.tzinfo is dt.UTC else moment.astimezone(dt.UTC)
    return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def arguments_digest(arguments: Mapping[str, Any]) -> str | None:
    """`sha256:<hex>` of the RFC 8785 JCS of the arguments; None when JCS cannot encode them
    (an integer beyond 2^53: such arguments are refused by every schema anyway)."""
    value = dict(arguments)
    try:
        canonical = _plain_jcs(value) if _is_plain_json(value) else rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError):
        return None
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


#: `json.dumps(record, ensure_ascii=True, separators=(",", ":"))`, one encoder for every record.
_line = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode
#: The same with sorted keys and without escapes beyond control characters (`_plain_jcs`).
_sorted_json = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode

#: JCS' safe integers (RFC 8785 3.2.2.3: an I-JSON number), which rfc8785 writes as `str(n)`.
_JCS_INT_MAX = 2**53 - 1


def _is_plain_json(value: Any) -> bool:
    """Whether the JCS of `value` is `_plain_jcs`: only objects with ASCII keys, arrays,
    strings, booleans, null and safe integers (no float: JCS writes numbers as ECMAScript does,
    not as Python does; no key beyond ASCII: JCS orders keys by UTF-16 code units). Iterative:
    the depth is bounded before (`check_limits`), but this needs no bound."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is int:
            if -_JCS_INT_MAX <= item <= _JCS_INT_MAX:
                continue
            return False
        if kind is dict:
            for key in item:
                if type(key) is not str or not key.isascii():
                    return False
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        else:
            return False
    return True


def _plain_jcs(value: Any) -> bytes:
    """RFC 8785 JCS of a value `_is_plain_json` admits: Python's JSON with sorted keys, no
    spaces and no `\\u` escapes beyond control characters escapes strings exactly as JCS does
    (the same table: `\\b \\t \\n \\f \\r \\" \\\\`, other controls `\\u00xx`), and ASCII
    keys sort alike by code point and by UTF-16 unit. A lone surrogate fails the UTF-8 encoding,
    as rfc8785 fails on it (ValueError). tests/runtime/test_audit.py compares both on generated
    values."""
    return _sorted_json(value).encode("utf-8")


def touched_paths(arguments: Mapping[str, Any], known_secrets: Sequence[str] = ()) -> list[str]:
    """The paths the arguments name, as given (known secrets replaced): path-like arguments,
    then a patch's file headers."""
    named = [value for name in PATH_ARGUMENTS if isinstance(value := arguments.get(name), str)]
    patch = arguments.get("patch")
    if isinstance(patch, str):
        for line in patch.splitlines():
            for header in PATCH_HEADERS:
                if line.startswith(header):
                    named.append(line[len(header) :].rstrip("\r").strip())
    return [_cap(redact_known(path, known_secrets), MAX_PATH_CHARS) for path in named]


def _cap(value: str, limit: int) -> str:
    if len(value) <= limit:
        return value
    return f"{value[:limit]}...[{len(value) - limit} more characters]"


# --- the command line: heredoc bodies withheld, secret values redacted ------------------------


def recorded_command(command: str, known_secrets: Sequence[str] = ()) -> str:
    """The command as the log keeps it: the command as run, with only the spans of secret values
    replaced by `[redacted]` and heredoc bodies withheld (`redaction.py` says what is found and
    what is not), capped at MAX_COMMAND_CHARS. `command_sha256` is of the command as sent."""
    text = redact_command(command[:MAX_COMMAND_SCAN_CHARS], known_secrets, kept_chars=MAX_COMMAND_CHARS + 1)
    if len(text) <= MAX_COMMAND_CHARS and len(command) <= MAX_COMMAND_SCAN_CHARS:
        return text
    return f"{text[:MAX_COMMAND_CHARS]}...[cut at {MAX_COMMAND_CHARS} of {len(command)} characters]"


class KnownSecrets:
    """The secrets in a config dir that grant this workstation's shell, for redaction: the
    runtime's bearer (`token`), the link's (`link-token`), the Edge device secret
    (`edge-device.json`), and any `add`ed. The files are read again when one changes, looked at
    at most every RECHECK_S."""

    RECHECK_S = 1.0
    #: A file bigger than this is not one of ours and is not read.
    MAX_FILE_BYTES = 65_536

    def __init__(self, directory: Path) -> None:
        layout = Layout(directory)
        self._files = (layout.token_file, layout.link_token_file, layout.edge_device_file)
        self._added: tuple[str, ...] = ()
        self._signature: tuple[tuple[int, int, int] | None, ...] | None = None
        self._from_files: tuple[str, ...] = ()
        self._checked = float("-inf")
        self._lock = threading.Lock()

    def add(self, secret: str) -> None:
        with self._lock:
            if secret not in self._added:
                self._added += (secret,)

    def values(self) -> tuple[str, ...]:
        with self._lock:
            now = time.monotonic()
            if now - self._checked >= self.RECHECK_S:
                self._checked = now
                signature = tuple(_signature(path) for path in self._files)
                if signature != self._signature:
                    self._signature = signature
                    self._from_files = tuple(
                        secret for path in self._files if (secret := self._read(path)) is not None
                    )
            return self._added + self._from_files

    def _read(self, path: Path) -> str | None:
        try:
            with path.open("rb") as handle:
                data = handle.read(self.MAX_FILE_BYTES + 1)
        except OSError:
            return None
        if len(data) > self.MAX_FILE_BYTES:
            return None
        text = data.decode("utf-8", "replace").strip()
        if path.suffix == ".json":
            # The device record's field (`link/edge_device.py`; the runtime may not import the link).
            try:
                document = json.loads(text)
            except (ValueError, RecursionError):
                return None
            secret = document.get("device_secret") if isinstance(document, dict) else None
            return secret if isinstance(secret, str) else None
        return text or None


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


# --- the writer ------------------------------------------------------------------------------


class AuditLog:
    """Appends records to `<directory>/audit.jsonl`, rotating at `max_file_bytes`.

    `append` writes the record with one write(2) before it returns (it then survives the
    process being killed); a background thread makes what was written durable with
    fdatasync, one call for everything written since its last one and at most one call every
    SYNC_INTERVAL_S (group commit).
    """

    def __init__(
        self, directory: Path, *, max_file_bytes: int = MAX_FILE_BYTES, keep: int = KEEP_FILES
    ) -> None:
        if max_file_bytes < 1 or keep < 1:
            raise ValueError("max_file_bytes and keep must be positive")
        self.directory = directory
        self.path = directory / AUDIT_FILE_NAME
        self.max_file_bytes = max_file_bytes
        self.keep = keep
        #: What redaction replaces wherever it appears in a record (`describe_call`).
        self.known_secrets = KnownSecrets(directory)
        self._lock = threading.Lock()
        self._synced = threading.Condition(self._lock)
        self._fd: int | None = None
        #: Where our last write to `_fd` ended: while the file's size is still that, its last
        #: byte is our record's newline (-1: not known).
        self._end = -1
        self._held: tuple[int, int] | None = None
        self._lock_fd: int | None = None
        self._spelled_for: tuple[str, ...] | None = None
        self._spelled: tuple[str, ...] = ()
        # Counts of records: written (write(2) done), sync attempted, and known durable.
        self._written = self._attempted = self._durable = 0
        self._syncer: threading.Thread | None = None
        self._closed = False
        self._closing = threading.Event()
        #: False after a failed write or sync, until a write succeeds again.
        self.healthy = True
        self.last_error: str | None = None

    def append(self, record: Mapping[str, Any]) -> None:
        """Write `record` as one line; raises AuditUnavailable when it cannot be written."""
        # ASCII only: no control or bidi character of a caller's reaches a terminal that shows
        # the raw file. `safe_json` first (docs/runtime.md "Text"): no `\u` escape in the file
        # spells a lone surrogate (a byte of a path is `\xNN`, anything else U+FFFD), so a reader
        # never gets text it cannot print.
        # (The record is dumped as it is, and again after `safe_json` only when the text spells
        # a surrogate, as `text.dumps` does: the same line, without walking every record.)
        text = _line(record)
        if "\\ud" in text:
            text = _line(safe_json(record))
        # The backstop: a known secret reaches no field of the file, whatever built the record.
        for spelled in self._spelled_secrets():
            if spelled in text:
                text = text.replace(spelled, REDACTED)
        line = text.encode("ascii")
        with self._lock:
            if self._closed:
                raise AuditUnavailable(f"the audit log {self.path} is closed")
            try:
                self._write(line + b"\n")
            except OSError as exc:
                raise self._failed(exc) from exc
            self._written += 1
            self.healthy, self.last_error = True, None
            if self._syncer is None:
                self._syncer = threading.Thread(target=self._sync_loop, name="audit-sync", daemon=True)
                self._syncer.start()
            self._synced.notify_all()

    def _spelled_secrets(self) -> tuple[str, ...]:
        """The known secrets long enough to redact, as the ASCII JSON of a record spells them."""
        secrets = self.known_secrets.values()
        if secrets != self._spelled_for:
            self._spelled = tuple(
                json.dumps(secret, ensure_ascii=True)[1:-1]
                for secret in secrets
                if len(secret) >= MIN_KNOWN_SECRET_CHARS
            )
            self._spelled_for = secrets
        return self._spelled

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record appended so far has been synced; False on a failed sync or
        on timeout."""
        with self._lock:
            target = self._written
            self._synced.wait_for(lambda: self._attempted >= target, timeout)
            return self._durable >= target

    def close(self) -> None:
        """Sync what was written, stop the sync thread and close the files."""
        with self._lock:
            self._closed = True
            self._closing.set()
            self._synced.notify_all()
            syncer = self._syncer
        if syncer is not None:
            syncer.join()
        with self._lock:
            for fd in (self._fd, self._lock_fd):
                if fd is not None:
                    os.close(fd)
            self._fd = self._lock_fd = None

    def _failed(self, exc: OSError) -> AuditUnavailable:
        """Mark the log unhealthy (called with the lock held) and say what to do."""
        self.healthy = False
        self.last_error = f"{self.path}: {exc.strerror or exc}"
        return AuditUnavailable(
            f"cannot write the audit log ({self.last_error}); free disk space or fix the "
            f"permissions of {self.directory}, then retry"
        )

    def _sync_loop(self) -> None:
        while True:
            with self._lock:
                self._synced.wait_for(lambda: self._written > self._attempted or self._closed)
                if self._written == self._attempted:
                    return
                target = self._written
                # A duplicate stays valid if a rotation closes the original meanwhile. No fd: a
                # rotation (which synced the file first) or a failed write (already reported).
                fd = os.dup(self._fd) if self._fd is not None else None
            error: OSError | None = None
            if fd is not None:
                try:
                    _sync_data(fd)
                except OSError as exc:
                    error = exc
                finally:
                    os.close(fd)
            with self._lock:
                # A failed fdatasync is not retried: Linux reports a lost write-back once, and
                # a retry would succeed without the data.
                self._attempted = target
                if error is None:
                    self._durable = target
                else:
                    self._failed(error)
                self._synced.notify_all()
            # Group commit: what is written meanwhile waits for the next sync (see SYNC_INTERVAL_S).
            self._closing.wait(SYNC_INTERVAL_S)

    def _write(self, data: bytes) -> None:
        lock_fd = self._lock_file()
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        try:
            fd, size = self._current()
            if size and size + len(data) > self.max_file_bytes:
                self._rotate(fd)
                fd, size = self._current()
            if size and size != self._end and os.pread(fd, 1, size - 1) != b"\n":
                # The last writer died mid-record: end its torn line so ours stays whole.
                data = b"\n" + data
            _write_all(fd, data)
            self._end = size + len(data)
        except OSError:
            self._forget_current()
            raise
        finally:
            fcntl.flock(lock_fd, fcntl.LOCK_UN)

    def _lock_file(self) -> int:
        if self._lock_fd is None:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._lock_fd = _open_private(self.directory / LOCK_FILE_NAME, os.O_RDWR)
        return self._lock_fd

    def _current(self) -> tuple[int, int]:
        """The fd of the file at `self.path` now (another process may have rotated it), and its
        size (under the flock: no other writer changes it meanwhile)."""
        if self._fd is not None:
            try:
                on_disk = os.stat(self.path, follow_symlinks=False)
            except FileNotFoundError:
                on_disk = None
            # The path still names the file we hold (an fd's device and inode never change, so
            # they are kept from its open): then the path's size is that file's.
            if on_disk is not None and (on_disk.st_dev, on_disk.st_ino) == self._held:
                return self._fd, on_disk.st_size
            # Rotated away by another process, which synced it before renaming it.
            self._forget_current()
        self._fd = _open_private(self.path, os.O_RDWR | os.O_APPEND)
        _fsync_directory(self.directory)
        held = os.fstat(self._fd)
        self._held = (held.st_dev, held.st_ino)
        return self._fd, held.st_size

    def _forget_current(self) -> None:
        self._end = -1
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _rotate(self, fd: int) -> None:
        """`.keep-1` -> `.keep` (the oldest is replaced), ..., current -> `.1`; under the lock."""
        _sync_data(fd)
        for index in range(self.keep - 1, 0, -1):
            older = rotated_path(self.directory, index)
            if older.exists():
                os.replace(older, rotated_path(self.directory, index + 1))
        os.replace(self.path, rotated_path(self.directory, 1))
        self._forget_current()
        _fsync_directory(self.directory)


def rotated_path(directory: Path, index: int) -> Path:
    """`audit.jsonl.<index>`: 1 is the newest rotated file."""
    return directory / f"{AUDIT_FILE_NAME}.{index}"


def _open_private(path: Path, flags: int) -> int:
    """Open (creating 0600) a regular file of ours without following a symlink; tighten its mode."""
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(0, "not a regular file", str(path))
        if info.st_uid != os.geteuid():
            raise OSError(0, "owned by another user", str(path))
        if info.st_mode & 0o077:
            os.fchmod(fd, 0o600)
    except OSError:
        os.close(fd)
        raise
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _sync_data(fd: int) -> None:
    # fdatasync also flushes the size an append changed; macOS has only fsync.
    sync = getattr(os, "fdatasync", os.fsync)
    sync(fd)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- the reader ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unreadable:
    """A line that is not a record: torn by a crash (the last line of a file) or damaged."""

    file: Path
    line_number: int
    torn: bool


def audit_files(directory: Path) -> list[Path]:
    """The audit files that exist, oldest first: `.N` ... `.1`, then the current file."""
    rotated: list[tuple[int, Path]] = []
    prefix = AUDIT_FILE_NAME + "."
    with contextlib.suppress(FileNotFoundError):
        for entry in directory.iterdir():
            suffix = entry.name.removeprefix(prefix)
            if entry.name.startswith(prefix) and suffix.isdigit() and suffix.isascii():
                rotated.append((int(suffix), entry))
    files = [path for _, path in sorted(rotated, reverse=True)]
    current = directory / AUDIT_FILE_NAME
    if current.exists():
        files.append(current)
    return files


def read_records(directory: Path) -> Iterator[dict[str, Any] | Unreadable]:
    """Every record of every audit file, oldest first; a line that is not a JSON object comes
    out as `Unreadable`. A file rotated away while it is read is read to its end as opened."""
    for path in audit_files(directory):
        try:
            handle = path.open("rb")
        except FileNotFoundError:
            continue
        with handle:
            line_number = 0
            for raw in handle:
                line_number += 1
                if not raw.strip():
                    continue
                record = _parse_line(raw)
                if record is None:
                    yield Unreadable(path, line_number, torn=not raw.endswith(b"\n"))
                else:
                    yield record


def _parse_line(raw: bytes) -> dict[str, Any] | None:
    if not raw.endswith(b"\n"):
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("time"), str)
        or not isinstance(value.get("tool"), str)
    ):
        return None
    return value
