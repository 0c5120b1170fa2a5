"""`herdr-mcp connector` takes the Edge's ids as they are, a leading "-" included: grant ids are
random url-safe text (workers-oauth-provider's generateRandomString), so about one in 32 begins
with "-", and argparse alone would take it for an unknown option (seen in test_chatgpt_path:
`connector revoke -j-N2wWUNRSCFO98` exited 2, "the following arguments are required: grant_id")."""

from __future__ import annotations

import subprocess
import sys

import pytest

from herdr_mcp.cli.link import build_connector_parser, ids_last


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["revoke", "-j-N2wWUNRSCFO98"], "grant_id", "-j-N2wWUNRSCFO98"),
        (["revoke", "-j-N2wWUNRSCFO98", "--link-port", "4100", "--json"], "grant_id", "-j-N2wWUNRSCFO98"),
        (["revoke", "--link-port", "4100", "--X_a9-Qz"], "grant_id", "--X_a9-Qz"),
        (["revoke", "plainGrantId0000"], "grant_id", "plainGrantId0000"),
        (["revoke", "--", "-already-after"], "grant_id", "-already-after"),
        (["approve", "-Abc", "--code", "KFYWVA"], "request_id", "-Abc"),
        (["deny", "--config-dir", "/tmp", "-W31rd_"], "request_id", "-W31rd_"),
    ],
)
def test_an_id_that_begins_with_a_dash_is_the_positional(argv: list[str], field: str, value: str) -> None:
    parser = build_connector_parser()
    args = parser.parse_args(ids_last(parser, argv))
    assert getattr(args, field) == value


@pytest.mark.parametrize("wrong", ["--no-such-option", "--lnk-port=4100", "-x"])
def test_a_mistyped_option_stays_an_option(wrong: str) -> None:
    """A word shaped like an option (lower-case words and hyphens) that no parser knows is refused
    as one, never sent to the Edge as an id."""
    parser = build_connector_parser()
    assert ids_last(parser, ["revoke", "abc", wrong]) == ["revoke", "abc", wrong]
    with pytest.raises(Exception, match="unrecognized arguments"):
        parser.parse_args(ids_last(parser, ["revoke", "abc", wrong]))


def test_the_value_of_an_option_stays_with_it() -> None:
    parser = build_connector_parser()
    assert ids_last(parser, ["revoke", "--config-dir", "-odd-dir", "id"]) == [
        "revoke",
        "--config-dir",
        "-odd-dir",
        "id",
    ]
    args = parser.parse_args(ids_last(parser, ["approve", "r1", "--code", "KFYWVA", "--link-port", "4100"]))
    assert (args.request_id, args.code, args.link_port) == ("r1", "KFYWVA", 4100)


def test_a_dash_id_reaches_the_link_through_the_real_command() -> None:
    """Through the real command: the id is parsed, then the link is looked for (none runs on this
    port), so the answer is the link's absence, not a usage error."""
    done = subprocess.run(
        [sys.executable, "-m", "herdr_mcp", "connector", "revoke", "-j-N2wWUNRSCFO98", "--link-port", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 2, done.stderr
    assert "required: grant_id" not in done.stderr and "unrecognized" not in done.stderr, done.stderr
