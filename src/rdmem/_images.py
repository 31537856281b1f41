"""What an image in a message costs: OpenAI's count for its vision models, from the image's size.

A chat message's ``image_url`` part is counted as OpenAI counts it for the GPT-4o family (its published
rule): 85 tokens at ``detail: "low"``; otherwise the image is fit within 2048 × 2048, scaled down until its
short side is at most 768 px, and costs 85 + 170 per 512-px tile. The size is read from the header of a
``data:`` URL (PNG, JPEG, GIF, WebP); an image whose size cannot be read here (a remote URL, another format)
counts as the largest an image can (:data:`UNKNOWN_IMAGE_TOKENS`), so that a budget always holds.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
from collections.abc import Mapping
from typing import Any

__all__ = ["UNKNOWN_IMAGE_TOKENS", "image_part", "image_parts", "image_size", "image_tokens", "parts_tokens",
           "with_images"]

_BASE, _TILE = 85, 170
#: The tokens of an image of unknown size: 2 × 4 tiles (a short side of 768 px, a long one of 2048).
UNKNOWN_IMAGE_TOKENS = _BASE + 8 * _TILE
#: How much of a data URL's bytes are read for a header (a JPEG's size follows its EXIF, up to 64 KiB).
_HEADER_BYTES = 128 * 1024
_DATA_URL = re.compile(r"data:[^,;]*(?:;[^,;]*)*;base64,", re.IGNORECASE)


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill bytes
            i += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD9)):  # markers without a length
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2:i + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start of frame
            h, w = struct.unpack(">HH", data[i + 5:i + 9])
            return w, h
        i += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8 " and len(data) >= 30:
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    return None


def image_size(url: str) -> tuple[int, int] | None:
    """``(width, height)`` of the image a ``data:`` URL holds, read from its header; ``None`` if unknown."""
    head = _DATA_URL.match(url)
    if head is None:
        return None
    b64 = url[head.end():head.end() + _HEADER_BYTES * 4 // 3]
    try:
        data = base64.b64decode(b64[:len(b64) // 4 * 4])
    except (binascii.Error, ValueError):
        return None
    size: tuple[int, int] | None = None
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        size = struct.unpack(">II", data[16:24])
    elif data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        size = struct.unpack("<HH", data[6:10])
    elif data[:2] == b"\xff\xd8":
        size = _jpeg_size(data)
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        size = _webp_size(data)
    return size if size and size[0] > 0 and size[1] > 0 else None


def image_tokens(url: str, detail: str | None = None) -> int:
    """Tokens of an image part with this ``url`` and ``detail`` (see the module's rule)."""
    if detail == "low":
        return _BASE
    size = image_size(url)
    if size is None:
        return UNKNOWN_IMAGE_TOKENS
    w, h = map(float, size)
    if max(w, h) > 2048:
        w, h = w * 2048 / max(w, h), h * 2048 / max(w, h)
    if min(w, h) > 768:
        w, h = w * 768 / min(w, h), h * 768 / min(w, h)
    return _BASE + _TILE * math.ceil(w / 512) * math.ceil(h / 512)


def image_parts(content: Any) -> list[Mapping[str, Any]]:
    """The ``image_url`` parts of a message's ``content`` (none for a string content)."""
    if not isinstance(content, list):
        return []
    return [p for p in content if isinstance(p, Mapping) and p.get("type") == "image_url"]


def parts_tokens(content: Any) -> int:
    """Tokens of the image parts of a message's ``content`` (0 for a string content or one without images)."""
    total = 0
    for part in image_parts(content):
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        detail = image.get("detail") if isinstance(image, Mapping) else None
        total += image_tokens(url if isinstance(url, str) else "", detail if isinstance(detail, str) else None)
    return total


def image_part(url: str, detail: object = None) -> dict[str, Any]:
    """A chat message's ``image_url`` part for a framework's image (its ``detail`` when it gives one)."""
    return {"type": "image_url", "image_url": {"url": url, **({"detail": detail} if isinstance(detail, str) else {})}}


def with_images(text: str, parts: Any) -> str | list[dict[str, Any]]:
    """A chat message's content for ``text`` and the images among ``parts`` (a Responses API message's content:
    ``input_image`` parts, whose ``image_url`` is a string), so that a framework's images count as images:
    ``text`` alone when there are none."""
    shown = [p for p in (parts if isinstance(parts, list) else ()) if isinstance(p, Mapping)
             and p.get("type") == "input_image"]
    images = [image_part(str(p.get("image_url") or ""), p.get("detail")) for p in shown]
    return [{"type": "text", "text": text}, *images] if images else text
