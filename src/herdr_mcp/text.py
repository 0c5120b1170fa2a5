"""Text at the boundaries: the one place that decides what happens to text UTF-8 cannot carry.

Two kinds of string reach the runtime and the native host that cannot be encoded as UTF-8:

- a lone surrogate (U+D800-U+DFFF on its own). JSON may spell one (`"\\ud800"`), Chrome passes
  them through native messaging, and JavaScript makes one by cutting a string between the two
  halves of a pair. `json.loads` gives a `str` holding it, and `.encode("utf-8")` (a frame, an
  HTTP body, SQLite, a subprocess argument) raises.
- a name made of bytes. A Linux file name is bytes; `os.fsdecode` and `os.listdir` give a `str`
  whose undecodable bytes are U+DC80-U+DCFF ("surrogateescape"), which encode back to the same
  bytes as a file name but to nothing as UTF-8 text.

The rules (docs/runtime.md "Text", docs/browser-protocol.md section 4 "Text"):

- Text coming in as JSON (a native-messaging frame, a /browser body, MCP tool arguments) and text
  stored (the continuity journal, Work Memory, handoff): every lone surrogate becomes U+FFFD
  (`clean`, `clean_json`). Undecodable UTF-8 bytes in a frame become U+FFFD too (`decode`).
- A file name shown by the fs tools: each undecodable byte is written `\\xNN` (two lower-case hex
  digits) and the entry says `path_escaped: true` (`show_name`); a literal backslash that would
  read as such an escape is written `\\x5c`, so the shown form is unambiguous. A path argument
  takes the same escapes back (`parse_name`), so a listed name can be read, grepped or edited.
- Anything leaving as JSON (`safe_json`, `dumps`): a surrogate from bytes (U+DC80-U+DCFF) is
  shown `\\xNN`, any other lone surrogate U+FFFD. This is the backstop: no answer, frame, event
  or log line fails to encode, whatever a tool returned.

Every function here is iterative (no recursion), so a value nested however deep is handled.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

#: U+FFFD, what a lone surrogate becomes.
REPLACEMENT = "\ufffd"

_SURROGATE = re.compile("[\ud800-\udfff]")
#: In a path argument: `\xNN` for a byte 0x80-0xff, or `\x5c` for a backslash.
_NAME_ESCAPE = re.compile(r"\\x([89a-fA-F][0-9a-fA-F]|5[cC])")


def clean(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (unchanged, the same object, when it has none).

    In a Python `str` a well-formed pair is one code point, so every code point in
    U+D800-U+DFFF is a lone half."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(REPLACEMENT, text)


def _outgoing(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else REPLACEMENT


def clean_output(text: str) -> str:
    """`text` as it may leave: a byte that surrogateescape kept (U+DC80-U+DCFF) as `\\xNN`, any
    other lone surrogate as U+FFFD."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(_outgoing, text)


def decode(data: bytes) -> str:
    """UTF-8 bytes as text, each undecodable sequence U+FFFD (Python's replacement rule), and
    lone surrogates written as JSON escapes left for `clean_json` after parsing."""
    return data.decode("utf-8", errors="replace")


def _walk(value: Any, fix: Any) -> Any:
    """`value` (JSON-shaped: dict, list, str, scalars) with `fix` applied to every string, keys
    included. Containers are copied only where something changed; iterative, so depth is free."""
    if isinstance(value, str):
        return fix(value)
    if not isinstance(value, dict | list):
        return value
    # Post-order over an explicit stack: each container is rebuilt after its children.
    root: list[Any] = [value]
    stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
    pending: list[tuple[Any, Any, Any, list[Any]]] = []
    while stack:
        parent, key, node = stack.pop()
        if isinstance(node, dict):
            items = list(node.items())
            slots: list[Any] = [None] * (2 * len(items))
            pending.append((parent, key, node, slots))
            for index, (name, item) in enumerate(items):
                slots[2 * index] = fix(name) if isinstance(name, str) else name
                if isinstance(item, dict | list):
                    stack.append((slots, 2 * index + 1, item))
                else:
                    slots[2 * index + 1] = fix(item) if isinstance(item, str) else item
        elif isinstance(node, list):
            slots = [None] * len(node)
            pending.append((parent, key, node, slots))
            for index, item in enumerate(node):
                if isinstance(item, dict | list):
                    stack.append((slots, index, item))
                else:
                    slots[index] = fix(item) if isinstance(item, str) else item
    # Children were pushed after their parents, so rebuilding in reverse finishes children first.
    for parent, key, node, slots in reversed(pending):
        if isinstance(node, dict):
            pairs = [(slots[i], slots[i + 1]) for i in range(0, len(slots), 2)]
            same = all(a is b and c is d for (a, c), (b, d) in zip(node.items(), pairs, strict=True))
            parent[key] = node if same else dict(pairs)
        else:
            same = all(a is b for a, b in zip(node, slots, strict=True))
            parent[key] = node if same else slots
    return root[0]


