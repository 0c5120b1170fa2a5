"""The search behind herdr_fs_grep: ripgrep when it is on PATH, else a Python engine. Either one
runs as a child process that is killed at the call's deadline.

Why a child process for the Python engine too: Python's `re` backtracks, and one search holds the
GIL until it returns. Run in a runtime thread, `(a+)+$` on a 100,000-character line never
returned, starved the event loop (/health stopped answering) and could not be stopped. In a child
it has its own interpreter: the runtime's thread only waits on a pipe, and the kill at the
deadline bounds every pattern, every tree and every filesystem. A linear-time regex engine (RE2)
would bound the matching but not a walk of a huge or hung tree, and would add a compiled
dependency; it is not needed once the child can be killed.

One deadline per call (GREP_TIMEOUT_S), shared by rg's two runs (see `_grep_rg`). When it passes,
the child is killed and the call fails with `grep_timeout`, carrying the matches found so far.

Dialects: rg reads Rust regex syntax (no backreferences or lookaround); the Python engine reads
Python `re` syntax. Literals, classes, anchors, alternation and repetition mean the same in both.
A pattern the engine rejects is `pattern_invalid` with the engine's own reason.

The Python engine's child is this module: `main` reads one query (JSON) on stdin and writes one
JSON line per match, then an end (or error) line.
"""

from __future__ import annotations

import base64
import json
import math
import os
import posixpath
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal, cast

import herdr_mcp
from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary import (
    RG_SECRET_EXCLUDE_GLOBS,
    ResolvedPath,
    Root,
    is_git_name,
    is_secret_path,
    open_directory,
    open_error,
    open_file_in,
    open_regular,
    utf8_boundary,
    walk,
)

__all__ = [
    "BINARY_SNIFF_BYTES",
    "GREP_LINE_MAX_BYTES",
    "GREP_MAX_FILE_BYTES",
    "GREP_TIMEOUT_S",
    "GrepEngine",
    "GrepQuery",
    "Matches",
    "engine_in_use",
    "glob_match",
    "main",
    "search",
    "stop_searches",
]

# Both engines skip files above this size (rg --max-filesize): larger files are data or build
# output, and a single minified line of them could otherwise fill memory.
GREP_MAX_FILE_BYTES = 32 << 20
# Each returned line is clipped to this many bytes, so one minified line cannot eat the max_bytes
# budget of every other match.
GREP_LINE_MAX_BYTES = 2048
# One call searches at most this long, whatever the engine; then it fails with `grep_timeout`.
GREP_TIMEOUT_S = 20.0
# A file whose first 64 KiB contain a NUL byte is binary and skipped; 64 KiB is ripgrep's default
# buffer, so both engines decide alike for NULs that early.
BINARY_SNIFF_BYTES = 64 << 10
# The Python engine's child also arms SIGALRM (default action: terminate) this long after its
# deadline, so it ends by itself even if the runtime that should kill it is gone.
_WORKER_ALARM_GRACE_S = 2

GrepEngine = Literal["auto", "rg", "python"]


# --- Globs -------------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
            continue
        if pattern.startswith("**", index):
            out.append(".*")
            index += 2
            continue
        char = pattern[index]
        index += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (close := pattern.find("]", index + 1)) != -1:
            body = pattern[index:close]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]")
            index = close + 1
        else:
            out.append(re.escape(char))
    try:
        return re.compile("".join(out) + r"\Z", re.DOTALL)
    except re.error as exc:
        raise ToolError(
            "invalid_arguments", f"The glob {pattern!r} is malformed: {exc}.", argument="glob"
        ) from exc


def glob_match(pattern: str, relative: str) -> bool:
    """Glob match on a relative POSIX path.

    `*` and `?` stay within one path component, `**` spans components (`**/` also matches
    nothing), `[...]` is a character class (`[!...]` negated). A pattern without `/` matches the
    last component at any depth (`*.py` finds `a/b/c.py`); one with `/` matches the whole path.
    """
    subject = relative if "/" in pattern else posixpath.basename(relative)
    return _glob_regex(pattern).match(subject) is not None


# --- Query and results -------------------------------------------------------------------------


