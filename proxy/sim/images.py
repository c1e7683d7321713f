"""Image sizes and image token rules, as the simulated provider sees them.

:func:`image_tokens` is the one place a rule is applied. The rules (``openai-tile[:base/tile]``,
``anthropic[:edge/limit]``, ``gemini-tile[:tile]``, ``flat:N``) are implemented here from
docs/images.md § Sources and published vectors, independently of ``pricing.images``: the
simulator is the tests' oracle, so it never borrows the code it checks. Those are the rules its
models use; any other name is refused (a model's rule is the simulator's own configuration).
"""

from __future__ import annotations

import base64
import binascii
import io
import ipaddress
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from urllib.parse import urlsplit

__all__ = ["ImageProblem", "Picture", "decode_data_url", "image_tokens", "probe_bytes"]

_DATA_URL = re.compile(
    r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^,;]*)*),(?P<data>.*)$", re.S
)
_SIZE_HINT = re.compile(r"#(?P<w>\d{1,5})x(?P<h>\d{1,5})$")
FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}


class ImageProblem(ValueError):
    """An image the provider would refuse (bad base64, not an image, unsupported format)."""


@dataclass(frozen=True)
class Picture:
    width: int
    height: int
    media_type: str | None
    #: What makes two images the same for prefix caching (the bytes' or the URL's digest).
    key: str


def image_tokens(rule: str, width: int, height: int, detail: str = "auto") -> int:
    """Tokens one image of ``width`` × ``height`` costs under ``rule``."""
    kind, _, args = rule.partition(":")
    if kind == "flat":
        return int(args)
    if kind == "openai-tile":
        base, tile = (int(x) for x in args.split("/")) if args else (85, 170)
        return _openai_tile(width, height, detail, base, tile)
    if kind == "anthropic":
        edge, limit = (int(x) for x in args.split("/")) if args else (1568, 1568)
        return _anthropic(width, height, edge, limit)
    if kind == "gemini-tile":
        return _gemini_tile(width, height, int(args) if args else 258)
    if kind == "gemini-levels":  # Gemini 3: a price per media_resolution level, high by default
        low, medium, high, ultra_high = (int(x) for x in args.split("/"))
        levels = {"low": low, "medium": medium, "high": high, "ultra_high": ultra_high}
        return levels.get(detail, high)
    raise ValueError(
        f"the simulator has no image rule {rule!r} "
        "(it knows openai-tile[:base/tile], anthropic[:edge/limit], gemini-tile[:tile], "
        "gemini-levels:low/medium/high/ultra_high and flat:N)"
    )


def _fit(width: int, height: int, box: float) -> tuple[int, int]:
    scale = min(1.0, box / width, box / height)
    return max(1, math.floor(width * scale)), max(1, math.floor(height * scale))


def _openai_tile(width: int, height: int, detail: str, base: int, tile: int) -> int:
    if detail == "low":
        return base
    w, h = _fit(width, height, 2048)
    if min(w, h) > 768:  # current docs: scale the short side down to 768, never up
        scale = 768 / min(w, h)
        w, h = max(1, math.floor(w * scale)), max(1, math.floor(h * scale))
    return base + tile * math.ceil(w / 512) * math.ceil(h / 512)


def _anthropic(width: int, height: int, edge: int, limit: int) -> int:
    """Each side times min(1, edge / longest, √(limit·750 / (w·h))), floored — in exact
    rationals (a float scale lands a pixel short of a whole side: 2502 · 1568/2502)."""
    box = Fraction(edge, max(width, height))
    w, h = width, height
    if Fraction(limit * 750, width * height) < box * box and width * height > limit * 750:
        # floor(side · √q) = isqrt(floor(side² · q))
        q = Fraction(limit * 750, width * height)
        w = math.isqrt(math.floor(width * width * q))
        h = math.isqrt(math.floor(height * height * q))
    elif box < 1:
        w, h = math.floor(width * box), math.floor(height * box)
    return math.ceil(max(1, w) * max(1, h) / 750)


def _gemini_tile(width: int, height: int, tile: int) -> int:
    """Gemini 2.x: both sides <= 384 px is one tile; else crops of u = floor(min side / 1.5),
    u clamped to [256, 768], each a tile (docs/images.md, Gemini tiles)."""
    if width <= 384 and height <= 384:
        return tile
    unit = min(768, max(256, math.floor(min(width, height) / 1.5)))
    return tile * math.ceil(width / unit) * math.ceil(height / unit)


