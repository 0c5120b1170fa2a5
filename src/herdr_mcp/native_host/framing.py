"""The native messaging wire: a 32-bit length in native byte order, then that many bytes of UTF-8 JSON.

Limits (docs/browser-protocol.md section 4):

- A frame from the browser may announce at most `MAX_INCOMING_BYTES`. Chrome itself would send
  up to 64 MiB, but nothing in protocol 1 comes near 1 MiB, and a larger length is refused from
  the 4 header bytes alone, before a byte of the body is read or a buffer of that size exists.
  The stream cannot be resynchronised after that, so the host answers `frame_too_large` and exits.
- A frame to the browser stays under `MAX_OUTGOING_BYTES`: Chrome drops the port on a message of
  1 MiB or more from a host. A message whose frame would reach it is sent as chunk frames
  `{"id", "chunk": {"index", "count", "data"}}`: `data` is a slice of the message's JSON text
  (ASCII-only, so a slice never splits a character), at most `CHUNK_TEXT_CHARS` characters, and
  the reader joins the slices in index order and parses the result as the message.
"""

from __future__ import annotations

import struct
from typing import Any

from herdr_mcp import text as texts

#: The length prefix: native byte order, standard 4-byte size ("=" keeps both), as Chrome writes it.
LENGTH = struct.Struct("=I")
#: Browser -> host: the contract's cap on a request frame (section 4), checked on the header alone.
MAX_INCOMING_BYTES = 1024 * 1024
#: Host -> browser: Chrome's own limit; every frame written is strictly below it.
MAX_OUTGOING_BYTES = 1024 * 1024
#: A chunk's slice of the message's JSON text (section 4: at most 512 KiB).
CHUNK_TEXT_CHARS = 512 * 1024


class FrameTooLarge(Exception):
    """The browser announced a frame over `MAX_INCOMING_BYTES` (its length is `length`)."""

    def __init__(self, length: int) -> None:
        super().__init__(f"a frame of {length} bytes announced; at most {MAX_INCOMING_BYTES} are accepted")
        self.length = length


def announced_length(header: bytes) -> int:
    """The body length a 4-byte header announces; `FrameTooLarge` over the cap."""
    (length,) = LENGTH.unpack(header)
    if length > MAX_INCOMING_BYTES:
        raise FrameTooLarge(length)
    return int(length)


def _text(message: dict[str, Any], *, ascii_only: bool) -> str:
    # `texts.dumps`: a lone surrogate anywhere in `message` cannot make the frame unencodable.
    return texts.dumps(message, ensure_ascii=ascii_only, separators=(",", ":"), allow_nan=False)


def _frame(payload: bytes) -> bytes:
    return LENGTH.pack(len(payload)) + payload


def encode(message: dict[str, Any]) -> list[bytes]:
    """The frames that carry `message` to the browser: one frame, or its chunk frames in order.

    Every frame returned is under `MAX_OUTGOING_BYTES`. A message must carry its `id`, which the
    chunks repeat so the reader knows whose slices they are.
    """
    payload = _text(message, ascii_only=False).encode("utf-8")
    if len(payload) < MAX_OUTGOING_BYTES:
        return [_frame(payload)]
    return _chunked(message["id"], _text(message, ascii_only=True))


def _chunked(message_id: object, text: str) -> list[bytes]:
    """`text` in slices whose chunk frames each stay under the cap. A slice of ASCII text grows
    when encoded as a JSON string only by its quotes and backslashes (two bytes each), so a slice
    dense in them is halved until its frame fits."""
    slices: list[str] = []
    start = 0
    while start < len(text):
        size = CHUNK_TEXT_CHARS
        while True:
            piece = text[start : start + size]
            # Index and count are below 10**7 here; 16 digits each is a safe bound for the envelope.
            envelope = {"id": message_id, "chunk": {"index": 10**15, "count": 10**15, "data": piece}}
            if len(_text(envelope, ascii_only=True)) + LENGTH.size < MAX_OUTGOING_BYTES:
                break
            size //= 2
        slices.append(piece)
        start += len(piece)
    count = len(slices)
    return [
        _frame(
            _text(
                {"id": message_id, "chunk": {"index": index, "count": count, "data": piece}}, ascii_only=True
            ).encode()
        )
        for index, piece in enumerate(slices)
    ]
