"""What the serving processes (the runtime, the link) share: the loopback socket they listen on,
socket timeouts, the startup heap freeze and stopping on SIGTERM/SIGINT at any moment."""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator


def bind_loopback(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host` (a loopback address); port 0 picks a free one.

    The socket is made with IPPROTO_TCP because asyncio only turns TCP_NODELAY on for sockets
    that say so; without it every keep-alive request waits ~40 ms for a delayed ACK.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class StopSignals:
    """SIGTERM and SIGINT as a request to stop, safe whenever they arrive.

    Python runs a signal handler in the main thread between any two bytecodes, also inside a
    weakref callback or a `__del__`, where an exception is printed and dropped: a handler that
    raised `SystemExit` was lost that way and the runtime kept serving (issue 9, item 12). A
    handler that sets a `threading.Event` can deadlock: if the signal lands while the main thread
    holds that event's lock (inside `wait`), `set` waits for it forever. So the handler here only
    counts the signal and writes a byte to a pipe, which takes no lock and cannot fail; waiters
    read the count and the pipe (also the process's wakeup fd, see `install`): a thread with
    `wait`, an event loop with `wait_async`.

    One per process (`stop_signals()`): signal dispositions are process-wide.
    """

    def __init__(self) -> None:
        #: Signals received so far; the commands treat a second one as "stop without waiting".
        self.count = 0
        self._read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def install(self) -> None:
        # The kernel may deliver the signal to any thread (the link has one per connection), and
        # then the main thread, blocked in `select`, is not interrupted: the Python handler would
        # wait for it to wake up by itself (the link kept serving after SIGTERM). With the pipe as
        # the wakeup fd, CPython's C-level handler writes a byte to it on whichever thread it runs,
        # which wakes the waiter in the main thread, where the Python handler then runs.
        signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        # SIGINT first: once SIGTERM is caught (visible in /proc/<pid>/status), both are ours.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        self.count += 1
        with contextlib.suppress(BlockingIOError):  # a full pipe already wakes every waiter
            os.write(self._write_fd, b"\0")

    def exiting(self) -> None:
        """The command has stopped: ignore these signals while the interpreter exits.

        At exit Python puts the default action (death by the signal) back for every handler it
        installed, so a second SIGTERM in the last milliseconds ended the process with -15
        instead of 0; it leaves an ignored signal ignored.
        """
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)

    def is_set(self) -> bool:
        """A stop was asked for (the `threading.Event` spelling, for loops written against one)."""
        return self.count > 0

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a stop is asked for or `timeout` passes; whether one was asked for."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.count:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            # The byte stays in the pipe, so every later wait returns at once.
            select.select([self._read_fd], [], [], left)
        return True

    @contextlib.contextmanager
    def imports_end_the_start(self) -> Iterator[None]:
        """While the block runs, a stop already asked for ends the start at the next module import
        (raising `StartStopped` from it), so a start spent importing (`serve` loads the SDK and the
        HTTP stack: about 1 s idle, over 10 s at load 6 on 2 cores) still stops within moments of
        the signal. The handler itself still only counts; the raise comes from ordinary code, the
        import, at most once, so clean-up that imports on the way out runs. Only for the start:
        a stop while serving must let calls in flight finish, whatever they import."""
        finder = _StopAtImport(self)
        sys.meta_path.insert(0, finder)
        try:
            yield
        finally:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(finder)

    async def wait_async(self, count: int = 1) -> None:
        """Return once `count` signals have arrived, without blocking the running event loop."""
        import asyncio  # here: the link, which has no event loop, does not pay for the import

        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        loop.add_reader(self._read_fd, woken.set)
        try:
            while self.count < count:
                await woken.wait()
                woken.clear()
                with contextlib.suppress(BlockingIOError):
                    os.read(self._read_fd, 4096)
        finally:
            loop.remove_reader(self._read_fd)


class StartStopped(BaseException):
    """A stop asked for while a serving command was still starting (`imports_end_the_start`):
    the command exits 0 having served nothing. A BaseException, so no `except Exception` on the
    way out mistakes it for a failure to recover from."""


class _StopAtImport:
    """A `sys.meta_path` finder that finds nothing, and raises `StartStopped` once a stop has
    been asked for (once only: see `StopSignals.imports_end_the_start`)."""

    def __init__(self, stop: StopSignals) -> None:
        self._stop = stop
        self._raised = False
        # Only the thread that is starting: a worker or the simulator's thread importing meanwhile
        # would die of it (a traceback on stderr) and leave the start to its next check.
        self._thread = threading.get_ident()

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if self._stop.count and not self._raised and threading.get_ident() == self._thread:
            self._raised = True
            raise StartStopped
        return None


_STOP_SIGNALS: StopSignals | None = None


def stop_signals() -> StopSignals:
    """This process's `StopSignals`, installed on the first call (from the main thread).

    Long-running commands call it as early as they can, so a signal during start-up is a request
    to stop like any other instead of the default action (death by signal, or KeyboardInterrupt).
    """
    global _STOP_SIGNALS
    if _STOP_SIGNALS is None:
        _STOP_SIGNALS = StopSignals()
        _STOP_SIGNALS.install()
    return _STOP_SIGNALS


def kernel_timeouts(
    sock: socket.socket, *, receive_s: float | None = None, send_s: float | None = None
) -> None:
    """SO_RCVTIMEO / SO_SNDTIMEO on a blocking socket: a `recv` or `send` that waited this long
    raises `BlockingIOError`. Unlike `settimeout`, which polls before every call, the socket
    stays a plain blocking one, so the common case is one system call."""
    for option, seconds in ((socket.SO_RCVTIMEO, receive_s), (socket.SO_SNDTIMEO, send_s)):
        if seconds is not None:
            whole = int(seconds)
            sock.setsockopt(
                socket.SOL_SOCKET, option, struct.pack("@ll", whole, int((seconds - whole) * 1e6))
            )


#: The collector's thresholds before `full_collections_held`, until `freeze_startup_heap`.
_HELD_THRESHOLDS: tuple[int, ...] | None = None


@contextlib.contextmanager
def full_collections_held() -> Iterator[None]:
    """No automatic full collection until `freeze_startup_heap` (or the end of the block): while
    a serving process imports and builds what it will keep for life, each full collection
    traverses everything built so far only to find it alive (`serve`'s start ran one, ~70 ms of
    CPU on this 2-core machine under load, for nothing the freeze's own collection would not
    find). The young generations are still collected as usual. The thresholds are given back by
    `freeze_startup_heap`, or when the block ends without it (a start that failed, a command
    run inside another process)."""
    global _HELD_THRESHOLDS
    if _HELD_THRESHOLDS is not None:  # held already, by an enclosing block
        yield
        return
    _HELD_THRESHOLDS = gc.get_threshold()
    young, middle, _ = _HELD_THRESHOLDS
    gc.set_threshold(young, middle, 1 << 30)
    try:
        yield
    finally:
        _release_full_collections()


def _release_full_collections() -> None:
    global _HELD_THRESHOLDS
    if _HELD_THRESHOLDS is not None:
        gc.set_threshold(*_HELD_THRESHOLDS)
        _HELD_THRESHOLDS = None


def freeze_startup_heap() -> None:
    """Collect the young generations, then move every object alive into the permanent
    generation (`gc.freeze`), and end `full_collections_held`.

    What a serving process builds at startup (modules, schemas, the app) lives as long as it
    does, and every full collection rescanned all of it: in the runtime that was a 50-65 ms pause
    (measured), felt by every request in flight and the longest call of the link benchmark.
    Afterwards a full collection scans only what was made since (~3 ms measured).

    Only the young generations are collected first: they hold the start-up's garbage, collected
    all along (`serve`: 7 objects found, and 35 in the old generation that a full collection
    would have found, frozen with the rest), while a full collection here cost `serve` a
    traversal of its whole heap (~94,000 objects) before it answered anything.
    """
    gc.collect(1)
    gc.freeze()
    _release_full_collections()
