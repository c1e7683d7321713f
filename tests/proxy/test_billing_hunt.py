"""What a team is charged when the provider's figures leave something out, and what a request
whose reservation no store counter can hold is told — in process, on every client wire.

routefit's app before ``proxy.transports.mock.MockTransport``: the provider simulator answers,
its answer changed by a test where the provider misbehaves, or a scripted answer of the test's
own. What is checked is what the team is charged (``/routefit/teams/{id}/usage``):

* an answer with text whose usage states 0 output tokens is charged its output (the
  reservation, at least the text handed over), not the prompt alone — on chat, Messages,
  Responses and Gemini, streamed and not; so is one that only calls a function;
* an uncapped answer without usage that is longer than the output reservation is charged the
  text relayed, not the reservation;
* embeddings whose usage states 0 tokens are charged routefit's own count, not nothing;
* ``n`` / ``candidateCount`` so large that the reservation passes the stores' bound is a 400
  in the client's shape (it was a 500 "routefit internal error", then a 429 whose retry-after
  promised an admission no window could give), on SQLite and on Redis.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from billed import Billed, Script, billed

pytestmark = pytest.mark.anyio

MAX_TOKENS = 300
#: Output fields a provider's usage states, on every provider wire.
OUTPUT_COUNTS = ("completion_tokens", "output_tokens", "candidatesTokenCount", "thoughtsTokenCount")

#: (client wire, path, body) of one request, streamed or not by ``stream``.
Call = tuple[str, dict[str, Any]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def call(wire: str, stream: bool, max_tokens: int | None = MAX_TOKENS) -> Call:
    """One request on ``wire`` (``max_tokens`` None: uncapped, where the wire allows it)."""
    prompt = "Tell me about the weather in a few words."
    cap = {} if max_tokens is None else {"max_tokens": max_tokens}
    if wire == "chat":
        body = {"model": "gpt", "messages": [{"role": "user", "content": prompt}], **cap}
        return "/v1/chat/completions", {**body, "stream": stream}
    if wire == "messages":
        body = {"model": "claude", "messages": [{"role": "user", "content": prompt}]}
        return "/v1/messages", {**body, "max_tokens": max_tokens or 1024, "stream": stream}
    if wire == "responses":
        out = {} if max_tokens is None else {"max_output_tokens": max_tokens}
        return "/v1/responses", {"model": "gpt", "input": prompt, **out, "stream": stream}
    assert wire == "gemini"
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    config = {} if max_tokens is None else {"generationConfig": {"maxOutputTokens": max_tokens}}
    return (
        f"/v1beta/models/gem:{method}",
        {"contents": [{"role": "user", "parts": [{"text": prompt}]}], **config},
    )


def _no_output(value: Any) -> Any:
    """``value`` with every output count in it (at any depth) set to 0."""
    if isinstance(value, dict):
        return {k: 0 if k in OUTPUT_COUNTS else _no_output(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_output(v) for v in value]
    return value


class ZeroOutput:
    """The simulator's answer, whole or streamed, with every output count 0: a provider that
    states the prompt it read and no output for an answer with text. ``prompt``: the prompt
    tokens it stated."""

    def __init__(self) -> None:
        self.prompt = 0

    async def __call__(self, request: httpx.Request, sim: Any) -> httpx.Response:
        response = await sim(request)
        self.prompt = int(response.headers["x-sim-prompt-tokens"])
        return _zeroed(response.status_code, response.headers, await response.aread())


def _zeroed(status: int, headers: httpx.Headers, raw: bytes) -> httpx.Response:
    if not headers.get("content-type", "").startswith("text/event-stream"):
        return httpx.Response(status, json=_no_output(json.loads(raw)))
    out = []
    for line in raw.replace(b"\r\n", b"\n").split(b"\n"):
        data = line[5:].strip() if line.startswith(b"data:") else b""
        if data and data != b"[DONE]":
            line = b"data: " + json.dumps(_no_output(json.loads(data))).encode()
        out.append(line)
    return httpx.Response(
        status, content=b"\n".join(out), headers={"content-type": "text/event-stream"}
    )


def _words(response: httpx.Response) -> int:
    """The words of the answer's text in what the client got, whole or streamed: each word of
    the simulator's English is at least one token."""
    if response.headers["content-type"].startswith("text/event-stream"):
        events = [
            json.loads(line[5:])
            for line in response.text.splitlines()
            if line.startswith("data:") and line[5:].strip() != "[DONE]"
        ]
    else:
        events = [response.json()]
    text = [s for event in events for s in _strings(event, ("content", "text", "delta"))]
    return len(" ".join(text).split())


def _strings(value: Any, keys: tuple[str, ...]) -> list[str]:
    if isinstance(value, dict):
        if value.get("type", "").endswith(".done"):
            return []  # Responses' *.done events repeat the whole text
        here = [v for k, v in value.items() if k in keys and isinstance(v, str)]
        return here + [s for v in value.values() for s in _strings(v, keys)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v, keys)]
    return []


