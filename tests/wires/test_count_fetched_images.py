"""Count endpoints price a URL image as the fit of the same request does, end to end in-process.

A route whose ``image_fetch`` allowlists an image's host has the fit read the image's size and
price it as it is; a count endpoint that priced it at the default size answered another number
than the one the request is then fitted and charged on. The image here is served by a loopback
host (allowed with ``allow_private``) and is far larger than the default size, so the two
prices differ. The host's own log says what was fetched: never a URL the operator has not
allowed (a route without ``image_fetch``, or one allowing another host).
"""

from __future__ import annotations

import asyncio
import io
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from harness import gateway_config, sim_route
from inprocess import run_inprocess
from PIL import Image

from proxy.config import load_config
from proxy.fetch import ImageSizer
from proxy.image_sizes import Sizes, fetched_sizes
from proxy.wires import RESPONSES_WIRE
from proxy.wires.base import RequestContext

KEY = "sk-images-" + uuid.uuid4().hex
#: Far larger than the size an unsized image is priced at (many tiles more).
SIDE = 4000


def png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (9, 8, 7)).save(buffer, "PNG")
    return buffer.getvalue()


class ImageHost:
    """A loopback image host that logs the paths it was asked for."""

    def __init__(self, body: bytes) -> None:
        self.paths: list[str] = []
        host = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                host.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"


@pytest.fixture(scope="module")
def host() -> Iterator[ImageHost]:
    server = ImageHost(png(SIDE, SIDE))
    server.thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()


@pytest.fixture(scope="module")
def config_path(sim, tmp_path_factory):
    allowed = {"allow_hosts": ["127.0.0.1"], "allow_private": True}
    elsewhere = {"allow_hosts": ["images.invalid"], "allow_private": True}
    routes = [
        sim_route("vision", sim.base_url, "gpt-4o", image_fetch=allowed),
        sim_route("blind", sim.base_url, "gpt-4o"),
        sim_route("elsewhere", sim.base_url, "gpt-4o", image_fetch=elsewhere),
    ]
    return gateway_config(
        tmp_path_factory.mktemp("count_images") / "c.yaml",
        routes,
        teams=[{"id": "images", "keys": [KEY]}],
    )


@pytest.fixture(scope="module")
def gw(config_path, host):
    with run_inprocess(config_path) as running:
        yield running


AUTH = {"authorization": f"Bearer {KEY}"}


def messages_body(model: str, url: str) -> dict[str, Any]:
    content = [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image", "source": {"type": "url", "url": url}},
    ]
    return {"model": model, "messages": [{"role": "user", "content": content}]}


def responses_body(model: str, url: str) -> dict[str, Any]:
    content = [
        {"type": "input_text", "text": "What is in this picture?"},
        {"type": "input_image", "image_url": url, "detail": "high"},
    ]
    return {"model": model, "input": [{"role": "user", "content": content}]}


#: Each count endpoint: (its path, the dry run's ``?wire=``, its body, the body's output field,
#: where its answer says the count).
ENDPOINTS = {
    "messages": ("/v1/messages/count_tokens", messages_body, "max_tokens", "input_tokens"),
    "responses": (
        "/v1/responses/input_tokens",
        responses_body,
        "max_output_tokens",
        "input_tokens",
    ),
}


def counted(gw, wire: str, model: str, url: str) -> int:
    path, body, _, field = ENDPOINTS[wire]
    r = httpx.post(gw.base_url + path, json=body(model, url), headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text
    return int(r.json()[field])


def fitted(gw, wire: str, model: str, url: str) -> int:
    """The prompt tokens the fit of the same request acts on (the dry run: nothing is sent)."""
    _, body, output, _ = ENDPOINTS[wire]
    r = httpx.post(
        gw.base_url + "/routefit/fit",
        params={"wire": wire},
        json={**body(model, url), output: 64},
        headers=AUTH,
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return int(r.headers["x-routefit-prompt-tokens"])


@pytest.mark.parametrize("wire", sorted(ENDPOINTS))
def test_a_count_prices_a_fetched_image_as_the_fit_does(gw, host, wire):
    url = host.url(f"/big.png?{uuid.uuid4().hex}")
    count = counted(gw, wire, "vision", url)
    assert count == fitted(gw, wire, "vision", url)
    # the fetched size is what made the difference: unsized, the same image is priced otherwise
    unsized = host.url(f"/big.png?{uuid.uuid4().hex}")
    assert count != counted(gw, wire, "blind", unsized)


@pytest.mark.parametrize("wire", sorted(ENDPOINTS))
@pytest.mark.parametrize("model", ["blind", "elsewhere"])
def test_a_count_never_fetches_what_the_operator_has_not_allowed(gw, host, wire, model):
    path = f"/big.png?{uuid.uuid4().hex}"
    url = host.url(path)
    assert counted(gw, wire, model, url) == fitted(gw, wire, model, url)
    assert path not in host.paths


def sized(config_path, model: str, url: str) -> Sizes:
    """``fetched_sizes`` of a Responses request naming ``url``, on ``model``'s route."""
    rc = load_config(config_path).route(model)
    assert rc is not None
    request = RESPONSES_WIRE.parse(RequestContext(responses_body(model, url), {}, {}, {}, None))

    async def run() -> Sizes:
        async with ImageSizer() as sizer:
            return await fetched_sizes(sizer, rc, RESPONSES_WIRE.name, request, "images")

    return asyncio.run(run())


def test_the_one_rule_reads_an_allowed_images_size_and_nothing_else(config_path, host):
    path = f"/big.png?{uuid.uuid4().hex}"
    url = host.url(path)
    assert sized(config_path, "blind", url) == {}
    assert sized(config_path, "elsewhere", url) == {}
    assert path not in host.paths
    found = sized(config_path, "vision", url)
    assert tuple(found[url][:2]) == (SIDE, SIDE)
    assert path in host.paths
