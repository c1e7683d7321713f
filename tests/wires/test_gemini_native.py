"""The Gemini wire on a route whose provider speaks it (``gemini/``), in process: routefit served
by the real app, the provider by the simulator's own Gemini wire through the mock transport (no
socket). What the provider receives (the client's bytes when nothing was cut, Google's URL and
key header, contents rebuilt and accepted when something was), what comes back (its bytes, its
events, its usage), overflow fitted before the provider can refuse it, the ``google-genai`` SDK
end to end, and Google's error shapes under these paths."""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import yaml
from PIL import Image
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.config import parse_config
from proxy.sim.app import create_app as create_sim
from proxy.sim.completion import WORDS
from proxy.sim.faults import FaultRule
from proxy.sim.state import SimConfig, SimState
from proxy.transports.mock import MockTransport, asgi_transport

KEY = "gemini-native-key"
PROVIDER_KEY = "sk-google-sim"
HEADERS = {"x-goog-api-key": KEY}
GEN = "/v1beta/models/gem:generateContent"
STREAM = "/v1beta/models/gem:streamGenerateContent"
SMALL = "/v1beta/models/gem-small:generateContent"
SMALL_WINDOW = 8192  # the simulator's gemini-sim-small


def _route(alias: str, model: str, window: int) -> dict[str, Any]:
    return {
        "model_name": alias,
        "litellm_params": {
            "model": f"gemini/{model}",
            "api_base": "http://sim.local/v1beta",
            "api_key": PROVIDER_KEY,
        },
        "model_info": {
            "max_input_tokens": window,
            "max_output_tokens": 4096,
            "supports_vision": True,
        },
        "routefit": {"image_rule": "gemini-tile"},  # Google's rule for Gemini 2.x
    }


class Native:
    """routefit in process with the simulator behind it, and what the simulator was sent."""

    def __init__(self, client: TestClient, sim: SimState, transport: MockTransport) -> None:
        self.client = client
        self.sim = sim
        self.transport = transport

    def sent(self) -> httpx.Request:
        return self.transport.sent[-1]

    def seen(self) -> dict[str, Any]:
        """The simulator's log entry of the last request (its status and its count)."""
        return self.sim.requests(1)[0]


@pytest.fixture(scope="module")
def native() -> Iterator[Native]:
    sim = SimState(config=SimConfig(api_keys=frozenset({PROVIDER_KEY})))
    transport = asgi_transport(create_sim(sim))
    data = {
        "model_list": [
            _route("gem", "gemini-sim", 1_048_576),
            _route("gem-small", "gemini-sim-small", SMALL_WINDOW),
        ],
        "routefit_settings": {
            "store_path": ":memory:",
            "teams": [{"id": "gemini-team", "keys": [KEY]}],
        },
    }
    config = parse_config(yaml.safe_load(yaml.safe_dump(data)), "r.yaml", environ={})
    with TestClient(create_app(config, transport=transport)) as client:
        yield Native(client, sim, transport)


def _events(text: str) -> list[bytes]:
    return [e.encode() for e in re.split(r"\r\n\r\n|\n\n", text) if e.startswith("data: ")]


HELLO = {
    "systemInstruction": {"parts": [{"text": "Be brief."}]},
    "contents": [{"role": "user", "parts": [{"text": "hello there"}]}],
    "generationConfig": {"maxOutputTokens": 64, "temperature": 0.2},
}


def test_a_request_that_fits_reaches_the_provider_byte_for_byte(native: Native):
    raw = orjson.dumps(HELLO)
    reply = native.client.post(GEN, headers={**HEADERS, "content-type": "application/json"},
                               content=raw)  # fmt: skip
    assert reply.status_code == 200, reply.text
    sent = native.sent()
    assert sent.content == raw
    assert sent.url.path == "/v1beta/models/gemini-sim:generateContent"
    assert sent.headers["x-goog-api-key"] == PROVIDER_KEY
    assert "authorization" not in sent.headers
    # the provider's answer as it sent it: its own modelVersion and usage
    data = reply.json()
    assert data["modelVersion"] == "gemini-sim"
    assert data["usageMetadata"]["promptTokenCount"] == native.seen()["prompt_tokens"]
    assert reply.headers["x-routefit-route"] == "gem"