async def _charged(gw: Billed, before: int) -> int:
    """The team's charge since ``before``, once the request's settlement (after the response
    went out) is in."""
    for _ in range(200):
        now = await gw.used()
        if now != before:
            return now - before
        await gw.client.get("/healthz")  # let the background settlement run
    return await gw.used() - before


WIRES = ["chat", "messages", "responses", "gemini"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("wire", WIRES)
async def test_an_answer_with_text_and_no_output_count_is_charged_its_output(
    wire: str, stream: bool
) -> None:
    async with billed() as gw:
        gw.provider.script = provider = ZeroOutput()
        path, body = call(wire, stream)
        before = await gw.used()
        r = await gw.post(path, body)
        assert r.status_code == 200, r.text
        words = _words(r)
        assert provider.prompt > 0 and words > 0, r.text  # it stated a prompt, and answered
        charged = await _charged(gw, before)
        # before: the prompt alone (the answer's output given away)
        assert charged >= provider.prompt + words, (charged, provider.prompt, words)


_CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
#: A function offered on each wire (the simulator calls it after the user's own words).
TOOLS: dict[str, dict[str, Any]] = {
    "chat": {"tools": [{"type": "function",
                        "function": {"name": "get_weather", "parameters": _CITY}}],
             "tool_choice": "required"},
    "messages": {"tools": [{"name": "get_weather", "input_schema": _CITY}],
                 "tool_choice": {"type": "any"}},
    "responses": {"tools": [{"type": "function", "name": "get_weather", "parameters": _CITY}],
                  "tool_choice": "required"},
    "gemini": {"tools": [{"functionDeclarations": [{"name": "get_weather",
                                                    "parameters": _CITY}]}],
               "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}},
}  # fmt: skip


def _calling(body: dict[str, Any]) -> None:
    """``body``'s user words end with the simulator's ``call:`` marker for ``get_weather``."""
    marker = " call:get_weather"
    if "input" in body:
        body["input"] += marker
    elif "contents" in body:
        body["contents"][-1]["parts"][-1]["text"] += marker
    else:
        body["messages"][-1]["content"] += marker


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("wire", WIRES)
async def test_an_answer_with_a_call_and_no_output_count_is_charged_its_output(
    wire: str, stream: bool
) -> None:
    """A function call is output as text is (chat's ``arguments``, Messages' ``input``,
    Gemini's ``args``): an answer that calls one and whose usage states 0 output tokens is
    charged the output reservation (or the call, when longer), as one with text is — not its
    prompt alone. Before, a whole Messages or Gemini answer's call (an object, not a string)
    was read as no output, and the 0 believed."""
    async with billed() as gw:
        gw.provider.script = provider = ZeroOutput()
        path, body = call(wire, stream)
        _calling(body)
        before = await gw.used()
        r = await gw.post(path, {**body, **TOOLS[wire]})
        assert r.status_code == 200, r.text
        assert "get_weather" in r.text, r.text  # it answered with the call
        assert provider.prompt > 0
        charged = await _charged(gw, before)
        estimate = int(r.headers["x-routefit-prompt-tokens"])
        assert charged >= estimate + MAX_TOKENS, (charged, estimate, provider.prompt)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_gemini_client_of_a_chat_route_is_charged_the_call_it_was_given(
    stream: bool,
) -> None:
    """The same rule through the translation: a Gemini client of a chat route gets each call
    whole in the stream's last chunk (``ChatToGemini.finish_chunk``), its ``args`` an object;
    with 0 output tokens stated it was charged its prompt alone when streamed."""
    async with billed() as gw:
        gw.provider.script = provider = ZeroOutput()
        path, body = call("gemini", stream)
        _calling(body)
        before = await gw.used()
        r = await gw.post(path.replace("/gem:", "/gpt:"), {**body, **TOOLS["gemini"]})
        assert r.status_code == 200, r.text
        assert "functionCall" in r.text, r.text
        assert provider.prompt > 0
        charged = await _charged(gw, before)
        estimate = int(r.headers["x-routefit-prompt-tokens"])
        assert charged >= estimate + MAX_TOKENS, (charged, estimate, provider.prompt)


def _stated_usage(r: httpx.Response) -> dict[str, Any]:
    """The last ``usageMetadata`` of a Gemini answer, whole or streamed (SSE)."""
    if r.headers["content-type"].startswith("application/json"):
        return dict(r.json()["usageMetadata"])
    events = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
    return dict([e["usageMetadata"] for e in events if "usageMetadata" in e][-1])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_what_a_built_in_tool_read_is_charged_as_input(stream: bool) -> None:
    """Gemini states what URL context fetched (or a search returned) apart from the prompt,
    as ``toolUsePromptTokenCount``, and bills it as input: a page can be tens of thousands
    of tokens. It was charged nothing (the prompt and the output alone)."""
    async with billed() as gw:
        path, body = call("gemini", stream)
        urls = " Compare https://example.com/a and https://example.org/b."
        body["contents"][0]["parts"][0]["text"] += urls
        before = await gw.used()
        r = await gw.post(path, {**body, "tools": [{"urlContext": {}}, {"googleSearch": {}}]})
        assert r.status_code == 200, r.text
        stated = _stated_usage(r)
        read = stated.get("toolUsePromptTokenCount", 0)
        assert read > 0, stated  # the simulator's tools read the two pages and searched
        charged = await _charged(gw, before)
        assert charged == stated["totalTokenCount"], (charged, stated)
        assert charged == stated["promptTokenCount"] + read + stated["candidatesTokenCount"]


LONG = "the quick brown fox jumps over the lazy dog " * 1500  # ~13,500 tokens: over the reserve


def _chat_answer(stream: bool) -> Script:
    """An OpenAI-compatible provider that answers ``LONG`` and states no usage (it ignores
    ``stream_options.include_usage``, as some do)."""

    async def answer(request: httpx.Request, sim: Any) -> httpx.Response:
        if not stream:
            message = {"role": "assistant", "content": LONG}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            data = {"id": "c", "object": "chat.completion", "model": "gpt-4o", "choices": [choice]}
            return httpx.Response(200, json=data)
        pieces = [LONG[i : i + 400] for i in range(0, len(LONG), 400)]
        deltas = [{"content": p} for p in pieces]
        chunks = [
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "model": "gpt-4o",
                "choices": [{"index": 0, "delta": d, "finish_reason": None}],
            }
            for d in deltas
        ]
        chunks[-1]["choices"][0]["finish_reason"] = "stop"
        sse = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
        return httpx.Response(
            200, content=sse + b"data: [DONE]\n\n", headers={"content-type": "text/event-stream"}
        )

    return answer


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_uncapped_answer_without_usage_is_charged_the_text_it_relayed(
    stream: bool,
) -> None:
    async with billed() as gw:
        gw.provider.script = _chat_answer(stream)
        path, body = call("chat", stream, max_tokens=None)
        before = await gw.used()
        r = await gw.post(path, body)
        assert r.status_code == 200, r.text
        estimate = int(r.headers["x-routefit-prompt-tokens"])
        charged = await _charged(gw, before)
        # 9 words a sentence, 1,500 sentences, each word a token at least; the reservation
        # (4,096 by default) was all it was charged before
        assert charged >= estimate + 9 * 1500, charged


async def test_embeddings_whose_usage_states_no_tokens_are_charged_routefits_count() -> None:
    async def answer(request: httpx.Request, sim: Any) -> httpx.Response:
        usage = {"prompt_tokens": 0, "total_tokens": 0}
        data = [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}]
        return httpx.Response(200, json={"object": "list", "data": data, "usage": usage})

    async with billed() as gw:
        gw.provider.script = answer
        before = await gw.used()
        r = await gw.post("/v1/embeddings", {"model": "gpt", "input": LONG})
        assert r.status_code == 200, r.text
        counted = int(r.headers["x-routefit-prompt-tokens"])
        assert counted > 0
        assert await gw.used() - before == counted  # before: 0


