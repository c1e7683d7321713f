"""Stalling the event loop with one request under the documented limits: routefit in process
(ASGI) before a canned provider, each finding checked by where the work ran or how much of it
there was, never by a time.

- A body is parsed, priced and fitted on the event loop when it is small: the rule was by its
  bytes (``proxy.fairness``: 512 KiB to parse, 64 KiB to count). What the wires read and price
  costs per object, though: a 498 KB Responses body of 15,000 one-letter items held the loop
  220-350 ms in its parse alone, a 220 KB Gemini content of 15,000 parts ~100 ms (CPU time of
  the loop's thread, one loaded machine). A body's work is now judged by its objects too
  (``proxy.fairness.json_work``).
- The Gemini parse paired each ``functionResponse`` with its call by scanning the open calls
  (and removing it from a list): a turn of N calls answered by N responses cost N². 16,000
  calls answered in reverse order by id (~2 MB, under the 32 MiB body limit) took 21.9 s of CPU
  to parse, without ids 5.6 s; 4,000 (~450 KB) took 1.4 s, then on the event loop. Now 0.2 s.
- The fit named each tool output it prices masked by scanning its unit's calls for the output's
  call id: a turn of N calls and N outputs cost N² (``strategies.moves.Job.tool_names`` now
  reads a unit's names once).
- A provider stream whose events arrive faster than they are relayed was relayed without a turn
  of the event loop (reading what has arrived does not suspend): 50,000 one-letter chat chunks
  sent at once (8 MB) held it 370-660 ms on every wire. The stream now gives the loop a turn
  every ``TURN_EVERY`` events (``proxy.exchange.sse.LoopTurns``).
- A provider's whole answer was decoded and read (translated into the client's wire, its usage
  found) on the event loop whatever its size: 16 MB of 200,000 tool calls held it 321 ms for a
  chat client, 777 ms for a Messages client (``max_provider_body_bytes`` allows 64 MiB). Both
  run in a thread over 512 KiB now.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
import yaml
from inprocess import asgi_client

import proxy.estimate
import proxy.gateway
import proxy.transports.provider_http
import proxy.wires.anthropic
import proxy.wires.chat
import proxy.wires.gemini
import proxy.wires.responses
from pricing.framing import default_framing
from pricing.images import default_image_rule
from pricing.messages import parse_request
from pricing.route import Route
from proxy.config import parse_config
from proxy.exchange.sse import TURN_EVERY, split_stream
from proxy.fairness import COUNT_THREAD_ABOVE, OBJECT_BYTES, THREAD_ABOVE, json_work
from proxy.wires.gemini_parse import parse_gemini
from strategies.fit import fit
from strategies.policy import FitPolicy

pytestmark = pytest.mark.anyio

ADMIN = "sk-admin-" + "a" * 32
KEY = "sk-team-" + "b" * 32
HEADERS = {
    "authorization": f"Bearer {KEY}",
    "x-api-key": KEY,
    "x-goog-api-key": KEY,
    "anthropic-version": "2023-06-01",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _deployment(alias: str, model: str, base: str) -> dict[str, Any]:
    return {
        "model_name": alias,
        "litellm_params": {"model": model, "api_base": base, "api_key": "sk-x-0123456789abcdef"},
    }


def _config() -> Any:
    gem = _deployment("gem", "gemini/gemini-sim", "http://gem/v1beta")
    gem["model_info"] = {"max_input_tokens": 1_048_576, "max_output_tokens": 4096}
    data = {
        "model_list": [
            _deployment("gpt", "openai/gpt-4o", "http://oa/v1"),
            _deployment("claude", "anthropic/claude-sonnet-4-5", "http://an"),
            gem,
        ],
        "routefit_settings": {
            "store_path": ":memory:",
            "admin_key": ADMIN,
            "teams": [{"id": "t", "keys": [KEY]}],
        },
    }
    return parse_config(yaml.safe_load(yaml.safe_dump(data)), "r.yaml", environ={})


_USAGE = {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}
ANSWERS: dict[str, Any] = {
    "chat": {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "stop",
            }
        ],
        "usage": _USAGE,
    },
    "messages": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    },
    "gemini": {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "ok"}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 1},
    },
    "responses": {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "gpt-4o",
        "output": [
            {
                "type": "message",
                "id": "m1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "ok", "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11},
    },
}


async def _canned(request: httpx.Request) -> httpx.Response:
    """The provider: a fixed answer of the request's wire, its body not read."""
    path = request.url.path
    if "generateContent" in path:
        return httpx.Response(200, json=ANSWERS["gemini"])
    if path.endswith("/messages"):
        return httpx.Response(200, json=ANSWERS["messages"])
    if path.endswith("/responses"):
        return httpx.Response(200, json=ANSWERS["responses"])
    return httpx.Response(200, json=ANSWERS["chat"])


@asynccontextmanager
async def _gateway() -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(_config(), _canned) as client:
        yield client


def _threads_of(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, seen: list[int]) -> None:
    """``module.name`` wrapped to note the thread each call runs on."""
    inner: Callable[..., Any] = getattr(module, name)

    def noted(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.get_ident())
        return inner(*args, **kwargs)

    monkeypatch.setattr(module, name, noted)


