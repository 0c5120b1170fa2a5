"""`herdr-mcp link`: serve the stable local MCP endpoint in front of the runtime generations.

The state dir is `--state-dir`, else `<config dir>/generations`; the link's own bearer lives in
`--token-file`, else `<state dir>/../link-token` (created 0600 on first start, like the runtime's).
At start an activation interrupted by a dead process is undone first (`recover_interrupted`), so
the link never follows a generation the gate did not finish proving.

The first line on stdout is `herdr-mcp link serving http://<host>:<port>/mcp` (with the real port
when `--port 0`). When it cannot start: one line `herdr-mcp: error: <code>: <message>` and the
exit status of the failure's fault (2 a bad argument, 4 a busy port or an unusable token file).

When `<config dir>/edge-device.json` names a paired Edge, the link also keeps its outbound
connection to it (`link/edge.py`). `herdr-mcp link pair|unpair|status` manage and show that;
`herdr-mcp connector ...` (`connector_run`) carries the owner's consent and grant commands to
the Edge through the running link's `/edge/control` (loopback, the link's bearer).

`connector approve <request-id>` approves only after the owner gave the 6-character code the
consent page shows: `--code`, or typed at the prompt on a terminal, which shows the request
(client, where it returns to, its code) first. The Edge's `consent.approve` takes no code
(docs/edge-protocol.md), so the code is compared here, case-insensitively and in constant time,
with the one `consent.list` reports for that request; a wrong one is refused
(`consent_code_mismatch`, exit 3) and `consent.approve` is never sent. Without a terminal and
without `--code` nothing is approved (`consent_code_required`).
"""

from __future__ import annotations

import argparse
import hmac
import json
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2

from herdr_mcp.cli.arguments import CommandParser, dir_path, file_path, port, run_guarded, with_json
from herdr_mcp.edge_deploy import deployed_admin_secret_file
from herdr_mcp.errors import LocalFault, RefusedFault, UsageFault
from herdr_mcp.generations import GenerationStore, recover_interrupted
from herdr_mcp.layout import DEFAULT_LINK_PORT, LOOPBACK_HOSTS, Layout
from herdr_mcp.link.edge import EdgeLink
from herdr_mcp.link.edge_device import (
    PAIR_TIMEOUT_S,
    EdgeDevice,
    check_edge_url,
    pair,
    read_device,
    remove_device,
    start_pairing,
    write_device,
)
from herdr_mcp.link.router import LinkConfig, LinkHandler, LinkRefusal
from herdr_mcp.link.server import LinkServer
from herdr_mcp.local_http import answer_object, local_client
from herdr_mcp.loopback import StopSignals, bind_loopback, freeze_startup_heap, stop_signals
from herdr_mcp.terminal import printable
from herdr_mcp.tokens import load_or_create_token, read_token

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
    commands = parser.add_subparsers(dest="action", required=False, metavar="{pair,unpair,status}")
    paired = commands.add_parser(
        "pair", help="pair this workstation with an Edge (code from its pairing page)"
    )
    paired.add_argument("--edge", required=True, help="the Edge's origin, https://<host>[:<port>]")
    paired.add_argument(
        "--code",
        help="the 6-digit pairing code the Edge's /pair page shows (without it: started here with "
        "the ADMIN_SECRET `herdr-mcp edge deploy` kept, or --admin-secret-file)",
    )
    paired.add_argument(
        "--admin-secret-file",
        type=file_path,
        help="a file holding the Edge's ADMIN_SECRET, to start the pairing without the /pair page",
    )
    paired.add_argument("--name", help="the name the Edge shows for this workstation (default: host name)")
    _config_dir_option(paired)
    unpaired = commands.add_parser("unpair", help="forget the paired Edge (device id and secret)")
    _config_dir_option(unpaired)
    status = commands.add_parser("status", help="the running link's Edge state and the pairing")
    _config_dir_option(status)
    _link_port_option(status)
    return with_json(parser)


def _config_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config-dir", type=dir_path, help="the config dir (default: user config)")


