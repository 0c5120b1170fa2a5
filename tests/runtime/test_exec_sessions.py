"""ExecSessions against real bash processes: capture, offsets, kill, retention, shutdown."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.exec_sessions import ExecSessions, utf8_chunk_length
from tests.support.waiting import wait_until_async

Body = Callable[[ExecSessions], Awaitable[None]]


pytestmark = pytest.mark.usefixtures("quiet_login_shell")


def drive(spool: Path, body: Body, **options: Any) -> None:
    """Run `body` on a fresh event loop with its own ExecSessions, always shutting it down."""

    async def main() -> None:
        sessions = ExecSessions(spool, **options)
        try:
            await body(sessions)
        finally:
            await sessions.shutdown(grace_ms=200)

    asyncio.run(main())


async def wait_finished(sessions: ExecSessions, session_id: str) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        state = sessions.read(session_id, max_bytes=1)
        return None if state["running"] else state

    return await wait_until_async(finished, "the session to finish")


async def wait_for_output(sessions: ExecSessions, session_id: str, lines: int) -> str:
    def output() -> str | None:
        text: str = sessions.read(session_id, stream="stdout")["stdout"]["text"]
        return text if text.count("\n") >= lines else None

    return await wait_until_async(output, f"{lines} lines from the session")


def read_all(
    sessions: ExecSessions, session_id: str, stream: Literal["stdout", "stderr"], chunk: int
) -> tuple[str, list[int]]:
    """Read one stream from offset 0 in chunks of `chunk` bytes; return the text and offsets."""
    parts: list[str] = []
    offsets = [0]
    while True:
        if stream == "stdout":
            answer = sessions.read(session_id, stream="stdout", stdout_offset=offsets[-1], max_bytes=chunk)
        else:
            answer = sessions.read(session_id, stream="stderr", stderr_offset=offsets[-1], max_bytes=chunk)
        part = answer[stream]
        assert part["offset"] == offsets[-1]
        parts.append(part["text"])
        if part["eof"]:
            return "".join(parts), offsets
        assert part["next_offset"] > offsets[-1], "a read made no progress"
        offsets.append(part["next_offset"])


def is_gone(pid: int) -> bool:
    """True when `pid` no longer runs (absent, or a zombie nobody reaped yet)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return text[text.rfind(")") + 2 :].split()[0] in ("Z", "X")


def test_fast_exit_never_loses_stderr(tmp_path: Path, workdir: Path) -> None:
    async def body(sessions: ExecSessions) -> None:
        for _ in range(50):
            result = await sessions.run(workdir, "echo out; echo err >&2; exit 3", 10_000)
            assert result["completed"] is True
            assert (result["exit_code"], result["signal"]) == (3, None)
            assert (result["stdout"], result["stderr"]) == ("out\n", "err\n")
            assert (result["stdout_total_bytes"], result["stderr_total_bytes"]) == (4, 4)
            assert result["truncated"] is False

    drive(tmp_path / "spool", body)


def test_started_fast_exit_is_fully_readable(tmp_path: Path, workdir: Path) -> None:
    async def body(sessions: ExecSessions) -> None:
        started = sessions.start(workdir, "echo out; echo err >&2; exit 3")
        assert started["running"] is True
        assert started["session_id"].startswith("x")
        assert len(started["session_id"]) == 17
        assert isinstance(started["pid"], int)
        state = await wait_finished(sessions, started["session_id"])
        assert (state["exit_code"], state["signal"]) == (3, None)
        answer = sessions.read(started["session_id"])
        assert answer["stdout"]["text"] == "out\n"
        assert answer["stderr"] == {
            "text": "err\n",
            "offset": 0,
            "next_offset": 4,
            "total_bytes": 4,
            "dropped_bytes": 0,
            "eof": True,
        }
        only_stderr = sessions.read(started["session_id"], stream="stderr")
        assert "stdout" not in only_stderr

    drive(tmp_path / "spool", body)


