"""Text from remote or untrusted sources, made safe to show on a terminal.

Release index names, manifest fields, URLs, Herdr output and anything a candidate runtime
answers can carry terminal control sequences (an ESC in an asset name reached stderr, issue 9)
or characters that make text read differently from what it is (bidirectional overrides,
zero-width characters). `printable` shows each such character as a visible escape instead, so
what a person reads is what was received. Every line our commands print that can hold such text
goes through it; JSON output needs nothing more when `json.dumps` keeps its default
`ensure_ascii=True` (every control and non-ASCII character is then a `\\u` escape).
"""

from __future__ import annotations

import re

# C0 controls (tab and, where asked, newline excepted), DEL, C1 controls (CSI is U+009B), the
# bidirectional marks, embeddings, overrides and isolates (Unicode TR9: "Trojan Source"),
# zero-width characters, the line and paragraph separators and the byte order mark.
_UNSAFE = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff"
_UNSAFE_ONE_LINE = re.compile(f"[\n{_UNSAFE}]")
_UNSAFE_LINES = re.compile(f"[{_UNSAFE}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every control or invisible formatting character written as `\\xNN`/`\\uNNNN`.

    Newlines are escaped too unless `keep_newlines` (an error is always one line).
    """
    pattern = _UNSAFE_LINES if keep_newlines else _UNSAFE_ONE_LINE
    return pattern.sub(_escape, text)


def error_line(code: str, message: str) -> str:
    """The one-line form of a refusal: `herdr-mcp: error: <code>: <message>`, made printable."""
    return printable(f"herdr-mcp: error: {code}: {message}")
