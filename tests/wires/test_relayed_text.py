"""The generated text an unfinished stream is charged for (``proxy.wires.base``): whatever the
text (quotes, backslashes, newlines, any Unicode), the deltas of each client wire's events give
it back exactly, and the events that repeat it whole are not counted again."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.exchange.sse import encode
from proxy.wires import ANTHROPIC_WIRE, CHAT_WIRE, RESPONSES_WIRE, Wire
from proxy.wires.base import UNREAD_BYTES, Outcome


def chat_event(text: str) -> bytes:
    delta = {"index": 0, "delta": {"content": text}, "finish_reason": None}
    return encode({"id": "c", "object": "chat.completion.chunk", "choices": [delta]})


def messages_event(text: str) -> bytes:
    delta = {"type": "text_delta", "text": text}
    return encode(
        {"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta"
    )


def responses_events(text: str) -> list[bytes]:
    delta = {"type": "response.output_text.delta", "item_id": "m", "delta": text}
    done = {"type": "response.output_text.done", "item_id": "m", "text": text}
    return [encode(delta, delta["type"]), encode(done, done["type"])]


def relayed(events: list[bytes], wire: Wire) -> str:
    outcome = Outcome(generated=wire.generated)
    for event in events:
        outcome.relay(event)
    return outcome.relayed_text()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=30), max_size=6))
def test_every_wire_gives_back_exactly_the_generated_text(pieces: list[str]):
    whole = "".join(pieces)
    assert relayed([chat_event(p) for p in pieces], CHAT_WIRE) == whole
    assert relayed([messages_event(p) for p in pieces], ANTHROPIC_WIRE) == whole
    # the ``*.done`` event repeats the text: counted once
    assert relayed([e for p in pieces for e in responses_events(p)], RESPONSES_WIRE) == whole


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.text(max_size=30), max_size=6), st.sampled_from(["reasoning_content", "reasoning"])
)
def test_a_chat_streams_reasoning_is_generated_text_under_either_name(
    pieces: list[str], name: str
) -> None:
    """An unfinished stream is charged its reasoning too: OpenAI-compatible providers name it
    ``reasoning_content`` (DeepSeek) or ``reasoning`` (vLLM, Groq, OpenRouter, Ollama)."""

    def event(text: str) -> bytes:
        delta = {"index": 0, "delta": {name: text}, "finish_reason": None}
        return encode({"id": "c", "object": "chat.completion.chunk", "choices": [delta]})

    assert relayed([event(p) for p in pieces], CHAT_WIRE) == "".join(pieces)


def test_usage_and_role_events_carry_no_generated_text():
    usage = encode({"id": "c", "choices": [], "usage": {"prompt_tokens": 3}})
    role = encode({"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    start = encode({"type": "message_start", "message": {"content": []}}, "message_start")
    assert relayed([usage, role], CHAT_WIRE) == ""
    assert relayed([start], ANTHROPIC_WIRE) == ""
    assert orjson.loads(usage[6:])["usage"]


def test_a_long_stream_is_read_as_it_goes_and_holds_no_more_than_the_bound_unread():
    piece = 'ab\\c"é ' * 100
    events = [chat_event(piece) for _ in range(3 * UNREAD_BYTES // len(chat_event(piece)))]
    outcome = Outcome(generated=CHAT_WIRE.generated)
    for event in events:
        outcome.relay(event)
        assert outcome.unread_bytes <= UNREAD_BYTES
    assert outcome.sent == len(events)
    assert outcome.relayed  # read in bulk at least once on the way
    assert outcome.relayed_text() == piece * len(events)
    assert outcome.unread == []
