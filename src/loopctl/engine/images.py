"""Which images a provider can read: its media types, bytes that match the declared type, and its size limits.

An image stays in the conversation, so one the provider cannot read would make every later request of it
fail (a 400, run after run). The driver checks every image before it enters the conversation: an input
image that fails is refused before the run starts (``UnsupportedContent``); a tool's image that fails becomes
the tool's error result. Pure: no I/O.

The rules, from each provider's documentation:

- **Anthropic** (https://docs.anthropic.com/en/docs/build-with-claude/vision): JPEG, PNG, GIF and WebP; at most
  5 MB per image, counted on the base64 text (the API's own error reads "image exceeds 5 MB maximum: 5272940
  bytes > 5242880 bytes" for ``image.source.base64``); at most 8000 pixels a side.
- **OpenAI** (https://platform.openai.com/docs/guides/images-vision, "Image input requirements"): PNG, JPEG,
  WebP and non-animated GIF; up to 20 MB per image.
- **Gemini** (https://ai.google.dev/gemini-api/docs/image-understanding, "Supported image formats"; sizes:
  https://ai.google.dev/gemini-api/docs/file-input-methods): PNG, JPEG, WebP, HEIC and HEIF (GIF is refused:
  "MIME type must be image/png, image/jpeg, image/webp, image/heic, or image/heif"); inline data up to
  100 MB per request, so no image can be larger.
- Any other client (``ScriptedClient``, a client of its own): the four types every provider above but Gemini
  reads, with no size limit.

MB here is 2**20 bytes, as Anthropic's error shows its limit to be.
"""

from __future__ import annotations

import binascii

from loopctl._frozen import dataclass
from loopctl.message import ImagePart

__all__ = ["ImageRules", "image_problem", "rules_for"]

_MB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ImageRules:
    """What one provider reads: ``media_types`` (in the order error texts list them), and limits per image:
    ``max_bytes`` (the decoded image), ``max_base64`` (characters of its base64 text), ``max_side``
    (pixels, either side); ``None`` for no limit."""

    media_types: tuple[str, ...]
    max_bytes: int | None = None
    max_base64: int | None = None
    max_side: int | None = None


_COMMON = ("image/png", "image/jpeg", "image/gif", "image/webp")

RULES: dict[str, ImageRules] = {
    "anthropic": ImageRules(_COMMON, max_base64=5 * _MB, max_side=8000),
    "openai": ImageRules(_COMMON, max_bytes=20 * _MB),
    "gemini": ImageRules(("image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"), max_base64=100 * _MB),
}
"""The rules of each provider, by the ``provider`` name of its client."""

DEFAULT_RULES = ImageRules(_COMMON)
"""The rules for a client whose provider is not in :data:`RULES`."""

# The first bytes of each format (then, for WebP, 4 bytes of size and "WEBP"; for HEIC/HEIF, 4 bytes of box
# size, "ftyp" and a brand).
_MAGIC: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
_HEADER_CHARS = 4 * 256 * 1024
"""How much of an image's base64 text is decoded to find its size in pixels (768 KiB of image: a JPEG's frame
header comes after its metadata segments, each at most 64 KiB)."""
_HEIF_BRANDS = frozenset({b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1", b"heif"})


def rules_for(provider: str) -> ImageRules:
    """The :class:`ImageRules` of ``provider`` (a client's ``provider`` name)."""
    return RULES.get(provider, DEFAULT_RULES)


def image_problem(image: ImagePart, rules: ImageRules) -> str | None:
    """Why ``image`` cannot be sent under ``rules``, as a phrase ("its media type 'image/svg+xml' is not one
    of ..."), or ``None`` when it can."""
    source = image.source
    media_type = source.media_type
    if media_type not in rules.media_types:
        return f"its media type {media_type!r} is not one of {', '.join(rules.media_types)}"
    data = source.data
    head = binascii.a2b_base64(data[:24])
    if not _starts_as(media_type, head):
        return f"its bytes are not {media_type.removeprefix('image/').upper()} data"
    if rules.max_base64 is not None and len(data) > rules.max_base64:
        return f"it is {len(data):,} bytes of base64, over the limit of {rules.max_base64:,}"
    if rules.max_bytes is not None:
        size = _decoded_size(data)
        if size > rules.max_bytes:
            return f"it is {size:,} bytes, over the limit of {rules.max_bytes:,}"
    if rules.max_side is not None:
        size_px = image_size(binascii.a2b_base64(data[:_HEADER_CHARS]), media_type)
        if size_px is not None and max(size_px) > rules.max_side:
            width, height = size_px
            return f"it is {width} x {height} pixels, over the limit of {rules.max_side} a side"
    return None


def _starts_as(media_type: str, head: bytes) -> bool:
    if media_type in ("image/heic", "image/heif"):
        return head[4:8] == b"ftyp" and head[8:12] in _HEIF_BRANDS
    if not head.startswith(_MAGIC[media_type]):
        return False
    return media_type != "image/webp" or head[8:12] == b"WEBP"


def _decoded_size(data: str) -> int:
    """The number of bytes standard, padded base64 ``data`` decodes to."""
    return len(data) * 3 // 4 - (2 if data.endswith("==") else 1 if data.endswith("=") else 0)


def image_size(data: bytes, media_type: str) -> tuple[int, int] | None:
    """``(width, height)`` in pixels, read from the header of PNG, GIF, WebP or JPEG ``data``; ``None`` when
    the header cannot be read (the provider then decides)."""
    try:
        if media_type == "image/png" and data[12:16] == b"IHDR":
            return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        if media_type == "image/gif" and len(data) >= 10:
            return int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
        if media_type == "image/webp":
            return _webp_size(data)
        if media_type == "image/jpeg":
            return _jpeg_size(data)
    except IndexError:
        return None
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    # RIFF container; the first chunk says the encoding (https://developers.google.com/speed/webp/docs/riff_container).
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30:
        return int.from_bytes(data[26:28], "little") & 0x3FFF, int.from_bytes(data[28:30], "little") & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


# JPEG start-of-frame markers (all SOFn but DHT C4, JPG C8 and DAC CC), which carry the frame's size.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    n = len(data)
    while i + 9 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
            continue
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in _SOF:
            return int.from_bytes(data[i + 7 : i + 9], "big"), int.from_bytes(data[i + 5 : i + 7], "big")
        if marker == 0xDA or length < 2:  # start of scan: no frame header before it
            return None
        i += 2 + length
    return None
