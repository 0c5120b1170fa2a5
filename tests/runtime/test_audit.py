"""The audit log of tool calls (issue 9, item 13).

Unit tests of what a record holds (never contents or secrets), of the writer (one whole line
per record, 0600, rotation at a bound, torn lines, many threads and two real processes at
once) and of `herdr-mcp audit`; then end to end through real runtimes on loopback with a real
`mcp` client: fs_read, a refused secret read and an exec are recorded with the right fields and
no file content appears in the log, two runtimes sharing a config dir append without damage,
and a log that cannot be written stops further calls before they run.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from herdr_mcp.cli.audit import format_record, parse_since
from herdr_mcp.runtime.audit import (
    AUDIT_FILE_NAME,
    LOCK_FILE_NAME,
    MAX_COMMAND_CHARS,
    AuditLog,
    Unreadable,
    _is_plain_json,
    _plain_jcs,
    arguments_digest,
    audit_files,
    describe_call,
    read_records,
    recorded_command,
    rotated_path,
)
from herdr_mcp.runtime.config import RuntimeConfig
from herdr_mcp.runtime.dispatcher import ToolDispatcher
from herdr_mcp.runtime.services import Services
from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.runtime_harness import (
    RunningRuntime,
    call_tool,
    in_process_runtime,
    make_repo,
    mcp_client,
    running_runtime,
)
from tests.support.sim_helpers import run, short_tmp_dir
from tests.support.waiting import wait_until, wait_until_async

START = dt.datetime(2026, 12, 1, 9, 30, 0, 123456, tzinfo=dt.UTC)
GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5" * 3 + "f6G7h8"
DEADLINE_S = 60.0


def record_of(tool: str, arguments: dict[str, Any], outcome: str = "ok") -> dict[str, Any]:
    return describe_call(
        tool=tool,
        arguments=arguments,
        session="s-1",
        runtime="r-1",
        version="0.1.0",
        started=START,
        outcome=outcome,
        duration_ms=1.25,
    )


def jcs_digest(arguments: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(arguments)).hexdigest()


def raw_log(config_dir: Path) -> bytes:
    return b"".join(path.read_bytes() for path in audit_files(config_dir))


def records(config_dir: Path) -> list[dict[str, Any]]:
    entries = list(read_records(config_dir))
    assert not [entry for entry in entries if isinstance(entry, Unreadable)], entries
    return [entry for entry in entries if isinstance(entry, dict)]


def audit_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "herdr_mcp", "audit", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )


# --- what a record holds ----------------------------------------------------------------------


CONTENT_CASES = [
    ("herdr_fs_write", {"path": "src/a.py", "content": "CONTENT-W"}, ["src/a.py"]),
    ("herdr_fs_edit", {"path": "a.py", "old_string": "OLD-E", "new_string": "NEW-E"}, ["a.py"]),
    (
        "herdr_fs_patch",
        {
            "root": "/r",
            "patch": "*** Begin Patch\n*** Add File: n.txt\n+BODY-ADD\n*** Update File: o.txt\r\n"
            "*** Move to: p.txt\n@@\n-BODY-OLD\n+BODY-NEW\n*** Delete File: d.txt\n*** End Patch\n",
        },
        ["/r", "n.txt", "o.txt", "p.txt", "d.txt"],
    ),
    ("herdr_prompt", {"target": "agent-1", "text": "PROMPT-TEXT"}, []),
    ("herdr_call", {"method": "herdr_mcp.x", "params": {"note": "PARAM-TEXT"}}, []),
    ("herdr_fs_grep", {"root": "/r", "pattern": "PATTERN-TEXT", "glob": "*.py"}, ["/r"]),
    ("herdr_methods", {"query": "QUERY-TEXT"}, []),
    ("herdr_later_tool", {"path": "x", "body": "UNKNOWN-BODY", "content": "UNKNOWN-CONTENT"}, ["x"]),
]


@pytest.mark.parametrize(("tool", "arguments", "paths"), CONTENT_CASES, ids=[c[0] for c in CONTENT_CASES])
def test_a_record_names_paths_never_contents(tool: str, arguments: dict[str, Any], paths: list[str]) -> None:
    record = record_of(tool, arguments)
    assert record.get("paths", []) == paths
    assert record["args_sha256"] == jcs_digest(arguments)
    text = json.dumps(record)
    for marker in ("CONTENT", "OLD-E", "NEW-E", "BODY", "PROMPT", "PARAM", "PATTERN", "QUERY", "UNKNOWN"):
        assert marker not in text, (marker, text)


def test_a_record_has_the_call_fields() -> None:
    arguments = {"workspace": "w1", "command": "git status", "intent": "read_only", "idempotency_key": "k1"}
    record = record_of("herdr_exec", arguments, outcome="read_only_mode")
    assert record == {
        "v": 1,
        "time": "2026-12-01T09:30:00.123Z",
        "session": "s-1",
        "runtime": "r-1",
        "version": "0.1.0",
        "tool": "herdr_exec",
        "outcome": "read_only_mode",
        "duration_ms": 1.2,
        "args_sha256": jcs_digest(arguments),
        "command": "git status",
        "command_sha256": hashlib.sha256(b"git status").hexdigest(),
        "workspace": "w1",
        "intent": "read_only",
        "idempotency_key": "k1",
    }


def test_the_digest_ignores_key_order_and_is_null_where_jcs_cannot_encode() -> None:
    assert (
        record_of("t", {"a": 1, "b": "x"})["args_sha256"] == record_of("t", {"b": "x", "a": 1})["args_sha256"]
    )
    assert record_of("t", {"a": 2**60})["args_sha256"] is None


_JSON_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
_PLAIN_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1) | _JSON_TEXT,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(max_codepoint=127), max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=1500, deadline=None)
@given(st.dictionaries(st.text(st.characters(max_codepoint=127), max_size=8), _PLAIN_JSON, max_size=6))
def test_the_digest_of_plain_arguments_is_rfc8785s(arguments: dict[str, Any]) -> None:
    # The digest takes Python's sorted, spaceless JSON for plain values (issue 24): byte for byte
    # the JCS rfc8785 writes (control characters, quotes, backslashes, any character beyond ASCII).
    assert _is_plain_json(arguments)
    assert _plain_jcs(arguments) == rfc8785.dumps(arguments)
    assert arguments_digest(arguments) == "sha256:" + hashlib.sha256(rfc8785.dumps(arguments)).hexdigest()


@pytest.mark.parametrize(
    "arguments",
    [
        {"a": 1.5},
        {"a": 1.0, "b": [1e21, 5e-7]},
        {"é": 1, "z": 2, "\U0001f600": 3, "\uff61": 4},
        {"a": 2**53 - 1, "b": -(2**53) + 1},
        {"a": [True, None, {"x": "\u2028\x7f\x00\t"}]},
    ],
)
def test_the_digest_of_other_arguments_is_rfc8785s_too(arguments: dict[str, Any]) -> None:
    assert arguments_digest(arguments) == "sha256:" + hashlib.sha256(rfc8785.dumps(arguments)).hexdigest()


def test_a_lone_surrogate_has_no_digest_either_way() -> None:
    assert record_of("t", {"a": "\ud800"})["args_sha256"] is None
    assert record_of("t", {"a": ["\udc80"], "b": 1.5})["args_sha256"] is None


def test_long_values_and_many_paths_are_capped() -> None:
    patch = "".join(f"*** Add File: f{index}.txt\n" for index in range(40))
    record = record_of("herdr_fs_patch", {"root": "r" * 5000, "patch": patch})
    assert len(record["paths"]) == 16 and record["paths_omitted"] == 25
    assert record["paths"][0].startswith("r" * 1024) and record["paths"][0].endswith("[3976 more characters]")
    assert len(record_of("y" * 500, {})["tool"]) < 200


# --- the command line -------------------------------------------------------------------------


SECRET_COMMANDS = [
    f"export GITHUB_TOKEN={GITHUB_TOKEN}",
    f"git clone https://{GITHUB_TOKEN}@github.com/o/r",
    "curl -H 'Authorization: Bearer abc.def-ghi_jkl' http://127.0.0.1:8772/mcp",
    'curl -H "authorization: token 0123456789abcdef" https://api.example.invalid',
    "curl -H 'X-Api-Key: kkkkkkkkkkkk' https://api.example.invalid",
    "curl -u admin:hunter2hunter2 https://example.invalid --cookie 'sid=s3cr3tcookie'",
    "curl --user=admin:hunter3hunter3 https://example.invalid",
    "psql postgres://app:s3cr3tpassword@db.example.invalid/app",
    "DB_PASSWORD='s3cr3t pass' ./run.sh",
    "mysql --password s3cr3tpassword -e 'select 1'",
    "deploy --api-key=s3cr3tapikey --region eu",
    "echo AKIAABCDEFGHIJKLMNOP sk-proj-abcdefghijklmnopqrstuvwx",
    "echo eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlc2lnbg",
    "printf '%s' '-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n"
    "-----END OPENSSH PRIVATE KEY-----' > k",
]
SECRETS = [
    GITHUB_TOKEN,
    "abc.def-ghi_jkl",
    "0123456789abcdef",
    "kkkkkkkkkkkk",
    "s3cr3tcookie",
    "s3cr3tpassword",
    "s3cr3t pass",
    "s3cr3tapikey",
    "hunter2hunter2",
    "hunter3hunter3",
    "AKIAABCDEFGHIJKLMNOP",
    "sk-proj-abcdefghijklmnopqrstuvwx",
    "c2lnbmF0dXJlc2lnbg",
    "b3BlbnNzaC1rZXk",
]


@pytest.mark.parametrize("command", SECRET_COMMANDS)
def test_secret_looking_values_in_a_command_are_redacted(command: str) -> None:
    recorded = recorded_command(command)
    assert "[redacted]" in recorded
    for secret in SECRETS:
        assert secret not in recorded, recorded


@pytest.mark.parametrize(
    "command",
    [
        "git status",
        "git log --author=Bob --since=2.weeks -- src/",
        "pytest -q -k 'token and not slow' tests/",
        "grep -rn password_reset src/ | head",
        "ls -la ~/.config && echo done",
    ],
)
def test_ordinary_commands_are_recorded_as_given(command: str) -> None:
    assert recorded_command(command) == command


def test_heredoc_bodies_are_withheld_and_the_shell_lines_kept() -> None:
    command = textwrap.dedent(
        """\
        cat > notes.txt <<'EOF'
        FILE-BODY-1
        FILE-BODY-2
        EOF
        python - <<-PY
        \tprint("PY-BODY")
        \tPY
        git add notes.txt <<< "here-string stays"
        cat <<EOF
        UNTERMINATED-BODY"""
    )
    recorded = recorded_command(command)
    assert "BODY" not in recorded
    assert recorded.splitlines() == [
        "cat > notes.txt <<'EOF'",
        "[heredoc body withheld: 2 lines]",
        "EOF",
        "python - <<-PY",
        "[heredoc body withheld: 1 lines]",
        "\tPY",
        'git add notes.txt <<< "here-string stays"',
        "cat <<EOF",
        "[heredoc body withheld: 1 lines, unterminated]",
    ]


def test_a_long_command_is_capped_and_redaction_stays_linear() -> None:
    recorded = recorded_command("echo " + "a" * 10_000)
    assert len(recorded) < MAX_COMMAND_CHARS + 100 and recorded.endswith("[cut at 4096 of 10005 characters]")
    hostile = [
        "a" * 65_536,
        "-" * 65_536,
        "a=" * 32_768,
        "--a " * 16_384,
        "'" * 65_536,
        "x://" * 16_384,
        "x-" * 32_768,
        "x-token-" * 8_192,
        "a." * 32_768,
        "x://u:" * 10_922,
        "eyJaa-" * 10_922,
        "eyJaaaaa.eyJaaaaa-" * 3_449,
        "-u a:" * 13_107,
        "-----BEGIN A" * 5_461,
    ]
    started = time.monotonic()
    for command in hostile:
        recorded_command(command)
    assert time.monotonic() - started < 10, "redaction must not backtrack on long runs"
    assert recorded_command("A" * 70_000 + GITHUB_TOKEN).endswith("of 70040 characters]")


# --- the writer -------------------------------------------------------------------------------


def test_each_record_is_one_ascii_line_in_a_private_file(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "config")
    hostile = record_of("herdr_fs_read\x1b[2J\u202e", {"path": "a\nb\x00\u2028é"})
    log.append(hostile)
    log.append(record_of("herdr_fs_list", {"path": "."}))
    assert log.flush(DEADLINE_S)
    log.close()
    data = (tmp_path / "config" / AUDIT_FILE_NAME).read_bytes()
    assert data.isascii() and data.count(b"\n") == 2 and data.endswith(b"\n")
    assert not any(byte < 0x20 and byte != 0x0A for byte in data)
    assert records(tmp_path / "config")[0] == hostile
    for name in (AUDIT_FILE_NAME, LOCK_FILE_NAME):
        assert stat.S_IMODE((tmp_path / "config" / name).stat().st_mode) == 0o600


def test_a_wider_mode_is_tightened_and_a_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / AUDIT_FILE_NAME).write_text("")
    (tmp_path / AUDIT_FILE_NAME).chmod(0o644)
    log = AuditLog(tmp_path)
    log.append(record_of("t", {}))
    assert stat.S_IMODE((tmp_path / AUDIT_FILE_NAME).stat().st_mode) == 0o600
    log.close()

    elsewhere = tmp_path / "elsewhere"
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / AUDIT_FILE_NAME).symlink_to(elsewhere)
    log = AuditLog(tmp_path / "link")
    with pytest.raises(Exception, match="cannot write the audit log") as raised:
        log.append(record_of("t", {}))
    assert getattr(raised.value, "code", None) == "audit_unavailable"
    assert not log.healthy and not elsewhere.exists()
    log.close()


def test_rotation_keeps_n_files_each_within_the_bound(tmp_path: Path) -> None:
    bound, keep = 2_000, 3
    log = AuditLog(tmp_path, max_file_bytes=bound, keep=keep)
    for index in range(200):
        log.append({**record_of("t", {}), "seq": index})
    assert log.flush(DEADLINE_S)
    log.close()
    files = audit_files(tmp_path)
    rotated = [rotated_path(tmp_path, index) for index in (3, 2, 1)]
    assert files == [*rotated, tmp_path / AUDIT_FILE_NAME]
    assert all(0 < path.stat().st_size <= bound for path in files)
    assert not rotated_path(tmp_path, 4).exists()
    kept = [record["seq"] for record in records(tmp_path)]
    # The newest records survive, oldest first and without a gap.
    assert kept == list(range(200 - len(kept), 200)) and len(kept) > 10


def test_a_torn_line_spoils_only_itself(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    log.append(record_of("first", {}))
    with (tmp_path / AUDIT_FILE_NAME).open("ab") as handle:
        handle.write(b'{"v":1,"time":"2026-12-01T09:30:00.123Z","tool":"torn')  # a writer died here
    entries = list(read_records(tmp_path))
    assert [type(entry) for entry in entries] == [dict, Unreadable]
    assert isinstance(entries[1], Unreadable) and entries[1].torn and entries[1].line_number == 2

    log.append(record_of("second", {}))
    log.close()
    entries = list(read_records(tmp_path))
    assert [entry["tool"] if isinstance(entry, dict) else "unreadable" for entry in entries] == [
        "first",
        "unreadable",
        "second",
    ]


def test_many_threads_at_once_never_interleave(tmp_path: Path) -> None:
    log = AuditLog(tmp_path, max_file_bytes=64 * 1024, keep=100)
    # Records of ~7 KiB: well past PIPE_BUF (4 KiB), which makes no promise for regular files.
    big = {"root": "p" * 1000, "path": "p" * 1000, "project_root": "p" * 1000, "command": "c" * 4000}

    def writer(number: int) -> None:
        for index in range(100):
            log.append({**record_of("t", big), "who": number, "seq": index})

    threads = [threading.Thread(target=writer, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_S)
    assert log.flush(DEADLINE_S)
    log.close()
    seen = records(tmp_path)
    for number in range(8):
        assert [r["seq"] for r in seen if r["who"] == number] == list(range(100))


WRITER_PROCESS = """
import sys, time
from pathlib import Path
from herdr_mcp.runtime.audit import AuditLog
directory, name, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
log = AuditLog(directory, max_file_bytes=16 * 1024, keep=1000)
(directory / f"ready-{name}").touch()
while not (directory / "go").exists():
    time.sleep(0.001)
