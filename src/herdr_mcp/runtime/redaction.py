"""What the audit log keeps of a command line: the command as run, with only the spans of secret
values replaced by `[redacted]` and heredoc bodies withheld (docs/runtime.md, "Audit log").

The command is split into bash's tokens with their offsets (`shell_words`), and every rule
names a span inside one token: the value of one word, or part of one word. The record is the
original text with those spans replaced, so no rule can reach past the word it is about and
take a following command (`X_TOKEN=1;rm -f x` keeps `;rm -f x`), whatever the separator:
`;`, `&&`, `||`, `|`, `&`, a newline, a subshell, `$(...)`, backticks or a heredoc.

Redacted:
- anywhere, including inside unterminated quotes and comments: the values the runtime knows
  to be secret (`known`: its bearer, the link's, the Edge device secret) and the token shapes
  their issuers publish;
- in a complete word: `NAME=value` and `--option=value` whose name says token/secret/password/
  pass/api-key/access-key/private-key/credential/cookie (also inside a word, as in a URL's query
  or `-d 'password=...'`), JSON `"password": "..."`, Authorization and `X-...-Key/Token` headers
  and cookies, `Bearer <token>`, passwords in URLs (`https://user:pw@host`), `-u user:password`,
  private key blocks;
- the word after `--option` of such a name (not `--no-...`, `...-file`, `...-stdin`: those
  name no value), after `-u/--user` (the part after `:`), `Authorization:`, `Bearer`;
- the credential flags of known programs: `sshpass -p`, `docker|podman|nerdctl|buildah|skopeo|
  helm|oras ... login -p`, `redis-cli -a`, `gh secret set -b/--body`, the attached `-p<pw>` of
  the MySQL/MariaDB clients, and the value of a secret-named key in `aws configure set`,
  `npm|pnpm|yarn config set` and `git config`.

A word whose quote is still open at the end of the text (bash refuses that line: it did not
run) is recorded as written except for the known values: no rule takes the rest of the text for
a value. A value computed by a command substitution (`TOKEN=$(cat f)`) is recorded: what runs
is the substitution, and it is scanned as commands of its own. Not redacted: secrets in a shape
none of these rules knows, split, encoded or built at run time (`"$A$B"`), and what a command
writes or reads (files, pipes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from herdr_mcp.runtime import shell_words
from herdr_mcp.runtime.shell_words import CLOSE, COMMENT, HEREDOC, OPEN, OPERATOR, REDIRECTIONS, WORD, Token

REDACTED = "[redacted]"
#: A known secret shorter than this is not one we hold (the token files keep 43 characters).
MIN_KNOWN_SECRET_CHARS = 16
#: How many levels of quoted command lines inside a command are scanned (`bash -c "ssh h '...'"`).
MAX_DEPTH = 3

# Every pattern starts where no character of its own run precedes it and bounds its repeats, so
# a hostile 64 KiB command is scanned in linear time (a regex engine backtracks otherwise).
# A key block's lines are base64 or `Name: value` headers (RFC 7468, RFC 1421); a line of anything
# else ends it, so no command written between BEGIN and END is taken for part of a key.
_PRIVATE_KEY = re.compile(
    r"-----BEGIN [A-Z0-9 ]{0,64}PRIVATE KEY-----"
    r"(?:\r?\n(?:[A-Za-z0-9+/=]{1,256}|[A-Za-z-]{1,64}:[ \t][^\n;&|`$()<>]{0,256})?)*"
    r"(?:\r?\n-----END [A-Z0-9 ]{0,64}PRIVATE KEY-----)?"
)
# Where a value inside a word stops at the latest: a quoted string may be a command line of its
# own (`bash -c '...'`, `ssh host '...'`), and what follows one of these may be a command.
_SEPARATOR = re.compile(r"[;&|()<>\n`]|\$\(")
# Token shapes published by their issuers (GitHub, GitLab, Slack, OpenAI/Anthropic-style `sk-`,
# AWS access key ids, Google API keys, npm, PyPI, Stripe) and JWTs. None of them can hold a shell
# separator or a space, so they are replaced wherever they appear.
_KNOWN_TOKENS = re.compile(
    r"(?<![A-Za-z0-9_-])(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}|sk-[A-Za-z0-9_-]{20,}|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|AIza[0-9A-Za-z_-]{35}|npm_[A-Za-z0-9]{36}|pypi-[A-Za-z0-9_-]{50,}|[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|eyJ[A-Za-z0-9_-]{5,4096}\.[A-Za-z0-9_-]{5,4096}\.[A-Za-z0-9_-]{5,4096})"
)
#: A literal part of each alternative of `_KNOWN_TOKENS` (`gh[pousr]_` holds `gh`, `[rs]k_live_`
#: `k_live_`, ...); tests/runtime/test_audit_redaction.py checks every alternative holds one.
_TOKEN_ANCHORS = (
    "gh", "github_pat_", "glpat-", "xox", "sk-", "AKIA", "ASIA", "AIza", "npm_", "pypi-", "k_live_",
    "k_test_", "eyJ",
)  # fmt: skip
# Inside one word (group 1 is kept, the rest of the match is the value).
_AUTH_HEADER = re.compile(
    r"(?i)(?<![\w-])((?:proxy-)?authorization[ \t]*:[ \t]*(?:(?:bearer|basic|token|digest)[ \t]+)?)[^\s'\"]+"
)
_KEY_HEADER = re.compile(
    r"(?i)(?<![\w-])((?:x-[a-z0-9-]{0,64}?(?:token|key|secret|auth)[a-z0-9-]{0,64}|cookie)[ \t]*:[ \t]*)"
    r"[^'\"\n]+"
)
_BEARER = re.compile(r"(?i)(?<![\w-])(bearer[ \t]+)[A-Za-z0-9._~+/=-]{8,}")
_URL_PASSWORD = re.compile(
    r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]{0,31}://[^/\s:@'\"]{1,256}:)[^@\s/'\"]{1,256}(?=@)"
)
_USER_PASSWORD = re.compile(r"(?<![\w-])((?:-u|--user)(?:[ \t]+|=)?['\"]?[^:\s'\"]{1,256}:)[^\s'\"]+")
_JSON_SECRET = re.compile(r"(\"([\w.-]{1,128})\"[ \t]*:[ \t]*\")[^\"\n]{1,4096}(?=\")")
# NAME=value inside a word: at the word's start the value is the rest of the word; elsewhere
# (a URL's query, a quoted form body) it ends at `&`, `;`, a quote or a space.
_ASSIGNMENT = re.compile(r"(?<![\w.-])(-{0,2}([\w.-]{1,128}))=")
_INNER_VALUE = re.compile(r"[^\s'\"&;]+")
_SECRET_WORD = re.compile(
    r"(?i)token|secret|passw|(?:^|[^a-z])pass(?:phrase)?(?:$|[^a-z])|sshpass|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|credential|cookie"
)
# Names that say where a secret is, or that there is none: their value is not the secret.
_NOT_A_VALUE = re.compile(r"(?i)^-*no-|[_-](?:file|path|dir|env|stdin|command|cmd)$")
_OPTION_NAME = re.compile(r"--?[A-Za-z][\w-]{0,128}")
_HEADER_NAME = re.compile(
    r"(?i)(?:proxy-)?authorization:|x-[a-z0-9-]{0,64}(?:token|key|secret|auth)[a-z0-9-]{0,64}:"
)
_AUTH_SCHEMES = frozenset({"bearer", "basic", "token", "digest"})
_TOKEN_VALUE = re.compile(r"[A-Za-z0-9._~+/=-]{8,}")
_EXPANSION = re.compile(r"(?<!\\)(?:\$\(|`)")

#: (programs, the words that must follow the program first, the flags whose value is a secret,
#: whether only the attached form `-p<value>` is one).
_CREDENTIAL_FLAGS: tuple[tuple[frozenset[str], tuple[str, ...], tuple[str, ...], bool], ...] = (
    (
        frozenset({"docker", "podman", "nerdctl", "buildah", "skopeo", "helm", "oras"}),
        ("login",),
        ("-p",),
        False,
    ),
    (frozenset({"redis-cli"}), (), ("-a",), False),
    (frozenset({"gh"}), ("secret", "set"), ("-b", "--body"), False),
    (
        frozenset({"mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mariadb"})
        | frozenset({"mariadb-dump", "mariadb-admin"}),
        (),
        ("-p",),
        True,
    ),
)
#: Programs that set `KEY VALUE` pairs after these words; the value of a secret-named key is one.
_SETTERS: dict[str, tuple[str, ...]] = {"aws": ("configure", "set"), "npm": ("config", "set")}
_SETTERS |= {"pnpm": ("config", "set"), "yarn": ("config", "set"), "git": ("config",)}
#: Options of those setters that take no value (every other option is taken to take one).
_SETTER_FLAGS = frozenset(
    {"--debug", "--no-verify-ssl", "--no-paginate", "--no-sign-request", "--no-cli-pager", "--global"}
    | {"--local", "--system", "--worktree", "--add", "--replace-all", "--location=project", "--json"}
)
_PROGRAMS = frozenset({"sshpass", *_SETTERS}).union(*(programs for programs, *_ in _CREDENTIAL_FLAGS))
#: sshpass's options that take a value (its `-p` aside); its first other word is the command it runs.
_SSHPASS_VALUED = frozenset({"-f", "-d", "-P"})

Edit = tuple[int, int, str]


def redact_command(text: str, known: Sequence[str] = (), *, kept_chars: int | None = None) -> str:
    """`text` with its secret values replaced and heredoc bodies withheld; see the module
    docstring. `kept_chars`: only that many characters of the result are kept, so scanning stops
    after that many tokens (each token keeps at least one character of the result: a hostile
    64 KiB command costs what its kept part does)."""
    return _apply(text, command_edits(text, known, limit=kept_chars))


def redact_known(text: str, known: Sequence[str] = ()) -> str:
    """`text` (a path, an identifier) with the known secrets and published token shapes replaced."""
    return _apply(text, list(_known_edits(text, known)))


def command_edits(
    text: str, known: Sequence[str] = (), *, depth: int = 0, limit: int | None = None
) -> list[Edit]:
    """The spans of `text` to replace, as (start, end, replacement). A quoted word that holds
    a command line of its own (`bash -c '...'`, `ssh host "..."`) is scanned as one too, to
    MAX_DEPTH levels."""
    tokens = shell_words.scan(text, limit)
    edits = list(_known_edits(text, known))
    for token in tokens:
        if (token.kind == WORD and token.complete) or token.kind == COMMENT:
            edits += _in_word(text, token.start, token.end)
            if token.kind == WORD and depth < MAX_DEPTH and (inner := _quoted_script(text, token)):
                edits += [
                    (token.start + 1 + a, token.start + 1 + b, new)
                    for a, b, new in command_edits(inner, known, depth=depth + 1, limit=limit)
                ]
        elif token.kind == HEREDOC:
            edits += _heredoc(text, token, known, depth, limit)
    for words in _simple_commands(text, tokens):
        edits += _between_words(text, words)
    return edits


def _quoted_script(text: str, word: Token) -> str | None:
    """The inside of a word that is one quoted string holding spaces or separators, and whose
    inside is character for character what the command receives (no escape, no substitution)."""
    raw = text[word.start : word.end]
    if len(raw) < 3 or raw[0] not in "'\"" or raw.find(raw[0], 1) != len(raw) - 1:
        return None
    inner = raw[1:-1]
    if raw[0] == '"' and ("\\" in inner or "$" in inner or "`" in inner):
        return None
    return inner if any(char in inner for char in " \t\n;&|") else None


def _known_edits(text: str, known: Sequence[str]) -> Iterable[Edit]:
    for secret in known:
        if len(secret) < MIN_KNOWN_SECRET_CHARS:
            continue
        at = text.find(secret)
        while at >= 0:
            yield at, at + len(secret), REDACTED
            at = text.find(secret, at + len(secret))
    # Every shape `_KNOWN_TOKENS` knows holds one of these literally: text with none of them
    # (most paths and identifiers) has no match, and the scan is left out.
    if any(anchor in text for anchor in _TOKEN_ANCHORS):
        for match in _KNOWN_TOKENS.finditer(text):
            yield match.start(), match.end(), REDACTED


def _in_word(text: str, start: int, end: int) -> list[Edit]:
    """The secret values inside the word (or comment) text[start:end]."""
    word = text[start:end]
    edits: list[Edit] = []
    if "-----BEGIN " in word:
        edits += [(m.start(), m.end(), REDACTED) for m in _PRIVATE_KEY.finditer(text, start, end)]
    if ":" in word:
        for pattern in (_AUTH_HEADER, _KEY_HEADER, _URL_PASSWORD, _USER_PASSWORD, _JSON_SECRET):
            for match in pattern.finditer(text, start, end):
                if pattern is not _JSON_SECRET or _is_secret_name(match[2]):
                    edits += _span(text, match.end(1), match.end())
    if "earer" in word or "EARER" in word:
        for match in _BEARER.finditer(text, start, end):
            edits += _span(text, match.end(1), match.end())
    position = start
    while "=" in word and (named := _ASSIGNMENT.search(text, position, end)) is not None:
        position = named.end()
        if not _is_secret_name(named[2]):
            continue
        if named.start() == start:
            value_end = end
        else:
            inner = _INNER_VALUE.match(text, named.end(), end)
            value_end = named.end() if inner is None else inner.end()
        edits += _span(text, named.end(), value_end)
        # Past the value: a name inside it is part of it (and scanning on stays linear).
        position = max(position, value_end)
    return edits


def _span(text: str, start: int, end: int) -> list[Edit]:
    """Redact text[start:end] up to its first shell separator, if that holds a literal."""
    separator = _SEPARATOR.search(text, start, end)
    if separator is not None:
        end = separator.start()
    return [(start, end, REDACTED)] if _has_literal(text[start:end]) else []


def _is_secret_name(name: str) -> bool:
    return _SECRET_WORD.search(name) is not None and _NOT_A_VALUE.search(name) is None


def _has_literal(value: str) -> bool:
    """A value that is not only quotes (the part of `"$(cmd)"` before the substitution)."""
    return bool(value.strip("'\""))


# --- words in sequence -----------------------------------------------------------------------


def _simple_commands(text: str, tokens: Sequence[Token]) -> Iterable[list[Token]]:
    """The words of each simple command, in order: a command ends at a control operator, a
    newline, a comment or a nested list; a nested list's commands come out on their own, and
    the command around it goes on after it. Redirections and their targets are left out, and
    so are fragments after a substitution (they continue the word before it)."""
    stack: list[list[Token]] = [[]]
    skip_target = False
    for token in tokens:
        current = stack[-1]
        if token.kind == WORD:
            if skip_target:
                skip_target = False
            elif not token.continues:
                current.append(token)
        elif token.kind == OPERATOR and text[token.start : token.end] in REDIRECTIONS:
            if (
                current
                and current[-1].end == token.start
                and text[current[-1].start : token.end - 1].isdigit()
            ):
                current.pop()  # `2>`: the digits name a file descriptor
            skip_target = True
        elif token.kind == OPEN:
            stack.append([])
            skip_target = False
        elif token.kind == CLOSE and len(stack) > 1:
            yield stack.pop()
            skip_target = False
        else:
            yield current
            stack[-1] = []
            skip_target = False
    yield from stack


def _value_of(text: str, word: Token | None, *, from_offset: int = 0) -> list[Edit]:
    """Redact `word` (from `from_offset` characters in), if it is a complete literal value."""
    if word is None or not word.complete:
        return []
    return _span(text, word.start + from_offset, word.end)


def _between_words(text: str, words: list[Token]) -> list[Edit]:
    edits: list[Edit] = []
    if not words:
        return edits
    raws = [text[word.start : word.end] for word in words]
    values = [word.value for word in words]
    for index, raw in enumerate(raws):
        following = words[index + 1] if index + 1 < len(words) else None
        after = values[index + 1] if following is not None else ""
        value = values[index]
        if following is None:
            break
        if raw in ("-u", "--user"):
            colon = text.find(":", following.start, following.end)
            if colon >= 0:
                edits += _value_of(text, following, from_offset=colon + 1 - following.start)
        elif raw.startswith("-") and _OPTION_NAME.fullmatch(raw) and _is_secret_name(raw):
            if not after.startswith("-"):
                edits += _value_of(text, following)
        elif value.endswith(":") and _HEADER_NAME.fullmatch(value):
            target = index + 2 if after.lower() in _AUTH_SCHEMES and index + 2 < len(words) else index + 1
            edits += _value_of(text, words[target])
        elif len(value) == 6 and value.lower() == "bearer" and _TOKEN_VALUE.fullmatch(after):
            edits += _value_of(text, following)
    # The rules of a program, for its first appearance in the command (once each: linear).
    seen: set[str] = set()
    for index, value in enumerate(values):
        program = value.rsplit("/", 1)[-1]
        if program not in _PROGRAMS or program in seen:
            continue
        seen.add(program)
        if program == "sshpass":
            edits += _sshpass(text, words, index)
        for programs, path, flags, attached_only in _CREDENTIAL_FLAGS:
            if program in programs:
                edits += _credential_flags(
                    text, words, _after_path(values, index, path), flags, attached_only
                )
        if program in _SETTERS:
            edits += _setter(text, words, _after_path(values, index, _SETTERS[program]))
    return edits


def _after_path(values: list[str], index: int, path: tuple[str, ...]) -> int | None:
    """The index after the words of `path`, found in order after the program at `index`."""
    position = index + 1
    for expected in path:
        try:
            position = values.index(expected, position) + 1
        except ValueError:
            return None
    return position


def _credential_flags(
    text: str, words: list[Token], start: int | None, flags: tuple[str, ...], attached_only: bool
) -> list[Edit]:
    if start is None:
        return []
    edits: list[Edit] = []
    for index in range(start, len(words)):
        raw = text[words[index].start : words[index].end]
        following = words[index + 1] if index + 1 < len(words) else None
        for flag in flags:
            if raw == flag and not attached_only:
                edits += _value_of(text, following)
            elif raw.startswith(flag) and len(raw) > len(flag) and not flag.startswith("--"):
                edits += _value_of(text, words[index], from_offset=len(flag))
    return edits


def _sshpass(text: str, words: list[Token], index: int) -> list[Edit]:
    """sshpass's `-p <pw>` / `-p<pw>`, among its options before the command it runs."""
    edits: list[Edit] = []
    position = index + 1
    while position < len(words):
        raw = text[words[position].start : words[position].end]
        following = words[position + 1] if position + 1 < len(words) else None
        if raw == "-p":
            edits += _value_of(text, following)
            position += 2
        elif raw.startswith("-p"):
            edits += _value_of(text, words[position], from_offset=2)
            position += 1
        elif raw in _SSHPASS_VALUED:
            position += 2
        elif raw.startswith("-"):
            position += 1
        else:
            break
    return edits


