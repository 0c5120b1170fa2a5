"""herdr_fs_list's `next_calls`: a listing cut at the cap goes on, call after call, until every
entry has come exactly once (issue 24, item 7).

Real trees on disk: names that sort oddly (`a`, `a-b`, `a.b`, `a0`, `A`, `~`), glob characters
(`*`, `?`, `[`, `]`, `!`, `-`, `^`, `\\`), unicode (accents, CJK, an emoji outside the BMP), a name
that is not UTF-8, symlinks to files and directories, secret-looking files and directories,
`.git` with contents. Each tree is listed with several caps by the documented strategy (the
`next_calls` of an answer before those left over from earlier answers) and compared with one
uncapped listing: the same entries in the same order, none twice, the same count of hidden
secrets. The continuation globs themselves are checked against random directories (every name
from the cut on matches, with what is under it, and no name before), and through the MCP
transport. No timing is asserted (list_bench measures that).
"""

from __future__ import annotations

import itertools
import os
import random
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from herdr_mcp.runtime.boundary import Policy, RootCandidate, RootSet
from herdr_mcp.runtime.grep.query import glob_match
from herdr_mcp.runtime.tools.arguments import prepared
from herdr_mcp.runtime.tools.fs import reading
from herdr_mcp.runtime.tools.fs.listing import parse_resume, rest_globs
from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.runtime_harness import call_tool, in_process_runtime, make_repo

MAX_CALLS = 5000  # far beyond any listing here: only a loop would reach it


def fs_list(roots: RootSet, args: dict[str, Any]) -> dict[str, Any]:
    """herdr_fs_list as the dispatcher calls it: arguments checked against the frozen catalog."""
    return reading.fs_list(roots, Policy(), prepared("herdr_fs_list", args))


def follow(roots: RootSet, first: dict[str, Any]) -> tuple[list[dict[str, Any]], int, int]:
    """The documented strategy: (entries in the order they came, calls, hidden secrets)."""
    pending = [first]
    entries: list[dict[str, Any]] = []
    calls = hidden = 0
    while pending:
        answer = fs_list(roots, pending.pop(0))
        calls += 1
        assert calls < MAX_CALLS, "next_calls never ended"
        entries += answer["entries"]
        hidden += answer["hidden_secret_entries"]
        if answer["truncated"]:
            assert answer["next_calls"], answer  # every tree here can be continued
            assert answer["entries"], "a truncated answer without entries would not progress"
        else:
            assert answer["next_calls"] == []
        for call in answer["next_calls"]:
            assert set(call) == {"path", "recursive", "glob", "max_entries"}
            assert call["path"] == answer["path"] and call["max_entries"] == first["max_entries"]
        pending[0:0] = answer["next_calls"]
    return entries, calls, hidden


def _root(tmp_path: Path) -> tuple[RootSet, Path]:
    root = Path(os.path.realpath(tmp_path)) / "r"
    root.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    return RootSet.build([RootCandidate(root, "operational")], home=home), root


def _file(path: Path, size: int = 1) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


ODD_NAMES = [
    "a", "a-b", "a.b", "a0", "a00", "a1", "A", "B", "_x", "~tilde", "!bang", " space", "z",
    "star*", "q?", "br[ack]et", "close]", "caret^", "back\\slash", "dash-", "café", "日本語",
    "😀emoji", "a" * 60,
]  # fmt: skip


def odd_tree(root: Path) -> None:
    """Every kind of name, nested, with symlinks, secrets and .git."""
    for index, name in enumerate(ODD_NAMES):
        _file(root / name, index)
        _file(root / f"{name}.d" / "inner" / f"{name}-{index}", index)
        _file(root / f"{name}.d" / "x", 2)
    os.mkdir(os.fsencode(root) + b"/caf\xff")  # a name that is not UTF-8
    (Path(os.fsdecode(os.fsencode(root) + b"/caf\xff")) / "inside").write_text("x")
    for name in (".env", "id_rsa", "server.pem", "credentials.json"):
        _file(root / "secrets" / name)
    _file(root / ".ssh" / "id_ed25519")
    _file(root / "pkg" / ".docker" / "config.json")
    _file(root / "pkg" / ".env.local")
    _file(root / ".git" / "objects" / "ab" / "cdef")
    _file(root / "sub" / ".GIT" / "HEAD")
    (root / "link_dir").symlink_to("a.d")
    (root / "link_file").symlink_to("a")
    (root / "dangling").symlink_to("nowhere")
    os.mkfifo(root / "fifo")


def wide_tree(root: Path) -> None:
    """300 files in one directory, numbered so that a cut often falls inside a decade."""
    for index in range(300):
        _file(root / f"f{index:03d}", index % 7)