def test_the_sse_stream_is_the_providers_events_as_they_came(native: Native):
    reply = native.client.post(STREAM, headers=HEADERS, params={"alt": "sse"}, json=HELLO)
    assert reply.status_code == 200, reply.text
    assert native.sent().url.query == b"alt=sse"
    events = [json.loads(e[6:]) for e in _events(reply.text)]
    assert len(events) > 1
    assert all("finishReason" not in e["candidates"][0] for e in events[:-1])
    last = events[-1]
    assert last["candidates"][0]["finishReason"] == "STOP"
    usage = last["usageMetadata"]
    assert usage["promptTokenCount"] == native.seen()["prompt_tokens"]
    parts = [p for e in events for p in e["candidates"][0]["content"]["parts"]]
    text = "".join(p.get("text", "") for p in parts)
    assert set(text.lower().split()) <= set(WORDS)


def test_a_stream_without_alt_sse_is_one_whole_answer_in_an_array(native: Native):
    reply = native.client.post(STREAM, headers=HEADERS, json=HELLO)
    assert reply.status_code == 200, reply.text
    assert native.sent().url.path.endswith(":generateContent")
    chunks = reply.json()
    assert isinstance(chunks, list) and len(chunks) == 1
    assert chunks[0]["candidates"][0]["finishReason"] == "STOP"


def test_a_providers_refusal_reaches_the_client_in_googles_shape(native: Native):
    native.sim.faults.add(
        [FaultRule.from_json({"fault": "status:429", "count": None, "model": "gemini-sim"})]
    )
    try:
        reply = native.client.post(GEN, headers=HEADERS, json=HELLO)
    finally:
        native.sim.faults.clear()
    assert reply.status_code == 429, reply.text
    error = reply.json()["error"]
    assert error["status"] == "RESOURCE_EXHAUSTED" and error["code"] == 429


def _turn(i: int, size: int) -> list[dict[str, Any]]:
    """One round of an agent: the user asks, the model calls, the function answers big."""
    return [
        {"role": "user", "parts": [{"text": f"step {i}: read the next file"}]},
        {
            "role": "model",
            "parts": [{"functionCall": {"name": "read_file", "args": {"path": f"f{i}.py"}}}],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "name": "read_file",
                        "response": {"output": f"line {i} of a long file\n" * size},
                    }
                }
            ],
        },
    ]


TOOLS = [
    {
        "functionDeclarations": [
            {
                "name": "read_file",
                "description": "Read a file.",
                "parameters": {"type": "OBJECT", "properties": {"path": {"type": "STRING"}}},
            }
        ]
    }
]


def _long_session(turns: int, size: int) -> dict[str, Any]:
    contents = [c for i in range(turns) for c in _turn(i, size)]
    contents.append({"role": "user", "parts": [{"text": "now summarise what you read"}]})
    return {"contents": contents, "tools": TOOLS}


def test_overflow_is_fitted_so_the_provider_never_refuses(native: Native):
    body = _long_session(12, 120)  # ~4x the small window
    whole = native.client.post("/v1beta/models/gem:countTokens", headers=HEADERS, json=body).json()[
        "totalTokens"
    ]
    assert whole > 2 * SMALL_WINDOW
    reply = native.client.post(SMALL, headers=HEADERS, json=body)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-routefit-actions"]
    seen = native.seen()
    assert seen["status"] == 200 and seen["prompt_tokens"] <= SMALL_WINDOW
    sent = json.loads(native.sent().content)
    assert sent["contents"] != body["contents"]
    assert sent["contents"][-1] == body["contents"][-1]  # the latest turn, as it came
    assert sent["tools"] == body["tools"]
    # model turns are never rewritten: each one sent is one the client sent
    for content in sent["contents"]:
        if content.get("role") == "model":
            assert content in body["contents"]
    # every function response still names its call
    for content in sent["contents"]:
        for part in content["parts"]:
            if "functionResponse" in part:
                assert part["functionResponse"]["name"] == "read_file"


