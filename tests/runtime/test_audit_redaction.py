"""The audit log records what ran (issue 23, item 2): redaction replaces only the secret value.

Defect from outside: `X_TOKEN=1;rm -f /tmp/x; echo removed` ran and was recorded as
`X_TOKEN=[redacted] -f /tmp/x; echo removed` (the value pattern took `1;rm`), so a caller could
keep a program out of the record; the runtime's own bearer, `sshpass -p <pw>` and `aws configure
set aws_secret_access_key <s>` were recorded verbatim.

A unit table (command -> record) over every separator bash has, quoting, unterminated quotes and
the credential flags; a generated check that no following command is ever hidden; bounds on
hostile input; the known secrets read from the config dir; and end to end, commands run through
herdr_exec on a real runtime over loopback, their effects checked, and the log read back with
`herdr-mcp audit --json`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herdr_mcp.runtime import redaction
from herdr_mcp.runtime.audit import AuditLog, KnownSecrets, describe_call, read_records, recorded_command
from herdr_mcp.runtime.shell_words import CLOSE, HEREDOC, OPEN, WORD, scan
from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.runtime_harness import (
    IN_PROCESS_TOKEN,
    RunningRuntime,
    call_tool,
    in_process_runtime,
    make_repo,
    running_runtime,
)
from tests.support.sim_helpers import run, short_tmp_dir

DEADLINE_S = 60.0
BEARER = "Zm9vYmFyYmF6cXV1eGNvcmdlZ3JhdWx0Z2FycGx5d2FsZG8"  # the shape of a token file's 43 characters
R = "[redacted]"

# (command, what the log records). Every row's secret is gone and every other character kept.
TABLE = [
    # the defect: a secret-named assignment followed by another command, for every separator
    ("X_TOKEN=1;rm -f /tmp/x; echo removed", f"X_TOKEN={R};rm -f /tmp/x; echo removed"),
    ("X_TOKEN=1&&rm -f /tmp/x", f"X_TOKEN={R}&&rm -f /tmp/x"),
    ("X_TOKEN=1||rm -f /tmp/x", f"X_TOKEN={R}||rm -f /tmp/x"),
    ("X_TOKEN=1|rm -f /tmp/x", f"X_TOKEN={R}|rm -f /tmp/x"),
    ("X_TOKEN=1&rm -f /tmp/x", f"X_TOKEN={R}&rm -f /tmp/x"),
    ("X_TOKEN=1\nrm -f /tmp/x", f"X_TOKEN={R}\nrm -f /tmp/x"),
    ("X_TOKEN=1;;rm", f"X_TOKEN={R};;rm"),
    ("(X_TOKEN=1;rm -f /tmp/x)", f"(X_TOKEN={R};rm -f /tmp/x)"),
    ("echo $(X_TOKEN=1;rm -f /tmp/x)", f"echo $(X_TOKEN={R};rm -f /tmp/x)"),
    ("echo `X_TOKEN=1;rm -f /tmp/x`", f"echo `X_TOKEN={R};rm -f /tmp/x`"),
    ('echo "$(X_TOKEN=1;rm -f /tmp/x)"', f'echo "$(X_TOKEN={R};rm -f /tmp/x)"'),
    ("{ X_TOKEN=1;rm -f /tmp/x; }", f"{{ X_TOKEN={R};rm -f /tmp/x; }}"),
    ("X_TOKEN=1>/tmp/f rm -f /tmp/x", f"X_TOKEN={R}>/tmp/f rm -f /tmp/x"),
    ("X_TOKEN=1 <(rm -f /tmp/x)", f"X_TOKEN={R} <(rm -f /tmp/x)"),
    # heredocs: the body withheld, the lines around it kept, the command after it too
    (
        "cat <<EOF >f\nX_TOKEN=1;body\nEOF\nX_TOKEN=2;rm -f /tmp/x",
        f"cat <<EOF >f\n[heredoc body withheld: 1 lines]\nEOF\nX_TOKEN={R};rm -f /tmp/x",
    ),
    ("cat <<-'E'\n\tbody\n\tE\nrm x", "cat <<-'E'\n[heredoc body withheld: 1 lines]\n\tE\nrm x"),
    (
        "cat <<EOF\nplain\nnow $(rm -f /tmp/x)\nEOF",
        "cat <<EOF\n[heredoc body withheld: 1 lines]\nnow $(rm -f /tmp/x)\nEOF",
    ),
    ("cat <<'EOF'\n$(not run)\nEOF", "cat <<'EOF'\n[heredoc body withheld: 1 lines]\nEOF"),
    ('echo "<<EOF"\nrm -f /tmp/x', 'echo "<<EOF"\nrm -f /tmp/x'),
    ("cat <<< 'X_TOKEN=1'; rm x", f"cat <<< 'X_TOKEN={R}'; rm x"),
    # the value is only the value: quoting and escapes
    ("DB_PASSWORD='s3 cr3t';rm x", f"DB_PASSWORD={R};rm x"),
    ('DB_PASSWORD="s3 \\" cr3t"&&rm x', f"DB_PASSWORD={R}&&rm x"),
    # a value holding a shell separator is redacted up to it: what follows may be a command
    ("DB_PASSWORD=s3\\;cr3t;rm x", f"DB_PASSWORD={R};cr3t;rm x"),
    ("bash -c X_TOKEN=a';rm x'", f"bash -c X_TOKEN={R};rm x'"),
    ("DB_PASSWORD=$'s3\\'cr3t';rm x", f"DB_PASSWORD={R};rm x"),
    ("A_TOKEN=ab$(rm x)cd", f"A_TOKEN={R}$(rm x)cd"),
    ("A_TOKEN=$(cat /run/secret) deploy", "A_TOKEN=$(cat /run/secret) deploy"),
    ('A_TOKEN="$(cat f)" deploy', 'A_TOKEN="$(cat f)" deploy'),
    ("export GITHUB_TOKEN_FILE=/run/t; ls", "export GITHUB_TOKEN_FILE=/run/t; ls"),
    ("bash -c 'X_TOKEN=1; rm x'", f"bash -c 'X_TOKEN={R}; rm x'"),
    (
        "ssh h \"mysql --password pw1 -e 'select 1'; rm x\"",
        f"ssh h \"mysql --password {R} -e 'select 1'; rm x\"",
    ),
    # unterminated quotes: recorded as written (bash ran nothing of that line), known values aside
    ("X_TOKEN='abc;rm -f /tmp/x", "X_TOKEN='abc;rm -f /tmp/x"),
    ('X_TOKEN="abc;rm -f /tmp/x', 'X_TOKEN="abc;rm -f /tmp/x'),
    ("X_TOKEN=${abc;rm -f /tmp/x", "X_TOKEN=${abc;rm -f /tmp/x"),
    ("echo ok; X_TOKEN=1\nrm '", f"echo ok; X_TOKEN={R}\nrm '"),
    # credential flags
    ("sshpass -p hunter2 ssh -p 2222 host", f"sshpass -p {R} ssh -p 2222 host"),
    ("sshpass -phunter2 ssh host;ls", f"sshpass -p{R} ssh host;ls"),
    ("sshpass -f ~/.pw ssh host", "sshpass -f ~/.pw ssh host"),
    (
        "aws configure set aws_secret_access_key wJalrXUtnFEMI; aws s3 ls",
        f"aws configure set aws_secret_access_key {R}; aws s3 ls",
    ),
    (
        "aws --profile p configure set default.aws_session_token abc --debug",
        f"aws --profile p configure set default.aws_session_token {R} --debug",
    ),
    ("aws configure set region eu-west-1", "aws configure set region eu-west-1"),
    ("npm config set //r.example/:_authToken abc", f"npm config set //r.example/:_authToken {R}"),
    ("mysql --password pw1 -e 'select 1'", f"mysql --password {R} -e 'select 1'"),
    ("mysql --password=pw1 db;rm x", f"mysql --password={R} db;rm x"),
    ("mysql -uroot -ppw1 db", f"mysql -uroot -p{R} db"),
    ("mysql -p db", "mysql -p db"),
    (
        "docker login -u me -p pw1 reg; docker run -p 80:80 img",
        f"docker login -u me -p {R} reg; docker run -p 80:80 img",
    ),
    ("docker login --password-stdin reg <pw.txt", "docker login --password-stdin reg <pw.txt"),
    ("redis-cli -a pw1 get k", f"redis-cli -a {R} get k"),
    ("gh secret set NAME --body pw1 -R o/r", f"gh secret set NAME --body {R} -R o/r"),
    ("curl -u admin:pw1 https://h.invalid;ls", f"curl -u admin:{R} https://h.invalid;ls"),
    ("curl --user=admin:pw1 h", f"curl --user=admin:{R} h"),
    ("git clone https://bob:pw1@git.invalid/r;ls", f"git clone https://bob:{R}@git.invalid/r;ls"),
    ("curl 'https://h.invalid/x?api_key=k1&page=2';ls", f"curl 'https://h.invalid/x?api_key={R}&page=2';ls"),
    ('curl -d \'{"password":"pw1","user":"bob"}\' h', f'curl -d \'{{"password":"{R}","user":"bob"}}\' h'),
    ("curl -H 'Authorization: Bearer abcdefgh123' h;ls", f"curl -H 'Authorization: Bearer {R}' h;ls"),
    ("curl -H X-Api-Key: k1; rm -f /tmp/x", f"curl -H X-Api-Key: {R}; rm -f /tmp/x"),
    ("curl -H Authorization: Bearer abcdefgh123 h", f"curl -H Authorization: Bearer {R} h"),
    ("curl --cookie 'sid=c1' h", f"curl --cookie {R} h"),
    # nothing to redact: recorded as given
    ("git log --author=Bob --since=2.weeks -- src/", "git log --author=Bob --since=2.weeks -- src/"),
    ("pytest -q -k 'token and not slow' tests/", "pytest -q -k 'token and not slow' tests/"),
    ("grep -rn password_reset src/ | head # X_TOKEN", "grep -rn password_reset src/ | head # X_TOKEN"),
    ("ls --no-password x; compass --bypass y", "ls --no-password x; compass --bypass y"),
]


@pytest.mark.parametrize(("command", "recorded"), TABLE)
def test_the_record_is_the_command_with_only_the_values_replaced(command: str, recorded: str) -> None:
    assert recorded_command(command) == recorded


def test_the_runtimes_own_bearer_is_redacted_wherever_it_is() -> None:
    commands = {
        f"curl -H 'Authorization: Bearer {BEARER}' http://127.0.0.1:8772/mcp": (
            f"curl -H 'Authorization: Bearer {R}' http://127.0.0.1:8772/mcp"
        ),
        f"echo {BEARER}>t; rm x": f"echo {R}>t; rm x",
        f"echo 'unterminated {BEARER}": f"echo 'unterminated {R}",
        f"ls # {BEARER}": f"ls # {R}",
        f"cat <<EOF\n{BEARER}\nEOF": "cat <<EOF\n[heredoc body withheld: 1 lines]\nEOF",
    }
    for command, recorded in commands.items():
        assert recorded_command(command, [BEARER]) == recorded
    # In every field of a record, not only the command.
    record = describe_call(
        tool="herdr_exec",
        arguments={"command": f"echo {BEARER}", "intent": f"use {BEARER}", "workspace": "w1"},
        session=None,
        runtime="r",
        version="v",
        started=dt.datetime.now(dt.UTC),
        outcome="ok",
        duration_ms=1.0,
        known_secrets=[BEARER],
    )
    assert BEARER not in json.dumps(record)
    assert record["command"] == f"echo {R}" and record["intent"] == f"use {R}"


def test_the_known_secrets_are_read_from_the_config_dir_and_kept_out_of_every_line(tmp_path: Path) -> None:
    link_token = "bGlua3Rva2VubGlua3Rva2VubGlua3Rva2Vu"
    device_secret = "ZGV2aWNlc2VjcmV0ZGV2aWNlc2VjcmV0"
    (tmp_path / "token").write_text(BEARER + "\n")
    (tmp_path / "link-token").write_text(link_token)
    (tmp_path / "edge-device.json").write_text(json.dumps({"device_id": "d", "device_secret": device_secret}))
    known = KnownSecrets(tmp_path)
    assert set(known.values()) == {BEARER, link_token, device_secret}
    log = AuditLog(tmp_path)
    try:
        # The backstop in `append`: whatever built the record (here, no known_secrets given).
        log.append({"time": "t", "tool": f"x{BEARER}", "session": link_token, "command": device_secret})
    finally:
        log.close()
    line = (tmp_path / "audit.jsonl").read_text()
    for secret in (BEARER, link_token, device_secret):
        assert secret not in line
    assert json.loads(line)["tool"] == f"x{R}"


def test_a_changed_token_file_is_read_again(tmp_path: Path) -> None:
    known = KnownSecrets(tmp_path)
    assert known.values() == ()
    (tmp_path / "token").write_text(BEARER)
    deadline = time.monotonic() + DEADLINE_S
    while BEARER not in known.values():
        assert time.monotonic() < deadline, "the new token file was never read"
        time.sleep(0.05)  # polling the recheck interval (KnownSecrets.RECHECK_S), the subject


#: One token of each shape `_KNOWN_TOKENS` knows, in its order (fake values).
TOKEN_SHAPES = [
    "ghp_" + "a1" * 12,
    "github_pat_" + "B2_" * 8,
    "glpat-" + "c3-" * 8,
    "xoxb-" + "4d" * 6,
    "sk-" + "e5_" * 8,
    "AKIA" + "F6G7" * 4,
    "AIza" + "h8" * 17 + "h",
    "npm_" + "i9" * 18,
    "pypi-" + "j0" * 26,
    "rk_live_" + "k1" * 8,
    "eyJ" + "l2m3n" + ".o4p5q" + ".r6s7t",
]


def _alternatives(pattern: str) -> list[str]:
    """The alternatives of the one `(?:...)` group a pattern ends with (after its lookbehind)."""
    body = pattern[pattern.index("(?:", pattern.index(")")) + 3 : -1]
    parts, depth, start, index = [], 0, 0, 0
    while index < len(body):
        char = body[index]
        if char == "\\":
            index += 1
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "|" and depth == 0:
            parts.append(body[start:index])
            start = index + 1
        index += 1
    return [*parts, body[start:]]


def test_the_token_scan_is_left_out_only_where_no_shape_can_match() -> None:
    # `_known_edits` runs `_KNOWN_TOKENS` only on text holding one of `_TOKEN_ANCHORS` (issue 24:
    # the scan was most of a path's redaction): every alternative holds one literally.
    assert len(_alternatives(redaction._KNOWN_TOKENS.pattern)) == len(TOKEN_SHAPES)
    for token in TOKEN_SHAPES:
        assert redaction.redact_known(f"/repo/{token}/x") == f"/repo/{redaction.REDACTED}/x", token
        assert any(anchor in token for anchor in redaction._TOKEN_ANCHORS), token
    assert redaction.redact_known("ASIA" + "Z" * 16) == redaction.REDACTED
    assert redaction.redact_known("sk_test_" + "q" * 16) == redaction.REDACTED
    assert redaction.redact_known("/home/user/project/src/main.py") == "/home/user/project/src/main.py"


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ghitpsk_-AKIAzSxoylnJe.0123456789/", max_size=80))
def test_text_without_an_anchor_has_no_token(text: str) -> None:
    if not any(anchor in text for anchor in redaction._TOKEN_ANCHORS):
        assert redaction._KNOWN_TOKENS.search(text) is None


# --- nothing that follows is ever hidden -----------------------------------------------------

SECRET_FORMS = [
    "X_TOKEN={v}",
    "X_TOKEN='{v} {v}'",
    'X_TOKEN="{v}"',
    "run --password {v}",
    "run --api-key={v}",
    "sshpass -p {v} ssh h",
    "aws configure set aws_secret_access_key {v}",
    "curl -u a:{v} https://b:{v}@h.invalid",
    "curl -H 'Authorization: Bearer {v}'",
    "curl -H X-Auth-Token: {v}",
    "mysql -p{v}",
    "docker login -p {v}",
    "redis-cli -a {v}",
]
SEPARATORS = [";", " && ", " || ", " | ", "\n", " & ", ";\n"]
WRAPPERS = ["{}", "( {} )", "echo $( {} )", "echo `{}`", '"$( {} )"', "{{ {}; }}", "bash -c '{}'"]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(SECRET_FORMS), st.sampled_from(SEPARATORS), st.sampled_from(WRAPPERS)),
        min_size=1,
        max_size=5,
    )
)
def test_no_secret_form_hides_a_following_command(parts: list[tuple[str, str, str]]) -> None:
    pieces = []
    for index, (form, separator, wrapper) in enumerate(parts):
        inner = form.format(v=f"SECRETV{index}") + separator + f"rm -f /tmp/MARK{index}"
        if "'" in wrapper and "'" in inner:
            wrapper = wrapper.replace("'", '"')  # quoting that bash reads as one script
        pieces.append(wrapper.format(inner))
    command = "\n".join(pieces)
    recorded = recorded_command(command)
    for index in range(len(parts)):
        assert f"rm -f /tmp/MARK{index}" in recorded, (command, recorded)
        assert f"SECRETV{index}" not in recorded, (command, recorded)


def test_the_scanner_keeps_offsets_and_nesting() -> None:
    text = "a \"b $(c 'd)' e) f\" `g` <<X\nbody\nX\nh"
    tokens = scan(text)
    assert [(t.kind, text[t.start : t.end]) for t in tokens if t.kind in (WORD, OPEN, CLOSE)] == [
        (WORD, "a"), (WORD, '"b '), (OPEN, "$("), (WORD, "c"), (WORD, "'d)'"), (WORD, "e"), (CLOSE, ")"),
        (WORD, ' f"'), (OPEN, "`"), (WORD, "g"), (CLOSE, "`"), (WORD, "X"), (WORD, "h"),
    ]  # fmt: skip
    (heredoc,) = [t for t in tokens if t.kind == HEREDOC]
    assert [text[a:b] for a, b in heredoc.lines] == ["body"] and heredoc.terminated and heredoc.expands


HOSTILE = [
    "$(" * 32_768,
    "${" * 32_768,
    '"' * 65_536,
    "`" * 65_536,
    "(" * 65_536,
    ")" * 65_536,
    "$'\\'" * 16_384,
    "<<A\n" * 16_384,
    "<<-A " * 13_107,
    "a\\" * 32_768,
    "bash -c '" * 7_281,
    "--token " * 8_192,
    "docker login " * 5_041,
    "git config " * 5_957,
    "sshpass -p " * 5_957,
    "X_TOKEN=" * 8_192,
    "cat <<E\n$(x)\n" * 5_041,
    "# " * 32_768,
]


def test_hostile_commands_are_scanned_in_linear_time_without_raising() -> None:
    started = time.monotonic()
    for command in HOSTILE:
        assert isinstance(recorded_command(command), str)
    assert time.monotonic() - started < 20, "redaction must stay linear on 64 KiB commands"


# --- end to end: herdr_exec on a real runtime over loopback ----------------------------------


@pytest.fixture
def runtime_in_repo(quiet_login_shell: None) -> Iterator[tuple[RunningRuntime, Path]]:
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", {"keep.txt": b"kept\n"})
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"),
            running_runtime(tmp / "herdr.sock", tmp / "config") as runtime,
        ):
            yield runtime, repo.resolve()


def test_the_bearer_the_gate_checks_is_redacted_though_no_file_holds_it(quiet_login_shell: None) -> None:
    """`build_app`'s token (here the in-process harness's, in no token file) is a known secret."""
    with short_tmp_dir() as tmp:
        repo = make_repo(tmp / "repo", {"keep.txt": b"kept\n"})
        with SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"):

            async def body() -> dict[str, Any]:
                async with in_process_runtime(tmp / "herdr.sock", tmp / "config") as runtime:
                    command = f"printf %s {runtime.token} | wc -c"
                    return await runtime.call("herdr_exec", {"workspace": "w1", "command": command})

            answer = run(body(), timeout=DEADLINE_S)
            raw = (tmp / "config" / "audit.jsonl").read_text()
    assert answer["stdout"].strip() == str(len(IN_PROCESS_TOKEN)) and not (tmp / "config" / "token").exists()
    assert IN_PROCESS_TOKEN not in raw and json.loads(raw)["command"] == f"printf %s {R} | wc -c"


def e2e_cases(bearer: str) -> list[tuple[str, str, str]]:
    """(command, its stdout when run, the record). Programs that would reach a network or are
    not installed here (sshpass, aws, curl, mysql) are shell functions that say they ran."""
    fake = "sshpass() { echo sshpass-ran; }; aws() { echo aws-ran; }; curl() { echo curl-ran; }; "
    return [
        ("X_TOKEN=1;rm -f gone.txt; echo removed", "removed\n", f"X_TOKEN={R};rm -f gone.txt; echo removed"),
        ("A_SECRET=pw1 && echo and-ran", "and-ran\n", f"A_SECRET={R} && echo and-ran"),
        ("false || B_PASSWORD=pw2 echo or-ran", "or-ran\n", f"false || B_PASSWORD={R} echo or-ran"),
        ("C_TOKEN=pw3 printf pipe-ran|cat", "pipe-ran", f"C_TOKEN={R} printf pipe-ran|cat"),
        ("D_TOKEN=pw4\necho newline-ran", "newline-ran\n", f"D_TOKEN={R}\necho newline-ran"),
        ("(E_TOKEN=pw5;echo subshell-ran)", "subshell-ran\n", f"(E_TOKEN={R};echo subshell-ran)"),
        ("echo $(F_TOKEN=pw6;echo subst-ran)", "subst-ran\n", f"echo $(F_TOKEN={R};echo subst-ran)"),
        ("echo `G_TOKEN=pw7;echo tick-ran`", "tick-ran\n", f"echo `G_TOKEN={R};echo tick-ran`"),
        (
            "cat <<EOF\nbody-line\nEOF\nH_TOKEN=pw8;echo after-heredoc",
            "body-line\nafter-heredoc\n",
            f"cat <<EOF\n[heredoc body withheld: 1 lines]\nEOF\nH_TOKEN={R};echo after-heredoc",
        ),
        (fake + "sshpass -p pw9 ssh host", "sshpass-ran\n", fake + f"sshpass -p {R} ssh host"),
        (
            fake + "aws configure set aws_secret_access_key pw10;echo aws-done",
            "aws-ran\naws-done\n",
            fake + f"aws configure set aws_secret_access_key {R};echo aws-done",
        ),
        (
            fake + "curl -u admin:pw11 https://bob:pw12@h.invalid/x --password pw13",
            "curl-ran\n",
            fake + f"curl -u admin:{R} https://bob:{R}@h.invalid/x --password {R}",
        ),
        (
            f"echo {bearer} >/dev/null; echo bearer-ran",
            "bearer-ran\n",
            f"echo {R} >/dev/null; echo bearer-ran",
        ),
        ("echo before\nX_TOKEN='pw14; echo never", "before\n", "echo before\nX_TOKEN='pw14; echo never"),
    ]


@pytest.mark.slow
def test_commands_run_through_a_real_runtime_are_recorded_as_run(
    runtime_in_repo: tuple[RunningRuntime, Path],
) -> None:
    runtime, repo = runtime_in_repo
    (repo / "gone.txt").write_text("x")
    cases = e2e_cases(runtime.token)

    async def body() -> list[dict[str, Any]]:
        async with runtime.client() as client:
            return [
                await call_tool(client, "herdr_exec", {"workspace": "w1", "command": command})
                for command, _, _ in cases
            ]

    answers = run(body(), timeout=DEADLINE_S * 3)
    shown = subprocess.run(
        [sys.executable, "-m", "herdr_mcp", "audit", "--config-dir", str(runtime.config_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=True,
    )
    logged = {record["command_sha256"]: record for record in map(json.loads, shown.stdout.splitlines())}
    assert not (repo / "gone.txt").exists(), "the command after the secret ran"
    rows = []
    for (command, stdout, recorded), answer in zip(cases, answers, strict=True):
        record = logged[hashlib.sha256(command.encode()).hexdigest()]
        rows.append((command, answer.get("stdout"), record["command"]))
        assert answer.get("stdout") == stdout, (command, answer)
        assert record["command"] == recorded, command
    assert runtime.token.encode() not in b"".join(
        p.read_bytes() for p in runtime.config_dir.glob("audit.jsonl*")
    )
    assert list(read_records(runtime.config_dir)), "the file read directly agrees"
    print("\n| command | what ran (stdout) | recorded |\n|---|---|---|")
    for command, ran, recorded in rows:
        print(f"| {command!r} | {ran!r} | {recorded!r} |".replace(runtime.token, "<runtime bearer>"))