def deep_tree(root: Path) -> None:
    """A chain six deep with a few files at every level, and siblings after it at each level."""
    here = root
    for depth in range(6):
        for index in range(4):
            _file(here / f"file{depth}_{index}.txt")
        _file(here / f"zz{depth}" / "after.txt")
        here = here / f"level{depth}"


def lopsided_tree(root: Path) -> None:
    """Two halves under one directory each, so no top-level boundary falls near a cut."""
    for half in ("a", "b"):
        for sub in range(12):
            for index in range(9):
                _file(root / half / f"sub{sub:02d}" / f"f{index}")


TREES = {"odd": odd_tree, "wide": wide_tree, "deep": deep_tree, "lopsided": lopsided_tree}


@pytest.mark.parametrize("shape", list(TREES))
@pytest.mark.parametrize("recursive", [True, False])
def test_next_calls_list_every_entry_once_in_order(tmp_path: Path, shape: str, recursive: bool) -> None:
    roots, root = _root(tmp_path)
    TREES[shape](root)
    whole = fs_list(roots, {"path": str(root), "recursive": recursive, "max_entries": 2000})
    assert not whole["truncated"] and whole["next_calls"] == []
    expected = whole["entries"]
    if shape == "odd":
        paths = {entry["path"] for entry in expected}
        assert {"caf\\xff", "link_dir", "😀emoji", "star*", "fifo"} <= paths
        assert not any(path.startswith((".git/", "sub/.GIT/", ".ssh", "secrets/")) for path in paths)
    # With a cap of 1 the odd tree's only cut after `caf\xff` would spell it `caf?`, which names
    # `café` too: that listing stops there without next_calls (checked below).
    for cap in (2, 3, 5, 8, 13, 50, 101) if shape == "odd" else (1, 2, 3, 5, 8, 13, 50, 101):
        first = {"path": str(root), "recursive": recursive, "max_entries": cap}
        entries, calls, hidden = follow(roots, first)
        assert entries == expected, f"cap {cap}"
        assert hidden == whole["hidden_secret_entries"], f"cap {cap}"
        assert calls >= -(-len(expected) // cap)


def test_a_flat_tree_of_5000_takes_three_calls(tmp_path: Path) -> None:
    """list_bench's flat shape: 50 directories of 99 files; the cap allows 3 calls and it takes 3."""
    roots, root = _root(tmp_path)
    for directory in range(50):
        (root / f"d{directory:02d}").mkdir()
        for index in range(99):
            (root / f"d{directory:02d}" / f"f{index:03d}.txt").write_bytes(b"")
    entries, calls, _ = follow(roots, {"path": str(root), "recursive": True, "max_entries": 2000})
    assert (len(entries), len({e["path"] for e in entries}), calls) == (5000, 5000, 3)


def test_changes_between_calls_never_list_an_entry_twice(tmp_path: Path) -> None:
    """Entries added before and after the cut, and removed, between the calls of one listing:
    none comes twice; every entry that existed throughout comes once."""
    roots, root = _root(tmp_path)
    wide_tree(root)
    first = fs_list(roots, {"path": str(root), "max_entries": 100})
    assert first["truncated"] and len(first["next_calls"]) == 1
    (root / "f000").unlink()  # listed already
    (root / "f299").unlink()  # not listed yet
    _file(root / "f0005")  # sorts before the cut
    _file(root / "f2995")  # sorts after it
    _file(root / "e-before-everything")
    rest, _, _ = follow(roots, first["next_calls"][0])
    got = [e["path"] for e in first["entries"] + rest]
    assert len(got) == len(set(got))
    throughout = {f"f{index:03d}" for index in range(1, 299)}
    assert throughout <= set(got)
    assert "f2995" in got and "f299" not in got


def test_a_glob_of_another_form_is_cut_as_before_without_next_calls(tmp_path: Path) -> None:
    roots, root = _root(tmp_path)
    wide_tree(root)
    _file(root / ".env")
    answer = fs_list(roots, {"path": str(root), "glob": "f1*", "max_entries": 10})
    assert [e["path"] for e in answer["entries"]] == [f"f{index:03d}" for index in range(100, 110)]
    assert (answer["truncated"], answer["next_calls"], answer["hidden_secret_entries"]) == (True, [], 1)


def test_a_continuation_glob_answers_what_the_glob_rule_says(tmp_path: Path) -> None:
    """A glob of the continuation form walks only where it can match; it answers what matching
    every entry of the whole tree against it gives."""
    roots, root = _root(tmp_path)
    odd_tree(root)
    whole = fs_list(roots, {"path": str(root), "recursive": True, "max_entries": 2000})["entries"]
    for glob in ("a[!/0-9]**", "a.d/inner/a[!/]**", "[!/]**", "c[!/]**", "[*]x[!/]**", "nowhere/x[!/]**"):
        assert parse_resume(glob) is not None, glob
        answer = fs_list(roots, {"path": str(root), "recursive": True, "glob": glob, "max_entries": 2000})
        assert answer["entries"] == [e for e in whole if glob_match(glob, e["path"])], glob


# Characters a glob spells: the class edge cases `-` and `]`, glob characters, unicode. A name
# with `[`, `]` just before `^`, or a byte that is not UTF-8 may not be spelt (SPELT_OR_NOT).
SPELT = "aAbz09-._~!*?]\\é日😀 "
SPELT_OR_NOT = SPELT + "[^\udcff"


@pytest.mark.parametrize("seed", range(60))
def test_rest_globs_match_each_name_from_the_cut_on_once(seed: int) -> None:
    """Random directories and cuts: the globs together match the names from the cut on and what
    is under them, each once, and no name before; each parses back to its literal prefix."""
    rng = random.Random(seed)
    alphabet = SPELT if seed % 2 else SPELT_OR_NOT
    names = sorted(
        {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5))) for _ in range(rng.randint(2, 60))}
    )
    names = [name for name in names if name not in (".", "..")]
    prefix = rng.choice(["", "top/", "x y/z*/"])
    spelt = 0
    for first in range(len(names)):
        globs = rest_globs(prefix, names, first, len(names))
        if globs is None:
            assert alphabet == SPELT_OR_NOT, (names, first)
            continue
        spelt += 1
        for glob in globs:
            literal = parse_resume(glob)
            assert literal is not None and literal.startswith(prefix), glob
        for index, name in enumerate(names):
            for path in (prefix + name, prefix + name + "/below", prefix + name + "/a/b"):
                matched = [glob for glob in globs if glob_match(glob, path)]
                assert len(matched) == (index >= first), (globs, path, first)
        if prefix:
            assert not any(glob_match(glob, prefix.rstrip("/")) for glob in globs)
    assert spelt > 0