def test_a_session_that_outgrows_the_route_keeps_being_answered(native: Native):
    """Turn after turn on the small route: every answer 200, the provider never refuses, and
    the provider's prompt stays inside its window once routefit starts cutting."""
    body: dict[str, Any] = {"contents": [], "tools": TOOLS}
    cut = 0
    for i in range(8):
        body["contents"] += _turn(i, 60)
        ask = {**body, "contents": [*body["contents"], {"role": "user", "parts": [{"text": "go"}]}]}
        reply = native.client.post(SMALL, headers=HEADERS, json=ask)
        assert reply.status_code == 200, (i, reply.text)
        assert native.seen()["status"] == 200
        cut += bool(reply.headers.get("x-routefit-actions"))
    assert cut >= 2


def test_a_lowered_output_cap_is_written_into_generation_config(native: Native):
    body = {**_long_session(3, 40), "generationConfig": {"maxOutputTokens": 60_000}}
    reply = native.client.post(SMALL, headers=HEADERS, json=body)
    assert reply.status_code == 200, reply.text
    sent = json.loads(native.sent().content)
    assert sent["generationConfig"]["maxOutputTokens"] < 60_000
    assert sent["contents"] == body["contents"]  # nothing else changed


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", "/v1beta/models/nope:generateContent", 404),  # an unknown alias
        ("POST", "/v1beta/models/gem:embedContent", 404),  # a method routefit does not serve
        ("GET", GEN, 405),
        ("POST", "/v1/models/gem:batchGenerateContent", 404),
    ],
)
def test_errors_under_gemini_paths_are_googles(native: Native, method, path, status):
    reply = native.client.request(method, path, headers=HEADERS, json=HELLO)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["code"] == status
    assert error["status"] == ("NOT_FOUND" if status == 404 else "INVALID_ARGUMENT")
    assert error["message"]


def test_openai_paths_keep_openais_errors(native: Native):
    reply = native.client.get("/v1/models/gem")
    assert reply.status_code in (404, 405)
    assert "status" not in reply.json()["error"]


def test_a_missing_key_says_where_gemini_clients_put_it(native: Native):
    reply = native.client.post(GEN, json=HELLO)
    assert reply.status_code == 401
    error = reply.json()["error"]
    assert error["status"] == "UNAUTHENTICATED"
    assert "x-goog-api-key" in error["message"] and "?key=" in error["message"]


# -- the other wires on a Gemini route: chat through litellm, to the same provider -----------


def test_chat_messages_and_responses_clients_reach_a_gemini_route_through_litellm():
    """litellm carries chat to Google's wire (its own HTTP client: the simulator on loopback);
    the Messages and Responses wires reach it through chat, as on any litellm route. The
    simulator's edge sets a cookie on each client that sends none, and the client every team
    shares never sends one back (the host by name: an httpx client keeps a named host's;
    litellm's handler, measured with litellm 1.110, does not send them)."""
    from proxy.sim.server import run_sim

    with run_sim(api_keys=[PROVIDER_KEY]) as sim:
        route = _route("gem", "gemini-sim", 1_048_576)
        by_name = sim.base_url.replace("127.0.0.1", "localhost")
        route["litellm_params"]["api_base"] = f"{by_name}/v1beta"
        data = {"model_list": [route], "routefit_settings": {"store_path": ":memory:"}}
        config = parse_config(yaml.safe_load(yaml.safe_dump(data)), "r.yaml", environ={})
        with TestClient(create_app(config)) as client:
            hi = [{"role": "user", "content": "hi"}]
            asks = [
                ("/v1/chat/completions", {"messages": hi}),
                ("/v1/messages", {"max_tokens": 50, "messages": hi}),
                ("/v1/responses", {"input": "hi"}),
            ]
            for path, body in asks:
                reply = client.post(path, json={"model": "gem", **body})
                assert reply.status_code == 200, (path, reply.text)
        seen = sim.requests()
    assert [r["path"] for r in seen] == ["/v1beta/models/gemini-sim:generateContent"] * 3
    assert all(r["status"] == 200 for r in seen)
    assert [r["headers"].get("cookie") for r in seen] == [None] * 3