@dataclass
class Matches:
    """Collects matches under the count and byte caps; `add` says whether to keep going."""

    max_matches: int
    max_bytes: int
    items: list[dict[str, Any]] = field(default_factory=list)
    used_bytes: int = 0
    truncated: bool = False
    capped: bool = False  # the count or byte cap refused a match (not the deadline)
    timed_out: bool = False
    on_add: Callable[[dict[str, Any]], None] | None = None

    def add(self, path: str, line: int, raw: bytes) -> bool:
        """Keep one matching line (clipped) unless a cap refuses it."""
        text = _clip_line(raw)
        size = len(text.encode("utf-8"))
        if len(self.items) == self.max_matches or self.used_bytes + size > self.max_bytes:
            self.truncated = self.capped = True
            return False
        item = {"path": path, "line": line, "text": text}
        self.items.append(item)
        self.used_bytes += size
        if self.on_add is not None:
            self.on_add(item)
        return True


def _clip_line(raw: bytes) -> str:
    raw = raw.removesuffix(b"\n").removesuffix(b"\r")
    if len(raw) > GREP_LINE_MAX_BYTES:
        raw = raw[: utf8_boundary(raw, GREP_LINE_MAX_BYTES)]
    return raw.decode("utf-8", "replace")


@dataclass(frozen=True)
class GrepQuery:
    """One search: under `target` (inside `root`), `base` is the target relative to `root`."""

    root: Root
    target: ResolvedPath
    base: str  # the search path relative to `root` (the target's own root may be nested deeper)
    pattern: str
    regex: bool
    case_insensitive: bool
    glob: str | None

    def wants(self, root_relative: str) -> bool:
        """Whether a file (root-relative path) may be searched: not secret, not in .git, glob."""
        if is_secret_path(root_relative) or any(is_git_name(part) for part in root_relative.split("/")):
            return False
        return self.glob is None or glob_match(self.glob, root_relative)


def engine_in_use() -> Literal["rg", "python"]:
    """The engine an `auto` search would use right now (what /health reports)."""
    return "rg" if shutil.which("rg") is not None else "python"


def search(
    query: GrepQuery, matches: Matches, *, engine: GrepEngine, timeout_s: float
) -> Literal["rg", "python"]:
    """Fill `matches` for `query` with rg (when on PATH, unless `engine` says python) or Python.

    Returns the engine used. Raises ToolError: `engine_unavailable` (engine="rg" without rg, or
    a Python engine that could not run), `pattern_invalid`, path codes for a single-file target,
    and `grep_timeout` when the deadline (`timeout_s` from now) passed first.
    """
    deadline = time.monotonic() + timeout_s
    rg = shutil.which("rg") if engine != "python" else None
    if engine == "rg" and rg is None:
        raise ToolError("engine_unavailable", "ripgrep (rg) is not installed; use engine='python' or 'auto'.")
    used: Literal["rg", "python"] = "python"
    if rg is not None:
        try:
            _grep_rg(rg, query, matches, deadline)
            used = "rg"
        except OSError as exc:
            if engine == "rg":
                raise ToolError(
                    "engine_unavailable", f"ripgrep could not run ({exc.strerror}); use engine='python'."
                ) from exc
    if used == "python":
        _grep_python(query, matches, deadline)
    if matches.timed_out:
        raise ToolError(
            "grep_timeout",
            f"The search did not finish within {timeout_s:g} s and was stopped; narrow it with `path` "
            f"or `glob`, or simplify the pattern. The {len(matches.items)} matches found before the "
            "deadline are in `matches`.",
            timeout_s=timeout_s,
            engine=used,
            matches=matches.items,
        )
    return used


# --- Child processes ---------------------------------------------------------------------------

# Every search process alive in this runtime, so shutdown can stop them: a runtime thread waiting
# on one would otherwise keep the process alive until the search's deadline.
_LIVE: set[_Child] = set()
_LIVE_LOCK = threading.Lock()


def stop_searches() -> None:
    """Kill every running search (runtime shutdown); their calls fail with `runtime_stopping`."""
    with _LIVE_LOCK:
        children = list(_LIVE)
    for child in children:
        child.interrupt()


def _stopping() -> ToolError:
    return ToolError("runtime_stopping", "The runtime is shutting down; retry the search once it is back.")


