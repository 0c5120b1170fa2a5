"""`herdr-mcp native-host`: the Chrome native messaging host, and `install` / `uninstall` of its
manifest (docs/browser-protocol.md section 4).

Chrome starts the host with the caller's origin (`chrome-extension://<id>/`) as the first
argument, and on Windows adds `--parent-window=<handle>`; both are taken and neither changes what
the host does (Chrome already checked the origin against the manifest's `allowed_origins`; it is
logged). The host speaks frames on stdin/stdout and never prints anything else there.
"""

from __future__ import annotations

import argparse
import json

from herdr_mcp.cli.arguments import CommandParser, dir_path, seconds, with_json
from herdr_mcp.layout import Layout
from herdr_mcp.native_host.host import IDLE_TIMEOUT_S, run_host
from herdr_mcp.native_host.install import BROWSERS, DEFAULT_EXTENSION_ID, Installed, install, uninstall

ORIGIN_PREFIX = "chrome-extension://"
ACTIONS = ("install", "uninstall")


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="herdr-mcp native-host",
        usage="herdr-mcp native-host [ORIGIN] [options] | herdr-mcp native-host {install,uninstall} ...",
        description=(
            "The Chrome native messaging host: frames on stdin/stdout, forwarded to the runtime's "
            "Unix socket with its bearer. Chrome starts it with the extension's origin (ORIGIN)."
        ),
    )
    parser.add_argument(
        "--config-dir", type=dir_path, default=None, help="token, socket and log (default: user config)"
    )
    parser.add_argument(
        "--parent-window", metavar="HANDLE", default=None, help="passed by Chrome on Windows; ignored"
    )
    parser.add_argument(
        "--idle-timeout",
        type=seconds,
        default=IDLE_TIMEOUT_S,
        metavar="SECONDS",
        help=f"exit after this long with no request and no open stream (default {IDLE_TIMEOUT_S:g})",
    )
    actions = parser.add_subparsers(dest="action", metavar="{install,uninstall}")
    for name, what in (
        ("install", "write the host manifest (and its launcher) for Chrome or Chromium"),
        ("uninstall", "remove the host manifest from Chrome's or Chromium's directory"),
    ):
        sub = actions.add_parser(name, help=what, description=what)
        sub.add_argument("--browser", choices=BROWSERS, default="chrome", help="default: chrome")
        if name == "install":
            sub.add_argument(
                "--extension-id",
                default=None,
                help=f"the extension that may start the host (default {DEFAULT_EXTENSION_ID}: extension/'s)",
            )
        sub.add_argument(
            "--user-data-dir",
            type=dir_path,
            default=None,
            help="a browser profile dir: the manifest goes to DIR/NativeMessagingHosts",
        )
        sub.add_argument(
            "--config-dir",
            type=dir_path,
            default=argparse.SUPPRESS,
            help="the config dir the launched host uses (default: user config)",
        )
    return with_json(parser)


def run(argv: list[str]) -> int:
    """`herdr-mcp native-host ...` (its arguments after the subcommand name)."""
    arguments = list(argv)
    origin: str | None = None
    if not (arguments and arguments[0] in ACTIONS):
        origin = next((item for item in arguments if item.startswith(ORIGIN_PREFIX)), None)
        if origin is not None:
            arguments.remove(origin)
    args = build_parser().parse_args(arguments)
    layout = Layout.of(args.config_dir)
    if args.action is None:
        return run_host(layout=layout, origin=origin, idle_timeout_s=args.idle_timeout)
    if args.action == "install":
        done = install(
            layout=layout,
            browser=args.browser,
            extension_id=args.extension_id,
            user_data_dir=args.user_data_dir,
        )
    else:
        done = uninstall(layout=layout, browser=args.browser, user_data_dir=args.user_data_dir)
    _print(args.action, done, as_json=args.json)
    return 0


def _print(action: str, done: Installed, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"action": action, **done.to_dict()}, sort_keys=True))
    elif action == "install":
        print(f"wrote {done.manifest} (allowed origin chrome-extension://{done.extension_id}/)")
        print(f"launcher {done.launcher}")
    elif done.changed:
        print(f"removed {done.manifest} (the launcher {done.launcher} stays)")
    else:
        print(f"nothing to remove: {done.manifest} is not there")
