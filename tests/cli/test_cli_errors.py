"""Wrong input, as a newcomer types it, to the real `herdr-mcp` command: one line on stderr,
`herdr-mcp...: error: <code>: <what, and what to do>`, and the exit status of its fault (2 the
input itself, 4 what it names on this machine: a busy port, a missing file), never a traceback,
nothing created on the way (the simulator used to create a missing socket directory).

`$T` in a case is a fresh private directory holding `afile` (a file), `adir` (a directory) and
`bad.json`; `$T/missing` does not exist and must still not exist afterwards. `$BUSY` is a port
something already listens on.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from herdr_mcp.errors import EXIT_LOCAL, EXIT_USAGE
from tests.support.sim_helpers import short_tmp_dir

HERDR_MCP = Path(sys.executable).with_name("herdr-mcp")
#: A refusal is immediate; this only bounds a command that wrongly started serving.
RUN_TIMEOUT_S = 60

SERVICE = "--platform systemd --config-dir $T/cfg --target-dir $T/units --state-dir $T/gens"
GENERATION = "generation --state-dir $T/gens"

#: The codes of the cases that name something missing or busy on this machine (exit 4).
LOCAL_CODES = {
    "port_unavailable",
    "sim_socket_unavailable",
    "file_unreadable",
    "executable_not_found",
    "link_unreachable",
}

#: (command line, the code on the error line, words the line must contain)
CASES = [
    ("update --bogus", "invalid_argument", ["--bogus"]),
    ("update --repository-id abc", "invalid_argument", ["--repository-id"]),
    ("update auto --unsafe-skip-sigstore --config-dir $T/cfg", "invalid_argument", ["never skips"]),
    ("release bogus", "invalid_argument", ["bogus"]),
    ("release verify", "invalid_argument", ["--manifest"]),
    ("release verify --manifest $T/missing/runtime-manifest.json", "file_unreadable", ["missing"]),
    ("release manifest --repository-id x --dist $T", "invalid_argument", ["--repository-id"]),
    ("handoff --site bogus", "invalid_argument", ["--site"]),
    # A newcomer going to ChatGPT tries `connect` first: told where web AIs are connected.
    ("connect chatgpt", "invalid_argument", ["edge deploy", "Use it from ChatGPT", "claude-desktop"]),
    ("connect DeepSeek", "invalid_argument", ["browser extension", "extension/README.md"]),
    ("connect bogus", "invalid_argument", ["bogus", "claude-desktop"]),
    ("connector list --config-dir $T/adir", "link_unreachable", ["no link has run", "herdr-mcp start"]),
    ("serve --port 99999", "invalid_argument", ["--port", "99999", "0"]),
    ("serve --port -1", "invalid_argument", ["--port"]),
    ("serve --port abc", "invalid_argument", ["--port"]),
    ("serve --no-sim --config-dir $T/cfg --port $BUSY", "port_unavailable", ["$BUSY", "--port 0"]),
    ("serve --sim --sim-root $T/missing --config-dir $T/cfg", "invalid_argument", ["--sim-root", "exist"]),
    ("serve --sim --sim-root $T/afile --config-dir $T/cfg", "invalid_argument", ["--sim-root"]),
    ("serve --no-sim --port 0 --config-dir $T/afile", "invalid_argument", ["--config-dir"]),
    (
        "serve --no-sim --port 0 --write-root $T/missing",
        "invalid_argument",
        ["--write-root"],
    ),
    ("serve --host 0.0.0.0", "host_not_loopback", ["127.0.0.1"]),
    ("serve --log-level loud", "invalid_argument", ["--log-level"]),
    ("link --port 99999", "invalid_argument", ["--port", "99999", "0"]),
    ("link --port -1", "invalid_argument", ["--port"]),
    ("link --state-dir $T/gens --port $BUSY", "port_unavailable", ["$BUSY", "--port 0"]),
    ("link --host 0.0.0.0", "host_not_loopback", ["127.0.0.1"]),
    ("link --port 0 --state-dir $T/afile", "invalid_argument", ["--state-dir"]),
    ("link --port 0 --state-dir $T/gens --token-file $T/adir", "invalid_argument", ["--token-file"]),
    ("link --port 0 --state-dir $T/gens --token-file $T/missing/t", "invalid_argument", ["--token-file"]),
    ("sim --socket $T/missing/dir/sock", "invalid_argument", ["--socket", "does not exist"]),
    ("sim --socket $T/afile", "sim_socket_unavailable", ["not a socket"]),
    ("sim --socket $T/s.sock --root $T/missing", "invalid_argument", ["--root"]),
    ("sim --socket $T/s.sock --config $T/missing.json", "sim_config_invalid", ["missing.json"]),
    ("sim --socket $T/s.sock --config $T/bad.json", "sim_config_invalid", ["JSON"]),
    ("sim --socket $T/s.sock --fault =x", "sim_config_invalid", ["METHOD"]),
    ("sim", "invalid_argument", ["--socket"]),
    ("generation --state-dir $T/afile status", "invalid_argument", ["--state-dir"]),
    (f"{GENERATION} register --id A --endpoint http://127.0.0.1:99999", "endpoint_not_loopback", []),
    (
        f"{GENERATION} register --id A --endpoint http://[::1]:1 --expected-epoch x",
        "invalid_argument",
        [],
    ),
    (f"{GENERATION} up --interval -1", "invalid_argument", ["--interval"]),
    (f"{GENERATION} up --interval 0", "invalid_argument", ["--interval"]),
    (f"{GENERATION} up --interval nan", "invalid_argument", ["--interval"]),
    (f"{GENERATION} up --interval inf", "invalid_argument", ["--interval"]),
    (f"service install {SERVICE} --executable /bin/true --port 99999", "invalid_argument", ["--port"]),
    (f"service install {SERVICE} --executable /bin/true --port 0", "invalid_argument", ["--port"]),
    (f"service install {SERVICE} --executable $T/adir", "executable_not_found", ["--executable"]),
    ("service status --platform systemd --config-dir $T/cfg --target-dir $T/afile", "invalid_argument", []),
    ("service uninstall --platform systemd --config-dir $T/afile", "invalid_argument", ["--config-dir"]),
    ("rollback --platform launchd --config-dir $T/afile", "invalid_argument", ["--config-dir"]),
    ("dev --config-dir $T/afile status", "invalid_argument", ["--config-dir"]),
    ("dev --config-dir $T/cfg sync --source $T/missing", "invalid_argument", ["--source"]),
    ("token --config-dir $T/afile", "invalid_argument", ["--config-dir"]),
    ("version --bogus", "invalid_argument", ["--bogus"]),
    ("bogus", "invalid_argument", ["bogus"]),
]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


@pytest.mark.parametrize(("line", "code", "words"), CASES, ids=[case[0] for case in CASES])
def test_wrong_input_gets_one_line_and_its_exit_status(
    line: str, code: str, words: list[str], busy_port: int
) -> None:
    assert HERDR_MCP.exists(), f"{HERDR_MCP} is missing: install the package into this venv"
    with short_tmp_dir() as tmp:
        (tmp / "afile").write_text("x")
        (tmp / "adir").mkdir()
        (tmp / "bad.json").write_text("{")

        def expand(text: str) -> str:
            return text.replace("$T", str(tmp)).replace("$BUSY", str(busy_port))

        try:
            done = subprocess.run(
                [str(HERDR_MCP), *expand(line).split()],
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT_S,
                cwd=tmp,
            )
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"still running after {RUN_TIMEOUT_S} s: the input was accepted") from exc
        lines = done.stderr.splitlines()
        status = EXIT_LOCAL if code in LOCAL_CODES else EXIT_USAGE
        assert (done.returncode, len(lines)) == (status, 1), done.stderr
        assert re.match(rf"herdr-mcp[a-z ]*: error: {code}: ", lines[0]), lines[0]
        assert "Traceback" not in done.stderr
        for word in words:
            assert expand(word) in lines[0], lines[0]
        assert not (tmp / "missing").exists(), "a missing directory was created"
