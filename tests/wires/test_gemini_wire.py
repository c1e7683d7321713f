"""The Gemini wire served by the real app in process, against the simulator (a chat provider:
every Gemini request is translated to chat and back): keys, the answer and stream shapes, the
count endpoint, what the provider is sent, Google's error shapes."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import yaml
from harness import sim_route
from PIL import Image
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.config import parse_config
from proxy.sim.completion import WORDS
from proxy.sim.models import get_builtin, small_variant
from proxy.sim.server import SimServer
from proxy.wires.base import Outcome
from proxy.wires.gemini import _relay_chat, google_status

KEY = "gemini-team-key"
TINY = 4096
GEN = "/v1beta/models/small:generateContent"
STREAM = "/v1beta/models/small:streamGenerateContent"
COUNT = "/v1beta/models/small:countTokens"
HEADERS = {"x-goog-api-key": KEY}
HELLO = {"contents": [{"role": "user", "parts": [{"text": "hello there"}]}]}


@pytest.fixture(scope="module")
def client(sim: SimServer) -> Iterator[TestClient]:
    tiny = replace(small_variant(get_builtin("gpt-4o"), TINY, 1024), name="gpt-4o-tiny")
    sim.state.add_model(tiny)
    routes = [
        sim_route("small", sim.base_url, "gpt-4o"),
        sim_route(
            "tiny",
            sim.base_url,
            "gpt-4o-tiny",
            model_info={"max_input_tokens": TINY, "max_output_tokens": 1024},
        ),
    ]
    data = {
        "model_list": routes,
        "routefit_settings": {
            "store_path": ":memory:",
            "teams": [{"id": "gemini-team", "keys": [KEY]}],
        },
    }
    app = create_app(parse_config(yaml.safe_load(yaml.safe_dump(data)), "r.yaml", environ={}))
    with TestClient(app) as c:
        yield c


def _sent(sim: SimServer) -> dict[str, Any]:
    """The chat body the provider received last."""
    body: dict[str, Any] = sim.last_request("/v1/chat/completions")["body"]
    return body


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(e[6:]) for e in re.split(r"\r?\n\r?\n", text) if e.startswith("data: ")]


def _text(response: dict[str, Any]) -> str:
    parts = response["candidates"][0]["content"]["parts"]
    return "".join(p.get("text", "") for p in parts)


def test_an_answer_in_gemini_shape_with_the_providers_usage(client: TestClient, sim: SimServer):
    reply = client.post(GEN, headers=HEADERS, json=HELLO)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-routefit-route"] == "small"
    data = reply.json()
    candidate = data["candidates"][0]
    assert candidate["content"]["role"] == "model"
    assert candidate["finishReason"] == "STOP"
    assert set(_text(data).lower().split()) <= set(WORDS)
    seen = sim.last_request("/v1/chat/completions")
    usage = data["usageMetadata"]
    assert usage["promptTokenCount"] == seen["prompt_tokens"]
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
    assert data["modelVersion"] == "small"


@pytest.mark.parametrize(
    ("where", "headers", "params"),
    [
        ("x-goog-api-key", HEADERS, {}),
        ("?key=", {}, {"key": KEY}),
        ("Bearer", {"authorization": f"Bearer {KEY}"}, {}),
    ],
)
def test_the_team_key_where_gemini_clients_put_it(client, where, headers, params):
    reply = client.post(GEN, headers=headers, params=params, json=HELLO)
    assert reply.status_code == 200, (where, reply.text)


def test_no_key_is_googles_unauthenticated(client: TestClient):
    for headers in ({}, {"x-api-key": KEY}):  # not where Gemini clients put it: no key
        reply = client.post(GEN, headers=headers, json=HELLO)
        assert reply.status_code == 401
        error = reply.json()["error"]
        assert error["code"] == 401 and error["status"] == "UNAUTHENTICATED" and error["message"]


def test_v1_serves_the_same_methods(client: TestClient):
    for path in (GEN, STREAM, COUNT):
        reply = client.post(path.replace("/v1beta/", "/v1/"), headers=HEADERS, json=HELLO)
        assert reply.status_code == 200, (path, reply.text)


def test_the_sse_stream_says_what_the_answer_says(client: TestClient):
    whole = client.post(GEN, headers=HEADERS, json=HELLO).json()
    reply = client.post(STREAM, headers=HEADERS, params={"alt": "sse"}, json=HELLO)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = _events(reply.text)
    assert len(events) > 2
    assert "".join(_text(e) for e in events) == _text(whole)  # the simulator is deterministic
    last = events[-1]
    assert last["candidates"][0]["finishReason"] == "STOP"
    assert last["usageMetadata"] == whole["usageMetadata"]
    assert all("finishReason" not in e["candidates"][0] for e in events[:-1])


def test_a_stream_without_alt_sse_is_a_json_array(client: TestClient):
    """Google streams a JSON array without ``alt=sse``: routefit answers it with one element."""
    whole = client.post(GEN, headers=HEADERS, json=HELLO).json()
    reply = client.post(STREAM, headers=HEADERS, json=HELLO)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("application/json")
    chunks = reply.json()
    assert isinstance(chunks, list) and len(chunks) == 1
    assert _text(chunks[0]) == _text(whole)
    assert chunks[0]["usageMetadata"] == whole["usageMetadata"]


def test_count_tokens_is_the_estimate_the_fit_prices(client: TestClient):
    body = {
        **HELLO,
        "systemInstruction": {"parts": [{"text": "You are terse."}]},
        "generationConfig": {"maxOutputTokens": 64},
    }
    priced = client.post(GEN, headers=HEADERS, json=body)
    counted = client.post(COUNT, headers=HEADERS, json=body)
    assert counted.status_code == 200, counted.text
    tokens = counted.json()["totalTokens"]
    assert tokens == int(priced.headers["x-routefit-prompt-tokens"]) > 0
    assert counted.headers["x-routefit-prompt-tokens"] == str(tokens)
    # the SDK's other form: the request wrapped in ``generateContentRequest``
    wrapped = {"generateContentRequest": {"model": "models/small", **body}}
    assert client.post(COUNT, headers=HEADERS, json=wrapped).json()["totalTokens"] == tokens


def test_generation_settings_reach_the_chat_route(client: TestClient, sim: SimServer):
    schema = {
        "type": "OBJECT",
        "properties": {"score": {"type": "INTEGER"}, "why": {"type": "STRING"}},
        "required": ["score"],
    }
    body = {
        **HELLO,
        "systemInstruction": {"role": "user", "parts": [{"text": "Rate it."}]},
        "generationConfig": {
            "maxOutputTokens": 77,
            "temperature": 0.25,
            "topP": 0.5,
            "topK": 40,
            "stopSequences": ["END"],
            "candidateCount": 2,
            "responseMimeType": "application/json",
            "responseJsonSchema": schema,
        },
    }
    reply = client.post(GEN, headers=HEADERS, json=body)
    assert reply.status_code == 200, reply.text
    sent = _sent(sim)
    assert sent["messages"][0] == {"role": "system", "content": "Rate it."}
    assert sent["max_tokens"] == 77 and sent["temperature"] == 0.25 and sent["top_p"] == 0.5
    assert sent["stop"] == ["END"] and sent["n"] == 2 and "top_k" not in sent
    fmt = sent["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["schema"]["properties"]["score"]["type"] == "integer"
    candidates = reply.json()["candidates"]
    assert [c["index"] for c in candidates] == [0, 1]
    assert isinstance(json.loads(_text(reply.json()))["score"], int)  # the schema's answer


TOOLS = [
    {
        "functionDeclarations": [
            {
                "name": "read_file",
                "description": "Read a file.",
                "parametersJsonSchema": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                },
            },
            {
                "name": "ls",
                "description": "List a directory.",
                "parameters": {"type": "OBJECT", "properties": {"dir": {"type": "STRING"}}},
            },
        ]
    }
]


def _session() -> list[dict[str, Any]]:
    """Two rounds of calls: ids given by the client in one, derived by routefit in the other
    (Gemini pairs by name and order), with a thought part that must never reach chat."""
    return [
        {"role": "user", "parts": [{"text": "look around"}]},
        {
            "role": "model",
            "parts": [
                {"text": "planning", "thought": True, "thoughtSignature": "c2ln"},
                {"functionCall": {"name": "ls", "args": {"dir": "."}}},
                {"functionCall": {"name": "read_file", "args": {"path": "a.txt"}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "read_file", "response": {"output": "A!"}}},
                {"functionResponse": {"name": "ls", "response": {"output": "a.txt"}}},
            ],
        },
        {
            "role": "model",
            "parts": [{"functionCall": {"id": "c-9", "name": "ls", "args": {"dir": "/"}}}],
        },
        {
            "role": "user",
            "parts": [{"functionResponse": {"id": "c-9", "name": "ls", "response": {"x": 1}}}],
        },
        {"role": "user", "parts": [{"text": "now call:read_file please"}]},
    ]


def test_function_calls_and_responses_go_paired_and_come_back_as_calls(client, sim):
    reply = client.post(GEN, headers=HEADERS, json={"contents": _session(), "tools": TOOLS})
    assert reply.status_code == 200, reply.text
    sent = _sent(sim)
    assert [t["function"]["name"] for t in sent["tools"]] == ["read_file", "ls"]
    assert sent["tools"][1]["function"]["parameters"]["properties"]["dir"]["type"] == "string"
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["user", "assistant", "tool", "tool", "assistant", "tool", "user"]
    first = sent["messages"][1]
    assert first["content"] is None  # the thought part is not sent to a chat provider
    ids = {c["function"]["name"]: c["id"] for c in first["tool_calls"]}
    answered = {m["tool_call_id"]: m["content"] for m in sent["messages"][2:4]}
    assert json.loads(answered[ids["read_file"]]) == {"output": "A!"}  # by name, not by order
    assert json.loads(answered[ids["ls"]]) == {"output": "a.txt"}
    assert sent["messages"][4]["tool_calls"][0]["id"] == sent["messages"][5]["tool_call_id"]
    assert sent["messages"][5]["tool_call_id"] == "c-9"
    parts = reply.json()["candidates"][0]["content"]["parts"]
    call = next(p["functionCall"] for p in parts if "functionCall" in p)
    assert call["name"] == "read_file" and isinstance(call["args"]["path"], str) and call["id"]
    assert reply.json()["candidates"][0]["finishReason"] == "STOP"


def test_a_streamed_call_arrives_whole_in_one_chunk(client: TestClient):
    body = {"contents": _session(), "tools": TOOLS}
    reply = client.post(STREAM, headers=HEADERS, params={"alt": "sse"}, json=body)
    events = _events(reply.text)
    calls = [
        p["functionCall"]
        for e in events
        for p in e["candidates"][0]["content"]["parts"]
        if "functionCall" in p
    ]
    assert len(calls) == 1 and calls[0]["name"] == "read_file"
    assert isinstance(calls[0]["args"], dict) and calls[0]["args"]
    assert events[-1]["candidates"][0]["finishReason"] == "STOP"


def _png(w: int, h: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (9, 9, 9)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_an_inline_image_is_priced_by_the_routes_rule_and_sent(client, sim):
    plain = client.post(COUNT, headers=HEADERS, json=HELLO).json()["totalTokens"]
    image = {"inlineData": {"mimeType": "image/png", "data": _png(1024, 1024)}}
    body = {"contents": [{"role": "user", "parts": [{"text": "hello there"}, image]}]}
    with_image = client.post(COUNT, headers=HEADERS, json=body).json()["totalTokens"]
    assert with_image - plain > 500  # gpt-4o's tile rule: 765 at high detail for 1024²
    assert client.post(GEN, headers=HEADERS, json=body).status_code == 200
    content = _sent(sim)["messages"][0]["content"]
    assert content[1]["image_url"]["url"].startswith("data:image/png;base64,")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1beta/models"),  # the SDK's models.list()
        ("GET", "/v1beta/models/small"),  # its models.get()
        ("POST", "/v1beta/models/small"),
        ("GET", "/v1beta/cachedContents"),
        ("POST", "/v1beta/files"),
        ("GET", "/v1beta"),
    ],
)
def test_an_unknown_path_under_v1beta_is_googles_404(client: TestClient, method: str, path: str):
    """Everything under ``/v1beta`` is Google's API: a path routefit does not serve there is a
    404 in Google's shape, as ``:embedContent`` already was (it was OpenAI's, which the
    ``google-genai`` SDK reads as status ``None``)."""
    reply = client.request(method, path, headers=HEADERS)
    assert reply.status_code == 404, reply.text
    error = reply.json()["error"]
    assert error["code"] == 404 and error["status"] == "NOT_FOUND", error
    assert path in error["message"]


def test_refusals_are_googles_errors(client: TestClient):
    missing = client.post("/v1beta/models/nope:generateContent", headers=HEADERS, json=HELLO)
    assert missing.status_code == 404
    assert missing.json()["error"]["status"] == "NOT_FOUND"
    odd_roles = [{"contents": [{"role": role, "parts": [{"text": "hi"}]}]} for role in ([], {})]
    cases = [({"contents": []}, "contents"), ({"contents": [{"parts": 3}]}, "parts")]
    for bad, field in [*cases, *((body, "role") for body in odd_roles)]:  # a role was a 500
        reply = client.post(GEN, headers=HEADERS, json=bad)
        assert reply.status_code == 400
        error = reply.json()["error"]
        assert error["status"] == "INVALID_ARGUMENT" and error["code"] == 400
        assert field in error["message"]
    cap = {**HELLO, "generationConfig": {"maxOutputTokens": 0}}
    reply = client.post(GEN, headers=HEADERS, json=cap)
    assert "maxOutputTokens" in reply.json()["error"]["message"]


def test_an_overflow_in_googles_words(client: TestClient):
    words = "river stone cloud paper " * 3000
    body = {"contents": [{"role": "user", "parts": [{"text": words}]}]}
    reply = client.post("/v1beta/models/tiny:generateContent", headers=HEADERS, json=body)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    found = re.match(
        r"The input token count \((\d+)\) exceeds the maximum number of tokens allowed \((\d+)\)\.",
        error["message"],
    )
    assert found, error["message"]
    assert int(found[2]) == TINY < int(found[1])


def test_a_stream_cut_short_ends_with_googles_error_line(client, sim):
    sim.inject("cut-stream:3", path="/v1/chat/completions")
    reply = client.post(STREAM, headers=HEADERS, params={"alt": "sse"}, json=HELLO)
    assert reply.status_code == 200
    last = _events(reply.text)[-1]
    assert last["error"]["code"] == 500 and last["error"]["status"] == "INTERNAL"
    assert "before it was complete" in last["error"]["message"]


def test_a_provider_error_reaches_the_client_in_googles_shape(client, sim):
    sim.inject("status:429", count=10, path="/v1/chat/completions")
    try:
        reply = client.post(GEN, headers=HEADERS, json=HELLO)
    finally:
        sim.state.faults.clear()
    assert reply.status_code == 429
    assert reply.json()["error"]["status"] == "RESOURCE_EXHAUSTED"


@pytest.mark.parametrize(
    ("status", "name"),
    [
        (400, "INVALID_ARGUMENT"),
        (401, "UNAUTHENTICATED"),
        (403, "PERMISSION_DENIED"),
        (404, "NOT_FOUND"),
        (429, "RESOURCE_EXHAUSTED"),
        (500, "INTERNAL"),
        (503, "UNAVAILABLE"),
        (504, "DEADLINE_EXCEEDED"),
    ],
)
def test_google_status_names(status: int, name: str):
    assert google_status(status) == name


def test_the_dry_run_takes_a_gemini_body_naming_its_model(client: TestClient):
    body = {"model": "models/small", **HELLO, "generationConfig": {"maxOutputTokens": 9}}
    reply = client.post("/routefit/fit", params={"wire": "gemini"}, headers=HEADERS, json=body)
    assert reply.status_code == 200, reply.text
    sent = reply.json()["request"]
    assert sent["messages"] == [{"role": "user", "content": "hello there"}]
    assert sent["max_tokens"] == 9


def test_a_model_turn_of_thoughts_only_is_not_sent_empty(client: TestClient, sim: SimServer):
    thought = {"text": "hmm", "thought": True, "thoughtSignature": "c2ln"}
    contents = [
        {"role": "user", "parts": [{"text": "first"}]},
        {"role": "model", "parts": [thought]},
        {"role": "user", "parts": [{"text": "second"}]},
    ]
    reply = client.post(GEN, headers=HEADERS, json={"contents": contents})
    assert reply.status_code == 200, reply.text
    assert _sent(sim)["messages"] == [
        {"role": "user", "content": "first"},
        {"role": "user", "content": "second"},
    ]


@pytest.mark.parametrize("usage", [True, False], ids=["with-usage", "without-usage"])
def test_a_chat_stream_ending_cleanly_without_a_finish_reason_ends_with_stop(usage: bool):
    """Some OpenAI-compatible providers end a stream with ``[DONE]`` and never state a
    ``finish_reason``. Gemini CLI takes a stream whose last chunk has no ``finishReason`` for an
    invalid one and sends the turn again: the translated stream still ends with ``STOP`` (and
    the usage, when the provider gave one), and the gateway counts it complete."""
    chunks: list[dict[str, Any]] = [
        {"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {"content": " there"}}]},
    ]
    if usage:
        chunks.append(
            {
                "id": "c",
                "choices": [],
                "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
            }
        )
    raw = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]

    async def events() -> Any:
        for event in raw:
            yield event

    async def relay() -> tuple[list[bytes], Outcome]:
        outcome = Outcome()
        out = [e async for e in _relay_chat("small", events(), outcome)]
        return out, outcome

    out, outcome = asyncio.run(relay())
    sent = _events(b"".join(out).decode())
    assert "".join(_text(e) for e in sent) == "hi there"
    last = sent[-1]["candidates"][0]
    assert last["finishReason"] == "STOP"
    assert all("finishReason" not in e["candidates"][0] for e in sent[:-1])
    assert outcome.completed
    if usage:
        assert sent[-1]["usageMetadata"]["promptTokenCount"] == 7
        assert sent[-1]["usageMetadata"]["candidatesTokenCount"] == 2
    else:
        assert "usageMetadata" not in sent[-1]


def test_snake_case_calls_and_responses_reach_chat_as_calls(client: TestClient, sim: SimServer):
    """Google's JSON parser takes the proto's field names (``function_call``,
    ``function_response``) as well as camel case; they reach a chat route as a call and the tool
    message answering it, not as JSON text in an assistant and a user message."""
    contents = [
        {"role": "user", "parts": [{"text": "read a.txt"}]},
        {"role": "model", "parts": [{"function_call": {"name": "read_file", "args": {"p": "a"}}}]},
        {"role": "user", "parts": [{"function_response": {"name": "read_file",
                                                           "response": {"output": "A!"}}}]},
    ]  # fmt: skip
    reply = client.post(GEN, headers=HEADERS, json={"contents": contents, "tools": TOOLS})
    assert reply.status_code == 200, reply.text
    sent = _sent(sim)["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    call = sent[1]["tool_calls"][0]
    assert call["function"]["name"] == "read_file" and json.loads(
        call["function"]["arguments"]
    ) == {"p": "a"}
    assert sent[2]["tool_call_id"] == call["id"] and json.loads(sent[2]["content"]) == {
        "output": "A!"
    }
