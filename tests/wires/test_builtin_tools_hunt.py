"""What routefit does with the tools the agent CLIs use that are not plain function tools:
Anthropic's server tools (web search, web fetch, code execution), Responses' hosted and custom
tools, Gemini's built-in tools — natively (passed through, charged and learnt from as the
provider states them) and translated (carried, or refused in the client's words).

routefit in process before the provider simulator (``proxy.transports.mock``), its answer
changed by a test where the provider does what the simulator does not (a server tool that ran);
what is checked is what the client gets, what the team is charged
(``/routefit/teams/{id}/usage``) and what routefit learnt (the count endpoint, anchored on the
provider's count of a prompt the team sent).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
import pytest
from billed import KEY, Billed, billed, deployment

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


#: A route on each of the simulator's provider wires, and a chat route that is not OpenAI's.
MODELS = [
    deployment("gpt", "openai/gpt-4o", "http://sim.local/v1"),
    deployment("chat", "deepseek/gpt-4o", "http://sim.local/v1"),
    deployment("claude", "anthropic/claude-sonnet-4-5", "http://sim.local"),
    deployment("gem", "gemini/gemini-sim", "http://sim.local/v1beta"),
]


def gateway() -> AbstractAsyncContextManager[Billed]:
    return billed(MODELS)


# --- Anthropic's server tools: what they read is in input_tokens --------------------------------

WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
#: Tokens of search results the provider says it read (inside ``input_tokens``).
RESULTS = 1_500


class Searched:
    """The simulator's Messages answer, whole or streamed, as Anthropic states a turn in which
    Claude ran its web search: ``input_tokens`` holding the results' ``RESULTS`` tokens and
    ``usage.server_tool_use.web_search_requests`` 1 (Anthropic's web search tool, "Usage and
    pricing": https://platform.claude.com/docs/en/agents-and-tools/tool-use/web-search-tool).
    A stream states them in ``message_delta``, whose counts are cumulative."""

    async def __call__(self, request: httpx.Request, sim: Any) -> httpx.Response:
        prompt = 0

        def whole(data: dict[str, Any]) -> None:
            data["usage"]["input_tokens"] += RESULTS
            data["usage"]["server_tool_use"] = {"web_search_requests": 1}

        def event(data: dict[str, Any]) -> None:
            nonlocal prompt
            if data.get("type") == "message_start":
                prompt = data["message"]["usage"]["input_tokens"]
            if data.get("type") == "message_delta":
                data["usage"]["input_tokens"] = prompt + RESULTS
                data["usage"]["server_tool_use"] = {"web_search_requests": 1}

        return await _edited(await sim(request), whole, event)


async def _edited(
    response: httpx.Response,
    whole: Callable[[dict[str, Any]], None],
    event: Callable[[dict[str, Any]], None],
) -> httpx.Response:
    """The simulator's answer with its JSON edited in place: a whole answer by ``whole``, each
    event of a stream by ``event``."""
    raw = await response.aread()
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        data = json.loads(raw)
        whole(data)
        return httpx.Response(response.status_code, json=data)
    out = []
    for line in raw.decode().split("\n"):
        if line.startswith("data:"):
            data = json.loads(line[5:])
            event(data)
            line = "data: " + json.dumps(data)
        out.append(line)
    headers = {"content-type": "text/event-stream"}
    return httpx.Response(response.status_code, content="\n".join(out), headers=headers)


def _input_tokens(response: httpx.Response) -> int:
    """The last ``input_tokens`` a Messages answer states, whole or streamed."""
    if not response.headers["content-type"].startswith("text/event-stream"):
        return int(response.json()["usage"]["input_tokens"])
    stated = 0
    for line in response.text.splitlines():
        if line.startswith("data:"):
            event = json.loads(line[5:])
            usage = event.get("usage") or (event.get("message") or {}).get("usage") or {}
            stated = usage.get("input_tokens", stated)
    return int(stated)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_turn_claudes_web_search_read_is_charged_but_never_taken_for_the_prompts_count(
    stream: bool,
) -> None:
    """Anthropic counts what its server tools read (a search's results, a fetched page) in
    ``input_tokens``, saying only that a tool ran (``usage.server_tool_use``). routefit learnt
    that count as the prompt's: the prompt's anchor (and a calibration sample) became the prompt
    and the results, 2,001 tokens for a prompt of 501, and the next turn of the conversation was
    priced from it (``x-routefit-prompt-tokens`` 2,001; near the window, cut or refused as too
    long). The team is charged the count as stated; the prompt keeps its own."""
    async with gateway() as gw:
        body = {
            "model": "claude",
            "max_tokens": 200,
            "stream": stream,
            "tools": [WEB_SEARCH],
            "messages": [{"role": "user", "content": "What is the weather in Paris today? " * 20}],
        }
        counted = {k: v for k, v in body.items() if k not in ("max_tokens", "stream")}
        plain = await gw.post("/v1/messages", body)  # the provider's count of the prompt, learnt
        assert plain.status_code == 200, plain.text
        prompt = (await gw.post("/v1/messages/count_tokens", counted)).json()["input_tokens"]
        assert prompt == _input_tokens(plain)  # the anchor: the provider's count of it

        gw.provider.script = Searched()
        before = await gw.used()
        searched = await gw.post("/v1/messages", body)
        assert searched.status_code == 200, searched.text
        assert searched.text.count('"web_search_requests"') == 1  # the provider's, passed on
        gw.provider.script = None

        charged = await gw.used() - before
        assert charged >= prompt + RESULTS  # every token the provider states it read
        assert (await gw.post("/v1/messages/count_tokens", counted)).json() == {
            "input_tokens": prompt
        }
        again = await gw.post("/v1/messages", body)
        assert int(again.headers["x-routefit-prompt-tokens"]) == prompt


# --- Anthropic's own tools forced on a route that cannot run them -------------------------------

GET = {
    "name": "get",
    "description": "Fetch a record by its id.",
    "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}},
}
BASH = {"type": "bash_20250124", "name": "bash"}


@pytest.mark.parametrize(
    ("tools", "choice", "named"),
    [
        ([GET, WEB_SEARCH], {"type": "tool", "name": "web_search"}, "web_search_20250305"),
        ([WEB_SEARCH], {"type": "tool", "name": "web_search"}, "web_search_20250305"),
        ([GET, BASH], {"type": "tool", "name": "bash"}, "bash_20250124"),
        ([WEB_SEARCH], {"type": "any"}, "web_search_20250305"),
    ],
)
async def test_a_tool_choice_a_chat_route_cannot_honour_is_refused_naming_the_tool(
    tools: list[dict[str, Any]], choice: dict[str, Any], named: str
) -> None:
    """A Messages request that requires a call of one of Anthropic's own tools (a server tool,
    ``web_search_20250305``; a typed client tool, ``bash_20250124``), or requires a call
    (``any``) when it has no other, cannot be honoured on a chat route: those tools are not
    sent (docs/wires.md, "Lost in translation"). The choice went out naming a function the
    provider was not offered (its 400 in chat's words, "Invalid value for 'tool_choice':
    function 'web_search' is not one of the 'tools'"), or, with no function left, was dropped
    with the tools and the model answered unforced: a search the client required, never run.
    Now routefit's 400 in Anthropic's shape names the tool, and nothing reaches the provider
    or is charged; an Anthropic route is sent the choice as it came."""
    async with gateway() as gw:
        body = {
            "model": "chat",
            "max_tokens": 200,
            "tools": tools,
            "tool_choice": choice,
            "messages": [{"role": "user", "content": "What is the weather in Paris today?"}],
        }
        before = await gw.used()
        refused = await gw.post("/v1/messages", body)
        assert refused.status_code == 400, refused.text
        error = refused.json()
        assert error["type"] == "error"
        assert error["error"]["type"] == "invalid_request_error"
        assert named in error["error"]["message"]
        assert gw.provider.sent == []
        assert await gw.used() == before
        # the dry run says the same (it showed a 500: the refusal raised while writing)
        dry = await gw.post("/routefit/fit?wire=messages", body)
        assert (dry.status_code, dry.json()) == (400, error), dry.text

        native = await gw.post("/v1/messages", {**body, "model": "claude"})
        assert native.status_code == 200, native.text
        assert gw.provider.sent[-1]["tool_choice"] == choice


async def test_a_tool_choice_naming_a_function_still_reaches_a_chat_route() -> None:
    """The function tools beside Anthropic's own are still sent, and a choice of one of them
    still steers the chat provider (``tool_choice`` as chat names a function)."""
    async with gateway() as gw:
        body = {
            "model": "chat",
            "max_tokens": 200,
            "tools": [GET, WEB_SEARCH],
            "tool_choice": {"type": "tool", "name": "get"},
            "messages": [{"role": "user", "content": "Fetch record 7."}],
        }
        answered = await gw.post("/v1/messages", body)
        assert answered.status_code == 200, answered.text
        sent = gw.provider.sent[-1]
        assert [t["function"]["name"] for t in sent["tools"]] == ["get"]
        assert sent["tool_choice"] == {"type": "function", "function": {"name": "get"}}


# --- Responses: a namespace's tools on a translated route ---------------------------------------

CRM = {
    "type": "namespace",
    "name": "crm",
    "description": "The customer records.",
    "tools": [
        {
            "type": "function",
            "name": "lookup",
            "description": "A customer by id.",
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
        },
        {"type": "custom", "name": "note", "description": "A free-form note on the customer."},
    ],
}


@pytest.mark.parametrize("model", ["chat", "claude"])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("choice", "kind"), [("lookup", "function_call"), ("note", "custom_tool_call")]
)
async def test_a_call_of_a_namespaced_tool_comes_back_with_its_namespace(
    model: str, stream: bool, choice: str, kind: str
) -> None:
    """A Responses ``namespace`` groups tools under a name the call carries back: OpenAI's
    ``function_call`` and ``custom_tool_call`` have a ``namespace`` ("The namespace of the
    function to run"; the ``openai`` SDK's ``ResponseFunctionToolCall.namespace``), and Codex
    dispatches its MCP tools by both. A translated route sends the namespace's tools as plain
    functions (chat has no namespaces), and the call came back without it: a call of a tool
    the client does not have by that name alone. Now it carries the namespace it was offered
    in, whole and streamed, read by the ``openai`` SDK."""
    import openai

    async with gateway() as gw:
        client = openai.AsyncOpenAI(
            base_url="http://routefit/v1", api_key=KEY, http_client=gw.client, max_retries=0
        )
        tool_choice: Any = {
            "type": "allowed_tools",
            "mode": "required",
            "tools": [{"name": choice}],
        }
        ask: dict[str, Any] = {
            "model": model,
            "input": "Look up customer 7 and note the call.",
            "tools": [CRM],
            "tool_choice": tool_choice,
            "store": False,
        }
        if stream:
            async with client.responses.stream(**ask) as events:
                async for _ in events:
                    pass
                answer = await events.get_final_response()
        else:
            answer = await client.responses.create(**ask)
        calls = [item for item in answer.output if item.type == kind]
        assert [(c.name, c.namespace) for c in calls] == [(choice, "crm")]


def _search(description: str) -> dict[str, Any]:
    params = {"type": "object", "properties": {"q": {"type": "string"}}}
    return {"type": "function", "name": "search", "description": description, "parameters": params}


#: Codex's MCP tools: a namespace per server, ``mcp__<server>`` (openai/codex), whose tools may
#: share a name with another server's or with a tool of Codex's own.
SEARCHES = [
    {
        "type": "namespace",
        "name": "mcp__web",
        "description": "The web.",
        "tools": [_search("Web.")],
    },
    {"type": "namespace", "name": "mcp__docs", "description": "Docs.", "tools": [_search("Docs.")]},
    _search("The workspace."),
]


def _history_call(sent: dict[str, Any]) -> str:
    """The name of the call in the history the provider was sent (chat's or Anthropic's)."""
    for message in sent["messages"]:
        for call in message.get("tool_calls") or []:
            return str(call["function"]["name"])
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use":
                return str(block["name"])
    raise AssertionError("no call in the history sent")


@pytest.mark.parametrize("model", ["chat", "claude"])
async def test_tools_of_one_name_in_several_namespaces_reach_a_translated_route_apart(
    model: str,
) -> None:
    """Chat has no namespaces: a translated route sends a namespace's tools as plain
    functions, and two MCP servers' ``search`` (or one beside a ``search`` of the client's own)
    went as functions of one name — Anthropic refuses every such request ("tools: Tool names
    must be unique.", anthropics/claude-code#10687), and a chat provider could reach only one
    of them. Now a namespace's tool whose name another tool has goes as
    ``<namespace>__<name>`` (Codex's own spelling of an MCP tool on chat), its call comes back
    as the client's tool (name and namespace), and the call sent back next turn goes under the
    same name."""
    import openai

    async with gateway() as gw:
        client = openai.AsyncOpenAI(
            base_url="http://routefit/v1", api_key=KEY, http_client=gw.client, max_retries=0
        )
        ask: dict[str, Any] = {"model": model, "tools": SEARCHES, "store": False}
        answer = await client.responses.create(
            **ask, input="Search the web for the weather.", tool_choice="required"
        )
        sent = gw.provider.sent[-1]
        offered = [t["function"]["name"] for t in sent["tools"]] if model == "chat" else None
        if offered is not None:
            assert offered == ["mcp__web__search", "mcp__docs__search", "search"]
        call = next(item for item in answer.output if item.type == "function_call")
        assert (call.name, call.namespace) == ("search", "mcp__web")

        history: list[Any] = [
            {"role": "user", "content": "Search the web for the weather."},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": "search",
                "namespace": "mcp__web",
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny."},
        ]
        await client.responses.create(**ask, input=history)
        assert _history_call(gw.provider.sent[-1]) == "mcp__web__search"


# --- OpenAI's hosted tools: what they read is in input_tokens -----------------------------------

WEB_SEARCH_CALL = {
    "type": "web_search_call",
    "id": "ws_0123",
    "status": "completed",
    "action": {"type": "search", "query": "weather in Paris"},
}


class SearchedResponse:
    """The simulator's Response, whole or streamed, as OpenAI states one in which its web
    search ran: a ``web_search_call`` item in the output and ``input_tokens`` holding the
    "search content tokens, billed at model rates" (OpenAI's pricing for the ``web_search``
    tool, https://platform.openai.com/docs/pricing), ``RESULTS`` of them. A stream states them
    in ``response.completed``."""

    async def __call__(self, request: httpx.Request, sim: Any) -> httpx.Response:
        def searched(answer: dict[str, Any]) -> None:
            answer["output"] = [WEB_SEARCH_CALL, *answer["output"]]
            answer["usage"]["input_tokens"] += RESULTS
            answer["usage"]["total_tokens"] += RESULTS

        def event(data: dict[str, Any]) -> None:
            if data.get("type") == "response.completed":
                searched(data["response"])

        return await _edited(await sim(request), searched, event)


def _response_input_tokens(response: httpx.Response) -> int:
    """The ``input_tokens`` a Response states, whole or in its ``response.completed``."""
    if not response.headers["content-type"].startswith("text/event-stream"):
        return int(response.json()["usage"]["input_tokens"])
    for line in response.text.splitlines():
        if line.startswith("data:") and '"response.completed"' in line:
            return int(json.loads(line[5:])["response"]["usage"]["input_tokens"])
    raise AssertionError("no response.completed")


@pytest.mark.parametrize("stream", [False, True])
async def test_a_response_openais_web_search_read_is_charged_but_never_taken_for_the_prompts(
    stream: bool,
) -> None:
    """OpenAI bills what its hosted tools read (web search's search content tokens, a file
    search's chunks) as input tokens, in ``usage.input_tokens``; the output says only which
    tools ran (``web_search_call`` ...). routefit learnt that count as the prompt's, so after
    one searched turn the prompt's anchor held the results too and the next turn was priced
    from it (``x-routefit-prompt-tokens`` and ``input_tokens`` counts above the prompt by the
    results). The team is charged the count as stated; the prompt keeps its own."""
    async with gateway() as gw:
        body: dict[str, Any] = {
            "model": "gpt",
            "input": "What is the weather in Paris today? " * 60,
            "tools": [{"type": "web_search"}],
            "max_output_tokens": 200,
            "store": False,
            "stream": stream,
        }
        counted = {k: v for k, v in body.items() if k not in ("max_output_tokens", "stream")}
        plain = await gw.post("/v1/responses", body)
        assert plain.status_code == 200, plain.text
        prompt = (await gw.post("/v1/responses/input_tokens", counted)).json()["input_tokens"]
        assert prompt == _response_input_tokens(plain)

        gw.provider.script = SearchedResponse()
        before = await gw.used()
        searched = await gw.post("/v1/responses", body)
        assert searched.status_code == 200, searched.text
        assert _response_input_tokens(searched) == prompt + RESULTS
        gw.provider.script = None

        assert await gw.used() - before >= prompt + RESULTS
        counts = await gw.post("/v1/responses/input_tokens", counted)
        assert counts.json()["input_tokens"] == prompt
        again = await gw.post("/v1/responses", body)
        assert int(again.headers["x-routefit-prompt-tokens"]) == prompt
