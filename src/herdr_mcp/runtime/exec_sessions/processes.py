"""The processes of an exec session: finding them, and signalling only them.

A session's shell leads its own process group (and session), and every process it starts
inherits the variable `HERDR_MCP_EXEC_SESSION=<session id>`. What belongs to a session:

1. its process group: everything the shell starts unless it calls setsid/setpgid; found on
   every system (`killpg(pgid, 0)`), listed on Linux (`/proc/<pid>/stat`);
2. on Linux also every process whose environment still carries the session's variable, which
   finds what left the group (`setsid`, a double fork into a new session, `set -m`). A process
   that drops or rewrites its environment (`env -i`, some daemons) is not found this way, and
   on systems without `/proc` (macOS) only the group is; docs/runtime.md records these limits.

A process-group id is a pid, and a pid can be handed out again once nothing uses it. On Linux
the runtime keeps an exited shell as an unreaped zombie while anything of its session is left
(`wait_keeping_zombie`), and the kernel never reuses the pid of a zombie, so the group id
cannot name someone else's group when it is signalled. Elsewhere the shell is reaped at once,
and the group is watched until it is seen empty (see `live` and `sessions`).

Processes found by their variable are signalled through a pidfd after the variable was checked
again, so a pid that was reused between the look and the signal is never hit.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = [
    "HOLDS_EXITED_SHELL",
    "SESSION_ENV",
    "ProcessTable",
    "exit_fd",
    "exited_status",
    "group_alive",
    "last_pid",
    "orphan_group_status",
    "own_shells",
    "process_identity",
    "reap_shell",
    "shell_started",
    "signal_group",
    "signal_marked",
    "start_ticks",
    "wait_keeping_zombie",
]

#: The variable every process of a session inherits; its value is the session id.
SESSION_ENV = "HERDR_MCP_EXEC_SESSION"
_MARKER_PREFIX = SESSION_ENV.encode() + b"="

#: Whether an exited shell stays a zombie until `reap` (Linux: os.waitid with WNOWAIT, and a
#: /proc to tell zombies from live processes).
HOLDS_EXITED_SHELL = sys.platform == "linux"

_PROC = Path("/proc")
# /proc/<pid>/stat is one line of 52 fields, a few hundred bytes (the command name is at most
# 16 bytes), so one read of this size takes it whole; environ is read to its end in reads of
# _PROC_CHUNK.
_STAT_BYTES = 4096
_PROC_CHUNK = 65536


def wait_keeping_zombie(process: subprocess.Popen[bytes]) -> int:
    """Block until `process` exits and return its status as Popen's returncode would be.

    Where `HOLDS_EXITED_SHELL`, the process is left a zombie (reap it with `process.poll()`),
    so its pid, and the id of the process group it leads, cannot be reused meanwhile.
    """
    if HOLDS_EXITED_SHELL:
        info = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
        if info is not None:  # None only with WNOHANG
            return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
    return process.wait()


def exit_fd(pid: int) -> int | None:
    """Where `HOLDS_EXITED_SHELL` and the kernel has pidfds (Linux 5.3): a descriptor of child
    `pid` that becomes readable when it exits, for the event loop to watch (then read the
    status with `exited_status`); None elsewhere, where a thread blocks in
    `wait_keeping_zombie`. Watching a descriptor costs no thread start per command."""
    if not HOLDS_EXITED_SHELL:
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def exited_status(pid: int) -> int | None:
    """The status of child `pid` as Popen's returncode would be, leaving it a zombie; None
    while it runs (Linux, see `exit_fd`)."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _read_proc(pid: int | str, name: str, *, whole: bool) -> bytes | None:
    """/proc/<pid>/<name> (its first read only unless `whole`); None when it cannot be read
    (gone, another user's). Plain os calls: a table is read after every command, and pathlib's
    per-file cost was most of herdr_exec's bookkeeping (measured: 2.0 ms -> 0.5 ms for 80
    processes)."""
    try:
        fd = os.open(f"/proc/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not whole:
            return os.read(fd, _STAT_BYTES)
        chunks = [os.read(fd, _PROC_CHUNK)]
        while chunks[-1]:
            chunks.append(os.read(fd, _PROC_CHUNK))
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _is_kernel_thread(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is None or int(fields[6]) & _PF_KTHREAD != 0


def _stat_fields(pid: int | str) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, session, ..."""
    text = _read_proc(pid, "stat", whole=False)
    if text is None:
        return None
    return text[text.rfind(b")") + 2 :].split()


#: PF_KTHREAD in the flags of /proc/<pid>/stat: a kernel thread, whose environment is always empty.
_PF_KTHREAD = 0x00200000
#: Reads of an empty environment of a user process before it counts as unmarked.
_EXEC_REREADS = 50


def _marker(pid: int) -> str | None:
    """The session id in the environment process `pid` started with, if any.

    A process in the middle of execve has an empty /proc/<pid>/environ for a moment (the kernel
    lays out the new environment after the old image is gone): a descendant read then would be
    missed for good once its session is judged finished (seen with `setsid -f sh -c '...; exec
    sleep'`). So an empty environment of a user process is read again until it fills in; only a
    kernel thread's, or one still empty after the rereads (a process started with `env -i`), is
    taken as it is.
    """
    environ = _read_proc(pid, "environ", whole=True)
    for _ in range(_EXEC_REREADS):
        if environ != b"" or _is_kernel_thread(pid):
            break
        os.sched_yield()
        environ = _read_proc(pid, "environ", whole=True)
    if not environ:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(_MARKER_PREFIX):
            return entry[len(_MARKER_PREFIX) :].decode("ascii", errors="replace")
    return None


# pid -> (inode of /proc/<pid>, kernel start time) from the last look, for ProcessTable.read;
# looks are taken on the event loop and in the runtime's look thread, one at a time.
_STARTS: dict[int, tuple[int, int]] = {}
_STARTS_LOCK = threading.Lock()


# The shells of this process's sessions that are not reaped yet: their pids, hence the ids of
# their process groups and POSIX sessions (each shell leads its own), name nothing else meanwhile.
_SHELLS: set[int] = set()


def shell_started(pid: int) -> None:
    """Note a session's shell (see `ProcessTable.read`'s `shells`)."""
    _SHELLS.add(pid)


def reap_shell(process: subprocess.Popen[bytes]) -> None:
    """Collect an exited shell (kept as a zombie, see `wait_keeping_zombie`), forgetting it as
    one of ours first: a look that began while it was ours knows its pid was not reused."""
    _SHELLS.discard(process.pid)
    process.poll()


def own_shells() -> frozenset[int]:
    """The shells noted and not reaped, now (any thread)."""
    return frozenset(_SHELLS)


@dataclass(frozen=True)
class _Entry:
    pid: int
    pgid: int
    start: int  # kernel start time, clock ticks after boot
    sid: int = 0  # POSIX session id


@dataclass
class ProcessTable:
    """One look at /proc: the live (not zombie) processes, their groups and start times; the
    session variable of each is read when first asked for."""

    entries: list[_Entry]
    _markers: dict[int, str | None] = field(default_factory=dict)
    #: Shells of ours that were ours for the whole look: the POSIX sessions they lead hold only
    #: their own descendants (a session is inherited and never joined).
    own_sessions: frozenset[int] = frozenset()

    @classmethod
    def read(cls, since: int | None = None, *, shells: frozenset[int] = frozenset()) -> ProcessTable | None:
        """The table now; None on systems without Linux's /proc.

        With `since` (clock ticks), processes an earlier look found to have started before it
        are left out without reading their stat again: they cannot be processes of a session
        whose shell started at `since` (nor join its group: setpgid stays within a session).
        A process is known again by its pid together with the inode number /proc lists for it;
        a new process under a reused pid gets a new inode (the old one dies with its process).
        After each command only the processes started since are read (measured: 0.5 ms -> 0.1
        ms for 100 processes, and less CPU for the next spawn to wait behind on a busy machine).

        With `shells` (`own_shells()` taken before), the shells of other sessions of ours are
        not read either: a shell leads its own process group and POSIX session, so it is never
        a member of another session's group, and by the session's own look it is left out
        anyway (it is the shell). Those still ours when the scan ends are `own_sessions`; any
        reaped meanwhile is read after all (its pid may name another process now).
        """
        if sys.platform != "linux":
            return None
        with _STARTS_LOCK:
            return cls._read(since, shells)

    @classmethod
    def _read(cls, since: int | None, shells: frozenset[int]) -> ProcessTable:
        entries = []
        seen: dict[int, tuple[int, int]] = {}
        with os.scandir(_PROC) as listing:
            for item in listing:
                if not item.name.isdigit():
                    continue
                pid = int(item.name)
                if pid in shells:
                    continue
                inode = item.inode()
                known = _STARTS.get(pid)
                if since is not None and known is not None and known[0] == inode and known[1] < since:
                    seen[pid] = known
                    continue
                entry = _entry(pid)
                if entry is not None:
                    seen[pid] = (inode, entry[1].start)
                    if entry[0]:
                        entries.append(entry[1])
        _STARTS.clear()
        _STARTS.update(seen)
        stable = shells & own_shells()
        for pid in shells - stable:  # reaped during the scan: read it like any process
            entry = _entry(pid)
            if entry is not None and entry[0]:
                entries.append(entry[1])
        return cls(entries, own_sessions=stable)

    def group(self, pgid: int) -> set[int]:
        """The live members of process group `pgid`."""
        return {entry.pid for entry in self.entries if entry.pgid == pgid}

    def marked(self, session_id: str, since: int | None, shell: int | None = None) -> set[int]:
        """Live processes started at or after `since` (clock ticks; None: any time) whose
        environment names session `session_id` (whose shell is `shell`). The environment of a
        process in the POSIX session of another shell of ours (`own_sessions`) is not read: it
        descends from that shell, not from this one."""
        found = set()
        for entry in self.entries:
            if since is not None and entry.start < since:
                continue  # older than the session: not one of its processes
            if entry.sid in self.own_sessions and entry.sid != shell:
                continue
            if entry.pid not in self._markers:
                self._markers[entry.pid] = _marker(entry.pid)
            if self._markers[entry.pid] == session_id:
                found.add(entry.pid)
        return found


def _entry(pid: int) -> tuple[bool, _Entry] | None:
    """(alive: not a zombie, the entry) of process `pid`; None when it cannot be read."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    entry = _Entry(pid, int(fields[2]), int(fields[19]), int(fields[3]))
    return fields[0] not in (b"Z", b"X"), entry


def last_pid() -> int | None:
    """The pid the kernel handed out last in our pid namespace (the last field of
    /proc/loadavg); None where it cannot be read. Every process and thread takes a pid when it
    is created, and pids are handed out in turn, never again while in use: when this is still
    the pid of a shell that has exited (a zombie, so its pid is in use), nothing at all was
    created after that shell, so it left nothing behind. A cheap proof for the common case of a
    quiet machine; anything else is looked for in /proc."""
    if sys.platform != "linux":
        return None
    try:
        fd = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fields = os.read(fd, 256).split()
    except OSError:
        return None
    finally:
        os.close(fd)
    return int(fields[-1]) if fields and fields[-1].isdigit() else None


def group_alive(pgid: int) -> bool:
    """Whether process group `pgid` has a live member (on Linux, zombies do not count: orphans
    are not always reaped quickly)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    table = ProcessTable.read()
    return True if table is None else bool(table.group(pgid))


def signal_group(pgid: int, signum: signal.Signals) -> None:
    """Send `signum` to process group `pgid`; a group that is gone is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def signal_marked(pid: int, session_id: str, signum: signal.Signals) -> None:
    """Send `signum` to `pid` if it still carries session `session_id`'s variable (Linux)."""
    if sys.platform != "linux":
        return
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:  # kernels before 5.3: a plain kill right after the check below
        pidfd = None
    try:
        if _marker(pid) != session_id:
            return  # the pid names another process now
        if pidfd is None:
            os.kill(pid, signum)
        else:
            signal.pidfd_send_signal(pidfd, signum)
    except (ProcessLookupError, PermissionError):
        return
    finally:
        if pidfd is not None:
            os.close(pidfd)


@functools.cache
def _boot_id() -> str | None:
    try:
        return (_PROC / "sys" / "kernel" / "random" / "boot_id").read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def process_identity(pid: int) -> str | None:
    """`<boot id>:<kernel start time>` of process `pid` (live or zombie); None when it does not
    exist or this system has no /proc to tell. Equal identities mean the very same process."""
    boot = _boot_id()
    fields = _stat_fields(pid) if boot is not None else None
    return f"{boot}:{fields[19].decode('ascii')}" if fields is not None and len(fields) > 19 else None


def start_ticks(identity: str | None) -> int | None:
    """The start time in an identity from `process_identity`, if it is of this boot; processes
    of a session cannot have started before its shell."""
    if identity is None:
        return None
    boot, _, ticks = identity.rpartition(":")
    return int(ticks) if boot == _boot_id() and ticks.isdigit() else None


def orphan_group_status(pid: int, recorded: str | None) -> Literal["alive", "gone", "unsure"]:
    """Whether the process group an earlier runtime started as `pid` still has live members.

    Linux never hands out a pid again while it still names a process group, so a pid now held
    by a different process proves the old group is gone. "unsure" when the leader is gone but
    the group id is still in use (a new group could have taken it) or nothing was recorded.
    """
    current = process_identity(pid)
    if current is None:
        return "unsure" if group_alive(pid) else "gone"
    if recorded is None:
        return "unsure"
    if current != recorded:
        return "gone"
    return "alive" if group_alive(pid) else "gone"
