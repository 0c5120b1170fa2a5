"""Continuity Journal figures over a journal of 100,000 turns (a real state.db in a temp dir).

1. Append throughput of herdr_mcp.continuity.turn.append (one transaction per turn, as the
   browser delivers finalized turns), and of replays of already-journaled turns.
2. herdr_mcp.continuity.search latency (p50/p95/max) over the whole journal: one- to
   three-word queries drawn from the same Zipf-distributed vocabulary as the turns (common words
   match tens of thousands of turns), some of them Chinese; then scoped to one chain. The chains
   take turns while journaling, so each chain's turns are spread over the whole journal.
3. herdr_mcp.continuity.resume and herdr_mcp.continuity.resolve (text) latency.

Run from the repository root with the project installed: `python benchmarks/continuity_bench.py`
(`--turns`, `--chains`, `--queries` change the sizes; `--record` writes
benchmarks/results/continuity_bench.json for the README's table). Prints a table; exits 0.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.raw_client import Spread, load_text
from benchmarks.results import Row, record
from herdr_mcp.runtime.tools.continuity_methods import CONTINUITY_METHODS
from herdr_mcp.state.store import StateStore

Method = Callable[[StateStore, dict[str, Any]], dict[str, Any]]
METHODS: dict[str, Method] = {spec.name: spec.run for spec in CONTINUITY_METHODS}
CJK_WORDS = ["登录", "测试", "继续", "部署", "数据库", "接口", "修复", "性能", "缓存", "文档"]


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = {"".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(size * 2)}
    return sorted(words)[:size]


def _zipf_weights(size: int) -> list[float]:
    return [1.0 / (rank + 1) for rank in range(size)]


def _text(rng: random.Random, words: list[str], weights: list[float]) -> str:
    chosen = rng.choices(words, weights=weights, k=rng.randint(15, 60))
    if rng.random() < 0.2:
        chosen.append("".join(rng.sample(CJK_WORDS, 3)))
    return " ".join(chosen)


def _percentiles(samples: list[float]) -> tuple[float, float, float]:
    cuts = statistics.quantiles(samples, n=100)
    return cuts[49] * 1000, cuts[94] * 1000, max(samples) * 1000


def _timed(method: Method, store: StateStore, calls: list[dict[str, Any]]) -> list[float]:
    """Seconds each call of `method` took, one sample per params object."""
    samples = []
    for params in calls:
        started = time.perf_counter()
        method(store, params)
        samples.append(time.perf_counter() - started)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=100_000)
    parser.add_argument("--chains", type=int, default=200)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the whole-journal queries")
    parser.add_argument(
        "--record", action="store_true", help="write benchmarks/results/continuity_bench.json"
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    words = _vocabulary(rng, 5_000)
    weights = _zipf_weights(len(words))

    with tempfile.TemporaryDirectory(prefix="continuity-bench-") as temp:
        store = StateStore.open(Path(temp) / "state.db")
        append = METHODS["herdr_mcp.continuity.turn.append"]
        per_chain = args.turns // args.chains
        chains: list[str] = []
        started = time.perf_counter()
        # Conversations take turns, so every chain's rows are spread over the whole index.
        for turn in range(per_chain):
            for chain in range(args.chains):
                answer = append(
                    store,
                    {
                        "conversation_url": f"https://chat.z.ai/c/bench-{chain}",
                        "workspace_id": f"w{chain % 20 + 1}",
                        "turn_key": f"msg-{turn}",
                        "role": "user" if turn % 2 == 0 else "assistant",
                        "text": _text(rng, words, weights),
                    },
                )
                if turn == 0:
                    chains.append(answer["continuity_id"])
            if (turn + 1) % max(1, per_chain // 10) == 0:
                print(f"  journaled {(turn + 1) * args.chains:>7} turns", flush=True)
        append_seconds = time.perf_counter() - started
        total = per_chain * args.chains

        first_text = (
            store.connection()
            .execute("SELECT body FROM continuity_turns WHERE continuity_id = ? AND seq = 1", (chains[0],))
            .fetchone()[0]
        )
        replay_params = {
            "conversation_url": "https://chat.z.ai/c/bench-0",
            "turn_key": "msg-0",
            "role": "user",
            "text": first_text,
        }
        replay_samples = _timed(append, store, [replay_params] * 2_000)

        search = METHODS["herdr_mcp.continuity.search"]
        queries = []
        for _ in range(args.queries):
            if rng.random() < 0.1:
                queries.append(rng.choice(CJK_WORDS))
            else:
                queries.append(" ".join(rng.choices(words, weights=weights, k=rng.randint(1, 3))))
        search_samples: list[float] = []
        round_p50: list[float] = []
        round_p95: list[float] = []
        hits = 0
        for _ in range(max(1, args.repeat)):
            this_round = []
            for query in queries:
                began = time.perf_counter()
                result = search(store, {"query": query})
                this_round.append(time.perf_counter() - began)
                hits += len(result["hits"])
            p50, p95, _worst = _percentiles(this_round)
            round_p50.append(p50)
            round_p95.append(p95)
            search_samples = this_round
        common = _timed(search, store, [{"query": words[0]}] * 50)
        scoped = [{"query": rng.choice(queries), "continuity_id": rng.choice(chains)} for _ in queries]
        scoped_samples = _timed(search, store, scoped)
        resumes = [{"continuity_id": rng.choice(chains)} for _ in range(200)]
        resume_samples = _timed(METHODS["herdr_mcp.continuity.resume"], store, resumes)
        resolves = [{"text": query} for query in queries[:100]]
        resolve_samples = _timed(METHODS["herdr_mcp.continuity.resolve"], store, resolves)
        size_mib = sum(path.stat().st_size for path in Path(temp).iterdir()) / 2**20
        store.close()

    print(f"\n== Continuity Journal: {total:,} turns in {args.chains} chains ({size_mib:.0f} MiB on disk)")
    print(f"append (one transaction per turn)   {total / append_seconds:>9,.0f} turns/s")
    print(f"append replay (idempotent, no write) {len(replay_samples) / sum(replay_samples):>8,.0f} turns/s")
    print(f"\n{'latency (ms)':<34}{'p50':>8}{'p95':>8}{'max':>8}")
    for name, samples in (
        (f"search, whole journal ({len(queries)} q)", search_samples),
        (f"search '{words[0]}' (most common word)", common),
        ("search, scoped to one chain", scoped_samples),
        ("resume (20 turns)", resume_samples),
        ("resolve by text (candidates)", resolve_samples),
    ):
        p50, p95, worst = _percentiles(samples)
        print(f"{name:<34}{p50:>8.2f}{p95:>8.2f}{worst:>8.2f}")
    rounds = max(1, args.repeat)
    print(f"\nmean hits per whole-journal search: {hits / len(queries) / rounds:.1f} (bounded at 10)")
    p50s, p95s = Spread(tuple(round_p50)), Spread(tuple(round_p95))
    print(f"whole-journal search over {rounds} rounds: p50 {p50s.text(2, ' ms')}, p95 {p95s.text(2, ' ms')}")
    print(load_text())
    if args.record:
        path = record(
            "continuity_bench",
            [
                Row(
                    f"continuity.search over {total:,} journal turns ({len(queries)} queries of 1-3 words, "
                    "Zipf vocabulary, some Chinese)",
                    f"p95 {p95s.median:.1f} ms, p50 {p50s.median:.1f} ms",
                    "",
                    f"p95 {p95s.min:.1f}/{p95s.median:.1f}/{p95s.max:.1f} ms",
                )
            ],
            command="python benchmarks/continuity_bench.py --record",
            details={"search_p50_ms": p50s.to_json(), "search_p95_ms": p95s.to_json()},
        )
        print(f"recorded {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
