"""A pane's terminal: a real shell on a pty, its output kept as scrollback, and Herdr's key names.

Herdr runs each pane's program on a pty in the pane's cwd with HERDR_ENV=1, HERDR_SOCKET_PATH,
HERDR_WORKSPACE_ID, HERDR_TAB_ID and HERDR_PANE_ID set (src/pane/, src/app/ids.rs pane_launch_env).
Key names follow src/config/keybinds.rs parse_key_combo (modifiers joined with `+`, named keys,
single characters, f1..f12) with the aliases of src/app/api_helpers.rs normalize_api_key_alias;
an unknown name is Herdr's `invalid_key` ("unsupported key <name>").
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import termios
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

SCREEN_COLUMNS = 80
SCREEN_ROWS = 24
MAX_SCROLLBACK_LINES = 5000
REAP_TIMEOUT_S = 2.0

ANSI_ESCAPE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")

_NAMED_KEYS: dict[str, str] = {
    "space": " ", " ": " ", "enter": "\r", "return": "\r", "esc": "\x1b", "escape": "\x1b",
    "tab": "\t", "backspace": "\x7f", "bs": "\x7f", "left": "\x1b[D", "right": "\x1b[C", "up": "\x1b[A",
    "down": "\x1b[B", "minus": "-", "comma": ",", "period": ".", "slash": "/", "backslash": "\\",
    "quote": "'", "double_quote": '"', "double-quote": '"', "semicolon": ";", "colon": ":",
    "percent": "%", "ampersand": "&", "backtick": "`", "plus": "+",
}  # fmt: skip
_MODIFIERS = {"ctrl", "control", "alt", "option", "meta", "shift", "super", "cmd", "command"}
_FUNCTION_KEYS = {1: "\x1bOP", 2: "\x1bOQ", 3: "\x1bOR", 4: "\x1bOS"}


class InvalidKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(f"unsupported key {key}")
        self.key = key


@dataclass(frozen=True)
class Key:
    """One parsed key: its name (lowercase, e.g. `enter`, `c`) and the bytes a terminal sends."""

    name: str
    modifiers: frozenset[str]
    data: str


def parse_key(raw: str) -> Key:
    """Herdr's key syntax (`Enter`, `ctrl+c`, `C-c`, `a`, `f5`); raises InvalidKey."""
    spec = {"C-c": "ctrl+c", "c-c": "ctrl+c", "+": "plus"}.get(raw.strip(), raw.strip())
    modifiers: set[str] = set()
    key: str | None = None
    for part in spec.split("+"):
        token = part.strip()
        if not token:
            raise InvalidKey(raw)
        if token.lower() in _MODIFIERS:
            modifiers.add(
                {"control": "ctrl", "option": "alt", "meta": "alt"}.get(token.lower(), token.lower())
            )
        elif key is not None:
            raise InvalidKey(raw)
        else:
            key = token
    if key is None:
        raise InvalidKey(raw)
    lower = key.lower()
    if lower in _NAMED_KEYS:
        data = _NAMED_KEYS[lower]
        if lower == "tab" and "shift" in modifiers:
            data = "\x1b[Z"
    elif len(key) == 1:
        data = key
        if "ctrl" in modifiers and key.isalpha():
            data = chr(ord(key.lower()) & 0x1F)
    elif lower.startswith("f") and lower[1:].isdigit() and 1 <= int(lower[1:]) <= 24:
        data = _FUNCTION_KEYS.get(int(lower[1:]), f"\x1b[{int(lower[1:]) + 10}~")
    else:
        raise InvalidKey(raw)
    if "alt" in modifiers:
        data = "\x1b" + data
    return Key(lower, frozenset(modifiers), data)


@dataclass
class Scrollback:
    """A pane's output as lines: finished lines plus the one being written."""

    lines: list[str] = field(default_factory=list)
    partial: str = ""

    def append(self, text: str) -> None:
        text = text.replace("\r\n", "\n").replace("\r", "")
        pieces = (self.partial + text).split("\n")
        self.lines.extend(pieces[:-1])
        self.partial = pieces[-1]
        del self.lines[:-MAX_SCROLLBACK_LINES]

    def logical_lines(self) -> list[str]:
        return [*self.lines, self.partial] if self.partial else list(self.lines)


class PaneProcess:
    """A shell on a pty; output goes to `on_output`, its exit to `on_exit`. Reaped by `close()`."""

    def __init__(
        self,
        cwd: Path,
        env: Mapping[str, str],
        on_output: Callable[[str], None],
        on_exit: Callable[[], None],
        argv: tuple[str, ...] = ("/bin/sh",),
    ) -> None:
        self._on_output = on_output
        self._on_exit = on_exit
        master, slave = pty.openpty()
        self.tty: str | None = os.ttyname(slave) if _has_ttyname(slave) else None
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SCREEN_ROWS, SCREEN_COLUMNS, 0, 0))
        full_env = {**os.environ, **env, "PS1": "", "PS2": "", "TERM": "dumb"}
        full_env.pop("ENV", None)
        try:
            self.process = subprocess.Popen(
                argv,
                cwd=cwd,
                env=full_env,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                start_new_session=True,
                preexec_fn=_take_controlling_tty,
                close_fds=True,
            )
        finally:
            os.close(slave)
        self._master: int | None = master
        os.set_blocking(master, False)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(master, self._readable)
        self.exited = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def foreground_pgid(self) -> int | None:
        if self._master is None:
            return None
        try:
            return os.tcgetpgrp(self._master)
        except OSError:
            return None

    def write(self, data: str) -> None:
        if self._master is None:
            raise OSError("the pane's terminal is closed")
        os.write(self._master, data.encode())

    def _readable(self) -> None:
        assert self._master is not None
        try:
            chunk = os.read(self._master, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self._on_output(chunk.decode(errors="replace"))
            return
        self._detach()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=0.2)
        if not self.exited:
            self.exited = True
            self._on_exit()

    def _detach(self) -> None:
        master, self._master = self._master, None
        if master is not None:
            self._loop.remove_reader(master)
            os.close(master)

    def close(self) -> None:
        """Hang up the pane's session and reap the shell (SIGKILL after REAP_TIMEOUT_S)."""
        self.exited = True
        self._detach()
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGHUP)
            try:
                self.process.wait(timeout=REAP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


def _take_controlling_tty() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _has_ttyname(fd: int) -> bool:
    try:
        os.ttyname(fd)
    except OSError:
        return False
    return True


def process_record(pid: int) -> dict[str, object] | None:
    """A PaneProcessInfoProcess read from /proc: pid, name, argv0, argv, cmdline, cwd."""
    base = Path(f"/proc/{pid}")
    try:
        name = (base / "comm").read_text().strip()
        argv = [part for part in (base / "cmdline").read_bytes().decode(errors="replace").split("\0") if part]
    except OSError:
        return None
    record: dict[str, object] = {"pid": pid, "name": name}
    if argv:
        record.update(argv0=argv[0], argv=argv, cmdline=" ".join(argv))
    with contextlib.suppress(OSError):
        record["cwd"] = os.readlink(base / "cwd")
    return record


def processes_in_group(pgid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and int(fields[2]) == pgid:
            pids.append(int(entry.name))
    return sorted(pids)
