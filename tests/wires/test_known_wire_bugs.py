"""Bugs where one wire answered or charged a client differently from the others, each shown
through the gateway in process (``inprocess.asgi_client``: the real app over the mock
transport, the provider the simulator or a scripted provider where the simulator cannot fail
that way) and checked against the rule the other wires follow."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
from inprocess import asgi_client

from pricing.tokenizers import get_tokenizer
from proxy.config import Config, parse_config

pytestmark = pytest.mark.anyio

ADMIN = "sk-admin-" + "w" * 32
KEY = "sk-team-" + "k" * 32
GOOGLE_KEY = "sk-google-" + "g" * 24


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _gemini_route(alias: str = "gem") -> dict[str, Any]:
    return {
        "model_name": alias,
        "litellm_params": {
            "model": "gemini/gemini-sim",
            "api_base": "http://gemini.local/v1beta",
            "api_key": GOOGLE_KEY,
        },
        "model_info": {"max_input_tokens": 1_048_576, "max_output_tokens": 8192},
    }


def _config(routes: list[dict[str, Any]], team: str, quotas: dict[str, int]) -> Config:
    return parse_config(
        {
            "model_list": routes,
            "routefit_settings": {
                "store_path": ":memory:",
                "admin_key": ADMIN,
                "teams": [{"id": team, "keys": [KEY], "quotas": quotas}],
            },
        },
        "r.yaml",
        environ={},
    )


async def _used(client: httpx.AsyncClient, team: str, window: str = "tokens_per_day") -> int:
    r = await client.get(
        f"/routefit/teams/{team}/usage", headers={"authorization": f"Bearer {ADMIN}"}
    )
    assert r.status_code == 200, r.text
    return int({w["name"]: w for w in r.json()["windows"]}[window]["used"])


async def _settled(client: httpx.AsyncClient, team: str, before: int) -> int:
    """The team's charge since ``before`` once the request's settlement (after its response)
    has run: read until it stops changing."""
    last = -1
    for _ in range(50):
        now = await _used(client, team) - before
        if now == last and now != 0:
            return now
        last = now
        await client.get("/healthz")
    return last


# -- 1. a Gemini stream broken after a functionCall chunk -------------------------------------

#: The call a scripted Gemini provider streams before its connection drops: arguments long
#: enough that charging them or not is plainly visible.
CALL_ARGS = {
    "query": " ".join(f"term{i} near the river bank" for i in range(60)),
    "limit": 25,
    "filters": {"kind": ["report", "memo"], "since": "2024-01-01"},
}
LEAD_TEXT = "Let me look that up for you."


class BrokenAfterCall:
    """A Gemini provider that streams one text chunk and one ``functionCall`` chunk (neither
    finished: no ``finishReason``), then drops the connection, as a provider's reset does."""

    def __init__(self) -> None:
        self.sent: list[httpx.Request] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        chunks = [
            {"candidates": [{"content": {"role": "model", "parts": [{"text": LEAD_TEXT}]}}]},
            {
                "candidates": [
                    {
                        "content": {
                            "role": "model",
                            "parts": [{"functionCall": {"name": "search", "args": CALL_ARGS}}],
                        }
                    }
                ]
            },
        ]
        stream = _Broken([b"data: " + orjson.dumps(c) + b"\r\n\r\n" for c in chunks])
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)


class _Broken(httpx.AsyncByteStream):
    def __init__(self, events: list[bytes]) -> None:
        self.events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for event in self.events:
            yield event
        raise httpx.ReadError("connection reset by peer")


@asynccontextmanager
async def _gemini_gateway(provider: Any) -> AsyncIterator[tuple[httpx.AsyncClient, str, Config]]:
    team = "gem-" + uuid.uuid4().hex[:8]
    config = _config([_gemini_route()], team, {"tokens_per_day": 10**9})
    async with asgi_client(config, provider) as client:
        yield client, team, config


