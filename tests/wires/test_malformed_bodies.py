"""Malformed bodies found by fuzzing the wires: each was a 500 ("routefit internal error", a
traceback in the log) and is now the client's 400 in its wire's error shape, refused before
anything is forwarded.

* chat ``stream_options`` that is not an object: the chat wire merges ``include_usage`` into it
  when it streams (``proxy/wires/chat.py``, ``ChatWire.outbound``);
* chat ``stop`` (and Gemini ``generationConfig.stopSequences``) that is not a string or a list
  of strings: routefit's own Anthropic mapping makes ``stop_sequences`` of it
  (``proxy/transports/chat_to_messages.py``, ``messages_body``);
* a Gemini ``functionResponse.parts`` that is not a list (``proxy/wires/gemini_parse.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from harness import claude_route, sim_route
from starlette.testclient import TestClient

from pricing.messages import RequestError, parse_request
from proxy.app import create_app
from proxy.config import parse_config
from proxy.sim.server import SimServer
from proxy.wires.gemini_parse import parse_gemini

HI = [{"role": "user", "content": "hi"}]
GEMINI_HI = [{"role": "user", "parts": [{"text": "hi"}]}]


@pytest.fixture(scope="module")
def client(sim: SimServer) -> Iterator[TestClient]:
    routes = [sim_route("gpt-4o", sim.base_url), claude_route("claude", sim.base_url)]
    data = {"model_list": routes, "routefit_settings": {"store_path": ":memory:"}}
    app = create_app(parse_config(yaml.safe_load(yaml.safe_dump(data)), "r.yaml", environ={}))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("stop", [None, "END", [], ["a", "b"]])
def test_chat_accepts_the_stop_openai_accepts(stop: Any):
    parse_request({"model": "m", "messages": HI, "stop": stop, "stream_options": None})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stream_options", 5),
        ("stream_options", "usage"),
        ("stream_options", [True]),
        ("stream", "yes"),
        ("stream", [False]),
        ("stream", 1),
        ("stop", 5),
        ("stop", True),
        ("stop", {"a": "b"}),
        ("stop", [1, 2]),
        ("stop", ["ok", None]),
    ],
)
def test_chat_refuses_options_of_the_wrong_type(field: str, value: Any):
    with pytest.raises(RequestError) as caught:
        parse_request({"model": "m", "messages": HI, field: value})
    assert caught.value.param == field


@pytest.mark.parametrize(
    ("model", "extra"),
    [
        ("gpt-4o", {"stream": True, "stream_options": 5}),
        ("claude", {"stream": True, "stream_options": 5}),
        ("claude", {"stop": 5}),
        ("claude", {"stop": True}),
        ("gpt-4o", {"stream": "yes"}),
    ],
)
def test_chat_body_of_the_wrong_type_is_a_400_not_a_500(
    client: TestClient, model: str, extra: dict[str, Any]
):
    reply = client.post("/v1/chat/completions", json={"model": model, "messages": HI, **extra})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] in extra


@pytest.mark.parametrize("stops", [5, "END", [5], {"a": 1}])
def test_gemini_refuses_stop_sequences_that_are_not_a_list_of_strings(stops: Any):
    body = {"contents": GEMINI_HI, "generationConfig": {"stopSequences": stops}}
    with pytest.raises(RequestError) as caught:
        parse_gemini(body, "m", sse=False, array=False, counting=False)
    assert caught.value.param == "generationConfig.stopSequences"


@pytest.mark.parametrize("parts", [5, 1.5, True])
def test_gemini_refuses_function_response_parts_that_are_not_a_list(parts: Any):
    response = {"functionResponse": {"name": "f", "response": {"x": 1}, "parts": parts}}
    body = {"contents": [{"role": "user", "parts": [response]}]}
    with pytest.raises(RequestError) as caught:
        parse_gemini(body, "m", sse=False, array=False, counting=False)
    assert caught.value.param == "contents[0].parts[0].functionResponse.parts"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/v1beta/models/claude:generateContent",
            {"contents": GEMINI_HI, "generationConfig": {"stopSequences": 5}},
        ),
        (
            "/v1beta/models/gpt-4o:countTokens",
            {
                "contents": [
                    {
                        "role": "user",
                        "parts": [{"functionResponse": {"name": "f", "response": {}, "parts": 5}}],
                    }
                ]
            },
        ),
    ],
)
def test_gemini_body_of_the_wrong_type_is_google_400_not_a_500(
    client: TestClient, path: str, body: dict[str, Any]
):
    reply = client.post(path, json=body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
