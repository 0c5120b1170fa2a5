"""Start-up and stdio figures, every side driven by the one raw client (`benchmarks/raw_client.py`).

1. Cold start over stdio: from before the spawn to the tools/list answer (spawn, initialize,
   notifications/initialized, tools/list; `RawStdio.launch_to_tools_list`) of `herdr-mcp stdio`,
   the reference filesystem server from npm (`@modelcontextprotocol/server-filesystem`, Node) and
   the `mcp` SDK's own low-level server over its stdio transport (`benchmarks/stdio_echo_server.py`).
   A round launches each `--launches` times, interleaved (herdr, reference, echo, herdr, ...), and
   takes each one's median. Target: herdr-mcp stdio <= 1.1 x the reference server. Next to it,
   from the same launches, the first tools/call's answer (herdr_fs_read of 4 KiB, the reference's
   read_text_file of it, the echo's echo) sent right after the tools/list answer: `herdr-mcp
   stdio` answers the handshake while a worker thread composes the runtime, and a call waits for
   that (cli/stdio.py), so this figure shows what the handshake figure leaves out.
2. tools/call over stdio: herdr_fs_read of a 4 KiB file next to the reference server's
   read_text_file of the same file (and the SDK echo of 4 KiB), calls interleaved, p50 per round.
   Target: <= 1.2 x the reference server.
3. `herdr-mcp serve`'s start: from before the spawn to the first tools/list answered over
   Streamable HTTP (`RawHttp`: connect, initialize, notifications/initialized, tools/list), next to
   the bare SDK echo server (`benchmarks/echo_server.py`: the SDK's Streamable HTTP app under
   uvicorn) started the same way, launches interleaved. Neither says when it listens, so both are
   found the same way: a connect is tried every `CONNECT_RETRY_S` until one is accepted (refused
   at once on loopback while nothing listens). Target: <= 1.2 x the echo server.

Herdr is the simulator, run as its own process (`herdr-mcp sim`) for the whole run, and
`herdr-mcp` finds it on `--herdr-socket` (the default Herdr selection, `auto`, pings it first as
it would a real Herdr). The Python servers run with their bytecode cached, as an installed package
has it (pip compiles it): `PYTHONPYCACHEPREFIX` in the run's temporary directory, filled by an
unmeasured first launch of each, and `PYTHONDONTWRITEBYTECODE` dropped (set, every launch
compiled herdr-mcp's sources anew). Every figure is `--rounds` rounds, printed min/median/max
with the load average; `--record` writes benchmarks/results/stdio_bench.json.

Run from the repository root: `python benchmarks/stdio_bench.py [--record]` (npm installs the
reference server into .tools/ on first use). Exits 0 (figures, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.npm_tools import FILESYSTEM_SERVER, npm_program
from tests.support.runtime_harness import make_repo

from benchmarks.raw_client import RawError, RawHttp, RawStdio, Spread, interleaved, load_text
from benchmarks.results import Row, record
from herdr_mcp.layout import Layout
from herdr_mcp.tokens import load_or_create_token

BENCHMARKS = Path(__file__).resolve().parent
HERDR_MCP = Path(sys.executable).with_name("herdr-mcp")
COLD_TARGET = 1.1
CALL_TARGET = 1.2
SERVE_TARGET = 1.2
CONTENT = b"0123456789abcde\n" * 256  # 4 KiB
#: How often a start figure tries to connect until the server listens (refused at once meanwhile).
CONNECT_RETRY_S = 0.001
#: A server that has not answered its first tools/list by then failed to start.
START_DEADLINE_S = 60.0

HERDR = "herdr-mcp stdio"
REFERENCE = "reference (npm)"
ECHO = "SDK stdio echo"
SERVE = "herdr-mcp serve"
HTTP_ECHO = "SDK HTTP echo"


@dataclass(frozen=True)
class Setup:
    repo: Path
    config_dir: Path
    herdr_socket: Path
    reference: Path
    #: The children's environment (bytecode cached: module docstring).
    env: dict[str, str]

    def stdio_argv(self) -> dict[str, list[str]]:
        return {
            HERDR: [
                str(HERDR_MCP),
                "stdio",
                "--herdr-socket",
                str(self.herdr_socket),
                "--config-dir",
                str(self.config_dir),
            ],
            REFERENCE: [str(self.reference), str(self.repo)],
            ECHO: [sys.executable, str(BENCHMARKS / "stdio_echo_server.py")],
        }

    def call(self, name: str) -> tuple[str, dict[str, Any]]:
        path = str(self.repo / "file4k.txt")
        calls: dict[str, tuple[str, dict[str, Any]]] = {
            HERDR: ("herdr_fs_read", {"path": path, "max_bytes": 8192}),
            REFERENCE: ("read_text_file", {"path": path}),
            ECHO: ("echo", {"text": CONTENT.decode()}),
        }
        return calls[name]


# -- 1. cold start over stdio ---------------------------------------------------------------------


async def _launch(setup: Setup, name: str) -> tuple[float, float]:
    """ms from before the spawn to the tools/list answer, and to the first call's answer."""
    client = RawStdio(setup.stdio_argv()[name], env=setup.env, cwd=str(setup.repo))
    try:
        listed = await asyncio.wait_for(client.launch_to_tools_list(), START_DEADLINE_S)
        await asyncio.wait_for(client.call_tool(*setup.call(name)), START_DEADLINE_S)
        return listed, (time.perf_counter() - client.started_at) * 1000
    finally:
        await client.close()


