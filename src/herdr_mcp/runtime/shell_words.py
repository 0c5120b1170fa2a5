"""Bash's tokens with their places in the command text, for the audit log's redaction.

`scan(text)` splits a `bash -c` command line into words, operators, comments and heredoc bodies,
each with its start and end offset in `text`, so a redaction can replace the span of one value
and leave every other character as it was. It follows the parts of bash's grammar that decide
where a word ends (bash(1), "DEFINITIONS", "QUOTING", "Command Substitution", "Here Documents"):

- metacharacters end a word outside quotes: space, tab, newline, `| & ; ( ) < >`; control and
  redirection operators are the longest match of `|| && ;; ;& ;;& |& & ; | << <<- <<< >> >& <&
  <> >| &> &>> < >`;
- `'...'` is literal; `"..."` keeps `\\` escapes and expands `$(...)`, backticks and `${...}`;
  `$'...'` (ANSI-C) keeps `\\'`; a backslash outside quotes quotes the next character, and
  backslash-newline joins lines;
- `$(`, a backtick and `(` open a nested command list (a command substitution or a subshell)
  closed by `)` or the matching backtick; a word around a substitution (`a$(b)c`, `"x $(y) z"`)
  is cut into fragments at the substitution, so what a substitution runs is always scanned as
  commands of its own, never as part of a value;
- `#` at the start of a word begins a comment to the end of the line;
- after the newline that ends a line holding `<<WORD` or `<<-WORD`, the following lines up to
  the line `WORD` (leading tabs removed for `<<-`) are a heredoc body, not shell syntax.

Not modelled, because none of it changes where a word or a command ends: aliases, `case`
patterns (their `)` is an operator here), keywords, arithmetic and history expansion. An
unterminated quote, `${` or substitution never raises: the word runs to the end of the text and
is marked `complete=False`, and an unterminated heredoc body runs to the end. The scanner keeps
its nesting on a list, not the Python stack, so no nesting depth can exhaust it; it is linear
in the length of the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

WORD = "word"
#: A control or redirection operator, or a newline.
OPERATOR = "operator"
#: `$(`, `(` or an opening backtick: a nested command list starts.
OPEN = "open"
#: The `)` or backtick that ends the innermost nested command list.
CLOSE = "close"
COMMENT = "comment"
HEREDOC = "heredoc"

REDIRECTIONS = frozenset({"<", ">", ">>", ">&", "<&", "<>", ">|", "&>", "&>>", "<<<", "<<", "<<-"})
_OPERATORS_3 = frozenset({";;&", "<<-", "<<<", "&>>"})
_OPERATORS_2 = frozenset({"||", "&&", ";;", ";&", "|&", "<<", ">>", ">&", "<&", "<>", ">|", "&>"})
_PLAIN = re.compile(r"[^ \t\n'\"\\$`;&|()<>]+")
_IN_DOUBLE_QUOTES = re.compile(r"[^\"\\$`]+")
_IN_BRACES = re.compile(r"[^}\"'\\$`]+")

# What is on the scanner's stack: a command list (top level, or closed by `)` or a backtick),
# double quotes, or `${`.
_TOP, _PAREN, _BACKTICK, _DQUOTE, _BRACE = "", ")", "`", '"', "}"


@dataclass(slots=True)
class Token:
    kind: str
    start: int
    end: int
    #: WORD: the literal value (quotes removed, escapes resolved; a `${...}` kept as written).
    value: str = ""
    #: WORD: False when a quote or `${` is still open at the end of the text.
    complete: bool = True
    #: WORD: this fragment continues a word after a substitution (`c` of `a$(b)c`).
    continues: bool = False
    #: HEREDOC: the spans of its body lines; whether the body expands `$(...)` (unquoted
    #: delimiter); whether its delimiter line was found.
    lines: tuple[tuple[int, int], ...] = ()
    expands: bool = False
    terminated: bool = True


@dataclass(slots=True)
class _Frame:
    kind: str
    #: The nested list or quote is part of a word: after it closes, the word goes on.
    in_word: bool = False


@dataclass
class _Scanner:
    text: str
    tokens: list[Token] = field(default_factory=list)
    pos: int = 0
    stack: list[_Frame] = field(default_factory=lambda: [_Frame(_TOP)])
    word_start: int | None = None
    value: list[str] = field(default_factory=list)
    continues: bool = False
    complete: bool = True
    #: Set by `<<`/`<<-` (True: strip tabs): the next word is a heredoc delimiter.
    delimiter_next: bool | None = None
    #: Heredocs whose bodies start after the next newline: (delimiter, strip tabs, expands).
    pending: list[tuple[str, bool, bool]] = field(default_factory=list)

    def run(self, limit: int | None) -> list[Token]:
        text = self.text
        while self.pos < len(text):
            if limit is not None and len(self.tokens) >= limit:
                return self.tokens
            kind = self.stack[-1].kind
            if kind == _DQUOTE:
                self._in_double_quotes()
            elif kind == _BRACE:
                self._in_braces()
            else:
                self._in_commands(kind)
        if len(self.stack) > 1 and self.stack[-1].kind in (_DQUOTE, _BRACE):
            self.complete = False
        self._end_fragment()
        if self.pending:
            self.tokens.append(Token(HEREDOC, len(text), len(text), expands=True, terminated=False))
        return self.tokens

    # --- words ------------------------------------------------------------------------------

    def _begin(self) -> None:
        if self.word_start is None:
            self.word_start = self.pos

    def _end_fragment(self) -> None:
        if self.word_start is None:
            return
        start, raw_value = self.word_start, "".join(self.value)
        if self.pos > start:
            self.tokens.append(Token(WORD, start, self.pos, raw_value, self.complete, self.continues))
            if self.delimiter_next is not None and not self.continues:
                raw = self.text[start : self.pos]
                expands = not any(quote in raw for quote in "'\"\\")
                self.pending.append((raw_value, self.delimiter_next, expands))
                self.delimiter_next = None
        self.word_start, self.value, self.continues, self.complete = None, [], False, True

    def _emit(self, kind: str, length: int) -> None:
        self.tokens.append(Token(kind, self.pos, self.pos + length))
        self.pos += length

    def _open(self, kind: str, length: int, *, in_word: bool) -> None:
        self._end_fragment()
        self._emit(OPEN, length)
        self.stack.append(_Frame(kind, in_word))

    def _close(self) -> None:
        self._end_fragment()
        self._emit(CLOSE, 1)
        frame = self.stack.pop()
        if frame.in_word:
            # The word around the substitution goes on after it, as a fragment of its own.
            self.word_start, self.continues = self.pos, True

    def _single_quoted(self, ansi: bool) -> None:
        """`'...'` (or `$'...'` with its backslash escapes) from self.pos, the quote itself."""
        text, body = self.text, self.pos + (2 if ansi else 1)
        end = body
        while True:
            end = text.find("'", end)
            if end < 0 or not ansi:
                break
            before = end - 1
            while before >= body and text[before] == "\\":
                before -= 1
            if (end - 1 - before) % 2 == 0:
                break
            end += 1
        if end < 0:
            self.value.append(text[body:])
            self.complete = False
            self.pos = len(text)
        else:
            self.value.append(text[body:end])
            self.pos = end + 1

    def _dollar(self) -> bool:
        """`$(`, `${` or `$'` at self.pos; False for a plain `$`."""
        following = self.text[self.pos + 1 : self.pos + 2]
        if following == "(":
            self._open(_PAREN, 2, in_word=True)
        elif following == "{":
            self._begin()
            self.value.append("${")
            self.stack.append(_Frame(_BRACE))
            self.pos += 2
        elif following == "'" and self.stack[-1].kind not in (_DQUOTE, _BRACE):
            self._begin()
            self._single_quoted(ansi=True)
        else:
            return False
        return True

    def _escaped(self) -> None:
        self.value.append(self.text[self.pos + 1 : self.pos + 2])
        self.pos += 2

    # --- contexts ---------------------------------------------------------------------------

    def _in_commands(self, closer: str) -> None:
        text = self.text
        plain = _PLAIN.match(text, self.pos)
        if plain is not None and (self.word_start is not None or text[self.pos] != "#"):
            self._begin()
            self.value.append(plain[0])
            self.pos = plain.end()
            return
        char = text[self.pos]
        if char in " \t":
            self._end_fragment()
            self.pos += 1
        elif char == "\n":
            self._end_fragment()
            self._emit(OPERATOR, 1)
            if self.pending:
                self._heredoc_bodies()
        elif char == "#" and self.word_start is None:
            end = text.find("\n", self.pos)
            end = len(text) if end < 0 else end
            self.tokens.append(Token(COMMENT, self.pos, end))
            self.pos = end
        elif char == "'":
            self._begin()
            self._single_quoted(ansi=False)
        elif char == '"':
            self._begin()
            self.stack.append(_Frame(_DQUOTE))
            self.pos += 1
        elif char == "\\":
            if text.startswith("\\\n", self.pos):
                self.pos += 2  # a line continuation: nothing, inside a word or between words
            else:
                self._begin()
                self._escaped()
        elif char == "`":
            if closer == _BACKTICK:
                self._close()
            else:
                self._open(_BACKTICK, 1, in_word=True)
        elif char == "$" and self._dollar():
            pass
        elif char == "(":
            self._open(_PAREN, 1, in_word=False)
        elif char == ")":
            if closer == _PAREN:
                self._close()
            else:
                self._end_fragment()
                self._emit(OPERATOR, 1)
        elif char in ";&|<>":
            self._end_fragment()
            self._operator()
        else:  # a `$` that starts no expansion
            self._begin()
            self.value.append(char)
            self.pos += 1

    def _operator(self) -> None:
        text, pos = self.text, self.pos
        for length, known in ((3, _OPERATORS_3), (2, _OPERATORS_2)):
            if text[pos : pos + length] in known:
                break
        else:
            length = 1
        operator = text[pos : pos + length]
        self._emit(OPERATOR, length)
        if operator in ("<<", "<<-"):
            self.delimiter_next = operator == "<<-"

    def _in_double_quotes(self) -> None:
        if self.text[self.pos] == '"':
            self.stack.pop()
            self.pos += 1
        else:
            self._expanding(_IN_DOUBLE_QUOTES)

    def _in_braces(self) -> None:
        char = self.text[self.pos]
        if char == "}":
            self.stack.pop()
            self.value.append("}")
            self.pos += 1
        elif char == '"':
            self.stack.append(_Frame(_DQUOTE))
            self.pos += 1
        elif char == "'":
            self._single_quoted(ansi=False)
        else:
            self._expanding(_IN_BRACES)

    def _expanding(self, plain: re.Pattern[str]) -> None:
        """A character where backslashes, backticks and `$` act, as inside `"..."` and `${...}`."""
        text, char = self.text, self.text[self.pos]
        if char == "\\":
            self._escaped()
        elif char == "`":
            self._open(_BACKTICK, 1, in_word=True)
        elif char == "$" and self._dollar():
            pass
        else:
            match = plain.match(text, self.pos)
            end = self.pos + 1 if match is None else match.end()
            self.value.append(text[self.pos : end])
            self.pos = end

    # --- heredocs ---------------------------------------------------------------------------

    def _heredoc_bodies(self) -> None:
        """The bodies of the heredocs opened on the line just ended, in order."""
        text = self.text
        for delimiter, strip_tabs, expands in self.pending:
            start, lines = self.pos, list[tuple[int, int]]()
            while self.pos < len(text):
                newline = text.find("\n", self.pos)
                end = len(text) if newline < 0 else newline
                line = text[self.pos : end]
                after = len(text) if newline < 0 else newline + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    self.tokens.append(Token(HEREDOC, start, self.pos, lines=tuple(lines), expands=expands))
                    self.pos = after
                    break
                lines.append((self.pos, end))
                self.pos = after
            else:
                self.tokens.append(
                    Token(HEREDOC, start, len(text), lines=tuple(lines), expands=expands, terminated=False)
                )
        self.pending = []


def scan(text: str, limit: int | None = None) -> list[Token]:
    """The tokens of `text` in order; see the module docstring. With a `limit`, scanning stops
    once that many tokens are found (the rest of the text is not looked at)."""
    return _Scanner(text).run(limit)
