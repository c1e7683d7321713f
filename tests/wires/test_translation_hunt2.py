"""Translations between a client's wire and a provider's, on shapes the first hunt
(tests/wires/test_translation_hunt.py) does not draw: what a provider refuses or a client
misreads once a conversation goes round a second time, and the fields a client steers with.

routefit in process (``run_inprocess``) before the first hunt's scripted provider, which answers
each request in the wire it was asked in and keeps what it was sent; the clients are their own
SDKs (``openai``, ``anthropic``) or Gemini's REST shape read as ``google.genai`` types.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pydantic
import pytest
import yaml
from inprocess import run_inprocess
from test_translation_hunt import ROUTES, Answer, Call, chat_chunks, chat_whole, sse
from test_translation_hunt import Provider as Scripted

from proxy.sim.wire_anthropic import validate as validate_messages
from proxy.sim.wire_openai import validate_chat
from proxy.transports.mock import MockTransport

#: A route to OpenAI's own API, whose reasoning models refuse ``max_tokens``.
GPT5 = {
    "model_name": "gpt5",
    "litellm_params": {"model": "openai/gpt-5", "api_key": "sk-prov-0123456789abcdef"},
    "model_info": {"max_input_tokens": 128_000, "max_output_tokens": 16_384},
}


class Provider(Scripted):
    """The first hunt's provider; ``whole``, when set, is its whole chat answer instead."""

    def __init__(self) -> None:
        super().__init__()
        self.whole: dict[str, Any] | None = None

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        answered = await super().__call__(request)
        if self.whole is None or json.loads(request.content).get("stream"):
            return answered
        return httpx.Response(200, json=self.whole)


@pytest.fixture(scope="module")
def provider() -> Provider:
    return Provider()


@pytest.fixture
def fresh(provider: Provider) -> Provider:
    """The module's provider, answering the default answer again."""
    provider.answer, provider.cut, provider.raw, provider.whole = Answer(), 0, {}, None
    provider.requests.clear()
    return provider


