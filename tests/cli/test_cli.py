"""The `herdr-mcp` command as a user runs it: real processes, real sockets."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

from herdr_mcp.errors import EXIT_LOCAL
from herdr_mcp.herdr import HerdrClient
from tests.support.runtime_harness import make_repo
from tests.support.sim_helpers import short_tmp_dir
from tests.support.waiting import wait_until

CLI = [sys.executable, "-m", "herdr_mcp"]


def test_sim_subcommand_serves_the_protocol_and_stops_on_sigterm() -> None:
    with short_tmp_dir() as tmp:
        sock = tmp / "herdr.sock"
        process = subprocess.Popen(
            [*CLI, "sim", "--socket", str(sock), "--root", str(tmp)], stdout=subprocess.PIPE, text=True
        )
        try:
            wait_until(sock.exists, "the simulator's socket")
            pong = asyncio.run(HerdrClient(sock).call("ping", {}))
            assert (pong["type"], pong["protocol"]) == ("pong", 22)
            assert sock.stat().st_mode & 0o777 == 0o600
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=10) == 0
            assert process.stdout is not None
            process.stdout.close()
        assert not sock.exists()


def _serve(tmp: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "serve", "--port", "0", "--config-dir", str(tmp / "config"), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp / "repo",
    )


def _stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=15)
    return stderr


@pytest.mark.slow
def test_serve_embeds_the_simulator_when_no_herdr_answers() -> None:
    with short_tmp_dir() as tmp:
        make_repo(tmp / "repo", {"a.txt": b"a\n"})
        missing = tmp / "no-herdr.sock"
        process = _serve(tmp, "--herdr-socket", str(missing))
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("herdr-mcp serving http://127.0.0.1:")
            base = line.split()[-1].removesuffix("/mcp")
            health = httpx2.get(f"{base}/health", timeout=10).json()
            assert health["herdr"]["reachable"] is True
            assert health["herdr"]["protocol"] == 22
        finally:
            stderr = _stop(process)
        assert process.returncode == 0
        assert f"embedded Herdr simulator rooted at {(tmp / 'repo').resolve()}" in stderr


@pytest.mark.slow
def test_serve_with_no_sim_reports_herdr_unreachable_in_health() -> None:
    with short_tmp_dir() as tmp:
        make_repo(tmp / "repo", {"a.txt": b"a\n"})
        process = _serve(tmp, "--no-sim", "--herdr-socket", str(tmp / "absent.sock"))
        try:
            assert process.stdout is not None
            base = process.stdout.readline().split()[-1].removesuffix("/mcp")
            health = httpx2.get(f"{base}/health", timeout=10).json()
        finally:
            _stop(process)
        assert health["herdr"] == {
            "socket": str(tmp / "absent.sock"),
            "reachable": False,
            "error": "herdr_unavailable",
        }


@pytest.mark.slow
def test_serve_refuses_a_token_file_others_can_read() -> None:
    with short_tmp_dir() as tmp:
        make_repo(tmp / "repo", {"a.txt": b"a\n"})
        (tmp / "config").mkdir(mode=0o700)
        token = tmp / "config" / "token"
        token.write_text("x" * 40)
        os.chmod(token, 0o644)
        result = subprocess.run(
            [*CLI, "serve", "--config-dir", str(tmp / "config"), "--sim"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp / "repo",
        )
        assert result.returncode == EXIT_LOCAL
        assert "error: token_unavailable: " in result.stderr and "readable by other users" in result.stderr
        assert token.read_text() == "x" * 40


@pytest.mark.slow
def test_serve_refuses_a_non_loopback_host() -> None:
    result = subprocess.run(
        [*CLI, "serve", "--host", "0.0.0.0", "--sim"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "not loopback" in result.stderr


def test_token_is_created_once_with_mode_0600() -> None:
    with short_tmp_dir() as tmp:
        first = subprocess.run(
            [*CLI, "token", "--config-dir", str(tmp / "cfg")], capture_output=True, text=True, check=True
        ).stdout
        second = subprocess.run(
            [*CLI, "token", "--config-dir", str(tmp / "cfg")], capture_output=True, text=True, check=True
        ).stdout
        assert first == second and len(first.strip()) >= 40
        assert (tmp / "cfg" / "token").stat().st_mode & 0o777 == 0o600


@pytest.mark.slow
def test_serve_refuses_a_state_database_from_a_newer_runtime() -> None:
    with short_tmp_dir() as tmp:
        make_repo(tmp / "repo", {"a.txt": b"a\n"})
        config = tmp / "config"
        config.mkdir(mode=0o700)
        database = config / "state.db"
        with contextlib.closing(sqlite3.connect(database)) as conn:
            conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute("INSERT INTO meta VALUES ('schema_version', '999')")
            conn.commit()
        os.chmod(database, 0o600)
        before = database.read_bytes()
        result = subprocess.run(
            [*CLI, "serve", "--config-dir", str(config), "--sim", "--port", "0"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp / "repo",
        )
        assert result.returncode == EXIT_LOCAL
        assert "error: state_schema_too_new: " in result.stderr and "state schema 999" in result.stderr
        assert database.read_bytes() == before


def test_printable_escapes_controls_and_invisible_formatting() -> None:
    from herdr_mcp.terminal import error_line, printable

    assert printable("a\x1b[31mb\x07c\u202ed\x9b") == "a\\x1b[31mb\\x07c\\u202ed\\x9b"
    assert printable("tab\tok é 中") == "tab\tok é 中"
    assert printable("two\nlines") == "two\\x0alines"
    assert printable("two\nlines\r", keep_newlines=True) == "two\nlines\\x0d"
    assert error_line("x_y", "name\x1b]0;t\x07") == "herdr-mcp: error: x_y: name\\x1b]0;t\\x07"
