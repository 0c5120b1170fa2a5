"""A tab's layout: a binary tree of splits over panes, its rectangles and Herdr's shapes of it.

Herdr: src/layout.rs (splits with a direction and ratio; `right` splits horizontally), src/app/api/
panes.rs pane_layout_snapshot (PaneLayoutSnapshot: area, panes with rects, splits with ids
`split_<index>_<path>` where the path is 0 for first and 1 for second, `root` for the top) and
src/app/api/layouts.rs (LayoutDescription: a LayoutNode tree of `pane` and `split` nodes).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Union

AREA_WIDTH = 200
AREA_HEIGHT = 50
DEFAULT_RATIO = 0.5


@dataclass
class Leaf:
    pane_id: str


@dataclass
class Split:
    direction: str
    """`right` (side by side) or `down` (stacked)."""
    ratio: float
    first: Node
    second: Node


Node = Union[Leaf, Split]  # noqa: UP007 - a runtime alias of a forward reference


@dataclass(frozen=True)
class Rect:
    x: int
    y: int
    width: int
    height: int

    def shape(self) -> dict[str, int]:
        return {"x": self.x, "y": self.y, "width": self.width, "height": self.height}

    def halves(self, direction: str, ratio: float) -> tuple[Rect, Rect]:
        if direction == "right":
            first = max(1, min(self.width - 1, round(self.width * ratio)))
            return (
                Rect(self.x, self.y, first, self.height),
                Rect(self.x + first, self.y, self.width - first, self.height),
            )
        first = max(1, min(self.height - 1, round(self.height * ratio)))
        return (
            Rect(self.x, self.y, self.width, first),
            Rect(self.x, self.y + first, self.width, self.height - first),
        )


AREA = Rect(0, 0, AREA_WIDTH, AREA_HEIGHT)


def pane_ids(node: Node) -> list[str]:
    if isinstance(node, Leaf):
        return [node.pane_id]
    return pane_ids(node.first) + pane_ids(node.second)


def split_leaf(node: Node, target: str, new: str, direction: str, ratio: float) -> Node:
    """The tree with `target` replaced by a split of `target` (first) and `new` (second)."""
    if isinstance(node, Leaf):
        if node.pane_id == target:
            return Split(direction, ratio, Leaf(target), Leaf(new))
        return node
    return Split(
        node.direction,
        node.ratio,
        split_leaf(node.first, target, new, direction, ratio),
        split_leaf(node.second, target, new, direction, ratio),
    )


def remove_leaf(node: Node, pane_id: str) -> Node | None:
    """The tree without `pane_id` (its sibling takes the split's place); None when it was alone."""
    if isinstance(node, Leaf):
        return None if node.pane_id == pane_id else node
    first = remove_leaf(node.first, pane_id)
    second = remove_leaf(node.second, pane_id)
    if first is None:
        return second
    if second is None:
        return first
    return Split(node.direction, node.ratio, first, second)


def swap_leaves(node: Node, a: str, b: str) -> Node:
    if isinstance(node, Leaf):
        return Leaf(b if node.pane_id == a else a if node.pane_id == b else node.pane_id)
    return Split(node.direction, node.ratio, swap_leaves(node.first, a, b), swap_leaves(node.second, a, b))


def pane_rects(node: Node, area: Rect = AREA) -> dict[str, Rect]:
    if isinstance(node, Leaf):
        return {node.pane_id: area}
    first, second = area.halves(node.direction, node.ratio)
    return {**pane_rects(node.first, first), **pane_rects(node.second, second)}


def splits(
    node: Node, area: Rect = AREA, path: tuple[bool, ...] = ()
) -> Iterator[tuple[tuple[bool, ...], Split, Rect]]:
    if isinstance(node, Split):
        yield path, node, area
        first, second = area.halves(node.direction, node.ratio)
        yield from splits(node.first, first, (*path, False))
        yield from splits(node.second, second, (*path, True))


def split_at(node: Node, path: list[bool]) -> Split | None:
    for step in path:
        if not isinstance(node, Split):
            return None
        node = node.second if step else node.first
    return node if isinstance(node, Split) else None


def split_id(index: int, path: tuple[bool, ...]) -> str:
    return f"split_{index}_{''.join('1' if step else '0' for step in path) or 'root'}"


def snapshot(root: Node, workspace_id: str, tab_id: str, focused: str, zoomed: bool) -> dict[str, Any]:
    """Herdr's PaneLayoutSnapshot of one tab."""
    rects = pane_rects(root)
    if zoomed:
        rects = {focused: AREA}
    return {
        "workspace_id": workspace_id,
        "tab_id": tab_id,
        "zoomed": zoomed,
        "area": AREA.shape(),
        "focused_pane_id": focused,
        "panes": [
            {"pane_id": pane_id, "focused": pane_id == focused, "rect": rect.shape()}
            for pane_id, rect in rects.items()
        ],
        "splits": [
            {
                "id": split_id(i, path),
                "direction": split.direction,
                "ratio": split.ratio,
                "rect": rect.shape(),
            }
            for i, (path, split, rect) in enumerate(splits(root))
        ],
    }


def describe(node: Node, panes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A LayoutNode: `pane` nodes carry pane_id, cwd and label (as layout.export gives them)."""
    if isinstance(node, Leaf):
        return {"type": "pane", "pane_id": node.pane_id, **panes.get(node.pane_id, {})}
    return {
        "type": "split",
        "direction": node.direction,
        "ratio": node.ratio,
        "first": describe(node.first, panes),
        "second": describe(node.second, panes),
    }


def neighbor(root: Node, pane_id: str, direction: str) -> str | None:
    """The pane next to `pane_id` in `direction` (the nearest one overlapping along the edge)."""
    rects = pane_rects(root)
    me = rects[pane_id]
    best: tuple[int, str] | None = None
    for other, rect in rects.items():
        if other == pane_id:
            continue
        if direction in ("left", "right"):
            touching = rect.x + rect.width == me.x if direction == "left" else rect.x == me.x + me.width
            overlap = rect.y < me.y + me.height and me.y < rect.y + rect.height
            distance = abs(rect.y - me.y)
        else:
            touching = rect.y + rect.height == me.y if direction == "up" else rect.y == me.y + me.height
            overlap = rect.x < me.x + me.width and me.x < rect.x + rect.width
            distance = abs(rect.x - me.x)
        if touching and overlap and (best is None or distance < best[0]):
            best = (distance, other)
    return best[1] if best else None
