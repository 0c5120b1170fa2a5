"""herdr_fs_list: every entry of a 5,000-entry tree, in calls of at most 2,000, against `find`.

A client that wants a whole tree from herdr_fs_list has a cap of 2,000 entries a call (the frozen
catalog's `max_entries` maximum) and no cursor. This benchmark lists generated trees of exactly
5,000 entries through a real runtime (`herdr-mcp serve`, Streamable HTTP on loopback, driven by
`benchmarks/raw_client.py`) with the strategies a client can follow, checks that the entries it
got are exactly the tree (the same set of path, type and size as `find` printed, none twice), and
times the whole of it against `find` run directly on the same tree in the same run:

    find DIR -mindepth 1 -iname .git -prune -printf '%P\\t%y\\t%s\\n' -o -printf '%P\\t%y\\t%s\\n'

which prints what the tool answers (relative path, type, size; `.git` listed but not descended,
in any letter case, as the tool does). find does not sort (the tool answers depth-first in name
order) and filters no secrets (the trees hold no secret-looking names), so the floor is if
anything low.

Strategies (a client can follow both from what the tool answers and what the file-search skill
and docs/runtime.md say):

- `next_calls`: one recursive call with max_entries 2000; while answers carry `next_calls` (the
  arguments that list the rest, each entry once), call those, the ones of an answer before the
  ones left over from earlier answers. Target: 3 calls for 5,000 entries, total <= 2x find.
- `subtrees`: what a client had to do before `next_calls`: a recursive call; when it is
  truncated, a flat listing of that directory, then the same for each subdirectory. Printed for
  comparison (it is how "11 calls" came about); no target.

Shapes (5,000 entries each, generated once; file sizes vary):
- `flat`: 50 directories of 99 files each (`dNN/fNNN.txt`).
- `deep`: 5 directories, each of 5, each of 5, each of 5 (780 directories, depth 4), the 4,220
  files spread over the 625 leaf directories (`pN/mN/sN/lN/file_N.py`): 5 top-level subtrees of
  about 1,000 entries, so no cut near 2,000 leaves a rest one glob names.
- `lopsided`: 2 directories of 2,499 entries each (49 subdirectories of 50 files): no top-level
  boundary falls within the first 2,000 entries, the hardest of the three for `next_calls`.

Each round times every strategy and find `--repeat` times, interleaved, and takes medians; the
figure is min/median/max over `--rounds` rounds, with the load average. Beside the wall time, the
CPU a listing costs (user + system, from /proc for the runtime process and getrusage for this
process and for find) is printed: on a shared 2-core machine the wall time of a call that hops
client -> event loop -> worker thread -> event loop -> client grows with the load much more
than find's does, and the CPU figure says how much of the ratio is work. `--record` writes
benchmarks/results/list_bench.json. Run under the shared lock:
`flock /tmp/herdr-bench.lock python benchmarks/list_bench.py --record`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.runtime_harness import make_repo, running_runtime

from benchmarks.raw_client import RawHttp, Spread, load_text
from benchmarks.results import Row, record
from herdr_mcp.sim import SimConfig, SimulatorThread

ENTRIES = 5000
CAP = 2000  # the frozen catalog's max_entries maximum
TARGET_RATIO = 2.0
TARGET_CALLS = 3  # ceil(5000 / 2000)
FIND_FORMAT = "%P\\t%y\\t%s\\n"
_FIND_TYPES = {"f": "file", "d": "dir", "l": "symlink"}

Entry = tuple[str, str, int | None]


# --- Trees ---------------------------------------------------------------------------------------


def _write(path: Path, index: int) -> None:
    path.write_bytes(b"x" * (index % 97))


def flat(top: Path) -> None:
    index = 0
    for d in range(50):
        directory = top / f"d{d:02d}"
        directory.mkdir(parents=True)
        for f in range(99):
            _write(directory / f"f{f:03d}.txt", index)
            index += 1


def deep(top: Path) -> None:
    leaves: list[Path] = []
    for p in range(5):
        for m in range(5):
            for s in range(5):
                for leaf in range(5):
                    directory = top / f"p{p}" / f"m{m}" / f"s{s}" / f"l{leaf}"
                    directory.mkdir(parents=True)
                    leaves.append(directory)
    files = ENTRIES - 780
    for index in range(files):
        _write(leaves[index % len(leaves)] / f"file_{index}.py", index)


def lopsided(top: Path) -> None:
    index = 0
    for half in ("a", "b"):
        for d in range(49):
            directory = top / half / f"sub{d:02d}"
            directory.mkdir(parents=True)
            for f in range(50):
                _write(directory / f"f{f:02d}", index)
                index += 1


SHAPES: dict[str, Callable[[Path], None]] = {"flat": flat, "deep": deep, "lopsided": lopsided}


# --- The floor and the check --------------------------------------------------------------------


def find_argv(directory: Path) -> list[str]:
    return [
        "find", str(directory), "-mindepth", "1",
        "-iname", ".git", "-prune", "-printf", FIND_FORMAT, "-o", "-printf", FIND_FORMAT,
    ]  # fmt: skip


def run_find(directory: Path) -> bytes:
    return subprocess.run(find_argv(directory), capture_output=True, check=True).stdout


def find_entries(output: bytes) -> list[Entry]:
    entries: list[Entry] = []
    for line in output.decode().splitlines():
        path, kind, size = line.split("\t")
        shown = _FIND_TYPES.get(kind, "other")
        entries.append((path, shown, int(size) if shown == "file" else None))
    return entries


def check(got: list[Entry], expected: list[Entry], what: str) -> None:
    """`got` is exactly `expected` as a set, and holds nothing twice."""
    if len(set(got)) != len(got):
        twice = sorted(entry for entry, count in collections.Counter(got).items() if count > 1)
        raise RuntimeError(f"{what}: {len(twice)} entries listed twice, e.g. {twice[:3]}")
    if set(got) != set(expected):
        missing = sorted(set(expected) - set(got))
        extra = sorted(set(got) - set(expected))
        raise RuntimeError(
            f"{what}: {len(missing)} missing (e.g. {missing[:3]}), {len(extra)} extra ({extra[:3]})"
        )


# --- Client strategies ---------------------------------------------------------------------------


@dataclass
class Listing:
    entries: list[Entry]
    calls: int


def _as_entries(answer: dict[str, Any], prefix: str = "") -> list[Entry]:
    return [(prefix + e["path"], e["type"], e["size"]) for e in answer["entries"]]


async def _list(client: RawHttp, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool("herdr_fs_list", arguments)
    return dict(result["structuredContent"])


async def follow_next_calls(client: RawHttp, directory: str) -> Listing:
    """The documented strategy: one recursive call, then the `next_calls` of each answer."""
    pending: list[dict[str, Any]] = [{"path": directory, "recursive": True, "max_entries": CAP}]
    entries: list[Entry] = []
    calls = 0
    while pending:
        answer = await _list(client, pending.pop(0))
        calls += 1
        entries += _as_entries(answer)
        more = answer.get("next_calls") or []
        if answer["truncated"] and not more:
            raise RuntimeError(f"call {calls} was truncated and said no way on")
        pending[0:0] = more
    return Listing(entries, calls)


async def by_subtrees(client: RawHttp, directory: str) -> Listing:
    """Before `next_calls`: a truncated recursive listing is redone one subdirectory at a time."""
    entries: list[Entry] = []
    calls = 0

    async def subtree(relative: str) -> None:
        nonlocal calls
        base = f"{directory}/{relative}" if relative else directory
        prefix = f"{relative}/" if relative else ""
        answer = await _list(client, {"path": base, "recursive": True, "max_entries": CAP})
        calls += 1
        if not answer["truncated"]:
            entries.extend(_as_entries(answer, prefix))
            return
        children = await _list(client, {"path": base, "max_entries": CAP})
        calls += 1
        if children["truncated"]:
            raise RuntimeError(f"{base} has more than {CAP} entries of its own")
        for child in children["entries"]:
            entries.append((prefix + child["path"], child["type"], child["size"]))
            if child["type"] == "dir" and child["path"].casefold() != ".git":
                await subtree(prefix + child["path"])

    await subtree("")
    return Listing(entries, calls)


STRATEGIES: dict[str, Callable[[RawHttp, str], Awaitable[Listing]]] = {
    "next_calls": follow_next_calls,
    "subtrees": by_subtrees,
}


# --- Measurement ---------------------------------------------------------------------------------


@dataclass
class Figures:
    calls: dict[str, int]
    #: per strategy: ratio to find per round; find's and the strategy's median ms per round.
    ratios: dict[str, list[float]]
    ms: dict[str, list[float]]
    find_ms: list[float]
    #: CPU (user + system) per listing, ms, over all rounds: the runtime process, this process
    #: (the client: requests, reading and parsing answers) and find (its own CPU).
    cpu: dict[str, float] = field(default_factory=dict)


def _process_cpu_ms(pid: int) -> float:
    """User + system CPU of process `pid` so far (its threads included), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def _own_cpu_ms(who: int) -> float:
    usage = resource.getrusage(who)
    return (usage.ru_utime + usage.ru_stime) * 1000


