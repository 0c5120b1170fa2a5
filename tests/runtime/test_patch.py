"""The '*** Begin Patch' format: parser, renderer and hunk applier (pure functions, no disk)."""

from __future__ import annotations

import difflib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.tools.patch import (
    PATCH_MAX_FILES,
    AddFile,
    DeleteFile,
    Hunk,
    LineOp,
    Patch,
    UpdateFile,
    apply_hunks,
    new_file_content,
    parse_patch,
    render_patch,
)


def test_parses_every_section_kind() -> None:
    text = """*** Begin Patch
*** Add File: docs/new.md
+# Title
+
*** Delete File: old.txt
*** Update File: src/app.py
*** Move to: src/main.py
@@ def main():
-    return 1
+    return 2
@@
 x
*** End of File
*** End Patch
"""
    patch = parse_patch(text)
    assert patch == Patch(
        (
            AddFile("docs/new.md", ("# Title", "")),
            DeleteFile("old.txt"),
            UpdateFile(
                "src/app.py",
                "src/main.py",
                (
                    Hunk("def main():", (("-", "    return 1"), ("+", "    return 2"))),
                    Hunk(None, ((" ", "x"),), end_of_file=True),
                ),
            ),
        )
    )


def test_tolerates_crlf_surrounding_blank_lines_and_blank_context() -> None:
    text = "\r\n\r\n*** Begin Patch\r\n*** Update File: a\r\n@@\r\n a\r\n\r\n-b\r\n*** End Patch\r\n\r\n"
    patch = parse_patch(text)
    assert patch.changes == (UpdateFile("a", None, (Hunk(None, ((" ", "a"), (" ", ""), ("-", "b"))),)),)


def test_unified_diff_ranges_in_a_header_are_ignored() -> None:
    patch = parse_patch(
        "*** Begin Patch\n*** Update File: a\n@@ -3,2 +3,2 @@ class A:\n-x\n+y\n*** End Patch"
    )
    assert patch.changes[0] == UpdateFile("a", None, (Hunk("class A:", (("-", "x"), ("+", "y"))),))
    bare = parse_patch("*** Begin Patch\n*** Update File: a\n@@ -1 +1 @@\n-x\n+y\n*** End Patch")
    assert isinstance(bare.changes[0], UpdateFile)
    assert bare.changes[0].hunks[0].header is None


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param("", 1, id="empty"),
        pytest.param("*** Update File: a\n*** End Patch", 1, id="no-begin"),
        pytest.param("*** Begin Patch\n*** Delete File: a", 2, id="no-end"),
        pytest.param("*** Begin Patch\n*** End Patch", None, id="no-sections"),
        pytest.param("*** Begin Patch\n*** Frobnicate File: a\n*** End Patch", 2, id="unknown-section"),
        pytest.param("*** Begin Patch\n*** Add File: \n*** End Patch", 2, id="empty-path"),
        pytest.param("*** Begin Patch\n*** Add File: a\nno plus\n*** End Patch", 3, id="add-without-plus"),
        pytest.param("*** Begin Patch\n*** Update File: a\n*** End Patch", 2, id="update-without-hunks"),
        pytest.param("*** Begin Patch\n*** Update File: a\n x\n*** End Patch", 3, id="hunk-without-@@"),
        pytest.param("*** Begin Patch\n*** Update File: a\n@@\n*** End Patch", 3, id="empty-hunk"),
        pytest.param("*** Begin Patch\n*** Update File: a\n@@\n?x\n*** End Patch", 4, id="bad-hunk-line"),
        pytest.param(
            "*** Begin Patch\n*** Update File: a\n@@\n x\n*** End of File\n@@\n y\n*** End Patch",
            6,
            id="hunk-after-end-of-file",
        ),
    ],
)
def test_malformed_patches_are_patch_invalid_with_the_line(text: str, line: int | None) -> None:
    with pytest.raises(ToolError) as caught:
        parse_patch(text)
    assert caught.value.code == "patch_invalid"
    assert caught.value.details.get("line") == line