async def test_a_gemini_stream_broken_after_a_function_call_is_charged_the_call() -> None:
    """docs/security.md, "Charging on every exit": a stream that did not finish is charged its
    prompt and the generated output relayed — chat's tool ``arguments``, Messages'
    ``partial_json`` and Responses' argument deltas included. A Gemini ``functionCall``'s
    ``args`` (an object, not a string) is output the model generated, relayed as it came: it
    is charged as its JSON, after the text relayed before it. Before, only the text was."""
    provider = BrokenAfterCall()
    async with _gemini_gateway(provider) as (client, team, config):
        before = await _used(client, team)
        body = {
            "contents": [{"role": "user", "parts": [{"text": "find the river reports"}]}],
            "tools": [{"functionDeclarations": [{"name": "search"}]}],
        }
        reply = await client.post(
            "/v1beta/models/gem:streamGenerateContent",
            params={"alt": "sse"},
            headers={"x-goog-api-key": KEY},
            json=body,
        )
        assert reply.status_code == 200, reply.text
        assert b'"functionCall"' in reply.content  # the client got the call
        assert b'"error"' in reply.content  # and then Google's error event
        prompt = int(reply.headers["x-routefit-prompt-tokens"])
        charged = await _settled(client, team, before)
    route = config.route("gem")
    assert route is not None
    count = get_tokenizer(route.route.tokenizer).count
    relayed = LEAD_TEXT + orjson.dumps(CALL_ARGS).decode()
    assert charged == prompt + count(relayed), (charged, prompt, count(LEAD_TEXT))


# -- 2. a reservation no quota window could ever hold ------------------------------------------

#: A day's quota small enough that an output cap within the route's limit is over it.
DAY = 5_000


def _sim_routes() -> list[dict[str, Any]]:
    def route(alias: str, model: str) -> dict[str, Any]:
        return {
            "model_name": alias,
            "litellm_params": {
                "model": model,
                "api_base": "http://sim.local/v1beta"
                if model.startswith("gemini/")
                else "http://sim.local/v1",
                "api_key": "sk-sim-0123456789",
            },
            "model_info": {"max_input_tokens": 100_000, "max_output_tokens": 16_000},
        }

    return [
        route("gpt", "openai/gpt-4o"),
        route("claude", "anthropic/claude-sim"),
        route("gem", "gemini/gemini-sim"),
    ]


HI = "say hello"
#: Each wire's request whose output reservation is over ``DAY``: the number of answers (chat's
#: ``n``, Gemini's ``candidateCount``) or the output cap (Messages' ``max_tokens``, Responses'
#: ``max_output_tokens``), with the field the refusal names.
OVER_QUOTA: dict[str, tuple[str, dict[str, Any], str]] = {
    "chat n": (
        "/v1/chat/completions",
        {"model": "gpt", "n": 2**31, "max_tokens": 16,
         "messages": [{"role": "user", "content": HI}]},
        "error",
    ),
    "chat max_tokens": (
        "/v1/chat/completions",
        {"model": "gpt", "max_tokens": 2 * DAY, "messages": [{"role": "user", "content": HI}]},
        "error",
    ),
    "messages max_tokens": (
        "/v1/messages",
        {"model": "claude", "max_tokens": 2 * DAY,
         "messages": [{"role": "user", "content": HI}]},
        "error",
    ),
    "responses max_output_tokens": (
        "/v1/responses",
        {"model": "gpt", "max_output_tokens": 2 * DAY, "input": HI},
        "error",
    ),
    "gemini candidateCount": (
        "/v1beta/models/gem:generateContent",
        {"contents": [{"role": "user", "parts": [{"text": HI}]}],
         "generationConfig": {"candidateCount": 2**31, "maxOutputTokens": 16}},
        "error",
    ),
    "gemini maxOutputTokens": (
        "/v1beta/models/gem:streamGenerateContent?alt=sse",
        {"contents": [{"role": "user", "parts": [{"text": HI}]}],
         "generationConfig": {"maxOutputTokens": 2 * DAY}},
        "error",
    ),
}  # fmt: skip


@asynccontextmanager
async def _quota_gateway(quotas: dict[str, int]) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    from proxy.sim.app import create_app as create_sim
    from proxy.sim.state import SimState
    from proxy.transports.mock import asgi_handler

    team = "quota-" + uuid.uuid4().hex[:8]
    config = _config(_sim_routes(), team, quotas)
    async with asgi_client(config, asgi_handler(create_sim(SimState()))) as client:
        yield client, team


def _headers(path: str) -> dict[str, str]:
    if path.startswith("/v1beta/"):
        return {"x-goog-api-key": KEY}
    return {"authorization": f"Bearer {KEY}", "anthropic-version": "2023-06-01"}


