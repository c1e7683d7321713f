"""Image input at its edges: a JPEG its EXIF orientation turns a quarter (priced in both
orientations, whether the provider applies the tag or not), an inlined URL image fetched once,
line-wrapped base64 measured against the byte limit by its decoded bytes, and data URLs whose
RFC 2397 media type and ``;base64`` are written in capitals.

Every image is made by Pillow here; what a provider sees is what Pillow's decoder says: the
stored size (``Image.open``) for one that ignores the tag, the turned one
(``ImageOps.exif_transpose``) for one that applies it.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from harness import gateway_config
from inprocess import InProcess, run_inprocess
from PIL import Image, ImageOps

from pricing.images import parse_image_rule
from pricing.images.rule import ImageRule
from pricing.messages import parse_request
from pricing.meter import measure
from pricing.probe import ImageError, probe, read_header
from pricing.route import ImageLimits, Route
from proxy.fetch import ImageFetchPolicy, ImageSizer
from proxy.transports.chat_to_messages import messages_body

KEY = "sk-edges"
AUTH = {"Authorization": f"Bearer {KEY}"}

#: Rules whose grids count rows and columns apart (a token closes every row): a picture and its
#: quarter turn cost them differently.
RULES = ("pixtral:pixtral-12b", "deepseek-v4:v4.1")


def jpeg(width: int, height: int, orientation: int | None = None, endian: str = "<") -> bytes:
    """A JPEG stored ``width`` x ``height``, with an EXIF Orientation tag when given."""
    buffer = io.BytesIO()
    options: dict[str, Any] = {}
    if orientation is not None:
        exif = Image.Exif()
        exif.endian = endian
        exif[0x0112] = orientation
        exif[0x010F] = "routefit"  # Make: an entry before the orientation's
        options["exif"] = exif.tobytes()
    Image.new("RGB", (width, height), (90, 120, 150)).save(buffer, "JPEG", **options)
    return buffer.getvalue()


def seen(raw: bytes) -> tuple[tuple[int, int], tuple[int, int]]:
    """(the size a provider ignoring the tag sees, the size one applying it sees)."""
    stored = Image.open(io.BytesIO(raw))
    return stored.size, ImageOps.exif_transpose(stored).size


def data_url(raw: bytes, head: str = "data:image/jpeg;base64,") -> str:
    return head + base64.b64encode(raw).decode()


def route_for(rule: str) -> Route:
    return Route(alias="r", model="m", image_rule=parse_image_rule(rule), supports_vision=True)


def image_tokens(url: str, route: Route, sizes: Any = None) -> int:
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": url}]}]}
    (image,) = measure(parse_request(body), route, sizes).image_details
    return image.tokens


def provider_counts(rule: ImageRule, raw: bytes) -> tuple[int, int]:
    """What the rule counts for the picture as each kind of provider sees it."""
    stored, upright = seen(raw)
    return rule.tokens(*stored), rule.tokens(*upright)


# --------------------------------------------------------------------------------------------
# EXIF orientation


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("orientation", [5, 6, 7, 8])
def test_a_jpeg_turned_a_quarter_by_its_exif_is_priced_as_either_provider_counts(
    rule: str, orientation: int
) -> None:
    raw = jpeg(1024, 64, orientation)
    stored, upright = seen(raw)
    assert upright == stored[::-1]  # the premise: the tag turns it
    route = route_for(rule)
    ignoring, applying = provider_counts(route.image_rule, raw)
    assert applying != ignoring  # the premise: the turn changes the count
    assert image_tokens(data_url(raw), route) == max(ignoring, applying)


@pytest.mark.parametrize("orientation", [1, 2, 3, 4])
def test_an_exif_orientation_that_keeps_the_sides_prices_the_stored_picture(
    orientation: int,
) -> None:
    raw = jpeg(1024, 64, orientation)
    stored, upright = seen(raw)
    assert stored == upright
    route = route_for(RULES[0])
    assert image_tokens(data_url(raw), route) == route.image_rule.tokens(*stored)


@pytest.mark.parametrize(("endian", "tiff"), [("<", b"II*\x00"), (">", b"MM\x00*")])
def test_either_byte_order_of_the_exif_block_is_read(endian: str, tiff: bytes) -> None:
    raw = jpeg(1024, 64, 6, endian)
    assert tiff in raw[:64]  # the premise: Pillow wrote that byte order
    route = route_for(RULES[0])
    assert image_tokens(data_url(raw), route) == max(provider_counts(route.image_rule, raw))


def with_exif_after_the_frame(orientation: int, prefix: bytes = b"") -> bytes:
    """A JPEG whose EXIF block (APP1) follows its frame header: decoders that read every
    segment up to the scan, Pillow's among them, still apply it. ``prefix``: before the block's
    own (``Exif\\0\\0`` again: Pillow's reader skips one or two)."""
    plain = jpeg(1024, 64)
    exif = Image.Exif()
    exif[0x0112] = orientation
    payload = prefix + exif.tobytes()
    assert payload.startswith(b"Exif\x00\x00")
    app1 = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload
    sof = plain.index(b"\xff\xc0")
    after = sof + 2 + int.from_bytes(plain[sof + 2 : sof + 4], "big")
    return plain[:after] + app1 + plain[after:]


@pytest.mark.parametrize("prefix", [b"", b"Exif\x00\x00"])
def test_an_exif_block_after_the_frame_header_still_counts(prefix: bytes) -> None:
    raw = with_exif_after_the_frame(8, prefix)
    stored, upright = seen(raw)
    assert upright == stored[::-1]  # the premise: Pillow applies it
    route = route_for(RULES[0])
    assert image_tokens(data_url(raw), route) == max(provider_counts(route.image_rule, raw))


def test_a_url_jpeg_turned_by_its_exif_is_priced_both_ways() -> None:
    raw = jpeg(1024, 64, 6)
    url = "https://images.example.com/turned.jpg"
    sizes = asyncio.run(_sizes(url, raw))
    route = route_for(RULES[0])
    assert image_tokens(url, route, sizes) == max(provider_counts(route.image_rule, raw))


async def _sizes(url: str, raw: bytes) -> dict[str, Any]:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=raw, headers={"content-type": "image/jpeg"})

    async def resolve(host: str, port: int) -> list[str]:
        return ["93.184.216.34"]  # a public address: the fences let it through

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    async with ImageSizer(client, resolver=resolve) as sizer:
        policy = ImageFetchPolicy(allow_hosts=("images.example.com",))
        found = await sizer.sizes([url], policy)
    await client.aclose()
    return found


