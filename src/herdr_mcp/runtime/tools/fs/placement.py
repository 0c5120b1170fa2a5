"""Where a read-only fs tool's work runs: on the event loop when it is small and every root lies
on a local disk filesystem, else in a worker thread (docs/runtime.md "Where fs work runs").

A worker thread keeps a slow disk (a network filesystem that stopped answering, a FUSE daemon)
from stalling every other call, but the hand-off costs more than a small read: two thread
wake-ups, and under load a GIL round trip with the event loop for each system call the tool
makes (measured for issue 24: the hop was the largest single part of a 4 KiB herdr_fs_read
after the tool itself). So herdr_fs_read of a file up to INLINE_READ_MAX_BYTES and
herdr_fs_list of one directory (not recursive) whose size is up to INLINE_DIRECTORY_MAX_BYTES
run on the event loop, as the audit log's own append does, when every root is on one of
INLINE_FILESYSTEMS and no other kind of filesystem is mounted inside a root (read from
/proc/self/mountinfo, again after MOUNTS_RECHECK_S). Everything else runs in a worker thread as
before: larger files, recursive listings, the other fs tools, any root on another filesystem
(NFS, CIFS, FUSE, 9p, ZFS, ...), and any system without /proc/self/mountinfo (macOS).

What stays on the event loop is a few metadata system calls and a read of at most
INLINE_READ_MAX_BYTES on a local disk; a cold cache on a busy spinning disk can still make
that milliseconds.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from herdr_mcp.runtime.boundary import Offload, Policy, RootSet, SmallWork
from herdr_mcp.runtime.boundary.paths import within

#: Local disk filesystems whose directory size (`st_size`) grows with its entries' bytes.
INLINE_FILESYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "jfs", "reiserfs", "bcachefs", "tmpfs", "overlay"}
)
#: herdr_fs_read runs on the event loop for a file up to this size (counting its lines and
#: checking its UTF-8 takes a few hundred microseconds at most).
INLINE_READ_MAX_BYTES = 256 << 10
#: herdr_fs_list (not recursive) runs on the event loop for a directory up to this size: about
#: 1,000-2,000 entries on ext4, btrfs or tmpfs.
INLINE_DIRECTORY_MAX_BYTES = 64 << 10
#: The mount table is read again after this long (a filesystem mounted inside a root meanwhile
#: is seen within it).
MOUNTS_RECHECK_S = 5.0
MOUNTINFO = Path("/proc/self/mountinfo")


_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    """A mountinfo path field: space, tab, newline and backslash are written as octal escapes."""
    if "\\" not in field:
        return field
    return _OCTAL.sub(lambda match: chr(int(match.group(1), 8)), field)


def read_mounts(text: str) -> list[tuple[str, str]]:
    """(mount point, filesystem type) of each line of a /proc/<pid>/mountinfo, in its order."""
    mounts: list[tuple[str, str]] = []
    for line in text.splitlines():
        fields = line.split(" ")
        try:
            separator = fields.index("-", 6)
            mounts.append((_unescape(fields[4]), fields[separator + 1]))
        except (ValueError, IndexError):
            continue
    return mounts


def roots_on_local_disks(roots: RootSet, mounts: list[tuple[str, str]]) -> bool:
    """Whether every root lies on one of INLINE_FILESYSTEMS and nothing else is mounted inside
    one. A mount point listed twice is the later mount (it covers the earlier one)."""
    for root in roots.roots:
        path = str(root.path)
        holder: tuple[str, str] | None = None
        for point, kind in mounts:
            if within(path, point) and (holder is None or len(point) >= len(holder[0])):
                holder = (point, kind)
            elif point != path and within(point, path) and kind not in INLINE_FILESYSTEMS:
                return False
        if holder is None or holder[1] not in INLINE_FILESYSTEMS:
            return False
    return True


class Placement:
    """Decides, on the event loop, whether a read runs there (module docstring). One verdict is
    kept for the latest RootSet and reused for MOUNTS_RECHECK_S."""

    def __init__(self, mountinfo: Path = MOUNTINFO, clock: Any = time.monotonic) -> None:
        self._mountinfo = mountinfo
        self._clock = clock
        self._roots: RootSet | None = None
        self._checked = float("-inf")
        self._local = False

    def local(self, roots: RootSet) -> bool:
        """Whether every root of `roots` is on a local disk filesystem (`roots_on_local_disks`)."""
        now = self._clock()
        if roots is not self._roots or now - self._checked >= MOUNTS_RECHECK_S:
            try:
                # procfs: answered from the kernel's memory, never from a disk.
                mounts = read_mounts(self._mountinfo.read_text(encoding="utf-8", errors="surrogateescape"))
            except OSError:
                mounts = []
            self._roots, self._checked = roots, now
            self._local = bool(mounts) and roots_on_local_disks(roots, mounts)
        return self._local

    async def run(
        self,
        function: Callable[[RootSet, Policy, dict[str, Any]], dict[str, Any]],
        roots: RootSet,
        policy: Policy,
        args: dict[str, Any],
    ) -> dict[str, Any]:
        """`function(roots, policy, args)` on the event loop within `SmallWork`'s bounds when
        the roots are local (`local`), else (or when it meets a larger file or directory:
        `Offload`, raised before that is opened) in a worker thread."""
        if self.local(roots):
            try:
                with SmallWork(INLINE_READ_MAX_BYTES, INLINE_DIRECTORY_MAX_BYTES):
                    return function(roots, policy, args)
            except Offload:
                pass  # larger than the bounds: the whole call again, in a worker thread
        return await asyncio.to_thread(function, roots, policy, args)
