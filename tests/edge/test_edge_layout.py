"""The Edge's module layout (edge/README.md, "Source"; issue 23): its imports run one way.

Read from the TypeScript sources as text (no Worker runs): every `import ... from` and
`export ... from` of edge/src, type-only ones included (a loop of types is still a loop a reader
has to follow). What must hold:
- no loop of imports, of any length;
- `src/env.ts` (the bindings' types) and `src/http.ts` import no module of ours;
- no module imports the entry, `src/index.ts`;
- outside `src/relay/` only the entry imports a module inside it (the rest call the relay
  through `src/relay_stub.ts`);
- the Durable Object classes wrangler.jsonc binds are exported from its `main`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

EDGE = Path(__file__).resolve().parents[2] / "edge"
SOURCE = EDGE / "src"

#: `import x from "m"`, `import type { a, b } from "m"`, `export { x } from "m"`, `import "m"`:
#: the module named at the end of one statement (which may span lines).
IMPORT = re.compile(
    r"^\s*(?:import|export)\b[^;]*?\bfrom\s*\"([^\"]+)\"|^\s*import\s*\"([^\"]+)\"", re.M | re.S
)
BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
LINE_COMMENT = re.compile(r"^\s*//.*$", re.M)


def imports_of(text: str) -> list[str]:
    """The module specifiers one TypeScript source imports or re-exports from."""
    code = LINE_COMMENT.sub("", BLOCK_COMMENT.sub("", text))
    return [first or second for first, second in IMPORT.findall(code)]


def graph(source: Path) -> dict[str, set[str]]:
    """Each module of `source` (path relative to it) -> the modules of `source` it imports."""
    edges: dict[str, set[str]] = {}
    for path in sorted(source.rglob("*.ts")):
        name = path.relative_to(source).as_posix()
        targets = set()
        for specifier in imports_of(path.read_text(encoding="utf-8")):
            if not specifier.startswith("."):
                continue  # a package, or cloudflare:workers
            target = (path.parent / specifier).resolve()
            if target.suffix == ".js":
                target = target.with_suffix(".ts")
            if target.is_relative_to(source.resolve()):
                targets.add(target.relative_to(source.resolve()).as_posix())
        edges[name] = targets
    return edges


def loops(edges: dict[str, set[str]]) -> list[list[str]]:
    """One loop through each strongly connected group of two or more modules (or a self-import)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the Edge has a few dozen modules
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in edges.get(node, ()):
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return groups


def test_the_import_reader_sees_every_form_the_edge_uses() -> None:
    text = """/** import { no } from "./in-a-comment.js"; */
// import { no } from "./line-comment.js";
import { DurableObject } from "cloudflare:workers";
import type { Env } from "./env.js";
import {
  a,
  type B,
} from "./frames.js";
export { DeviceRelay } from "./relay/device_relay.js";
import "./side-effect.js";
const text = "from here";
"""
    assert imports_of(text) == [
        "cloudflare:workers",
        "./env.js",
        "./frames.js",
        "./relay/device_relay.js",
        "./side-effect.js",
    ]


def test_the_loop_finder_finds_a_loop_of_three_and_none_in_a_chain() -> None:
    assert loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert loops({"a": {"b"}, "b": {"c"}, "c": set()}) == []


@pytest.fixture(scope="module")
def edges() -> dict[str, set[str]]:
    found = graph(SOURCE)
    # The reader works on this tree: the entry imports the routes it puts together.
    assert {"consent.ts", "pairing.ts", "registry.ts"} <= found["index.ts"]
    return found


def test_no_module_of_the_edge_imports_itself_back(edges: dict[str, set[str]]) -> None:
    assert loops(edges) == []


def test_the_foundation_imports_nothing_of_ours(edges: dict[str, set[str]]) -> None:
    assert (edges["env.ts"], edges["http.ts"]) == (set(), set())


def test_no_module_imports_the_entry(edges: dict[str, set[str]]) -> None:
    assert sorted(name for name, targets in edges.items() if "index.ts" in targets) == []


def test_outside_the_relay_only_the_entry_imports_it(edges: dict[str, set[str]]) -> None:
    reaching_in = {
        name: sorted(target for target in targets if target.startswith("relay/"))
        for name, targets in edges.items()
        if not name.startswith("relay/") and name != "index.ts"
    }
    assert {name: targets for name, targets in reaching_in.items() if targets} == {}


def test_the_durable_object_classes_are_exported_from_the_entry() -> None:
    config = json.loads(
        "\n".join(
            line
            for line in (EDGE / "wrangler.jsonc").read_text(encoding="utf-8").splitlines()
            if not line.lstrip().startswith("//")
        )
    )
    main = (EDGE / config["main"]).read_text(encoding="utf-8")
    classes = [binding["class_name"] for binding in config["durable_objects"]["bindings"]]
    assert sorted(classes) == ["DeviceRelay", "EdgeRegistry"]
    for name in classes:
        assert re.search(rf"^export (?:\{{ {name} \}} from|class {name}\b)", main, re.M), name
