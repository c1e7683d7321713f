"""Image sizes from headers: the width and height a route's image rule needs, and nothing more.

Pricing needs an image's dimensions, never its pixels. Every supported format states them in
its first bytes (JPEG after its metadata segments), so a data URL is probed by decoding only the
leading base64 the format needs: a 10 MB screenshot costs a few kilobytes of work, and a pixel
bomb (a tiny file declaring 100000x100000) is refused before anything is allocated for it.

The parsers are written out here rather than borrowed from Pillow: ``Image.open`` is lazy too,
but it wants a seekable complete file and its error behaviour on a prefix varies by plugin; four
small parsers are easier to bound and to read.

A conversation is re-sent every turn, so results are cached. Hashing every byte of a multi-MB
data URL on every turn would cost more than the probe itself, so the cache key is a fingerprint
(the length, the leading bytes, evenly spaced samples and the tail). The dimensions it returns
are nevertheless exact for any image with that key: they are a function of the header bytes
alone, and the key covers those bytes (verified by a second digest when a header runs past the
fingerprinted prefix). docs/images.md discusses the trade-off.
"""

from __future__ import annotations

import binascii
import hashlib
import re
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import urlsplit

from pricing.messages import RequestError
from pricing.route import ImageLimits

__all__ = [
    "CACHE",
    "FORMATS",
    "Header",
    "ImageError",
    "ImageInfo",
    "ProbeCache",
    "check_header",
    "placeholder",
    "probe",
    "read_header",
]

#: Formats whose headers routefit reads (what OpenAI, Anthropic and DeepSeek accept).
FORMATS = ("png", "jpeg", "gif", "webp")

#: Base64 characters decoded on the first attempt; covers every header but JPEGs with big
#: metadata segments, which extend the read as far as their segment lengths say.
_FIRST_READ = 4096
#: Characters of the payload covered by the fingerprint's prefix.
_KEY_PREFIX = 8192
_KEY_TAIL = 4096
_KEY_SAMPLES = 16
_KEY_SAMPLE = 64


class ImageError(RequestError):
    """An image the client sent that cannot be priced (undecodable, too large, unsupported)."""


@dataclass(frozen=True, slots=True)
class Header:
    """What an image's header says: its format and the dimensions it declares."""

    format: str
    width: int
    height: int


@dataclass(frozen=True, slots=True)
class ImageInfo:
    """A probed data-URL image.

    ``digest`` is the hex fingerprint of the data URL (see the module docstring): stable for
    the same image, used as the cache key and in placeholders; it is not a hash of every byte.
    ``size`` is the decoded size in bytes, computed from the base64 length.
    """

    width: int
    height: int
    format: str
    digest: str
    size: int = 0


# --------------------------------------------------------------------------------------------
# Header parsers. Each takes the leading bytes of a file and returns its Header, or an int: how
# many leading bytes it needs to decide. Malformed input raises ImageError.


def _png(data: bytes) -> Header | int:
    if len(data) < 24:
        return 24
    if data[12:16] != b"IHDR":
        raise ImageError("corrupt PNG: the first chunk is not IHDR")
    width, height = struct.unpack(">II", data[16:24])
    return Header("png", width, height)


def _gif(data: bytes) -> Header | int:
    if len(data) < 10:
        return 10
    width, height = struct.unpack("<HH", data[6:10])
    return Header("gif", width, height)


def _webp(data: bytes) -> Header | int:
    if len(data) < 30:
        return 30
    chunk = data[12:16]
    if chunk == b"VP8 ":  # lossy: a key-frame header after the 3-byte frame tag
        if data[23:26] != b"\x9d\x01\x2a":
            raise ImageError("corrupt WebP: missing the VP8 key-frame start code")
        width, height = struct.unpack("<HH", data[26:30])
        return Header("webp", width & 0x3FFF, height & 0x3FFF)
    if chunk == b"VP8L":  # lossless: 14-bit width-1 and height-1 after a signature byte
        if data[20] != 0x2F:
            raise ImageError("corrupt WebP: missing the VP8L signature")
        (bits,) = struct.unpack("<I", data[21:25])
        return Header("webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X":  # extended (alpha, animation, metadata): 24-bit canvas width-1, height-1
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return Header("webp", width, height)
    raise ImageError(f"unsupported WebP chunk {chunk!r}")


#: Start-of-frame markers (baseline, extended, progressive, lossless, arithmetic variants);
#: C4 (DHT), C8 (JPG) and CC (DAC) share the range but are not frames.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: Markers without a length field: TEM, RST0-7 (SOI was consumed already).
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})


