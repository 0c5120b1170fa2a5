"""One code for "sent, answer lost": `delivery_unknown`, written by the runtime as by the link and
the Edge (the runtime wrote `delivery_uncertain` before issue 23). A failure the idempotency
ledger stored under the former name is replayed under the current one; no schema change."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.errors import DELIVERY_UNKNOWN, FORMER_DELIVERY_UNKNOWN, ToolError, current_code
from herdr_mcp.herdr import HerdrClient, HerdrError
from herdr_mcp.runtime.herdr_errors import tool_error_from_herdr
from herdr_mcp.runtime.idempotency import Idempotency
from herdr_mcp.state.ledger import Ledger, Started, request_hash
from herdr_mcp.state.store import StateStore
from tests.support.sim_helpers import run, short_tmp_dir

REQUEST = {"workspace": "w1", "command": "echo hi >> log"}


@pytest.fixture
def tmp_short() -> Iterator[Path]:
    with short_tmp_dir() as path:
        yield path


@contextlib.asynccontextmanager
async def herdr_that_drops_the_answer(path: Path) -> AsyncIterator[list[bytes]]:
    """A Unix socket standing in for a Herdr that died mid-call: it reads the request line, then
    closes without answering (what Herdr's socket does when its process ends)."""
    received: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.readline())
        writer.close()

    server = await asyncio.start_unix_server(serve, path=str(path))
    try:
        yield received
    finally:
        server.close()
        await server.wait_closed()


def test_a_sent_request_whose_answer_is_lost_is_delivery_unknown(tmp_short: Path) -> None:
    socket = tmp_short / "herdr.sock"

    async def body() -> tuple[HerdrError, list[bytes]]:
        async with herdr_that_drops_the_answer(socket) as received:
            with pytest.raises(HerdrError) as lost:
                await HerdrClient(socket).call("pane.send_text", {"pane_id": "w1:p1", "text": "x"})
            return lost.value, received

    lost, received = run(body(), timeout=60)
    assert received and b"pane.send_text" in received[0]
    assert lost.request_sent
    error = tool_error_from_herdr(lost, mutating=True)
    assert error.code == DELIVERY_UNKNOWN == "delivery_unknown"
    assert error.details["delivery"] == "unknown"
    # A read that lost its answer changed nothing: it is not called delivery_unknown.
    assert tool_error_from_herdr(lost, mutating=False).code != DELIVERY_UNKNOWN


def test_only_the_former_name_is_renamed() -> None:
    assert current_code(FORMER_DELIVERY_UNKNOWN) == DELIVERY_UNKNOWN
    for code in (DELIVERY_UNKNOWN, "not_delivered", "herdr_unavailable", "delivery_uncertainty", ""):
        assert current_code(code) == code


@pytest.mark.parametrize("stored_code", [FORMER_DELIVERY_UNKNOWN, DELIVERY_UNKNOWN])
def test_a_stored_failure_is_replayed_under_the_current_name(tmp_path: Path, stored_code: str) -> None:
    """A ledger row written by a runtime from before issue 23 (the same table, the same JSON)."""
    store = StateStore.open(tmp_path / "state.db")
    try:
        ledger = Ledger(store, "rt-old")
        started = ledger.begin("exec", "key-00001", request_hash(REQUEST))
        assert isinstance(started, Started)
        ledger.fail(started.op_id, {"code": stored_code, "message": "answer lost", "delivery": "unknown"})
        ran: list[str] = []

        async def action(op_id: str) -> dict[str, Any]:
            ran.append(op_id)
            return {}

        async def replay() -> None:
            await Idempotency(Ledger(store, "rt-new")).run(
                "exec", "key-00001", REQUEST, action, follower_timeout=30
            )

        with pytest.raises(ToolError) as replayed:
            run(replay(), timeout=60)
        assert replayed.value.code == DELIVERY_UNKNOWN
        assert replayed.value.details == {"delivery": "unknown", "idempotent_replay": True}
        assert ran == []
    finally:
        store.close()