def test_too_many_files_is_patch_invalid() -> None:
    sections = "".join(f"*** Delete File: f{i}\n" for i in range(PATCH_MAX_FILES + 1))
    with pytest.raises(ToolError) as caught:
        parse_patch(f"*** Begin Patch\n{sections}*** End Patch")
    assert caught.value.code == "patch_invalid"


def _hunk(*lines: str, header: str | None = None, eof: bool = False) -> Hunk:
    ops: list[tuple[LineOp, str]] = []
    for line in lines:
        op = line[0]
        assert op in (" ", "-", "+")
        ops.append((" " if op == " " else "-" if op == "-" else "+", line[1:]))
    return Hunk(header, tuple(ops), eof)


def test_apply_replaces_in_order() -> None:
    content = "a\nb\nc\nd\nb\nc\n"
    hunks = [_hunk(" b", "-c", "+C"), _hunk(" b", "-c", "+C2")]
    assert apply_hunks(content, hunks, path="f") == "a\nb\nC\nd\nb\nC2\n"


def test_loose_match_keeps_the_files_own_context() -> None:
    # Context 'b' matches 'b  ' only when trailing whitespace is ignored; the file's own text stays.
    assert apply_hunks("a\nb  \nc\nd\n", [_hunk(" b", "-c", "+C")], path="f") == "a\nb  \nC\nd\n"


def test_an_exact_match_wins_over_an_earlier_loose_one() -> None:
    assert apply_hunks("b \nc\nb\nc\n", [_hunk(" b", "-c", "+C")], path="f") == "b \nc\nb\nC\n"


def test_header_narrows_the_search() -> None:
    content = "def a():\n    x = 1\ndef b():\n    x = 1\n"
    hunks = [_hunk("-    x = 1", "+    x = 2", header="def b():")]
    assert apply_hunks(content, hunks, path="f") == "def a():\n    x = 1\ndef b():\n    x = 2\n"


def test_end_of_file_pins_the_hunk_to_the_end() -> None:
    content = "x\ny\nx\n"
    assert apply_hunks(content, [_hunk("-x", "+z", eof=True)], path="f") == "x\ny\nz\n"
    with pytest.raises(ToolError) as caught:
        apply_hunks(content, [_hunk("-y", "+z", eof=True)], path="f")
    assert caught.value.code == "patch_conflict"


def test_pure_additions_go_after_the_header_or_at_the_end() -> None:
    assert apply_hunks("a\nb\n", [_hunk("+c")], path="f") == "a\nb\nc\n"
    assert apply_hunks("a\nb\n", [_hunk("+c", header="a")], path="f") == "a\nc\nb\n"


def test_crlf_files_stay_crlf_and_a_missing_final_newline_stays_missing() -> None:
    assert apply_hunks("a\r\nb\r\n", [_hunk(" a", "-b", "+c")], path="f") == "a\r\nc\r\n"
    assert apply_hunks("a\nb", [_hunk(" a", "-b", "+c")], path="f") == "a\nc"
    assert apply_hunks("a\n", [_hunk("-a")], path="f") == ""


def test_conflict_names_the_file_and_hunk() -> None:
    with pytest.raises(ToolError) as caught:
        apply_hunks("a\nb\n", [_hunk(" a", "-b", "+c"), _hunk("-zzz", "+y")], path="src/x.py")
    assert caught.value.code == "patch_conflict"
    assert caught.value.details == {"path": "src/x.py", "hunk": 2}
    assert "Hunk 2 of src/x.py" in caught.value.message


def test_missing_header_is_a_conflict() -> None:
    with pytest.raises(ToolError) as caught:
        apply_hunks("a\n", [_hunk("-a", header="nowhere")], path="f")
    assert caught.value.code == "patch_conflict"


def test_new_file_content_ends_every_line() -> None:
    assert new_file_content(["a", ""]) == "a\n\n"
    assert new_file_content([]) == ""