def _jpeg(data: bytes) -> Header | int:
    """Walk the segments to the first start-of-frame; metadata (EXIF, ICC, XMP) is skipped by
    its length field, so the read extends exactly as far as the file's own structure says."""
    pos = 2
    while True:
        if pos + 2 > len(data):
            return pos + 2
        if data[pos] != 0xFF:
            raise ImageError("corrupt JPEG: expected a segment marker")
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte before a marker
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image, or scan data, before any frame header
            raise ImageError("corrupt JPEG: no frame header before the image data")
        if pos + 4 > len(data):
            return pos + 4
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if length < 2:
            raise ImageError("corrupt JPEG: bad segment length")
        if marker in _SOF:
            if pos + 9 > len(data):
                return pos + 9
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return Header("jpeg", width, height)
        pos += 2 + length


def read_header(data: bytes) -> Header | int:
    """The header of the image whose leading bytes are ``data``, or how many bytes are needed.

    Shared by the data-URL probe and the proxy's URL fetcher. Raises ImageError for an
    unsupported format or a malformed header; never looks at pixel data.
    """
    if len(data) < 12:
        return 12
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return _png(data)
    if data.startswith(b"\xff\xd8"):
        return _jpeg(data)
    if data.startswith((b"GIF87a", b"GIF89a")):
        return _gif(data)
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return _webp(data)
    raise ImageError(f"unsupported image format (supported: {', '.join(FORMATS)})")


def check_header(header: Header, limits: ImageLimits) -> None:
    """Refuse dimensions no provider would accept, before anything is sized from them."""
    if header.width < 1 or header.height < 1:
        raise ImageError(
            f"the {header.format} image declares a zero size ({header.width}x{header.height})"
        )
    pixels = header.width * header.height
    if pixels > limits.max_image_pixels:
        raise ImageError(
            f"the {header.format} image declares {header.width}x{header.height} = {pixels} "
            f"pixels, over this route's limit of {limits.max_image_pixels}"
        )


# --------------------------------------------------------------------------------------------
# Data URLs