@pytest.fixture(scope="module")
def gw(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    path = tmp_path_factory.mktemp("hunt2") / "routefit.yaml"
    path.write_text(
        yaml.safe_dump(
            {"model_list": [*ROUTES, GPT5], "routefit_settings": {"store_path": ":memory:"}}
        )
    )
    with run_inprocess(path, provider=lambda cfg: {"transport": MockTransport(provider)}) as gw:
        yield gw


# --- whitespace-only text to Anthropic ----------------------------------------------------------

TOOLS_CHAT = [
    {
        "type": "function",
        "function": {"name": "now", "parameters": {"type": "object", "properties": {}}},
    }
]


def _spoken(messages: list[dict[str, Any]]) -> list[str]:
    """The messages (``where``) whose text blocks are all whitespace: Anthropic refuses each
    with 400 "messages: text content blocks must contain non-whitespace text" (its answer to
    such a block, alone or beside a tool_use, as clients that replayed one measured it:
    LibreChat-AI/agents#124, NousResearch/hermes-agent#69517, anomalyco/opencode#31259)."""
    bad = []
    for i, message in enumerate(messages):
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        texts = [b["text"] for b in blocks if b.get("type") == "text"]
        if texts and not any(t.strip() for t in texts):
            bad.append(f"messages[{i}]")
    return bad


def test_claudes_whitespace_before_a_call_goes_back_to_claude_as_it_takes_it(
    gw: Any, fresh: Provider
) -> None:
    """Claude may write a text block of whitespace only before a ``tool_use`` ("\\n\\n"); a chat
    client on a Claude route reads it as the message's ``content`` and sends the turn back
    with the call's result, and routefit's mapping made it a text block again: Anthropic
    refuses a message whose text is whitespace only (400 "text content blocks must contain
    non-whitespace text"), so every later turn of the session failed. Whitespace the message
    says nothing else beside is not sent (https://docs.anthropic.com/en/api/messages: a
    ``text`` block's text; the refusal is Anthropic's, quoted in ``_spoken``)."""
    fresh.answer = Answer(
        text=["\n\n"], calls=[Call("toolu_01", "now", ["{}"])], finish="tool_calls"
    )
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    ask: dict[str, Any] = {
        "model": "claude",
        "messages": [{"role": "user", "content": "what time is it?"}],
        "tools": TOOLS_CHAT,
        "max_tokens": 100,
    }
    first = client.chat.completions.create(**ask).choices[0].message
    assert first.content == "\n\n" and first.tool_calls
    fresh.answer = Answer(text=["Noon."])
    turn = [
        first.model_dump(include={"role", "content", "tool_calls"}),
        {"role": "tool", "tool_call_id": "toolu_01", "content": "12:00"},
        {"role": "user", "content": "and now?"},
    ]
    client.chat.completions.create(**{**ask, "messages": [*ask["messages"], *turn]})
    path, sent = fresh.requests[-1]
    assert path.endswith("/messages")
    assert _spoken(sent["messages"]) == []
    assert [[b["type"] for b in m["content"]] for m in sent["messages"]] == [
        ["text"],
        ["tool_use"],
        ["tool_result", "text"],
    ]
    assert sent["messages"][2]["content"][1]["text"] == "and now?"


@pytest.mark.parametrize("wire", ["responses", "gemini"])
def test_whitespace_beside_a_call_from_any_client_reaches_claude_as_it_takes_it(
    gw: Any, fresh: Provider, wire: str
) -> None:
    """The same turn from a Responses client (an assistant ``output_text`` of "\\n" before its
    ``function_call``) and a Gemini client (a model content's ``{"text": "\\n"}`` part before
    its ``functionCall``) on a Claude route: both go through chat to Anthropic, and reached it
    as a whitespace-only text block Anthropic refuses."""
    if wire == "responses":
        path = "/v1/responses"
        body: dict[str, Any] = {
            "model": "claude",
            "store": False,
            "tools": [{"type": "function", **TOOLS_CHAT[0]["function"]}],
            "input": [
                {"role": "user", "content": "what time is it?"},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "\n"}],
                },
                {"type": "function_call", "call_id": "c1", "name": "now", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "12:00"},
            ],
        }
    else:
        path = "/v1beta/models/claude:generateContent"
        body = {
            "contents": [
                {"role": "user", "parts": [{"text": "what time is it?"}]},
                {"role": "model", "parts": [{"text": "\n"}, {"functionCall": {"name": "now"}}]},
                {
                    "role": "user",
                    "parts": [{"functionResponse": {"name": "now", "response": {"t": "12"}}}],
                },
            ],
            "tools": [{"functionDeclarations": [{"name": "now"}]}],
        }
    r = httpx.post(gw.base_url + path, json=body, timeout=30)
    assert r.status_code == 200, r.text
    sent = fresh.requests[-1][1]
    assert _spoken(sent["messages"]) == []
    assert [[b["type"] for b in m["content"]] for m in sent["messages"]] == [
        ["text"],
        ["tool_use"],
        ["tool_result"],
    ]
    assert json.dumps(sent).count('"tool_use"') == 1


# --- a JSON answer a Messages client asks for -------------------------------------------------


