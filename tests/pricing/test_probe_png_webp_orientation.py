"""The EXIF orientation of PNG (``eXIf`` chunk) and WebP (``EXIF`` chunk of the extended
format) images: read from chunk headers only, a quarter turn priced both ways as for JPEG,
bounded on hostile files, and never an error other than ``ImageError`` on any bytes.

Every image is made by Pillow; what a provider sees is what Pillow's decoder says: the stored
size (``Image.open``) for one that ignores the tag, the turned one (``ImageOps.exif_transpose``)
for one that applies it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import random
import struct
import tracemalloc
import zlib
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageOps

from pricing.images import parse_image_rule
from pricing.messages import parse_request
from pricing.meter import measure
from pricing.probe import Header, ImageError, probe, read_header
from pricing.route import ImageLimits, Route
from proxy.fetch import ImageFetchPolicy, ImageSizer

LIMITS = ImageLimits()
#: Rules that count rows and columns apart: a picture and its quarter turn cost them differently.
RULES = ("pixtral:pixtral-12b", "deepseek-v4:v4.1")
FORMATS = ("PNG", "WEBP")


def exif(orientation: int, endian: str = "<") -> Image.Exif:
    tags = Image.Exif()
    tags.endian = endian
    tags[0x010F] = "routefit"  # Make: an entry before the orientation's
    tags[0x0112] = orientation
    return tags


def image(fmt: str, width: int, height: int, orientation: int | None = None, **opts: Any) -> bytes:
    """A ``fmt`` image stored ``width`` x ``height``, with an EXIF Orientation when given."""
    if orientation is not None:
        opts["exif"] = exif(orientation, opts.pop("endian", "<"))
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (90, 120, 150)).save(buffer, fmt, **opts)
    return buffer.getvalue()


def seen(raw: bytes) -> tuple[tuple[int, int], tuple[int, int]]:
    """(the size a provider ignoring the tag sees, the size one applying it sees)."""
    stored = Image.open(io.BytesIO(raw))
    return stored.size, ImageOps.exif_transpose(stored).size


def data_url(raw: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(raw).decode()


def probed(raw: bytes) -> Any:
    info = probe(data_url(raw), LIMITS)
    assert info is not None
    return info


def route_for(rule: str) -> Route:
    return Route(alias="r", model="m", image_rule=parse_image_rule(rule), supports_vision=True)


def image_tokens(url: str, route: Route, sizes: Any = None) -> int:
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": url}]}]}
    (priced,) = measure(parse_request(body), route, sizes).image_details
    return priced.tokens


def provider_max(route: Route, raw: bytes) -> int:
    stored, upright = seen(raw)
    return max(route.image_rule.tokens(*stored), route.image_rule.tokens(*upright))


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_with(
    chunk: bytes, *, before: bytes = b"IDAT", width: int = 1024, height: int = 64
) -> bytes:
    """A Pillow PNG with ``chunk`` inserted before its first ``before`` chunk."""
    raw = image("PNG", width, height)
    at = raw.index(before) - 4
    return raw[:at] + chunk + raw[at:]


# --------------------------------------------------------------------------------------------
# What is read


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("orientation", range(1, 9))
def test_the_orientation_pillow_applies_is_the_one_read(fmt: str, orientation: int) -> None:
    raw = image(fmt, 300, 40, orientation)
    stored, upright = seen(raw)
    info = probed(raw)
    assert (info.width, info.height) == stored
    assert info.transposed == (upright != stored)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("rule", RULES)
def test_a_turned_png_or_webp_is_priced_as_either_provider_counts(fmt: str, rule: str) -> None:
    raw = image(fmt, 1024, 64, 6)
    stored, upright = seen(raw)
    assert upright == stored[::-1]  # the premise: the tag turns it
    route = route_for(rule)
    assert route.image_rule.tokens(*stored) != route.image_rule.tokens(*upright)
    assert image_tokens(data_url(raw), route) == provider_max(route, raw)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("endian", ["<", ">"])
def test_either_byte_order_is_read(fmt: str, endian: str) -> None:
    assert probed(image(fmt, 64, 32, 8, endian=endian)).transposed


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_exif_header_before_the_tiff_data_is_skipped(fmt: str) -> None:
    """Pillow writes the chunk bare; some writers keep the JPEG APP1's ``Exif\\0\\0`` before
    it, and Pillow's reader takes that too."""
    payload = exif(6).tobytes()
    assert payload.startswith(b"Exif\x00\x00")
    if fmt == "PNG":
        raw = png_with(png_chunk(b"eXIf", payload))
    else:
        bare = image("WEBP", 1024, 64, 6)
        at = bare.index(b"EXIF")
        size = struct.unpack("<I", bare[at + 4 : at + 8])[0]
        chunk = b"EXIF" + struct.pack("<I", len(payload)) + payload + b"\0" * (len(payload) & 1)
        body = bare[12:at] + chunk + bare[at + 8 + size + (size & 1) :]
        raw = b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body
    stored, upright = seen(raw)
    assert upright == stored[::-1]  # the premise: Pillow applies it
    assert probed(raw).transposed


