"""The CLI conventions (README, "The command line"), checked on every subcommand the parser knows:
`--help` exits 0 and every option says what it is; `--json` is accepted after the subcommand at
every level; a refusal is one line on stderr and, under `--json`, one
`{"error": {"code", "message"}}` on stdout, with the exit status of its fault (2 usage, 3
refused, 4 local environment), never a traceback."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from herdr_mcp import __version__
from herdr_mcp.cli import DELEGATED, build_parser, main, subcommand_parser
from herdr_mcp.errors import EXIT_LOCAL, EXIT_REFUSED, EXIT_USAGE
from herdr_mcp.generations.fence import set_fence

CLI = [sys.executable, "-m", "herdr_mcp"]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _walk(
    path: tuple[str, ...], parser: argparse.ArgumentParser
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for name, child in _subparsers(parser).items():
        yield from _walk((*path, name), child)


def _commands() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every (sub)command: discovered from the top-level parser, delegated ones from their own."""
    found: list[tuple[tuple[str, ...], argparse.ArgumentParser]] = []
    for name in _subparsers(build_parser()):
        found.extend(_walk((name,), subcommand_parser(name)))
    return found


COMMANDS = _commands()
IDS = [" ".join(path) for path, _ in COMMANDS]


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
    return status, out.getvalue(), err.getvalue()


def test_every_registered_subcommand_is_walked() -> None:
    tops = {path[0] for path, _ in COMMANDS}
    assert set(DELEGATED) <= tops
    for expected in (
        "serve",
        "version",
        "token",
        "dev",
        "update",
        "release",
        "link",
        "service",
        "generation",
    ):
        assert expected in tops
    assert ("dev", "status") in {path for path, _ in COMMANDS}


@pytest.mark.parametrize(("path", "parser"), COMMANDS, ids=IDS)
def test_help_exits_0_and_every_option_says_what_it_is(
    path: tuple[str, ...], parser: argparse.ArgumentParser
) -> None:
    status, out, err = _run([*path, "--help"])
    assert status == 0, err
    assert out.startswith("usage: "), out
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                assert choice.help, f"{' '.join(path)} {choice.dest}: a subcommand without help"
            continue
        name = "/".join(action.option_strings) or action.dest
        assert action.help, f"`{' '.join(path)}` {name} has no help text"


@pytest.mark.parametrize(("path", "parser"), COMMANDS, ids=IDS)
def test_json_is_accepted_after_the_subcommand(
    path: tuple[str, ...], parser: argparse.ArgumentParser
) -> None:
    assert "--json" in parser._option_string_actions, f"`{' '.join(path)} --json` is refused"
    # A wrong option after --json: the refusal names the wrong option (so --json was taken), and
    # comes as one JSON object on stdout with the usage exit status.
    status, out, err = _run([*path, "--json", "--no-such-option"])
    assert status == EXIT_USAGE, (out, err)
    assert err.startswith("herdr-mcp: error: invalid_argument") and len(err.splitlines()) == 1, err
    error = json.loads(out)["error"]
    assert set(error) == {"code", "message"}
    assert error["code"] in ("invalid_argument", "invalid_arguments")
    assert "--json" not in error["message"]


def test_version_option() -> None:
    status, out, _ = _run(["--version"])
    assert (status, out.strip()) == (0, f"herdr-mcp {__version__}")


def test_dev_status_takes_json_after_the_subcommand(tmp_path: Path) -> None:
    done = subprocess.run(
        [*CLI, "dev", "--config-dir", str(tmp_path), "status", "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["plane"] == "prod"


def test_a_refusal_by_policy_is_exit_3_and_json(tmp_path: Path) -> None:
    set_fence(tmp_path, "a test fenced updates")
    done = subprocess.run(
        [*CLI, "update", "--check", "--config-dir", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == EXIT_REFUSED, (done.stdout, done.stderr)
    assert json.loads(done.stdout)["error"]["code"] == "update_fenced"
    assert done.stderr.startswith("herdr-mcp: error: update_fenced: "), done.stderr


@pytest.mark.parametrize("as_json", [False, True])
def test_an_oserror_in_dev_sync_is_one_line_and_exit_4(tmp_path: Path, as_json: bool) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "update").write_text("a file where the update dir belongs")
    json_flag = ["--json"] if as_json else []
    done = subprocess.run(
        [*CLI, "dev", "--config-dir", str(config), "sync", "--source", str(tmp_path), *json_flag],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == EXIT_LOCAL, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("herdr-mcp: error: io_error: "), done.stderr
    if as_json:
        assert json.loads(done.stdout)["error"]["code"] == "io_error"
