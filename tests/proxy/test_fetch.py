"""URL image sizing: nothing by default, allowlisted hosts only, private and metadata addresses
refused, pinned connections, byte caps, deadlines, redirects, the cache.

A real HTTP server on 127.0.0.1 (a thread) serves the images. Tests about addresses that must
never be contacted (metadata, private ranges) use httpx's MockTransport, which records any
request instead of sending it, so even a bug cannot put traffic on the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import ipaddress
import re
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import httpx
import pytest
from PIL import Image

from pricing.images import default_image_rule
from pricing.messages import parse_request
from pricing.meter import measure
from pricing.route import Route
from proxy.config import parse_config
from proxy.fetch import (
    METADATA_ADDRESSES,
    ImageFetchPolicy,
    ImageSizer,
    address_refusal,
    image_urls,
    parse_fetch_policy,
)

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


def png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (1, 2, 3)).save(buffer, "PNG")
    return buffer.getvalue()


def jpeg_with_late_frame(width: int, height: int, metadata: int) -> bytes:
    """A JPEG whose frame header follows ``metadata`` bytes of APP segments."""
    out = b"\xff\xd8"
    while metadata > 0:
        n = min(metadata, 65_000)
        out += b"\xff\xe1" + struct.pack(">H", n + 2) + bytes(n)
        metadata -= n
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return out + sof + bytes(1000) + b"\xff\xd9"


class Server:
    """A loopback HTTP server with a few hostile routes; records what it was asked."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.sent: dict[str, int] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                route = ROUTES.get(self.path.split("?")[0])
                if route is None:
                    self.send_error(404)
                    return
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    route(self, server)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def paths(self) -> list[str]:
        return [p for p, _ in self.requests]


def _send(handler: BaseHTTPRequestHandler, body: bytes, **headers: str) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", headers.pop("content_type", "image/png"))
    handler.send_header("Content-Length", str(len(body)))
    for key, value in headers.items():
        handler.send_header(key.replace("_", "-"), value)
    handler.end_headers()
    handler.wfile.write(body)


