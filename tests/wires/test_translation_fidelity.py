"""What a translation must not lose: fields with no twin in the other wire, rendered so that the
model (or the client) still learns what they said.

routefit in process (``run_inprocess``) before a scripted provider answering with the bytes a
test gives it, read by the clients' own SDKs (anthropic's ``messages``) or as Gemini's SSE.
Routes: ``chat`` (an OpenAI-compatible provider that speaks only chat) and ``claude`` (an
Anthropic provider, reached by chat clients through routefit's own chat→Messages mapping).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
import yaml
from inprocess import run_inprocess
from test_translation_hunt import ROUTES

from proxy.sim.wire_anthropic import validate as validate_messages
from proxy.sim.wire_openai import validate_chat
from proxy.transports.mock import MockTransport
from proxy.wires.anthropic_chat import chat_messages
from proxy.wires.anthropic_parse import parse_anthropic
from strategies.mask import mask_output


@dataclass
class Provider:
    """Answers with ``whole`` (a JSON answer) or ``stream`` (SSE bytes), as asked; keeps the
    requests it was sent (path, body)."""

    whole: dict[str, Any] = field(default_factory=dict)
    stream: bytes = b""
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.requests.append((request.url.path, body))
        if not body.get("stream"):
            return httpx.Response(200, json=self.whole)
        data = self.stream

        async def chunks() -> AsyncIterator[bytes]:
            yield data

        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=chunks())


@pytest.fixture(scope="module")
def provider() -> Provider:
    return Provider()


@pytest.fixture
def fresh(provider: Provider) -> Provider:
    provider.whole, provider.stream = {}, b""
    provider.requests.clear()
    return provider


@pytest.fixture(scope="module")
def gw(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = tmp_path_factory.mktemp("fidelity") / "routefit.yaml"
    path.write_text(
        yaml.safe_dump({"model_list": ROUTES, "routefit_settings": {"store_path": ":memory:"}})
    )
    with run_inprocess(path, provider=lambda cfg: {"transport": MockTransport(provider)}) as gw:
        yield gw


# --- a chat provider's answers ------------------------------------------------------------------


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fid",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "deepseek-chat",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


CHAT_USAGE = {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35}


def chat_stream(*events: dict[str, Any] | bytes) -> bytes:
    """SSE bytes: each chunk as one ``data:`` event (bytes as they are), then usage, [DONE]."""
    out = b""
    for e in events:
        out += e if isinstance(e, bytes) else b"data: " + orjson.dumps(e) + b"\n\n"
    usage = {**chat_chunk({}), "choices": [], "usage": CHAT_USAGE}
    return out + b"data: " + orjson.dumps(usage) + b"\n\ndata: [DONE]\n\n"


def chat_whole(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-fid",
        "object": "chat.completion",
        "created": 1,
        "model": "deepseek-chat",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": CHAT_USAGE,
    }


# --- 1. a failed tool's result ------------------------------------------------------------------

TOOLS = [{"name": "run", "input_schema": {"type": "object", "properties": {}}}]


def _tool_round(results: list[dict[str, Any]]) -> dict[str, Any]:
    """A Messages conversation: one call per result, then the results (``(id, is_error)``)."""
    calls = [
        {"type": "tool_use", "id": r["tool_use_id"], "name": "run", "input": {}} for r in results
    ]
    return {
        "model": "chat",
        "max_tokens": 50,
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "run it"},
            {"role": "assistant", "content": calls},
            {"role": "user", "content": results},
        ],
    }


def _result(call: str, content: Any, **flags: bool) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call, "content": content, **flags}


def _sent_tools(sent: dict[str, Any]) -> dict[str, Any]:
    """The chat request's tool messages' content, by call id."""
    return {m["tool_call_id"]: m["content"] for m in sent["messages"] if m["role"] == "tool"}


def test_a_failed_tools_result_tells_a_chat_provider_it_failed(gw: Any, fresh: Provider) -> None:
    """A Messages client's ``tool_result`` with ``is_error: true`` reached a chat provider as
    the bare text, the same as a success: chat's tool message has no error flag, and the model
    could not tell a failed command from one whose output was that text. The flag is now said
    in the content, ``[tool error]`` before the result's text; a result without the flag (or
    ``false``) goes as it came."""
    fresh.whole = chat_whole({"role": "assistant", "content": "ok"})
    results = [
        {
            "type": "tool_result",
            "tool_use_id": "t1",
            "content": "exit 2: no such file",
            "is_error": True,
        },
        {"type": "tool_result", "tool_use_id": "t2", "content": "exit 0", "is_error": False},
        {"type": "tool_result", "tool_use_id": "t3", "content": [{"type": "text", "text": "ok"}]},
        {"type": "tool_result", "tool_use_id": "t4", "is_error": True},
    ]
    client = anthropic.Anthropic(base_url=gw.base_url, api_key="unused", max_retries=0)
    client.messages.create(**_tool_round(results))
    sent = fresh.requests[-1][1]
    validate_chat(sent)
    assert _sent_tools(sent) == {
        "t1": "[tool error] exit 2: no such file",
        "t2": "exit 0",
        "t3": "ok",
        "t4": "[tool error]",
    }


def test_a_failed_tools_result_masked_to_fit_still_says_it_failed() -> None:
    """The flag is the client's block's, not the fitted text's: the parse makes it the result's
    lead (``Message.lead``), which the fit's rewrite keeps, so a result the fit replaced with
    its placeholder (mask) still failed, and says so."""
    body = _tool_round([_result("t1", "Traceback ...", is_error=True)])
    request = parse_anthropic(body)
    fitted = [mask_output(m, "run", 900) if m.role == "tool" else m for m in request.messages]
    (tool,) = [m for m in chat_messages(request, fitted) if m["role"] == "tool"]
    placeholder = fitted[-1].text
    assert placeholder != "Traceback ..."
    assert tool["content"] == f"[tool error] {placeholder}"


# --- 2. a chat provider's refusal ---------------------------------------------------------------

REFUSAL = "I can't help with that request."


def _messages_read(gw: Any, stream: bool) -> tuple[str, str | None]:
    """What a Messages client reads on the chat route: its text, its stop reason."""
    client = anthropic.Anthropic(base_url=gw.base_url, api_key="unused", max_retries=0)
    ask = {"model": "chat", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        with client.messages.stream(**ask) as events:
            for _ in events:
                pass
            done = events.get_final_message()
    else:
        done = client.messages.create(**ask)
    return "".join(b.text for b in done.content if b.type == "text"), done.stop_reason


def _gemini_read(gw: Any, stream: bool) -> tuple[str, str | None]:
    """What a Gemini client reads on the chat route: its text, the last finish reason."""
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    r = httpx.post(f"{gw.base_url}/v1beta/models/chat:{method}", json=body, timeout=30)
    assert r.status_code == 200, r.text
    if stream:
        chunks = [json.loads(x[6:]) for x in r.text.split("\n") if x.startswith("data: ")]
    else:
        chunks = [r.json()]
    candidates = [c["candidates"][0] for c in chunks]
    text = "".join(p.get("text", "") for c in candidates for p in c["content"]["parts"])
    return text, candidates[-1].get("finishReason")


def _refused(provider: Provider, pieces: list[str]) -> None:
    """The provider refuses: ``message.refusal`` (content null), or ``delta.refusal`` pieces."""
    provider.whole = chat_whole({"role": "assistant", "content": None, "refusal": "".join(pieces)})
    provider.stream = chat_stream(
        chat_chunk({"role": "assistant", "content": None, "refusal": ""}),
        *(chat_chunk({"refusal": p}) for p in pieces),
        chat_chunk({}, "stop"),
    )


#: What each client's wire says for a refusal: Anthropic's own stop reason; Gemini's for an
#: answer withheld for safety (chat's ``content_filter`` is both, ``anthropic_terms``).
REFUSED = {"messages": (_messages_read, "refusal"), "gemini": (_gemini_read, "SAFETY")}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("client", list(REFUSED))
def test_a_chat_providers_refusal_reaches_the_client_as_a_refusal(
    gw: Any, fresh: Provider, client: str, stream: bool
) -> None:
    """A chat provider's refusal (``message.refusal``, streamed as ``delta.refusal``) reached a
    Messages or Gemini client as an empty answer that ended normally (``end_turn``, ``STOP``):
    the words and the fact of the refusal were both lost. It is now the answer's text, and
    the stop reason says it was refused."""
    pieces = ["I can't ", "help with ", "that request."]
    _refused(fresh, pieces)
    read, reason = REFUSED[client]
    assert read(gw, stream) == ("".join(pieces), reason)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_an_answer_without_a_refusal_ends_as_it_did(gw: Any, fresh: Provider, stream: bool) -> None:
    """A ``refusal: null`` (OpenAI states it on every answer) changes nothing."""
    fresh.whole = chat_whole({"role": "assistant", "content": "Hi", "refusal": None})
    fresh.stream = chat_stream(
        chat_chunk({"role": "assistant", "content": "", "refusal": None}),
        chat_chunk({"content": "Hi", "refusal": None}),
        chat_chunk({}, "stop"),
    )
    assert _messages_read(gw, stream) == ("Hi", "end_turn")
    assert _gemini_read(gw, stream) == ("Hi", "STOP")


# --- 3. a chunk routefit cannot read ------------------------------------------------------------


def _garbled(provider: Provider, bad: bytes) -> None:
    provider.stream = chat_stream(
        chat_chunk({"role": "assistant", "content": ""}),
        chat_chunk({"content": "Hello"}),
        bad,
        chat_chunk({"content": " world"}),
        chat_chunk({}, "stop"),
    )


def _messages_failure(gw: Any) -> tuple[str, str]:
    client = anthropic.Anthropic(base_url=gw.base_url, api_key="unused", max_retries=0)
    ask = {"model": "chat", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(anthropic.APIError) as caught, client.messages.stream(**ask) as events:
        for _ in events:
            pass
    text = "".join(b.text for b in events.current_message_snapshot.content if b.type == "text")
    return text, caught.value.message


def _responses_failure(gw: Any) -> tuple[str, str]:
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    events = list(client.responses.create(model="chat", input="hi", stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert events[-1].type == "response.failed"
    error = events[-1].response.error
    assert error is not None
    return text, error.message


def _gemini_failure(gw: Any) -> tuple[str, str]:
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    url = f"{gw.base_url}/v1beta/models/chat:streamGenerateContent?alt=sse"
    r = httpx.post(url, json=body, timeout=30)
    *answered, last = [json.loads(x[6:]) for x in r.text.split("\n") if x.startswith("data: ")]
    text = "".join(
        p.get("text", "") for c in answered for p in c["candidates"][0]["content"]["parts"]
    )
    return text, last["error"]["message"]


FAILURES = {
    "messages": _messages_failure,
    "responses": _responses_failure,
    "gemini": _gemini_failure,
}

#: Chunks no chat provider sends for an answer: JSON cut short, not JSON, JSON not an object.
GARBLED = {
    "cut-json": b'data: {"id": "chatcmpl-fid", "choices": [{"delta": {"content": " lost"\n\n',
    "not-json": b"data: <html>502 Bad Gateway</html>\n\n",
    "not-an-object": b'data: [" lost"]\n\n',
}


@pytest.mark.parametrize("bad", list(GARBLED))
@pytest.mark.parametrize("client", list(FAILURES))
def test_a_chunk_routefit_cannot_read_ends_the_stream_as_an_error(
    gw: Any, fresh: Provider, client: str, bad: str
) -> None:
    """A chat chunk that is not a JSON object was skipped when translating, and the answer
    went on as if complete: the client got ``Hello world`` and ``end_turn`` while the text
    the chunk carried was lost. It now ends the stream with the client's wire's error event,
    after the text that came before it."""
    _garbled(fresh, GARBLED[bad])
    text, said = FAILURES[client](gw)
    assert text == "Hello"
    assert "cannot read" in said


KEEPALIVES = {
    "comment": b": OPENROUTER PROCESSING\n\n",
    "empty-data": b"data:\n\n",
    "named-ping": b"event: ping\ndata:\n\n",
}


@pytest.mark.parametrize("ping", list(KEEPALIVES))
def test_a_keepalive_between_chunks_is_not_an_error(gw: Any, fresh: Provider, ping: str) -> None:
    """What providers send to keep a connection open (an SSE comment, an event without data)
    is no chunk of the answer: skipped, as before."""
    _garbled(fresh, KEEPALIVES[ping])
    assert _messages_read(gw, stream=True) == ("Hello world", "end_turn")


# --- found hunting: stop reasons, a refusal in history, cache writes ----------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_tool_calls_finish_without_a_call_is_no_tool_use(
    gw: Any, fresh: Provider, stream: bool
) -> None:
    """A chat provider ending ``tool_calls`` with no call in the answer (its call parser gave
    up) reached a Messages client as ``stop_reason: "tool_use"`` with no ``tool_use`` block:
    an agent loop looks for calls to run and finds none. Anthropic says ``tool_use`` only when
    it calls a tool."""
    fresh.whole = chat_whole({"role": "assistant", "content": "Done."}, "tool_calls")
    fresh.stream = chat_stream(
        chat_chunk({"role": "assistant", "content": ""}),
        chat_chunk({"content": "Done."}),
        chat_chunk({}, "tool_calls"),
    )
    assert _messages_read(gw, stream) == ("Done.", "end_turn")


def test_a_refusal_in_a_chat_clients_history_reaches_claude(gw: Any, fresh: Provider) -> None:
    """A chat client's assistant turn that was a refusal (``content: null``, its words in
    ``refusal``) was dropped on the way to an Anthropic provider, and the user turns on either
    side of it were merged into one: Claude read the refused request as never answered."""
    fresh.whole = {
        "id": "msg_fid",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    client.chat.completions.create(
        model="claude",
        messages=[
            {"role": "user", "content": "do the bad thing"},
            {"role": "assistant", "content": None, "refusal": REFUSAL},
            {"role": "user", "content": "then something else"},
        ],
    )
    path, sent = fresh.requests[-1]
    assert path.endswith("/messages")
    validate_messages(sent)
    assert [(m["role"], m["content"]) for m in sent["messages"]] == [
        ("user", [{"type": "text", "text": "do the bad thing"}]),
        ("assistant", [{"type": "text", "text": REFUSAL}]),
        ("user", [{"type": "text", "text": "then something else"}]),
    ]


#: A chat provider's usage stating cache writes, in each shape one states them: OpenAI's and
#: OpenRouter's ``prompt_tokens_details.cache_write_tokens``, litellm's for Anthropic.
WRITES = {
    "openai": {"prompt_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 50}},
    "litellm": {
        "prompt_tokens_details": {"cached_tokens": 20},
        "cache_read_input_tokens": 20,
        "cache_creation_input_tokens": 50,
    },
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("shape", list(WRITES))
def test_cache_writes_a_chat_provider_states_reach_a_messages_client(
    gw: Any, fresh: Provider, shape: str, stream: bool
) -> None:
    """A chat provider's cache writes reached a Messages client as
    ``cache_creation_input_tokens: 0``, the written tokens counted as plain input: a client
    pricing its own usage (Anthropic bills a write above an input token) or watching its cache
    was told nothing was written."""
    usage = {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105, **WRITES[shape]}
    fresh.whole = {**chat_whole({"role": "assistant", "content": "Hi"}), "usage": usage}
    last = {**chat_chunk({}), "choices": [], "usage": usage}
    fresh.stream = (
        b"".join(
            b"data: " + orjson.dumps(c) + b"\n\n"
            for c in (chat_chunk({"content": "Hi"}), chat_chunk({}, "stop"), last)
        )
        + b"data: [DONE]\n\n"
    )
    client = anthropic.Anthropic(base_url=gw.base_url, api_key="unused", max_retries=0)
    ask = {"model": "chat", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        with client.messages.stream(**ask) as events:
            for _ in events:
                pass
            done = events.get_final_message()
    else:
        done = client.messages.create(**ask)
    said = done.usage
    assert (said.input_tokens, said.cache_read_input_tokens) == (30, 20)
    assert said.cache_creation_input_tokens == 50


def _anthropic_answer(usage: dict[str, int]) -> dict[str, Any]:
    return {
        "id": "msg_fid",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "Hi"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


def test_cache_writes_of_claude_reach_chat_and_responses_clients(gw: Any, fresh: Provider) -> None:
    """Anthropic's cache writes reached a Responses client on a Claude route as nothing:
    ``input_tokens_details`` had no ``cache_write_tokens`` (which OpenAI's own usage states),
    and a chat client only under Anthropic's name beside OpenAI's details."""
    usage = {
        "input_tokens": 30,
        "cache_read_input_tokens": 20,
        "cache_creation_input_tokens": 50,
        "output_tokens": 5,
    }
    fresh.whole = _anthropic_answer(usage)
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    chat = client.chat.completions.create(
        model="claude", messages=[{"role": "user", "content": "hi"}]
    )
    assert chat.usage is not None and chat.usage.prompt_tokens_details is not None
    details = chat.usage.prompt_tokens_details
    assert (chat.usage.prompt_tokens, details.cached_tokens) == (100, 20)
    assert details.cache_write_tokens == 50
    response = client.responses.create(model="claude", input="hi")
    assert response.usage is not None
    assert response.usage.input_tokens == 100
    assert response.usage.input_tokens_details.cached_tokens == 20
    assert response.usage.input_tokens_details.cache_write_tokens == 50


def test_a_refusal_part_in_a_chat_clients_history_reaches_claude(gw: Any, fresh: Provider) -> None:
    """An assistant turn whose content is a list with a ``refusal`` part (as OpenAI's SDK
    writes a refused turn back) was no part routefit's mapping knew, so the whole request went
    to litellm instead; it is the refusal's text, as for ``message.refusal``."""
    fresh.whole = _anthropic_answer({"input_tokens": 10, "output_tokens": 1})
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    refused = {"role": "assistant", "content": [{"type": "refusal", "refusal": REFUSAL}]}
    client.chat.completions.create(
        model="claude",
        messages=[
            {"role": "user", "content": "do the bad thing"},
            refused,
            {"role": "user", "content": "then something else"},
        ],
    )
    path, sent = fresh.requests[-1]
    assert path.endswith("/messages")
    validate_messages(sent)
    assert sent["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": REFUSAL}],
    }