for index in range(count):
    log.append({"v": 1, "time": "2026-12-01T09:30:00.000Z", "tool": "t", "who": name, "seq": index,
                "paths": ["x" * (index % 7000)]})
assert log.flush(60)
log.close()
"""


def test_two_processes_appending_at_once_keep_every_line_whole(tmp_path: Path) -> None:
    count = 600
    children = [
        subprocess.Popen([sys.executable, "-c", WRITER_PROCESS, str(tmp_path), name, str(count)])
        for name in ("a", "b")
    ]
    try:
        wait_until(lambda: all((tmp_path / f"ready-{n}").exists() for n in "ab"), "both writers to start")
        (tmp_path / "go").touch()
        assert [child.wait(timeout=DEADLINE_S) for child in children] == [0, 0]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    seen = records(tmp_path)
    assert len(audit_files(tmp_path)) > 10, "the bound must have forced many rotations"
    for name in "ab":
        assert [r["seq"] for r in seen if r["who"] == name] == list(range(count))
    assert all(path.stat().st_size <= 16 * 1024 for path in audit_files(tmp_path))


# --- herdr-mcp audit --------------------------------------------------------------------------


def test_since_takes_durations_and_iso_times() -> None:
    now = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
    assert parse_since("90m", now) == now - dt.timedelta(minutes=90)
    assert parse_since("2d", now) == now - dt.timedelta(days=2)
    assert parse_since("1w", now) == now - dt.timedelta(weeks=1)
    assert parse_since("2026-12-01T09:30Z", now) == dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.UTC)
    assert parse_since("2026-12-01T10:30+01:00", now) == dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.UTC)
    assert parse_since("2026-12-01", now).tzinfo is not None


def test_the_command_filters_and_prints_records(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    old = {**record_of("herdr_fs_read", {"path": "old.txt"}), "time": "2020-01-01T00:00:00.000Z"}
    log.append(old)
    now = dt.datetime.now(dt.UTC)
    recent = describe_call(
        tool="herdr_exec",
        arguments={"workspace": "w1", "command": "echo hi\x1b]0;pwned\x07 there"},
        session=None,
        runtime="r",
        version="v",
        started=now,
        outcome="ok",
        duration_ms=3.0,
    )
    log.append(recent)
    log.append(
        record_of("herdr_fs_read", {"path": "new.txt"}, outcome="secret_path") | {"time": recent["time"]}
    )
    log.close()

    everything = audit_cli("--config-dir", str(tmp_path), "--json")
    assert everything.returncode == 0, everything.stderr
    assert [json.loads(line)["tool"] for line in everything.stdout.splitlines()] == [
        "herdr_fs_read",
        "herdr_exec",
        "herdr_fs_read",
    ]
    filtered = audit_cli("--config-dir", str(tmp_path), "--since", "1h", "--tool", "herdr_fs_read", "--json")
    assert [json.loads(line)["paths"] for line in filtered.stdout.splitlines()] == [["new.txt"]]

    text = audit_cli("--config-dir", str(tmp_path), "--since", "2026-01-01T00:00Z")
    assert text.returncode == 0 and "\x1b" not in text.stdout and "\x07" not in text.stdout
    lines = text.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(recent["time"] + "  herdr_exec  ok  3.0ms  workspace=w1 command=")
    assert "\\x1b]0;pwned\\x07" in lines[0]
    assert "secret_path" in lines[1] and "path=new.txt" in lines[1]


def test_a_torn_last_line_is_skipped_and_said_on_stderr(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    log.append(record_of("herdr_fs_list", {"path": "."}))
    log.close()
    with (tmp_path / AUDIT_FILE_NAME).open("ab") as handle:
        handle.write(b'{"v":1,"time":"2026-12-')
    result = audit_cli("--config-dir", str(tmp_path))
    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 1
    where = tmp_path / AUDIT_FILE_NAME
    assert (
        result.stderr.strip()
        == f"herdr-mcp audit: skipped line 2 of {where}: torn (its writer stopped mid-record)"
    )


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--since", "yesterday"], "invalid_since"),
        (["--since", "5x"], "invalid_since"),
        (["--bogus"], "invalid_argument"),
        (["--since"], "invalid_argument"),
        (["--config-dir", "/nonexistent/herdr-mcp"], "config_dir_not_found"),
    ],
)
def test_bad_arguments_get_one_line_and_exit_2(tmp_path: Path, args: list[str], code: str) -> None:
    argv = args if "--config-dir" in args else ["--config-dir", str(tmp_path), *args]
    result = audit_cli(*argv)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and f"error: {code}: " in result.stderr
    assert "Traceback" not in result.stderr
    as_json = audit_cli(*argv, "--json")
    assert as_json.returncode == 2 and json.loads(as_json.stdout)["error"]["code"] == code


def test_no_log_yet_is_not_an_error(tmp_path: Path) -> None:
    result = audit_cli("--config-dir", str(tmp_path))
    assert result.returncode == 0 and result.stdout == "" and "no audit log" in result.stderr


def test_format_record_escapes_what_a_caller_sent() -> None:
    line = format_record(record_of("t\x1b[31m", {"path": "a b\u202e\n"}))
    assert "\x1b" not in line and "\u202e" not in line and "\n" not in line
    assert 'path="a b\\u202e\\x0a"' in line


# --- end to end: real runtimes, a real MCP client ---------------------------------------------


FILES = {
    "notes.txt": b"CONTENT-MARKER-notes\n",
    ".env": b"API_KEY=SECRET-MARKER-env\n",
    "src/app.py": b"print('CONTENT-MARKER-app')\n",
}


@contextlib.asynccontextmanager
async def session_client(runtime: RunningRuntime) -> AsyncIterator[Client]:
    """A client on the initialize handshake, whose transport carries an Mcp-Session-Id."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {runtime.token}"}, timeout=60) as http,
        Client(streamable_http_client(runtime.url, http_client=http), mode="legacy") as client,
    ):
        yield client


