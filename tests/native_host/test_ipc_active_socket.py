"""browser_ipc.active_socket: the socket the native host forwards to follows the active generation
named by runtime-status.json (real files written by the generations store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from herdr_mcp.browser_ipc import active_socket
from herdr_mcp.generations import GenerationError, GenerationStore, StatusFile
from herdr_mcp.layout import Layout


def test_without_generations_it_is_the_plain_runtime_socket(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert active_socket(layout) == tmp_path / "ipc" / "runtime.sock"


def test_it_follows_the_active_generation_across_a_switch(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    store = GenerationStore.in_dir(layout.generations_dir)
    with store.locked():
        store.write_status_locked(StatusFile(active="gen-a"))
    assert active_socket(layout) == tmp_path / "ipc" / "gen-a.sock"
    with store.locked():
        store.write_status_locked(StatusFile(active="gen-b", previous="gen-a"))
    assert active_socket(layout) == tmp_path / "ipc" / "gen-b.sock"


def test_a_status_file_without_an_active_generation_means_the_plain_socket(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    store = GenerationStore.in_dir(layout.generations_dir)
    with store.locked():
        store.write_status_locked(StatusFile())
    assert active_socket(layout) == layout.runtime_socket


def test_a_corrupt_status_file_is_refused_not_guessed(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    layout.generations_dir.mkdir()
    (layout.generations_dir / "runtime-status.json").write_text('{"active": "x"}')
    with pytest.raises(GenerationError) as caught:
        active_socket(layout)
    assert caught.value.code == "status_invalid"