def _endless(handler: BaseHTTPRequestHandler, server: Server) -> None:
    """A body that never ends and never becomes an image header (bounded, for the test's sake)."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(200 * 65_536))
    handler.end_headers()
    junk = b"\xff\xd8" + b"\xff\xe1\xff\xff" + bytes(65_530)  # a JPEG stuck in metadata
    handler.wfile.write(junk)
    for _ in range(199):
        handler.wfile.write(bytes(65_536))
        server.sent["/endless"] = server.sent.get("/endless", 0) + 65_536


def _slow(handler: BaseHTTPRequestHandler, server: Server) -> None:
    body = png(10, 10)
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    for byte in body[:40]:
        handler.wfile.write(bytes([byte]))
        handler.wfile.flush()
        time.sleep(0.2)


def _redirect(target: str) -> Callable[[BaseHTTPRequestHandler, Server], None]:
    def route(handler: BaseHTTPRequestHandler, server: Server) -> None:
        location = target.replace("PORT", str(server.port))
        handler.send_response(302)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return route


ROUTES: dict[str, Callable[[BaseHTTPRequestHandler, Server], None]] = {
    "/cat.png": lambda h, s: _send(h, png(1024, 768)),
    "/late.jpg": lambda h, s: _send(h, jpeg_with_late_frame(640, 480, 100_000)),
    "/gzip.png": lambda h, s: _send(h, png(8, 8), content_encoding="gzip"),
    "/text": lambda h, s: _send(h, b"<html>not an image</html>" * 10, content_type="text/html"),
    "/bomb.png": lambda h, s: _send(
        h, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + struct.pack(">II", 10**5, 10**5) + bytes(9)
    ),
    "/endless": _endless,
    "/slow": _slow,
    "/hop": _redirect("/cat.png"),
    "/hop2": _redirect("/hop"),
    "/away": _redirect("http://elsewhere.test:PORT/cat.png"),
    "/loop": _redirect("/loop"),
}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    srv = Server()
    srv.thread.start()
    try:
        yield srv
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()


@pytest.fixture()
def fresh(server: Server) -> Server:
    server.requests.clear()
    return server


LOOPBACK = ImageFetchPolicy(allow_hosts=("127.0.0.1",), allow_private=True, timeout_s=2.0)


async def sizes(
    urls: Sequence[str], policy: ImageFetchPolicy, **options: Any
) -> dict[str, tuple[int, int]]:
    async with ImageSizer(**options) as sizer:
        return await sizer.sizes(urls, policy)


# --------------------------------------------------------------------------------------------
# Nothing by default; only what the policy allows


def test_nothing_is_fetched_by_default(fresh: Server) -> None:
    assert run(sizes([fresh.url("/cat.png")], ImageFetchPolicy())) == {}
    assert fresh.requests == []


def test_loopback_is_refused_unless_private_addresses_are_allowed(fresh: Server) -> None:
    url = fresh.url("/cat.png")
    refused = ImageFetchPolicy(allow_hosts=("127.0.0.1",))
    assert run(sizes([url], refused)) == {}
    assert fresh.requests == []  # refused before connecting
    assert run(sizes([url], LOOPBACK)) == {url: (1024, 768)}
    assert fresh.paths() == ["/cat.png"]


def test_hosts_not_on_the_allowlist_are_not_fetched(fresh: Server) -> None:
    policy = ImageFetchPolicy(allow_hosts=("images.example.com",), allow_private=True)
    assert run(sizes([fresh.url("/cat.png")], policy)) == {}
    assert fresh.requests == []


def test_only_http_and_https(fresh: Server) -> None:
    policy = ImageFetchPolicy(allow_hosts=("*",), allow_private=True)
    urls = ["ftp://127.0.0.1/cat.png", "file:///etc/hosts", "gopher://127.0.0.1/"]
    assert run(sizes(urls, policy)) == {}


def test_the_connection_goes_to_the_checked_address_with_the_names_host_header(
    fresh: Server,
) -> None:
    """A name is resolved once, checked, and the request pinned to that address."""
    calls: list[str] = []

    async def resolver(host: str, port: int) -> Sequence[str]:
        calls.append(host)
        return ["127.0.0.1"] if len(calls) == 1 else ["10.0.0.1"]  # a rebinding resolver

    policy = ImageFetchPolicy(allow_hosts=("*.example.test",), allow_private=True)
    url = f"http://img.example.test:{fresh.port}/cat.png"
    assert run(sizes([url], policy, resolver=resolver)) == {url: (1024, 768)}
    assert calls == ["img.example.test"]
    ((_, headers),) = fresh.requests
    assert headers["host"] == f"img.example.test:{fresh.port}"
    assert headers["accept-encoding"] == "identity"
    assert headers["range"] == f"bytes=0-{policy.max_bytes - 1}"


def test_localhost_by_name(fresh: Server) -> None:
    policy = ImageFetchPolicy(allow_hosts=("localhost",), allow_private=True)
    url = fresh.url("/cat.png", host="localhost")
    assert run(sizes([url], policy)) == {url: (1024, 768)}  # ::1 may answer first: 127.0.0.1 next


# --------------------------------------------------------------------------------------------
# Addresses that are never contacted (MockTransport: no request can leave the process)


class Recorder:
    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, content=png(4, 4))


def fixed(*answers: str) -> Callable[[str, int], Awaitable[Sequence[str]]]:
    async def resolver(host: str, port: int) -> Sequence[str]:
        return list(answers)

    return resolver


async def sized_through_mock(
    url: str, policy: ImageFetchPolicy, resolver: Any
) -> tuple[dict[str, tuple[int, int]], Recorder]:
    recorder = Recorder()
    async with httpx.AsyncClient(transport=httpx.MockTransport(recorder)) as client:
        sizer = ImageSizer(client, resolver=resolver)
        return await sizer.sizes([url], policy), recorder


@pytest.mark.parametrize(
    "address",
    [
        "169.254.169.254",  # the cloud metadata endpoint
        "fd00:ec2::254",  # AWS's IPv6 metadata endpoint
        "100.100.100.200",  # Alibaba's
        "169.254.1.1",  # any link-local
        "fe80::1",
        "::ffff:169.254.169.254",  # IPv4-mapped
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "2002:a9fe:a9fe::1",  # 6to4 of it
    ],
)
def test_metadata_and_link_local_are_refused_even_when_private_is_allowed(address: str) -> None:
    policy = ImageFetchPolicy(allow_hosts=("*",), allow_private=True)
    result, recorder = run(sized_through_mock("http://meta.test/x.png", policy, fixed(address)))
    assert result == {} and recorder.requests == []
    literal = f"http://{address}/latest/meta-data/" if ":" not in address else None
    if literal:
        result, recorder = run(sized_through_mock(literal, policy, fixed(address)))
        assert result == {} and recorder.requests == []


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.1.2.3", "172.16.0.9", "192.168.1.1", "100.64.0.1", "::1", "fd12::1",
     "::ffff:10.0.0.1", "2002:7f00:1::1"],
)  # fmt: skip
def test_private_addresses_are_refused_by_default(address: str) -> None:
    policy = ImageFetchPolicy(allow_hosts=("images.example.com",))
    url = "https://images.example.com/cat.png"
    result, recorder = run(sized_through_mock(url, policy, fixed(address)))
    assert result == {} and recorder.requests == []
    allowed = ImageFetchPolicy(allow_hosts=("images.example.com",), allow_private=True)
    result, recorder = run(sized_through_mock(url, allowed, fixed(address)))
    assert result == {url: (4, 4)} and len(recorder.requests) == 1


def test_one_private_record_taints_the_name() -> None:
    policy = ImageFetchPolicy(allow_hosts=("images.example.com",))
    url = "https://images.example.com/cat.png"
    result, recorder = run(sized_through_mock(url, policy, fixed("93.184.216.34", "127.0.0.1")))
    assert result == {} and recorder.requests == []


def test_public_address_pinned_with_sni() -> None:
    policy = ImageFetchPolicy(allow_hosts=("images.example.com",))
    url = "https://images.example.com/a/cat.png?v=2"
    result, recorder = run(sized_through_mock(url, policy, fixed("93.184.216.34")))
    assert result == {url: (4, 4)}
    (request,) = recorder.requests
    assert str(request.url) == "https://93.184.216.34/a/cat.png?v=2"
    assert request.headers["host"] == "images.example.com"
    assert request.extensions["sni_hostname"] == "images.example.com"


@pytest.mark.parametrize("allowed", ["bücher.example", "xn--bcher-kva.example", "*.example"])
def test_international_names_match_in_either_form(allowed: str) -> None:
    policy = ImageFetchPolicy(allow_hosts=(allowed,))
    url = "https://bücher.example/cat.png"
    result, recorder = run(sized_through_mock(url, policy, fixed("93.184.216.34")))
    assert result == {url: (4, 4)}
    assert recorder.requests[0].headers["host"] == "xn--bcher-kva.example"
    assert recorder.requests[0].extensions["sni_hostname"] == "xn--bcher-kva.example"


def test_the_deadline_covers_waiting_for_a_free_slot(fresh: Server) -> None:
    slow, fast = fresh.url("/slow"), fresh.url("/cat.png")
    policy = ImageFetchPolicy(allow_hosts=("127.0.0.1",), allow_private=True, timeout_s=0.4)

    async def scenario() -> dict[str, tuple[int, int]]:
        async with ImageSizer(max_concurrency=1) as sizer:
            return await sizer.sizes([slow, fast], policy)

    started = time.perf_counter()
    assert run(scenario()) == {}  # the fast one waited behind the slow one past its deadline
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    ("address", "private_ok", "refused"),
    [
        ("8.8.8.8", False, False),
        ("2606:4700::1111", False, False),
        ("127.0.0.1", False, True),
        ("127.0.0.1", True, False),
        ("10.0.0.1", True, False),
        ("169.254.169.254", True, True),
        ("fd00:ec2::254", True, True),
        ("224.0.0.1", True, True),  # multicast
        ("0.0.0.0", True, True),
        ("240.0.0.1", True, True),  # reserved
        ("255.255.255.255", True, True),
        ("::", True, True),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", False, True),  # Teredo
        ("::ffff:10.0.0.1", False, True),
        ("::ffff:10.0.0.1", True, False),
        ("::ffff:8.8.8.8", False, False),
        ("::1", True, False),
        ("64:ff9b::808:808", False, False),  # NAT64 of a public address
        ("64:ff9b::7f00:1", False, True),  # NAT64 of loopback
        ("2002:7f00:1::1", True, False),  # 6to4 of loopback, private allowed
        ("2002:7f00:1::1", False, True),
    ],
)
def test_address_refusal(address: str, private_ok: bool, refused: bool) -> None:
    reason = address_refusal(ipaddress.ip_address(address), private_ok)
    assert (reason is not None) == refused, reason


def test_metadata_addresses_listed() -> None:
    assert ipaddress.ip_address("169.254.169.254") in METADATA_ADDRESSES
    assert ipaddress.ip_address("fd00:ec2::254") in METADATA_ADDRESSES


# --------------------------------------------------------------------------------------------
# Bounded reads and failures


def test_a_header_beyond_the_byte_cap_is_not_chased(fresh: Server) -> None:
    url = fresh.url("/late.jpg")
    small = ImageFetchPolicy(allow_hosts=("127.0.0.1",), allow_private=True, max_bytes=65_536)
    assert run(sizes([url], small)) == {}
    large = ImageFetchPolicy(allow_hosts=("127.0.0.1",), allow_private=True, max_bytes=200_000)
    assert run(sizes([url], large)) == {url: (640, 480)}


def test_an_endless_body_is_cut_at_the_cap(fresh: Server) -> None:
    url = fresh.url("/endless")
    policy = ImageFetchPolicy(allow_hosts=("127.0.0.1",), allow_private=True, max_bytes=100_000)
    started = time.perf_counter()
    assert run(sizes([url], policy)) == {}
    assert time.perf_counter() - started < 1.5
    time.sleep(0.2)  # let the server notice the closed connection
    assert fresh.sent.get("/endless", 0) < 100 * 65_536  # it did not stream all 13 MB


def test_a_slow_server_is_bounded_by_the_deadline(fresh: Server) -> None:
    url = fresh.url("/slow")
    policy = ImageFetchPolicy(allow_hosts=("127.0.0.1",), allow_private=True, timeout_s=0.5)
    started = time.perf_counter()
    assert run(sizes([url], policy)) == {}
    assert time.perf_counter() - started < 1.5


@pytest.mark.parametrize("path", ["/gzip.png", "/text", "/bomb.png", "/missing.png"])
def test_failures_leave_the_url_unsized(fresh: Server, path: str) -> None:
    assert run(sizes([fresh.url(path)], LOOPBACK)) == {}


def test_redirects_are_followed_within_the_policy_and_rechecked(fresh: Server) -> None:
    hop, hop2 = fresh.url("/hop"), fresh.url("/hop2")
    assert run(sizes([hop, hop2], LOOPBACK)) == {hop: (1024, 768), hop2: (1024, 768)}
    one = ImageFetchPolicy(allow_hosts=("127.0.0.1",), allow_private=True, max_redirects=1)
    assert run(sizes([hop2], one)) == {}
    none = ImageFetchPolicy(allow_hosts=("127.0.0.1",), allow_private=True, max_redirects=0)
    assert run(sizes([hop], none)) == {}
    fresh.requests.clear()
    assert run(sizes([fresh.url("/away"), fresh.url("/loop")], LOOPBACK)) == {}
    assert "/cat.png" not in fresh.paths()  # elsewhere.test is not on the allowlist


def test_many_urls_are_capped_per_request(fresh: Server) -> None:
    urls = [fresh.url(f"/cat.png?n={i}") for i in range(5)]
    policy = ImageFetchPolicy(allow_hosts=("127.0.0.1",), allow_private=True, max_urls=2)
    assert list(run(sizes(urls, policy))) == urls[:2]
    assert len(fresh.requests) == 2


# --------------------------------------------------------------------------------------------
# The cache


def test_sizes_are_cached_and_concurrent_requests_share_one_fetch(fresh: Server) -> None:
    url = fresh.url("/cat.png")

    async def scenario() -> list[dict[str, tuple[int, int]]]:
        async with ImageSizer() as sizer:
            together = await asyncio.gather(*(sizer.sizes([url], LOOPBACK) for _ in range(5)))
            later = await sizer.sizes([url], LOOPBACK)
            return [*together, later]

    results = run(scenario())
    assert results == [{url: (1024, 768)}] * 6
    assert fresh.paths() == ["/cat.png"]


def test_failures_are_cached_briefly_and_sizes_expire(fresh: Server) -> None:
    good, bad = fresh.url("/cat.png"), fresh.url("/text")

    async def scenario() -> None:
        async with ImageSizer(ttl_s=0.2, failure_ttl_s=0.2) as sizer:
            await sizer.sizes([good, bad], LOOPBACK)
            await sizer.sizes([good, bad], LOOPBACK)
            assert sorted(fresh.paths()) == ["/cat.png", "/text"]
            await asyncio.sleep(0.3)
            await sizer.sizes([good, bad], LOOPBACK)
            assert len(fresh.requests) == 4

    run(scenario())


# --------------------------------------------------------------------------------------------
# Configuration and wiring


def test_policy_host_matching() -> None:
    policy = ImageFetchPolicy(allow_hosts=("Images.Example.com.", "*.cdn.example.net"))
    assert policy.allows_host("images.example.com")
    assert policy.allows_host("IMAGES.example.com.")
    assert policy.allows_host("a.b.cdn.example.net")
    assert not policy.allows_host("cdn.example.net")  # *.suffix means subdomains only
    assert not policy.allows_host("evilcdn.example.net")
    assert not policy.allows_host("images.example.com.evil.org")
    assert ImageFetchPolicy(allow_hosts=("*",)).allows_host("anything.org")
    assert not ImageFetchPolicy().enabled


def test_parse_fetch_policy() -> None:
    assert parse_fetch_policy(None) == ImageFetchPolicy()
    policy = parse_fetch_policy({"allow_hosts": ["img.example.com"], "max_bytes": 4096})
    assert policy.allow_hosts == ("img.example.com",) and policy.max_bytes == 4096
    assert parse_fetch_policy({"allow_hosts": None}).allow_hosts == ()  # ``allow_hosts:`` empty
    for spec, message in [
        ({"allow_host": []}, "unknown image_fetch key(s) ['allow_host']"),
        ({"allow_hosts": "img.example.com"}, "list of host names"),
        ({"allow_hosts": 3}, "list of host names"),  # a number or a mapping was a TypeError
        ({"allow_hosts": {"img.example.com": True}}, "list of host names"),
        ({"allow_hosts": ["https://img.example.com/"]}, "must be a host name"),
        ({"allow_hosts": ["*.*.com"]}, "must be a host name"),
        ({"allow_private": "yes"}, "true or false"),
        ({"max_bytes": 10}, "max_bytes >= 64"),
        ({"timeout_s": "fast"}, "must be a number"),
        ([], "must be a mapping"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_fetch_policy(spec)  # type: ignore[arg-type]


def test_routes_fetch_nothing_unless_configured() -> None:
    config = parse_config(
        {"model_list": [{"model_name": "a", "litellm_params": {"model": "openai/gpt-4o"}}]},
        environ={},
    )
    assert config.routes["a"].image_fetch == ImageFetchPolicy()
    assert not config.routes["a"].image_fetch.enabled


def test_fetched_sizes_feed_the_meter(fresh: Server) -> None:
    url = fresh.url("/cat.png")
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]},
            {"role": "user", "content": "and a text message"},
        ],
    }
    request = parse_request(body)
    assert image_urls(request) == (url,)
    route = Route(
        alias="gpt-4o",
        model="gpt-4o",
        image_rule=default_image_rule("gpt-4o", True),
        supports_vision=True,
    )
    unsized = measure(request, route)
    assert [d.tokens for d in unsized.image_details] == [1445, 1445]
    learnt = run(sizes(image_urls(request), LOOPBACK))
    sized = measure(request, route, learnt)
    assert [(d.tokens, d.sized) for d in sized.image_details] == [(765, True), (765, True)]
