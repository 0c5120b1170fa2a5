"""minisign-compatible release signatures: our keys and signatures, and interoperability with the
real `minisign` binary (Debian's package; the tests fail, never skip, when it is missing)."""

from __future__ import annotations

import base64
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from herdr_mcp.release.minisign import (
    SECRET_KEY_ENV,
    PublicKey,
    SecretKey,
    SignatureError,
    keygen,
    load_pinned_keys,
    load_secret_key,
    sign,
    verify,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = b'{"product":"herdr-mcp"}\n'


@pytest.fixture(scope="session")
def minisign() -> str:
    path = shutil.which("minisign")
    if path is None:
        pytest.fail(
            "the minisign binary is required for the interoperability tests: apt-get install -y minisign"
        )
    return path


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture
def minisign_keys(minisign: str, tmp_path: Path) -> tuple[Path, Path]:
    """An unencrypted key pair made by `minisign -G -W`."""
    result = run(minisign, "-G", "-W", "-p", "mini.pub", "-s", "mini.key", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return tmp_path / "mini.pub", tmp_path / "mini.key"


@pytest.fixture
def our_keys(tmp_path: Path) -> tuple[PublicKey, Path, Path]:
    public_key = keygen(tmp_path / "ours.pub", tmp_path / "ours.key")
    return public_key, tmp_path / "ours.pub", tmp_path / "ours.key"


def code_of(call: object, *args: object, **kwargs: object) -> str:
    assert callable(call)
    with pytest.raises(SignatureError) as caught:
        call(*args, **kwargs)
    return caught.value.code


# --- interoperability -------------------------------------------------------------------------------


def test_a_minisign_signature_verifies_with_ours(
    minisign: str, minisign_keys: tuple[Path, Path], tmp_path: Path
) -> None:
    public_path, secret_path = minisign_keys
    (tmp_path / "m.json").write_bytes(DATA)
    result = run(minisign, "-S", "-H", "-s", str(secret_path), "-m", "m.json", "-t", "trusted", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    public_key = PublicKey.from_text(public_path.read_text(encoding="utf-8"))
    verified = verify(DATA, (tmp_path / "m.json.minisig").read_text(encoding="utf-8"), [public_key])
    assert verified.trusted_comment == "trusted"
    assert verified.key == public_key
    # minisign prints the key id with printf's %llX, so leading zeros are dropped (1 key in 16).
    first_line = public_path.read_text(encoding="utf-8").splitlines()[0]
    assert first_line.startswith("untrusted comment: minisign public key ")
    assert int(first_line.rsplit(" ", 1)[1], 16) == int(public_key.key_id_hex, 16)
    assert code_of(
        verify, DATA + b" ", (tmp_path / "m.json.minisig").read_text(encoding="utf-8"), [public_key]
    ) == ("signature_invalid")


def test_our_signature_verifies_with_minisign(
    minisign: str, our_keys: tuple[PublicKey, Path, Path], tmp_path: Path
) -> None:
    _, public_path, secret_path = our_keys
    (tmp_path / "m.json").write_bytes(DATA)
    signature = sign(DATA, load_secret_key(secret_path), trusted_comment="herdr-mcp 1.0.0\tcanonical é")
    (tmp_path / "m.json.minisig").write_text(signature, encoding="utf-8")
    result = run(minisign, "-V", "-H", "-p", str(public_path), "-m", "m.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Trusted comment: herdr-mcp 1.0.0\tcanonical é" in result.stdout
    (tmp_path / "m.json").write_bytes(DATA + b" ")
    assert run(minisign, "-V", "-p", str(public_path), "-m", "m.json", cwd=tmp_path).returncode != 0


def test_key_files_are_interchangeable(
    minisign: str, minisign_keys: tuple[Path, Path], our_keys: tuple[PublicKey, Path, Path], tmp_path: Path
) -> None:
    """minisign's secret key signs with our code; ours signs with minisign."""
    mini_public, mini_secret = minisign_keys
    (tmp_path / "m.json").write_bytes(DATA)
    (tmp_path / "m.json.minisig").write_text(
        sign(DATA, load_secret_key(mini_secret), trusted_comment="ours, minisign's key"), encoding="utf-8"
    )
    assert run(minisign, "-V", "-p", str(mini_public), "-m", "m.json", cwd=tmp_path).returncode == 0

    our_public, _, our_secret = our_keys
    result = run(minisign, "-S", "-s", str(our_secret), "-m", "m.json", "-x", "by-minisign.sig", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    verify(DATA, (tmp_path / "by-minisign.sig").read_text(encoding="utf-8"), [our_public])


def test_a_legacy_minisign_signature_is_refused(
    minisign: str, minisign_keys: tuple[Path, Path], tmp_path: Path
) -> None:
    public_path, secret_path = minisign_keys
    (tmp_path / "m.json").write_bytes(DATA)
    assert run(minisign, "-S", "-l", "-s", str(secret_path), "-m", "m.json", cwd=tmp_path).returncode == 0
    public_key = PublicKey.from_text(public_path.read_text(encoding="utf-8"))
    signature = (tmp_path / "m.json.minisig").read_text(encoding="utf-8")
    assert code_of(verify, DATA, signature, [public_key]) == "signature_algorithm_unsupported"


# --- keys ---------------------------------------------------------------------------------------------


def test_keygen_writes_a_private_secret_and_refuses_to_overwrite(
    our_keys: tuple[PublicKey, Path, Path],
) -> None:
    public_key, public_path, secret_path = our_keys
    assert stat.S_IMODE(secret_path.stat().st_mode) == 0o600
    assert PublicKey.from_text(public_path.read_text(encoding="utf-8")) == public_key
    assert re.fullmatch(
        r"untrusted comment: minisign public key [0-9A-F]{16}\nRW[Q-T][A-Za-z0-9+/]{53}\n",
        public_path.read_text(encoding="utf-8"),
    )
    assert load_secret_key(secret_path).public_key == public_key
    assert code_of(keygen, public_path, secret_path) == "key_file_exists"
    assert code_of(keygen, public_path.with_name("new.pub"), secret_path) == "key_file_exists"
    replaced = keygen(public_path, secret_path, overwrite=True)
    assert replaced != public_key
    assert load_secret_key(secret_path).public_key == replaced
    assert sorted(p.name for p in public_path.parent.iterdir()) == ["ours.key", "ours.pub"]


def test_keygen_reports_an_unwritable_place(tmp_path: Path) -> None:
    assert (
        code_of(keygen, tmp_path / "absent" / "k.pub", tmp_path / "absent" / "k.key") == "key_file_unwritable"
    )


def test_the_secret_is_never_shown(our_keys: tuple[PublicKey, Path, Path]) -> None:
    _, _, secret_path = our_keys
    secret_key = load_secret_key(secret_path)
    line = secret_path.read_text(encoding="utf-8").splitlines()[1]
    seed = base64.b64decode(line)[62:94]
    for shown in (repr(secret_key), str(secret_key), f"{secret_key!r}"):
        assert seed.hex() not in shown.lower()
        assert line not in shown
        assert secret_key.public_key.key_id_hex in shown


def test_secret_key_from_the_environment(our_keys: tuple[PublicKey, Path, Path]) -> None:
    public_key, _, secret_path = our_keys
    text = secret_path.read_text(encoding="utf-8")
    assert load_secret_key(environ={SECRET_KEY_ENV: text}).public_key == public_key
    bare_line = text.splitlines()[1]
    assert load_secret_key(environ={SECRET_KEY_ENV: bare_line}).public_key == public_key
    assert load_secret_key(environ={SECRET_KEY_ENV: text.replace("\n", "\r\n")}).public_key == public_key
    assert code_of(load_secret_key, environ={}) == "secret_key_missing"
    assert code_of(load_secret_key, environ={SECRET_KEY_ENV: "  \n"}) == "secret_key_missing"
    assert code_of(load_secret_key, secret_path.with_name("absent.key")) == "secret_key_unreadable"


def _with_raw(text: str, edit: bytes, offset: int) -> str:
    comment, line = text.splitlines()
    raw = bytearray(base64.b64decode(line))
    raw[offset : offset + len(edit)] = edit
    return f"{comment}\n{base64.b64encode(bytes(raw)).decode()}\n"


def test_damaged_and_encrypted_secret_keys_are_refused(
    minisign_keys: tuple[Path, Path], our_keys: tuple[PublicKey, Path, Path]
) -> None:
    _, mini_secret = minisign_keys
    ours = our_keys[2].read_text(encoding="utf-8")
    mini = mini_secret.read_text(encoding="utf-8")
    # `minisign -G -W` leaves the checksum zero; ours carries the real one. Both load.
    assert base64.b64decode(mini.splitlines()[1])[126:] == bytes(32)
    assert base64.b64decode(ours.splitlines()[1])[126:] != bytes(32)
    cases = {
        "encrypted (scrypt)": (_with_raw(ours, b"Sc", 2), "secret_key_encrypted"),
        "unknown kdf": (_with_raw(ours, b"Xx", 2), "secret_key_malformed"),
        "other algorithm": (_with_raw(ours, b"Ec", 0), "secret_key_malformed"),
        "wrong checksum": (_with_raw(ours, b"\x01", 126), "secret_key_malformed"),
        "halves do not match": (_with_raw(mini, b"\x01", 100), "secret_key_malformed"),
        "truncated": (ours[:120], "secret_key_malformed"),
        "not base64": ("untrusted comment: x\n!!!!\n", "secret_key_malformed"),
        "three lines": (ours + "extra\n", "secret_key_malformed"),
    }
    results = {name: code_of(SecretKey.from_text, text) for name, (text, _) in cases.items()}
    assert results == {name: code for name, (_, code) in cases.items()}


def test_public_key_files_are_strict(our_keys: tuple[PublicKey, Path, Path]) -> None:
    public_key, public_path, _ = our_keys
    text = public_path.read_text(encoding="utf-8")
    assert PublicKey.from_text(text.replace("\n", "\r\n")) == public_key
    for bad in [text.splitlines()[1], text[:-10], text + "more\n", text.replace("\nRW", "\nRw", 1), ""]:
        assert code_of(PublicKey.from_text, bad) == "public_key_malformed"


def test_load_pinned_keys_reads_every_pub_file(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    first = keygen(keys / "a.pub", tmp_path / "a.key")
    second = keygen(keys / "b.pub", tmp_path / "b.key")
    (keys / "README.md").write_text("not a key", encoding="utf-8")
    (keys / "copy.pub").write_text(first.to_text(), encoding="utf-8")
    assert load_pinned_keys(keys) == [first, second]

    (keys / "c.pub").write_text("garbage\n", encoding="utf-8")
    with pytest.raises(SignatureError) as caught:
        load_pinned_keys(keys)
    assert caught.value.code == "public_key_malformed"
    assert "c.pub" in caught.value.message

    (keys / "c.pub").write_text(PublicKey(first.key_id, second.key).to_text(), encoding="utf-8")
    assert code_of(load_pinned_keys, keys) == "public_key_conflict"
    assert code_of(load_pinned_keys, tmp_path / "absent") == "pinned_keys_unreadable"


def test_the_packaged_keys_are_the_repository_keys() -> None:
    packaged = load_pinned_keys()
    assert packaged == load_pinned_keys(ROOT / "attestations" / "release-keys")
    if not packaged:
        signature = sign(DATA, SecretKey.generate(), trusted_comment="t")
        assert code_of(verify, DATA, signature, packaged) == "no_pinned_keys"


# --- signatures -----------------------------------------------------------------------------------------


def test_sign_and_verify(our_keys: tuple[PublicKey, Path, Path]) -> None:
    public_key, _, secret_path = our_keys
    secret_key = load_secret_key(secret_path)
    signature = sign(DATA, secret_key, trusted_comment="trusted", untrusted_comment="free text")
    lines = signature.split("\n")
    assert lines[0] == "untrusted comment: free text"
    assert base64.b64decode(lines[1])[:2] == b"ED"  # the prehashed algorithm
    assert lines[2] == "trusted comment: trusted"
    assert lines[4] == ""
    other = SecretKey.generate().public_key
    assert verify(DATA, signature, [other, public_key]).key == public_key
    assert verify(DATA, signature.encode(), [public_key]).trusted_comment == "trusted"
    assert verify(DATA, signature.replace("\n", "\r\n"), [public_key]).trusted_comment == "trusted"
    assert verify(DATA, signature.rstrip("\n"), [public_key]).trusted_comment == "trusted"
    # The untrusted comment is not signed (minisign's format): changing it changes nothing.
    assert verify(DATA, signature.replace("free text", "anything"), [public_key]).key == public_key


def test_verification_refusals(our_keys: tuple[PublicKey, Path, Path]) -> None:
    public_key, _, secret_path = our_keys
    signature = sign(DATA, load_secret_key(secret_path), trusted_comment="trusted")
    first, sig_line, trusted, global_line = signature.splitlines(keepends=True)
    raw = base64.b64decode(sig_line)
    impostor = PublicKey(public_key.key_id, SecretKey.generate().public_key.key)

    def with_raw(edited: bytes) -> str:
        return first + base64.b64encode(edited).decode() + "\n" + trusted + global_line

    pinned = [public_key]
    edited_comment = first + sig_line + "trusted comment: t\n" + global_line
    cases: dict[str, tuple[bytes, str | bytes, list[PublicKey], str]] = {
        "other data": (DATA + b"x", signature, pinned, "signature_invalid"),
        "empty data": (b"", signature, pinned, "signature_invalid"),
        "trusted comment edited": (DATA, edited_comment, pinned, "signature_invalid"),
        "signature bit flipped": (
            DATA,
            with_raw(raw[:-1] + bytes([raw[-1] ^ 1])),
            pinned,
            "signature_invalid",
        ),
        "same key id, other key": (DATA, signature, [impostor], "signature_invalid"),
        "unpinned key": (DATA, signature, [SecretKey.generate().public_key], "signature_key_not_pinned"),
        "nothing pinned": (DATA, signature, [], "no_pinned_keys"),
        "unknown algorithm": (DATA, with_raw(b"EX" + raw[2:]), pinned, "signature_algorithm_unsupported"),
        "three lines": (DATA, first + sig_line + trusted, pinned, "signature_malformed"),
        "five lines": (DATA, signature + "\n", pinned, "signature_malformed"),
        "no untrusted prefix": (
            DATA,
            "comment\n" + sig_line + trusted + global_line,
            pinned,
            "signature_malformed",
        ),
        "no trusted prefix": (
            DATA,
            first + sig_line + "comment: t\n" + global_line,
            pinned,
            "signature_malformed",
        ),
        "garbled base64": (DATA, first + "%%%%\n" + trusted + global_line, pinned, "signature_malformed"),
        "short signature": (DATA, with_raw(raw[:-1]), pinned, "signature_malformed"),
        "not UTF-8": (DATA, signature.encode() + b"\xff", pinned, "signature_malformed"),
        "huge": (DATA, signature + "x" * 20000, pinned, "evidence_too_large"),
    }
    results = {name: code_of(verify, data, sig, keys) for name, (data, sig, keys, _) in cases.items()}
    assert results == {name: case[3] for name, case in cases.items()}


def test_comments_must_be_single_lines_within_minisigns_limits() -> None:
    secret_key = SecretKey.generate()
    assert code_of(sign, DATA, secret_key, trusted_comment="a\nb") == "signature_comment_invalid"
    assert code_of(sign, DATA, secret_key, trusted_comment="a\rb") == "signature_comment_invalid"
    assert (
        code_of(sign, DATA, secret_key, trusted_comment="t", untrusted_comment="a\nb")
        == "signature_comment_invalid"
    )
    assert code_of(sign, DATA, secret_key, trusted_comment="x" * 8001) == "signature_comment_invalid"
    assert code_of(sign, DATA, secret_key, trusted_comment="t", untrusted_comment="x" * 1001) == (
        "signature_comment_invalid"
    )
