"""The simulator's Gemini wire on its own, in process: what Google accepts and refuses, in
Google's words and shape, how it counts (by its own rules, never routefit's), its usage and
implicit cache, its two stream forms and its count endpoint."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from PIL import Image

from proxy.sim.app import create_app
from proxy.sim.counting import gemini_prompt
from proxy.sim.models import get_builtin
from proxy.sim.state import SimConfig, SimState

KEY = "sk-google"
GEN = "/v1beta/models/gemini-sim:generateContent"
HI = {"contents": [{"role": "user", "parts": [{"text": "hello there"}]}]}


class Sim:
    def __init__(self) -> None:
        self.state = SimState(config=SimConfig(api_keys=frozenset({KEY})))
        self.app = create_app(self.state)

    def post(self, path: str, body: Any, **kwargs: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
                return await client.post(path, json=body, **kwargs)

        return asyncio.run(go())


@pytest.fixture
def sim() -> Iterator[Sim]:
    yield Sim()


def _key(**more: str) -> dict[str, Any]:
    return {"headers": {"x-goog-api-key": KEY, **more}}


def _count(body: Any, model: str) -> int:
    """The simulator's own count of a text-only body (its oracle, never routefit's)."""

    def no_pictures(part: Any) -> Any:
        raise AssertionError("a text-only body")

    return gemini_prompt(body, get_builtin(model), no_pictures).total


def _google(reply: httpx.Response, status: int, name: str) -> str:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(error) == {"code", "message", "status"}
    assert error["code"] == status and error["status"] == name
    message: str = error["message"]
    return message


def test_keys_where_google_takes_them(sim: Sim):
    assert sim.post(GEN, HI, **_key()).status_code == 200
    assert sim.post(GEN, HI, params={"key": KEY}).status_code == 200
    assert "unregistered callers" in _google(sim.post(GEN, HI), 403, "PERMISSION_DENIED")
    bearer = sim.post(GEN, HI, headers={"authorization": f"Bearer {KEY}"})
    _google(bearer, 403, "PERMISSION_DENIED")  # an API key is not an OAuth token
    wrong = sim.post(GEN, HI, params={"key": "nope"})
    assert (
        _google(wrong, 400, "INVALID_ARGUMENT") == "API key not valid. Please pass a valid API key."
    )


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({**HI, "model": "gemini-sim"}, 'Unknown name "model"'),
        ({"contents": []}, "contents is not specified"),
        ({"contents": [{"role": "user", "parts": []}]}, "must not be empty"),
        ({"contents": [{"parts": [{"text": "a", "inlineData": {}}]}]}, "oneof field 'data'"),
        ({"contents": [{"parts": [{"functionCall": {"args": {}}}]}]}, "Name cannot be empty"),
        ({"contents": [{"parts": [{"txt": "a"}]}]}, 'Unknown name "contents[0].parts[0].txt"'),
        ({"contents": [{"role": "assistant", "parts": [{"text": "a"}]}]}, "valid role"),
    ],
)
def test_what_google_refuses(sim: Sim, body: Any, words: str):
    assert words in _google(sim.post(GEN, body, **_key()), 400, "INVALID_ARGUMENT")


_ASK = {"role": "user", "parts": [{"text": "read both"}]}
_CALLS = {
    "role": "model",
    "parts": [{"functionCall": {"name": "read", "args": {"p": p}}} for p in ("a", "b")],
}
_ANSWERS = {
    "role": "user",
    "parts": [{"functionResponse": {"name": "read", "response": {"r": p}}} for p in ("a", "b")],
}
_SAID = {"role": "model", "parts": [{"text": "done"}]}


@pytest.mark.parametrize(
    ("contents", "words"),
    [
        ([_CALLS, _ANSWERS], "function call turn comes immediately after a user turn"),
        ([_ASK, _SAID, _CALLS, _ANSWERS], "function call turn comes immediately after a user"),
        ([_ASK, _ANSWERS], "function response turn comes immediately after a function call"),
        ([_ASK, _CALLS, _ANSWERS, _ANSWERS], "response turn comes immediately after a function"),
        (
            [_ASK, _CALLS, {**_ANSWERS, "parts": _ANSWERS["parts"][:1]}],
            "number of function response parts is equal to the number of function call parts",
        ),
    ],
)
def test_function_calling_out_of_order_is_refused_as_google_does(sim: Sim, contents, words):
    """Google's rules for a history with function calls, which a fit that elides turns must
    keep: a call turn follows a user turn or a response turn, a response turn follows a call
    turn and answers every call in it. The same turns in order are answered."""
    body = {"contents": contents}
    assert words in _google(sim.post(GEN, body, **_key()), 400, "INVALID_ARGUMENT")
    in_order = {"contents": [_ASK, _CALLS, _ANSWERS, _SAID, _ASK, _CALLS, _ANSWERS]}
    assert sim.post(GEN, in_order, **_key()).status_code == 200


def test_unknown_models_and_methods_are_not_found(sim: Sim):
    message = _google(
        sim.post("/v1beta/models/gpt-4o:generateContent", HI, **_key()), 404, "NOT_FOUND"
    )
    assert message.startswith("models/gpt-4o is not found for API version v1beta")
    _google(sim.post("/v1beta/models/gemini-sim:embedContent", HI, **_key()), 404, "NOT_FOUND")


def test_overflow_is_refused_in_googles_words_with_its_count(sim: Sim):
    small = "/v1beta/models/gemini-sim-small:generateContent"
    body = {"contents": [{"parts": [{"text": "river cloud " * 5000}]}]}
    message = _google(sim.post(small, body, **_key()), 400, "INVALID_ARGUMENT")
    counted = _count(body, "gemini-sim-small")
    assert message == (
        f"The input token count ({counted}) exceeds the maximum number of tokens allowed (8192)."
    )
    # the prompt alone counts: maxOutputTokens is not added to it, as at Google
    fits = {"contents": [{"parts": [{"text": "river cloud " * 2000}]}],
            "generationConfig": {"maxOutputTokens": 8000}}  # fmt: skip
    assert sim.post(small, fits, **_key()).status_code == 200


def test_usage_counts_by_the_simulators_rules_and_caches_prefixes(sim: Sim):
    long = {"contents": [{"role": "user", "parts": [{"text": "field tower " * 900}]}]}
    first = sim.post(GEN, long, **_key()).json()["usageMetadata"]
    assert first["promptTokenCount"] == _count(long, "gemini-sim")
    assert "cachedContentTokenCount" not in first
    assert first["totalTokenCount"] == first["promptTokenCount"] + first["candidatesTokenCount"]
    longer = {"contents": [*long["contents"], {"role": "model", "parts": [{"text": "ok"}]},
                           {"role": "user", "parts": [{"text": "and then?"}]}]}  # fmt: skip
    second = sim.post(GEN, longer, **_key()).json()["usageMetadata"]
    assert 1024 <= second["cachedContentTokenCount"] < second["promptTokenCount"]
    assert second["cachedContentTokenCount"] % 256 == 0


def _png(width: int, height: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (width, height)).save(buf, "PNG")
    return base64.urlsafe_b64encode(buf.getvalue()).decode()


def test_images_cost_googles_tiles(sim: Sim):
    def prompt(width: int, height: int) -> int:
        image = {"inlineData": {"mimeType": "image/png", "data": _png(width, height)}}
        body = {"contents": [{"parts": [image, {"text": "what is it?"}]}]}
        return int(sim.post(GEN, body, **_key()).json()["usageMetadata"]["promptTokenCount"])

    text = sim.post(GEN, {"contents": [{"parts": [{"text": "what is it?"}]}]}, **_key())
    plain = text.json()["usageMetadata"]["promptTokenCount"]
    assert prompt(384, 384) - plain == 258
    assert prompt(960, 540) - plain == 1548


def test_sse_array_and_count(sim: Sim):
    stream = "/v1beta/models/gemini-sim:streamGenerateContent"
    whole = sim.post(GEN, HI, **_key()).json()
    sse = sim.post(stream, HI, params={"alt": "sse", "key": KEY})
    assert sse.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(e[6:]) for e in sse.text.split("\r\n\r\n") if e.startswith("data: ")]
    array = sim.post(stream, HI, params={"key": KEY}).json()
    for chunks in (events, array):
        assert len(chunks) > 1
        text = "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks)
        assert text == whole["candidates"][0]["content"]["parts"][0]["text"]
        assert (
            chunks[-1]["usageMetadata"]["promptTokenCount"]
            == (whole["usageMetadata"]["promptTokenCount"])
        )
        assert all("finishReason" not in c["candidates"][0] for c in chunks[:-1])
    counted = sim.post("/v1/models/gemini-sim:countTokens", HI, **_key()).json()
    assert counted == {"totalTokens": whole["usageMetadata"]["promptTokenCount"]}


def test_function_calls_and_injected_faults_in_googles_shape(sim: Sim):
    tools = [{"functionDeclarations": [{"name": "read", "parameters": {
        "type": "OBJECT", "properties": {"path": {"type": "STRING"}}}}]}]  # fmt: skip
    ask = {"contents": [{"role": "user", "parts": [{"text": "call:read"}]}], "tools": tools}
    parts = sim.post(GEN, ask, **_key()).json()["candidates"][0]["content"]["parts"]
    assert parts[0]["functionCall"]["name"] == "read"
    assert isinstance(parts[0]["functionCall"]["args"]["path"], str)
    busy = sim.post(GEN, HI, **_key(**{"x-sim-fault": "status:429"}))
    _google(busy, 429, "RESOURCE_EXHAUSTED")
    assert busy.headers["retry-after"] == "1"


_TOOLS = [{"functionDeclarations": [{"name": "f", "parameters": {"type": "OBJECT"}}]}]
_PNG_PART = {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"toolConfig": 5}, "Invalid value at 'tool_config' (type.googleapis.com/"),
        ({"tool_config": "ANY"}, "Invalid value at 'tool_config' "),
        (
            {"toolConfig": {"functionCallingConfig": 5}},
            "Invalid value at 'tool_config.function_calling_config' (",
        ),
        (
            {"toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": 5}}},
            "Invalid value at 'tool_config.function_calling_config.allowed_function_names' "
            "(TYPE_STRING), 5",
        ),
        (
            {"toolConfig": {"functionCallingConfig": {"allowedFunctionNames": ["f", 5]}}},
            "allowed_function_names[1]' (TYPE_STRING), 5",
        ),
        (
            {"toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}},
            "Invalid value at 'tool_config.function_calling_config.mode' (",
        ),
        ({"tools": [{"functionDeclarations": 5}]}, "'tools[0].function_declarations' ("),
        ({"tools": [{"functionDeclarations": [{}]}]}, "Name cannot be empty"),
        ({"generationConfig": {"max_output_tokens": "x"}}, "max_output_tokens"),
        (
            {"systemInstruction": {"parts": [{"text": "look:"}, _PNG_PART]}},
            "'system_instruction.parts[1]': a system instruction takes text parts only",
        ),
    ],
)
def test_tool_config_and_system_instruction_of_the_wrong_shape_are_refused(
    sim: Sim, extra: dict[str, Any], words: str
):
    """Each level of ``toolConfig`` typed as Google types it (the simulator took every one for
    an object and crashed); a system instruction is text only, as Google documents it
    ("Developer set system instruction(s). Currently, text only."), so an inline image there
    is refused rather than priced, on generate and count alike."""
    body = {**HI, "tools": _TOOLS, **extra}
    assert words in _google(sim.post(GEN, body, **_key()), 400, "INVALID_ARGUMENT")
    count = sim.post("/v1beta/models/gemini-sim:countTokens", body, **_key())
    assert words in _google(count, 400, "INVALID_ARGUMENT")


@pytest.mark.parametrize(
    "calling",
    [
        {"mode": "ANY", "allowedFunctionNames": ["f"]},
        {"mode": 2},  # proto JSON takes an enum by number: ANY
        {"mode": "NONE"},
        {"mode": "AUTO", "allowed_function_names": []},
    ],
)
def test_tool_configs_google_takes_are_answered(sim: Sim, calling: dict[str, Any]):
    body = {**HI, "tools": _TOOLS, "toolConfig": {"functionCallingConfig": calling}}
    reply = sim.post(GEN, body, **_key())
    assert reply.status_code == 200, reply.text
    parts = reply.json()["candidates"][0]["content"]["parts"]
    forced = calling.get("mode") in ("ANY", 2)
    assert any("functionCall" in p for p in parts) == forced
