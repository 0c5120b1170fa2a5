"""`herdr-mcp connector approve` approves only with the consent page's code, against the real
Worker under workerd (tests/support/edge_harness.py) and a real `herdr-mcp link` paired with it: the
commands are their own processes, and what the Edge holds afterwards is read from the Edge itself
(the consent page's status poll and `consent.list` / `grant.list` as its relay runs them).

The code is the one the consent page shows (edge/src/consent.ts); `consent.approve` takes no code
(docs/edge-protocol.md), so the command compares it with the code `consent.list` reports before
it sends `consent.approve`.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest

from tests.support.connector_harness import Consent, poll
from tests.support.edge_harness import REDIRECT_URI, Edge, running_edge
from tests.support.edge_relay_harness import Authorization, begin_authorization, finish_authorization
from tests.support.link_harness import running_link
from tests.support.sim_helpers import short_tmp_dir
from tests.support.waiting import wait_until
from tests.support.workstation_harness import CLI, CLI_TIMEOUT_S, cli_json

pytestmark = pytest.mark.slow

#: Generous for a loaded 2-core machine: each wait ends as soon as its condition holds.
WAIT_S = 60.0
#: edge/src/consent.ts, CODE_ALPHABET.
ALPHABET = "ACDEFGHJKMNPQRTUVWXY34679"


@dataclass
class Workstation:
    edge: Edge
    device_id: str
    where: tuple[str, ...]


@pytest.fixture(scope="module")
def workstation() -> Iterator[Workstation]:
    """An Edge, and a link paired with it (`link pair`) and connected."""
    with short_tmp_dir() as tmp, running_edge(tmp / "edge") as edge:
        code = edge.start_pairing()["code"]
        paired = cli_json("link", "pair", "--edge", edge.base, "--code", code, "--config-dir", str(tmp))
        (tmp / "generations").mkdir()
        with running_link(tmp / "generations", tmp / "link-token") as link:
            where = ("--config-dir", str(tmp), "--link-port", link.base.rsplit(":", 1)[1])
            wait_until(
                lambda: cli_json("link", "status", *where)["edge"]["state"] == "connected",
                "the link to connect to the Edge",
                WAIT_S,
            )
            yield Workstation(edge, paired["device_id"], where)


def approve(workstation: Workstation, *argv: str) -> subprocess.CompletedProcess[str]:
    """`herdr-mcp connector approve <argv>` without a terminal (stdin is /dev/null)."""
    return subprocess.run(
        [*CLI, "connector", "approve", *argv, *workstation.where],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def error_of(done: subprocess.CompletedProcess[str]) -> tuple[int, str]:
    return done.returncode, json.loads(done.stdout)["error"]["code"]


def still_pending(workstation: Workstation, authorization: Authorization) -> bool:
    """What the Edge says: the page still waits and the request is listed, no grant made for it."""
    consent = Consent(authorization.request_id, authorization.code, authorization.poll_token)
    listed = workstation.edge.control(workstation.device_id, "consent.list")["result"]["pending"]
    grants = workstation.edge.control(workstation.device_id, "grant.list")["result"]["grants"]
    return (
        poll(workstation.edge, consent)["status"] == "pending"
        and authorization.request_id in [item["request_id"] for item in listed]
        and authorization.client_id not in [grant["client_id"] for grant in grants]
    )


def other_code(code: str) -> str:
    """A well-formed code that is not `code`."""
    return ("A" if code[0] != "A" else "C") + code[1:]


def test_a_wrong_code_is_refused_and_the_right_one_approves(workstation: Workstation) -> None:
    authorization = begin_authorization(workstation.edge)
    wrong = approve(workstation, authorization.request_id, "--code", other_code(authorization.code), "--json")
    print(f"\nEVIDENCE wrong code: exit {wrong.returncode}, {wrong.stderr.strip()}")
    assert error_of(wrong) == (3, "consent_code_mismatch")
    assert "nothing was approved" in wrong.stderr
    assert still_pending(workstation, authorization)
    print("EVIDENCE the Edge after the wrong code: the page polls pending, consent.list lists it, no grant")
    # The right code, typed in lower case with blanks around it.
    right = approve(
        workstation, authorization.request_id, "--code", f" {authorization.code.lower()} ", "--json"
    )
    assert right.returncode == 0, right.stderr
    answer = json.loads(right.stdout)
    assert (answer["request_id"], answer["code"]) == (authorization.request_id, authorization.code)
    granted = workstation.edge.control(workstation.device_id, "grant.list")["result"]["grants"]
    assert answer["grant_id"] in [grant["grant_id"] for grant in granted]
    connector = finish_authorization(workstation.edge, authorization)  # the page sees it approved
    print(
        f"EVIDENCE right code: exit 0, grant {answer['grant_id']}, "
        f"token exchanged ({len(connector.token)} chars)"
    )


def test_without_a_terminal_and_without_a_code_nothing_is_approved(workstation: Workstation) -> None:
    authorization = begin_authorization(workstation.edge)
    done = approve(workstation, authorization.request_id, "--json")
    print(f"\nEVIDENCE no terminal, no --code: exit {done.returncode}, {done.stderr.strip()}")
    assert error_of(done) == (2, "consent_code_required")
    assert "--code" in json.loads(done.stdout)["error"]["message"]
    assert still_pending(workstation, authorization)


def test_codes_that_cannot_be_a_pages_and_requests_that_do_not_wait(workstation: Workstation) -> None:
    authorization = begin_authorization(workstation.edge)
    for malformed in ("12345", "ABCDEFG", "0ACDEF", "AC DEF"):
        done = approve(workstation, authorization.request_id, "--code", malformed, "--json")
        assert error_of(done) == (2, "invalid_argument"), (malformed, done.stderr)
        assert ALPHABET in json.loads(done.stdout)["error"]["message"]
    unknown = approve(workstation, "req_unknown", "--code", authorization.code, "--json")
    assert error_of(unknown) == (2, "consent_not_found")
    assert still_pending(workstation, authorization)


class Terminal:
    """`connector approve` on a pseudo-terminal, as a person runs it."""

    def __init__(self, workstation: Workstation, request_id: str) -> None:
        self.master, slave = pty.openpty()
        self.process = subprocess.Popen(
            [*CLI, "connector", "approve", request_id, *workstation.where],
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=slave,
            text=True,
        )
        os.close(slave)
        self.shown = ""

    def read_until(self, text: str) -> str:
        deadline = time.monotonic() + WAIT_S
        while text not in self.shown:
            assert time.monotonic() < deadline, f"the terminal never showed {text!r}: {self.shown!r}"
            ready, _, _ = select.select([self.master], [], [], 1.0)
            if ready:
                try:
                    self.shown += os.read(self.master, 4096).decode(errors="replace")
                except OSError:  # the process closed the terminal
                    assert text in self.shown, self.shown
        return self.shown

    def type(self, line: str) -> tuple[int, str]:
        os.write(self.master, (line + "\n").encode())
        out, _ = self.process.communicate(timeout=CLI_TIMEOUT_S)
        self.read_rest()
        os.close(self.master)
        return self.process.returncode, out

    def read_rest(self) -> None:
        while select.select([self.master], [], [], 0.2)[0]:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:
                return
            if not chunk:
                return
            self.shown += chunk.decode(errors="replace")


def test_on_a_terminal_the_request_is_shown_and_the_typed_code_decides(workstation: Workstation) -> None:
    authorization = begin_authorization(workstation.edge)
    terminal = Terminal(workstation, authorization.request_id)
    shown = terminal.read_until("Type the code the page shows: ")
    assert authorization.request_id in shown and authorization.code in shown
    assert "client:     Test Connector" in shown  # tests/support/edge_harness.py, register_client
    assert f"returns to: {urlsplit(REDIRECT_URI).netloc}" in shown
    status, _ = terminal.type(other_code(authorization.code))
    print(f"\nEVIDENCE terminal, a wrong code typed: exit {status}; it showed:\n{terminal.shown.strip()}")
    assert status == 3 and "consent_code_mismatch" in terminal.shown
    assert still_pending(workstation, authorization)
    terminal = Terminal(workstation, authorization.request_id)
    terminal.read_until("Type the code the page shows: ")
    status, out = terminal.type(authorization.code.lower())
    print(f"EVIDENCE terminal, the right code typed: exit {status}; {out.strip()}")
    assert status == 0 and out.startswith(f"approved: {authorization.request_id}  "), out
    assert (
        poll(
            workstation.edge, Consent(authorization.request_id, authorization.code, authorization.poll_token)
        )["status"]
        == "approved"
    )