def _allowed(mode: str, names: list[str]) -> dict[str, Any]:
    tools = [{"type": "function", "name": n} for n in names]
    return {"type": "allowed_tools", "mode": mode, "tools": tools}


@pytest.mark.parametrize(
    ("choice", "asked"),
    [
        (
            _allowed("required", ["get_weather"]),
            {"type": "function", "function": {"name": "get_weather"}},
        ),
        (_allowed("required", ["get_weather", "now"]), "required"),
        (_allowed("auto", ["get_weather"]), "auto"),
    ],
    ids=["required-one", "required-some", "auto"],
)
def test_a_responses_clients_allowed_tools_keeps_its_mode(
    gw: Any, fresh: Provider, choice: dict[str, Any], asked: Any
) -> None:
    """``tool_choice: {"type": "allowed_tools", "mode": "required"}`` reached a chat provider as
    ``auto``: the model could answer without the call the client required."""
    fresh.whole = chat_whole({"role": "assistant", "content": "ok"})
    tools = [
        {"type": "function", "name": n, "parameters": {"type": "object", "properties": {}}}
        for n in ("get_weather", "now")
    ]
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    client.responses.create(model="chat", input="hi", tools=tools, tool_choice=choice)
    sent = fresh.requests[-1][1]
    validate_chat(sent)
    assert sent["tool_choice"] == asked