@pytest.fixture
def world() -> Iterator[tuple[RunningRuntime, Path, Path]]:
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", FILES)
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"),
            running_runtime(tmp / "herdr.sock", tmp / "config") as runtime,
        ):
            yield runtime, repo.resolve(), tmp


@pytest.mark.slow
def test_real_calls_are_recorded_with_their_fields_and_no_content(
    world: tuple[RunningRuntime, Path, Path],
) -> None:
    runtime, repo, _ = world
    command = f"printf 'EXEC-%s' OUTPUT; export GITHUB_TOKEN={GITHUB_TOKEN}"
    patch = "*** Begin Patch\n*** Add File: added.txt\n+CONTENT-MARKER-patch\n*** End Patch\n"
    calls: list[tuple[str, dict[str, Any], str]] = [
        ("herdr_fs_read", {"path": str(repo / "notes.txt")}, "ok"),
        ("herdr_fs_read", {"path": str(repo / ".env")}, "secret_path"),
        ("herdr_exec", {"workspace": "w1", "command": command}, "ok"),
        ("herdr_fs_write", {"path": str(repo / "new.txt"), "content": "CONTENT-MARKER-write"}, "ok"),
        ("herdr_fs_patch", {"root": str(repo), "patch": patch}, "ok"),
        ("herdr_fs_grep", {"root": str(repo), "pattern": "CONTENT-MARKER"}, "ok"),
        ("herdr_no_such_tool", {"path": "x", "content": "CONTENT-MARKER-unknown"}, "unknown_tool"),
        (
            "herdr_fs_read",
            {"path": str(repo / "notes.txt"), "start_line": "CONTENT-MARKER-bad"},
            "invalid_arguments",
        ),
    ]
    before = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)

    async def body() -> list[dict[str, Any]]:
        answers = []
        async with session_client(runtime) as client:
            for name, arguments, _ in calls:
                answers.append(await call_tool(client, name, arguments))
        async with mcp_client(runtime.url, runtime.token) as modern:
            answers.append(await call_tool(modern, "herdr_fs_list", {"path": str(repo)}))
        return answers

    answers = run(body(), timeout=DEADLINE_S)
    assert "CONTENT-MARKER-notes" in answers[0]["content"] and answers[2]["stdout"] == "EXEC-OUTPUT"
    after = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)

    logged = records(runtime.config_dir)
    assert [(r["tool"], r["outcome"]) for r in logged] == [(n, o) for n, _, o in calls] + [
        ("herdr_fs_list", "ok")
    ]
    sessions = {r["session"] for r in logged[:-1]}
    assert len(sessions) == 1 and None not in sessions, "one handshake session, named in each record"
    assert logged[-1]["session"] is None, "the stateless protocol revision has no session"
    assert len({r["runtime"] for r in logged}) == 1
    for record, (_, arguments, _) in zip(logged, calls, strict=False):
        assert record["args_sha256"] == jcs_digest(arguments)
        assert before <= dt.datetime.fromisoformat(record["time"]) <= after
        assert record["time"].endswith("Z") and record["duration_ms"] >= 0
    assert logged[0]["paths"] == [str(repo / "notes.txt")]
    assert logged[1]["paths"] == [str(repo / ".env")]
    assert logged[2]["workspace"] == "w1"
    assert logged[2]["command"] == "printf 'EXEC-%s' OUTPUT; export GITHUB_TOKEN=[redacted]"
    assert logged[2]["command_sha256"] == hashlib.sha256(command.encode()).hexdigest()
    assert logged[4]["paths"] == [str(repo), "added.txt"]
    assert logged[6]["paths"] == ["x"]

    everything = raw_log(runtime.config_dir)
    for leak in (b"CONTENT-MARKER", b"SECRET-MARKER", b"EXEC-OUTPUT", GITHUB_TOKEN.encode()):
        assert leak not in everything, leak

    shown = audit_cli("--config-dir", str(runtime.config_dir), "--tool", "herdr_exec", "--json")
    assert shown.returncode == 0, shown.stderr
    assert [json.loads(line) for line in shown.stdout.splitlines()] == [logged[2]]


