"""Every translation between a client's wire and a provider's, read by the clients' own SDKs.

routefit (in process, ``run_inprocess``) before a scripted provider that answers with exactly the
answer a test draws: reasoning, text, parallel tool calls with their ids and argument fragments,
a finish reason and usage, streamed as chat chunks or Anthropic events cut into network pieces
anywhere (inside a multi-byte character too), or whole. What each client reads is what its own
SDK accumulates (openai's ``chat.completions.stream`` and ``responses.stream``, anthropic's
``messages.stream``: strict about event order and shapes), or Gemini's SSE chunks as
``google.genai`` types; it must say what the provider said: every byte of text, every call's id,
name and arguments, the stop reason and the usage.

Routes: ``chat`` (an OpenAI-compatible provider that speaks only chat) and ``claude`` (an
Anthropic provider, reached by chat clients through routefit's own chat→Messages mapping).
Directions: a chat client on ``claude``; Messages, Responses and Gemini clients on ``chat``;
Responses and Gemini clients on ``claude`` (through chat and back twice).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
import yaml
from depth import examples
from google.genai import types as gtypes
from hypothesis import given, settings
from hypothesis import strategies as st
from inprocess import run_inprocess

from proxy.sim.wire_anthropic import validate as validate_messages
from proxy.sim.wire_openai import validate_chat
from proxy.transports.mock import MockTransport

KEY = "sk-prov-0123456789abcdef"


def _route(alias: str, model: str, base: str) -> dict[str, Any]:
    return {
        "model_name": alias,
        "litellm_params": {"model": model, "api_base": base, "api_key": KEY},
        "model_info": {"max_input_tokens": 128_000, "max_output_tokens": 16_384},
    }


ROUTES = [
    _route("chat", "deepseek/deepseek-chat", "http://provider.local/v1"),
    _route("claude", "anthropic/claude-sonnet-4-5", "http://provider.local"),
]


# --- the provider's answer ----------------------------------------------------------------------


@dataclass
class Call:
    id: str
    name: str
    pieces: list[str]

    @property
    def arguments(self) -> str:
        return "".join(self.pieces)

    @property
    def args(self) -> Any:
        return json.loads(self.arguments or "{}")


@dataclass
class Answer:
    """What the provider answers, in provider-neutral terms (chat's finish reasons)."""

    text: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    finish: str = "stop"
    #: How a chat provider numbers its streamed calls: ``index`` as OpenAI does, ``zero`` (every
    #: call at index 0, as Ollama does) or ``absent`` (no index: Gemini's and Mistral's
    #: OpenAI-compatible endpoints); each call's id is on its first fragment either way.
    numbering: str = "index"
    #: A chat provider ends its calls with ``stop``, as OpenAI does when ``tool_choice`` names
    #: a function (and vLLM, and others, when it requires one), instead of ``tool_calls``.
    forced: bool = False
    #: Where a chat provider writes its reasoning: ``reasoning_content`` (DeepSeek's),
    #: ``reasoning`` (vLLM's, Groq's, OpenRouter's), or ``mistral``: as Mistral's reasoning
    #: models do, ``content`` a list of chunks, the reasoning in ``thinking`` chunks (each a
    #: list of text chunks), the text in ``text`` chunks.
    reasoning_in: str = "reasoning_content"
    prompt: int = 40
    cached: int = 0
    completion: int = 7

    @property
    def content(self) -> str:
        return "".join(self.text)

    @property
    def chat_finish(self) -> str:
        """The finish reason a chat provider states."""
        return "stop" if self.forced and self.finish == "tool_calls" else self.finish


#: chat finish reason → Anthropic stop reason (what an Anthropic provider says for it).
ANTHROPIC_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}


def chat_chunks(answer: Answer) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-hunt",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "deepseek-chat",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    out = [chunk({"role": "assistant", "content": ""})]
    if answer.reasoning_in == "mistral":
        out += [chunk({"content": [_thinking(p)]}) for p in answer.reasoning]
        out += [chunk({"content": [{"type": "text", "text": p}]}) for p in answer.text]
    else:
        out += [chunk({answer.reasoning_in: p}) for p in answer.reasoning]
        out += [chunk({"content": p}) for p in answer.text]
    for i, call in enumerate(answer.calls):
        number = {"index": {"index": i}, "zero": {"index": 0}, "absent": {}}[answer.numbering]
        # a chat provider writes a call without arguments as "{}"
        first = call.pieces[0] if call.pieces else "{}"
        fn = {"name": call.name, "arguments": first}
        head = {**number, "id": call.id, "type": "function", "function": fn}
        out.append(chunk({"tool_calls": [head]}))
        for piece in call.pieces[1:]:
            out.append(chunk({"tool_calls": [{**number, "function": {"arguments": piece}}]}))
    out.append(chunk({}, answer.chat_finish))
    usage = {
        "prompt_tokens": answer.prompt,
        "completion_tokens": answer.completion,
        "total_tokens": answer.prompt + answer.completion,
        "prompt_tokens_details": {"cached_tokens": answer.cached},
    }
    out.append({**chunk({}), "choices": [], "usage": usage})
    return out


def _thinking(text: str) -> dict[str, Any]:
    """Mistral's chunk of reasoning."""
    return {"type": "thinking", "thinking": [{"type": "text", "text": text}]}


def chat_whole(answer: Answer) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.content or None}
    if answer.reasoning_in == "mistral":
        parts = [_thinking(p) for p in answer.reasoning]
        message["content"] = [*parts, {"type": "text", "text": answer.content}]
    elif answer.reasoning:
        message[answer.reasoning_in] = "".join(answer.reasoning)
    if answer.calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments or "{}"},
            }
            for c in answer.calls
        ]
    return {
        "id": "chatcmpl-hunt",
        "object": "chat.completion",
        "created": 1,
        "model": "deepseek-chat",
        "choices": [{"index": 0, "message": message, "finish_reason": answer.chat_finish}],
        "usage": {
            "prompt_tokens": answer.prompt,
            "completion_tokens": answer.completion,
            "total_tokens": answer.prompt + answer.completion,
            "prompt_tokens_details": {"cached_tokens": answer.cached},
        },
    }