def test_a_stream_the_provider_cuts_ends_with_googles_error_event():
    """Over a real socket (the in-process transport cannot drop a connection): the events the
    provider sent, then the end in Google's shape, as Google's streams report errors."""
    from proxy.sim.server import run_sim

    with run_sim(api_keys=[PROVIDER_KEY]) as sim:
        route = _route("gem", "gemini-sim", 1_048_576)
        route["litellm_params"]["api_base"] = f"{sim.base_url}/v1beta"
        data = {"model_list": [route], "routefit_settings": {"store_path": ":memory:"}}
        config = parse_config(yaml.safe_load(yaml.safe_dump(data)), "r.yaml", environ={})
        sim.inject("cut-stream:2")
        with TestClient(create_app(config)) as client:
            reply = client.post(STREAM, params={"alt": "sse"}, json=HELLO)
    assert reply.status_code == 200
    events = [json.loads(e[6:]) for e in _events(reply.text)]
    assert len(events) == 3, events  # the two the provider sent, then the error
    assert all("candidates" in e for e in events[:2])
    assert set(events[-1]) == {"error"} and events[-1]["error"]["status"] == "INTERNAL"


# -- the google-genai SDK, in process ---------------------------------------------------------

genai = pytest.importorskip("google.genai")
from google.genai import types  # noqa: E402


@pytest.fixture
def sdk(native: Native) -> Any:
    options = types.HttpOptions(base_url="http://testserver", httpx_client=native.client)
    return genai.Client(api_key=KEY, http_options=options)


def test_the_sdk_answers_and_streams_natively(sdk: Any, native: Native):
    reply = sdk.models.generate_content(model="gem", contents="tell me a story")
    assert native.sent().url.path == "/v1beta/models/gemini-sim:generateContent"
    assert set((reply.text or "").lower().split()) <= set(WORDS)
    usage = reply.usage_metadata
    assert usage is not None and usage.prompt_token_count == native.seen()["prompt_tokens"]
    chunks = list(sdk.models.generate_content_stream(model="gem", contents="tell me a story"))
    assert native.sent().url.query == b"alt=sse"
    assert len(chunks) > 1
    assert "".join(c.text or "" for c in chunks) == reply.text  # the simulator is deterministic
    last = chunks[-1].usage_metadata
    assert last is not None and last.prompt_token_count == usage.prompt_token_count


def test_the_sdk_calls_a_function_and_sends_its_response(sdk: Any, native: Native):
    tool = types.Tool(function_declarations=[types.FunctionDeclaration(
        name="read_file", description="Read a file.",
        parameters=types.Schema(type="OBJECT", properties={"path": types.Schema(type="STRING")}),
    )])  # fmt: skip
    config = types.GenerateContentConfig(
        tools=[tool], automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True)
    )
    ask = types.Content(role="user", parts=[types.Part(text="please call:read_file")])
    reply = sdk.models.generate_content(model="gem", contents=[ask], config=config)
    calls = reply.function_calls
    assert calls and calls[0].name == "read_file" and isinstance(calls[0].args, dict)
    answer = types.Part.from_function_response(name="read_file", response={"output": "x = 1"})
    history = [ask, reply.candidates[0].content, types.Content(role="user", parts=[answer])]
    follow = sdk.models.generate_content(model="gem", contents=history, config=config)
    assert follow.text
    sent = json.loads(native.sent().content)
    assert sent["contents"][1]["parts"][0]["functionCall"]["name"] == "read_file"
    assert sent["contents"][2]["parts"][0]["functionResponse"]["response"] == {"output": "x = 1"}


def _png(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (10, 20, 30)).save(buf, "PNG")
    return buf.getvalue()


def test_the_sdk_sends_an_image_priced_by_googles_rule(sdk: Any, native: Native):
    def prompt(width: int, height: int) -> int:
        image = types.Part.from_bytes(data=_png(width, height), mime_type="image/png")
        reply = sdk.models.generate_content(model="gem", contents=[image, "what is this?"])
        assert reply.usage_metadata is not None
        return int(reply.usage_metadata.prompt_token_count or 0)

    small, large = prompt(300, 300), prompt(960, 540)
    assert large - small == 1548 - 258  # Google's published tiles: 6 crops vs one
    sent = json.loads(native.sent().content)
    inline = sent["contents"][0]["parts"][0]["inlineData"]
    assert base64.urlsafe_b64decode(inline["data"]) == _png(960, 540)  # as the SDK sent it


def test_the_sdk_counts_with_routefits_estimate(sdk: Any):
    short = sdk.models.count_tokens(model="gem", contents="hi").total_tokens
    long = sdk.models.count_tokens(model="gem", contents="hi " * 300).total_tokens
    assert short and long and long > short + 200