def probe_bytes(data: bytes, heif: bool = False) -> tuple[int, int, str]:
    """(width, height, media type) from an image's header; ImageProblem when it is no image.
    ``heif``: HEIC/HEIF is taken too (Google takes it; read with pillow-heif, the tests'
    reader, when it is installed)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            fmt = img.format or ""
            width, height = img.size
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        found = _heif(data) if heif else None
        if found is None:
            raise ImageProblem(f"not a decodable image ({exc.__class__.__name__})") from None
        return found
    if heif and fmt == "HEIF":  # Pillow read it itself (pillow-heif's opener is registered)
        return width, height, "image/heic"
    if fmt not in FORMATS:
        raise ImageProblem(f"unsupported image format {fmt or 'unknown'}")
    return width, height, FORMATS[fmt]


def _heif(data: bytes) -> tuple[int, int, str] | None:
    try:
        import pillow_heif
    except ImportError:
        return None
    try:
        found = pillow_heif.open_heif(data)
    except (ValueError, OSError, RuntimeError):
        return None
    width, height = found.size
    return width, height, "image/heic"


def decode_data_url(url: str) -> tuple[str | None, bytes]:
    """(declared media type, bytes) of a base64 ``data:`` URL; ImageProblem when malformed."""
    m = _DATA_URL.match(url)
    if m is None or ";base64" not in (m.group("params") or ""):
        raise ImageProblem("expected a base64-encoded data URL")
    return m.group("mime"), decode_base64(m.group("data"))


def decode_base64(data: str) -> bytes:
    try:
        return base64.b64decode(data.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ImageProblem("invalid base64 data") from None


def size_hint(url: str) -> tuple[int, int] | None:
    """A ``#WIDTHxHEIGHT`` fragment on a URL: the size the simulator assumes without fetching."""
    m = _SIZE_HINT.search(url)
    return (int(m.group("w")), int(m.group("h"))) if m else None


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


#: The most bytes a fetched image may have (OpenAI refuses images over 20 MB).
MAX_FETCH_BYTES = 20 * 1024 * 1024


async def resolve_url(url: str, *, assumed: tuple[int, int], fetch_loopback: bool) -> Picture:
    """The picture behind an image URL as the provider would see it.

    ``data:`` URLs are decoded; a ``#WxH`` fragment is trusted without fetching; any other URL
    is assumed to be ``assumed`` pixels — unless the simulator was started with
    ``fetch_loopback`` (``--fetch-loopback-images``, off by default), when a loopback URL is
    fetched as a provider fetches URLs. Off by default because a simulator that fetches for any
    client turns every client into a port scanner of the host it runs on.
    """
    from proxy.sim.tokens import digest

    if url.startswith("data:"):
        _, data = decode_data_url(url)
        width, height, actual = probe_bytes(data)
        return Picture(width, height, actual, digest(data))
    hint = size_hint(url)
    if hint is not None:
        return Picture(hint[0], hint[1], None, digest(url))
    if fetch_loopback and is_loopback(url):
        data = await _download(url)
        width, height, actual = probe_bytes(data)
        return Picture(width, height, actual, digest(data))
    return Picture(assumed[0], assumed[1], None, digest(url))


async def _download(url: str) -> bytes:
    """The image's bytes; ImageProblem otherwise, with one message whatever went wrong (refused
    connection, error status, oversized or undecodable body), so the answer never tells an
    open port from a closed one. OpenAI answers the same sentence."""
    import httpx

    failed = ImageProblem(f"Error while downloading {url}.")
    try:
        async with (
            httpx.AsyncClient(timeout=10, follow_redirects=False) as client,
            client.stream("GET", url) as resp,
        ):
            if resp.status_code != 200:
                raise failed
            data = b""
            async for chunk in resp.aiter_bytes():
                data += chunk
                if len(data) > MAX_FETCH_BYTES:
                    raise failed
    except (httpx.HTTPError, httpx.InvalidURL):
        raise failed from None
    try:
        probe_bytes(data)
    except ImageProblem:
        raise failed from None
    return data