@pytest.mark.parametrize("case", list(OVER_QUOTA))
async def test_a_request_no_quota_window_could_hold_is_a_400_not_a_wait(case: str) -> None:
    """A request whose reservation is over the whole limit of one of its team's windows can
    never be admitted, whenever it is sent: the client's own error (400, in its wire's shape,
    naming the window, its limit and what the request asked), not a 429 whose retry-after
    (until the window's end) promises an admission that never comes. Before, every wire
    answered 429 "retry in …s"."""
    path, body, key = OVER_QUOTA[case]
    async with _quota_gateway({"tokens_per_day": DAY}) as (client, team):
        reply = await client.post(path, headers=_headers(path), json=body)
        assert reply.status_code == 400, reply.text
        assert "retry-after" not in reply.headers
        error = reply.json()[key]
        message = error["message"]
        assert "tokens_per_day" in message and f"{DAY:,}" in message, message
        if path.startswith("/v1beta/"):
            assert error["status"] == "INVALID_ARGUMENT" and error["code"] == 400
        elif path == "/v1/messages":
            assert reply.json()["type"] == "error"
            assert error["type"] == "invalid_request_error"
        else:
            assert error["type"] == "invalid_request_error"
        assert await _used(client, team) == 0  # nothing held, nothing forwarded


# -- 3. an image labelled with another format than its bytes, to an Anthropic route -----------


def _png(width: int = 64, height: int = 48) -> str:
    from io import BytesIO

    from PIL import Image

    out = BytesIO()
    Image.new("RGB", (width, height), (200, 40, 40)).save(out, format="PNG")
    import base64

    return base64.b64encode(out.getvalue()).decode()


#: Each client wire's message with a PNG labelled ``image/jpeg``, to the Anthropic route.
def _mislabelled(data: str) -> dict[str, tuple[str, dict[str, Any]]]:
    url = f"data:image/jpeg;base64,{data}"
    return {
        "messages": (
            "/v1/messages",
            {
                "model": "claude",
                "max_tokens": 32,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {"type": "base64", "media_type": "image/jpeg",
                                           "data": data},
                            },
                            {"type": "text", "text": "what colour is this?"},
                        ],
                    }
                ],
            },
        ),
        "chat": (
            "/v1/chat/completions",
            {
                "model": "claude",
                "max_tokens": 32,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": url}},
                            {"type": "text", "text": "what colour is this?"},
                        ],
                    }
                ],
            },
        ),
        "responses": (
            "/v1/responses",
            {
                "model": "claude",
                "max_output_tokens": 32,
                "input": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_image", "image_url": url},
                            {"type": "input_text", "text": "what colour is this?"},
                        ],
                    }
                ],
            },
        ),
        "gemini": (
            "/v1beta/models/claude:generateContent",
            {
                "contents": [
                    {
                        "role": "user",
                        "parts": [
                            {"inlineData": {"mimeType": "image/jpeg", "data": data}},
                            {"text": "what colour is this?"},
                        ],
                    }
                ],
                "generationConfig": {"maxOutputTokens": 32},
            },
        ),
    }  # fmt: skip


async def test_the_simulator_refuses_a_mislabelled_image_as_anthropic_does() -> None:
    """The oracle is honest: Anthropic answers 400 ``invalid_request_error`` ("Image does not
    match the provided media type") to a base64 image whose bytes are not the format its
    ``media_type`` names, and so does the simulator."""
    from proxy.sim.app import create_app as create_sim
    from proxy.sim.state import SimState
    from proxy.transports.mock import asgi_handler

    sim = asgi_handler(create_sim(SimState()))
    _, body = _mislabelled(_png())["messages"]
    reply = await sim(
        httpx.Request(
            "POST",
            "http://sim.local/v1/messages",
            headers={"x-api-key": "sk-sim-0123456789", "anthropic-version": "2023-06-01"},
            json={**body, "model": "claude-sim"},
        )
    )
    await reply.aread()
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "does not match the provided media type" in error["message"]