@pytest.mark.slow
def test_two_runtimes_sharing_a_config_dir_append_concurrently_without_damage() -> None:
    per_runtime = 40
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", FILES).resolve()
        config = tmp / "config"
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"),
            running_runtime(tmp / "herdr.sock", config) as a,
            # Two runtimes of one config dir cannot share its ipc socket (ipc_socket_in_use).
            running_runtime(tmp / "herdr.sock", config, ["--no-ipc-socket"]) as b,
        ):

            async def many(runtime: RunningRuntime) -> list[dict[str, Any]]:
                async with runtime.client() as client:
                    return await asyncio.gather(
                        *(
                            call_tool(client, "herdr_fs_list", {"path": str(repo), "glob": f"*{index}*"})
                            for index in range(per_runtime)
                        )
                    )

            async def body() -> None:
                answers = await asyncio.gather(many(a), many(b))
                assert all("error" not in answer for batch in answers for answer in batch)

            run(body(), timeout=DEADLINE_S)
        logged = records(config)
    assert len(logged) == 2 * per_runtime
    by_runtime: dict[str, int] = {}
    for record in logged:
        by_runtime[record["runtime"]] = by_runtime.get(record["runtime"], 0) + 1
    assert sorted(by_runtime.values()) == [per_runtime, per_runtime]