class _Child:
    """A search process that is killed when the deadline passes; `timed_out` says whether it was,
    `interrupted` whether shutdown killed it first."""

    def __init__(self, command: list[str], *, cwd: Path, deadline: float, stdin: bytes | None = None) -> None:
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed by __exit__)
        try:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._errors,
                cwd=cwd,
            )
        except BaseException:
            self._errors.close()
            raise
        self.stdout = cast(IO[bytes], self.process.stdout)  # stdout=PIPE
        self.timed_out = False
        self.interrupted = False
        with _LIVE_LOCK:
            _LIVE.add(self)
        self._timer = threading.Timer(max(deadline - time.monotonic(), 0.0), self._expire)
        self._timer.start()
        if stdin is not None and self.process.stdin is not None:
            try:
                self.process.stdin.write(stdin)
                self.process.stdin.close()
            except OSError:
                pass  # the child already died (broken pipe); its exit status tells why

    def _expire(self) -> None:
        if self.process.poll() is None:
            self.timed_out = True
            self.process.kill()

    def interrupt(self) -> None:
        """Kill the child for shutdown (a no-op once it has ended)."""
        if self.process.poll() is None:
            self.interrupted = True
            self.process.kill()

    def stop(self) -> int:
        """Kill the child if it still runs (the caps may have stopped reading); its exit status."""
        self._timer.cancel()
        if self.process.poll() is None:
            self.process.kill()
        return self.process.wait()

    def error_text(self) -> str:
        """The last 4 KiB of what the child wrote to stderr."""
        self._errors.seek(0, os.SEEK_END)
        self._errors.seek(max(self._errors.tell() - 4096, 0))
        return self._errors.read().decode("utf-8", "replace").strip()

    def __enter__(self) -> _Child:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        with _LIVE_LOCK:
            _LIVE.discard(self)
        self.stop()
        self.stdout.close()
        self._errors.close()


# --- rg ----------------------------------------------------------------------------------------


def _rg_command(rg: str, query: GrepQuery, max_matches: int, *, sort: bool) -> list[str]:
    command = [
        rg,
        "--json",
        "--no-config",
        "--hidden",
        "--no-ignore",
        "--no-follow",
        *(["--sort", "path"] if sort else []),
        "--encoding",
        "none",
        "--max-filesize",
        str(GREP_MAX_FILE_BYTES),
        "--max-count",
        str(max_matches + 1),
        "--iglob",
        "!.git",
    ]
    for secret_glob in RG_SECRET_EXCLUDE_GLOBS:
        command += ["--iglob", "!" + secret_glob]
    if not query.regex:
        command.append("--fixed-strings")
    if query.case_insensitive:
        command.append("--ignore-case")
    return [*command, "--", query.pattern, str(query.target.path)]


def _rg_text(field_value: Mapping[str, Any]) -> bytes:
    if "text" in field_value:
        return str(field_value["text"]).encode("utf-8", "surrogateescape")
    return base64.b64decode(str(field_value.get("bytes", "")))


def _rg_single_file_is_binary(target: ResolvedPath) -> bool:
    """rg searches an explicitly named binary file anyway; apply the traversal rule ourselves."""
    with open_regular(target) as (fd, st):
        return st.st_size > GREP_MAX_FILE_BYTES or b"\0" in os.read(fd, BINARY_SNIFF_BYTES)


def _path_order(match: dict[str, Any]) -> tuple[list[str], int]:
    """rg's `--sort path` order: depth-first, names compared per component."""
    return str(match["path"]).split("/"), int(match["line"])


def _grep_rg(rg: str, query: GrepQuery, matches: Matches, deadline: float) -> None:
    """Search with rg: in parallel first; sorted (single-threaded) only when the caps cut it short.

    `--sort path` makes rg use one thread, about half the speed on two cores. When every match
    fits the caps, sorting them here gives the same answer; when the caps stop the search, which
    matches come first matters, so the search runs again sorted, within the same deadline.
    """
    target = query.target
    if not stat.S_ISDIR(os.lstat(target.path).st_mode) and (
        not query.wants(query.base) or _rg_single_file_is_binary(target)
    ):
        return
    parallel = Matches(max_matches=matches.max_matches, max_bytes=matches.max_bytes)
    _run_rg(rg, query, parallel, sort=False, deadline=deadline)
    if parallel.capped and not parallel.timed_out:
        _run_rg(rg, query, matches, sort=True, deadline=deadline)
        return
    matches.items.extend(sorted(parallel.items, key=_path_order))
    matches.used_bytes += parallel.used_bytes
    matches.truncated = parallel.truncated
    matches.timed_out = parallel.timed_out