def test_a_png_exif_after_the_image_data_is_not_read() -> None:
    """PNG requires eXIf before the first IDAT and browsers ignore a late one; the walk stops
    at the image data (a stream would otherwise be read to its end for every PNG)."""
    raw = png_with(png_chunk(b"eXIf", exif(6).tobytes()[6:]), before=b"IEND")
    assert raw.index(b"eXIf") > raw.index(b"IDAT")
    assert not probed(raw).transposed


def test_an_unflagged_webp_exif_chunk_is_not_looked_for() -> None:
    """The VP8X flag says whether an EXIF chunk is there; without it nothing is walked."""
    raw = bytearray(image("WEBP", 1024, 64, 6))
    assert raw[12:16] == b"VP8X" and raw[20] & 0x08
    raw[20] &= ~0x08
    assert not probed(bytes(raw)).transposed


def test_a_webp_exif_after_a_megabyte_of_image_data_is_read_without_decoding_it() -> None:
    pixels = random.Random(7).randbytes(800 * 600 * 3)
    buffer = io.BytesIO()
    Image.frombytes("RGB", (800, 600), pixels).save(buffer, "WEBP", quality=100, exif=exif(5))
    raw = buffer.getvalue()
    assert raw.index(b"EXIF") > 500_000  # the premise: the chunk follows the image data
    url = data_url(raw)
    tracemalloc.start()
    try:
        info = probe(url, LIMITS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info is not None and info.transposed
    assert peak < 256 * 1024  # the image data is hopped over, never decoded


# --------------------------------------------------------------------------------------------
# Streams: a URL image read up to the fetcher's cap


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_stream_cut_before_the_exif_chunk_leaves_the_orientation_open(fmt: str) -> None:
    raw = image(fmt, 1024, 64, 3)  # upright: only the cut can make it count as turned
    cut = raw[: raw.index(b"eXIf" if fmt == "PNG" else b"EXIF") - 2]
    assert isinstance(read_header(cut), int)  # more bytes could still come: ask for them
    header = read_header(cut, final=True)
    assert header == Header(fmt.lower(), 1024, 64, True)
    assert read_header(raw) == Header(fmt.lower(), 1024, 64, False)


def test_a_simple_webp_is_sized_from_its_first_bytes_as_before() -> None:
    raw = image("WEBP", 1024, 64)  # VP8, no extended header: no metadata to look for
    assert raw[12:16] == b"VP8 "
    assert read_header(raw[:30]) == Header("webp", 1024, 64)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_fetched_png_or_webp_turned_by_its_exif_is_priced_both_ways(fmt: str) -> None:
    raw = image(fmt, 1024, 64, 6)
    url = f"https://images.example.com/turned.{fmt.lower()}"
    sizes = asyncio.run(_sizes(url, raw, f"image/{fmt.lower()}"))
    route = route_for(RULES[0])
    assert image_tokens(url, route, sizes) == provider_max(route, raw)


async def _sizes(url: str, raw: bytes, kind: str) -> dict[str, Any]:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=raw, headers={"content-type": kind})

    async def resolve(host: str, port: int) -> list[str]:
        return ["93.184.216.34"]  # a public address: the fences let it through

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    async with ImageSizer(client, resolver=resolve) as sizer:
        found = await sizer.sizes([url], ImageFetchPolicy(allow_hosts=("images.example.com",)))
    await client.aclose()
    return found


# --------------------------------------------------------------------------------------------
# Hostile and malformed input


def test_endless_tiny_chunks_before_the_image_data_stop_the_walk_and_count_as_turned() -> None:
    raw = png_with(png_chunk(b"tEXt", b"") * 200_000)
    info = probed(raw)
    assert (info.width, info.height, info.transposed) == (1024, 64, True)