@pytest.fixture
def repo_and_sim() -> Iterator[tuple[Path, Path]]:
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", FILES)
        with SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"):
            yield repo.resolve(), tmp


def test_an_unwritable_log_stops_calls_before_they_run_until_it_is_writable_again(
    repo_and_sim: tuple[Path, Path],
) -> None:
    repo, tmp = repo_and_sim
    config_dir = tmp / "config"
    log_path = config_dir / AUDIT_FILE_NAME
    target = repo / "written.txt"

    async def write(client: Client, name: str) -> dict[str, Any]:
        return await call_tool(client, "herdr_fs_write", {"path": str(repo / name), "content": "x"})

    async def body() -> list[dict[str, Any]]:
        async with in_process_runtime(tmp / "herdr.sock", config_dir) as runtime, runtime.client() as client:
            assert "error" not in await call_tool(client, "herdr_fs_list", {"path": str(repo)})
            # The log path now leads elsewhere: the runtime must not follow it.
            log_path.rename(tmp / "kept.jsonl")
            log_path.symlink_to(tmp / "elsewhere.jsonl")
            ran_unrecorded = await write(client, "first.txt")
            refused = await write(client, target.name)
            log_path.unlink()
            refused_but_recorded = await write(client, target.name)
            ran = await write(client, "last.txt")
        return [ran_unrecorded, refused, refused_but_recorded, ran]

    ran_unrecorded, refused, refused_but_recorded, ran = run(body(), timeout=DEADLINE_S)
    assert "error" not in ran_unrecorded, "a call that has run keeps its answer"
    assert (repo / "first.txt").exists()
    assert (
        refused["error"]["code"] == "audit_unavailable" and "nothing was run" in refused["error"]["message"]
    )
    assert refused_but_recorded["error"]["code"] == "audit_unavailable"
    assert not target.exists()
    assert "error" not in ran and (repo / "last.txt").exists()
    assert not (tmp / "elsewhere.jsonl").exists()
    assert [(r["tool"], r["outcome"]) for r in records(config_dir)] == [
        ("herdr_fs_write", "audit_unavailable"),
        ("herdr_fs_write", "ok"),
    ]