def _link_port_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--link-port",
        type=port,
        default=DEFAULT_LINK_PORT,
        help=f"the running link's port (default {DEFAULT_LINK_PORT})",
    )


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
    if args.action is not None:
        return _ACTIONS[args.action](args)
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
    edge = _edge_link(Layout(state_dir.parent), link)
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
    if edge is not None:
        edge.start()
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
    # Calls from the Edge get the same grace as local ones, at the same time; new ones are refused
    # `not_delivered` meanwhile, and the connection closes once they are answered.
    deadline = time.monotonic() + GRACEFUL_SHUTDOWN_S
    if edge is not None:
        edge.begin_stop()
    server.close(GRACEFUL_SHUTDOWN_S, cut_short=lambda: stop.count > 1)
    if edge is not None:
        edge.stop(max(0.0, deadline - time.monotonic()), cut_short=lambda: stop.count > 1)
    link.close()
    return 0


def _edge_link(layout: Layout, link: LinkHandler) -> EdgeLink | None:
    """The connection to the paired Edge (not started), or None when unpaired. A bad record keeps
    the link local (it never connects with guessed data) and says so in its Edge state."""
    try:
        device = read_device(layout.edge_device_file)
    except LocalFault as exc:
        print(f"  not connecting to the Edge: {exc.code}: {exc.message}", file=sys.stderr)
        link.edge = _BadRecord(exc)
        return None
    if device is None:
        return None
    edge = EdgeLink(device, link.forwarder)
    link.edge = edge
    print(f"  Edge: {device.edge_url} as {device.device_id}", file=sys.stderr)
    return edge