async def measure_shape(
    client: RawHttp, server_pid: int, directory: Path, strategies: list[str], rounds: int, repeat: int
) -> Figures:
    expected = find_entries(run_find(directory))
    if len(expected) != ENTRIES:
        raise RuntimeError(f"{directory} holds {len(expected)} entries, not {ENTRIES}")
    figures = Figures({}, {name: [] for name in strategies}, {name: [] for name in strategies}, [])
    for name in strategies:  # warm-up, and the check of what each strategy returns
        listing = await STRATEGIES[name](client, str(directory))
        check(listing.entries, expected, f"{directory.name}/{name}")
        figures.calls[name] = listing.calls

    cpu = dict.fromkeys(
        ["find", *(f"{name} {side}" for name in strategies for side in ("runtime", "client"))], 0.0
    )
    for _ in range(rounds):
        samples: dict[str, list[float]] = {name: [] for name in ["find", *strategies]}
        for _ in range(repeat):
            before = _own_cpu_ms(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            run_find(directory)
            samples["find"].append((time.perf_counter() - start) * 1000)
            cpu["find"] += _own_cpu_ms(resource.RUSAGE_CHILDREN) - before
            for name in strategies:
                server, own = _process_cpu_ms(server_pid), _own_cpu_ms(resource.RUSAGE_SELF)
                start = time.perf_counter()
                listing = await STRATEGIES[name](client, str(directory))
                ms = (time.perf_counter() - start) * 1000
                cpu[f"{name} runtime"] += _process_cpu_ms(server_pid) - server
                cpu[f"{name} client"] += _own_cpu_ms(resource.RUSAGE_SELF) - own
                if listing.calls != figures.calls[name] or len(listing.entries) != ENTRIES:
                    raise RuntimeError(
                        f"{directory.name}/{name}: {listing.calls} calls, {len(listing.entries)}"
                    )
                samples[name].append(ms)
        find_median = statistics.median(samples["find"])
        figures.find_ms.append(find_median)
        for name in strategies:
            figures.ms[name].append(statistics.median(samples[name]))
            figures.ratios[name].append(statistics.median(samples[name]) / find_median)
    figures.cpu = {key: total / (rounds * repeat) for key, total in cpu.items()}
    return figures


def rows_of(results: dict[str, Figures]) -> list[Row]:
    rows = []
    for shape, figures in results.items():
        ratio = Spread(tuple(figures.ratios["next_calls"]))
        calls = figures.calls["next_calls"]
        rows.append(
            Row(
                figure=f"herdr_fs_list, all of a {ENTRIES:,}-entry tree ({shape}), raw HTTP client",
                measured=f"{calls} calls, {Spread(tuple(figures.ms['next_calls'])).median:.1f} ms in total",
                floor=f"find -printf, {Spread(tuple(figures.find_ms)).median:.1f} ms",
                ratio=f"{ratio.min:.2f}/{ratio.median:.2f}/{ratio.max:.2f}",
                target=f"<= {TARGET_RATIO:g}x, {TARGET_CALLS} calls",
                met=ratio.median <= TARGET_RATIO and calls <= TARGET_CALLS,
            )
        )
    return rows


async def run(
    url: str, token: str, server_pid: int, trees: Path, shapes: list[str], args: argparse.Namespace
) -> dict[str, Figures]:
    client = await RawHttp(url, token).connect()
    try:
        results = {}
        for shape in shapes:
            results[shape] = await measure_shape(
                client, server_pid, trees / shape, args.strategies, args.rounds, args.repeat
            )
        return results
    finally:
        await client.close()


def report(results: dict[str, Figures]) -> None:
    print(f"\n== herdr_fs_list: all {ENTRIES:,} entries, cap {CAP} a call, against find ({load_text()})")
    for shape, figures in results.items():
        print(f"-- {shape}: find median {Spread(tuple(figures.find_ms)).text(1, ' ms')}")
        for name in figures.calls:
            total = Spread(tuple(figures.ms[name])).text(1, " ms")
            ratio = Spread(tuple(figures.ratios[name])).text(2)
            print(f"   {name:<11} {figures.calls[name]:>3} calls  total {total}  ratio {ratio}")
            runtime_cpu, client_cpu = figures.cpu[f"{name} runtime"], figures.cpu[f"{name} client"]
            find_cpu = figures.cpu["find"]
            print(
                f"   {'':<11} CPU a listing: runtime {runtime_cpu:.1f} ms + client {client_cpu:.1f} ms"
                f" = {(runtime_cpu + client_cpu) / find_cpu:.2f}x find's {find_cpu:.1f} ms"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=7, help="timings per round of each (median taken)")
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES))
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/list_bench.json")
    args = parser.parse_args()
    if "next_calls" not in args.strategies and args.record:
        parser.error("--record needs the next_calls strategy")
    tmp = Path(tempfile.mkdtemp(prefix="hm-list-bench-", dir="/tmp"))
    try:
        repo = make_repo(tmp / "repo", {"README.md": b"list bench\n"})
        for shape in args.shapes:
            SHAPES[shape](repo / shape)
        print(load_text())
        with (
            SimulatorThread(SimConfig.for_roots([repo]), tmp / "herdr.sock"),
            running_runtime(tmp / "herdr.sock", tmp / "config") as runtime,
        ):
            results = asyncio.run(
                run(runtime.url, runtime.token, runtime.process.pid, repo, args.shapes, args)
            )
        report(results)
        if args.record:
            path = record(
                "list_bench",
                rows_of(results),
                command="python benchmarks/list_bench.py --record",
                details={
                    shape: {
                        "calls": figures.calls,
                        "find_ms": Spread(tuple(figures.find_ms)).to_json(),
                        "total_ms": {k: Spread(tuple(v)).to_json() for k, v in figures.ms.items()},
                        "ratio": {k: Spread(tuple(v)).to_json() for k, v in figures.ratios.items()},
                        "cpu_ms_per_listing": {k: round(v, 2) for k, v in figures.cpu.items()},
                    }
                    for shape, figures in results.items()
                }
                | {"find": " ".join(find_argv(Path("DIR"))), "load": load_text()},
            )
            print(f"recorded {path}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