class Weather(pydantic.BaseModel):
    city: str
    celsius: int


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_messages_clients_json_schema_is_the_chat_providers_response_format(
    gw: Any, fresh: Provider, stream: bool
) -> None:
    """Claude's structured outputs (``output_config.format``, ``{"type": "json_schema",
    "schema": ...}``: https://platform.claude.com/docs/en/build-with-claude/structured-outputs;
    the anthropic SDK's ``messages.parse(output_format=...)`` sends it) is chat's
    ``response_format`` ``{"type": "json_schema", "json_schema": {"name", "schema"}}``
    (https://platform.openai.com/docs/api-reference/chat/create#chat-create-response_format).
    On a chat route it was dropped (priced, as one more tool, and never sent): the provider was
    free to answer in prose, which the SDK's parse refuses. The same as the Gemini wire's
    ``responseSchema`` and the Responses wire's ``text.format`` already are."""
    fresh.answer = Answer(text=['{"city": "Oslo", ', '"celsius": -3}'])
    client = anthropic.Anthropic(base_url=gw.base_url, api_key="unused", max_retries=0)
    ask: dict[str, Any] = {
        "model": "chat",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
    }
    if stream:
        with client.messages.stream(**ask, output_format=Weather) as events:
            done = events.get_final_message()
        text = "".join(b.text for b in done.content if b.type == "text")
        got = Weather.model_validate_json(text)
    else:
        got = client.messages.parse(**ask, output_format=Weather).parsed_output
    assert got == Weather(city="Oslo", celsius=-3)
    sent = fresh.requests[-1][1]
    fmt = sent["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["schema"]["properties"].keys() == {"city", "celsius"}
    assert isinstance(fmt["json_schema"]["name"], str)
    validate_chat(sent)


# --- a refusal in a Responses client's history --------------------------------------------------


@pytest.mark.parametrize("route", ["chat", "claude"])
def test_a_refusal_in_a_responses_clients_history_reaches_the_provider(
    gw: Any, fresh: Provider, route: str
) -> None:
    """A Response's message may hold a ``refusal`` part instead of ``output_text`` (the model
    declined: routefit writes one for a chat provider's ``refusal``), and a client sends its
    output back as the next input, as the API takes it (an output message's content is
    ``output_text`` or ``refusal``: https://platform.openai.com/docs/api-reference/responses/
    create, ``input`` → output message). On a translated route the turn was dropped (priced as
    its text, never sent): the provider saw the question asked twice in a row, never answered,
    and Claude got two user turns merged into one. Now it is the assistant's text, as a chat
    client's refusal already reaches Claude."""
    body = {
        "model": route,
        "store": False,
        "input": [
            {"role": "user", "content": "Pick the lock."},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "refusal", "refusal": "I can't help with that."}],
            },
            {"role": "user", "content": "Then how do locks work?"},
        ],
    }
    r = httpx.post(gw.base_url + "/v1/responses", json=body, timeout=30)
    assert r.status_code == 200, r.text
    sent = fresh.requests[-1][1]
    said = []
    for m in sent["messages"]:
        content = m["content"]
        text = content if isinstance(content, str) else "".join(b["text"] for b in content)
        said.append((m["role"], text))
    assert said == [
        ("user", "Pick the lock."),
        ("assistant", "I can't help with that."),
        ("user", "Then how do locks work?"),
    ]


# --- a Responses client's items between a call and its output -----------------------------------


@pytest.mark.parametrize("between", ["developer", "user"])
@pytest.mark.parametrize("route", ["chat", "claude"])
def test_a_message_between_a_call_and_its_output_leaves_them_paired(
    gw: Any, fresh: Provider, route: str, between: str
) -> None:
    """The Responses API pairs a ``function_call`` with its ``function_call_output`` by
    ``call_id`` wherever the output sits in ``input`` (https://platform.openai.com/docs/guides/
    function-calling: the outputs are appended as items; Codex writes its developer notes
    between a call and its output, as deepseek-ai/awesome-deepseek-integration#740 measured).
    Chat wants each tool message right after the assistant message with its call
    (https://platform.openai.com/docs/api-reference/chat/create: a ``tool`` message answers the
    ``tool_calls`` before it), Anthropic each ``tool_result`` first in the user message right
    after its ``tool_use`` (https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/
    implement-tool-use). The translation kept the input's order: a chat provider got a tool
    message after a user or system message (OpenAI's 400), Claude a user message whose text came
    before its tool_result. Each output now follows its call; what came between, after."""
    tools = [{"type": "function", **TOOLS_CHAT[0]["function"]}]
    body = {
        "model": route,
        "store": False,
        "tools": tools,
        "input": [
            {"role": "user", "content": "what time is it?"},
            {"type": "function_call", "call_id": "c1", "name": "now", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "now", "arguments": "{}"},
            {"role": between, "content": "approved by the user"},
            {"type": "function_call_output", "call_id": "c2", "output": "12:01"},
            {"type": "function_call_output", "call_id": "c1", "output": "12:00"},
            {"role": "user", "content": "thanks"},
        ],
    }
    r = httpx.post(gw.base_url + "/v1/responses", json=body, timeout=30)
    assert r.status_code == 200, r.text
    path, sent = fresh.requests[-1]
    if route == "chat":
        validate_chat(sent)
        roles = [m["role"] for m in sent["messages"]]
        said = "system" if between == "developer" else between
        assert roles == ["user", "assistant", "tool", "tool", said, "user"]
        return
    assert path.endswith("/messages")
    validate_messages(sent)
    after = sent["messages"][2]["content"]
    kinds = [b["type"] for b in after]
    assert kinds[:2] == ["tool_result", "tool_result"], kinds
    assert {b["tool_use_id"] for b in after[:2]} == {"c1", "c2"}