def test_runs_in_cwd_with_empty_stdin(tmp_path: Path, workdir: Path) -> None:
    async def body(sessions: ExecSessions) -> None:
        result = await sessions.run(workdir, "pwd; cat; echo end", 10_000)
        assert result["stdout"] == f"{os.path.realpath(workdir)}\nend\n"

    drive(tmp_path / "spool", body)


def test_timeout_becomes_background_session(tmp_path: Path, workdir: Path) -> None:
    async def body(sessions: ExecSessions) -> None:
        result = await sessions.run(workdir, "echo first; sleep 0.6; echo second; echo done >&2", 100)
        assert result["completed"] is False
        assert result["running"] is True
        assert "herdr_exec_read" in result["message"]
        session_id = result["session_id"]
        offsets = {"stdout": result["stdout_next_offset"], "stderr": result["stderr_next_offset"]}
        texts = {"stdout": result["stdout"], "stderr": result["stderr"]}

        def read_on() -> dict[str, Any] | None:
            """Read on from the offsets; the answer once both streams reached their end."""
            answer = sessions.read(
                session_id, stdout_offset=offsets["stdout"], stderr_offset=offsets["stderr"]
            )
            for stream in ("stdout", "stderr"):
                texts[stream] += answer[stream]["text"]
                offsets[stream] = answer[stream]["next_offset"]
            return answer if answer["stdout"]["eof"] and answer["stderr"]["eof"] else None

        answer = await wait_until_async(read_on, "both streams to end")
        assert (texts["stdout"], texts["stderr"]) == ("first\nsecond\n", "done\n")
        assert (answer["running"], answer["exit_code"]) == (False, 0)

    drive(tmp_path / "spool", body)


TEXT = "plain ascii, héllo wörld — ünïcödé 日本語テキスト 🎉🚀 end\n" * 40


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
def test_offset_reads_reassemble_utf8_exactly(tmp_path: Path, workdir: Path, chunk: int) -> None:
    (workdir / "text").write_text(TEXT, encoding="utf-8")

    async def body(sessions: ExecSessions) -> None:
        result = await sessions.run(workdir, "cat text; cat text >&2", 10_000, max_bytes=10)
        assert result["stdout_total_bytes"] == len(TEXT.encode())
        assert result["truncated"] is True
        assert TEXT.startswith(result["stdout"])
        streams: tuple[Literal["stdout", "stderr"], ...] = ("stdout", "stderr")
        for stream in streams:
            text, offsets = read_all(sessions, result["session_id"], stream, chunk)
            assert text == TEXT
            assert "\ufffd" not in text
            steps = {later - earlier for earlier, later in itertools.pairwise(offsets)}
            assert max(steps) <= max(chunk, 4)
        past_end = sessions.read(result["session_id"], stdout_offset=10**9)["stdout"]
        assert (past_end["text"], past_end["eof"], past_end["total_bytes"]) == ("", True, len(TEXT.encode()))

    drive(tmp_path / "spool", body)


@pytest.mark.slow
@given(text=st.text(min_size=0, max_size=60), limit=st.integers(min_value=1, max_value=9))
def test_chunk_boundaries_never_split_a_character(text: str, limit: int) -> None:
    data = text.encode("utf-8")
    offset, parts = 0, []
    while offset < len(data):
        length = utf8_chunk_length(data[offset : offset + limit + 3], limit, final=True)
        assert 0 < length <= max(limit, 4)
        parts.append(data[offset : offset + length].decode("utf-8"))  # strict: no split sequence
        offset += length
    assert "".join(parts) == text


def test_incomplete_sequence_waits_while_running() -> None:
    snowman = "☃".encode()
    assert utf8_chunk_length(b"ab" + snowman[:2], 10, final=False) == 2
    assert utf8_chunk_length(snowman[:2], 10, final=False) == 0
    assert utf8_chunk_length(snowman[:2], 10, final=True) == 2