def test_a_rest_no_glob_can_name_ends_without_next_calls(tmp_path: Path) -> None:
    """A byte that is not UTF-8 is spelt `?` in a glob; when `?` would also name `café` beside
    `caf\\xff`, the rest inside `caf\\xff` cannot be named: the answer is cut at the cap and
    carries no next_calls (the client narrows by path, as before)."""
    roots, root = _root(tmp_path)
    _file(root / "café")
    odd = Path(os.fsdecode(os.fsencode(root) + b"/caf\xff"))
    for index in range(4):
        _file(odd / f"f{index}")
    whole = [e["path"] for e in fs_list(roots, {"path": str(root), "recursive": True})["entries"]]
    assert whole == ["café", "caf\\xff", *(f"caf\\xff/f{index}" for index in range(4))]
    first = fs_list(roots, {"path": str(root), "recursive": True, "max_entries": 1})
    assert [call["glob"] for call in first["next_calls"]] == ["caf[!/é]**"]
    second = fs_list(roots, first["next_calls"][0])
    assert [e["path"] for e in second["entries"]] == ["caf\\xff"]
    assert (second["truncated"], second["next_calls"]) == (True, [])


def test_next_calls_through_mcp(tmp_path: Path) -> None:
    """The documented strategy over the MCP transport (the dispatcher, its answer encoding and the
    argument checks of the frozen catalog): every entry of a tree with odd names comes once."""
    repo = make_repo(tmp_path / "repo", {"README.md": b"x\n"})
    odd_tree(repo / "tree")

    async def body() -> tuple[list[str], list[str], int]:
        async with (
            in_process_runtime(tmp_path / "herdr.sock", tmp_path / "config") as runtime,
            runtime.client() as client,
        ):
            return await _follow_mcp(client, str(repo / "tree"))

    import asyncio

    with SimulatorThread(SimConfig.for_roots([repo]), tmp_path / "herdr.sock"):
        got, expected, calls = asyncio.run(body())
    assert got == expected and calls > 2


async def _follow_mcp(client: Client, path: str) -> tuple[list[str], list[str], int]:
    whole = await call_tool(client, "herdr_fs_list", {"path": path, "recursive": True, "max_entries": 2000})
    pending: list[dict[str, Any]] = [{"path": path, "recursive": True, "max_entries": 7}]
    got: list[str] = []
    for calls in itertools.count(1):
        if not pending or calls > MAX_CALLS:
            return got, [e["path"] for e in whole["entries"]], calls - 1
        answer = await call_tool(client, "herdr_fs_list", pending.pop(0))
        assert "error" not in answer, answer
        got += [e["path"] for e in answer["entries"]]
        pending[0:0] = answer["next_calls"]
    raise AssertionError("unreachable")
