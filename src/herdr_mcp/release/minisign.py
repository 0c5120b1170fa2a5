"""minisign-compatible Ed25519 signatures: `runtime-manifest.json.minisig` and the release keys.

The formats are minisign's (https://jedisct1.github.io/minisign/), so a maintainer can check our
signatures with `minisign -V` and we accept signatures made with `minisign -S`. The cryptography
is `cryptography`'s Ed25519 and `hashlib`'s BLAKE2b; this module only reads and writes the formats.

- Public key file: `untrusted comment: minisign public key <KEY ID>` then
  base64("Ed" || key id (8 bytes, little-endian) || Ed25519 public key (32 bytes)).
- Signature file, four lines: `untrusted comment: ...`, base64("ED" || key id || Ed25519
  signature of BLAKE2b-512(data)), `trusted comment: ...`, base64(Ed25519 signature of
  (signature || trusted comment)). The second signature binds the trusted comment.
- Secret key file: base64("Ed" || KDF "\\0\\0" (unencrypted) || "B2" || salt (32) || opslimit (8) ||
  memlimit (8) || key id || Ed25519 secret key (64: seed || public key) || BLAKE2b-256 checksum of
  ("Ed" || key id || secret key)), as `minisign -C -W` writes it. `minisign -G -W` leaves the
  checksum zero; we accept that too (minisign itself ignores it for unencrypted keys).

Decisions:
- Only the prehashed "ED" algorithm is accepted. Legacy "Ed" signatures (`minisign -S -l`, signing
  the raw file) are refused with `signature_algorithm_unsupported`: we never make them, and one
  algorithm is one less path to get wrong.
- Secret keys are read unencrypted only. A password-protected minisign key (scrypt with 1 GiB of
  memory) is refused with `secret_key_encrypted`; the key belongs in a secret store (GitHub
  Actions secret, `HERDR_MCP_RELEASE_SECRET_KEY`) or a 0600 file, and `minisign -C -W` removes
  a password. Keys we generate are written 0600 and never printed.

Every failure is a `SignatureError` with a stable code: `no_pinned_keys`, `evidence_too_large`
(a signature file over `MAX_SIGNATURE_FILE_BYTES`, `herdr_mcp.release.evidence`), `signature_malformed`,
`signature_algorithm_unsupported`, `signature_key_not_pinned`, `signature_invalid`,
`signature_comment_invalid`, `public_key_malformed`, `public_key_conflict`, `pinned_keys_unreadable`,
`secret_key_missing`, `secret_key_unreadable`, `secret_key_malformed`, `secret_key_encrypted`,
`key_file_exists`, `key_file_unwritable`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from herdr_mcp.errors import RefusedFault
from herdr_mcp.records import atomic_write
from herdr_mcp.release.evidence import EVIDENCE_TOO_LARGE, too_large_message

#: The environment variable that may hold the release secret key file's text (GitHub secret).
SECRET_KEY_ENV = "HERDR_MCP_RELEASE_SECRET_KEY"  # noqa: S105 (a variable name, not a secret)
#: Default untrusted comment of our signatures (informational only; nothing verifies it).
DEFAULT_UNTRUSTED_COMMENT = "signature from herdr-mcp release key"

_KEY_ALGORITHM = b"Ed"
_PREHASHED = b"ED"
_LEGACY = b"Ed"
_KDF_NONE = b"\x00\x00"
_KDF_SCRYPT = b"Sc"
_CHECKSUM_BLAKE2B = b"B2"
_UNTRUSTED_PREFIX = "untrusted comment: "
_TRUSTED_PREFIX = "trusted comment: "
_KEY_ID_BYTES = 8
_PUBLIC_KEY_BYTES = 2 + _KEY_ID_BYTES + 32
_SIGNATURE_BYTES = 2 + _KEY_ID_BYTES + 64
_SECRET_KEY_BYTES = 2 + 2 + 2 + 32 + 8 + 8 + _KEY_ID_BYTES + 64 + 32
#: minisign reads comment lines into 1024- and 8192-byte buffers (COMMENTMAXBYTES and
#: TRUSTEDCOMMENTMAXBYTES in minisign.h); staying well below keeps our files readable by it.
MAX_UNTRUSTED_COMMENT_BYTES = 1000
MAX_TRUSTED_COMMENT_BYTES = 8000
#: A signature file is four short lines; anything this large is not one.
MAX_SIGNATURE_FILE_BYTES = 16 * 1024


class SignatureError(RefusedFault):
    """A signature, key or key file that cannot be used; `code` is stable (see the module docstring)."""


def _b64decode(line: str | bytes, what: str, code: str) -> bytes:
    try:
        return binascii.a2b_base64(line.encode("ascii") if isinstance(line, str) else line, strict_mode=True)
    except (UnicodeEncodeError, binascii.Error):
        raise SignatureError(code, f"{what} is not valid base64") from None


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _key_id_hex(key_id: bytes) -> str:
    """minisign prints the key id as the little-endian 64-bit number in uppercase hex."""
    return key_id[::-1].hex().upper()


@dataclass(frozen=True)
class PublicKey:
    """A minisign Ed25519 public key: its 8-byte key id (as stored) and the 32-byte key."""

    key_id: bytes
    key: bytes

    def __post_init__(self) -> None:
        if len(self.key_id) != _KEY_ID_BYTES or len(self.key) != 32:
            raise SignatureError("public_key_malformed", "a key id is 8 bytes and an Ed25519 key 32 bytes")

    @property
    def key_id_hex(self) -> str:
        """The key id as minisign shows it (`minisign public key 5477B47589A0CA0E`)."""
        return _key_id_hex(self.key_id)

    @classmethod
    def from_text(cls, text: str) -> PublicKey:
        """Parse a minisign public key file; raises `SignatureError("public_key_malformed")`."""
        lines = text.strip("\n").split("\n")
        if len(lines) != 2 or not lines[0].startswith(_UNTRUSTED_PREFIX):
            raise SignatureError("public_key_malformed", "expected an untrusted comment line and a key line")
        raw = _b64decode(lines[1].rstrip("\r"), "the public key", "public_key_malformed")
        if len(raw) != _PUBLIC_KEY_BYTES or raw[:2] != _KEY_ALGORITHM:
            raise SignatureError("public_key_malformed", "not a minisign Ed25519 public key")
        return cls(key_id=raw[2:10], key=raw[10:])

    def to_text(self) -> str:
        """The public key file, as `minisign -G` writes it."""
        encoded = _b64encode(_KEY_ALGORITHM + self.key_id + self.key)
        return f"{_UNTRUSTED_PREFIX}minisign public key {self.key_id_hex}\n{encoded}\n"

    def _accepts(self, signature: bytes, message: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.key).verify(signature, message)
        except InvalidSignature:
            return False
        return True


def _checksum(key_id: bytes, secret: bytes) -> bytes:
    return hashlib.blake2b(_KEY_ALGORITHM + key_id + secret, digest_size=32).digest()


class SecretKey:
    """A release signing key. Its repr shows the key id only; nothing here prints the secret."""

    __slots__ = ("_private", "key_id")

    def __init__(self, key_id: bytes, private: Ed25519PrivateKey) -> None:
        if len(key_id) != _KEY_ID_BYTES:
            raise SignatureError("secret_key_malformed", "a key id is 8 bytes")
        self.key_id = key_id
        self._private = private

    def __repr__(self) -> str:
        return f"SecretKey(key_id={_key_id_hex(self.key_id)})"

    @classmethod
    def generate(cls) -> SecretKey:
        """A new key pair with a random key id."""
        return cls(secrets.token_bytes(_KEY_ID_BYTES), Ed25519PrivateKey.generate())

    @property
    def public_key(self) -> PublicKey:
        raw = self._private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return PublicKey(key_id=self.key_id, key=raw)

    @classmethod
    def from_text(cls, text: str) -> SecretKey:
        """Parse an unencrypted minisign secret key file (or just its base64 line, as secret stores
        sometimes keep it). Raises `SignatureError`: `secret_key_malformed`, `secret_key_encrypted`."""
        lines = [line.rstrip("\r") for line in text.strip().split("\n")]
        if len(lines) == 2 and lines[0].startswith(_UNTRUSTED_PREFIX):
            lines = lines[1:]
        if len(lines) != 1:
            raise SignatureError("secret_key_malformed", "expected an untrusted comment line and a key line")
        raw = _b64decode(lines[0], "the secret key", "secret_key_malformed")
        if len(raw) != _SECRET_KEY_BYTES or raw[:2] != _KEY_ALGORITHM or raw[4:6] != _CHECKSUM_BLAKE2B:
            raise SignatureError("secret_key_malformed", "not a minisign Ed25519 secret key")
        kdf = raw[2:4]
        if kdf == _KDF_SCRYPT:
            raise SignatureError(
                "secret_key_encrypted",
                "the secret key is password-protected; remove the password with `minisign -C -W -s <file>` "
                "and keep the key in a secret store, or create one with `herdr-mcp release keygen`",
            )
        if kdf != _KDF_NONE:
            raise SignatureError("secret_key_malformed", f"unknown key derivation {kdf!r}")
        key_id, secret, checksum = raw[54:62], raw[62:126], raw[126:158]
        # `minisign -G -W` leaves the checksum zero (minisign checks it only to detect a wrong
        # password); any other value must be right. The halves check below catches corruption.
        if checksum != bytes(32) and not hmac.compare_digest(checksum, _checksum(key_id, secret)):
            raise SignatureError("secret_key_malformed", "checksum mismatch: the secret key is corrupted")
        private = Ed25519PrivateKey.from_private_bytes(secret[:32])
        if private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw) != secret[32:]:
            raise SignatureError("secret_key_malformed", "the secret and public halves do not match")
        return cls(key_id, private)

    def _file_text(self) -> str:
        seed = self._private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        secret = seed + self.public_key.key
        checksum = _checksum(self.key_id, secret)
        # Unencrypted: no KDF, so salt, opslimit and memlimit are zero (as `minisign -G -W` writes).
        raw = _KEY_ALGORITHM + _KDF_NONE + _CHECKSUM_BLAKE2B + bytes(48) + self.key_id + secret + checksum
        return f"{_UNTRUSTED_PREFIX}minisign secret key (unencrypted)\n{_b64encode(raw)}\n"

    def _sign(self, message: bytes) -> bytes:
        return self._private.sign(message)


@dataclass(frozen=True)
class VerifiedSignature:
    """What a verified signature tells: which pinned key made it, and its (signed) trusted comment."""

    key: PublicKey
    trusted_comment: str


def _check_comment(comment: str, what: str, limit: int) -> bytes:
    if "\n" in comment or "\r" in comment:
        raise SignatureError("signature_comment_invalid", f"the {what} must be one line")
    encoded = comment.encode("utf-8")
    if len(encoded) > limit:
        raise SignatureError("signature_comment_invalid", f"the {what} exceeds {limit} bytes")
    return encoded


def _prehash(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=64).digest()


def sign(
    data: bytes,
    secret_key: SecretKey,
    *,
    trusted_comment: str,
    untrusted_comment: str = DEFAULT_UNTRUSTED_COMMENT,
) -> str:
    """The minisign signature file (prehashed "ED") of the exact bytes `data`.

    Raises `SignatureError("signature_comment_invalid")` for a comment with a line break or
    beyond minisign's limits."""
    trusted = _check_comment(trusted_comment, "trusted comment", MAX_TRUSTED_COMMENT_BYTES)
    _check_comment(untrusted_comment, "untrusted comment", MAX_UNTRUSTED_COMMENT_BYTES)
    signature = secret_key._sign(_prehash(data))
    global_signature = secret_key._sign(signature + trusted)
    return (
        f"{_UNTRUSTED_PREFIX}{untrusted_comment}\n"
        f"{_b64encode(_PREHASHED + secret_key.key_id + signature)}\n"
        f"{_TRUSTED_PREFIX}{trusted_comment}\n"
        f"{_b64encode(global_signature)}\n"
    )


