"""The Edge restarted under a connected link: `herdr-mcp link` (a subprocess, paired with
`herdr-mcp link pair`) is connected to the Worker under workerd; wrangler is stopped and started
again on the same port with the same --persist-to directory. The paired device survives (it is in
the persisted KV), the link reconnects on its own within 10 s of the Edge answering again, and the
next tools/call through /mcp is served by the runtime.

The 10 s hold because the link's backoff (1 s doubling to a 6 s cap, 0-50 % added, so at most 9 s;
docs/edge-protocol.md) bounds the wait after the Edge is back, however long it was away; the wait
is measured and named in the failure message when it is over 10 s.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from typing import Any

import pytest

from herdr_mcp.generations import ControlFile, GenerationStore, Observation, activate
from tests.support.edge_harness import Edge, running_edge
from tests.support.edge_relay_harness import begin_authorization, finish_authorization
from tests.support.link_harness import generation_for, running_link
from tests.support.runtime_harness import two_runtimes
from tests.support.sim_helpers import short_tmp_dir
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CLI = [sys.executable, "-m", "herdr_mcp"]
#: Issue 11's acceptance: the link reconnects within 10 s of the Edge being back.
RECONNECT_S = 10.0
#: Waiting for the Edge to see a link that is already dialling (load makes it slow, not broken).
SEE_S = 60.0


def _cli(*argv: str) -> dict[str, Any]:
    done = subprocess.run([*CLI, *argv, "--json"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def _online(edge: Edge, device_id: str) -> bool:
    answer = edge.get(f"/status/{device_id}", headers=edge.admin_headers())
    return answer.status_code == 200 and answer.json()["online"] is True


def test_the_link_reconnects_to_a_restarted_edge_and_the_next_call_works() -> None:
    with short_tmp_dir() as tmp, two_runtimes(tmp) as (a, _b), contextlib.ExitStack() as first_edge:
        store = GenerationStore.in_dir(tmp / "generations")
        store.write_control(
            ControlFile(generations=(generation_for("A", a),), observation=Observation(2, 50)),
            expected_revision=0,
        )
        assert activate(store, "A").outcome == "activated"
        edge = first_edge.enter_context(running_edge(tmp / "edge"))
        port = int(edge.base.rsplit(":", 1)[1])
        code = edge.start_pairing()["code"]
        paired = _cli("link", "pair", "--edge", edge.base, "--code", code, "--config-dir", str(tmp))
        device_id = paired["device_id"]
        with running_link(store.state_dir, tmp / "link-token") as link:
            wait_until(lambda: link.health()["edge"]["state"] == "connected", "the link to connect", SEE_S)
            first_connection = link.health()["edge"]["connection_id"]
            authorization = begin_authorization(edge)
            link_port = link.base.rsplit(":", 1)[1]
            _cli(
                "connector", "approve", authorization.request_id, "--code", authorization.code,
                "--config-dir", str(tmp), "--link-port", link_port,
            )  # fmt: skip
            connector = finish_authorization(edge, authorization)
            assert not connector.call("herdr_methods", {}).get("isError")

            # Stopped: wrangler, workerd and all of their process group.
            first_edge.close()
            wait_until(
                lambda: link.health()["edge"]["state"] != "connected", "the link to see the drop", SEE_S
            )

            with running_edge(tmp / "edge", port=port) as again:
                back = time.monotonic()
                wait_until(lambda: _online(again, device_id), "the link to reconnect", SEE_S)
                took = time.monotonic() - back
                state = link.health()["edge"]
                assert took <= RECONNECT_S, (
                    f"reconnected {took:.1f} s after the Edge answered again "
                    f"(the link's last backoff: {state['last_backoff_s']} s, "
                    f"reconnects: {state['reconnects']})"
                )
                assert state["state"] == "connected" and state["connection_id"] != first_connection
                # The device and the connector's grant survived in the persisted state.
                answer = connector.call("herdr_methods", {})
                assert not answer.get("isError"), answer
                assert answer["structuredContent"], answer