HUGE = [10**13, 10**18]  # × 300 output tokens: past the stores' 2⁵⁰ bound


@pytest.mark.parametrize("store", ["sqlite", "redis"])
@pytest.mark.parametrize("choices", HUGE)
async def test_a_reservation_past_any_counter_is_a_400_not_a_500(
    choices: int, store: str, request: pytest.FixtureRequest
) -> None:
    settings = {"redis_url": request.getfixturevalue("redis_url")} if store == "redis" else {}
    async with billed(**settings) as gw:
        path, body = call("chat", False)
        r = await gw.post(path, {**body, "n": choices})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "request_over_quota"
        assert "retry-after" not in r.headers
        path, body = call("gemini", False)
        body["generationConfig"]["candidateCount"] = choices
        r = await gw.post(path, body)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["status"] == "INVALID_ARGUMENT"
        assert await gw.used() == 0  # nothing held, nothing forwarded
        # the team is not locked out by it: an ordinary request is served
        assert (await gw.post(*call("chat", False))).status_code == 200


@pytest.mark.parametrize("background", [True, "yes"])
async def test_a_background_response_is_refused_before_the_provider_works_uncharged(
    background: object,
) -> None:
    """A background response would be answered "queued" with no usage while the provider goes
    on working: charged the reservation only, and its answer out of the client's reach."""
    reached: list[httpx.Request] = []

    async def record(request: httpx.Request, sim: Any) -> httpx.Response:
        reached.append(request)
        answer: httpx.Response = await sim(request)
        return answer

    async with billed() as b:
        b.provider.script = record
        body = {"model": "gpt", "input": "Say hello.", "background": background}
        r = await b.post("/v1/responses", body)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "background"
        assert reached == []
        assert (await b.post("/v1/responses", {**body, "background": False})).status_code == 200
        assert len(reached) == 1