def test_a_cancelled_call_is_recorded(quiet_login_shell: None) -> None:
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", FILES).resolve()
        marker = tmp / "started"
        with SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"):

            async def body() -> None:
                services = Services.create(
                    RuntimeConfig(config_dir=tmp / "config", herdr_socket=tmp / "herdr.sock")
                )
                dispatcher = ToolDispatcher(services)
                call = asyncio.create_task(
                    dispatcher.call("herdr_exec", {"workspace": "w1", "command": f"touch {marker}; sleep 30"})
                )
                try:
                    await wait_until_async(marker.exists, "the command to start", timeout=DEADLINE_S)
                    call.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await call
                finally:
                    await services.sessions.shutdown()
                    dispatcher.audit.close()
                    services.state.close()

            run(body(), timeout=DEADLINE_S)
            logged = records(tmp / "config")
    assert [(r["tool"], r["outcome"]) for r in logged] == [("herdr_exec", "cancelled")]
    assert logged[0]["command"].startswith("touch ")


@pytest.mark.slow
def test_a_record_is_on_file_before_the_answer_leaves(world: tuple[RunningRuntime, Path, Path]) -> None:
    runtime, repo, _ = world

    async def body() -> dict[str, Any]:
        async with runtime.client() as client:
            return await call_tool(client, "herdr_fs_list", {"path": str(repo)})

    assert "error" not in run(body(), timeout=DEADLINE_S)
    runtime.process.kill()  # no shutdown, no flush: what is on file is what the answer waited for
    runtime.process.wait(timeout=DEADLINE_S)
    assert [(r["tool"], r["outcome"]) for r in records(runtime.config_dir)] == [("herdr_fs_list", "ok")]