def test_kill_escalates_to_sigkill_when_term_is_ignored(tmp_path: Path, workdir: Path) -> None:
    async def body(sessions: ExecSessions) -> None:
        started = sessions.start(workdir, "trap '' TERM; echo ready; sleep 60; echo after")
        await wait_for_output(sessions, started["session_id"], 1)
        result = await sessions.kill(started["session_id"], grace_ms=300)
        assert result["escalated"] is True
        assert result["already_finished"] is False
        assert (result["running"], result["exit_code"], result["signal"]) == (False, None, "SIGKILL")
        assert is_gone(started["pid"])
        assert sessions.read(started["session_id"])["stdout"]["text"] == "ready\n"

    drive(tmp_path / "spool", body)


def test_kill_leaves_no_survivors_in_the_tree(tmp_path: Path, workdir: Path) -> None:
    async def body(sessions: ExecSessions) -> None:
        started = sessions.start(workdir, "sleep 60 & echo $!; bash -c 'sleep 60' & echo $!; wait")
        text = await wait_for_output(sessions, started["session_id"], 2)
        children = [int(line) for line in text.split()]
        assert not any(is_gone(pid) for pid in children)
        result = await sessions.kill(started["session_id"], grace_ms=2000)
        assert result["escalated"] is False
        assert (result["running"], result["signal"]) == (False, "SIGTERM")
        assert all(is_gone(pid) for pid in [started["pid"], *children])

    drive(tmp_path / "spool", body)


def test_background_child_holding_the_pipes_keeps_the_session_running(tmp_path: Path, workdir: Path) -> None:
    async def body(sessions: ExecSessions) -> None:
        result = await sessions.run(workdir, "sleep 60 & echo $!", 400)
        assert result["completed"] is False
        child = int(await wait_for_output(sessions, result["session_id"], 1))
        killed = await sessions.kill(result["session_id"], grace_ms=1000)
        assert killed["running"] is False
        assert is_gone(child)

    drive(tmp_path / "spool", body)


def test_finished_sessions_stay_readable_and_kill_is_not_an_error(tmp_path: Path, workdir: Path) -> None:
    async def body(sessions: ExecSessions) -> None:
        result = await sessions.run(workdir, "echo kept", 10_000)
        killed = await sessions.kill(result["session_id"])
        assert killed["already_finished"] is True
        assert (killed["running"], killed["exit_code"], killed["escalated"]) == (False, 0, False)
        assert sessions.read(result["session_id"])["stdout"]["text"] == "kept\n"

    drive(tmp_path / "spool", body)


@pytest.mark.parametrize("durable", [True, False], ids=["durable", "in-memory"])
def test_output_cap_counts_and_drops(tmp_path: Path, workdir: Path, durable: bool) -> None:
    spool = tmp_path / "spool"

    async def body(sessions: ExecSessions) -> None:
        command = "head -c 1000 /dev/zero | tr '\\0' a; echo tail >&2"
        result = await sessions.run(workdir, command, 10_000, durable=durable)
        assert result["completed"] is True
        assert (result["stdout_total_bytes"], result["truncated"]) == (1000, True)
        assert result["stdout"] == "a" * 100
        answer = sessions.read(result["session_id"], stdout_offset=50)["stdout"]
        assert answer["text"] == "a" * 50
        assert (answer["total_bytes"], answer["dropped_bytes"], answer["eof"]) == (1000, 900, True)
        if durable:
            assert (spool / result["session_id"] / "stdout").stat().st_size == 100
        else:  # the cap (below the memory buffer) drops the same bytes; nothing is on disk
            assert not (spool / result["session_id"]).exists()
        assert sessions.read(result["session_id"])["stderr"]["text"] == "tail\n"

    drive(spool, body, max_output_bytes=100)


def test_unknown_session_is_refused(tmp_path: Path) -> None:
    async def body(sessions: ExecSessions) -> None:
        with pytest.raises(ToolError) as read_error:
            sessions.read("x0000000000000000")
        assert read_error.value.code == "session_not_found"
        with pytest.raises(ToolError) as kill_error:
            await sessions.kill("x0000000000000000")
        assert kill_error.value.code == "session_not_found"

    drive(tmp_path / "spool", body)


