"""Image sizes from headers: the width and height a route's image rule needs, and nothing more.

Pricing needs an image's dimensions, never its pixels. Every supported format states them in
its first bytes (JPEG at the end of its metadata segments, which the parser hops over by their
length fields, reading only an EXIF block's orientation: a quarter turn swaps the sides; a PNG's
``eXIf`` and a WebP's ``EXIF`` chunk are reached the same way, by chunk headers only), so
a data URL is probed by decoding only the few base64 groups that hold those bytes: a 10 MB
photo costs a handful of 4-character decodes, and a pixel bomb (a tiny file declaring
100000x100000) is refused before anything is allocated for it.

The parsers are written out here rather than borrowed from Pillow: ``Image.open`` is lazy too,
but it wants a seekable file-like object holding every byte up to the header and its error
behaviour on a prefix varies by plugin; four small parsers are easier to bound and to read.

A conversation is re-sent every turn, so results are cached, per tenant (``probe``'s ``scope``:
a result one tenant's image paid for never serves another's). Hashing every byte of a multi-MB
data URL on every turn would cost more than the probe itself, so the cache key is a fingerprint
(the length, the leading characters, evenly spaced samples and the tail). The dimensions it
returns are nevertheless exact for any image with that key: a header is a function of the
characters it was read from, and a hit is only served when those characters match (they are
inside the fingerprinted prefix, or compared by digest). docs/images.md discusses the trade-off.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from pricing.documents import MEDIA_TYPE, is_document
from pricing.lru import LRU
from pricing.messages import RequestError
from pricing.recordings import is_recording
from pricing.recordings import note as recording_note
from pricing.route import ImageLimits

__all__ = [
    "CACHE",
    "FORMATS",
    "GOOGLE_ONLY",
    "MEDIA_TYPES",
    "Header",
    "ImageError",
    "ImageInfo",
    "ProbeCache",
    "Size",
    "check_header",
    "media_type_of",
    "placeholder",
    "probe",
    "read_header",
    "size_of",
]

#: Formats whose headers routefit reads: what OpenAI, Anthropic and DeepSeek accept, and HEIF
#: (HEIC), which only Google's models take (``GOOGLE_ONLY``: the meter refuses it elsewhere).
FORMATS = ("png", "jpeg", "gif", "webp", "heif")
GOOGLE_ONLY = frozenset({"heif"})

#: Characters of the payload in the fingerprint: a prefix (every PNG, GIF and WebP header and
#: most JPEG ones), evenly spaced samples, and the tail (a PNG's ends with the Adler-32 of all
#: its pixels).
_KEY_PREFIX = 4096
_KEY_TAIL = 1024
_KEY_SAMPLES = 16
_KEY_SAMPLE = 64


class ImageError(RequestError):
    """An image the client sent that cannot be priced (undecodable, too large, unsupported)."""


@dataclass(frozen=True, slots=True)
class Header:
    """What an image's header says: its format and the dimensions it declares.

    ``transposed``: its EXIF orientation (JPEG's APP1, PNG's eXIf, WebP's EXIF chunk) may show
    it turned a quarter, width and height swapped; a provider that applies the tag sees it so,
    one that does not sees it as stored, so a rule prices it both ways and takes the larger
    (docs/images.md § EXIF orientation).
    """

    format: str
    width: int
    height: int
    transposed: bool = False


#: An image's size learnt from its header: (width, height), with a third item True when its
#: orientation may turn it (``Header.transposed``: priced both ways).
Size = tuple[int, int] | tuple[int, int, bool]


def size_of(header: Header) -> Size:
    """``header``'s size as ``Size``: the plain pair unless the picture may be turned."""
    if header.transposed:
        return header.width, header.height, True
    return header.width, header.height


@dataclass(frozen=True, slots=True)
class ImageInfo:
    """A probed data-URL image.

    ``digest`` is the hex fingerprint of the data URL (see the module docstring): stable for
    the same image, used as the cache key and in placeholders; it is not a hash of every byte.
    ``size`` is the decoded size in bytes, computed from the base64 length (whitespace of a
    line-wrapped payload counted out only where it decides the route's limit: ``probe``).
    """

    width: int
    height: int
    format: str
    digest: str
    size: int = 0
    #: ``Header.transposed``: priced in both orientations.
    transposed: bool = False


# --------------------------------------------------------------------------------------------
# Header parsers. Each reads what it needs through ``read(offset, size)``, which returns exactly
# ``size`` bytes or raises _NeedMore (for a stream: fetch more; for a data URL: truncated).
# Malformed input raises ImageError.

Read = Callable[[int, int], bytes]


class _NeedMore(Exception):
    def __init__(self, needed: int) -> None:
        super().__init__(needed)
        self.needed = needed


class _Ended(_NeedMore):
    """No byte past the end will be read: a data URL's payload is whole (``unknown`` False);
    a stream cut at its byte cap is not (True: what lies past the cut is not known)."""

    def __init__(self, needed: int, unknown: bool) -> None:
        super().__init__(needed)
        self.unknown = unknown


def _png(read: Read) -> Header:
    head = read(8, 16)  # IHDR's length field, its type, then the width and height
    if head[4:8] != b"IHDR":
        raise ImageError("corrupt PNG: the first chunk is not IHDR")
    length, width, height = struct.unpack(">I4xII", head)
    turned = _turns(lambda: _png_exif_turns(read, 8 + 12 + length))
    return Header("png", width, height, turned)


#: Chunks walked looking for a PNG's ``eXIf`` or a WebP's ``EXIF`` (real files have a handful
#: before them; an animated WebP one per frame): a hostile file of millions of empty chunks must
#: not cost time in proportion. Past the bound the orientation is unknown: priced both ways.
_MAX_CHUNKS = 1024
#: A PNG chunk's length is at most 2^31-1 (PNG § 5.3).
_PNG_MAX_CHUNK = (1 << 31) - 1


def _turns(find: Callable[[], bool], unread_turns: bool = True) -> bool:
    """Whether metadata found by ``find`` turns the picture a quarter, once its size is known.

    Bytes that end (a data URL's whole payload: nothing lies past it) or cannot be walked
    (corrupt chunks, which a decoder stops at too) before an orientation is found leave it
    upright; chunks left unread (a stream cut at its byte cap, too many chunks) may hold one,
    so it counts as turned when ``unread_turns``. A stream that may still bring bytes
    (``_NeedMore``) asks for them."""
    try:
        return find()
    except _Ended as end:
        return end.unknown and unread_turns
    except _Unwalked as stop:
        return stop.unknown and unread_turns


def _png_exif_turns(read: Read, pos: int) -> bool:
    """Whether an ``eXIf`` chunk before the image data turns the picture. PNG requires eXIf
    before the first IDAT (PNG 3rd edition § 11.3.6.1; browsers ignore a late one), so the walk
    stops there: only the chunks' 8-byte headers are read on the way, never their data."""
    for _ in range(_MAX_CHUNKS):
        length, kind = struct.unpack(">I4s", read(pos, 8))
        if length > _PNG_MAX_CHUNK or not kind.isalpha():
            raise _Unwalked("corrupt PNG chunk", False)
        if kind in (b"IDAT", b"IEND"):
            return False
        if kind == b"eXIf":
            return _tiff_transposes(read, pos + 8, pos + 8 + length)
        pos += 12 + length  # length, type, data, CRC
    raise _Unwalked("too many PNG chunks before the image data", True)


#: Blocks and sub-blocks walked to a GIF's first image descriptor. Real files have a few
#: before it, or a few hundred when they carry XMP (its packet is walked as sub-blocks whose
#: sizes are its characters: about one per 40 bytes); a hostile file of endless 1-byte
#: sub-blocks must not cost time in proportion.
_MAX_GIF_STEPS = 16384


def _gif(read: Read) -> Header:
    """The logical screen, enlarged to the first frame where that frame overruns it, as
    Pillow's ``size`` (and Chromium's decoder) does: the picture a provider decodes. A data URL
    that ends before any frame keeps its screen; a stream cut before one is unsized."""
    width, height, packed = struct.unpack("<HHB", read(6, 5))
    table = 3 << ((packed & 7) + 1) if packed & 0x80 else 0  # the global colour table
    try:
        frame = _gif_first_frame(read, 13 + table)
    except _Ended as end:
        if end.unknown:
            raise
        frame = None
    if frame is not None:
        width, height = max(width, frame[0]), max(height, frame[1])
    return Header("gif", width, height)


def _gif_first_frame(read: Read, pos: int) -> tuple[int, int] | None:
    """Where the first image descriptor's frame ends, (left + width, top + height), or None
    when the trailer comes first. Extensions are hopped over by their sub-block sizes; a byte
    that starts no block is skipped, as Pillow's reader does. Each step (a block or a
    sub-block) reads a byte or two: past ``_MAX_GIF_STEPS`` of them (a file of endless
    sub-blocks) the image is refused, as a JPEG without a frame header is."""
    in_extension = False
    for _ in range(_MAX_GIF_STEPS):
        (byte,) = read(pos, 1)
        if in_extension:  # a sub-block's size: an empty one ends the extension
            pos += 1 + byte
            in_extension = byte != 0
        elif byte == 0x2C:  # image descriptor: left, top, width, height
            left, top, width, height = struct.unpack("<4H", read(pos + 1, 8))
            return left + width, top + height
        elif byte == 0x3B:  # trailer
            return None
        elif byte == 0x21:  # extension: its label, then sub-blocks
            pos, in_extension = pos + 2, True
        else:
            pos += 1
    raise ImageError(f"corrupt GIF: no image in its first {_MAX_GIF_STEPS} blocks")


def _webp(read: Read) -> Header:
    head = read(12, 18)  # chunk tag, chunk size, then the first 10 bytes of its payload
    chunk, body = head[:4], head[8:]
    if chunk == b"VP8 ":  # lossy: a key-frame header after the 3-byte frame tag
        if body[3:6] != b"\x9d\x01\x2a":
            raise ImageError("corrupt WebP: missing the VP8 key-frame start code")
        width, height = struct.unpack("<HH", body[6:10])
        return Header("webp", width & 0x3FFF, height & 0x3FFF)
    if chunk == b"VP8L":  # lossless: 14-bit width-1 and height-1 after a signature byte
        if body[0] != 0x2F:
            raise ImageError("corrupt WebP: missing the VP8L signature")
        (bits,) = struct.unpack("<I", body[1:5])
        return Header("webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X":  # extended (alpha, animation, metadata): 24-bit canvas width-1, height-1
        width = int.from_bytes(body[4:7], "little") + 1
        height = int.from_bytes(body[7:10], "little") + 1
        turned = bool(body[0] & _VP8X_EXIF) and _turns(lambda: _webp_exif_turns(read))
        return Header("webp", width, height, turned)
    raise ImageError(f"unsupported WebP chunk {chunk!r}")


#: The VP8X flag saying the file carries an ``EXIF`` chunk (WebP container spec: a writer sets
#: it when it writes one; only then is the chunk looked for).
_VP8X_EXIF = 0x08


def _webp_exif_turns(read: Read) -> bool:
    """Whether the ``EXIF`` chunk of an extended WebP turns the picture. The spec puts it after
    the image data, so the RIFF chunks are walked to it by their size fields (8 bytes read per
    chunk, none of their data), within the RIFF size the file states."""
    (riff,) = struct.unpack("<I", read(4, 4))
    end, pos = 8 + riff, 12
    for _ in range(_MAX_CHUNKS):
        if pos + 8 > end:
            return False  # the file ends without one
        kind, size = struct.unpack("<4sI", read(pos, 8))
        if kind == b"EXIF":
            return _tiff_transposes(read, pos + 8, min(pos + 8 + size, end))
        pos += 8 + size + (size & 1)  # chunks are padded to an even size
    raise _Unwalked("too many WebP chunks", True)


#: Start-of-frame markers (baseline, extended, progressive, lossless, arithmetic variants);
#: C4 (DHT), C8 (JPG) and CC (DAC) share the range but are not frames.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: Markers without a length field: TEM, RST0-7 (SOI was consumed already).
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
#: Segments walked before giving up: real files have a few dozen before their frame header; a
#: hostile one made of millions of 4-byte segments must not cost time in proportion.
_MAX_JPEG_SEGMENTS = 1024


#: EXIF Orientation values that show the stored picture as it is, or mirrored, or turned a half
#: (width and height kept); any other value (5-8: a quarter turn, or one no decoder knows) is
#: priced both ways.
_UPRIGHT = frozenset({1, 2, 3, 4})
_ORIENTATION = 0x0112
#: EXIF value types the orientation may be stored as: BYTE, SHORT, LONG (little-endian codes).
_EXIF_TYPES = {1: "B", 3: "H", 4: "I"}


def _jpeg(read: Read) -> Header:
    """The frame header's size and whether an EXIF block turns it. Segments are walked to the
    scan (an EXIF block after the frame header still counts for the decoders that read it);
    metadata is skipped by its length field, so only a few bytes of each are ever read."""
    frame: tuple[int, int] | None = None
    transposed = False
    try:
        for marker, pos, length in _segments(read):
            if marker in _SOF and frame is None:
                height, width = struct.unpack(">HH", read(pos + 5, 4))
                frame = width, height
            elif marker == 0xE1 and not transposed:
                transposed = _exif_transposes(read, pos + 4, pos + 2 + length)
    except _Ended as end:
        if frame is None:
            raise
        transposed = transposed or end.unknown
    except _Unwalked as stop:
        if frame is None:
            raise ImageError(stop.reason) from None
        transposed = transposed or stop.unknown
    if frame is None:
        raise ImageError("corrupt JPEG: no frame header before the image data")
    return Header("jpeg", *frame, transposed)


class _Unwalked(Exception):
    """The segments cannot be walked further (``reason``). After the frame header that ends
    the walk; ``unknown``: segments were left unread (an EXIF block may be among them)."""

    def __init__(self, reason: str, unknown: bool) -> None:
        super().__init__(reason)
        self.reason, self.unknown = reason, unknown


def _segments(read: Read) -> Iterator[tuple[int, int, int]]:
    """(marker, position, length field) of each segment from the first to the scan or the end
    of the image; ``_Unwalked`` where the bytes are no segment or there are too many."""
    pos = 2
    for _ in range(_MAX_JPEG_SEGMENTS):
        prefix, marker = read(pos, 2)
        if prefix != 0xFF:
            raise _Unwalked("corrupt JPEG: expected a segment marker", False)
        if marker == 0xFF:  # fill byte before a marker
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        if marker in (0xD9, 0xDA):  # end of image, or the scan data
            return
        (length,) = struct.unpack(">H", read(pos + 2, 2))
        if length < 2:
            raise _Unwalked("corrupt JPEG: bad segment length", False)
        yield marker, pos, length
        pos += 2 + length
    reason = f"corrupt JPEG: no frame header in its first {_MAX_JPEG_SEGMENTS} segments"
    raise _Unwalked(reason, True)


def _exif_transposes(read: Read, start: int, end: int) -> bool:
    """Whether the APP1 payload in [start, end) is an EXIF block whose first IFD holds an
    Orientation that is not upright (``_UPRIGHT``). Only the TIFF header and the IFD's entries
    are read, never past the segment (a decoder reads no further either)."""
    if end - start < 16 or read(start, 6) != b"Exif\0\0":
        return False
    return _tiff_transposes(read, start + 6, end)


def _tiff_transposes(read: Read, tiff: int, end: int) -> bool:
    """Whether the EXIF data (a TIFF header and its IFDs) in [tiff, end) holds an Orientation
    that is not upright. A PNG's eXIf and a WebP's EXIF chunk hold it bare; some writers put
    the ``Exif\0\0`` header of a JPEG's APP1 before it, which Pillow's reader takes, so it
    is skipped when there (in a JPEG too, written twice)."""
    if tiff + 8 > end:
        return False
    if read(tiff, 6) == b"Exif\0\0":
        tiff += 6
    if tiff + 8 > end:
        return False
    head = read(tiff, 8)
    order = {b"II": "<", b"MM": ">"}.get(head[:2])
    if order is None:
        return False  # no TIFF header: no decoder finds an orientation in it
    if struct.unpack(order + "H", head[2:4])[0] != 42:
        return True  # a TIFF variant (BigTIFF) not read here: priced both ways
    ifd = tiff + struct.unpack(order + "I", head[4:8])[0]
    if ifd + 2 > end:
        return False
    (count,) = struct.unpack(order + "H", read(ifd, 2))
    entries = min(count, (end - ifd - 2) // 12)
    table = read(ifd + 2, 12 * entries)
    for at in range(0, 12 * entries, 12):
        tag, kind = struct.unpack_from(order + "HH", table, at)
        if tag != _ORIENTATION:
            continue
        code = _EXIF_TYPES.get(kind)
        value = struct.unpack_from(order + code, table, at + 8)[0] if code else None
        if value not in _UPRIGHT:
            return True
    return False


#: ISO base media (HEIF) brands of still images: HEVC-coded (HEIC) and the generic image ones.
_HEIF_BRANDS = frozenset(
    {b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs", b"mif1", b"msf1"}
)
#: Top-level boxes looked through for ``meta`` (ftyp comes first; meta follows in real files).
_HEIF_TOP_BOXES = 16
#: The most of a ``meta`` box read (its item properties; an iPhone photo's is a few KB).
_HEIF_META_BYTES = 1 << 20


def _heif(read: Read) -> Header:
    """The largest image size the file states (``meta`` → ``iprp`` → ``ipco`` → ``ispe``): the
    picture's own (a grid states its whole picture; its tiles, thumbnail and auxiliary images
    state smaller ones). That is its coded size, which a clean aperture (``clap``) may crop by
    a few pixels (an odd side is coded even): priced from it, a picture is never priced small.
    Its rotation (``irot``) is not read: Google's rules price a picture and its quarter turn
    alike."""
    pos = 0
    for _ in range(_HEIF_TOP_BOXES):
        size, kind = struct.unpack(">I4s", read(pos, 8))
        if kind == b"meta":
            if not 12 <= size <= _HEIF_META_BYTES:
                raise ImageError("corrupt HEIF: its meta box is too small or too large")
            meta = read(pos, size)
            sizes = [
                struct.unpack_from(">II", meta, x + 4)  # after the box's version and flags
                for iprp in _children(meta, b"iprp", 12, size)  # meta: after version, flags
                for ipco in _children(meta, b"ipco", *iprp)
                for x, y in _children(meta, b"ispe", *ipco)
                if y - x >= 12
            ]
            if not sizes:
                raise ImageError("corrupt HEIF: no image size (ispe) in its properties")
            width, height = max(sizes, key=lambda wh: wh[0] * wh[1])
            return Header("heif", width, height)
        if size < 8:
            raise ImageError("corrupt HEIF: a box before meta has no size")
        pos += size
    raise ImageError("corrupt HEIF: no meta box among its first boxes")


def _children(data: bytes, kind: bytes, start: int, end: int) -> list[tuple[int, int]]:
    """(body start, body end) of each ``kind`` box among the ISO boxes laid end to end in
    ``data[start:end]``."""
    out = []
    while start + 8 <= end:
        size, found = struct.unpack_from(">I4s", data, start)
        head = 8
        if size == 1 and start + 16 <= end:
            (size,), head = struct.unpack_from(">Q", data, start + 8), 16
        if size < head or start + size > end:
            raise ImageError(f"corrupt HEIF: box {found!r} overruns its parent")
        if found == kind:
            out.append((start + head, start + size))
        start += size
    return out


def _format(magic: bytes) -> str | None:
    """The format (of ``FORMATS``) an image's first 12 bytes announce; None for none of them."""
    if magic.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if magic.startswith(b"\xff\xd8"):
        return "jpeg"
    if magic.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if magic.startswith(b"RIFF") and magic[8:12] == b"WEBP":
        return "webp"
    if magic[4:8] == b"ftyp" and magic[8:12] in _HEIF_BRANDS:
        return "heif"
    return None


def _parse(read: Read) -> Header:
    found = _format(read(0, 12))
    if found is None:
        raise ImageError(f"unsupported image format (supported: {', '.join(FORMATS)})")
    return _PARSERS[found](read)


#: Each format's header parser.
_PARSERS: dict[str, Callable[[Read], Header]] = {
    "png": _png,
    "jpeg": _jpeg,
    "gif": _gif,
    "webp": _webp,
    "heif": _heif,
}

#: The media type each format is labelled with on the wire.
MEDIA_TYPES = {
    "png": "image/png",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "heif": "image/heif",
}


def media_type_of(data: str) -> str | None:
    """The media type a base64 image payload's own bytes say (``MEDIA_TYPES``, read by the rule
    the probe reads them by), None when they are not base64 or not a format routefit reads.

    What a provider is told an image is: the probe priced the image as the format its bytes
    hold, and a provider that checks the label against the bytes (Anthropic: 400 "Image does
    not match the provided media type") refuses a client's wrong label, so the label sent is
    the format found. Only the first 12 bytes are decoded (a line-wrapped payload's breaks
    skipped)."""
    head = "".join(data[:64].split())[:16]
    try:
        magic = base64.b64decode(head + "=" * (-len(head) % 4), validate=True)
    except (ValueError, binascii.Error):
        return None
    found = _format(magic)
    return None if found is None else MEDIA_TYPES[found]


def read_header(data: bytes, final: bool = False) -> Header | int:
    """The header of the image whose leading bytes are ``data``, or how many bytes are needed.

    For streams (the proxy's URL fetcher). ``final``: no more bytes will be read (the stream
    ended, or its cap was reached); then a JPEG whose frame header was read but not all of its
    metadata is sized, its orientation taken as unknown (``Header.transposed``); so is a PNG
    cut before its image data and an extended WebP flagged EXIF cut before its EXIF chunk. Raises
    ImageError for an unsupported format or a malformed header; never looks at pixel data.
    """

    def read(offset: int, size: int) -> bytes:
        if offset + size > len(data):
            raise _Ended(offset + size, True) if final else _NeedMore(offset + size)
        return data[offset : offset + size]

    try:
        return _parse(read)
    except _NeedMore as more:
        return more.needed


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
        """Decoded bytes, from the base64 length alone: O(1), whitespace counted as data, so
        never under the true size (``exact_size`` counts it out)."""
        padding = 2 if self.url.endswith("==") else 1 if self.url.endswith("=") else 0
        return max(0, self.chars * 3 // 4 - padding)

    def exact_size(self) -> int:
        """Decoded bytes with line-wrapping whitespace counted out: a pass over the payload per
        whitespace character (~70 ms for 20 MB), so asked only of a payload that
        ``decoded_size`` puts over a limit. The limit is on the image, not on its encoding."""
        spaces = sum(self.url.count(c, self.start) for c in _WHITESPACE)
        tail = self.url[-8:].rstrip(_WHITESPACE)
        padding = 2 if tail.endswith("==") else 1 if tail.endswith("=") else 0
        return max(0, (self.chars - spaces) * 3 // 4 - padding)


def _split(url: str) -> _DataURL:
    comma = url.find(",", 0, 1024)
    if comma < 0:
        raise ImageError("malformed data URL: no ',' after the media type")
    meta = url[5:comma].lower()
    params = meta.split(";")
    if "base64" not in params[1:]:
        raise ImageError("image data URLs must be base64-encoded (data:image/png;base64,...)")
    return _DataURL(url, comma + 1, params[0] or "application/octet-stream")


#: What base64 decoders skip between groups (line-wrapped payloads: RFC 2045's 76 columns).
_WHITESPACE = " \n\r\t\f\v"


class _Wrapped(Exception):
    """The base64 carries whitespace (line-wrapped), so character offsets are not 4:3."""


class _Base64Reader:
    """Random access to the bytes of a base64 payload, decoding only the groups asked for.

    Every 4 characters encode 3 bytes, so bytes [o, o+n) live in characters
    [o//3*4, ⌈(o+n)/3⌉*4) — provided no whitespace precedes them, which is checked (at memchr
    speed) up to the furthest character read, never beyond. ``reads`` records the character
    ranges decoded: a header is a function of exactly those characters.
    """

    def __init__(self, data_url: _DataURL) -> None:
        self.url, self.start, self.chars = data_url.url, data_url.start, data_url.chars
        self.size = data_url.decoded_size()
        self.clean_to = self.start
        self.reads: list[tuple[int, int]] = []

    def __call__(self, offset: int, size: int) -> bytes:
        if offset + size > self.size:
            raise _Ended(offset + size, False)  # the payload is whole: nothing lies past it
        first = offset // 3 * 4
        last = min(-(-(offset + size) // 3) * 4, self.chars)
        begin, end = self.start + first, self.start + last
        if end > self.clean_to:
            for space in _WHITESPACE:
                if self.url.find(space, self.clean_to, end) >= 0:
                    raise _Wrapped
            self.clean_to = end
        group = self.url[begin:end]
        if len(group) % 4:  # the last quantum of an unpadded payload
            group += "=" * (-len(group) % 4)
        try:
            decoded = binascii.a2b_base64(group, strict_mode=True)
        except (binascii.Error, ValueError):
            raise ImageError("the image data is not valid base64") from None
        self.reads.append((first, last))
        skip = offset - offset // 3 * 3
        return decoded[skip : skip + size]


def _read(data_url: _DataURL) -> tuple[Header, tuple[tuple[int, int], ...] | None]:
    """The header, and the character ranges it was read from (None: not cacheable)."""
    reader = _Base64Reader(data_url)
    try:
        return _parse(reader), tuple(reader.reads)
    except _NeedMore:
        # Shorter than its header: garbage that decodes to a few bytes, or a cut-off image?
        if data_url.chars <= 65_536:
            with contextlib.suppress(_Wrapped):
                reader(0, data_url.decoded_size())  # raises ImageError if it is not base64
        raise ImageError("truncated image: the data ends inside its header") from None
    except _Wrapped:
        # Some encoders wrap base64 at 76 columns. Rare: take the slow road, uncached.
        compact = "".join(data_url.url[data_url.start :].split())
        header, _ = _read(_DataURL("data:;base64," + compact, 13, data_url.media_type))
        return header, None


def _fingerprint(data_url: _DataURL) -> bytes:
    """A cheap key for the image: O(fixed) work however large the data URL is."""
    url, start, n = data_url.url, data_url.start, data_url.chars
    pieces = [f"{n}:{data_url.media_type}:", url[start : start + _KEY_PREFIX]]
    if n > _KEY_PREFIX:
        span = n - _KEY_SAMPLE
        for i in range(_KEY_SAMPLES):
            at = start + span * i // (_KEY_SAMPLES - 1)
            pieces.append(url[at : at + _KEY_SAMPLE])
        pieces.append(url[-_KEY_TAIL:])
    joined = "".join(pieces).encode("ascii", "replace")
    return hashlib.blake2b(joined, digest_size=16).digest()


def _reads_digest(data_url: _DataURL, reads: tuple[tuple[int, int], ...]) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for first, last in reads:
        h.update(f"{first}:".encode())
        h.update(
            data_url.url[data_url.start + first : data_url.start + last].encode("ascii", "replace")
        )
    return h.digest()


@dataclass(frozen=True, slots=True)
class _Entry:
    info: ImageInfo
    #: The character ranges the header was read from, when some lie past the fingerprinted
    #: prefix (else empty), and their digest: a hit must show the same characters there.
    reads: tuple[tuple[int, int], ...]
    digest: bytes | None


class ProbeCache(LRU[_Entry]):
    """Probe results by data-URL fingerprint and scope (one bound for all scopes); ``probe``
    counts the lookups."""

    def __init__(self, maxsize: int = 4096) -> None:
        super().__init__(maxsize)


#: The process-wide probe cache (the meter's; a conversation's images are probed once).
CACHE = ProbeCache()


def _lookup(data_url: _DataURL, key: bytes) -> ImageInfo | None:
    entry = CACHE.get(key)
    if entry is None:
        return None
    if entry.digest is not None and _reads_digest(data_url, entry.reads) != entry.digest:
        return None  # same fingerprint, different header bytes: probe it afresh
    return entry.info


def probe(url: str, limits: ImageLimits, scope: bytes = b"") -> ImageInfo | None:
    """Size a ``data:`` URL image from its header; None for any other URL.

    Raises ImageError (a 400 for the client) for an undecodable, unsupported, truncated,
    oversized or absurdly large image. Only the base64 groups holding the header are decoded.
    ``scope``: the tenant whose prompt holds the image (``Route.scope``); the cache serves a
    result only to the tenant that probed it first.
    """
    if url[:5].lower() != "data:" or is_document(url) or is_recording(url):
        return None  # a PDF or a recording is not an image: pricing.documents / .recordings
    data_url = _split(url)
    size = data_url.decoded_size()
    if size > limits.max_image_bytes:
        size = data_url.exact_size()  # over by its length; wrapped base64 may not be
        if size > limits.max_image_bytes:
            raise ImageError(
                f"the image is {size} bytes, over this route's limit of {limits.max_image_bytes}"
            )
    fingerprint = _fingerprint(data_url)
    key = fingerprint + scope  # a fingerprint has a fixed length: unambiguous
    info = _lookup(data_url, key)
    if info is not None:
        CACHE.hits += 1
        check_header(Header(info.format, info.width, info.height), limits)
        return info
    CACHE.misses += 1
    header, reads = _read(data_url)
    check_header(header, limits)
    info = ImageInfo(
        header.width, header.height, header.format, fingerprint.hex(), size, header.transposed
    )
    if reads is not None:
        beyond = tuple(r for r in reads if r[1] > _KEY_PREFIX)
        digest = _reads_digest(data_url, beyond) if beyond else None
        CACHE.put(key, _Entry(info, beyond, digest))
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
    if is_recording(url):
        return recording_note(url)
    if url[:5].lower() == "data:":
        try:
            data_url = _split(url)
        except ImageError:
            return "[image omitted: data URL]"
        what = "document" if data_url.media_type == MEDIA_TYPE else "image"
        return f"[{what} omitted: {data_url.media_type} #{_fingerprint(data_url).hex()[:8]}]"
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
