"""The test suite's own rules, checked on its source so they stay so.

A test module never imports another test module: importing one runs its module-level code and
hands its fixtures to a second module, and a helper a test file happens to hold is found by no
one looking for it. Shared helpers live in modules named for what they hold (runtime_harness.py,
link_harness.py, published_release.py, ...).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


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
    source = "from tests.link_harness import Link\nfrom tests import runtime_harness\nimport pytest"
    assert imported_test_modules(source) == []


def test_no_test_module_imports_another_test_module() -> None:
    offenders = {
        path.name: imported
        for path in sorted(TESTS.glob("*.py"))
        if (imported := imported_test_modules(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}, "move what they share into a helper module named for what it holds"