@pytest.mark.parametrize("wire", ["messages", "chat", "responses", "gemini"])
async def test_an_image_is_sent_to_anthropic_labelled_as_its_bytes_say(wire: str) -> None:
    """routefit reads a base64 image's format from its bytes to price it; on every wire whose
    image it renders for an Anthropic provider (natively or from chat), the ``media_type`` it
    sends is that format, not the client's wrong label, so the provider does not refuse a
    request routefit priced as an image. Before, each wire relayed Anthropic's 400 "Image does
    not match the provided media type image/jpeg"."""
    from proxy.sim.app import create_app as create_sim
    from proxy.sim.state import SimState
    from proxy.transports.mock import asgi_handler

    sim = asgi_handler(create_sim(SimState()))
    sent: list[httpx.Request] = []

    async def provider(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return await sim(request)

    data = _png()
    path, body = _mislabelled(data)[wire]
    team = "img-" + uuid.uuid4().hex[:8]
    route = {**_sim_routes()[1], "model_info": {"max_input_tokens": 100_000,
             "max_output_tokens": 16_000, "supports_vision": True}}  # fmt: skip
    config = _config([route], team, {"tokens_per_day": 10**9})
    async with asgi_client(config, provider) as client:
        reply = await client.post(path, headers=_headers(path), json=body)
    assert reply.status_code == 200, reply.text
    images = [
        block
        for message in orjson.loads(sent[-1].content)["messages"]
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "image"
    ]
    assert [b["source"] for b in images] == [
        {"type": "base64", "media_type": "image/png", "data": data}
    ]


# -- 4. the count of a Responses continuation with images, on a text-only route ---------------


async def test_a_continuations_count_is_the_estimate_its_fit_acts_on_on_a_text_only_route() -> None:
    """A count prices what the fit would send (``strategies.fit.as_sent``), anchored on
    the provider's count of a prefix the team sent as the fit is. On a text-only route the fit
    sends an image as its placeholder, and the first turn's count is anchored under the keys
    of those placeholder messages; a continuation's count looked its prefix up under the keys
    of the images and missed, pricing the whole stored chain afresh (123 tokens against the
    fit's 83). The count of a continuation is the estimate its request is then fitted at."""
    from proxy.sim.app import create_app as create_sim
    from proxy.sim.state import SimState
    from proxy.transports.mock import asgi_handler

    route = {**_sim_routes()[1], "model_info": {"max_input_tokens": 100_000,
             "max_output_tokens": 16_000, "supports_vision": False}}  # fmt: skip
    team = "count-" + uuid.uuid4().hex[:8]
    config = _config([route], team, {"tokens_per_day": 10**9})
    url = f"data:image/png;base64,{_png()}"
    first = {
        "model": "claude",
        "max_output_tokens": 32,
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": url},
                    {"type": "input_text", "text": "what colour is this?"},
                ],
            }
        ],
    }
    headers = _headers("/v1/responses")
    async with asgi_client(config, asgi_handler(create_sim(SimState()))) as client:
        reply = await client.post("/v1/responses", headers=headers, json=first)
        assert reply.status_code == 200, reply.text
        follow = {
            "model": "claude",
            "max_output_tokens": 32,
            "previous_response_id": reply.json()["id"],
            "input": "and which shape?",
        }
        counted = await client.post("/v1/responses/input_tokens", headers=headers, json=follow)
        assert counted.status_code == 200, counted.text
        sent = await client.post("/v1/responses", headers=headers, json=follow)
        assert sent.status_code == 200, sent.text
    # the image went as its placeholder (adapted, as every image to this route), nothing cut
    assert sent.headers["x-routefit-actions"] == "offloaded_images=1"
    assert counted.json()["input_tokens"] == int(sent.headers["x-routefit-prompt-tokens"])


# -- 5. a translated stream broken with calls routefit held -----------------------------------

ARGS = [
    orjson.dumps({"query": " ".join(f"alpha{i} beta" for i in range(40))}).decode(),
    orjson.dumps({"query": " ".join(f"gamma{i} delta" for i in range(40))}).decode(),
]


class ParallelCallsThenReset:
    """An OpenAI-compatible provider that streams two parallel calls (each whole in one chunk,
    the second while the first may still grow), then drops the connection before the finish."""

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        def chunk(index: int) -> bytes:
            call = {
                "index": index,
                "id": f"call_{index}",
                "type": "function",
                "function": {"name": "search", "arguments": ARGS[index]},
            }
            data = {
                "id": "chatcmpl-x",
                "object": "chat.completion.chunk",
                "model": "gpt-4o",
                "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}],
            }
            return b"data: " + orjson.dumps(data) + b"\n\n"

        stream = _Broken([chunk(0), chunk(1)])
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)


