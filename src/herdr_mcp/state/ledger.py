"""The idempotency ledger: exactly-once bookkeeping for mutations (SPEC 3.3).

A mutation that may be repeated by a caller (herdr_exec with an intent, herdr_prompt) names
itself with `(kind, idempotency_key)` and describes itself with a `request_hash`. The protocol:

1. `begin()` records the key durably BEFORE the mutation acts. Exactly one caller, across
   threads and processes, gets `Started`; everybody else learns what that caller did.
2. The caller that got `Started` acts, then records the outcome with `complete()` (it happened:
   the result a replay returns), `fail()` (it definitively did not happen or failed: the error
   a replay returns) or `abandon()` (it certainly never started, e.g. validation failed after
   `begin`: the key is free again).
3. A repeat of the same key and request gets `Replay` with the stored outcome; a repeat while the
   first is running gets `InFlight`; the same key with another request is refused with
   `idempotency_key_conflict`.

An operation left in flight by an earlier runtime instance (it was killed between `begin` and the
outcome) is uncertain: the mutation may or may not have happened. `in_flight_from_other_instances()`
lists them for restart reconciliation and `resolve_stale()` records what reconciliation found out.

Keys expire `ttl_seconds` after their outcome was recorded (after `begin` while in flight); expired
rows are pruned lazily and the key may then be reused. An in-flight row of this instance is never
pruned: the mutation it guards may still be acting.

Outcomes are stored as RFC 8785 canonical JSON; a replay returns an equal dict.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import rfc8785

from herdr_mcp.errors import ToolError
from herdr_mcp.state.store import StateStore

__all__ = [
    "DEFAULT_TTL_SECONDS",
    "InFlight",
    "Ledger",
    "Replay",
    "StaleOperation",
    "Started",
    "canonical_json",
    "request_hash",
]

_log = logging.getLogger(__name__)

#: How long a key names its first call. A day covers a Web conversation resumed the next morning
#: while keeping the table small.
DEFAULT_TTL_SECONDS = 24 * 3600.0
# A full sweep of expired rows at most this often; `begin` always clears its own key when expired.
_PRUNE_INTERVAL_SECONDS = 60.0


def canonical_json(value: Any) -> str:
    """RFC 8785 canonical JSON text of `value` (raises rfc8785 errors on NaN or huge integers)."""
    return rfc8785.dumps(value).decode("utf-8")


def request_hash(request: Mapping[str, Any]) -> str:
    """`"sha256:" + hex` of the canonical JSON of the fields that define a request.

    The caller passes exactly those fields (for herdr_exec, for example, the workspace, command,
    root, timeout and intent, never the key itself), so that equal requests hash equally
    whatever the order of their keys.
    """
    return "sha256:" + hashlib.sha256(rfc8785.dumps(dict(request))).hexdigest()


def _iso(epoch_seconds: float) -> str:
    return (
        datetime.fromtimestamp(epoch_seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


@dataclass(frozen=True)
class Started:
    """This call owns the operation and must act, then call complete/fail/abandon."""

    op_id: str


@dataclass(frozen=True)
class Replay:
    """The operation ran before; `result` is its stored result (or error, when `state` is failed)."""

    op_id: str
    result: dict[str, Any]
    state: Literal["completed", "failed"]


@dataclass(frozen=True)
class InFlight:
    """Another call holds the operation and has not recorded its outcome yet."""

    op_id: str
    runtime_instance: str
    created_at: float  # Unix time in seconds


@dataclass(frozen=True)
class StaleOperation:
    """An operation an earlier runtime instance began and never finished recording."""

    op_id: str
    kind: str
    idempotency_key: str
    request_hash: str
    runtime_instance: str
    created_at: float  # Unix time in seconds


class Ledger:
    """The `operations` table of `state.db`, owned for one runtime instance.

    Thread-safe (each thread uses its own store connection) and safe across processes (every
    decision is taken inside one `BEGIN IMMEDIATE` transaction).
    """

    def __init__(
        self,
        store: StateStore,
        runtime_instance: str,
        *,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`clock` gives the wall time in seconds that expiries are stamped and judged by (tests
        move it instead of sleeping past a TTL)."""
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        self._store = store
        self.runtime_instance = runtime_instance
        self._ttl_ms = int(ttl_seconds * 1000)
        self._clock = clock
        self._next_sweep = 0.0

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def begin(self, kind: str, key: str, request_hash: str) -> Started | Replay | InFlight:
        """Record `(kind, key, request_hash)` before acting, or report what the first call did.

        Raises ToolError `idempotency_key_conflict` when the key was used for another request,
        and sqlite3.Error when the database is unusable (nothing was recorded then: do not act).
        """
        now = self._now_ms()
        op_id = "op_" + secrets.token_hex(12)
        with self._store.transaction() as tx:
            self._sweep(tx, now)
            # An expired key is free again: drop its row unless this instance may still be acting.
            tx.execute(
                "DELETE FROM operations WHERE kind = ? AND idempotency_key = ? AND expires_at <= ? "
                "AND NOT (state = 'in_flight' AND runtime_instance = ?)",
                (kind, key, now, self.runtime_instance),
            )
            inserted = tx.execute(
                "INSERT INTO operations (op_id, kind, idempotency_key, request_hash, state, "
                "runtime_instance, created_at, updated_at, expires_at) "
                "VALUES (?, ?, ?, ?, 'in_flight', ?, ?, ?, ?) "
                "ON CONFLICT (kind, idempotency_key) DO NOTHING",
                (op_id, kind, key, request_hash, self.runtime_instance, now, now, now + self._ttl_ms),
            ).rowcount
            row = (
                None
                if inserted
                else tx.execute(
                    "SELECT op_id, request_hash, state, result_json, runtime_instance, created_at "
                    "FROM operations WHERE kind = ? AND idempotency_key = ?",
                    (kind, key),
                ).fetchone()
            )
        if row is None:
            return Started(op_id)
        if row["request_hash"] != request_hash:
            raise ToolError(
                "idempotency_key_conflict",
                f"The idempotency_key {key!r} was already used for a different {kind} request; "
                "use a new key for a new request (reuse a key only to repeat the same request).",
                kind=kind,
            )
        if row["state"] == "in_flight":
            return InFlight(row["op_id"], row["runtime_instance"], row["created_at"] / 1000)
        return Replay(row["op_id"], json.loads(row["result_json"]), row["state"])

    def complete(self, op_id: str, result: dict[str, Any]) -> None:
        """Record that the mutation happened; a replay returns `result` from now on.

        Raises ValueError when `result` is not JSON (nothing recorded), sqlite3.Error when the
        database is unusable. An operation that is no longer in flight (resolved by
        reconciliation meanwhile) keeps its first outcome; that is logged, not raised.
        """
        self._settle(op_id, "completed", result)

    def fail(self, op_id: str, error: dict[str, Any]) -> None:
        """Record that the mutation definitively failed or did not happen; a replay returns
        `error` (the wire form of the ToolError, `{"code", "message", ...}`). Raises as `complete`.
        """
        self._settle(op_id, "failed", error)

    def abandon(self, op_id: str) -> None:
        """Forget an operation whose mutation certainly never started; its key is free again."""
        with self._store.transaction() as tx:
            tx.execute("DELETE FROM operations WHERE op_id = ? AND state = 'in_flight'", (op_id,))

    def in_flight_error(self, outcome: InFlight) -> ToolError:
        """The `idempotency_in_flight` refusal to answer a repeat that found `outcome`."""
        started = _iso(outcome.created_at)
        if outcome.runtime_instance == self.runtime_instance:
            message = (
                f"The first call with this idempotency_key is still running (started {started}); "
                "wait, then repeat the same request with the same key to get its result."
            )
        else:
            message = (
                f"The first call with this idempotency_key was started at {started} by a runtime that "
                "stopped before recording the outcome, so whether it took effect is unknown; re-inspect "
                "the workstation, and repeat with a new key only if it did not happen."
            )
        return ToolError(
            "idempotency_in_flight",
            message,
            op_id=outcome.op_id,
            started_at=started,
            same_runtime=outcome.runtime_instance == self.runtime_instance,
        )

    def in_flight_from_other_instances(self) -> list[StaleOperation]:
        """Operations left in flight by other runtime instances, oldest first (for reconciliation)."""
        rows = (
            self._store.connection()
            .execute(
                "SELECT op_id, kind, idempotency_key, request_hash, runtime_instance, created_at "
                "FROM operations WHERE state = 'in_flight' AND runtime_instance != ? ORDER BY created_at",
                (self.runtime_instance,),
            )
            .fetchall()
        )
        return [
            StaleOperation(
                op_id=row["op_id"],
                kind=row["kind"],
                idempotency_key=row["idempotency_key"],
                request_hash=row["request_hash"],
                runtime_instance=row["runtime_instance"],
                created_at=row["created_at"] / 1000,
            )
            for row in rows
        ]

    def resolve_stale(
        self, op_id: str, result: dict[str, Any] | None = None, *, error: dict[str, Any] | None = None
    ) -> bool:
        """Record the outcome reconciliation found for another instance's in-flight operation.

        Give exactly one of `result` (it happened) and `error` (it did not, or its outcome is
        unknowable: the error tells a replay so). Returns False when the operation was not in
        flight under another instance any more (somebody resolved it first). Raises ValueError
        for a wrong combination of arguments.
        """
        if (result is None) == (error is None):
            raise ValueError("resolve_stale needs exactly one of result and error")
        state, outcome = ("completed", result) if result is not None else ("failed", error)
        text = canonical_json(outcome)
        now = self._now_ms()
        with self._store.transaction() as tx:
            changed = tx.execute(
                "UPDATE operations SET state = ?, result_json = ?, updated_at = ?, expires_at = ? "
                "WHERE op_id = ? AND state = 'in_flight' AND runtime_instance != ?",
                (state, text, now, now + self._ttl_ms, op_id, self.runtime_instance),
            ).rowcount
        return bool(changed)

    def _settle(self, op_id: str, state: Literal["completed", "failed"], outcome: dict[str, Any]) -> None:
        try:
            text = canonical_json(outcome)
        except (TypeError, ValueError) as exc:  # rfc8785.CanonicalizationError is a ValueError
            raise ValueError(f"the outcome of {op_id} is not JSON ({exc})") from exc
        now = self._now_ms()
        with self._store.transaction() as tx:
            changed = tx.execute(
                "UPDATE operations SET state = ?, result_json = ?, updated_at = ?, expires_at = ? "
                "WHERE op_id = ? AND state = 'in_flight'",
                (state, text, now, now + self._ttl_ms, op_id),
            ).rowcount
        if not changed:
            _log.warning(
                "operation %s was no longer in flight; its %s outcome was not recorded", op_id, state
            )

    def _sweep(self, tx: sqlite3.Connection, now: int) -> None:
        """Delete every expired row, at most once per interval (cheap: an index range scan)."""
        if time.monotonic() < self._next_sweep:
            return
        self._next_sweep = time.monotonic() + _PRUNE_INTERVAL_SECONDS
        tx.execute(
            "DELETE FROM operations WHERE expires_at <= ? "
            "AND NOT (state = 'in_flight' AND runtime_instance = ?)",
            (now, self.runtime_instance),
        )