# --- Properties ------------------------------------------------------------------------------

_LINE_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"), max_size=12)
_PATH = st.lists(st.from_regex(r"[a-z0-9_]{1,6}(\.[a-z]{1,3})?", fullmatch=True), min_size=1, max_size=3).map(
    "/".join
)
_HEADER = st.none() | st.from_regex(r"[A-Za-z_][A-Za-z0-9_ ():]{0,15}[A-Za-z0-9_():]", fullmatch=True)
_HUNK = st.builds(
    Hunk,
    _HEADER,
    st.lists(st.tuples(st.sampled_from([" ", "-", "+"]), _LINE_TEXT), min_size=1, max_size=6).map(tuple),
    st.booleans(),
)


def _last_may_pin_eof(hunks: list[Hunk]) -> tuple[Hunk, ...]:
    """Only the last hunk of a file may carry '*** End of File'."""
    return tuple(Hunk(h.header, h.lines, h.end_of_file and i == len(hunks) - 1) for i, h in enumerate(hunks))


_CHANGE = st.one_of(
    st.builds(AddFile, _PATH, st.lists(_LINE_TEXT, max_size=5).map(tuple)),
    st.builds(DeleteFile, _PATH),
    st.builds(
        UpdateFile, _PATH, st.none() | _PATH, st.lists(_HUNK, min_size=1, max_size=3).map(_last_may_pin_eof)
    ),
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(_CHANGE, min_size=1, max_size=4).map(lambda changes: Patch(tuple(changes))))
def test_parse_render_round_trips(patch: Patch) -> None:
    assert parse_patch(render_patch(patch)) == patch


def _diff_hunks(old: list[str], new: list[str]) -> tuple[Hunk, ...]:
    hunks = []
    for group in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_grouped_opcodes(2):
        lines: list[tuple[LineOp, str]] = []
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines.extend((" ", line) for line in old[i1:i2])
                continue
            lines.extend(("-", line) for line in old[i1:i2])
            lines.extend(("+", line) for line in new[j1:j2])
        hunks.append(Hunk(None, tuple(lines)))
    return tuple(hunks)


_UNIQUE_LINES = st.lists(_LINE_TEXT, max_size=25, unique=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(old=_UNIQUE_LINES, new=st.lists(_LINE_TEXT, max_size=25), data=st.data())
def test_rendered_diff_applies_to_the_expected_content(
    old: list[str], new: list[str], data: st.DataObject
) -> None:
    # Unique original lines make every hunk's location unambiguous, as real context does.
    edits = data.draw(st.sampled_from(["replace", "mix"]))
    if edits == "mix":
        new = [line for line in old if data.draw(st.booleans())] + new
    original = new_file_content(old)
    expected = new_file_content(new)
    hunks = _diff_hunks(old, new)
    patch = Patch((UpdateFile("f.txt", None, hunks),)) if hunks else None
    if patch is None:
        assert original == expected
        return
    parsed = parse_patch(render_patch(patch))
    change = parsed.changes[0]
    assert isinstance(change, UpdateFile)
    assert apply_hunks(original, change.hunks, path="f.txt") == expected


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        st.text(max_size=200).map(lambda body: f"*** Begin Patch\n{body}\n*** End Patch"),
        st.lists(
            st.sampled_from(
                [
                    "*** Begin Patch",
                    "*** End Patch",
                    "*** Add File: a",
                    "*** Update File: a",
                    "*** Delete File: a",
                    "*** Move to: b",
                    "*** End of File",
                    "@@",
                    "@@ -1,2 +1 @@",
                    " x",
                    "-x",
                    "+x",
                    "",
                    "garbage",
                ]
            ),
            max_size=12,
        ).map("\n".join),
    )
)
def test_garbage_only_ever_raises_patch_invalid(text: str) -> None:
    try:
        parse_patch(text)
    except ToolError as exc:
        code = exc.code
    else:
        code = "patch_invalid"
    assert code == "patch_invalid"