CALLING: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"model": "gpt", "stream": True, "max_tokens": 64,
             "messages": [{"role": "user", "content": "search twice"}],
             "tools": [{"type": "function", "function": {"name": "search"}}]}),
    "messages": ("/v1/messages", {"model": "gpt", "stream": True, "max_tokens": 64,
                 "messages": [{"role": "user", "content": "search twice"}],
                 "tools": [{"name": "search", "input_schema": {"type": "object"}}]}),
    "responses": ("/v1/responses", {"model": "gpt", "stream": True, "max_output_tokens": 64,
                  "input": "search twice",
                  "tools": [{"type": "function", "name": "search", "parameters": {}}]}),
    "gemini": ("/v1beta/models/gpt:streamGenerateContent?alt=sse",
               {"contents": [{"role": "user", "parts": [{"text": "search twice"}]}],
                "tools": [{"functionDeclarations": [{"name": "search"}]}],
                "generationConfig": {"maxOutputTokens": 64}}),
}  # fmt: skip


@pytest.mark.parametrize("wire", list(CALLING))
async def test_a_translated_stream_broken_after_calls_is_charged_every_call(wire: str) -> None:
    """A chat route's stream that breaks after two calls: the chat client got both calls'
    arguments and is charged them. A Messages client's translation streams the first call and
    holds the second for the finish, a Gemini client's holds both (Google sends a call whole),
    a Responses client's holds both for its closing events:
    the provider produced them all the same, and each wire is charged the same output. Before,
    what the translation held was charged as nothing."""
    team = "held-" + uuid.uuid4().hex[:8]
    # a provider that speaks chat completions only: every client wire but chat is translated
    route = {
        "model_name": "gpt",
        "litellm_params": {
            "model": "deepseek/deepseek-chat",
            "api_base": "http://chat.local/v1",
            "api_key": "sk-chat-0123456789",
        },
        "model_info": {"max_input_tokens": 100_000, "max_output_tokens": 8192},
    }
    config = _config([route], team, {"tokens_per_day": 10**9})
    path, body = CALLING[wire]
    async with asgi_client(config, ParallelCallsThenReset()) as client:
        before = await _used(client, team)
        reply = await client.post(path, headers=_headers(path), json=body)
        assert reply.status_code == 200, reply.text
        prompt = int(reply.headers["x-routefit-prompt-tokens"])
        charged = await _settled(client, team, before)
    route = config.route("gpt")
    assert route is not None
    count = get_tokenizer(route.route.tokenizer).count
    assert charged == prompt + count("".join(ARGS)), (charged, prompt, count(ARGS[0]))


# -- 6. custom tool calls' input ----------------------------------------------------------------

#: The free-form input of a custom tool call (GPT-5's ``custom`` tools): a string, not JSON.
CUSTOM_INPUT = "\n".join(f"print('line {i} of a generated script')" for i in range(30))


class CustomCallThenReset:
    """An OpenAI provider that streams one custom tool call, then drops the connection."""

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        call = {"index": 0, "id": "call_0", "type": "custom",
                "custom": {"name": "run", "input": CUSTOM_INPUT}}  # fmt: skip
        data = {
            "id": "chatcmpl-x",
            "object": "chat.completion.chunk",
            "model": "gpt-4o",
            "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}],
        }
        stream = _Broken([b"data: " + orjson.dumps(data) + b"\n\n"])
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)


async def test_a_chat_stream_broken_after_a_custom_call_is_charged_its_input() -> None:
    """A chat custom tool call carries what the model generated in ``custom.input`` (a string,
    as a function call's ``arguments`` is): a stream broken after one is charged it, as a
    Responses client is charged ``response.custom_tool_call_input.delta``. Before, chat's
    generated fields did not name ``input``, and the call was charged as nothing."""
    team = "custom-" + uuid.uuid4().hex[:8]
    config = _config([_sim_routes()[0]], team, {"tokens_per_day": 10**9})
    body = {
        "model": "gpt",
        "stream": True,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "write a script"}],
        "tools": [{"type": "custom", "custom": {"name": "run"}}],
    }
    async with asgi_client(config, CustomCallThenReset()) as client:
        before = await _used(client, team)
        path = "/v1/chat/completions"
        reply = await client.post(path, headers=_headers(path), json=body)
        assert reply.status_code == 200, reply.text
        assert b'"custom"' in reply.content
        prompt = int(reply.headers["x-routefit-prompt-tokens"])
        charged = await _settled(client, team, before)
    route = config.route("gpt")
    assert route is not None
    count = get_tokenizer(route.route.tokenizer).count
    assert charged == prompt + count(CUSTOM_INPUT), (charged, prompt)