class _BadRecord:
    """The Edge side of a link whose device record is bad: no connection, the reason in its state."""

    def __init__(self, fault: LocalFault) -> None:
        self._fault = fault

    def status(self) -> dict[str, Any]:
        return {"state": "unpaired", "last_error": f"{self._fault.code}: {self._fault.message}"}

    def control(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise LinkRefusal(503, self._fault.code, self._fault.message)


# -- link pair | unpair | status ---------------------------------------------------------------


def _pair(args: argparse.Namespace) -> int:
    path = Layout.of(args.config_dir).edge_device_file
    present = read_device(path)  # a bad record is refused here too: unpair first
    if present is not None:
        raise UsageFault(
            "edge_already_paired",
            f"this workstation is paired with {present.edge_url} as {present.device_id}; "
            "run `herdr-mcp link unpair` first",
        )
    code = args.code
    if code is None:
        code = start_pairing(args.edge, _admin_secret(args), timeout_s=PAIR_TIMEOUT_S)
    device = pair(args.edge, code, args.name)
    write_device(path, device)
    if args.json:
        print(json.dumps({"paired": True, **device.public(), "record": str(path)}, sort_keys=True))
    else:
        print(f"paired with {device.edge_url} as {device.device_id} ({device.name})")
        print(
            f"  device record: {path}; the link connects when it starts (`herdr-mcp start`; "
            "a link already running: `herdr-mcp stop`, then `herdr-mcp start`)"
        )
    return 0


def _admin_secret(args: argparse.Namespace) -> str:
    """The ADMIN_SECRET to start a pairing with: `--admin-secret-file`, else the one `herdr-mcp
    edge deploy` kept for the Worker whose recorded origin is `--edge`."""
    path: Path | None = args.admin_secret_file
    if path is None:
        origin = check_edge_url(args.edge)
        path = deployed_admin_secret_file(Layout.of(args.config_dir), origin)
        if path is None:
            raise UsageFault(
                "pairing_code_required",
                f"no `herdr-mcp edge deploy` of this config dir deployed {origin}: open {origin}/pair "
                "(password: the Edge's ADMIN_SECRET) and pass its code as --code, or pass "
                "--admin-secret-file",
            )
    try:
        secret = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise LocalFault("admin_secret_unreadable", f"cannot read {path}: {exc}") from None
    if not secret or not secret.isprintable():
        raise UsageFault("admin_secret_invalid", f"{path} holds no ADMIN_SECRET on its first line")
    return secret


def _unpair(args: argparse.Namespace) -> int:
    path = Layout.of(args.config_dir).edge_device_file
    removed = remove_device(path)
    if args.json:
        print(json.dumps({"unpaired": removed, "record": str(path)}, sort_keys=True))
    else:
        print(f"forgot the Edge ({path} removed)" if removed else "this workstation was not paired")
    return 0


def _status(args: argparse.Namespace) -> int:
    layout = Layout.of(args.config_dir)
    try:
        device: EdgeDevice | None = read_device(layout.edge_device_file)
        record_error = None
    except LocalFault as exc:
        device, record_error = None, f"{exc.code}: {exc.message}"
    try:
        with local_client(timeout=5) as http:
            answer = http.get(f"http://127.0.0.1:{args.link_port}/health")
        health = answer_object(answer) if answer.status_code == 200 else None
    except (httpx2.HTTPError, ValueError):
        health = None
    if not isinstance(health, dict) or health.get("product") != "herdr-mcp-link":
        raise LocalFault(
            "link_unreachable",
            f"no link answers on 127.0.0.1:{args.link_port}; start it (`herdr-mcp link`) or pass --link-port",
        )
    report = {
        "paired": device is not None,
        "device": None if device is None else device.public(),
        "record_error": record_error,
        "active": health.get("active"),
        "edge": health.get("edge"),
    }
    if args.json:
        print(json.dumps(report, sort_keys=True))
        return 0
    edge = report["edge"] if isinstance(report["edge"], dict) else {}
    print(f"link on 127.0.0.1:{args.link_port}, active generation {report['active']}")
    if device is not None:
        print(f"paired with {device.edge_url} as {device.device_id} ({device.name})")
    elif record_error:
        print(f"device record unusable: {record_error}")
    else:
        print("not paired (`herdr-mcp link pair --edge <url>`; `--code <code>` from its /pair page)")
    for key in (
        "state",
        "connection_id",
        "last_hello_ack",
        "last_heartbeat_sent",
        "reconnects",
        "last_error",
    ):
        if key in edge:
            print(f"  {key}: {edge[key]}")
    return 0


_ACTIONS = {"pair": _pair, "unpair": _unpair, "status": _status}


# -- herdr-mcp connector ---------------------------------------------------------------------

#: Edge errors that name something the owner typed (a request or grant id).
_USAGE_CODES = frozenset({"consent_not_found", "consent_expired", "grant_not_found", "method_not_found"})
#: The consent page's code: its alphabet and length (edge/src/consent.ts, CODE_ALPHABET and
#: CODE_LENGTH: no 0/O, 1/I/L, 2/Z, 5/S, 8/B).
CONSENT_CODE_ALPHABET = "ACDEFGHJKMNPQRTUVWXY34679"
CONSENT_CODE_LENGTH = 6


def consent_code(value: str) -> str:
    """`--code`: the consent page's code, in capitals (it is compared case-insensitively)."""
    code = value.strip().upper()
    if len(code) != CONSENT_CODE_LENGTH or not set(code) <= set(CONSENT_CODE_ALPHABET):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a consent code: the page shows {CONSENT_CODE_LENGTH} characters of "
            f"{CONSENT_CODE_ALPHABET}"
        )
    return code


def codes_match(given: str, expected: str) -> bool:
    """Whether the code the owner gave is the request's, case-insensitively, in constant time."""
    return hmac.compare_digest(given.strip().upper().encode(), expected.strip().upper().encode())


def build_connector_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="herdr-mcp connector",
        description="approve, list and revoke MCP connectors (Web AIs) on the Edge",
    )
    commands = parser.add_subparsers(dest="action", required=True)
    listed = commands.add_parser("list", help="consent requests waiting for the owner")
    approve = commands.add_parser(
        "approve", help="approve a consent request, given the code its consent page shows"
    )
    approve.add_argument("request_id", help="the request id the consent page shows")
    approve.add_argument(
        "--code",
        type=consent_code,
        default=None,
        help="the 6-character code the consent page shows (asked for on a terminal when not given)",
    )
    deny = commands.add_parser("deny", help="deny a consent request")
    deny.add_argument("request_id", help="the request id the consent page shows")
    grants = commands.add_parser("grants", help="the connectors granted access")
    revoke = commands.add_parser("revoke", help="revoke a grant: its tokens stop working at the next call")
    revoke.add_argument("grant_id", help="the grant id `connector grants` shows")
    for child in (listed, approve, deny, grants, revoke):
        _config_dir_option(child)
        _link_port_option(child)
    return with_json(parser)