@dataclass(frozen=True)
class _SignatureFile:
    algorithm: bytes
    key_id: bytes
    signature: bytes
    trusted_comment: bytes
    global_signature: bytes


def _parse_signature_file(signature_text: str | bytes) -> _SignatureFile:
    """The one parse boundary for signature files. Works on bytes: the untrusted comment is not
    covered by any signature and may hold any bytes (minisign itself ignores it), so it is never
    decoded; the trusted comment is kept as the exact bytes the global signature covers."""
    if len(signature_text) > MAX_SIGNATURE_FILE_BYTES:
        raise SignatureError(
            EVIDENCE_TOO_LARGE,
            too_large_message("the minisign signature", MAX_SIGNATURE_FILE_BYTES, len(signature_text)),
        )
    raw_file = (
        signature_text.encode("utf-8", "surrogateescape")
        if isinstance(signature_text, str)
        else signature_text
    )
    lines = raw_file.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    lines = [line.removesuffix(b"\r") for line in lines]
    if len(lines) != 4:
        raise SignatureError(
            "signature_malformed", f"a minisign signature has 4 lines, this has {len(lines)}"
        )
    untrusted, encoded_signature, trusted, encoded_global = lines
    if not untrusted.startswith(_UNTRUSTED_PREFIX.encode()) or not trusted.startswith(
        _TRUSTED_PREFIX.encode()
    ):
        raise SignatureError("signature_malformed", "comment lines are missing their prefixes")
    raw = _b64decode(encoded_signature, "the signature line", "signature_malformed")
    global_signature = _b64decode(encoded_global, "the trusted comment signature", "signature_malformed")
    if len(raw) != _SIGNATURE_BYTES or len(global_signature) != 64:
        raise SignatureError("signature_malformed", "the signature lines have the wrong length")
    return _SignatureFile(
        algorithm=raw[:2],
        key_id=raw[2:10],
        signature=raw[10:],
        trusted_comment=trusted.removeprefix(_TRUSTED_PREFIX.encode()),
        global_signature=global_signature,
    )