# --- the output cap a translation names -----------------------------------------------------------


@pytest.mark.parametrize("client", ["messages", "gemini"])
def test_a_translated_request_to_openai_names_its_cap_as_openai_takes_it(
    gw: Any, fresh: Provider, client: str
) -> None:
    """OpenAI's chat API documents ``max_tokens`` as deprecated in favour of
    ``max_completion_tokens`` and "not compatible with o-series models"
    (https://platform.openai.com/docs/api-reference/chat/create#chat-create-max_tokens); its
    reasoning models (o-series, gpt-5) refuse it with 400 "Unsupported parameter: 'max_tokens'
    is not supported with this model. Use 'max_completion_tokens' instead.". A Messages client
    (Claude Code, whose ``max_tokens`` is required) or a Gemini client on an ``openai/gpt-5``
    route was translated to a chat body capped by ``max_tokens``: every request refused. The
    cap goes as ``max_completion_tokens`` to OpenAI's API, as ``max_tokens`` to every other
    chat provider (not all OpenAI-compatible servers know the new name), and a chat client's
    own body is sent as it wrote it."""
    if client == "messages":
        path = "/v1/messages"
        body: dict[str, Any] = {
            "max_tokens": 300,
            "messages": [{"role": "user", "content": "hi"}],
        }
    else:
        path = "/v1beta/models/{route}:generateContent"
        body = {
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "generationConfig": {"maxOutputTokens": 300},
        }
    for route, cap in (("gpt5", "max_completion_tokens"), ("chat", "max_tokens")):
        ask = {**body, "model": route} if client == "messages" else body
        r = httpx.post(gw.base_url + path.format(route=route), json=ask, timeout=30)
        assert r.status_code == 200, r.text
        sent = fresh.requests[-1][1]
        caps = {k: sent[k] for k in ("max_tokens", "max_completion_tokens") if k in sent}
        assert caps == {cap: 300}, route
    chat = {"model": "gpt5", "max_tokens": 300, "messages": [{"role": "user", "content": "hi"}]}
    assert httpx.post(gw.v1 + "/chat/completions", json=chat, timeout=30).status_code == 200
    assert fresh.requests[-1][1] == {**chat, "model": "gpt-5"}


