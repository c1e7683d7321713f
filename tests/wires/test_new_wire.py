"""A new wire is one module and one registration: a wire written here, whose model and stream flag
sit in the URL and whose clients may send their key as ``?key=`` (as Gemini's do), served by the
real gateway in process (``proxy.app.wire_routes``) against the in-process simulator — with no
other change to routefit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import yaml
from starlette.applications import Starlette
from starlette.testclient import TestClient

from pricing.messages import ChatRequest, parse_request
from proxy.app import ROUTES, build_state, lifespan, wire_routes
from proxy.config import parse_config
from proxy.teams import KeyPlaces
from proxy.wires import CHAT_WIRE, RequestContext
from proxy.wires.chat import ChatWire

KEY = "url-wire-team-key"


class UrlWire(ChatWire):
    """Chat's body without ``model`` or ``stream``: both come from the path called."""

    name = CHAT_WIRE.name  # the provider wire it speaks: chat, natively
    paths = ("/url/{model}:complete", "/url/{model}:streamComplete")
    keys = KeyPlaces(headers=("x-goog-api-key",), query="key")

    def parse(self, ctx: RequestContext) -> ChatRequest:
        stream = ctx.url_path.endswith(":streamComplete")
        return parse_request({**ctx.body, "model": ctx.path["model"], "stream": stream})


def _config() -> Any:
    data = yaml.safe_load(
        f"""
        model_list:
          - model_name: small
            litellm_params: {{model: openai/gpt-4o-small, api_base: "sim://local"}}
        routefit_settings:
          store_path: ":memory:"
          teams: [{{id: url-team, keys: [{KEY}]}}]
        """
    )
    return parse_config(data, "routes.yaml", environ={})


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = Starlette(routes=[*ROUTES, *wire_routes(UrlWire())], lifespan=lifespan)
    app.state.routefit = build_state(_config())
    with TestClient(app) as c:
        yield c


HELLO = {"messages": [{"role": "user", "content": "hello there"}]}


def test_the_model_and_the_key_come_from_the_url(client: TestClient) -> None:
    reply = client.post("/url/small:complete", params={"key": KEY}, json=HELLO)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-routefit-route"] == "small"
    assert reply.json()["choices"][0]["message"]["content"]
    assert reply.json()["model"] == "small"


def test_the_stream_flag_comes_from_the_path(client: TestClient) -> None:
    reply = client.post("/url/small:streamComplete", headers={"x-goog-api-key": KEY}, json=HELLO)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = [e for e in reply.text.split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert any(orjson.loads(e[6:]).get("choices") for e in events[:-1])


def test_the_gateway_refuses_in_the_wires_shape(client: TestClient) -> None:
    assert client.post("/url/small:complete", json=HELLO).status_code == 401
    # a key where this wire's clients do not put it is no key
    assert (
        client.post("/url/small:complete", headers={"x-api-key": KEY}, json=HELLO).status_code
        == 401
    )
    missing = client.post("/url/nope:complete", params={"key": KEY}, json=HELLO)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    bad = client.post("/url/small:complete", params={"key": KEY}, json={"messages": "x"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"
