"""herdr_fs_image: a PNG, JPEG, GIF or WebP file with its media type and pixel dimensions, read
from the magic bytes and headers by the small parsers here (no image library)."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.boundary import Policy, RootSet, open_regular
from herdr_mcp.runtime.tools.fs.access import read_capped, refuse_secret
from herdr_mcp.text import shown_answer


@dataclass(frozen=True)
class ImageResult:
    """An image for MCP image content: raw bytes, media type, and metadata for the text part."""

    data: bytes
    mime_type: str
    info: dict[str, Any]


def _png_size(data: bytes) -> tuple[int, int] | None:
    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _gif_size(data: bytes) -> tuple[int, int] | None:
    if len(data) < 10:
        return None
    width, height = struct.unpack("<HH", data[6:10])
    return width, height


# JPEG start-of-frame markers carry the dimensions; C4 (DHT), C8 (JPG) and CC (DAC) share the
# range but are not frames.
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    index = 2
    while index + 4 <= len(data):
        if data[index] != 0xFF:
            return None
        marker = data[index + 1]
        if marker == 0xFF:
            index += 1
            continue
        if marker in _JPEG_STANDALONE:
            index += 2
            continue
        (length,) = struct.unpack(">H", data[index + 2 : index + 4])
        if marker in _JPEG_FRAMES:
            if index + 9 > len(data):
                return None
            height, width = struct.unpack(">HH", data[index + 5 : index + 9])
            return width, height
        if marker in (0xD9, 0xDA) or length < 2:
            return None
        index += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


def _image_kind(data: bytes) -> tuple[str, tuple[int, int] | None] | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png", _png_size(data)
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif", _gif_size(data)
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg", _jpeg_size(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp", _webp_size(data)
    return None


def fs_image(roots: RootSet, policy: Policy, args: Mapping[str, Any]) -> ImageResult:
    """herdr_fs_image: a PNG, JPEG, GIF or WebP file with its media type and pixel dimensions.

    The type comes from magic bytes and the dimensions from the headers (no image library).
    Raises ToolError: path codes, secret_path, not_a_file, special_file, too_large,
    unsupported_image.
    """
    del policy
    max_bytes: int = args["max_bytes"]
    target = roots.resolve(args["path"], for_write=False)
    refuse_secret(target)
    shown = target.lexical_relative
    with open_regular(target) as (fd, st):
        if st.st_size > max_bytes:
            raise ToolError(
                "too_large",
                f"{shown} is {st.st_size} bytes, above max_bytes={max_bytes}; raise max_bytes "
                "(up to 10 MiB).",
                path=shown,
                limit=max_bytes,
            )
        data = read_capped(fd, max_bytes, shown)
    kind = _image_kind(data)
    if kind is None or kind[1] is None:
        raise ToolError(
            "unsupported_image",
            f"{shown} is not a readable PNG, JPEG, GIF or WebP image; read text with herdr_fs_read.",
            path=shown,
        )
    mime_type, (width, height) = kind[0], kind[1]
    info = shown_answer(
        {
            "path": str(target.path),
            "root": str(target.root.path),
            "size": len(data),
            "width": width,
            "height": height,
            "mime_type": mime_type,
        }
    )
    return ImageResult(data=data, mime_type=mime_type, info=info)