async def test_a_whole_answer_with_a_custom_call_and_no_output_count_is_charged_its_input() -> None:
    """The same field in a whole answer: a provider that states 0 output tokens for an answer
    that is a custom call is not believed (an answer with generated output), and the team is
    charged the reservation or, when longer, the input (docs/security.md, "Charging on every
    exit"). Before, the 0 was believed: the prompt alone."""

    async def provider(request: httpx.Request) -> httpx.Response:
        call = {"id": "call_0", "type": "custom", "custom": {"name": "run", "input": CUSTOM_INPUT}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        data = {
            "id": "chatcmpl-x",
            "object": "chat.completion",
            "model": "gpt-4o",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 0, "total_tokens": 30},
        }
        return httpx.Response(200, json=data)

    team = "custom-" + uuid.uuid4().hex[:8]
    config = _config([_sim_routes()[0]], team, {"tokens_per_day": 10**9})
    body = {
        "model": "gpt",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "write a script"}],
        "tools": [{"type": "custom", "custom": {"name": "run"}}],
    }
    async with asgi_client(config, provider) as client:
        before = await _used(client, team)
        path = "/v1/chat/completions"
        reply = await client.post(path, headers=_headers(path), json=body)
        assert reply.status_code == 200, reply.text
        prompt = int(reply.headers["x-routefit-prompt-tokens"])
        charged = await _settled(client, team, before)
    route = config.route("gpt")
    assert route is not None
    generated = get_tokenizer(route.route.tokenizer).count(CUSTOM_INPUT)
    assert generated > 64  # longer than the reservation: the input is what is charged
    assert charged == prompt + generated, (charged, prompt, generated)


class _Events:
    """A provider's chat stream as the relay reads it (``proxy.exchange.EventStream``)."""

    def __init__(self, events: list[bytes]) -> None:
        self.events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for event in self.events:
            yield event

    async def aclose(self) -> None:
        return None


def _chat_calls_stream() -> list[bytes]:
    def data(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return b"data: " + orjson.dumps({"id": "c", "choices": [choice]}) + b"\n\n"

    calls = [
        {"index": i, "id": f"call_{i}", "type": "function",
         "function": {"name": "search", "arguments": ARGS[i]}}
        for i in range(2)
    ]  # fmt: skip
    return [data({"tool_calls": [c]}) for c in calls] + [
        data({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]


@pytest.mark.parametrize("wire", ["messages", "gemini"])
async def test_a_client_that_leaves_during_the_closing_events_is_charged_each_call_once(
    wire: str,
) -> None:
    """What a translation held goes out in its closing events; a client that leaves while they
    go (the relay closed before it marks the stream complete) is charged what they carried
    once, not again as held (the relay driven as the gateway's ``_ended`` drives it)."""
    from proxy.wires import ANTHROPIC_WIRE
    from proxy.wires.anthropic import _relay_chat as messages_relay
    from proxy.wires.base import Outcome
    from proxy.wires.gemini import GeminiWire
    from proxy.wires.gemini import _relay_chat as gemini_relay

    generated = ANTHROPIC_WIRE.generated if wire == "messages" else GeminiWire.generated
    relay = messages_relay if wire == "messages" else gemini_relay
    outcome = Outcome(generated=generated)
    chunks = relay("m", _Events(_chat_calls_stream()), outcome)
    async for chunk in chunks:
        outcome.relay(chunk)
        if b"message_stop" in chunk or b"finishReason" in chunk:
            break  # the last event went out; the client leaves before the stream is marked done
    await chunks.aclose()
    assert not outcome.completed
    assert outcome.relayed_text().count("alpha0") == 1
    assert outcome.relayed_text().count("gamma0") == 1