def test_the_dry_run_shows_the_cap_as_the_provider_is_sent_it(gw: Any, fresh: Provider) -> None:
    """``POST /routefit/fit`` showed the client wire's own body: a Messages client's
    ``max_tokens`` for a gpt-5 route, which is sent ``max_completion_tokens`` (the field
    OpenAI's reasoning models take). It now shows what goes, as the send above found it."""
    body = {"model": "gpt5", "max_tokens": 300, "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(gw.base_url + "/routefit/fit?wire=messages", json=body, timeout=30)
    assert r.status_code == 200, r.text
    shown = r.json()["request"]
    assert httpx.post(gw.base_url + "/v1/messages", json=body, timeout=30).status_code == 200
    sent = fresh.requests[-1][1]
    caps = ("max_tokens", "max_completion_tokens")
    assert {k: shown[k] for k in caps if k in shown} == {k: sent[k] for k in caps if k in sent}
    assert shown["messages"] == sent["messages"]


# --- the stop sequence a chat provider matched --------------------------------------------------


def _matched(answer: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """A chat answer (whole, or the chunk that finishes a stream) whose choice says more."""
    return {**answer, "choices": [{**c, **extra} for c in answer["choices"]]}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    ("said", "reason", "sequence"),
    [
        ({"stop_reason": "###"}, "stop_sequence", "###"),  # vLLM's name for it
        ({"matched_stop": "###"}, "stop_sequence", "###"),  # SGLang's
        ({"stop_reason": 128001}, "end_turn", None),  # a stop token (vLLM: its id)
        ({}, "end_turn", None),
    ],
    ids=["vllm", "sglang", "token", "unsaid"],
)
def test_a_stop_sequence_the_provider_names_is_the_messages_clients_stop_sequence(
    gw: Any,
    fresh: Provider,
    stream: bool,
    said: dict[str, Any],
    reason: str,
    sequence: str | None,
) -> None:
    """Anthropic ends an answer cut at one of ``stop_sequences`` with ``stop_reason:
    "stop_sequence"`` and that sequence in ``stop_sequence``
    (https://docs.anthropic.com/en/api/messages: "stop_sequence: one of your provided custom
    stop_sequences was generated"). Chat says ``stop`` for it as for a natural end, but the
    OpenAI-compatible servers that serve open models name the sequence they matched beside it
    (vLLM's choice ``stop_reason``: "the stop string or token id that caused the completion to
    stop"; SGLang's ``matched_stop``). A Messages client on such a route always read
    ``end_turn``, ``stop_sequence`` null: a client that parses up to its stop sequence took
    every cut answer for a finished one."""
    answer = Answer(text=["Q: 1+1", "\nA: 2\n"])
    whole = chat_whole(answer)
    if stream:
        chunks = chat_chunks(answer)
        chunks[-2] = _matched(chunks[-2], said)  # the finish; the usage comes after it
        fresh.raw = {"chat": sse(chunks, named=False) + b"data: [DONE]\n\n"}
    client = anthropic.Anthropic(base_url=gw.base_url, api_key="unused", max_retries=0)
    ask: dict[str, Any] = {
        "model": "chat",
        "max_tokens": 100,
        "stop_sequences": ["###"],
        "messages": [{"role": "user", "content": "Q: 1+1"}],
    }
    if stream:
        with client.messages.stream(**ask) as events:
            done = events.get_final_message()
    else:
        fresh.whole = _matched(whole, said)
        done = client.messages.create(**ask)
    assert fresh.requests[-1][1]["stop"] == ["###"]
    assert (done.stop_reason, done.stop_sequence) == (reason, sequence)
    assert "".join(b.text for b in done.content if b.type == "text") == answer.content


# --- the functions a Gemini client allows -------------------------------------------------------


@pytest.mark.parametrize(("mode", "asked"), [("ANY", "required"), ("VALIDATED", "auto")])
@pytest.mark.parametrize("route", ["chat", "claude"])
def test_the_functions_a_gemini_client_allows_are_the_only_ones_offered(
    gw: Any, fresh: Provider, route: str, mode: str, asked: str
) -> None:
    """``toolConfig.functionCallingConfig.allowedFunctionNames`` "limits the functions the model
    will call ... When set, model will predict a function call from only allowed function
    names" (https://ai.google.dev/api/caching#FunctionCallingConfig; for ``ANY`` and
    ``VALIDATED``). One allowed name already became chat's named ``tool_choice``; several
    became ``required`` (``auto``) over every declared function, so the model could call one
    the client had ruled out, which the client then had to run or refuse. The functions
    offered are the allowed ones: the limit in the words every chat provider (and Claude,
    through chat) takes."""
    names = ["now", "get_weather", "delete_everything"]
    body = {
        "contents": [{"role": "user", "parts": [{"text": "what time is it in Oslo?"}]}],
        "tools": [{"functionDeclarations": [{"name": n} for n in names]}],
        "toolConfig": {"functionCallingConfig": {"mode": mode, "allowedFunctionNames": names[:2]}},
    }
    r = httpx.post(f"{gw.base_url}/v1beta/models/{route}:generateContent", json=body, timeout=30)
    assert r.status_code == 200, r.text
    _offered_only(fresh, route, names[:2], asked)


# --- call ids Anthropic takes -------------------------------------------------------------------

ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


@pytest.mark.parametrize("client", ["chat", "responses"])
def test_call_ids_of_another_provider_reach_claude_as_ids_it_takes(
    gw: Any, fresh: Provider, client: str
) -> None:
    """Anthropic takes a ``tool_use`` id (and so a ``tool_result``'s ``tool_use_id``) only if
    it matches ``^[a-zA-Z0-9_-]+$`` (400 "messages.1.content.0.tool_use.id: String should match
    pattern"; the API reference's ``ToolUseBlockParam.id``:
    https://docs.anthropic.com/en/api/messages). Kimi's and other open models' servers write
    call ids such as ``functions.now:0`` (Moonshot's tool-calling guide), which a client's
    history carries into a Claude route (a model switch, a fallback): the mapping sent them as
    they were, and Claude refused the whole conversation. Each id is now written in
    Anthropic's alphabet, the same way for a call and its result (so they still pair), and
    two ids never become one."""
    ids = ["functions.now:0", "functions.now:1", "call/now 2"]
    if client == "chat":
        calls = [
            {"id": i, "type": "function", "function": {"name": "now", "arguments": "{}"}}
            for i in ids
        ]
        body: dict[str, Any] = {
            "model": "claude",
            "max_tokens": 50,
            "tools": TOOLS_CHAT,
            "messages": [
                {"role": "user", "content": "what time is it?"},
                {"role": "assistant", "content": None, "tool_calls": calls},
                *({"role": "tool", "tool_call_id": i, "content": f"r{i}"} for i in ids),
            ],
        }
        path = "/v1/chat/completions"
    else:
        items: list[dict[str, Any]] = [{"role": "user", "content": "what time is it?"}]
        items += [
            {"type": "function_call", "call_id": i, "name": "now", "arguments": "{}"} for i in ids
        ]
        items += [{"type": "function_call_output", "call_id": i, "output": f"r{i}"} for i in ids]
        body = {
            "model": "claude",
            "store": False,
            "tools": [{"type": "function", **TOOLS_CHAT[0]["function"]}],
            "input": items,
        }
        path = "/v1/responses"
    r = httpx.post(gw.base_url + path, json=body, timeout=30)
    assert r.status_code == 200, r.text
    sent = fresh.requests[-1][1]
    validate_messages(sent)
    uses = [b["id"] for b in sent["messages"][1]["content"]]
    results = {b["tool_use_id"]: b["content"] for b in sent["messages"][2]["content"]}
    assert all(ANTHROPIC_ID.match(u) for u in uses), uses
    assert len(set(uses)) == len(ids)
    assert [results[u] for u in uses] == [f"r{i}" for i in ids]


@pytest.mark.parametrize(("mode", "asked"), [("required", "required"), ("auto", "auto")])
@pytest.mark.parametrize("route", ["chat", "claude"])
def test_the_tools_a_responses_client_allows_are_the_only_ones_offered(
    gw: Any, fresh: Provider, route: str, mode: str, asked: str
) -> None:
    """``tool_choice: {"type": "allowed_tools", "tools": [...], "mode": ...}`` "constrains the
    tools available to the model to a pre-defined set"
    (https://platform.openai.com/docs/api-reference/responses/create#responses-create-tool_choice).
    On a translated route its mode was carried and its set was not: every tool was offered, and
    the model could call one the client had ruled out. The tools offered are the allowed ones."""
    names = ["now", "get_weather", "delete_everything"]
    tools = [{"type": "function", "name": n, "parameters": {"type": "object"}} for n in names]
    allowed = [{"type": "function", "name": n} for n in names[:2]]
    body = {
        "model": route,
        "store": False,
        "input": "what time is it in Oslo?",
        "tools": tools,
        "tool_choice": {"type": "allowed_tools", "mode": mode, "tools": allowed},
    }
    r = httpx.post(gw.base_url + "/v1/responses", json=body, timeout=30)
    assert r.status_code == 200, r.text
    _offered_only(fresh, route, names[:2], asked)


def _offered_only(fresh: Any, route: str, allowed: list[str], asked: str) -> None:
    """The provider's last request offered only the ``allowed`` tools, with the calling mode
    ``asked`` in its own words (chat's, or Messages' ``any`` for ``required``), and is valid."""
    path, sent = fresh.requests[-1]
    if route == "chat":
        validate_chat(sent)
        assert [t["function"]["name"] for t in sent["tools"]] == allowed
        assert sent["tool_choice"] == asked
    else:
        assert path.endswith("/messages")
        validate_messages(sent)
        assert [t["name"] for t in sent["tools"]] == allowed
        assert sent["tool_choice"] == {"type": {"required": "any"}.get(asked, asked)}