async def cold_start_round(setup: Setup, launches: int) -> tuple[dict[str, float], dict[str, float]]:
    """Each server launched `launches` times, interleaved; each one's median (ms) to the
    tools/list answer, and to the first call's."""
    names = list(setup.stdio_argv())
    listed: dict[str, list[float]] = {name: [] for name in names}
    called: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(launches):
        for name in names:
            to_list, to_call = await _launch(setup, name)
            listed[name].append(to_list)
            called[name].append(to_call)
    return (
        {name: statistics.median(values) for name, values in listed.items()},
        {name: statistics.median(values) for name, values in called.items()},
    )


# -- 2. tools/call over stdio ---------------------------------------------------------------------


async def call_round(setup: Setup, calls: int, warmup: int) -> dict[str, float]:
    """p50 of each server's call (ms), the servers' calls interleaved."""
    argv = setup.stdio_argv()
    clients = {name: RawStdio(command, env=setup.env, cwd=str(setup.repo)) for name, command in argv.items()}
    try:
        for client in clients.values():
            await client.start()
            await client.initialize()

        def once(name: str) -> Callable[[], Awaitable[Any]]:
            tool, arguments = setup.call(name)
            return lambda: clients[name].call_tool(tool, arguments)

        names = list(clients)
        samples = await interleaved([once(name) for name in names], calls, warmup)
    finally:
        for client in clients.values():
            await client.close()
    return {name: statistics.median(bucket) for name, bucket in zip(names, samples, strict=True)}


# -- 3. serve's start -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _first_tools_list(url: str, token: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_DEADLINE_S
    while True:
        client = RawHttp(url, token)
        try:
            await client.connect(mcp=False)
        except OSError:
            if process.poll() is not None:
                raise RawError(f"{process.args!r} exited {process.returncode} before listening") from None
            if time.monotonic() > deadline:
                raise RawError(f"{process.args!r} did not listen within {START_DEADLINE_S} s") from None
            await asyncio.sleep(CONNECT_RETRY_S)
            continue
        try:
            await client.connect()  # initialize on the same kept-alive connection
            tools = await client.rpc("tools/list")
        finally:
            await client.close()
        if not tools.get("tools"):
            raise RawError(f"{url} listed no tools")
        return


