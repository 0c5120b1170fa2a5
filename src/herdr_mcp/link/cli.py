"""`herdr-mcp link`: serve the stable local MCP endpoint in front of the runtime generations.

The state dir is `--state-dir`, else `<config dir>/generations`; the link's own bearer lives in
`--token-file`, else `<state dir>/../link-token` (created 0600 on first start, like the runtime's).
At start an activation interrupted by a dead process is undone first (`recover_interrupted`), so
the link never follows a generation the gate did not finish proving.

The first line on stdout is `herdr-mcp link serving http://<host>:<port>/mcp` (with the real port
when `--port 0`). When it cannot start: one line `herdr-mcp: error: <code>: <message>` and the
exit status of the failure's fault (2 a bad argument, 4 a busy port or an unusable token file).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from herdr_mcp.cli.arguments import CommandParser, dir_path, file_path, port, run_guarded, with_json
from herdr_mcp.errors import LocalFault, UsageFault
from herdr_mcp.generations import GenerationStore, recover_interrupted
from herdr_mcp.layout import DEFAULT_LINK_PORT, LOOPBACK_HOSTS, Layout
from herdr_mcp.link.router import LinkConfig, LinkHandler
from herdr_mcp.link.server import LinkServer
from herdr_mcp.loopback import StopSignals, bind_loopback, freeze_startup_heap, stop_signals
from herdr_mcp.tokens import load_or_create_token

#: In-flight requests get this long to finish on SIGTERM before the link closes their connections.
GRACEFUL_SHUTDOWN_S = 30


def build_parser() -> argparse.ArgumentParser:
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
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="default: warning",
    )
    return with_json(parser)


def main(argv: list[str]) -> int:
    """`herdr-mcp link ...` inside the CLI's one catch; the exit status."""
    return run_guarded(lambda: run(argv), argv)


def run(argv: list[str]) -> int:
    """Run the link until SIGTERM/SIGINT; raises what the CLI's one catch reports."""
    stop = stop_signals()
    try:
        return _run(build_parser().parse_args(argv), stop)
    finally:
        stop.exiting()


def _run(args: argparse.Namespace, stop: StopSignals) -> int:
    if args.host not in LOOPBACK_HOSTS:
        hosts = ", ".join(LOOPBACK_HOSTS)
        raise UsageFault("host_not_loopback", f"--host {args.host}: pass one of {hosts}")
    state_dir: Path = args.state_dir or Layout.default().generations_dir
    token_file: Path = args.token_file or Layout(state_dir.parent).link_token_file
    store = GenerationStore.in_dir(state_dir)
    token = load_or_create_token(token_file)
    recovered = recover_interrupted(store)
    if recovered is not None:
        print(f"  undid an interrupted activation; active is {recovered.active}", file=sys.stderr)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    link = LinkHandler(LinkConfig(store=store, token=token, token_file=token_file))
    try:
        sock = bind_loopback(args.host, args.port)
    except OSError as exc:
        raise LocalFault(
            "port_unavailable",
            f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc}); stop what uses that port, "
            "or pass --port 0 for a free one",
        ) from None
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