def _run_rg(rg: str, query: GrepQuery, matches: Matches, *, sort: bool, deadline: float) -> None:
    """One rg run into `matches`, killed at the deadline (then `matches.timed_out`)."""
    command = _rg_command(rg, query, matches.max_matches, sort=sort)
    with _Child(command, cwd=query.root.path, deadline=deadline) as child:
        finished = _read_rg_stream(child.stdout, query, matches)
        status = child.stop()
        if child.interrupted:
            raise _stopping()
        if child.timed_out:
            matches.timed_out = matches.truncated = True
            return
        if finished and status == 2 and not matches.items:
            message = child.error_text()
            if "regex" in message or "error parsing" in message:
                raise ToolError(
                    "pattern_invalid",
                    f"The regular expression is invalid ({message.splitlines()[-1]}); fix it or "
                    "set regex=false.",
                )
        if finished and status not in (0, 1, 2):
            matches.truncated = True


def _read_rg_stream(stream: IO[bytes], query: GrepQuery, matches: Matches) -> bool:
    """Consume rg --json output; False when the caps (or a kill) stopped reading early."""
    for raw in stream:
        try:
            message = json.loads(raw)
        except ValueError:  # a line cut short by a kill
            matches.truncated = True
            return False
        if not isinstance(message, dict) or message.get("type") != "match":
            continue
        data = message["data"]
        absolute = Path(os.fsdecode(_rg_text(data["path"])))
        try:
            root_relative = absolute.relative_to(query.root.path).as_posix()
        except ValueError:
            continue
        if not query.wants(root_relative):
            continue
        if not matches.add(root_relative, int(data["line_number"]), _rg_text(data["lines"])):
            return False
    return True


# --- Python engine: the runtime's side ---------------------------------------------------------

# The child imports this package from where the runtime imported it, in isolated mode (-I: no
# environment variables, user site or current directory on sys.path) and without site (-S): the
# engine needs only the standard library and herdr_mcp, and starts faster without site.
_WORKER_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from herdr_mcp.runtime.grep import main; main()"


def _worker_command() -> list[str]:
    package_parent = Path(herdr_mcp.__file__).resolve().parent.parent
    return [sys.executable, "-I", "-S", "-c", _WORKER_BOOT, str(package_parent)]


def _grep_python(query: GrepQuery, matches: Matches, deadline: float) -> None:
    """Run the Python engine in a child process; its matches stream into `matches`."""
    request = {
        **_query_to_json(query),
        "max_matches": matches.max_matches,
        "max_bytes": matches.max_bytes,
        "alarm_s": max(deadline - time.monotonic(), 0.0) + _WORKER_ALARM_GRACE_S,
    }
    with _Child(
        _worker_command(), cwd=query.root.path, deadline=deadline, stdin=json.dumps(request).encode()
    ) as child:
        ended = _read_worker_stream(child.stdout, matches)
        status = child.stop()
        if ended:
            return
        if child.interrupted:
            raise _stopping()
        if child.timed_out:
            matches.timed_out = matches.truncated = True
            return
        raise ToolError(
            "engine_unavailable",
            f"The Python search engine stopped unexpectedly (exit {status}: "
            f"{child.error_text()[-300:] or 'no message'}); install ripgrep (rg) or retry.",
        )


def _read_worker_stream(stream: IO[bytes], matches: Matches) -> bool:
    """Consume the child's JSON lines; True once its end line arrived. Raises its ToolError."""
    for raw in stream:
        try:
            message = json.loads(raw)
        except ValueError:  # a line cut short by the kill
            return False
        if "match" in message:
            matches.items.append(message["match"])
        elif "end" in message:
            matches.truncated = bool(message["end"]["truncated"])
            return True
        elif "error" in message:
            details = dict(message["error"])
            raise ToolError(str(details.pop("code")), str(details.pop("message")), **details)
    return False