def _all_ascii(value: Any) -> bool:
    """Whether every string in `value` (keys too) is ASCII: then neither `clean` nor
    `clean_output` changes anything, and `value` is its own answer (no copy, no rebuilding).
    Iterative, and it allocates only its stack."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                return False
        elif isinstance(item, dict):
            for key in item:
                if isinstance(key, str) and not key.isascii():
                    return False
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def clean_json(value: Any) -> Any:
    """`value` with `clean` applied to every string in it (keys too); see `_walk`."""
    return value if _all_ascii(value) else _walk(value, clean)


def safe_json(value: Any) -> Any:
    """`value` with `clean_output` applied to every string in it (keys too).

    Nearly every value has nothing to clean: one whose strings are all ASCII (`_all_ascii`, which
    allocates nothing) or one that a `json.dumps` (C) encodes as UTF-8 is its own answer, as
    `_walk` would give. Only a value that does neither (a lone surrogate somewhere), that json
    cannot dump or that is nested past its recursion limit is walked (a 2,000-entry fs_list
    answer: one dump, about a fifth of the walk)."""
    if _all_ascii(value):
        return value
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, TypeError, ValueError, RecursionError):
        return _walk(value, clean_output)
    return value


def dumps(value: Any, *, ensure_ascii: bool = False, **options: Any) -> str:
    """`json.dumps` whose result always encodes as UTF-8: tried as it is first (the common case
    costs one attempt), and on a surrogate again after `safe_json`."""
    text = json.dumps(value, ensure_ascii=ensure_ascii, **options)
    if ensure_ascii or text.isascii():
        # ASCII output spells a surrogate as an escape; the reader would get it back.
        if "\\ud" not in text:
            return text
        return json.dumps(safe_json(value), ensure_ascii=ensure_ascii, **options)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(safe_json(value), ensure_ascii=ensure_ascii, **options)
    return text


def show_name(name: str) -> tuple[str, bool]:
    """A file name or path (as `os.fsdecode` gives it) as text, and whether it was escaped.

    Each undecodable byte (U+DC80-U+DCFF) becomes `\\xNN`; when that happens, or when the name
    holds a literal backslash that `parse_name` would read as an escape, that backslash becomes
    `\\x5c`. Any other lone surrogate (not from a file system) becomes U+FFFD. A name with none of
    these is returned unchanged with False."""
    if name.isascii() and "\\x" not in name:
        return name, False
    if not _SURROGATE.search(name) and not _NAME_ESCAPE.search(name):
        return name, False
    parts: list[str] = []
    for index, char in enumerate(name):
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:
            parts.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            parts.append(REPLACEMENT)
        elif char == "\\" and _NAME_ESCAPE.match(name, index):
            parts.append("\\x5c")
        else:
            parts.append(char)
    return "".join(parts), True


def parse_name(text: str) -> str:
    """A path argument as a file-system name: `\\xNN` (0x80-0xff) is that byte (as surrogateescape
    holds it, so `os.fsencode` gives the byte back) and `\\x5c` a backslash; the inverse of
    `show_name`. Any other text, lone surrogates included, is left as it is."""
    if "\\x" not in text:
        return text

    def byte(match: re.Match[str]) -> str:
        value = int(match.group(1), 16)
        return "\\" if value == 0x5C else chr(0xDC00 + value)

    return _NAME_ESCAPE.sub(byte, text)


def shown_path(entry: dict[str, Any], key: str = "path") -> dict[str, Any]:
    """`entry` with its name `entry[key]` through `show_name`, and `<key>_escaped: true` beside it
    when that escaped something (the flag is absent otherwise)."""
    shown, escaped = show_name(entry[key])
    entry[key] = shown
    if escaped:
        entry[f"{key}_escaped"] = True
    return entry


def shown_answer(answer: dict[str, Any]) -> dict[str, Any]:
    """An fs tool's answer with its own `root` and `path` (those present) through `shown_path`."""
    for key in ("root", "path"):
        if isinstance(answer.get(key), str):
            shown_path(answer, key)
    return answer


_Store = TypeVar("_Store")
_Result = TypeVar("_Result")


def cleans_params(
    function: Callable[[_Store, dict[str, Any]], _Result],
) -> Callable[[_Store, dict[str, Any]], _Result]:
    """A state entry point `function(store, params)` that stores text: it gets `clean_json(params)`,
    so no lone surrogate reaches SQLite (which cannot encode one) or the journal's indexes."""

    @functools.wraps(function)
    def wrapper(store: _Store, params: dict[str, Any]) -> _Result:
        return function(store, clean_json(params))

    return wrapper
