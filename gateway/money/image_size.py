"""An image's width and height from the head of a ``data:`` URL, without decoding the image.

Only a bounded prefix is base64-decoded (``HEAD_BYTES``), so the cost per part is fixed
however large the image is. PNG, GIF and WebP keep their size in the first 30 bytes; a
JPEG's frame header follows its metadata segments, which are skipped by their lengths.
Anything unreadable within the prefix is ``None`` (the caller then assumes the worst).
"""

from __future__ import annotations

import base64
import binascii
import struct

HEAD_BYTES = 64 * 1024
# JPEG start-of-frame markers (baseline, progressive, lossless...): not DHT, JPG or DAC.
SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def data_url_size(url: str) -> tuple[int, int] | None:
    """``(width, height)`` of a base64 ``data:image/...`` URL, or ``None``."""
    if not url.startswith("data:image/"):
        return None
    header, sep, payload = url.partition(",")
    if not sep or not header.endswith(";base64"):
        return None
    chars = (HEAD_BYTES // 3) * 4
    try:
        head = base64.b64decode(payload[:chars].strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    return image_size(head)


def image_size(head: bytes) -> tuple[int, int] | None:
    if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR":
        width, height = struct.unpack(">II", head[16:24])
    elif head[:6] in (b"GIF87a", b"GIF89a"):
        width, height = struct.unpack("<HH", head[6:10])
    elif head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        found = _webp_size(head)
        if found is None:
            return None
        width, height = found
    elif head.startswith(b"\xff\xd8"):
        found = _jpeg_size(head)
        if found is None:
            return None
        width, height = found
    else:
        return None
    return (width, height) if width > 0 and height > 0 else None


def _webp_size(head: bytes) -> tuple[int, int] | None:
    chunk = head[12:16]
    if chunk == b"VP8X" and len(head) >= 30:
        width = int.from_bytes(head[24:27], "little") + 1
        height = int.from_bytes(head[27:30], "little") + 1
        return width, height
    if chunk == b"VP8 " and len(head) >= 30 and head[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", head[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(head) >= 25 and head[20] == 0x2F:
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


def _jpeg_size(head: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 9 <= len(head):
        if head[at] != 0xFF:
            return None
        marker = head[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in SOF_MARKERS:
            height, width = struct.unpack(">HH", head[at + 5 : at + 9])
            return width, height
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # segments without a length
            at += 2
            continue
        (length,) = struct.unpack(">H", head[at + 2 : at + 4])
        at += 2 + length
    return None