async def _http_start(setup: Setup, argv: Sequence[str], url: str, token: str) -> float:
    started = time.perf_counter()
    process = subprocess.Popen(
        list(argv),
        cwd=setup.repo,
        env=setup.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await _first_tools_list(url, token, process)
        return (time.perf_counter() - started) * 1000
    finally:
        process.terminate()
        try:
            await asyncio.to_thread(process.wait, 20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def serve_start_round(setup: Setup, launches: int) -> dict[str, float]:
    token = load_or_create_token(Layout(setup.config_dir).token_file)
    samples: dict[str, list[float]] = {SERVE: [], HTTP_ECHO: []}
    for _ in range(launches):
        port = _free_port()
        samples[SERVE].append(
            await _http_start(
                setup,
                [
                    str(HERDR_MCP),
                    "serve",
                    "--port",
                    str(port),
                    "--herdr-socket",
                    str(setup.herdr_socket),
                    "--config-dir",
                    str(setup.config_dir),
                ],
                f"http://127.0.0.1:{port}/mcp",
                token,
            )
        )
        port = _free_port()
        samples[HTTP_ECHO].append(
            await _http_start(
                setup,
                [sys.executable, str(BENCHMARKS / "echo_server.py"), str(port), token],
                f"http://127.0.0.1:{port}/mcp",
                token,
            )
        )
    return {name: statistics.median(values) for name, values in samples.items()}


# -- the run --------------------------------------------------------------------------------------


@contextlib.contextmanager
def simulator(repo: Path, directory: Path, env: dict[str, str]) -> Iterator[Path]:
    """`herdr-mcp sim` in its own process; its socket."""
    sock = directory / "herdr.sock"
    process = subprocess.Popen(
        [str(HERDR_MCP), "sim", "--socket", str(sock), "--root", str(repo)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        if not process.stdout.readline():  # its first line names the socket once it listens
            raise RawError(f"herdr-mcp sim exited {process.wait()}")
        yield sock
    finally:
        process.terminate()
        process.wait(20)


def _ratios(rounds: list[dict[str, float]], numerator: str, denominator: str) -> Spread:
    return Spread(tuple(r[numerator] / r[denominator] for r in rounds))


def _ms(rounds: list[dict[str, float]], name: str) -> Spread:
    return Spread(tuple(r[name] for r in rounds))


async def measure(args: argparse.Namespace, setup: Setup) -> tuple[list[Row], dict[str, Any]]:
    print(load_text())
    # One unmeasured launch each (and one serve start) writes the bytecode caches, warms the page
    # cache and creates the state db.
    await cold_start_round(setup, 1)
    await serve_start_round(setup, 1)
    cold: list[dict[str, float]] = []
    first_call: list[dict[str, float]] = []
    calls: list[dict[str, float]] = []
    serve: list[dict[str, float]] = []
    for index in range(args.rounds):
        listed, called = await cold_start_round(setup, args.launches)
        cold.append(listed)
        first_call.append(called)
        calls.append(await call_round(setup, args.calls, args.warmup))
        serve.append(await serve_start_round(setup, args.launches))
        starts = ", ".join(f"{name} {value:.1f}" for name, value in {**cold[-1], **serve[-1]}.items())
        per_call = ", ".join(f"{name} {value:.3f}" for name, value in calls[-1].items())
        print(f"round {index + 1}: start medians (ms) {starts}; call p50 (ms) {per_call}; {load_text()}")

    cold_ratio = _ratios(cold, HERDR, REFERENCE)
    first_ratio = _ratios(first_call, HERDR, REFERENCE)
    call_ratio = _ratios(calls, HERDR, REFERENCE)
    serve_ratio = _ratios(serve, SERVE, HTTP_ECHO)
    print(f"\n== cold start, launch -> tools/list answer (median of {args.launches} launches a round, ms)")
    for name in (HERDR, REFERENCE, ECHO):
        print(f"{name:<18}{_ms(cold, name).text(1, ' ms')}")
    print(f"herdr-mcp stdio / reference: {cold_ratio.text()} (target <= {COLD_TARGET})")
    print(f"herdr-mcp stdio / SDK echo:  {_ratios(cold, HERDR, ECHO).text()}")
    print("\n== the same launches, launch -> the first tools/call answered (sent after tools/list, ms)")
    for name in (HERDR, REFERENCE, ECHO):
        print(f"{name:<18}{setup.call(name)[0]:<16}{_ms(first_call, name).text(1, ' ms')}")
    print(f"herdr-mcp stdio / reference: {first_ratio.text()}")
    print(f"\n== tools/call over stdio, 4 KiB (p50 of {args.calls} calls a round, {args.warmup} warm-up, ms)")
    for name in (HERDR, REFERENCE, ECHO):
        print(f"{name:<18}{setup.call(name)[0]:<16}{_ms(calls, name).text(3, ' ms')}")
    print(f"herdr_fs_read / read_text_file: {call_ratio.text()} (target <= {CALL_TARGET})")
    print(f"herdr_fs_read / SDK echo:       {_ratios(calls, HERDR, ECHO).text()}")
    print(f"\n== serve's start, launch -> first tools/list over HTTP (median of {args.launches}, ms)")
    for name in (SERVE, HTTP_ECHO):
        print(f"{name:<18}{_ms(serve, name).text(1, ' ms')}")
    print(f"herdr-mcp serve / SDK HTTP echo: {serve_ratio.text()} (target <= {SERVE_TARGET})")
    print(load_text())

    def median_ms(rounds: list[dict[str, float]], name: str, digits: int) -> str:
        return f"{_ms(rounds, name).median:.{digits}f} ms"

    def spread(ratio: Spread) -> str:
        return ratio.text().split(" ")[0]

    rows = [
        Row(
            figure="herdr-mcp stdio cold start, launch to tools/list (median of "
            f"{args.launches} launches a round)",
            measured=median_ms(cold, HERDR, 0),
            floor=f"Node reference filesystem server {median_ms(cold, REFERENCE, 0)}",
            ratio=spread(cold_ratio),
            target=f"<= {COLD_TARGET}",
            met=cold_ratio.median <= COLD_TARGET,
        ),
        Row(
            figure="herdr-mcp stdio, launch to the first tools/call answered (same launches)",
            measured=median_ms(first_call, HERDR, 0),
            floor=f"Node reference filesystem server {median_ms(first_call, REFERENCE, 0)}",
            ratio=spread(first_ratio),
        ),
        Row(
            figure="herdr_fs_read 4 KiB over stdio, p50 (raw client)",
            measured=f"p50 {median_ms(calls, HERDR, 3)}",
            floor=f"Node reference read_text_file p50 {median_ms(calls, REFERENCE, 3)}",
            ratio=spread(call_ratio),
            target=f"<= {CALL_TARGET}",
            met=call_ratio.median <= CALL_TARGET,
        ),
        Row(
            figure="herdr-mcp serve start, launch to the first tools/list over HTTP",
            measured=median_ms(serve, SERVE, 0),
            floor=f"SDK echo server start {median_ms(serve, HTTP_ECHO, 0)}",
            ratio=spread(serve_ratio),
            target=f"<= {SERVE_TARGET}",
            met=serve_ratio.median <= SERVE_TARGET,
        ),
    ]
    details = {
        "cold_start_ms": {name: _ms(cold, name).to_json() for name in (HERDR, REFERENCE, ECHO)},
        "first_call_ms": {name: _ms(first_call, name).to_json() for name in (HERDR, REFERENCE, ECHO)},
        "call_p50_ms": {name: _ms(calls, name).to_json() for name in (HERDR, REFERENCE, ECHO)},
        "serve_start_ms": {name: _ms(serve, name).to_json() for name in (SERVE, HTTP_ECHO)},
        "ratios": {
            "cold_start_vs_reference": cold_ratio.to_json(),
            "first_call_vs_reference": first_ratio.to_json(),
            "call_vs_reference": call_ratio.to_json(),
            "serve_start_vs_echo": serve_ratio.to_json(),
        },
        "launches_per_round": args.launches,
        "calls_per_round": args.calls,
        "reference": f"{FILESYSTEM_SERVER[0]}@{FILESYSTEM_SERVER[1]}, node {_node_version()}",
    }
    return rows, details


def _node_version() -> str:
    return subprocess.run(["node", "--version"], capture_output=True, text=True, check=False).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--launches", type=int, default=5, help="launches of each server a round")
    parser.add_argument("--calls", type=int, default=1000, help="timed calls of each server a round")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/stdio_bench.json")
    args = parser.parse_args()
    reference = npm_program(*FILESYSTEM_SERVER)
    with tempfile.TemporaryDirectory(prefix="hm-stdio-bench-", dir="/tmp") as tmp:
        repo = make_repo(Path(tmp) / "repo", {"file4k.txt": CONTENT}).resolve()
        env = {**os.environ, "PYTHONPYCACHEPREFIX": str(Path(tmp) / "pycache")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        with simulator(repo, Path(tmp), env) as herdr_socket:
            setup = Setup(repo, Path(tmp) / "config", herdr_socket, reference, env)
            rows, details = asyncio.run(measure(args, setup))
    if args.record:
        command = "python benchmarks/stdio_bench.py " + shlex.join(a for a in sys.argv[1:] if a != "--record")
        path = record("stdio_bench", rows, command=command.strip(), details=details)
        print(f"recorded {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