def verify(data: bytes, signature_text: str | bytes, public_keys: Sequence[PublicKey]) -> VerifiedSignature:
    """Check a minisign signature over the exact bytes `data` against the pinned `public_keys`.

    Returns what was verified; raises `SignatureError` on any failure (there is no False):
    `no_pinned_keys`, `signature_malformed`, `signature_algorithm_unsupported`,
    `signature_key_not_pinned` or `signature_invalid`.
    """
    # 1. Nothing pinned, nothing trusted.
    if not public_keys:
        raise SignatureError(
            "no_pinned_keys",
            "no release public key is pinned; a release cannot be trusted until the maintainers' key "
            "is in attestations/release-keys/",
        )
    # 2. The file's shape.
    parsed = _parse_signature_file(signature_text)
    # 3. The algorithm: prehashed Ed25519 only.
    if parsed.algorithm == _LEGACY:
        raise SignatureError(
            "signature_algorithm_unsupported",
            "legacy (non-prehashed) minisign signature; sign again without -l",
        )
    if parsed.algorithm != _PREHASHED:
        raise SignatureError(
            "signature_algorithm_unsupported", f"unknown signature algorithm {parsed.algorithm!r}"
        )
    # 4. The key must be one we pinned.
    candidates = [key for key in public_keys if hmac.compare_digest(key.key_id, parsed.key_id)]
    if not candidates:
        pinned = ", ".join(key.key_id_hex for key in public_keys)
        raise SignatureError(
            "signature_key_not_pinned",
            f"signed by key {_key_id_hex(parsed.key_id)}, which is not pinned (pinned: {pinned})",
        )
    # 5. The signature over the data, then 6. the global signature over the trusted comment.
    prehash = _prehash(data)
    for key in candidates:
        if key._accepts(parsed.signature, prehash):
            if not key._accepts(parsed.global_signature, parsed.signature + parsed.trusted_comment):
                raise SignatureError(
                    "signature_invalid", "the trusted comment was changed after signing (global signature)"
                )
            # Signed by the key holder, but shown to people: undecodable bytes become U+FFFD.
            comment = parsed.trusted_comment.decode("utf-8", "replace")
            return VerifiedSignature(key=key, trusted_comment=comment)
    raise SignatureError(
        "signature_invalid", f"the signature by key {_key_id_hex(parsed.key_id)} does not match these bytes"
    )