def test_a_stream_cut_after_the_frame_header_leaves_the_orientation_open() -> None:
    """The fetcher reads at most its cap: the EXIF block may lie past it, so a JPEG whose frame
    header was read is sized and priced both ways."""
    raw = with_exif_after_the_frame(6)
    sof = raw.index(b"\xff\xc0")
    cut = raw[: sof + 19]  # the frame header, and not the EXIF block after it
    assert isinstance(read_header(cut), int)  # more bytes could still come: ask for them
    header = read_header(cut, final=True)
    assert not isinstance(header, int)
    assert (header.width, header.height, header.transposed) == (1024, 64, True)


# --------------------------------------------------------------------------------------------
# Line-wrapped base64 and the byte limit


def png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.effect_noise((width, height), 64).save(buffer, "PNG")
    return buffer.getvalue()


def wrapped(raw: bytes, newline: str = "\r\n") -> str:
    b64 = base64.b64encode(raw).decode()
    return "data:image/png;base64," + newline.join(b64[i : i + 76] for i in range(0, len(b64), 76))


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_line_wrapped_base64_is_held_to_the_limit_by_its_decoded_bytes(newline: str) -> None:
    raw = png(120, 80)
    limits = ImageLimits(max_image_bytes=len(raw))
    info = probe(wrapped(raw, newline), limits)
    assert info is not None and (info.width, info.height, info.size) == (120, 80, len(raw))
    with pytest.raises(ImageError, match=f"is {len(raw)} bytes, over this route's limit"):
        probe(wrapped(raw, newline), ImageLimits(max_image_bytes=len(raw) - 1))


# --------------------------------------------------------------------------------------------
# RFC 2397: the media type and its parameters in any case