# -- many tiny objects ---------------------------------------------------------------------

#: Objects in each body: ~100 KB of them, a fifth of what is parsed on the loop by bytes.
TINY = 3000


def _tiny_objects(wire: str) -> tuple[str, dict[str, Any]]:
    """(path, body) of a request of ``TINY`` one-letter messages, parts or items."""
    if wire == "chat":
        roles = ("user", "assistant")
        messages = [{"role": roles[i % 2], "content": "a"} for i in range(TINY)]
        return "/v1/chat/completions", {"model": "gpt", "max_tokens": 5, "messages": messages}
    if wire == "messages":
        parts = [{"type": "text", "text": "a"} for _ in range(TINY)]
        messages = [{"role": "user", "content": parts}]
        return "/v1/messages", {"model": "claude", "max_tokens": 5, "messages": messages}
    if wire == "responses":
        items = [{"role": "user", "content": "a"} for _ in range(TINY)]
        return "/v1/responses", {"model": "gpt", "max_output_tokens": 16, "input": items}
    contents = [{"role": "user", "parts": [{"text": "a"} for _ in range(TINY)]}]
    return "/v1beta/models/gem:generateContent", {"contents": contents}


#: Each wire's parse, as its ``Wire.parse`` calls it.
PARSES = {
    "chat": (proxy.wires.chat, "parse_request"),
    "messages": (proxy.wires.anthropic, "parse_anthropic"),
    "responses": (proxy.wires.responses, "parse_responses"),
    "gemini": (proxy.wires.gemini, "parse_gemini"),
}


@pytest.mark.parametrize("wire", list(PARSES))
async def test_a_body_of_many_tiny_objects_is_parsed_and_fitted_off_the_loop(
    wire: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, body = _tiny_objects(wire)
    raw = orjson.dumps(body)
    assert len(raw) < THREAD_ABOVE // 4  # small by its bytes
    parsed: list[int] = []
    fitted: list[int] = []
    _threads_of(monkeypatch, *PARSES[wire], parsed)
    _threads_of(monkeypatch, proxy.estimate, "_counted_fit", fitted)  # priced exactly
    _threads_of(monkeypatch, proxy.estimate.Job, "bounded", fitted)  # or proved by a bound
    loop = threading.get_ident()
    async with _gateway() as client:
        r = await client.post(path, content=raw, headers=HEADERS)
    assert r.status_code == 200, r.text[:300]
    assert parsed and loop not in parsed, f"{wire}: {TINY} objects parsed on the event loop"
    assert fitted and loop not in fitted, f"{wire}: {TINY} objects priced on the event loop"


def test_a_body_is_judged_by_its_objects_or_its_bytes_whichever_is_more() -> None:
    tiny = orjson.dumps({"messages": [{"role": "user", "content": "a"}] * 100})
    assert json_work(tiny) == 101 * OBJECT_BYTES > len(tiny)
    prose = orjson.dumps({"messages": [{"role": "user", "content": "word " * 20_000}]})
    assert json_work(prose) == len(prose)
    # a body already over every threshold is its bytes (not scanned)
    big = orjson.dumps({"messages": [{"role": "user", "content": "a"}] * 30_000})
    assert len(big) > THREAD_ABOVE and json_work(big) == len(big)
    # pricing goes off the loop from an agent session's size in objects, not in megabytes
    assert COUNT_THREAD_ABOVE // OBJECT_BYTES == 128


# -- naming masked outputs -----------------------------------------------------------------


class _Counted(str):
    """A call id that counts how often it is compared."""

    compared = 0
    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        _Counted.compared += 1
        return str.__eq__(self, other)


def test_a_wide_turns_outputs_are_named_in_linear_time() -> None:
    """One turn of N calls and N outputs on a route too small for it: every output is priced
    masked, named by its call; ids compared O(N) times, not N²/2."""
    n = 1500
    calls = [
        {
            "id": _Counted(f"c{i}"),
            "type": "function",
            "function": {"name": "run", "arguments": "{}"},
        }
        for i in range(n)
    ]
    messages = [
        {"role": "user", "content": "Task: run them all"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *(
            {"role": "tool", "tool_call_id": _Counted(f"c{i}"), "content": "ok " * 30}
            for i in range(n)
        ),
    ]
    request = parse_request({"model": "t", "messages": messages, "max_tokens": 256})
    assert type(request.messages[-1].tool_call_id) is _Counted  # the ids as sent
    _Counted.compared = 0
    result = fit(request, _route(16_000), FitPolicy())
    assert result.report.estimate_after <= result.report.budget
    assert _Counted.compared <= 10 * n, f"{_Counted.compared} id comparisons for {n} outputs"


def _route(window: int) -> Route:
    return Route(
        alias="test",
        model="gpt-4o",
        context_window=window,
        max_output_tokens=1024,
        tokenizer="o200k_base",
        framing=default_framing("gpt-4o", "o200k_base"),
        image_rule=default_image_rule("gpt-4o", True),
        supports_vision=True,
    )


# -- Gemini's pairing of responses with calls ----------------------------------------------


def test_gemini_responses_find_their_calls_in_linear_time() -> None:
    """N calls answered in reverse order by id: ids compared O(N) times, not N²/2."""
    compared = 0

    class Id(str):
        __hash__ = str.__hash__

        def __eq__(self, other: object) -> bool:
            nonlocal compared
            compared += 1
            return str.__eq__(self, other)

    n = 2000
    calls = [{"functionCall": {"id": Id(f"c{i}"), "name": "f", "args": {}}} for i in range(n)]
    answers = [
        {"functionResponse": {"id": Id(f"c{i}"), "name": "f", "response": {}}}
        for i in reversed(range(n))
    ]
    tools = _paired(calls, answers)
    assert tools == [f"c{i}" for i in reversed(range(n))]
    assert compared <= 4 * n, f"{compared} id comparisons for {n} calls"


def _paired(calls: list[dict[str, Any]], answers: list[dict[str, Any]]) -> list[str | None]:
    """The call id each tool result of a Gemini turn of ``calls`` answered by ``answers`` was
    paired with."""
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": calls},
            {"role": "user", "parts": answers},
        ]
    }
    parsed = parse_gemini(body, "gem", sse=False, array=False, counting=False)
    return [m.tool_call_id for m in parsed.messages if m.role == "tool"]