def connector_main(argv: list[str]) -> int:
    return run_guarded(lambda: connector_run(argv), argv)


#: How an option is spelled (`--link-port`, `-h`, `--code=X`): a word of this shape that no
#: parser knows stays a mistyped option (a usage error), never an id.
OPTION_SHAPE = re.compile(r"-{1,2}[a-z][a-z0-9]*(?:-[a-z0-9]+)*(?:=.*)?", re.DOTALL)


def ids_last(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`argv` with each word that starts with "-" but is neither an option of `parser` (nor the
    value of one) nor shaped like an option moved behind a "--": the Edge's grant ids are random
    url-safe text, and one that begins with "-" (`-j-N2wWUNRSCFO98`) is otherwise taken for an
    unknown option. A random id of lower-case letters and single hyphens alone is the one left
    to argparse (about 2 in a million of 16 characters)."""
    takes_value: set[str] = set()
    flags: set[str] = set()
    parsers = [parser]
    while parsers:
        for action in parsers.pop()._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
            (takes_value if action.nargs != 0 else flags).update(action.option_strings)
    kept: list[str] = []
    moved: list[str] = []
    words = iter(argv)
    for word in words:
        if word == "--":
            moved.extend(words)
            break
        name = word.split("=", 1)[0]
        if name in takes_value and "=" not in word:
            value = next(words, None)
            kept += [word] if value is None else [word, value]
        elif (
            word.startswith("-")
            and len(word) > 1
            and name not in takes_value | flags
            and not OPTION_SHAPE.fullmatch(word)
        ):
            moved.append(word)
        else:
            kept.append(word)
    return [*kept, "--", *moved] if moved else kept


def connector_run(argv: list[str]) -> int:
    """`herdr-mcp connector ...`: one control request through the running link; raises what the
    CLI's one catch reports."""
    parser = build_connector_parser()
    args = parser.parse_args(ids_last(parser, argv))
    if args.action == "approve":
        return _approve(args)
    method, params = {
        "list": ("consent.list", {}),
        "deny": ("consent.deny", {"request_id": getattr(args, "request_id", None)}),
        "grants": ("grant.list", {}),
        "revoke": ("grant.revoke", {"grant_id": getattr(args, "grant_id", None)}),
    }[args.action]
    result = _control(Layout.of(args.config_dir), args.link_port, method, params)
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    _print_control(args.action, result)
    return 0


def _approve(args: argparse.Namespace) -> int:
    """`connector approve`: the request as `consent.list` reports it, the owner's code compared
    with its code, and only then `consent.approve`."""
    layout = Layout.of(args.config_dir)
    listed = _control(layout, args.link_port, "consent.list", {})
    pending = listed.get("pending")
    found = next(
        (
            item
            for item in (pending if isinstance(pending, list) else [])
            if isinstance(item, dict) and item.get("request_id") == args.request_id
        ),
        None,
    )
    if found is None:
        raise UsageFault(
            "consent_not_found",
            f"no consent request {printable(args.request_id)} is waiting (already decided, expired, or "
            "not made); `herdr-mcp connector list` shows the waiting ones",
        )
    expected = found.get("code")
    if not isinstance(expected, str) or not expected:
        raise LocalFault("link_answer_invalid", "the Edge listed the request without its code")
    given = args.code if args.code is not None else _ask_code(found)
    if not codes_match(given, expected):
        raise RefusedFault(
            "consent_code_mismatch",
            f"{printable(given)} is not the code of request {printable(args.request_id)}; nothing was "
            "approved. Compare the request id and the code with the consent page you opened, and run "
            "the command again",
        )
    result = _control(layout, args.link_port, "consent.approve", {"request_id": args.request_id})
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    _print_control("approve", result)
    return 0


def _ask_code(consent: dict[str, Any]) -> str:
    """Show the request on the terminal and read the code the owner types from the page."""
    if not sys.stdin.isatty():
        raise UsageFault(
            "consent_code_required",
            "pass --code XXXXXX, the code the consent page shows (there is no terminal to ask on); "
            "nothing was approved",
        )
    redirect = str(consent.get("redirect_uri") or "")
    host = urlsplit(redirect).netloc or redirect
    lines = [
        f"consent request {consent.get('request_id')}",
        f"  client:     {consent.get('client_name')}",
        f"  returns to: {host}",
        f"  code:       {consent.get('code')}",
        "Approve only if the consent page you opened shows this request id and this code.",
    ]
    for line in lines:
        print(printable(line), file=sys.stderr)
    print("Type the code the page shows: ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip()


def _control(layout: Layout, link_port: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    if not os.path.lexists(layout.link_token_file):
        # Written by the link when it first starts: none here, so no link ever ran with this dir.
        raise LocalFault(
            "link_unreachable",
            f"no link has run with {layout.config_dir} (no {layout.link_token_file.name} there); "
            "start it (`herdr-mcp start`, or `herdr-mcp link`) or pass the --config-dir of the link you mean",
        )
    token = read_token(layout.link_token_file)
    try:
        with local_client(timeout=30, headers={"Authorization": f"Bearer {token}"}) as http:
            answer = http.post(
                f"http://127.0.0.1:{link_port}/edge/control", json={"method": method, "params": params}
            )
        document = answer_object(answer)
    except (httpx2.HTTPError, ValueError):  # ValueError: not JSON, or past the bounds
        raise LocalFault(
            "link_unreachable", f"no link answers on 127.0.0.1:{link_port}; start it or pass --link-port"
        ) from None
    if answer.status_code == 401:
        raise LocalFault(
            "link_unauthorized",
            f"the link on 127.0.0.1:{link_port} refused the token in {layout.link_token_file}; "
            "pass the --config-dir of the link you mean",
        )
    error = document.get("error") if isinstance(document, dict) else None
    if isinstance(error, dict):
        code, message = str(error.get("code")), str(error.get("message"))
        if answer.status_code == 200:  # the Edge's own answer
            raise (UsageFault if code in _USAGE_CODES else RefusedFault)(code, message)
        raise LocalFault(code, message)
    result = document.get("result") if isinstance(document, dict) else None
    if answer.status_code != 200 or not isinstance(result, dict):
        raise LocalFault(
            "link_answer_invalid", f"the link answered HTTP {answer.status_code} without a result"
        )
    return result


def _utc(seconds: object) -> object:
    """Epoch seconds as the Edge sends them, shown as UTC time; anything else as it is."""
    if isinstance(seconds, int) and not isinstance(seconds, bool) and 0 <= seconds < 2**37:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    return seconds


def _print_control(action: str, result: dict[str, Any]) -> None:
    def row(item: object, *keys: str) -> str:
        fields = item if isinstance(item, dict) else {}
        return "  ".join(printable(str(fields.get(key))) for key in keys)

    if action == "list":
        pending = result.get("pending") or []
        if not pending:
            print("no consent request is waiting")
        for item in pending:
            fields = item if isinstance(item, dict) else {}
            shown = {**fields, "created_at": _utc(fields.get("created_at"))}
            print(row(shown, "request_id", "code", "client_name", "redirect_uri", "created_at"))
    elif action == "approve":
        print(f"approved: {row(result, 'request_id', 'client_name', 'grant_id')}")
        print(f"  code {row(result, 'code')}, as the consent page shows and you gave")
    elif action == "deny":
        print(f"denied {row(result, 'request_id')}")
    elif action == "grants":
        grants = result.get("grants") or []
        if not grants:
            print("no connector holds a grant")
        for item in grants:
            fields = item if isinstance(item, dict) else {}
            when = {key: _utc(fields.get(key)) for key in ("created_at", "last_used_at")}
            print(row({**fields, **when}, "grant_id", "client_name", "created_at", "last_used_at"))
    else:
        print(f"revoked {row(result, 'grant_id')}")
