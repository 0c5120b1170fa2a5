"""Text as the journal's FTS5 indexes see it, and search queries that cannot inject FTS syntax.

The indexes use SQLite's `unicode61` tokenizer, which splits on spaces and punctuation. Chinese
and Japanese have no spaces, so a whole sentence would be one token and "继续" would never match
inside it. Before indexing, every CJK character is set apart by spaces (one token per
character); a query term is put into the same form and quoted as a phrase, so "继续" matches the
two characters side by side anywhere in a sentence.

Every query term becomes a quoted FTS5 string with embedded quotes doubled, so `AND`, `NEAR`,
`*`, `^`, `:`, parentheses and quotes in a query are plain text, never FTS syntax. Terms are
confined to the `body` column; the turn index also has a `chain` column (the continuity id) so a
search inside one chain intersects with that chain's rows in the index instead of ranking every
match in the journal and filtering afterwards.

The indexes are contentless (`content=''`): they keep only the index, the journal keeps the
text. Removing a row from such an index needs the exact text that was indexed, which
`index_form` recomputes from the stored text (it is a pure function of it).
"""

from __future__ import annotations

import re

#: A query longer than this many terms is cut: each term is one more posting list to intersect.
MAX_QUERY_TERMS = 16
#: Characters of context an excerpt shows around the first match.
EXCERPT_CHARS = 240

_CJK = re.compile(
    "["
    "\u2e80-\u2fdf"  # CJK and Kangxi radicals
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3100-\u312f"  # Bopomofo
    "\u3400-\u4dbf"  # CJK Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\U00020000-\U0003134f"  # CJK Extensions B..G
    "]"
)

_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def index_form(text: str) -> str:
    """`text` as the FTS indexes store it: CJK characters set apart, control characters blanked.

    FTS5 reads a string only up to a NUL, so control characters never reach it.
    """
    return _CJK.sub(r" \g<0> ", _CONTROL.sub(" ", text))


def query_terms(query: str) -> list[str]:
    """The searchable terms of a free-text query: whitespace-separated, each with a letter or digit."""
    terms = [term for term in _CONTROL.sub(" ", query).split() if any(ch.isalnum() for ch in term)]
    return terms[:MAX_QUERY_TERMS]


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def match_expression(terms: list[str], *, require_all: bool, chain: str | None = None) -> str:
    """An FTS5 MATCH expression over the `body` column, every term a quoted phrase.

    With `chain`, only rows whose `chain` column holds that continuity id match (the turn index
    has that column; the checkpoint index does not).
    """
    phrases = (" AND " if require_all else " OR ").join(_quoted(index_form(term)) for term in terms)
    expression = f"body : ({phrases})"
    return expression if chain is None else f"chain : {_quoted(chain)} AND {expression}"


def excerpt(text: str, terms: list[str], width: int = EXCERPT_CHARS) -> str:
    """Up to `width` characters of `text` around the first term found (the start if none is)."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    folded = flat.casefold()
    hits = [at for at in (folded.find(term.casefold()) for term in terms) if at >= 0]
    start = max(0, min(hits) - width // 4) if hits else 0
    start = min(start, len(flat) - width)
    window = flat[start : start + width]
    return ("…" if start > 0 else "") + window + ("…" if start + width < len(flat) else "")


def checkpoint_text(content: dict[str, object]) -> str:
    """The searchable text of a Work Memory checkpoint's content (goal, then every list)."""
    parts: list[str] = []
    for value in content.values():
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):
            parts.extend(item for item in value if isinstance(item, str))
    return "\n".join(parts)


def clip(text: str, limit: int) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis when cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
