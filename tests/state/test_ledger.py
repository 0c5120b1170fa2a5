"""The idempotency ledger against a real state.db: races across threads and processes, replay,
conflict, in-flight, expiry, fail/abandon and restart reconciliation."""

from __future__ import annotations

import hashlib
import multiprocessing
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.errors import ToolError
from herdr_mcp.state.ledger import InFlight, Ledger, Replay, Started, request_hash
from herdr_mcp.state.store import StateStore
from tests.support.clocks import ManualClock

REQUEST = request_hash({"workspace": "w1", "command": "echo hi >> log", "intent": "non_idempotent_write"})
OTHER_REQUEST = request_hash({"workspace": "w1", "command": "rm log", "intent": "non_idempotent_write"})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    opened = StateStore.open(tmp_path / "state.db")
    yield opened
    opened.close()


def test_request_hash_is_sha256_of_canonical_json() -> None:
    digest = request_hash({"b": 1, "a": "é", "c": [1.5, None, True]})
    canonical = '{"a":"é","b":1,"c":[1.5,null,true]}'.encode()
    assert digest == "sha256:" + hashlib.sha256(canonical).hexdigest()
    assert digest == request_hash({"c": [1.5, None, True], "a": "é", "b": 1})
    assert digest != request_hash({"b": 2, "a": "é", "c": [1.5, None, True]})


def test_first_call_starts_and_a_replay_returns_an_equal_result(store: StateStore) -> None:
    ledger = Ledger(store, "rt-1")
    started = ledger.begin("exec", "key-00001", REQUEST)
    assert isinstance(started, Started)
    result = {"exit_code": 0, "stdout": "hi ✓\n", "ratio": 0.1, "nested": {"z": [1, 2], "a": None}}
    ledger.complete(started.op_id, result)
    replay = ledger.begin("exec", "key-00001", REQUEST)
    assert replay == Replay(started.op_id, result, "completed")
    # The same key under another kind is a different operation.
    assert isinstance(ledger.begin("prompt", "key-00001", REQUEST), Started)


def test_same_key_with_another_request_is_a_conflict(store: StateStore) -> None:
    ledger = Ledger(store, "rt-1")
    started = ledger.begin("exec", "key-00001", REQUEST)
    for _ in range(2):  # in flight, then completed: a conflict either way
        with pytest.raises(ToolError) as error:
            ledger.begin("exec", "key-00001", OTHER_REQUEST)
        assert error.value.code == "idempotency_key_conflict"
        assert error.value.details == {"kind": "exec"}
        assert "new key" in error.value.message
        ledger.complete(started.op_id, {"ok": True})


def test_a_repeat_while_running_is_in_flight(store: StateStore) -> None:
    ledger = Ledger(store, "rt-1")
    before = time.time()
    started = ledger.begin("exec", "key-00001", REQUEST)
    assert isinstance(started, Started)
    outcome = ledger.begin("exec", "key-00001", REQUEST)
    assert isinstance(outcome, InFlight)
    assert (outcome.op_id, outcome.runtime_instance) == (started.op_id, "rt-1")
    assert before - 0.01 <= outcome.created_at <= time.time() + 0.01
    error = ledger.in_flight_error(outcome)
    assert error.code == "idempotency_in_flight"
    assert error.details["same_runtime"] is True
    assert "wait" in error.message
    other = Ledger(store, "rt-2").in_flight_error(outcome)
    assert other.details["same_runtime"] is False
    assert "re-inspect" in other.message


def test_fail_is_replayed_and_abandon_frees_the_key(store: StateStore) -> None:
    ledger = Ledger(store, "rt-1")
    failed = ledger.begin("exec", "key-failed", REQUEST)
    assert isinstance(failed, Started)
    error = ToolError("cwd_not_found", "The working directory is gone.", root="/x").to_dict()
    ledger.fail(failed.op_id, error)
    assert ledger.begin("exec", "key-failed", REQUEST) == Replay(failed.op_id, error, "failed")

    abandoned = ledger.begin("exec", "key-abandoned", REQUEST)
    assert isinstance(abandoned, Started)
    ledger.abandon(abandoned.op_id)
    again = ledger.begin("exec", "key-abandoned", OTHER_REQUEST)  # not even a conflict: forgotten
    assert isinstance(again, Started)
    assert again.op_id != abandoned.op_id
    # Abandon never drops a recorded outcome.
    ledger.abandon(failed.op_id)
    assert isinstance(ledger.begin("exec", "key-failed", REQUEST), Replay)


def test_an_outcome_that_is_not_json_is_refused_and_nothing_recorded(store: StateStore) -> None:
    ledger = Ledger(store, "rt-1")
    started = ledger.begin("exec", "key-00001", REQUEST)
    assert isinstance(started, Started)
    with pytest.raises(ValueError, match="not JSON"):
        ledger.complete(started.op_id, {"bad": float("nan")})
    with pytest.raises(ValueError, match="not JSON"):
        ledger.complete(started.op_id, {"bad": {1, 2}})
    assert isinstance(ledger.begin("exec", "key-00001", REQUEST), InFlight)


def test_expired_keys_can_be_reused(store: StateStore) -> None:
    clock = ManualClock()
    ledger = Ledger(store, "rt-1", ttl_seconds=60, clock=clock)
    started = ledger.begin("exec", "key-00001", REQUEST)
    assert isinstance(started, Started)
    ledger.complete(started.op_id, {"n": 1})
    clock.advance(59.9)
    assert isinstance(ledger.begin("exec", "key-00001", REQUEST), Replay)
    clock.advance(0.2)
    reused = ledger.begin("exec", "key-00001", OTHER_REQUEST)
    assert isinstance(reused, Started)
    assert reused.op_id != started.op_id
    # This instance's own in-flight row is never pruned: its mutation may still be acting.
    clock.advance(61)
    assert isinstance(ledger.begin("exec", "key-00001", OTHER_REQUEST), InFlight)
    # Another instance's expired in-flight row is.
    assert isinstance(
        Ledger(store, "rt-2", ttl_seconds=60, clock=clock).begin("exec", "key-00001", REQUEST), Started
    )


