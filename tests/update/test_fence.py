"""The update fence: set, read, clear, fail closed on a bad file."""

from __future__ import annotations

import datetime
import json
import os
import stat
from pathlib import Path

import pytest

from herdr_mcp.generations.fence import (
    Fence,
    FenceSet,
    check_fence,
    clear_fence,
    read_fence,
    set_fence,
)
from herdr_mcp.layout import FENCE_FILE

WHEN = datetime.datetime(2026, 11, 29, 19, 0, tzinfo=datetime.UTC)


def test_no_fence_file_means_updates_may_run(tmp_path: Path) -> None:
    assert read_fence(tmp_path) is None
    check_fence(tmp_path)
    assert clear_fence(tmp_path) is False


def test_a_set_fence_refuses_with_its_reason_and_time(tmp_path: Path) -> None:
    fence = set_fence(tmp_path, "services were uninstalled", now=WHEN)
    assert fence == Fence("services were uninstalled", "2026-11-29T19:00:00.000Z")
    path = tmp_path / FENCE_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_bytes()) == {
        "schema_version": 1,
        "reason": "services were uninstalled",
        "set_at": "2026-11-29T19:00:00.000Z",
    }
    with pytest.raises(FenceSet) as refused:
        check_fence(tmp_path)
    assert refused.value.code == "update_fenced"
    assert "2026-11-29T19:00:00.000Z" in refused.value.message
    assert "services were uninstalled" in refused.value.message
    assert "service install" in refused.value.message

    assert clear_fence(tmp_path) is True
    check_fence(tmp_path)
    assert not path.exists()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json",
        b"[]",
        b'{"schema_version": 2, "reason": "x", "set_at": "t"}',
        b'{"schema_version": 1, "reason": "", "set_at": "t"}',
        b'{"schema_version": 1, "reason": "x", "set_at": "t", "extra": 1}',
        b"x" * 20_000,
    ],
    ids=["empty", "not-json", "array", "schema", "empty-reason", "unknown-field", "oversized"],
)
def test_a_malformed_fence_file_still_fences(tmp_path: Path, content: bytes) -> None:
    (tmp_path / FENCE_FILE).write_bytes(content)
    fence = read_fence(tmp_path)
    assert fence is not None
    assert fence.set_at is None
    assert "malformed" in fence.reason
    with pytest.raises(FenceSet, match="update_fenced"):
        check_fence(tmp_path)


def test_a_symlinked_fence_file_is_not_followed_but_still_fences(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").write_text("{}")
    os.symlink(tmp_path / "elsewhere", tmp_path / FENCE_FILE)
    fence = read_fence(tmp_path)
    assert fence is not None
    assert "unreadable" in fence.reason