HEADS = ["data:image/png;BASE64,", "data:IMAGE/PNG;base64,", "DATA:Image/Png;Base64,"]


@pytest.mark.parametrize("head", HEADS)
def test_a_data_url_in_capitals_is_probed(head: str) -> None:
    raw = png(30, 20)
    info = probe(data_url(raw, head), ImageLimits())
    assert info is not None and (info.width, info.height, info.format) == (30, 20, "png")


@pytest.mark.parametrize("head", HEADS)
def test_a_data_url_in_capitals_is_mapped_to_messages_by_routefit(head: str) -> None:
    raw = png(30, 20)
    part = {"type": "image_url", "image_url": {"url": data_url(raw, head)}}
    body = {"model": "m", "messages": [{"role": "user", "content": [part]}]}
    (message,) = messages_body(body, 16)["messages"]
    (block,) = message["content"]
    source = block["source"]
    assert (source["type"], source["media_type"]) == ("base64", "image/png")
    assert base64.b64decode(source["data"]) == raw


# --------------------------------------------------------------------------------------------
# An inlined URL image is fetched once


def test_sizing_for_an_inlining_leg_fetches_the_image_once() -> None:
    raw = png(64, 32)
    url = "https://images.example.com/cat.png"
    policy = ImageFetchPolicy(allow_hosts=("images.example.com",))
    asked: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        return httpx.Response(200, content=raw, headers={"content-type": "image/png"})

    async def resolve(host: str, port: int) -> list[str]:
        return ["93.184.216.34"]

    async def size_then_inline() -> tuple[dict[str, Any], tuple[str, bytes]]:
        client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
        async with ImageSizer(client, resolver=resolve) as sizer:
            sizes = await sizer.sizes([url], policy, "team", whole=1 << 20)
            fetched = await sizer.fetch_image(url, policy, 1 << 20, "team")
        await client.aclose()
        return sizes, fetched

    sizes, fetched = asyncio.run(size_then_inline())
    assert sizes == {url: Image.open(io.BytesIO(raw)).size}
    assert fetched == ("image/png", raw)
    assert len(asked) == 1 and "range" not in asked[0].headers


class Images:
    """A loopback HTTP server of one PNG, counting the requests for it."""

    def __init__(self, raw: bytes) -> None:
        self.raw, self.asked = raw, 0
        images = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                images.asked += 1
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(images.raw)))
                self.end_headers()
                self.wfile.write(images.raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/cat.png"


@pytest.fixture
def images() -> Iterator[Images]:
    served = Images(png(96, 48))
    thread = threading.Thread(target=served.httpd.serve_forever, daemon=True)
    thread.start()
    yield served
    served.httpd.shutdown()
    served.httpd.server_close()


def _routes(sim_url: str) -> list[dict[str, Any]]:
    return [
        {
            "model_name": "claude",
            "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5",
                "api_base": sim_url,
                "api_key": "sk-ant-sim",
            },
            "routefit": {
                "image_fetch": {"allow_hosts": ["127.0.0.1"], "allow_private": True},
            },
        }
    ]


@pytest.fixture(scope="module")
def gw(sim: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    path = tmp_path_factory.mktemp("edges") / "c.yaml"
    team = {"id": "edges", "keys": [KEY], "quotas": {"tokens_per_day": 10**9}}
    with run_inprocess(gateway_config(path, _routes(sim.base_url), teams=[team])) as running:
        yield running


def test_an_inlined_url_image_is_fetched_once_through_the_gateway(
    gw: InProcess, fresh_sim: Any, images: Images
) -> None:
    content = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": images.url}},
    ]
    body = {"model": "claude", "messages": [{"role": "user", "content": content}], "max_tokens": 5}
    answer = httpx.post(gw.v1 + "/chat/completions", json=body, headers=AUTH, timeout=30)
    assert answer.status_code == 200, answer.text
    sent = json.dumps(fresh_sim.last_request(path="/v1/messages"))
    assert images.url not in sent  # the provider got the bytes, not the URL
    assert base64.b64encode(images.raw).decode() in sent
    assert images.asked == 1