@dataclass(frozen=True, slots=True)
class _DataURL:
    url: str
    start: int  # index of the first payload character
    media_type: str

    @property
    def chars(self) -> int:
        return len(self.url) - self.start

    def decoded_size(self) -> int:
        """Decoded bytes, from the base64 length alone (padding counted, whitespace not)."""
        padding = 2 if self.url.endswith("==") else 1 if self.url.endswith("=") else 0
        return max(0, self.chars * 3 // 4 - padding)


def _split(url: str) -> _DataURL:
    comma = url.find(",", 0, 1024)
    if comma < 0:
        raise ImageError("malformed data URL: no ',' after the media type")
    meta = url[5:comma].lower()
    params = meta.split(";")
    if "base64" not in params[1:]:
        raise ImageError("image data URLs must be base64-encoded (data:image/png;base64,...)")
    return _DataURL(url, comma + 1, params[0] or "application/octet-stream")


_WHITESPACE = re.compile(r"\s+")


def _decode(chunk: str, final: bool) -> bytes:
    if final and len(chunk) % 4:  # tolerate a missing '=' padding on the last quantum
        chunk += "=" * (-len(chunk) % 4)
    try:
        return binascii.a2b_base64(chunk, strict_mode=True)
    except (binascii.Error, ValueError):
        raise ImageError("the image data is not valid base64") from None


def _read(data_url: _DataURL) -> tuple[Header, int]:
    """The header and how many payload characters were decoded to find it."""
    payload_chars = data_url.chars
    url, start = data_url.url, data_url.start
    want = _FIRST_READ
    while True:
        chars = min(payload_chars, want - want % 4)
        chunk = url[start : start + chars]
        if _WHITESPACE.search(chunk):
            # Some encoders wrap base64 at 76 columns; rare, so take the slow road once.
            compact = _WHITESPACE.sub("", url[start:])
            header, _ = _read(_DataURL("data:;base64," + compact, 13, data_url.media_type))
            return header, payload_chars  # the cache then verifies the whole payload
        result = read_header(_decode(chunk, final=chars == payload_chars))
        if isinstance(result, Header):
            return result, chars
        if chars >= payload_chars:
            raise ImageError("truncated image: the data ends inside its header")
        # Bytes needed → base64 characters, and at least double the read (few round trips).
        want = max(-(-result // 3) * 4, 2 * chars)


def _fingerprint(data_url: _DataURL) -> bytes:
    """A cheap key for the image: O(fixed) work however large the data URL is."""
    url, start, n = data_url.url, data_url.start, data_url.chars
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{n}:{data_url.media_type}:".encode())
    h.update(url[start : start + _KEY_PREFIX].encode("ascii", "replace"))
    if n > _KEY_PREFIX:
        span = max(0, n - _KEY_SAMPLE)
        for i in range(_KEY_SAMPLES):
            at = start + span * i // (_KEY_SAMPLES - 1)
            h.update(url[at : at + _KEY_SAMPLE].encode("ascii", "replace"))
        h.update(url[-_KEY_TAIL:].encode("ascii", "replace"))
    return h.digest()


def _prefix_digest(data_url: _DataURL, chars: int) -> bytes:
    prefix = data_url.url[data_url.start : data_url.start + chars]
    return hashlib.blake2b(prefix.encode("ascii", "replace"), digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class _Entry:
    info: ImageInfo
    #: Digest of the header bytes when they run past the fingerprinted prefix (else None).
    prefix: bytes | None
    chars: int


class ProbeCache:
    """A bounded, thread-safe LRU of probe results by data-URL fingerprint."""

    def __init__(self, maxsize: int = 4096) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[bytes, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: bytes) -> _Entry | None:
        with self._lock:
            entry = self._data.get(key)
            if entry is not None:
                self._data.move_to_end(key)
            return entry

    def put(self, key: bytes, entry: _Entry) -> None:
        with self._lock:
            self._data[key] = entry
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._data)


#: The process-wide probe cache (the meter's; a conversation's images are probed once).
CACHE = ProbeCache()


def _lookup(data_url: _DataURL, key: bytes) -> ImageInfo | None:
    entry = CACHE.get(key)
    if entry is None:
        return None
    if entry.prefix is not None and _prefix_digest(data_url, entry.chars) != entry.prefix:
        return None  # same fingerprint, different header bytes: probe it afresh
    return entry.info


def probe(url: str, limits: ImageLimits) -> ImageInfo | None:
    """Size a ``data:`` URL image from its header; None for any other URL.

    Raises ImageError (a 400 for the client) for an undecodable, unsupported, truncated,
    oversized or absurdly large image. Only the leading base64 the header needs is decoded.
    """
    if url[:5].lower() != "data:":
        return None
    data_url = _split(url)
    size = data_url.decoded_size()
    if size > limits.max_image_bytes:
        raise ImageError(
            f"the image is {size} bytes, over this route's limit of {limits.max_image_bytes}"
        )
    key = _fingerprint(data_url)
    info = _lookup(data_url, key)
    if info is not None:
        CACHE.hits += 1
        check_header(Header(info.format, info.width, info.height), limits)
        return info
    CACHE.misses += 1
    header, chars = _read(data_url)
    check_header(header, limits)
    info = ImageInfo(header.width, header.height, header.format, key.hex(), size)
    covered = chars <= _KEY_PREFIX
    CACHE.put(key, _Entry(info, None if covered else _prefix_digest(data_url, chars), chars))
    return info


# --------------------------------------------------------------------------------------------
# Placeholders

_URL_CHARS = 80


def placeholder(info: ImageInfo | None, url: str) -> str:
    """The text that stands in for an image a route will not see (text-only, offloaded).

    Deterministic, so a conversation's prefix stays byte-identical turn after turn (provider
    prompt caches depend on it). A URL keeps its scheme, host and path, cut at 80 characters;
    credentials and the query string are dropped (the latter often carries signatures).
    """
    if info is not None:
        return f"[image omitted: {info.width}x{info.height} {info.format} #{info.digest[:8]}]"
    if url[:5].lower() == "data:":
        try:
            data_url = _split(url)
        except ImageError:
            return "[image omitted: data URL]"
        return f"[image omitted: {data_url.media_type} #{_fingerprint(data_url).hex()[:8]}]"
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port is not None else ""
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        shown = f"{parts.scheme}://{host}{port}{parts.path}" if parts.netloc else url
    except ValueError:  # an unparsable URL (bad port, bad IPv6 literal): show it as it came
        shown = url
    shown = "".join(c if c.isprintable() else "?" for c in shown)
    if len(shown) > _URL_CHARS:
        shown = shown[: _URL_CHARS - 1] + "…"
    return f"[image omitted: {shown}]"