def test_a_corrupt_chunk_header_ends_the_walk_upright() -> None:
    raw = png_with(b"\x00\x00\x00\x04\x00\x01\x02\x03" + png_chunk(b"eXIf", exif(6).tobytes()))
    assert (probed(raw).width, probed(raw).transposed) == (1024, False)


def _exif_payloads() -> st.SearchStrategy[bytes]:
    built = st.builds(
        lambda o, e, prefixed: exif(o, e).tobytes()[0 if prefixed else 6 :],
        st.integers(0, 65535),
        st.sampled_from(["<", ">"]),
        st.booleans(),
    )
    return st.one_of(built, st.binary(max_size=48))


_PNG_KINDS = st.sampled_from([b"eXIf", b"IDAT", b"IEND", b"tEXt", b"iCCP"]) | st.binary(
    min_size=4, max_size=4
)
_WEBP_KINDS = st.sampled_from([b"EXIF", b"VP8 ", b"ALPH", b"ANMF", b"XMP "]) | st.binary(
    min_size=4, max_size=4
)
#: A chunk: its kind, its data, and a length field that may lie (None: the true one).
_CHUNKS = st.lists(
    st.tuples(st.one_of(_exif_payloads()), st.none() | st.integers(0, 2**32 - 1)), max_size=6
)


def _png_file(width: int, height: int, chunks: list[tuple[bytes, bytes, int | None]]) -> bytes:
    ihdr = png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    body = b"".join(
        struct.pack(">I", len(d) if n is None else n) + k + d + b"crc!" for k, d, n in chunks
    )
    return b"\x89PNG\r\n\x1a\n" + ihdr + body


def _webp_file(
    width: int, height: int, flags: int, chunks: list[tuple[bytes, bytes, int | None]], riff: int
) -> bytes:
    vp8x = b"VP8X" + struct.pack("<I", 10) + bytes([flags, 0, 0, 0])
    vp8x += (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    body = b"".join(
        k + struct.pack("<I", len(d) if n is None else n) + d + b"\0" * (len(d) & 1)
        for k, d, n in chunks
    )
    return b"RIFF" + struct.pack("<I", riff or 4 + len(vp8x) + len(body)) + b"WEBP" + vp8x + body


@st.composite
def hostile_files(draw: st.DrawFn) -> bytes:
    """PNG and extended WebP files of real headers and made-up chunks (true or lying lengths,
    EXIF data real or random), cut anywhere and with bytes flipped."""
    width, height = draw(st.integers(1, 5000)), draw(st.integers(1, 5000))
    chunks = draw(_CHUNKS)
    if draw(st.booleans()):
        kinds = draw(st.lists(_PNG_KINDS, min_size=len(chunks), max_size=len(chunks)))
        raw = _png_file(width, height, [(k, d, n) for k, (d, n) in zip(kinds, chunks, strict=True)])
    else:
        kinds = draw(st.lists(_WEBP_KINDS, min_size=len(chunks), max_size=len(chunks)))
        flags, riff = draw(st.integers(0, 255)), draw(st.sampled_from([0, 1, 2**32 - 1]))
        raw = _webp_file(
            width, height, flags, [(k, d, n) for k, (d, n) in zip(kinds, chunks, strict=True)], riff
        )
    data = bytearray(raw[: draw(st.integers(0, len(raw)))])
    for at in draw(st.lists(st.integers(0, max(0, len(data) - 1)), max_size=3)):
        if data:
            data[at] = draw(st.integers(0, 255))
    return bytes(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_files())
def test_any_bytes_are_a_header_a_request_for_more_or_a_client_error(data: bytes) -> None:
    """Never another exception; a stream's answer never depends on bytes it did not have (a
    header read from a prefix is the header of the whole); more is asked only past the end."""
    results = []
    for final in (False, True):
        try:
            result = read_header(data, final=final)
        except ImageError:
            continue
        assert isinstance(result, Header) or result > len(data)  # never asks for fewer
        results.append(result)
    whole = results[0] if results else None
    for cut in range(0, len(data), max(1, len(data) // 16)):
        try:
            early = read_header(data[:cut])
        except ImageError:
            continue
        assert isinstance(early, int) or early == whole
    with contextlib.suppress(ImageError):
        probe(data_url(data), LIMITS)
