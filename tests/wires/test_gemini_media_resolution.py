"""Gemini's media_resolution, as a Gemini client sets it: on a part (``mediaResolution: {level}``,
Gemini 3) or on the whole request (``generationConfig.mediaResolution``), a part's own level
overriding the request's. Gemini 3 prices an image per level (low 280, medium 560, high 1,120
— its default — and ultra_high 2,240: docs/images.md, "Gemini fixed levels"); routefit priced
every image at the default, half what an ultra_high image costs. The simulator's gemini-3-sim
counts by the same levels, so what routefit reserves is checked against a count of its own."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from PIL import Image
from starlette.testclient import TestClient

from pricing.images.catalogue import default_image_rule
from pricing.meter import measure
from pricing.route import Route
from proxy.app import create_app
from proxy.config import parse_config
from proxy.sim.app import create_app as create_sim
from proxy.sim.state import SimConfig, SimState
from proxy.transports.mock import asgi_transport
from proxy.wires.gemini_parse import parse_gemini

KEY = "gemini-levels-key"
PROVIDER_KEY = "sk-google-sim"
GEN = "/v1beta/models/gem3:generateContent"
PRICES = {"low": 280, "medium": 560, "high": 1120, "ultra_high": 2240}


def _png(seed: int) -> str:
    image = Image.new("RGB", (640, 480), (seed % 256, 90, 160))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode("ascii")


def _image(level: str | None, seed: int = 1) -> dict[str, Any]:
    part: dict[str, Any] = {"inlineData": {"mimeType": "image/png", "data": _png(seed)}}
    if level is not None:
        part["mediaResolution"] = {"level": f"MEDIA_RESOLUTION_{level.upper()}"}
    return part


def _body(parts: list[dict[str, Any]], request_level: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "contents": [{"role": "user", "parts": [{"text": "What is in these?"}, *parts]}],
        "generationConfig": {"maxOutputTokens": 32},
    }
    if request_level is not None:
        body["generationConfig"]["mediaResolution"] = f"MEDIA_RESOLUTION_{request_level.upper()}"
    return body


def _image_tokens(body: dict[str, Any]) -> list[int]:
    request = parse_gemini(body, "gem3", sse=False, array=False, counting=False)
    model = "gemini/gemini-3-pro"
    rule = default_image_rule(model, True)
    route = Route(alias="gem3", model=model, image_rule=rule, supports_vision=True)
    return [d.tokens for d in measure(request, route).image_details]


@pytest.mark.parametrize("level", list(PRICES))
def test_a_parts_level_prices_its_image(level: str) -> None:
    assert _image_tokens(_body([_image(level)])) == [PRICES[level]]


def test_the_requests_level_prices_every_image_that_sets_none_of_its_own() -> None:
    body = _body([_image(None, 1), _image("ultra_high", 2), _image(None, 3)], "low")
    assert _image_tokens(body) == [280, 2240, 280]
    assert _image_tokens(_body([_image(None)])) == [1120]  # no level anywhere: the default


def test_a_level_this_version_does_not_know_is_priced_at_the_dearest() -> None:
    part = _image(None)
    part["mediaResolution"] = {"level": "MEDIA_RESOLUTION_SUPER_HIGH"}
    assert _image_tokens(_body([part])) == [2240]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    sim = SimState(config=SimConfig(api_keys=frozenset({PROVIDER_KEY})))
    route = {
        "model_name": "gem3",
        "litellm_params": {
            "model": "gemini/gemini-3-sim",
            "api_base": "http://sim.local/v1beta",
            "api_key": PROVIDER_KEY,
        },
        "model_info": {"max_input_tokens": 1_048_576, "max_output_tokens": 4096},
    }
    data = {
        "model_list": [route],
        "routefit_settings": {"store_path": ":memory:", "teams": [{"id": "t", "keys": [KEY]}]},
    }
    config = parse_config(yaml.safe_load(yaml.safe_dump(data)), "r.yaml", environ={})
    with TestClient(create_app(config, transport=asgi_transport(create_sim(sim)))) as c:
        yield c


@pytest.mark.parametrize(
    ("parts", "request_level"),
    [
        ([_image("ultra_high", 4), _image("ultra_high", 5)], None),
        ([_image(None, 6), _image("low", 7)], "ultra_high"),
        ([_image("medium", 8)], "high"),
    ],
)
def test_what_routefit_reserves_covers_what_the_provider_counts(
    client: TestClient, parts: list[dict[str, Any]], request_level: str | None
) -> None:
    r = client.post(GEN, json=_body(parts, request_level), headers={"x-goog-api-key": KEY})
    assert r.status_code == 200, r.text
    counted = r.json()["usageMetadata"]["promptTokenCount"]
    assert int(r.headers["x-routefit-prompt-tokens"]) >= counted


@pytest.mark.parametrize("value", [7, {"level": 3}, "HIGH", {"level": None}])
def test_a_resolution_that_names_no_level_is_the_clients_400(
    client: TestClient, value: object
) -> None:
    body = _body([_image(None)])
    body["contents"][0]["parts"][1]["mediaResolution"] = value
    r = client.post(GEN, json=body, headers={"x-goog-api-key": KEY})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT" and "mediaResolution" in error["message"]