def _anthropic_usage(answer: Answer) -> dict[str, Any]:
    return {
        "input_tokens": answer.prompt - answer.cached,
        "cache_read_input_tokens": answer.cached,
        "cache_creation_input_tokens": 0,
        "output_tokens": answer.completion,
    }


def anthropic_events(answer: Answer) -> list[dict[str, Any]]:
    usage = _anthropic_usage(answer)
    start = {
        "id": "msg_hunt",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    out: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    index = 0

    def block(start: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        nonlocal index
        out.append({"type": "content_block_start", "index": index, "content_block": start})
        out.extend({"type": "content_block_delta", "index": index, "delta": d} for d in deltas)
        out.append({"type": "content_block_stop", "index": index})
        index += 1

    if answer.reasoning:
        deltas = [{"type": "thinking_delta", "thinking": p} for p in answer.reasoning]
        deltas.append({"type": "signature_delta", "signature": "c2ln"})
        block({"type": "thinking", "thinking": "", "signature": ""}, deltas)
    if answer.text:
        block(
            {"type": "text", "text": ""},
            [{"type": "text_delta", "text": p} for p in answer.text],
        )
    for call in answer.calls:
        # Anthropic sends one empty fragment for a call without input
        pieces = call.pieces or [""]
        block(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": {}},
            [{"type": "input_json_delta", "partial_json": p} for p in pieces],
        )
    delta = {"stop_reason": ANTHROPIC_STOP[answer.finish], "stop_sequence": None}
    out.append({"type": "message_delta", "delta": delta, "usage": usage})
    out.append({"type": "message_stop"})
    return out


def anthropic_whole(answer: Answer) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if answer.reasoning:
        content.append(
            {"type": "thinking", "thinking": "".join(answer.reasoning), "signature": "c2ln"}
        )
    if answer.text:
        content.append({"type": "text", "text": answer.content})
    content += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": c.args} for c in answer.calls
    ]
    return {
        "id": "msg_hunt",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": ANTHROPIC_STOP[answer.finish],
        "stop_sequence": None,
        "usage": _anthropic_usage(answer),
    }


def sse(events: list[dict[str, Any]], named: bool) -> bytes:
    out = b""
    for e in events:
        head = b"event: " + e["type"].encode() + b"\n" if named else b""
        out += head + b"data: " + orjson.dumps(e) + b"\n\n"
    return out


class Provider:
    """Answers every request with ``answer`` in the wire it was asked in, its stream cut into
    ``cut``-byte network pieces (0: one piece per event); keeps the requests it was sent."""

    def __init__(self) -> None:
        self.answer = Answer()
        self.cut = 0
        #: A stream's bytes as they are to be sent, by provider wire (``messages``, ``chat``),
        #: instead of ``answer``'s.
        self.raw: dict[str, bytes] = {}
        self.requests: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        path = request.url.path
        self.requests.append((path, body))
        anthropic_wire = path.endswith("/messages")
        if not body.get("stream"):
            whole = anthropic_whole(self.answer) if anthropic_wire else chat_whole(self.answer)
            return httpx.Response(200, json=whole)
        if anthropic_wire:
            data = sse(anthropic_events(self.answer), named=True)
        else:
            data = sse(chat_chunks(self.answer), named=False) + b"data: [DONE]\n\n"
        data = self.raw.get("messages" if anthropic_wire else "chat", data)
        cut = self.cut
        pieces = [data[i : i + cut] for i in range(0, len(data), cut)] if cut else [data]

        async def stream() -> AsyncIterator[bytes]:
            for piece in pieces:
                yield piece

        headers = {"content-type": "text/event-stream"}
        return httpx.Response(200, headers=headers, content=stream())


@pytest.fixture(scope="module")
def provider() -> Provider:
    return Provider()


@pytest.fixture
def fresh(provider: Provider) -> Provider:
    """The module's provider, answering the default answer again."""
    provider.answer, provider.cut, provider.raw = Answer(), 0, {}
    provider.requests.clear()
    return provider


@pytest.fixture(scope="module")
def gw(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = tmp_path_factory.mktemp("hunt") / "routefit.yaml"
    path.write_text(
        yaml.safe_dump({"model_list": ROUTES, "routefit_settings": {"store_path": ":memory:"}})
    )
    with run_inprocess(path, provider=lambda cfg: {"transport": MockTransport(provider)}) as gw:
        yield gw


# --- what each client reads ---------------------------------------------------------------------


@dataclass
class Read:
    """What a client made of the answer, in the same neutral terms."""

    text: str
    calls: list[tuple[str, str, Any]]
    finish: str
    prompt: int
    cached: int
    completion: int
    reasoning: str = ""


def expected(answer: Answer, reasoning: bool) -> Read:
    """What a client must read of ``answer`` (its reasoning only where its wire carries it)."""
    return Read(
        answer.content,
        [(c.id, c.name, c.args) for c in answer.calls],
        answer.finish,
        answer.prompt,
        answer.cached,
        answer.completion,
        "".join(answer.reasoning) if reasoning else "",
    )


TOOLS_CHAT = [
    {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    for name in ("get_weather", "now")
]


def chat_client(gw: Any, answer: Answer, stream: bool) -> Read:
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    ask = {
        "model": "claude",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": TOOLS_CHAT,
        "max_tokens": 300,
    }
    if stream:
        with client.chat.completions.stream(
            **ask, stream_options={"include_usage": True}
        ) as events:
            for _ in events:
                pass
            # the accumulated snapshot (the final completion refuses a length or filter finish)
            done = events.current_completion_snapshot
    else:
        done = client.chat.completions.create(**ask)
    choice = done.choices[0]
    message = choice.message
    calls = [
        (c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []
    ]
    assert done.usage is not None
    details = done.usage.prompt_tokens_details
    return Read(
        message.content or "",
        calls,
        choice.finish_reason,
        done.usage.prompt_tokens,
        details.cached_tokens if details else 0,
        done.usage.completion_tokens,
        getattr(message, "reasoning_content", None) or "",
    )


#: Anthropic stop reason → chat finish reason, for comparing.
CHAT_FINISH = {v: k for k, v in ANTHROPIC_STOP.items()}


def messages_client(gw: Any, answer: Answer, stream: bool) -> Read:
    client = anthropic.Anthropic(base_url=gw.base_url, api_key="unused", max_retries=0)
    ask = {
        "model": "chat",
        "max_tokens": 300,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
            for t in TOOLS_CHAT
        ],
    }
    if stream:
        with client.messages.stream(**ask) as events:
            for _ in events:
                pass
            done = events.get_final_message()
    else:
        done = client.messages.create(**ask)
    text = "".join(b.text for b in done.content if b.type == "text")
    calls = [(b.id, b.name, b.input) for b in done.content if b.type == "tool_use"]
    usage = done.usage
    cached = usage.cache_read_input_tokens or 0
    prompt = usage.input_tokens + cached + (usage.cache_creation_input_tokens or 0)
    return Read(text, calls, CHAT_FINISH[done.stop_reason], prompt, cached, usage.output_tokens)


TOOLS_RESPONSES = [{"type": "function", **t["function"]} for t in TOOLS_CHAT]


#: A client reading an answer: whole or streamed.
Reader = Callable[[Any, Answer, bool], Read]


def responses_client(route: str) -> Reader:
    def read(gw: Any, answer: Answer, stream: bool) -> Read:
        client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
        ask = {"model": route, "input": "hi", "tools": TOOLS_RESPONSES, "max_output_tokens": 300}
        if stream:
            with client.responses.stream(**ask) as events:
                # the SDK's final response is only a completed one's: an incomplete one is the
                # response its last event carries (the items accumulated from the deltas)
                ends = [
                    e for e in events if e.type in ("response.completed", "response.incomplete")
                ]
            assert len(ends) == 1
            done = ends[0].response
        else:
            done = client.responses.create(**ask)
        text = ""
        calls = []
        for item in done.output:
            if item.type == "message":
                text += "".join(p.text for p in item.content if p.type == "output_text")
            elif item.type == "function_call":
                calls.append((item.call_id, item.name, json.loads(item.arguments)))
        if done.status == "incomplete":
            assert done.incomplete_details is not None
            finish = {"max_output_tokens": "length", "content_filter": "content_filter"}[
                done.incomplete_details.reason
            ]
        else:
            assert done.status == "completed"
            finish = "tool_calls" if calls else "stop"
        usage = done.usage
        assert usage is not None
        return Read(
            text,
            calls,
            finish,
            usage.input_tokens,
            usage.input_tokens_details.cached_tokens,
            usage.output_tokens,
        )

    return read


GEMINI_FINISH = {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter"}


def gemini_client(route: str) -> Reader:
    def read(gw: Any, answer: Answer, stream: bool) -> Read:
        body = {
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "tools": [
                {
                    "functionDeclarations": [
                        {"name": t["function"]["name"], "parameters": t["function"]["parameters"]}
                        for t in TOOLS_CHAT
                    ]
                }
            ],
            "generationConfig": {"maxOutputTokens": 300},
        }
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        r = httpx.post(f"{gw.base_url}/v1beta/models/{route}:{method}", json=body, timeout=30)
        assert r.status_code == 200, r.text
        if stream:
            chunks = [
                gtypes.GenerateContentResponse.model_validate_json(line[6:])
                for line in r.text.split("\n")
                if line.startswith("data: ")
            ]
        else:
            chunks = [gtypes.GenerateContentResponse.model_validate_json(r.text)]
        text = thought = ""
        calls = []
        finish = None
        usage = None
        for chunk in chunks:
            candidate = chunk.candidates[0]
            for part in candidate.content.parts or []:
                if part.function_call is not None:
                    fc = part.function_call
                    calls.append((fc.id, fc.name, fc.args))
                elif part.thought:
                    thought += part.text or ""
                elif part.text:
                    text += part.text
            if candidate.finish_reason is not None:
                assert finish is None, "a finish reason in two chunks"
                finish = candidate.finish_reason.value
            usage = chunk.usage_metadata or usage
        assert usage is not None
        read_finish = GEMINI_FINISH[finish]
        if read_finish == "stop" and calls:
            read_finish = "tool_calls"  # Gemini ends calls with STOP
        return Read(
            text,
            calls,
            read_finish,
            usage.prompt_token_count,
            usage.cached_content_token_count or 0,
            usage.candidates_token_count + (usage.thoughts_token_count or 0),
            thought,
        )

    return read


#: Each direction's client, and whether its wire carries the provider's reasoning (chat's
#: ``reasoning_content``, Gemini's thought parts; Messages and Responses clients of a translated
#: route lose it: docs/wires.md).
CLIENTS = {
    "chat-on-claude": (chat_client, True),
    "messages-on-chat": (messages_client, False),
    "responses-on-chat": (responses_client("chat"), False),
    "responses-on-claude": (responses_client("claude"), False),
    "gemini-on-chat": (gemini_client("chat"), True),
    "gemini-on-claude": (gemini_client("claude"), True),
}


# --- answers ------------------------------------------------------------------------------------

#: Text that trips byte-level cuts and JSON escapes: multi-byte characters (2, 3 and 4 bytes,
#: a flag of two code points), quotes, backslashes, newlines, control characters.
pieces = st.text(
    alphabet=st.sampled_from(list('aZ 9"\\\n\té€😀🇫🇷\u2028\x01{}')), min_size=1, max_size=6
)


@st.composite
def tool_calls(draw: Any) -> list[Call]:
    """Up to three calls, each with an id of its own, arguments or none (Anthropic streams none
    as one empty fragment; a chat provider writes ``{}``), cut anywhere into fragments."""
    calls = []
    for i in range(draw(st.integers(0, 3))):
        arguments = ""
        if draw(st.booleans()):
            value = {"city": draw(st.text(max_size=12)), "n": draw(st.integers(-5, 5))}
            arguments = json.dumps(value, ensure_ascii=draw(st.booleans()))
        inside = st.sets(st.integers(1, len(arguments) - 1), max_size=4)
        bounds = [0, *sorted(draw(inside) if len(arguments) > 1 else ()), len(arguments)]
        fragments = [arguments[a:b] for a, b in itertools.pairwise(bounds) if b > a]
        call_id = f"call_{i}_" + draw(st.text("abcXYZ019", min_size=4, max_size=8))
        calls.append(Call(call_id, draw(st.sampled_from(["get_weather", "now"])), fragments))
    return calls


@st.composite
def answers(draw: Any) -> Answer:
    calls = draw(tool_calls())
    text = draw(st.lists(pieces, max_size=5))
    finish = "tool_calls" if calls else draw(st.sampled_from(["stop", "length", "content_filter"]))
    prompt = draw(st.integers(1, 5000))
    return Answer(
        reasoning=draw(st.lists(pieces, max_size=3)),
        text=text,
        calls=calls,
        finish=finish,
        numbering=draw(st.sampled_from(["index", "zero", "absent"])),
        forced=draw(st.booleans()),
        reasoning_in=draw(st.sampled_from(["reasoning_content", "reasoning", "mistral"])),
        prompt=prompt,
        cached=draw(st.integers(0, prompt)),
        completion=draw(st.integers(1, 300)),
    )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("direction", list(CLIENTS))
@settings(max_examples=examples(25, 100), deadline=None)
@given(answer=answers(), cut=st.integers(0, 40))
def test_every_client_reads_what_the_provider_said(
    gw: Any, provider: Provider, direction: str, stream: bool, answer: Answer, cut: int
) -> None:
    """Found: a call without arguments streamed by Anthropic reached a chat client (and a
    Responses client of a Claude route) with arguments ``""``, where the whole answer says
    ``{}`` (``json.loads`` fails on it); parallel calls a chat provider numbers all at index 0
    (Ollama) or not at all (Gemini's, Mistral's compatible endpoints) were merged into one
    call with the arguments run together, for Messages, Responses and Gemini clients alike;
    calls a chat provider ended with ``stop`` (OpenAI's finish for a forced tool) reached a
    Messages client as ``end_turn``, where Anthropic says ``tool_use`` whenever it calls
    tools (the stop reason an agent loop reads to run them)."""
    provider.answer, provider.cut, provider.raw = answer, cut, {}
    read, reasoning = CLIENTS[direction]
    assert read(gw, answer, stream) == expected(answer, reasoning)


# --- a provider's error mid-stream --------------------------------------------------------------


def _broken_streams(text: list[str], done: bool) -> dict[str, bytes]:
    """The provider streams ``text``, then fails in its own words: chat's error chunk (as
    OpenRouter sends it: its finish reason ``error``; ``done``: ``[DONE]`` after it, as some
    relays do), Anthropic's ``error`` event."""
    answer = Answer(text=text)
    chat = chat_chunks(answer)[: 1 + len(text)]
    failed = {
        **chat[0],
        "error": {"code": "server_error", "message": "Provider disconnected unexpectedly"},
        "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
    }
    events = anthropic_events(answer)[: 3 + len(text)]  # start, ping, the text block
    assert events[-1]["type"] == "content_block_delta"
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    return {
        "chat": sse([*chat, failed], named=False) + (b"data: [DONE]\n\n" if done else b""),
        "messages": sse([*events, overloaded], named=True),
    }


def _failed_chat(gw: Any) -> tuple[str, str]:
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    text = ""
    with pytest.raises(openai.APIError) as caught:
        for chunk in client.chat.completions.create(
            model="claude", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            text += (chunk.choices[0].delta.content or "") if chunk.choices else ""
    return text, caught.value.message


def _failed_messages(gw: Any) -> tuple[str, str]:
    client = anthropic.Anthropic(base_url=gw.base_url, api_key="unused", max_retries=0)
    ask = {"model": "chat", "max_tokens": 300, "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(anthropic.APIError) as caught, client.messages.stream(**ask) as events:
        for _ in events:
            pass
    text = "".join(b.text for b in events.current_message_snapshot.content if b.type == "text")
    return text, caught.value.message


LIFECYCLE = {
    f"response.{s}" for s in ("created", "in_progress", "completed", "incomplete", "failed")
}


def _failed_responses(route: str) -> Callable[[Any], tuple[str, str]]:
    def read(gw: Any) -> tuple[str, str]:
        client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
        events = list(client.responses.create(model=route, input="hi", stream=True))
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        lifecycle = [e.type for e in events if e.type in LIFECYCLE]
        assert lifecycle == ["response.created", "response.in_progress", "response.failed"]
        assert events[-1].type == "response.failed"
        return text, events[-1].response.error.message

    return read


def _failed_gemini(route: str) -> Callable[[Any], tuple[str, str]]:
    def read(gw: Any) -> tuple[str, str]:
        body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        r = httpx.post(
            f"{gw.base_url}/v1beta/models/{route}:streamGenerateContent?alt=sse",
            json=body,
            timeout=30,
        )
        lines = [json.loads(x[6:]) for x in r.text.split("\n") if x.startswith("data: ")]
        *answered, last = lines
        text = "".join(
            p.get("text", "") for c in answered for p in c["candidates"][0]["content"]["parts"]
        )
        assert all(c["candidates"][0].get("finishReason") is None for c in answered)
        return text, last["error"]["message"]

    return read


FAILED = {
    "chat-on-claude": (_failed_chat, "Overloaded"),
    "messages-on-chat": (_failed_messages, "Provider disconnected unexpectedly"),
    "responses-on-chat": (_failed_responses("chat"), "Provider disconnected unexpectedly"),
    "responses-on-claude": (_failed_responses("claude"), "Overloaded"),
    "gemini-on-chat": (_failed_gemini("chat"), "Provider disconnected unexpectedly"),
    "gemini-on-claude": (_failed_gemini("claude"), "Overloaded"),
}


@pytest.mark.parametrize("done", [False, True], ids=["then-closed", "then-done"])
@pytest.mark.parametrize("direction", list(FAILED))
def test_a_providers_error_mid_stream_is_the_clients_error_with_its_words(
    gw: Any, fresh: Provider, direction: str, done: bool
) -> None:
    """The provider's error after some text reaches every client as its wire's error, carrying
    the provider's message, after the text it had sent, never as a finished answer. A
    Responses client on a chat route saw ``response.completed`` (the error chunk was skipped,
    the ``[DONE]`` after it read as the end), or without ``[DONE]`` a failure in routefit's
    words ("ended before it was complete") instead of the provider's."""
    fresh.raw = _broken_streams(["Hello, ", "wor"], done)
    read, message = FAILED[direction]
    text, said = read(gw)
    assert text == "Hello, wor"
    assert message in said


@pytest.mark.parametrize(
    ("kind", "status"),
    [("overloaded_error", 503), ("rate_limit_error", 429), ("invalid_request_error", 400)],
)
@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/v1/chat/completions",
            {"model": "claude", "messages": [{"role": "user", "content": "hi"}]},
        ),
        ("/v1/responses", {"model": "claude", "input": "hi"}),
        (
            "/v1beta/models/claude:streamGenerateContent?alt=sse",
            {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        ),
    ],
    ids=["chat", "responses", "gemini"],
)
def test_an_anthropic_error_as_the_streams_first_event_is_its_status(
    gw: Any, fresh: Provider, kind: str, status: int, path: str, body: dict[str, Any]
) -> None:
    """Anthropic may answer a stream with an ``error`` event before anything else (its
    ``overloaded_error`` is a 529 when not streamed). A Messages client gets that status
    (the native relay reads it); a client translated to Messages got a 502
    ``upstream_unreachable`` ("broke off before its first event") for all of them: a rate
    limit, an overload and a refused request alike."""
    error = {"type": "error", "error": {"type": kind, "message": f"the provider says {kind}"}}
    fresh.raw = {"messages": sse([error], named=True)}
    stream = {} if "alt=sse" in path else {"stream": True}
    r = httpx.post(gw.base_url + path, json={**body, **stream}, timeout=30)
    assert r.status_code == status, r.text
    assert f"the provider says {kind}" in r.text
    native = httpx.post(
        gw.base_url + "/v1/messages",
        json={
            "model": "claude",
            "max_tokens": 20,
            "stream": True,
            "messages": body.get("messages") or [{"role": "user", "content": "hi"}],
        },
        timeout=30,
    )
    assert native.status_code == (529 if status == 503 else status)


def test_a_count_the_last_usage_leaves_null_is_the_one_stated_before(
    gw: Any, fresh: Provider
) -> None:
    """Anthropic's ``message_delta`` usage may name a count as null (its SDK's types allow it:
    "not stated"); the chat client's usage, and what the team is charged, is then the count
    ``message_start`` stated. The translation took the null for 0: a 1,200-token prompt was
    reported (and calibrated, and settled) as its 300 cache reads."""
    answer = Answer(text=["fine"], prompt=1500, cached=300, completion=9)
    events = anthropic_events(answer)
    assert events[-2]["type"] == "message_delta"
    events[-2]["usage"] = {
        "input_tokens": None,
        "cache_read_input_tokens": None,
        "cache_creation_input_tokens": None,
        "output_tokens": 9,
    }
    fresh.raw = {"messages": sse(events, named=True)}
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model="claude",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    usage = chunks[-1].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (1500, 9)
    assert usage.prompt_tokens_details.cached_tokens == 300


# --- what the provider is asked -----------------------------------------------------------------

#: How each client forces one tool, requires one, forbids them (its ``tool_choice``), and the
#: body's fields that ask for one call at most.
STEERED = {
    "chat": (
        [{"type": "function", "function": {"name": "now"}}, "required", "none"],
        {"parallel_tool_calls": False},
    ),
    "messages": (
        [{"type": "tool", "name": "now"}, {"type": "any"}, {"type": "none"}],
        {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
    ),
    "responses": (
        [{"type": "function", "name": "now"}, "required", "none"],
        {"parallel_tool_calls": False},
    ),
}


def _ask(wire: str, route: str, extra: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if wire == "chat":
        body = {"model": route, "messages": [{"role": "user", "content": "hi"}]}
        return "/v1/chat/completions", {**body, "tools": TOOLS_CHAT, "max_tokens": 50, **extra}
    if wire == "messages":
        tools = [
            {"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
            for t in TOOLS_CHAT
        ]
        body = {"model": route, "messages": [{"role": "user", "content": "hi"}], "tools": tools}
        return "/v1/messages", {**body, "max_tokens": 50, **extra}
    body = {"model": route, "input": "hi", "tools": TOOLS_RESPONSES, "max_output_tokens": 50}
    return "/v1/responses", {**body, **extra}


@pytest.mark.parametrize(
    ("client", "route", "provider_wire"),
    [
        ("chat", "claude", "messages"),
        ("messages", "chat", "chat"),
        ("responses", "chat", "chat"),
        ("responses", "claude", "messages"),
    ],
)
def test_a_forced_a_required_a_forbidden_tool_and_one_call_at_most_reach_the_provider(
    gw: Any, fresh: Provider, client: str, route: str, provider_wire: str
) -> None:
    """Each way a client steers its tools is what the provider is asked, in the provider's
    words. A Messages client's ``disable_parallel_tool_use`` was dropped on a chat route: a
    client that takes one call at a time got parallel calls."""
    choices, single = STEERED[client]
    asked, one_call = STEERED[provider_wire]
    for choice, want in zip(choices, asked, strict=True):
        path, body = _ask(client, route, {"tool_choice": choice})
        assert httpx.post(gw.base_url + path, json=body, timeout=30).status_code == 200
        assert fresh.requests[-1][1]["tool_choice"] == want
    path, body = _ask(client, route, single)
    assert httpx.post(gw.base_url + path, json=body, timeout=30).status_code == 200
    sent = fresh.requests[-1][1]
    assert {k: sent.get(k) for k in one_call} == one_call


def test_every_candidate_a_gemini_client_asked_for_is_streamed(gw: Any, fresh: Provider) -> None:
    """``candidateCount`` 2 on a chat route is chat's ``n`` 2: the whole answer had both
    candidates, the stream only the first (the second's text and calls were read, charged for
    and never sent). Each choice is its candidate of the same index, text as it comes, calls
    and finish reason in the last chunk."""

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "c", "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}

    call = {"index": 0, "id": "call_b", "function": {"name": "now", "arguments": "{}"}}
    usage = {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
    chunks = [
        chunk(0, {"role": "assistant", "content": "A"}),
        chunk(1, {"role": "assistant", "content": "B"}),
        chunk(1, {"tool_calls": [call]}),
        chunk(0, {"content": "a"}),
        chunk(0, {}, "length"),
        chunk(1, {}, "tool_calls"),
        {"id": "c", "choices": [], "usage": usage},
    ]
    fresh.raw = {"chat": sse(chunks, named=False) + b"data: [DONE]\n\n"}
    body = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generationConfig": {"candidateCount": 2},
    }
    r = httpx.post(
        f"{gw.base_url}/v1beta/models/chat:streamGenerateContent?alt=sse", json=body, timeout=30
    )
    assert fresh.requests[-1][1]["n"] == 2
    read: dict[int, dict[str, Any]] = {}
    for line in r.text.split("\n"):
        if not line.startswith("data: "):
            continue
        for c in gtypes.GenerateContentResponse.model_validate_json(line[6:]).candidates:
            got = read.setdefault(c.index, {"text": "", "calls": [], "finish": None})
            for part in c.content.parts:
                got["text"] += part.text or ""
                if part.function_call:
                    got["calls"].append((part.function_call.id, part.function_call.name))
            got["finish"] = c.finish_reason or got["finish"]
    assert read == {
        0: {"text": "Aa", "calls": [], "finish": "MAX_TOKENS"},
        1: {"text": "B", "calls": [("call_b", "now")], "finish": "STOP"},
    }


@pytest.mark.parametrize(
    "turn",
    [
        [{"type": "thinking", "thinking": "Let me see.", "signature": "c2ln"}],
        [{"type": "redacted_thinking", "data": "ZW5j"}],
    ],
    ids=["thinking", "redacted"],
)
def test_an_assistant_turn_of_thinking_only_is_not_sent_to_a_chat_provider(
    gw: Any, fresh: Provider, turn: list[dict[str, Any]]
) -> None:
    """A Messages client's assistant turn that holds nothing but thinking (a reply cut off
    while it thought, Claude Code's turn split at its blocks) became an assistant message with
    neither text nor calls, which an OpenAI-compatible provider refuses (``content`` null): it
    is left out, as a Gemini client's turn of thoughts only is."""
    body = {
        "model": "chat",
        "max_tokens": 50,
        "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": turn},
            {"role": "user", "content": "go on"},
        ],
    }
    r = httpx.post(gw.base_url + "/v1/messages", json=body, timeout=30)
    assert r.status_code == 200, r.text
    sent = fresh.requests[-1][1]
    validate_chat(sent)  # OpenAI's own shape rules, as the simulator reads them
    assert [m["role"] for m in sent["messages"]] == ["user", "user"]


# --- agents' conversations, translated, are what their providers take ---------------------------

short = st.text(alphabet='ab é😀\n"', min_size=1, max_size=8)
#: A 1x1 PNG.
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
    "RU5ErkJggg=="
)


@st.composite
def claude_code(draw: Any) -> dict[str, Any]:
    """A Messages conversation as Claude Code writes it: thinking (signed, redacted) with its
    turn, parallel tool uses, their results in any order (text, images, errors, empty) before
    the user's text."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    messages = [{"role": "user", "content": [{"type": "text", "text": draw(short)}]}]
    for turn in range(draw(st.integers(0, 4))):
        content: list[dict[str, Any]] = []
        if draw(st.booleans()):
            content.append({"type": "thinking", "thinking": draw(short), "signature": "c2ln"})
        if draw(st.booleans()):
            content.append({"type": "redacted_thinking", "data": "ZW5j"})
        if draw(st.booleans()):
            content.append({"type": "text", "text": draw(short)})
        ids = [f"toolu_{turn}_{k}" for k in range(draw(st.integers(0, 3)))]
        content += [
            {"type": "tool_use", "id": i, "name": "now", "input": {"city": draw(short)}}
            for i in ids
        ]
        messages.append(
            {"role": "assistant", "content": content or [{"type": "text", "text": "x"}]}
        )
        results: list[dict[str, Any]] = [
            {
                "type": "tool_result",
                "tool_use_id": i,
                "content": draw(
                    st.sampled_from(["ok", [], [{"type": "text", "text": "r"}, image]])
                ),
                "is_error": draw(st.booleans()),
            }
            for i in draw(st.permutations(ids))
        ]
        if draw(st.booleans()) or not ids:
            results.append({"type": "text", "text": draw(short)})
        messages.append({"role": "user", "content": results})
    tools = [{"name": "now", "input_schema": {"type": "object"}}]
    return {"max_tokens": 100, "messages": messages, "tools": tools}


@st.composite
def codex(draw: Any) -> dict[str, Any]:
    """A Responses input as Codex writes it: reasoning items, assistant messages, function,
    custom and server-side calls, their outputs in any order (an image in one), user turns."""
    items: list[dict[str, Any]] = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": draw(short)},
    ]
    for turn in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            summary = [{"type": "summary_text", "text": draw(short)}]
            items.append({"type": "reasoning", "summary": summary, "encrypted_content": "ZW5j"})
        if draw(st.booleans()):
            text = [{"type": "output_text", "text": draw(short)}]
            items.append({"type": "message", "role": "assistant", "content": text})
        outputs = []
        for k in range(draw(st.integers(0, 3))):
            call_id = f"call_{turn}_{k}"
            kind = draw(st.sampled_from(["function", "custom", "local_shell"]))
            if kind == "function":
                arguments = json.dumps({"city": draw(short)})
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call_id,
                        "name": "now",
                        "arguments": arguments,
                    }
                )
                image = {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"}
                output = draw(st.sampled_from(["ok", [{"type": "input_text", "text": "t"}, image]]))
                outputs.append(
                    {"type": "function_call_output", "call_id": call_id, "output": output}
                )
            elif kind == "custom":
                items.append(
                    {
                        "type": "custom_tool_call",
                        "call_id": call_id,
                        "name": "apply_patch",
                        "input": draw(short),
                    }
                )
                outputs.append(
                    {"type": "custom_tool_call_output", "call_id": call_id, "output": "done"}
                )
            else:
                action = {"type": "exec", "command": ["ls"], "env": {}}
                items.append(
                    {
                        "type": "local_shell_call",
                        "call_id": call_id,
                        "id": f"lsh_{turn}_{k}",
                        "status": "completed",
                        "action": action,
                    }
                )
                outputs.append(
                    {"type": "local_shell_call_output", "call_id": call_id, "output": "a b"}
                )
        items += draw(st.permutations(outputs))
        if draw(st.booleans()) or not outputs:
            items.append({"role": "user", "content": [{"type": "input_text", "text": draw(short)}]})
    tools = [*TOOLS_RESPONSES, {"type": "custom", "name": "apply_patch"}, {"type": "local_shell"}]
    return {"input": items, "tools": tools, "store": False, "parallel_tool_calls": False}


@st.composite
def gemini_cli(draw: Any) -> dict[str, Any]:
    """Gemini contents as Gemini CLI writes them: thought parts, calls with and without ids
    (with thought signatures), their responses in any order before the user's text."""
    contents = [{"role": "user", "parts": [{"text": draw(short)}]}]
    for turn in range(draw(st.integers(0, 4))):
        parts: list[dict[str, Any]] = []
        if draw(st.booleans()):
            parts.append({"text": draw(short), "thought": True})
        if draw(st.booleans()):
            parts.append({"text": draw(short)})
        calls = []
        for k in range(draw(st.integers(0, 3))):
            call = {
                "name": draw(st.sampled_from(["now", "get_weather"])),
                "args": {"city": draw(short)},
            }
            if draw(st.booleans()):
                call["id"] = f"fc{turn}_{k}"
            calls.append(call)
            parts.append({"functionCall": call, "thoughtSignature": "c2ln"})
        contents.append({"role": "model", "parts": parts or [{"text": "x"}]})
        answers_ = [
            {
                "functionResponse": {
                    **{k: c[k] for k in ("id", "name") if k in c},
                    "response": {"output": "ok"},
                }
            }
            for c in draw(st.permutations(calls))
        ]
        if draw(st.booleans()) or not calls:
            answers_.append({"text": draw(short)})
        contents.append({"role": "user", "parts": answers_})
    declarations = [
        {"name": t["function"]["name"], "parametersJsonSchema": t["function"]["parameters"]}
        for t in TOOLS_CHAT
    ]
    return {
        "contents": contents,
        "systemInstruction": {"parts": [{"text": "be brief"}]},
        "tools": [{"functionDeclarations": declarations}],
    }


#: (client, route): the path its conversation goes to, and the generator of its bodies.
AGENTS = {
    ("claude-code", "chat"): ("/v1/messages", claude_code()),
    ("codex", "chat"): ("/v1/responses", codex()),
    ("codex", "claude"): ("/v1/responses", codex()),
    ("gemini-cli", "chat"): ("/v1beta/models/chat:generateContent", gemini_cli()),
    ("gemini-cli", "claude"): ("/v1beta/models/claude:generateContent", gemini_cli()),
}


@pytest.mark.parametrize(("agent", "route"), list(AGENTS))
@settings(max_examples=examples(40, 300), deadline=None)
@given(data=st.data())
def test_an_agents_conversation_translated_is_one_its_provider_takes(
    gw: Any, provider: Provider, agent: str, route: str, data: st.DataObject
) -> None:
    """What routefit sends a chat or an Anthropic provider for an agent's conversation is a
    request that provider takes (the simulator's reading of OpenAI's and Anthropic's rules).
    Found: Claude Code's assistant turn of thinking only became a chat message with neither
    text nor calls (``content`` null: refused)."""
    provider.answer, provider.raw = Answer(text=["ok"]), {}
    path, bodies = AGENTS[(agent, route)]
    body = {"model": route, **data.draw(bodies)}
    r = httpx.post(gw.base_url + path, json=body, timeout=30)
    assert r.status_code == 200, r.text
    wire, sent = provider.requests[-1]
    (validate_messages if wire.endswith("/messages") else validate_chat)(sent)


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.split("\n") if line.startswith("data: {")]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_calls_a_provider_sent_without_ids_reach_clients_with_ids_of_their_own(
    gw: Any, fresh: Provider, stream: bool
) -> None:
    """Some OpenAI-compatible providers send a call's ``id`` as null. A Responses client answers a
    call by its ``call_id``, which was the string "None" for every call of every turn; a Gemini
    client's ``functionCall.id`` was "None" too (Google's own calls may carry no id at all)."""
    calls = [Call(None, "now", ["{}"]), Call(None, "later", ['{"a": 1}'])]  # type: ignore[arg-type]
    fresh.answer = Answer(calls=calls, finish="tool_calls")
    body = {"model": "chat", "input": "hi", "stream": stream, "store": False}
    r = httpx.post(f"{gw.base_url}/v1/responses", json=body, timeout=30)
    assert r.status_code == 200, r.text
    if stream:
        done = [e for e in _events(r.text) if e.get("type") == "response.completed"]
        output = done[0]["response"]["output"]
    else:
        output = r.json()["output"]
    ids = [item["call_id"] for item in output if item["type"] == "function_call"]
    assert len(set(ids)) == 2 and "None" not in ids, ids

    path = "streamGenerateContent?alt=sse" if stream else "generateContent"
    gemini = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    r = httpx.post(f"{gw.base_url}/v1beta/models/chat:{path}", json=gemini, timeout=30)
    assert r.status_code == 200, r.text
    answers = _events(r.text) if stream else [r.json()]
    parts = [p for a in answers for c in a["candidates"] for p in c["content"]["parts"]]
    called = [p["functionCall"] for p in parts if "functionCall" in p]
    assert [c["name"] for c in called] == ["now", "later"]
    assert all(c.get("id") != "None" for c in called), called


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_calls_a_provider_sent_without_ids_reach_a_messages_client_with_ids_of_their_own(
    gw: Any, fresh: Provider, stream: bool
) -> None:
    """A Messages client of a chat provider that sends a call's ``id`` as null got each such
    call as a ``tool_use`` with id ``""`` (every call of every turn the same): Anthropic
    requires an id, and a client pairs each ``tool_result`` with its call by it. Each now has
    an id of its own (as a Responses client's does), which the next turn's results name and
    the provider is sent."""
    calls = [Call(None, "now", ["{}"]), Call(None, "later", ['{"a": 1}'])]  # type: ignore[arg-type]
    fresh.answer = Answer(calls=calls, finish="tool_calls")
    client = anthropic.Anthropic(base_url=gw.base_url, api_key="unused", max_retries=0)
    ask: dict[str, Any] = {
        "model": "chat",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
    }

    def called() -> list[Any]:
        if not stream:
            return client.messages.create(**ask).content
        with client.messages.stream(**ask) as events:
            for _ in events:
                pass
            return events.get_final_message().content

    first, second = called(), called()
    ids = [b.id for b in first if b.type == "tool_use"]
    assert [b.name for b in first if b.type == "tool_use"] == ["now", "later"]
    again = [b.id for b in second if b.type == "tool_use"]
    assert len(set(ids + again)) == 4, (ids, again)
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", i) for i in ids), ids

    fresh.answer = Answer(text=["done"])
    blocks = [b.model_dump(include={"type", "id", "name", "input"}) for b in first]
    results = [{"type": "tool_result", "tool_use_id": i, "content": f"r{i}"} for i in ids]
    turns = [{"role": "assistant", "content": blocks}, {"role": "user", "content": results}]
    client.messages.create(**{**ask, "messages": [*ask["messages"], *turns]})
    sent = fresh.requests[-1][1]["messages"]
    assert [c["id"] for c in sent[1]["tool_calls"]] == ids
    assert [(m["tool_call_id"], m["content"]) for m in sent[2:]] == [(i, f"r{i}") for i in ids]


# --- calls a chat provider streams interleaved --------------------------------------------------


def _interleaved(answer: Answer) -> bytes:
    """``answer``'s chat stream with its calls' fragments interleaved by ``index`` (the first
    fragment of each, then the second of each, ...) and a piece of text between a call's
    fragments: chat's stream numbers each fragment with its call, so nothing says a call is
    over before the finish."""
    chunks = chat_chunks(answer)
    head = [c for c in chunks if not c["choices"] or "tool_calls" not in c["choices"][0]["delta"]]
    calls = [c for c in chunks if c not in head]
    by_call: dict[int, list[dict[str, Any]]] = {}
    for c in calls:
        by_call.setdefault(c["choices"][0]["delta"]["tool_calls"][0]["index"], []).append(c)
    rounds = itertools.zip_longest(*by_call.values())
    mixed = [c for r in rounds for c in r if c is not None]
    late = {**mixed[0], "choices": [{"index": 0, "delta": {"content": "!"}, "finish_reason": None}]}
    mixed.insert(1, late)
    *start, finish, usage = head
    return sse([*start, *mixed, finish, usage], named=False) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("direction", ["messages-on-chat", "responses-on-chat", "gemini-on-chat"])
def test_calls_streamed_interleaved_reach_each_client_whole(
    gw: Any, fresh: Provider, direction: str
) -> None:
    """A chat provider may stream parallel calls' fragments interleaved, each numbered by its
    ``index``, and text between a call's fragments. A Messages client got a new ``tool_use``
    block each time the stream went back to a call already left (its id and name empty, the
    arguments cut apart into invalid JSON): the translation streamed each call as a block,
    closed when another call or text began. Responses and Gemini clients, whose translations
    gather calls whole, read them right."""
    calls = [
        Call("call_a", "get_weather", ['{"city"', ': "Par', 'is", "n": 1}']),
        Call("call_b", "now", ['{"ci', 'ty": "Oslo"', "}"]),
        Call("call_c", "get_weather", ["{}"]),
    ]
    answer = Answer(text=["Let me ", "check."], calls=calls, finish="tool_calls")
    fresh.answer, fresh.raw = answer, {"chat": _interleaved(answer)}
    read, _ = CLIENTS[direction]
    got = read(gw, answer, True)
    assert got.calls == [(c.id, c.name, c.args) for c in calls]
    assert got.text == "Let me check.!"
    assert (got.finish, got.prompt, got.completion) == ("tool_calls", 40, 7)