def test_missing_cwd_is_refused(tmp_path: Path) -> None:
    async def body(sessions: ExecSessions) -> None:
        with pytest.raises(ToolError) as error:
            sessions.start(tmp_path / "missing", "true")
        assert error.value.code == "cwd_not_found"

    drive(tmp_path / "spool", body)


def test_five_megabytes_per_stream_do_not_deadlock(tmp_path: Path, workdir: Path) -> None:
    command = "head -c 5000000 /dev/zero | tr '\\0' x; head -c 5000000 /dev/zero | tr '\\0' y >&2; echo end"
    tail_offset = 5_000_000

    async def body(sessions: ExecSessions) -> None:
        result = await sessions.run(workdir, command, 20_000)
        assert result["completed"] is True
        assert (result["stdout_total_bytes"], result["stderr_total_bytes"]) == (5_000_004, 5_000_000)
        assert len(result["stdout"]) == 65536
        tail = sessions.read(result["session_id"], stream="stdout", stdout_offset=tail_offset)
        assert tail["stdout"]["text"] == "end\n"

    drive(tmp_path / "spool", body)


def test_spool_is_private_and_has_metadata(tmp_path: Path, workdir: Path) -> None:
    spool = tmp_path / "spool"

    async def body(sessions: ExecSessions) -> None:
        result = await sessions.run(workdir, "echo hi; exit 7", 10_000, durable=True)
        directory = spool / result["session_id"]
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        for name in ("stdout", "stderr", "metadata.json"):
            assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600
        metadata = json.loads((directory / "metadata.json").read_text())
        assert metadata["command"] == "echo hi; exit 7"
        assert metadata["cwd"] == str(workdir)
        assert metadata["exit_code"] == 7
        assert metadata["finished_at"] is not None

    drive(spool, body)


def test_shutdown_kills_running_sessions_and_keeps_spool(tmp_path: Path, workdir: Path) -> None:
    spool = tmp_path / "spool"

    async def main() -> None:
        sessions = ExecSessions(spool)
        started = [sessions.start(workdir, "echo up; sleep 60") for _ in range(2)]
        for session in started:
            await wait_for_output(sessions, session["session_id"], 1)
        await sessions.shutdown(grace_ms=500)
        for session in started:
            state = sessions.read(session["session_id"])
            assert (state["running"], state["signal"]) == (False, "SIGTERM")
            assert is_gone(session["pid"])
            assert (spool / session["session_id"] / "stdout").read_text() == "up\n"

    asyncio.run(main())


def test_expired_sessions_are_pruned(tmp_path: Path, workdir: Path) -> None:
    spool = tmp_path / "spool"

    async def body(sessions: ExecSessions) -> None:
        result = await sessions.run(workdir, "echo gone", 10_000)
        with pytest.raises(ToolError) as error:
            sessions.read(result["session_id"])
        assert error.value.code == "session_not_found"
        assert not (spool / result["session_id"]).exists()

    drive(spool, body, retention_seconds=0)


def test_session_limit_prunes_oldest_finished_then_refuses(tmp_path: Path, workdir: Path) -> None:
    async def body(sessions: ExecSessions) -> None:
        first = await sessions.run(workdir, "echo 1", 10_000)
        second = await sessions.run(workdir, "echo 2", 10_000)
        sessions.start(workdir, "sleep 60")
        with pytest.raises(ToolError):
            sessions.read(first["session_id"])
        assert sessions.read(second["session_id"])["stdout"]["text"] == "2\n"
        sessions.start(workdir, "sleep 60")
        with pytest.raises(ToolError) as error:
            sessions.start(workdir, "sleep 60")
        assert error.value.code == "too_many_sessions"

    drive(tmp_path / "spool", body, max_sessions=2)