def test_gemini_pairing_by_id_then_name_then_order() -> None:
    """What the pairing answers is unchanged: a response's own id, else the first open call of
    its name, else (no id) the first open call; a call answered once is answered."""
    calls = [
        {"functionCall": {"name": "a", "args": {}}},
        {"functionCall": {"id": "x", "name": "b", "args": {}}},
        {"functionCall": {"name": "a", "args": {}}},
        {"functionCall": {"name": "c", "args": {}}},
    ]
    answers = [
        {"functionResponse": {"id": "x", "name": "zzz", "response": {}}},
        {"functionResponse": {"name": "a", "response": {}}},
        {"functionResponse": {"name": "q", "response": {}}},
        {"functionResponse": {"name": "a", "response": {}}},
        {"functionResponse": {"name": "q", "response": {}}},
        {"functionResponse": {"id": "nope", "name": "q", "response": {}}},
    ]
    tools = _paired(calls, answers)
    # x by id; the first "a" by name; "q" takes the first open (the second "a"), the next "a"
    # finds none of its name and takes the first open ("c"); then none is open
    assert tools == ["x", "gc1_0", "gc1_2", "gc1_3", "gr2_4", "nope"]


# -- a provider's flood of tiny events -------------------------------------------------------


async def test_a_flood_of_events_that_came_at_once_gives_the_loop_turns() -> None:
    """10,000 events in one network chunk: another task runs while they are relayed, at least
    once every ``TURN_EVERY`` events (it ran not once before: the relay never suspended)."""
    n = 10_000
    event = b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'

    async def one_chunk() -> AsyncIterator[bytes]:
        yield event * n

    relayed = 0
    seen: list[int] = []  # how many events were relayed each time the other task ran
    done = False

    async def other() -> None:
        while not done:
            seen.append(relayed)
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    async for _ in split_stream(one_chunk()):
        relayed += 1
    done = True
    await task
    assert relayed == n
    during = [k for k in seen if 0 < k < n]
    assert len(during) >= n // TURN_EVERY - 1, f"the loop turned {len(during)} times in {n}"
    gaps = [b - a for a, b in zip([0, *during], [*during, n], strict=True)]
    assert max(gaps) <= TURN_EVERY


# -- a provider's big answer ---------------------------------------------------------------


async def test_a_big_answer_is_decoded_and_translated_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chat route answers a Messages client with 20,000 tool calls (~1.6 MB): decoded and
    translated on a thread other than the loop's (both ran on the loop's before)."""
    answer = dict(ANSWERS["chat"])
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for i in range(20_000)
    ]
    answer["choices"] = [
        {
            "index": 0,
            "message": {"role": "assistant", "content": None, "tool_calls": calls},
            "finish_reason": "tool_calls",
        }
    ]
    raw = orjson.dumps(answer)
    assert len(raw) > 2 * THREAD_ABOVE

    async def provider(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=raw, headers={"content-type": "application/json"})

    read: list[int] = []
    decoded: list[int] = []
    _threads_of(monkeypatch, proxy.gateway, "_read_answer", read)
    loads = orjson.loads

    def noted_loads(data: Any) -> Any:
        if data is raw or data == raw:
            decoded.append(threading.get_ident())
        return loads(data)

    monkeypatch.setattr(proxy.transports.provider_http.orjson, "loads", noted_loads)
    loop = threading.get_ident()
    body = {"model": "gpt", "max_tokens": 5, "messages": [{"role": "user", "content": "go"}]}
    async with asgi_client(_config(), provider) as client:
        r = await client.post("/v1/messages", json=body, headers=HEADERS)
    assert r.status_code == 200, r.text[:300]
    assert len([b for b in r.json()["content"] if b["type"] == "tool_use"]) == 20_000
    assert read and loop not in read, "the answer was translated on the event loop"
    assert decoded and loop not in decoded, "the answer was decoded on the event loop"
