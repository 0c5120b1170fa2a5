"""Exactly-once for mutations that carry an idempotency key (herdr_exec, herdr_prompt, dispatch).

The ledger row is written durably before the mutation acts. Concurrent calls with the same key
in this process queue behind the first (the leader) instead of failing, then read its stored
result, so every answer agrees; a replay is marked `idempotent_replay: true`. Across processes
the ledger decides: a key held by another live runtime is `idempotency_in_flight`; a key left
in flight by a runtime that died has an unknown outcome unless the caller can recover it
(`recover`, e.g. from a finished exec session), else `idempotency_outcome_unknown`.

A mutation that certainly did not happen (a refusal before acting, or Herdr never got the
request) releases its key, so the caller may retry with it; any other failure is stored and
replayed like a result (under its current code: a record stored as `delivery_uncertain` before
issue 23 is replayed as `delivery_unknown`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from herdr_mcp.errors import ToolError, current_code
from herdr_mcp.state.ledger import InFlight, Ledger, Replay, Started, request_hash

Action = Callable[[str], Awaitable[dict[str, Any]]]
Recover = Callable[[str], dict[str, Any] | None]


def _pid_alive(runtime_instance: str) -> bool:
    """Instances are named `<pid>-<random>`; a missing pid means the holder is gone."""
    pid_text = runtime_instance.split("-", 1)[0]
    if not pid_text.isdigit():
        return True  # unknown naming: be conservative and treat it as alive
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _released(exc: ToolError) -> bool:
    """True when the failed mutation certainly did not act, so its key may be used again."""
    return exc.details.get("delivery") == "not_delivered" or exc.details.get("acted") is False


class Idempotency:
    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._leaders: dict[tuple[str, str], asyncio.Future[None]] = {}

    async def run(
        self,
        kind: str,
        key: str,
        request: Mapping[str, Any],
        action: Action,
        *,
        follower_timeout: float,
        recover: Recover | None = None,
    ) -> dict[str, Any]:
        """Run `action(op_id)` at most once for (kind, key); replays return the stored answer."""
        slot = (kind, key)
        leader = self._leaders.get(slot)
        if leader is not None:
            try:
                await asyncio.wait_for(asyncio.shield(leader), follower_timeout)
            except TimeoutError as exc:
                raise ToolError(
                    "idempotency_in_flight",
                    f"the {kind} with this idempotency_key is still running; read its outcome later "
                    "by repeating the same call",
                    kind=kind,
                ) from exc
        own: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._leaders[slot] = own
        try:
            return await self._begin(kind, key, request_hash(dict(request)), action, recover)
        finally:
            own.set_result(None)
            if self._leaders.get(slot) is own:
                del self._leaders[slot]

    async def _begin(
        self, kind: str, key: str, digest: str, action: Action, recover: Recover | None
    ) -> dict[str, Any]:
        outcome = await asyncio.to_thread(self._ledger.begin, kind, key, digest)
        if isinstance(outcome, Replay):
            return _replayed(outcome.result, outcome.state)
        if isinstance(outcome, InFlight):
            return self._held_elsewhere(kind, outcome, recover)
        assert isinstance(outcome, Started)
        try:
            result = await action(outcome.op_id)
        except ToolError as exc:
            if _released(exc):
                await asyncio.to_thread(self._ledger.abandon, outcome.op_id)
            else:
                await asyncio.to_thread(self._ledger.fail, outcome.op_id, exc.to_dict())
            raise
        await asyncio.to_thread(self._ledger.complete, outcome.op_id, result)
        return {**result, "idempotent_replay": False}

    def _held_elsewhere(self, kind: str, held: InFlight, recover: Recover | None) -> dict[str, Any]:
        if _pid_alive(held.runtime_instance):
            raise ToolError(
                "idempotency_in_flight",
                f"another runtime is running the {kind} with this idempotency_key; repeat the call later",
                kind=kind,
            )
        recovered = recover(held.op_id) if recover is not None else None
        if recovered is None:
            raise ToolError(
                "idempotency_outcome_unknown",
                f"the runtime that ran this {kind} stopped before recording its outcome; it may have "
                "taken effect: re-inspect (herdr_git, herdr_fs_read, herdr_inspect) before using a new key",
                kind=kind,
            )
        self._ledger.resolve_stale(held.op_id, recovered)
        return {**recovered, "idempotent_replay": True}


def _replayed(stored: dict[str, Any], state: str) -> dict[str, Any]:
    if state == "failed":
        error = dict(stored)
        code, message = str(error.pop("code", "replayed_failure")), str(error.pop("message", ""))
        # A failure stored before issue 23 may carry the former name of `delivery_unknown`.
        raise ToolError(current_code(code), message, idempotent_replay=True, **error)
    return {**stored, "idempotent_replay": True}
