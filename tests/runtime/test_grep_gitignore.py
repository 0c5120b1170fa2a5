"""herdr_fs_grep skips what the ignore files exclude, as rg does, with either engine (issue 23,
defect 6).

Found: herdr_fs_grep from a project root answered with hits in `.venv/lib/.../site-packages`
first; rg ran with `--no-ignore`. Now rg reads `.gitignore` (and `.ignore`, `.rgignore`) and the
Python engine reads them the same way (`runtime/grep/ignore_rules.py`), unless `path` names the
ignored directory itself. The tree below is a real Git repository with a nested repository; each
case runs the real rg and the real Python engine (its child process) and compares both with the
answer worked out by hand from the gitignore rules. The last tests go through a real runtime
(served in process, the simulator as Herdr) with the `mcp` client, with rg on PATH and without.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from herdr_mcp.runtime.boundary import Policy, RootCandidate, RootSet
from herdr_mcp.runtime.grep.ignore_rules import parse_rules
from herdr_mcp.runtime.grep.query import GrepEngine
from herdr_mcp.runtime.tools.fs.reading import fs_grep
from herdr_mcp.sim import SimConfig, SimulatorThread
from tests.support.git_trees import make_repo
from tests.support.runtime_harness import ToolSession, in_process_session, path_without_rg
from tests.support.sim_helpers import short_tmp_dir

ENGINES: list[GrepEngine] = ["rg", "python"]

# The trailing blanks of `trailing-space.txt` are dropped, as Git and rg drop them.
ROOT_GITIGNORE = """\
# a comment, then the cases
.venv/
*.log
!keep.log
/build
docs/**/*.tmp
node_modules
{gen,made}.out
[0-9].num
only-dir/
\\#literal-hash
"""
ROOT_GITIGNORE += "trailing-space.txt   \n" + "a/**/deep.txt\n"

FILES = {
    ".gitignore": ROOT_GITIGNORE,
    "a.py": "needle\n",
    ".venv/lib/python3.11/site-packages/pkg/mod.py": "needle in the venv\n",
    ".venv/lib/python3.11/site-packages/pkg/cache.log": "needle in a venv log\n",
    ".venv/pyvenv.cfg": "needle = cfg\n",
    "debug.log": "needle log\n",
    "keep.log": "needle kept log\n",
    "build/out.txt": "needle built\n",
    "src/build/kept.txt": "needle src build (only /build is anchored)\n",
    "docs/x/y/z.tmp": "needle tmp\n",
    "docs/z.tmp": "needle docs tmp (**/ matches zero directories)\n",
    "docs/readme.md": "needle docs\n",
    "web/node_modules/dep/index.js": "needle dep\n",
    "gen.out": "needle gen\n",
    "made.out": "needle made\n",
    "other.out": "needle other\n",
    "7.num": "needle seven\n",
    "77.num": "needle seventy-seven\n",
    "only-dir/in.txt": "needle in dir\n",
    "sub/only-dir": "needle a file named like the dir-only pattern\n",
    "#literal-hash": "needle hash\n",
    "trailing-space.txt": "needle trailing\n",
    "a/deep.txt": "needle a deep zero\n",
    "a/b/c/deep.txt": "needle a deep three\n",
    "sub/.gitignore": "!*.log\nlocal.txt\n",
    "sub/inner.log": "needle re-included log\n",
    "sub/local.txt": "needle local\n",
    "sub/more/local.txt": "needle local deeper\n",
    "dots/.ignore": "skip-by-dot-ignore.txt\n",
    "dots/skip-by-dot-ignore.txt": "needle dot ignore\n",
    "dots/kept.txt": "needle dots kept\n",
    ".rgignore": "!important.log\n",
    "important.log": "needle important (.rgignore outranks .gitignore)\n",
}

# What rg 13 answers for the whole tree, worked out from the rules above: every needle file that
# no rule excludes. vendor/ is a nested repository: the root's `*.log` does not reach inside it.
VISIBLE = {
    "#literal-hash": False,
    "7.num": False,
    "77.num": True,
    "a.py": True,
    "a/b/c/deep.txt": False,
    "a/deep.txt": False,
    "build/out.txt": False,
    "debug.log": False,
    "docs/readme.md": True,
    "docs/x/y/z.tmp": False,
    "docs/z.tmp": False,
    "dots/kept.txt": True,
    "dots/skip-by-dot-ignore.txt": False,
    "gen.out": False,
    "important.log": True,
    "keep.log": True,
    "made.out": False,
    "only-dir/in.txt": False,
    "other.out": True,
    "src/build/kept.txt": True,
    "sub/inner.log": True,
    "sub/local.txt": False,
    "sub/more/local.txt": False,
    "sub/only-dir": True,
    "trailing-space.txt": False,
    "vendor/lib.log": True,
    "vendor/vendored.py": True,
    "web/node_modules/dep/index.js": False,
    ".venv/lib/python3.11/site-packages/pkg/cache.log": False,
    ".venv/lib/python3.11/site-packages/pkg/mod.py": False,
    ".venv/pyvenv.cfg": False,
}


@dataclass
class Tree:
    roots: RootSet
    root: Path


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    base = Path(os.path.realpath(tmp_path_factory.mktemp("ignored")))
    root = make_repo(base / "project", {name: "x\n" for name in (".gitignore", "a.py")})
    for name, content in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    make_repo(root / "vendor", {"vendored.py": "needle vendored\n", "lib.log": "needle vendored log\n"})
    home = base / "home"
    home.mkdir()
    return Tree(RootSet.build([RootCandidate(root, "managed")], home=home), root)


def _paths(tree: Tree, engine: GrepEngine, **args: Any) -> list[str]:
    result = fs_grep(
        tree.roots,
        Policy(),
        # Every argument given, as the dispatcher gives them (with the catalog's defaults).
        {
            "root": str(tree.root),
            "pattern": "needle",
            "regex": False,
            "case_insensitive": False,
            "max_matches": 1000,
            "max_bytes": 262144,
            **args,
        },
        engine=engine,
    )
    assert result["engine"] == engine, result
    return [match["path"] for match in result["matches"]]


@pytest.mark.parametrize("engine", ENGINES)
def test_the_whole_tree_skips_what_the_ignore_files_exclude(tree: Tree, engine: GrepEngine) -> None:
    found = _paths(tree, engine)
    assert sorted(found) == sorted(name for name, visible in VISIBLE.items() if visible)


PATHS = [
    pytest.param(".venv", id="named-ignored-directory"),
    pytest.param(".venv/lib", id="inside-an-ignored-directory"),
    pytest.param("build", id="anchored-ignored-directory"),
    pytest.param("sub", id="subdirectory-with-parent-rules"),
    pytest.param("debug.log", id="named-ignored-file"),
    pytest.param("web/node_modules", id="nested-ignored-directory"),
    pytest.param("vendor", id="nested-repository"),
]


@pytest.mark.parametrize("path", PATHS)
def test_rg_and_python_agree_on_every_path(tree: Tree, path: str) -> None:
    assert _paths(tree, "rg", path=path) == _paths(tree, "python", path=path)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_path_naming_an_ignored_directory_searches_it(tree: Tree, engine: GrepEngine) -> None:
    venv = sorted(_paths(tree, engine, path=".venv"))
    # `cache.log` is still excluded by `*.log`: only the named directory itself is exempt.
    assert venv == [".venv/lib/python3.11/site-packages/pkg/mod.py", ".venv/pyvenv.cfg"]
    assert _paths(tree, engine, path="build") == ["build/out.txt"]
    assert _paths(tree, engine, path="debug.log") == ["debug.log"]


@pytest.mark.parametrize("engine", ENGINES)
def test_outside_a_git_repository_only_dot_ignore_files_count(tmp_path: Path, engine: GrepEngine) -> None:
    root = Path(os.path.realpath(tmp_path)) / "plain"
    for name, content in {
        ".gitignore": "*.log\n",
        ".ignore": "skipped.txt\n",
        "kept.log": "needle\n",
        "skipped.txt": "needle\n",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    roots = RootSet.build([RootCandidate(root, "operational")], home=tmp_path / "home")
    assert _paths(Tree(roots, root), engine) == ["kept.log"]


def test_patterns_read_as_rg_reads_them() -> None:
    cases = {
        ("*.log", b"a/b/x.log", False): True,
        ("/top", b"a/top", False): None,
        ("/top", b"top", False): True,
        ("dir/", b"dir", False): None,
        ("dir/", b"dir", True): True,
        ("a/**/b", b"a/b", False): True,
        ("a/**/b", b"a/x/y/b", False): True,
        ("a/**", b"a/x/y", False): True,
        ("a/**", b"a", True): None,
        ("**/x", b"x", False): True,
        ("x**y", b"x/y", False): None,
        ("[a-c]?", b"bz", False): True,
        ("[!a-c]", b"b", False): None,
        ("{a,b}c", b"bc", False): True,
        ("\\!bang", b"!bang", False): True,
        ("!bang", b"bang", False): False,
        ("tail\\ ", b"tail ", False): True,
        ("[unclosed", b"[unclosed", False): None,
    }
    answers = {case: parse_rules(case[0].encode()).decide(case[1], case[2]) for case in cases}
    assert answers == cases


# --- through a real runtime ------------------------------------------------------------------------


@dataclass
class Served:
    session: ToolSession
    root: Path


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with short_tmp_dir() as tmp:
        root = make_repo(
            tmp / "project",
            {".gitignore": ".venv/\n", "app.py": "import needle\n"},
        )
        site = root / ".venv" / "lib" / "python3.11" / "site-packages"
        site.mkdir(parents=True)
        for index in range(30):
            (site / f"aaa_{index:02}.py").write_text("needle = 'from a dependency'\n")
        with (
            SimulatorThread(SimConfig.for_roots([root]), tmp / "herdr.sock"),
            in_process_session(tmp / "herdr.sock", tmp / "config") as session,
        ):
            yield Served(session, root)


@pytest.mark.parametrize("rg_on_path", [True, False], ids=["rg", "python"])
def test_grep_from_the_project_root_skips_the_venv(
    served: Served, rg_on_path: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not rg_on_path:
        monkeypatch.setenv("PATH", path_without_rg(tmp_path))
    root = str(served.root)
    answer = served.session.call("herdr_fs_grep", {"root": root, "pattern": "needle", "max_matches": 5})
    assert answer["engine"] == ("rg" if rg_on_path else "python"), answer
    assert answer["matches"] == [{"path": "app.py", "line": 1, "text": "import needle"}]
    assert answer["truncated"] is False
    named = served.session.call(
        "herdr_fs_grep", {"root": root, "pattern": "needle", "path": ".venv", "max_matches": 5}
    )
    assert [match["path"] for match in named["matches"]] == [
        f".venv/lib/python3.11/site-packages/aaa_{index:02}.py" for index in range(5)
    ]
    assert named["truncated"] is True