def _query_to_json(query: GrepQuery) -> dict[str, Any]:
    target = query.target
    return {
        "root": str(query.root.path),
        "root_kind": query.root.kind,
        "target_root": str(target.root.path),
        "target_root_kind": target.root.kind,
        "target": str(target.path),
        "relative": target.relative,
        "lexical": str(target.lexical),
        "base": query.base,
        "pattern": query.pattern,
        "regex": query.regex,
        "case_insensitive": query.case_insensitive,
        "glob": query.glob,
    }


def _query_from_json(data: Mapping[str, Any]) -> GrepQuery:
    target_root = Root(Path(data["target_root"]), data["target_root_kind"])
    target = ResolvedPath(
        root=target_root,
        path=Path(data["target"]),
        relative=data["relative"],
        lexical=Path(data["lexical"]),
        symlinked=False,
        exists=True,
    )
    return GrepQuery(
        root=Root(Path(data["root"]), data["root_kind"]),
        target=target,
        base=data["base"],
        pattern=data["pattern"],
        regex=data["regex"],
        case_insensitive=data["case_insensitive"],
        glob=data["glob"],
    )


# --- Python engine: the child's side -----------------------------------------------------------


def main() -> None:
    """The Python engine's child: one query on stdin; JSON lines on stdout, flushed per match."""
    request = json.loads(sys.stdin.buffer.read())
    signal.alarm(math.ceil(request["alarm_s"]))
    out = sys.stdout.buffer

    def emit(message: dict[str, Any]) -> None:
        out.write(json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n")
        out.flush()

    matches = Matches(
        max_matches=request["max_matches"],
        max_bytes=request["max_bytes"],
        on_add=lambda item: emit({"match": item}),
    )
    query = _query_from_json(request)
    try:
        _search_python(query, matches)
    except ToolError as exc:
        emit({"error": exc.to_dict()})
        return
    except OSError as exc:  # the searched path vanished or changed type meanwhile
        emit({"error": open_error(exc, query.base).to_dict()})
        return
    emit({"end": {"truncated": matches.truncated}})


def _python_regex(query: GrepQuery) -> re.Pattern[str]:
    source = query.pattern if query.regex else re.escape(query.pattern)
    try:
        return re.compile(source, re.IGNORECASE if query.case_insensitive else 0)
    except re.error as exc:
        raise ToolError(
            "pattern_invalid", f"The regular expression is invalid: {exc}; fix it or set regex=false."
        ) from exc


def _search_python(query: GrepQuery, matches: Matches) -> None:
    rx = _python_regex(query)
    for root_relative, fd in _grep_files(query):
        try:
            if not _search_file(fd, rx, root_relative, matches):
                return
        finally:
            os.close(fd)


def _search_file(fd: int, rx: re.Pattern[str], path: str, matches: Matches) -> bool:
    """Search one open file; False when the caps say stop."""
    head = os.read(fd, BINARY_SNIFF_BYTES)
    if b"\0" in head:
        return True
    os.lseek(fd, 0, os.SEEK_SET)
    with os.fdopen(os.dup(fd), "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if b"\0" in raw:
                return True
            line = raw.removesuffix(b"\n").decode("utf-8", "replace")
            if rx.search(line) and not matches.add(path, number, raw):
                return False
    return True


def _grep_files(query: GrepQuery) -> Iterator[tuple[str, int]]:
    """(root-relative path, open fd) of every file the query may search, in name order."""
    target = query.target
    if not stat.S_ISDIR(os.lstat(target.path).st_mode):
        if query.wants(query.base) and os.lstat(target.path).st_size <= GREP_MAX_FILE_BYTES:
            with open_regular(target) as (fd, _):
                yield query.base, os.dup(fd)
        return
    for entry in walk(open_directory(target), query.base, recursive=True):
        root_relative = posixpath.normpath(posixpath.join(query.base, entry.relative))
        if entry.kind != "file" or entry.size > GREP_MAX_FILE_BYTES or not query.wants(root_relative):
            continue
        opened = open_file_in(entry.dir_fd, entry.name)
        if opened is not None:
            yield root_relative, opened
