"""A prompt's anchor is keyed with the provider-side prefix its count includes.

Google's ``promptTokenCount`` includes a ``cachedContent``'s tokens; routefit keyed the anchor (the
provider's count of a prompt, which prices the next turn) on the contents and tools alone, so the
same contents sent without the cache were "anchored" at the cache's count: 1,066 tokens where
Google counted 166 (an over-estimate that cuts or refuses what fits; the reverse, an anchor
learnt without the cache and used with one, under-estimates). ``proxy.estimate.PROVIDER_CONTEXT``
names the fields (a Responses ``prompt`` or ``conversation`` too) the key chain now starts from.
A stand-in Google counts the cache; routefit in process."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import yaml
from starlette.testclient import TestClient
from test_gemini_native import HEADERS, KEY, _route

from proxy.app import create_app
from proxy.config import parse_config
from proxy.transports.mock import MockTransport

#: What the stand-in counts for the contents below, and for the cache they may name.
CONTENTS, CACHE = 160, 900
CACHE_NAME = "cachedContents/docs-1"


async def _google(request: httpx.Request) -> httpx.Response:
    body = orjson.loads(request.content)
    prompt = CONTENTS + (CACHE if body.get("cachedContent") == CACHE_NAME else 0)
    answer = {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": {
            "promptTokenCount": prompt,
            "candidatesTokenCount": 1,
            "totalTokenCount": prompt + 1,
        },
    }
    return httpx.Response(200, json=answer)


@pytest.fixture
def client() -> Iterator[TestClient]:
    data = {
        "model_list": [_route("gem", "gemini-sim", 1_048_576)],
        "routefit_settings": {"store_path": ":memory:", "teams": [{"id": "t", "keys": [KEY]}]},
    }
    config = parse_config(yaml.safe_load(yaml.safe_dump(data)), "r.yaml", environ={})
    with TestClient(create_app(config, transport=MockTransport(_google))) as c:
        yield c


def _ask(client: TestClient, cached: bool) -> tuple[int, str]:
    text = " ".join(["the cached documents say the window holds the prompt"] * 12)
    body: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": text}]}]}
    if cached:
        body["cachedContent"] = CACHE_NAME
    r = client.post("/v1beta/models/gem:generateContent", json=body, headers=HEADERS)
    assert r.status_code == 200, r.text
    tokens = int(r.headers["x-routefit-prompt-tokens"])
    return tokens, r.headers["x-routefit-prompt-tokens-kind"]


def test_an_anchor_learnt_with_a_cache_does_not_price_the_contents_without_it(client) -> None:
    _ask(client, cached=True)  # learnt: these contents with the cache are CONTENTS + CACHE
    again, kind = _ask(client, cached=True)
    assert kind == "anchored" and again >= CONTENTS + CACHE  # the same prompt finds its count
    alone, kind = _ask(client, cached=False)
    assert kind != "anchored" or alone < CONTENTS + CACHE
    assert alone < CONTENTS + CACHE // 2  # priced as the contents, not the cache