def test_expired_rows_are_swept(store: StateStore) -> None:
    clock = ManualClock()
    ledger = Ledger(store, "rt-1", ttl_seconds=60, clock=clock)
    for index in range(5):
        started = ledger.begin("exec", f"key-{index:05}", REQUEST)
        assert isinstance(started, Started)
        ledger.complete(started.op_id, {})
    clock.advance(61)
    fresh = Ledger(store, "rt-1", ttl_seconds=60, clock=clock)  # a new ledger sweeps on its first begin
    assert isinstance(fresh.begin("exec", "key-other", REQUEST), Started)
    keys = [row[0] for row in store.connection().execute("SELECT idempotency_key FROM operations")]
    assert keys == ["key-other"]


def test_restart_reconciliation_of_stale_operations(store: StateStore) -> None:
    before = Ledger(store, "rt-old")
    stale = before.begin("prompt", "key-stale", REQUEST)
    done = before.begin("prompt", "key-done", REQUEST)
    assert isinstance(stale, Started) and isinstance(done, Started)
    before.complete(done.op_id, {"task_id": "t1"})

    after = Ledger(store, "rt-new")
    [found] = after.in_flight_from_other_instances()
    assert (found.op_id, found.kind, found.idempotency_key) == (stale.op_id, "prompt", "key-stale")
    assert (found.request_hash, found.runtime_instance) == (REQUEST, "rt-old")
    assert before.in_flight_from_other_instances() == []
    outcome = after.begin("prompt", "key-stale", REQUEST)
    assert isinstance(outcome, InFlight) and outcome.runtime_instance == "rt-old"

    with pytest.raises(ValueError, match="exactly one"):
        after.resolve_stale(stale.op_id)
    with pytest.raises(ValueError, match="exactly one"):
        after.resolve_stale(stale.op_id, result={}, error={})
    error = {"code": "mutation_uncertain", "message": "The runtime restarted; re-inspect."}
    assert after.resolve_stale(stale.op_id, error=error) is True
    assert after.resolve_stale(stale.op_id, result={"late": True}) is False
    assert after.begin("prompt", "key-stale", REQUEST) == Replay(stale.op_id, error, "failed")
    # The old owner's late completion does not overwrite what reconciliation recorded.
    before.complete(stale.op_id, {"late": True})
    assert after.begin("prompt", "key-stale", REQUEST) == Replay(stale.op_id, error, "failed")
    # resolve_stale only touches other instances' operations.
    own = after.begin("prompt", "key-own", REQUEST)
    assert isinstance(own, Started)
    assert after.resolve_stale(own.op_id, result={}) is False


def race(ledger: Ledger, key: str, threads: int) -> list[Started | Replay | InFlight]:
    """`threads` threads call begin with the same key at the same moment."""
    start = threading.Barrier(threads)
    outcomes: list[Started | Replay | InFlight] = []
    lock = threading.Lock()

    def call() -> None:
        start.wait(10)
        outcome = ledger.begin("exec", key, REQUEST)
        if isinstance(outcome, Started):
            ledger.complete(outcome.op_id, {"winner": threading.get_ident()})
        with lock:
            outcomes.append(outcome)

    workers = [threading.Thread(target=call) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    return outcomes


def test_twenty_threads_with_one_key_start_exactly_once(store: StateStore) -> None:
    ledger = Ledger(store, "rt-1")
    for round_number in range(3):
        outcomes = race(ledger, f"key-race-{round_number}", 20)
        assert len(outcomes) == 20
        started = [outcome for outcome in outcomes if isinstance(outcome, Started)]
        assert len(started) == 1
        assert {outcome.op_id for outcome in outcomes} == {started[0].op_id}
    replays = [ledger.begin("exec", f"key-race-{n}", REQUEST) for n in range(3)]
    assert all(isinstance(replay, Replay) and replay.state == "completed" for replay in replays)


KEYS = [f"key-proc-{index:03}" for index in range(40)]


def begin_every_key(path: str, instance: str, start: Any, results: Any) -> None:
    """One process: 5 threads each begin every key; report which keys this process started."""
    store = StateStore.open(Path(path))
    ledger = Ledger(store, instance)
    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def work() -> None:
        for key in KEYS:
            outcome = ledger.begin("exec", key, REQUEST)
            if isinstance(outcome, Started):
                with lock:
                    counts[key] += 1

    start.wait(30)
    workers = [threading.Thread(target=work) for _ in range(5)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    store.close()
    results.put(dict(counts))


def test_two_processes_with_the_same_keys_start_each_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    StateStore.open(path).close()
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(2)
    results = context.Queue()
    workers = [
        context.Process(target=begin_every_key, args=(str(path), f"rt-{n}", start, results)) for n in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [worker.exitcode for worker in workers] == [0, 0]
    total: Counter[str] = Counter()
    for _ in workers:
        total.update(results.get(timeout=5))
    assert total == Counter(dict.fromkeys(KEYS, 1))
    store = StateStore.open(path)
    try:
        count = store.connection().execute("SELECT COUNT(*) FROM operations").fetchone()[0]
        assert count == len(KEYS)
    finally:
        store.close()
