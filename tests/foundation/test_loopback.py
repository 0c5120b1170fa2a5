"""What the serving processes share (loopback.py): kernel socket timeouts and the startup heap freeze."""

from __future__ import annotations

import gc
import socket
import time

import pytest

from herdr_mcp.loopback import bind_loopback, freeze_startup_heap, full_collections_held, kernel_timeouts


def test_kernel_timeouts_end_a_blocking_recv_and_keep_the_socket_blocking() -> None:
    a, b = socket.socketpair()
    with a, b:
        kernel_timeouts(a, receive_s=0.15, send_s=0.15)
        assert a.gettimeout() is None  # no Python-level timeout: a plain blocking socket
        started = time.monotonic()
        with pytest.raises(BlockingIOError):
            a.recv(1)
        assert 0.1 <= time.monotonic() - started < 2
        b.sendall(b"x")
        assert a.recv(1) == b"x"  # bytes that are there come at once
        # A peer that does not read: sendall gives up once the buffers are full.
        with pytest.raises(BlockingIOError):
            a.sendall(b"y" * 64 * 1024 * 1024)


def test_freeze_startup_heap_moves_what_is_alive_out_of_collections() -> None:
    keep = [[index] for index in range(1000)]
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() >= len(keep)
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0


def test_bind_loopback_listens_on_a_free_port() -> None:
    with (
        bind_loopback("127.0.0.1", 0) as listener,
        socket.create_connection(listener.getsockname(), timeout=5),
    ):
        accepted, _ = listener.accept()
        accepted.close()


def test_full_collections_are_held_until_the_heap_is_frozen_or_the_block_ends() -> None:
    before = gc.get_threshold()
    with full_collections_held():
        held = gc.get_threshold()
        assert held[:2] == before[:2] and held[2] > 1_000_000
        with full_collections_held():  # nested: still held, and the outer block owns it
            assert gc.get_threshold() == held
        assert gc.get_threshold() == held
        try:
            freeze_startup_heap()
            assert gc.get_threshold() == before
        finally:
            gc.unfreeze()
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), full_collections_held():
        raise RuntimeError("a start that failed")
    assert gc.get_threshold() == before
