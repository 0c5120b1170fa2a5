"""The test suite's own rules, checked on its source so they stay so.

A test module never imports another test module: importing one runs its module-level code and
hands its fixtures to a second module, and a helper a test file happens to hold is found by no
one looking for it. Shared helpers live in modules named for what they hold (runtime_harness.py,
link_harness.py, published_release.py, ...).

A test never sleeps to let something happen: it waits for the condition (tests/support/waiting.py), which
holds on a loaded machine and costs nothing on an idle one. A sleep that is the subject (a slow
peer, a window in which something must not happen) says so in a comment on its line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
BENCHMARKS = TESTS.parent / "benchmarks"


def _sources(pattern: str) -> list[Path]:
    """The suite's Python files matching `pattern`, in every folder but the fixtures."""
    return sorted(p for p in TESTS.rglob(pattern) if "fixtures" not in p.relative_to(TESTS).parts)


def _is_test_module(dotted: str) -> bool:
    return any(part.startswith("test_") for part in dotted.split("."))


def imported_test_modules(source: str) -> list[str]:
    """The test modules `source` imports: `import tests.test_x`, `from tests.test_x import y`,
    `from .test_x import y`, `from tests import test_x`, `from . import test_x`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _is_test_module(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if _is_test_module(module):
                found.append(module)
            elif module in ("", "tests"):
                found += [f"{module}.{alias.name}" for alias in node.names if alias.name.startswith("test_")]
    return found


@pytest.mark.parametrize(
    "source",
    [
        "from tests.test_link import Link",
        "from .test_link import Link",
        "import tests.test_link",
        "import test_link",
        "from tests import test_link",
        "from . import test_link",
        "def f() -> None:\n    from tests.test_link import Link",
    ],
)
def test_every_spelling_of_a_test_module_import_is_found(source: str) -> None:
    assert imported_test_modules(source) != []


def test_helper_module_imports_are_not_test_module_imports() -> None:
    source = "from tests.support.link_harness import Link\nfrom tests import runtime_harness\nimport pytest"
    assert imported_test_modules(source) == []


def test_no_test_module_imports_another_test_module() -> None:
    """Benchmarks count too: they borrow the same harnesses, never a test module."""
    offenders = {
        str(path.relative_to(TESTS.parent)): imported
        for path in [*_sources("*.py"), *sorted(BENCHMARKS.glob("*.py"))]
        if (imported := imported_test_modules(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, "move what they share into a helper module named for what it holds"


def uncommented_sleeps(source: str) -> list[int]:
    """Lines of `time.sleep(...)` / `asyncio.sleep(...)` calls in `source` with no comment on them
    (sleeps inside strings, a child process's script, are not calls here)."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "sleep"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in ("time", "asyncio")
            and "#" not in lines[node.lineno - 1]
        ):
            found.append(node.lineno)
    return found


def test_a_sleep_without_a_comment_is_found() -> None:
    source = (
        "import time\n"
        "time.sleep(0.1)\n"
        "time.sleep(0.1)  # the subject: a slow peer\n"
        "async def f() -> None:\n"
        "    await asyncio.sleep(1)\n"
        "CHILD = 'time.sleep(600)'\n"
    )
    assert uncommented_sleeps(source) == [2, 5]


def test_every_sleep_in_a_test_module_says_why() -> None:
    offenders = {
        str(path.relative_to(TESTS.parent)): lines
        for path in _sources("test_*.py")
        if (lines := uncommented_sleeps(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, (
        "wait for the condition instead (tests/support/waiting.py); "
        "a sleep that is the subject says so on its line"
    )


SOURCE = TESTS.parent / "src" / "herdr_mcp"
#: Folders of tests/ that are not a package of src/herdr_mcp: the Worker, the extension, the
#: shared foundation's top-level modules, the documents, the project's own files, what the tests
#: share and the recorded data.
OTHER_FOLDERS = {"edge", "extension", "foundation", "docs", "project", "support", "fixtures"}


def test_test_modules_sit_in_folders_named_for_what_they_test() -> None:
    """tests/ mirrors the packages: a newcomer finds the tests of src/herdr_mcp/<x> in tests/<x>/."""
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == [], "a test module goes in its package's folder"
    packages = {p.name for p in SOURCE.iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders - packages - OTHER_FOLDERS == set(), "name a folder after the package it tests"
    for folder in folders - {"fixtures"}:
        assert (TESTS / folder / "__init__.py").is_file(), folder
    assert [p.name for p in (TESTS / "support").glob("test_*.py")] == [], "support/ holds no tests"
    helpers = [p for p in _sources("*.py") if not p.name.startswith("test_") and p.name != "__init__.py"]
    stray = [
        str(p.relative_to(TESTS)) for p in helpers if p.parent.name != "support" and p.name != "conftest.py"
    ]
    assert stray == [], "shared helpers live in tests/support/"


#: issue 10: no source module over this many lines without a stated reason at its top.
MODULE_LINES = 600
LONG_MODULE_REASON = "Why one module of over 600 lines:"


def test_no_source_module_is_over_600_lines_without_a_stated_reason() -> None:
    """A module that grows past 600 lines is split along its concepts, or says at its top (in its
    docstring, `Why one module of over 600 lines: ...`) why it stays whole."""
    unexplained = {}
    for path in sorted(SOURCE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if lines > MODULE_LINES and LONG_MODULE_REASON not in docstring:
            unexplained[str(path.relative_to(SOURCE))] = lines
    assert unexplained == {}, "split these along their concepts, or state the reason at their top"
