"""What translating twice costs: a Responses client on an Anthropic route, a chat client's answer
from an Anthropic route (issue 28, "each translation done once, or measure and justify").

A Responses client on a Claude route is translated Responses → chat (the Responses wire) and
chat → Messages (routefit's Anthropic mapping); its stream comes back Messages → chat → Responses,
so every event is parsed and serialised twice. A chat client's whole answer from a Claude route is
mapped Messages → chat, serialised, and its ``model`` member renamed by a regex.

This measures, in one process and one run, the CPU of each stage per event and per answer, so
the second pass can be weighed against the whole relay: the *extra* cost of the double pass is
at most the Messages → chat stage (a direct mapping would still parse each Messages event and
build each Responses event). Usage::

    .venv/bin/python bench/translation_passes.py [--events 400] [--rounds 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from proxy.exchange.sse import event_data
from proxy.transports.messages_to_chat import MessagesToChat, chat_completion
from proxy.wires.chat import as_alias
from proxy.wires.responses_items import parse_responses
from proxy.wires.responses_translate import ChatStreamToResponses


def _sse(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def messages_stream(deltas: int) -> list[bytes]:
    """An Anthropic stream of ``deltas`` text deltas (a few words each), as a provider sends it."""
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_bench",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 1200, "output_tokens": 1},
        },
    }
    events = [
        _sse("message_start", start),
        _sse(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
    ]
    for i in range(deltas):
        delta = {"type": "text_delta", "text": f" word{i} and more"}
        events.append(
            _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        )
    events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"output_tokens": deltas * 3},
    }
    events.append(_sse("message_delta", end))
    events.append(_sse("message_stop", {"type": "message_stop"}))
    return events


def to_chat(events: list[bytes]) -> list[bytes]:
    """Pass one: Messages events → chat chunks (parse, map, serialise), as the transport does."""
    mapper = MessagesToChat()
    out: list[bytes] = []
    for event in events:
        data = event_data(event)
        if data:
            out.extend(mapper.event(orjson.loads(data)))
    return out


def to_responses(chunks: list[bytes], request: Any) -> list[bytes]:
    """Pass two: chat chunks → Responses events (parse, map, serialise), as the wire does."""
    t = ChatStreamToResponses(request, "resp_bench000000000000000000")
    out = t.start()
    for chunk in chunks:
        data = event_data(chunk)
        if data is None or data.strip() == b"[DONE]":
            continue
        out.extend(t.chunk(orjson.loads(data)))
    closing, final = t.finish_events()
    out.extend(closing)
    out.append(t.end_event(final))
    return out


def _median_us(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=400, help="text deltas per stream")
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()

    request = parse_responses({"model": "claude", "input": "hi", "stream": True})
    native = messages_stream(args.events)
    chat = to_chat(native)
    n = len(native)

    first = _median_us(lambda: to_chat(native), args.rounds)
    second = _median_us(lambda: to_responses(chat, request), args.rounds)
    both = _median_us(lambda: to_responses(to_chat(native), request), args.rounds)

    answer = {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "word " * 300}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1200, "output_tokens": 300},
    }
    mapped = _median_us(lambda: chat_completion(answer), args.rounds * 10)
    data = chat_completion(answer)
    dumped = _median_us(lambda: orjson.dumps(data), args.rounds * 10)
    body = orjson.dumps(data)
    renamed = _median_us(lambda: as_alias(body, "claude"), args.rounds * 10)

    print(f"stream of {n} Messages events ({args.events} text deltas), median of {args.rounds}:")
    print(f"  pass 1, Messages -> chat:      {first:8.1f} us  ({first / n:.2f} us/event)")
    print(f"  pass 2, chat -> Responses:     {second:8.1f} us  ({second / n:.2f} us/event)")
    print(f"  both, as served:               {both:8.1f} us  ({both / n:.2f} us/event)")
    print(f"  the second pass's share:       {first / both:8.1%} (at most a direct map's gain)")
    print("whole answer (300 words), chat client on a Claude route:")
    print(f"  Messages -> chat dict:         {mapped:8.1f} us")
    print(f"  serialise the chat answer:     {dumped:8.1f} us")
    print(f"  rename model (regex, once):    {renamed:8.1f} us")


if __name__ == "__main__":
    main()
