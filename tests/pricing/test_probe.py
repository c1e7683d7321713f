"""Header-only probing of data-URL images: every format as Pillow (and pillow-heif, for HEIC)
writes it, malformed and hostile inputs, the fingerprint cache, and placeholders."""

from __future__ import annotations

import base64
import io
import random
import struct
import tracemalloc
import zlib

import pillow_heif
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from pricing.probe import (
    CACHE,
    FORMATS,
    Header,
    ImageError,
    ImageInfo,
    placeholder,
    probe,
    read_header,
)
from pricing.route import ImageLimits

LIMITS = ImageLimits()
pillow_heif.register_heif_opener()  # Pillow then writes (and reads) HEIC, as an iPhone saves it


def encode(raw: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(raw).decode()


def noise(width: int, height: int, mode: str = "RGB") -> Image.Image:
    """Random pixels (seeded): files as large as the format makes them."""
    size = width * height * len(mode)
    return Image.frombytes(mode, (width, height), random.Random(size).randbytes(size))


def saved(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def probed(raw: bytes, limits: ImageLimits = LIMITS) -> ImageInfo:
    info = probe(encode(raw), limits)
    assert info is not None
    return info


# --------------------------------------------------------------------------------------------
# Every format, as Pillow writes it


def exif_block(size: int) -> bytes:
    exif = Image.Exif()
    exif[0x010E] = "x" * size  # ImageDescription: a big APP1 segment before the frame header
    return exif.tobytes()


FILES = {
    "png-rgb": lambda: saved(noise(321, 123), "PNG"),
    "png-rgba": lambda: saved(noise(64, 400, "RGBA"), "PNG"),
    "png-palette": lambda: saved(noise(77, 55).convert("P"), "PNG"),
    "png-16bit-gray": lambda: saved(Image.new("I;16", (1000, 10)), "PNG"),
    "jpeg-baseline": lambda: saved(noise(640, 480), "JPEG", quality=80),
    "jpeg-progressive": lambda: saved(noise(333, 777), "JPEG", progressive=True),
    "jpeg-grayscale": lambda: saved(noise(50, 60).convert("L"), "JPEG"),
    "jpeg-cmyk": lambda: saved(noise(90, 45).convert("CMYK"), "JPEG"),
    "jpeg-big-exif": lambda: saved(noise(1200, 900), "JPEG", exif=exif_block(60_000)),
    "jpeg-huge-icc": lambda: saved(noise(20, 30), "JPEG", icc_profile=bytes(300_000)),
    "gif": lambda: saved(noise(200, 100).convert("P"), "GIF"),
    "gif-animated": lambda: _animated_gif(),
    "webp-lossy": lambda: saved(noise(500, 250), "WEBP", quality=70),
    "webp-lossless": lambda: saved(noise(301, 199), "WEBP", lossless=True),
    "webp-alpha": lambda: saved(noise(120, 80, "RGBA"), "WEBP"),  # VP8X (alpha)
    "webp-lossless-alpha": lambda: saved(noise(16383, 3, "RGBA"), "WEBP", lossless=True),
    "heic": lambda: saved(noise(640, 480), "HEIF", quality=50),
    "heic-odd-size": lambda: saved(noise(1001, 333), "HEIF", quality=30),
    "heic-alpha": lambda: saved(noise(120, 80, "RGBA"), "HEIF"),
}


def _animated_gif() -> bytes:
    frames = [noise(150, 90).convert("P") for _ in range(3)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:], duration=50, loop=0)
    return buffer.getvalue()


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_format_probes_to_pillows_size(name: str) -> None:
    raw = FILES[name]()
    with Image.open(io.BytesIO(raw)) as image:
        expected = (image.size, image.format.lower())  # type: ignore[union-attr]
    info = probed(raw)
    if name.startswith("heic"):  # the coded size: a clean aperture (clap) may crop it a little
        (width, height), fmt = expected
        assert (
            info.format == fmt and 0 <= info.width - width < 64 and 0 <= info.height - height < 64
        )
    else:
        assert ((info.width, info.height), info.format) == expected
    assert info.size == len(raw)  # decoded size from the base64 length alone


def test_the_webp_variants_cover_all_three_chunk_kinds() -> None:
    chunks = {FILES[name]()[12:16] for name in FILES if name.startswith("webp")}
    assert chunks == {b"VP8 ", b"VP8L", b"VP8X"}


def test_big_metadata_pushes_the_jpeg_frame_header_past_the_first_read() -> None:
    raw = FILES["jpeg-big-exif"]()
    assert raw.index(b"\xff\xc0") > 60_000  # the first read decodes ~3 KB
    info = probed(raw)
    assert (info.width, info.height) == (1200, 900)
    icc = FILES["jpeg-huge-icc"]()
    assert icc.count(b"\xff\xe2") >= 5 and icc.index(b"\xff\xc0") > 300_000
    info = probed(icc)
    assert (info.width, info.height) == (20, 30)


@settings(max_examples=40, deadline=None)
@given(
    width=st.integers(1, 600),
    height=st.integers(1, 600),
    fmt=st.sampled_from(["PNG", "JPEG", "GIF", "WEBP"]),
)
def test_random_sizes_round_trip(width: int, height: int, fmt: str) -> None:
    raw = saved(Image.new("RGB", (width, height), (width % 256, height % 256, 7)), fmt)
    info = probed(raw)
    assert (info.width, info.height, info.format) == (width, height, fmt.lower())


def test_read_header_asks_for_more_bytes_instead_of_guessing() -> None:
    raw = FILES["jpeg-big-exif"]()
    needed = read_header(raw[:100])
    assert isinstance(needed, int) and needed > 100
    assert read_header(raw[:5]) == 12
    assert read_header(FILES["png-rgb"]()[:20]) == 24
    assert read_header(FILES["png-rgb"]()) == Header("png", 321, 123)


# --------------------------------------------------------------------------------------------
# Malformed, truncated, hostile


def png_header(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (
        b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk + struct.pack(">I", zlib.crc32(chunk))
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("data:image/png;base64,!!!!", "not valid base64"),
        ("data:image/png;base64,iVBORw0KGgo=AAAA", "not valid base64"),
        ("data:image/png,rawbytes", "base64-encoded"),
        ("data:image/png;base64", "no ','"),
        (encode(b"BM" + bytes(60), "image/bmp"), "unsupported image format"),
        (encode(b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/svg+xml"), "unsupported"),
        (encode(png_header(100, 100)[:16]), "truncated"),
        (encode(b"\xff\xd8\xff"), "truncated"),
        (encode(png_header(0, 100)), "zero size"),
        (encode(png_header(100, 0)), "zero size"),
        (encode(png_header(100_000, 100_000)), "over this route's limit"),
        (encode(b"\x89PNG\r\n\x1a\n" + bytes(4) + b"IDAT" + bytes(20)), "not IHDR"),
        (encode(b"\xff\xd8\xff\xda\x00\x08" + bytes(30)), "no frame header"),
        (encode(b"\xff\xd8\x00\x00" + bytes(30)), "expected a segment marker"),
        (encode(b"\xff\xd8\xff\xe0\x00\x01" + bytes(30)), "bad segment length"),
        (encode(b"RIFF\x00\x00\x00\x00WEBPVP8Q" + bytes(30)), "unsupported WebP chunk"),
        (encode(b"RIFF\x00\x00\x00\x00WEBPVP8 " + bytes(30)), "start code"),
        (encode(b"RIFF\x00\x00\x00\x00WEBPVP8L" + bytes(30)), "VP8L signature"),
    ],
)
def test_malformed_images_are_client_errors(url: str, message: str) -> None:
    with pytest.raises(ImageError) as info:
        probe(url, LIMITS)
    assert message in info.value.message


def test_decoded_bytes_over_the_limit_are_refused_without_decoding() -> None:
    raw = FILES["png-rgb"]()
    limits = ImageLimits(max_image_bytes=len(raw) - 1)
    with pytest.raises(ImageError, match=f"{len(raw)} bytes, over this route's limit"):
        probe(encode(raw), limits)
    assert probed(raw, ImageLimits(max_image_bytes=len(raw))).size == len(raw)


def test_a_pixel_bomb_is_refused_without_decoding_it() -> None:
    # A 100000x100000 PNG declared in a 33-byte header, followed by 2 MB of "image data".
    url = encode(png_header(100_000, 100_000) + bytes(2_000_000))
    tracemalloc.start()
    try:
        with pytest.raises(ImageError, match="100000x100000"):
            probe(url, LIMITS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024  # the 2.7 MB payload is never decoded


def test_a_large_image_is_probed_from_its_prefix_only() -> None:
    raw = saved(noise(2000, 1500), "PNG", compress_level=1)  # ~9 MB of random pixels
    url = encode(raw)
    assert len(url) > 10_000_000
    tracemalloc.start()
    try:
        info = probe(url, LIMITS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info is not None and (info.width, info.height) == (2000, 1500)
    assert peak < 256 * 1024


def test_whitespace_wrapped_base64_and_missing_padding_are_tolerated() -> None:
    raw = FILES["gif"]()
    b64 = base64.b64encode(raw).decode()
    wrapped = "\n".join(b64[i : i + 76] for i in range(0, len(b64), 76))
    info = probe("data:image/gif;base64," + wrapped, LIMITS)
    assert info is not None and (info.width, info.height) == (200, 100)
    tiny = base64.b64encode(png_header(7, 9)).decode().rstrip("=")
    info = probe("data:image/png;base64," + tiny, LIMITS)
    assert info is not None and (info.width, info.height) == (7, 9)


def test_line_wrapped_base64_before_a_deep_jpeg_header_is_not_misread() -> None:
    raw = FILES["jpeg-big-exif"]()
    b64 = base64.b64encode(raw).decode()
    for wrap in ("\n", "\r\n"):
        wrapped = wrap.join(b64[i : i + 76] for i in range(0, len(b64), 76))
        info = probe("data:image/jpeg;base64," + wrapped, LIMITS)
        assert info is not None and (info.width, info.height) == (1200, 900)
    # A stray newline far after the header changes nothing.
    late = "data:image/jpeg;base64," + b64[:-1000] + "\n" + b64[-1000:]
    info = probe(late, LIMITS)
    assert info is not None and (info.width, info.height) == (1200, 900)


def test_a_jpeg_made_of_endless_tiny_segments_is_refused_after_a_bounded_walk() -> None:
    # bounded in segments, not in the file's length (its time is bench material, not a test's)
    raw = b"\xff\xd8" + b"\xff\xfe\x00\x02" * 500_000  # 2 MB of empty comment segments
    with pytest.raises(ImageError, match="no frame header in its first 1024 segments"):
        probe(encode(raw, "image/jpeg"), LIMITS)


def with_screen(gif: bytes, width: int, height: int) -> bytes:
    """``gif`` with its logical screen (header bytes 6-9) set to width x height."""
    return gif[:6] + struct.pack("<HH", width, height) + gif[10:]


@pytest.mark.parametrize("screen", [(10, 10), (0, 0), (300, 5)])
def test_a_gif_frame_larger_than_its_screen_is_sized_as_pillow_shows_it(
    screen: tuple[int, int],
) -> None:
    # docs/images.md § Probing: Pillow (and Chromium) enlarge the screen to a first frame that
    # overruns it, and that is the picture a provider decodes. It used to be sized 10x10 (a
    # 300x200 picture priced as an icon) and a 0x0 screen was refused as a zero size.
    frame = saved(noise(300, 200).convert("P"), "GIF", comment=b"c" * 600)
    raw = with_screen(frame, *screen)
    assert Image.open(io.BytesIO(raw)).size == (300, 200)
    info = probed(raw)
    assert (info.width, info.height) == (300, 200)
    assert read_header(raw) == Header("gif", 300, 200)
    assert isinstance(read_header(raw[:700]), int)  # a stream cut before the frame: unsized


def test_a_gif_is_sized_from_its_first_frame_and_screen_together() -> None:
    # The first frame at (250, 10) of a 200x100 screen ends at 270x60: the picture is 270x100.
    table = bytes(range(6))  # a 2-colour global table
    raw = (
        b"GIF89a"
        + struct.pack("<HHBBB", 200, 100, 0x80, 0, 0)
        + table
        + b"\x21\xf9\x04\x00\x00\x00\x00\x00"  # a graphic control extension
        + b"\x2c"
        + struct.pack("<4HB", 250, 10, 20, 50, 0)
        + b"\x02\x02\x44\x01\x00\x3b"
    )
    assert Image.open(io.BytesIO(raw)).size == (270, 100)
    assert (probed(raw).width, probed(raw).height) == (270, 100)
    no_frame = b"GIF89a" + struct.pack("<HHBBB", 20, 30, 0, 0, 0) + b"\x3b"
    assert (probed(no_frame).width, probed(no_frame).height) == (20, 30)  # only its screen


def test_a_gif_made_of_endless_sub_blocks_is_refused_after_a_bounded_walk() -> None:
    # the walk to the first frame is bounded in steps, not in the file's length (its time is
    # bench material, not a test's): endless 1-byte sub-blocks are refused at the bound, and a
    # frame within it is still found
    head = b"GIF89a" + struct.pack("<HHBBB", 10, 10, 0, 0, 0) + b"\x21\xfe"
    with pytest.raises(ImageError, match="no image in its first 16384 blocks"):
        probe(encode(head + b"\x01x" * 500_000, "image/gif"), LIMITS)
    frame = b"\x00\x2c" + struct.pack("<4H", 0, 0, 300, 200) + b"\x00"
    info = probe(encode(head + b"\x01x" * 16_000 + frame, "image/gif"), LIMITS)
    assert info is not None and (info.width, info.height) == (300, 200)


def test_fill_bytes_and_restart_markers_are_skipped() -> None:
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, 20, 30, 1) + b"\x01\x11\x00"
    raw = b"\xff\xd8" + b"\xff" * 5 + b"\xff\xd0" + b"\xff\xe0\x00\x04ab" + sof
    info = probed(raw)
    assert (info.width, info.height) == (30, 20)


def test_sniffed_format_wins_over_the_declared_media_type() -> None:
    info = probe(encode(FILES["jpeg-baseline"](), "image/png"), LIMITS)
    assert info is not None and info.format == "jpeg"


def test_other_urls_are_not_probed() -> None:
    assert probe("https://example.com/a.png", LIMITS) is None
    assert probe("file:///etc/passwd", LIMITS) is None
    upper = "DATA:image/png;base64," + base64.b64encode(png_header(3, 4)).decode()
    info = probe(upper, LIMITS)
    assert info is not None and (info.width, info.height) == (3, 4)


# --------------------------------------------------------------------------------------------
# The cache


def test_a_resent_image_is_probed_once() -> None:
    CACHE.clear()
    url = encode(FILES["webp-lossy"]())
    first = probe(url, LIMITS)
    second = probe(url[:], LIMITS)  # an equal string, as the next turn's JSON would carry
    assert first == second
    assert (CACHE.misses, CACHE.hits) == (1, 1)


def test_limits_are_checked_on_a_cache_hit_too() -> None:
    CACHE.clear()
    url = encode(png_header(5000, 5000))
    assert probe(url, LIMITS) is not None
    with pytest.raises(ImageError, match="over this route's limit"):
        probe(url, ImageLimits(max_image_pixels=1_000_000))


def jpeg_with_frame_after_metadata(width: int, height: int) -> bytes:
    """A JPEG whose frame header sits after 80 KB of metadata, followed by 200 KB of data."""
    app = b"\xff\xe1" + struct.pack(">H", 65_000) + bytes(64_998)
    app2 = b"\xff\xe2" + struct.pack(">H", 15_000) + bytes(14_998)
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app + app2 + sof + bytes(200_000) + b"\xff\xd9"


def test_fingerprint_collisions_cannot_return_the_wrong_size() -> None:
    """Two images equal everywhere the fingerprint looks but in their (late) frame headers."""
    CACHE.clear()
    a, b = jpeg_with_frame_after_metadata(1000, 500), jpeg_with_frame_after_metadata(500, 1000)
    assert len(a) == len(b) and a != b
    info_a, info_b = probed(a), probed(b)
    assert info_a.digest == info_b.digest  # the premise: the cheap key collides...
    assert (info_a.width, info_a.height) == (1000, 500)
    assert (info_b.width, info_b.height) == (500, 1000)  # ...and the header check catches it
    assert (probed(a).width, probed(b).width) == (1000, 500)


def test_different_images_get_different_digests() -> None:
    digests = {probed(FILES[name]()).digest for name in FILES}
    assert len(digests) == len(FILES)


def test_the_cache_is_bounded() -> None:
    CACHE.clear()
    maxsize, CACHE.maxsize = CACHE.maxsize, 8
    try:
        for i in range(1, 30):
            probe(encode(png_header(i, i)), LIMITS)
        assert len(CACHE) == 8
    finally:
        CACHE.maxsize = maxsize


# --------------------------------------------------------------------------------------------
# Placeholders


def test_placeholder_for_a_probed_image_is_deterministic() -> None:
    url = encode(FILES["png-rgb"]())
    info = probe(url, LIMITS)
    text = placeholder(info, url)
    assert text.startswith("[image omitted: 321x123 png #") and text.endswith("]")
    assert text == placeholder(probe(url, LIMITS), url)
    assert info is not None and info.digest[:8] in text


def test_placeholder_for_a_url() -> None:
    assert placeholder(None, "https://cdn.example.com/a/b.png?X-Amz-Signature=abc#f") == (
        "[image omitted: https://cdn.example.com/a/b.png]"
    )
    assert placeholder(None, "http://u:p@[::1]:8080/x.png") == (
        "[image omitted: http://[::1]:8080/x.png]"
    )
    long = "https://example.com/" + "a" * 200
    text = placeholder(None, long)
    assert text.endswith("…]") and len(text) == len("[image omitted: ]") + 80
    assert placeholder(None, long) == text
    assert placeholder(None, "http://bad:port/x") == "[image omitted: http://bad:port/x]"


def test_placeholder_for_an_unprobed_data_url_never_carries_the_payload() -> None:
    url = encode(FILES["gif"](), "image/gif")
    text = placeholder(None, url)
    assert text.startswith("[image omitted: image/gif #") and len(text) < 40
    assert placeholder(None, "data:nonsense") == "[image omitted: data URL]"


def test_formats_listed() -> None:
    assert FORMATS == ("png", "jpeg", "gif", "webp", "heif")


HEIC_HEAD = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (HEIC_HEAD + b"\x00\x00\x00\x08free" * 20, "no meta box"),
        (HEIC_HEAD + b"\x00\x00\x00\x10meta\x00\x00\x00\x00" + b"\x00" * 4, "no image size"),
        (HEIC_HEAD + b"\x00\x00\x00\x14meta\x00\x00\x00\x00\x00\x00\x00\xffiprp", "overruns"),
    ],
)
def test_a_heif_without_a_readable_size_is_a_client_error(raw: bytes, message: str) -> None:
    with pytest.raises(ImageError, match=message):
        probe(encode(raw, "image/heic"), LIMITS)


@settings(max_examples=200)
@given(st.binary(max_size=400))
def test_any_bytes_after_a_heif_header_are_a_size_or_a_client_error(tail: bytes) -> None:
    try:
        info = probe(encode(HEIC_HEAD + tail, "image/heic"), LIMITS)
    except ImageError:
        return
    assert info is not None and info.format == "heif"
