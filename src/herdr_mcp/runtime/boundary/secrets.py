"""Secret-looking paths: the one place that decides which files no fs tool may touch.

Every fs tool consults `is_secret_path` on the root-relative path it is about to read, list,
search or change: fs_read/fs_image/fs_edit/fs_write/fs_patch refuse with `secret_path`, fs_list
leaves the entry out (and counts it), fs_grep skips the file. Names are compared case-folded,
because macOS and Windows volumes are case-insensitive and `.ENV` is the same file as `.env`.

A path is secret when ANY of its components is (so everything under `.ssh/` is secret, and so is
a directory named `.env.d`), or when it ends in `.docker/config.json`. A component is secret when:

1. Credential directories: `.ssh`, `.gnupg`, `.aws`.
2. Exact credential files: `.netrc`, `.pgpass`, `.npmrc`, `.pypirc`, `.git-credentials`.
3. Dotenv files: `.env` and `.env.<anything>`, except the checked-in templates `.env.example`,
   `.env.sample` and `.env.template`.
4. Private SSH keys: `id_rsa`, `id_ed25519`, `id_ecdsa`, `id_dsa`. Their `.pub` halves are public
   by design and stay readable outside `.ssh/` (inside `.ssh/` rule 1 already refuses them).
5. Key material by extension: `*.pem`, `*.key`, `*.p12`, `*.pfx`, `*.kdbx`, `*.secret`, `*.token`.
6. Credential/secret/token stores by name: a name whose stem is `credential(s)`, `secret(s)` or
   `token(s)`, optionally after a prefix ending in `.`, `_` or `-` (`client_secret`,
   `gcp-credentials`, `.token`, `github_token`), with no extension or a data-file extension (json,
   yaml, yml, toml, ini, txt, env, conf, cfg, xml, properties). Source files such as
   `credentials.py` or `tokenizer.rs` are deliberately NOT secret: they hold code, and refusing
   them would block ordinary programming work.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

__all__ = ["RG_SECRET_EXCLUDE_GLOBS", "is_secret_entry", "is_secret_name", "is_secret_path", "secret_entries"]

_SECRET_DIRECTORIES = frozenset({".ssh", ".gnupg", ".aws"})
_SECRET_FILES = frozenset({".netrc", ".pgpass", ".npmrc", ".pypirc", ".git-credentials"})
_DOTENV_TEMPLATES = frozenset({".env.example", ".env.sample", ".env.template"})
_PRIVATE_KEYS = frozenset({"id_rsa", "id_ed25519", "id_ecdsa", "id_dsa"})
_SECRET_SUFFIXES = (".pem", ".key", ".p12", ".pfx", ".kdbx", ".secret", ".token")
_SECRET_STORE = re.compile(
    r"(?:.*[._-])?(?:credentials?|secrets?|tokens?)"
    r"(?:\.(?:json|ya?ml|toml|ini|txt|env|conf|cfg|xml|properties))?",
    re.IGNORECASE,
)

# ripgrep exclusions that mirror rules 1-5 exactly (every glob here only matches secret paths),
# so rg does not even open those files. Rule 6 and the dotenv template exception are not
# expressible as rg globs; fs_grep filters every rg result through `is_secret_path` as well, which
# stays the authority.
RG_SECRET_EXCLUDE_GLOBS: tuple[str, ...] = (
    *sorted(_SECRET_DIRECTORIES | _SECRET_FILES | _PRIVATE_KEYS),
    ".env",
    "**/.docker/config.json",
    *(f"*{suffix}" for suffix in _SECRET_SUFFIXES),
)


def is_secret_name(name: str) -> bool:
    """True when one path component (a file or directory name) looks like a secret."""
    return _is_secret_folded(name.casefold())


def _is_secret_folded(folded: str) -> bool:
    if folded in _SECRET_DIRECTORIES or folded in _SECRET_FILES or folded in _PRIVATE_KEYS:
        return True
    if folded == ".env" or (folded.startswith(".env.") and folded not in _DOTENV_TEMPLATES):
        return True
    if folded.endswith(_SECRET_SUFFIXES):
        return True
    # Every name `_SECRET_STORE` matches holds one of its words; looking for them first spares
    # the regex for almost every name of a walk (fs_list asks once per entry).
    if "secret" not in folded and "token" not in folded and "credential" not in folded:
        return False
    return _SECRET_STORE.fullmatch(folded) is not None


_SECRET_PAIR = (".docker", "config.json")


def is_secret_path(relative: str | PurePosixPath) -> bool:
    """True when a root-relative path is, or lies under, something secret-looking."""
    # The components as PurePosixPath splits them (`.` and empty ones dropped), without its cost.
    parts = [part for part in str(relative).split("/") if part not in ("", ".")]
    if any(is_secret_name(part) for part in parts):
        return True
    folded = [part.casefold() for part in parts]
    return any(tuple(folded[i : i + 2]) == _SECRET_PAIR for i in range(len(folded) - 1))


# Every name a rule above calls secret holds one of these, folded: the rule's exact name, `.env`,
# its suffix or one of the store's words. A directory whose folded names hold none has no secret
# name (`secret_entries`), which a few substring searches tell for all its names at once.
_SECRET_WORDS = (
    *sorted(_SECRET_DIRECTORIES | _SECRET_FILES | _PRIVATE_KEYS),
    ".env",
    *_SECRET_SUFFIXES,
    "secret",
    "token",
    "credential",
)


def secret_entries(parent_name: str, names: list[str]) -> frozenset[str]:
    """The names of a directory called `parent_name` (whose path is not secret) that
    `is_secret_entry` calls secret; asked of each name only when the directory's names, folded
    together, hold a word some rule needs (or the directory is the pair's `.docker`)."""
    folded = "\0".join(names).casefold()
    if parent_name.casefold() != _SECRET_PAIR[0] and not any(word in folded for word in _SECRET_WORDS):
        return frozenset()
    return frozenset(name for name in names if is_secret_entry(parent_name, name))


def is_secret_entry(parent_name: str, name: str) -> bool:
    """`is_secret_path` for `name` in a directory called `parent_name` whose path is not secret.

    The cheap form for directory walks, which never enter secret directories.
    """
    folded = name.casefold()
    if _is_secret_folded(folded):
        return True
    return folded == _SECRET_PAIR[1] and parent_name.casefold() == _SECRET_PAIR[0]