def _setter(text: str, words: list[Token], start: int | None) -> list[Edit]:
    """`KEY VALUE` after `aws configure set` and the like: the value of a secret-named key."""
    if start is None:
        return []
    positional: list[Token] = []
    position = start
    while position < len(words) and len(positional) < 2:
        value = words[position].value
        if value.startswith("-"):
            position += 1 if value in _SETTER_FLAGS or "=" in value else 2
            continue
        positional.append(words[position])
        position += 1
    if len(positional) == 2 and _is_secret_name(positional[0].value.rsplit(".", 1)[-1]):
        return _value_of(text, positional[1])
    return []


# --- heredocs and the result -----------------------------------------------------------------


def _heredoc(text: str, token: Token, known: Sequence[str], depth: int, limit: int | None) -> list[Edit]:
    """Withhold a body (file contents, usually). The lines of an unquoted heredoc that run a
    command substitution are kept (what ran is recorded), with their own values redacted."""
    if not token.lines:
        suffix = "" if token.terminated else ", unterminated"
        label = f"[heredoc body withheld: 0 lines{suffix}]"
        if token.terminated:
            return [(token.end, token.end, label + "\n")]
        if depth:
            return []
        return [(token.end, token.end, ("\n" if text and not text.endswith("\n") else "") + label)]
    edits: list[Edit] = []
    run: list[tuple[int, int]] = []

    def withhold(last: bool) -> None:
        if run:
            suffix = ", unterminated" if last and not token.terminated else ""
            edits.append((run[0][0], run[-1][1], f"[heredoc body withheld: {len(run)} lines{suffix}]"))
            run.clear()

    kept = 0
    for start, end in token.lines:
        if limit is not None and kept > limit:
            break  # each kept line keeps a character of the result at least: the rest is cut
        if token.expands and _EXPANSION.search(text, start, end):
            kept += 1
            withhold(last=False)
            line = text[start:end]
            edits.extend(
                (start + a, start + b, new)
                for a, b, new in command_edits(line, known, depth=MAX_DEPTH, limit=limit)
            )
        else:
            run.append((start, end))
    withhold(last=True)
    return edits


def _apply(text: str, edits: list[Edit]) -> str:
    """`text` with the edits made; overlapping edits become one (the first one's replacement)."""
    if not edits:
        return text
    edits.sort(key=lambda edit: (edit[0], -edit[1], edit[2] == REDACTED))
    merged: list[Edit] = []
    for start, end, replacement in edits:
        if merged and start < merged[-1][1]:
            first = merged[-1]
            merged[-1] = (first[0], max(first[1], end), first[2])
        else:
            merged.append((start, end, replacement))
    pieces, position = [], 0
    for start, end, replacement in merged:
        pieces += [text[position:start], replacement]
        position = end
    pieces.append(text[position:])
    return "".join(pieces)