def _packaged_keys_dir() -> Traversable:
    return resources.files("herdr_mcp").joinpath("attestations", "release-keys")


def load_pinned_keys(directory: Path | None = None) -> list[PublicKey]:
    """The pinned release public keys: every `*.pub` in `directory`, by default the packaged
    `herdr_mcp/attestations/release-keys/`. An empty list means nothing verifies (`no_pinned_keys`).

    Raises `SignatureError`: `pinned_keys_unreadable` (an explicit directory that cannot be
    read), `public_key_malformed` (naming the file), `public_key_conflict` (one key id, two keys).
    """
    folder: Traversable = _packaged_keys_dir() if directory is None else directory
    if not folder.is_dir():
        if directory is None:
            return []
        raise SignatureError("pinned_keys_unreadable", f"{directory} is not a directory")
    by_id: dict[bytes, PublicKey] = {}
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if not entry.name.endswith(".pub") or not entry.is_file():
            continue
        try:
            key = PublicKey.from_text(entry.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise SignatureError("public_key_malformed", f"{entry.name}: cannot read ({exc})") from None
        except SignatureError as exc:
            raise SignatureError(exc.code, f"{entry.name}: {exc.message}") from None
        known = by_id.setdefault(key.key_id, key)
        if known != key:
            raise SignatureError(
                "public_key_conflict",
                f"{entry.name}: key id {key.key_id_hex} is pinned with two different keys",
            )
    return list(by_id.values())


def load_secret_key(path: Path | None = None, *, environ: Mapping[str, str] | None = None) -> SecretKey:
    """The release secret key from the file `path`, else from `$HERDR_MCP_RELEASE_SECRET_KEY` (the
    key file's text). Raises `SignatureError`: `secret_key_missing`, `secret_key_unreadable`, or
    `SecretKey.from_text`'s codes."""
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SignatureError(
                "secret_key_unreadable", f"cannot read the secret key {path}: {exc}"
            ) from None
        return SecretKey.from_text(text)
    text = (os.environ if environ is None else environ).get(SECRET_KEY_ENV, "")
    if not text.strip():
        raise SignatureError(
            "secret_key_missing", f"pass the secret key file or set {SECRET_KEY_ENV} to its text"
        )
    return SecretKey.from_text(text)


def _write_atomically(path: Path, text: str, mode: int) -> None:
    # A key goes only where the maintainer said: a missing directory is `key_file_unwritable`.
    atomic_write(path, text.encode("utf-8"), mode=mode, create_parent=False)


def keygen(public_key_path: Path, secret_key_path: Path, *, overwrite: bool = False) -> PublicKey:
    """Create a release key pair: the secret key file (unencrypted minisign format, mode 0600) and
    the public key file. Returns the public key; the secret is never printed or returned.

    Raises `SignatureError`: `key_file_exists` (unless `overwrite`), `key_file_unwritable`.
    """
    if not overwrite:
        for path in (secret_key_path, public_key_path):
            if path.exists():
                raise SignatureError("key_file_exists", f"{path} exists; refusing to overwrite a key")
    secret_key = SecretKey.generate()
    try:
        _write_atomically(secret_key_path, secret_key._file_text(), 0o600)
        _write_atomically(public_key_path, secret_key.public_key.to_text(), 0o644)
    except OSError as exc:
        raise SignatureError("key_file_unwritable", f"cannot write the key pair: {exc}") from None
    return secret_key.public_key
