"""`herdr-mcp link`: serve the stable local MCP endpoint in front of the runtime generations.

The state dir is `--state-dir`, else `<config dir>/generations`; the link's own bearer lives in
`--token-file`, else `<state dir>/../link-token` (created 0600 on first start, like the runtime's).
At start an activation interrupted by a dead process is undone first (`recover_interrupted`), so
the link never follows a generation the gate did not finish proving.

The first line on stdout is `herdr-mcp link serving http://<host>:<port>/mcp` (with the real port
when `--port 0`). Exit 2 with one line `herdr-mcp: error: <code>: <message>` when it cannot start.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from herdr_mcp.cli.arguments import CommandParser, dir_path, fail, file_path, io_failure, port
from herdr_mcp.generations import GenerationError, GenerationStore, recover_interrupted
from herdr_mcp.link.router import LinkConfig, LinkHandler
from herdr_mcp.link.server import LinkServer
from herdr_mcp.loopback import StopSignals, bind_loopback, freeze_startup_heap, stop_signals
from herdr_mcp.runtime.auth import TokenFileError, load_or_create_token
from herdr_mcp.runtime.config import LOOPBACK_HOSTS, default_config_dir

DEFAULT_LINK_PORT = 8771
#: In-flight requests get this long to finish on SIGTERM before the link closes their connections.
GRACEFUL_SHUTDOWN_S = 30


def _parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="herdr-mcp link", description="the stable local MCP endpoint in front of the active generation"
    )
    parser.add_argument(
        "--state-dir", type=dir_path, help="generations state dir (default <config dir>/generations)"
    )
    parser.add_argument("--host", default="127.0.0.1", help=f"loopback address, one of {LOOPBACK_HOSTS}")
    parser.add_argument("--port", type=port, default=DEFAULT_LINK_PORT, help="0 picks a free port")
    parser.add_argument(
        "--token-file", type=file_path, help="the link's bearer (default <state dir>/../link-token)"
    )
    parser.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    return parser


def main(argv: list[str]) -> int:
    """Run the link until SIGTERM/SIGINT; the only catch of expected errors for this command."""
    stop = stop_signals()
    try:
        return _run(_parser().parse_args(argv), stop)
    finally:
        stop.exiting()


def _run(args: argparse.Namespace, stop: StopSignals) -> int:
    if args.host not in LOOPBACK_HOSTS:
        hosts = ", ".join(LOOPBACK_HOSTS)
        return fail("herdr-mcp", "host_not_loopback", f"--host {args.host}: pass one of {hosts}")
    state_dir: Path = args.state_dir or default_config_dir() / "generations"
    token_file: Path = args.token_file or state_dir.parent / "link-token"
    store = GenerationStore.in_dir(state_dir)
    try:
        token = load_or_create_token(token_file)
        recovered = recover_interrupted(store)
    except TokenFileError as exc:
        return fail("herdr-mcp", "token_unavailable", str(exc))
    except GenerationError as exc:
        return fail("herdr-mcp", exc.code, exc.message)
    except OSError as exc:
        return io_failure("herdr-mcp", exc)
    if recovered is not None:
        print(f"  undid an interrupted activation; active is {recovered.active}", file=sys.stderr)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    link = LinkHandler(LinkConfig(store=store, token=token, token_file=token_file))
    try:
        sock = bind_loopback(args.host, args.port)
    except OSError as exc:
        return fail(
            "herdr-mcp",
            "port_unavailable",
            f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc}); stop what uses that port, "
            "or pass --port 0 for a free one",
        )
    if stop.is_set():  # asked to stop while starting: leave before serving anything
        sock.close()
        link.close()
        return 0
    server = LinkServer(sock, link)
    port = server.port
    host = f"[{args.host}]" if ":" in args.host else args.host
    freeze_startup_heap()
    server.start()
    print(f"herdr-mcp link serving http://{host}:{port}/mcp", flush=True)
    print(f"  generations: {state_dir}", file=sys.stderr)
    print(f"  bearer token file: {token_file}", file=sys.stderr, flush=True)
    stop.wait()
    # SIGTERM (a service manager's stop) is a clean exit once the calls in flight are answered;
    # a second signal (another Ctrl-C) does not wait for them.
    server.close(GRACEFUL_SHUTDOWN_S, cut_short=lambda: stop.count > 1)
    link.close()
    return 0
