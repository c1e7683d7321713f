"""The wire seam's shared plumbing, in process: where a wire's clients present their key
(``proxy.teams.KeyPlaces``), how the gateway ends a stream that cannot end normally in each
wire's own shape (``proxy.gateway._ended``), and a Responses request continuing a stored
conversation through its ``RequestContext``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson
import pytest

from proxy.exchange import CHAT, MESSAGES, RESPONSES, StreamBroken
from proxy.exchange.sse import encode
from proxy.gateway import _ended
from proxy.teams import BEARER_OR_API_KEY, KeyPlaces, Quotas, Team, TeamDirectory, hash_key
from proxy.wires import ANTHROPIC_WIRE, CHAT_WIRE, RESPONSES_WIRE, Outcome, RequestContext, Wire
from proxy.wires.responses import ResponsesRequest

GOOGLE = KeyPlaces(headers=("x-goog-api-key",), query="key")


# -- keys ------------------------------------------------------------------------------------


def test_bearer_comes_first_and_another_scheme_is_no_key() -> None:
    assert BEARER_OR_API_KEY.key({"authorization": "Bearer a", "x-api-key": "b"}) == "a"
    assert BEARER_OR_API_KEY.key({"x-api-key": " b "}) == "b"
    # the client meant another scheme: x-api-key does not stand in for it
    assert BEARER_OR_API_KEY.key({"authorization": "Basic a", "x-api-key": "b"}) is None
    assert BEARER_OR_API_KEY.key({}) is None


def test_a_wire_may_take_its_key_from_its_own_header_or_the_query() -> None:
    assert GOOGLE.key({"x-goog-api-key": "g"}, {"key": "q"}) == "g"
    assert GOOGLE.key({}, {"key": "q"}) == "q"
    assert GOOGLE.key({"x-api-key": "b"}, {}) is None
    # a wire that declares no query parameter never reads one
    assert BEARER_OR_API_KEY.key({}, {"key": "q"}) is None


def test_the_directory_finds_the_team_where_the_wire_puts_the_key() -> None:
    team = Team("t", (hash_key("secret"),), None, Quotas())
    teams = TeamDirectory([team], None)
    assert teams.authenticate({}, {"key": "secret"}, GOOGLE) is team
    with pytest.raises(Exception, match="missing API key"):
        teams.authenticate({}, {"key": "secret"})


# -- stream ends -----------------------------------------------------------------------------


async def _events(events: Sequence[bytes], broken: bool) -> AsyncIterator[bytes]:
    for event in events:
        yield event
    if broken:
        raise StreamBroken("ConnectionResetError")


async def _relayed(
    wire: Wire, body: dict[str, Any], provider: str, events: Sequence[bytes], broken: bool = False
) -> tuple[list[bytes], Outcome]:
    request = wire.parse(RequestContext(body, {}, {}, {}, None))
    outcome = Outcome()
    chunks = wire.relay(request, _events(events, broken), provider, outcome)  # type: ignore[arg-type]
    return [c async for c in _ended(wire, request, chunks, outcome)], outcome


def _data(event: bytes) -> Any:
    line = next(x for x in event.split(b"\n") if x.startswith(b"data:"))
    return orjson.loads(line[5:])


CHAT_BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
MESSAGES_BODY = {**CHAT_BODY, "max_tokens": 10}
RESPONSES_BODY = {"model": "m", "stream": True, "input": "hi", "store": False}


def _chat(text: str) -> bytes:
    return encode({"id": "c", "choices": [{"index": 0, "delta": {"content": text}}]})


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_broken_stream_ends_with_the_wires_error_event(anyio_backend: str) -> None:
    out, outcome = await _relayed(CHAT_WIRE, CHAT_BODY, CHAT, [_chat("he"), _chat("llo")], True)
    assert len(out) == 3 and outcome.sent == 2 and not outcome.completed
    error = _data(out[-1])["error"]
    assert "broke off" in error["message"] and "ConnectionResetError" in error["message"]
    assert outcome.relayed_text() == "hello"  # billed whether or not the client read it


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_stream_ends_with_an_error_only_when_it_stopped_short(anyio_backend: str) -> None:
    done = [_chat("hi"), b"data: [DONE]\n\n"]
    out, outcome = await _relayed(CHAT_WIRE, CHAT_BODY, CHAT, done)
    assert out == done and outcome.completed
    out, outcome = await _relayed(CHAT_WIRE, CHAT_BODY, CHAT, done[:1])
    assert "ended before it was complete" in _data(out[-1])["error"]["message"]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_providers_own_error_ends_the_stream_in_its_words(anyio_backend: str) -> None:
    # Messages natively: the provider's error event is relayed as it came, nothing added
    error = encode(
        {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}, "error"
    )
    out, outcome = await _relayed(ANTHROPIC_WIRE, MESSAGES_BODY, MESSAGES, [error])
    assert out == [error] and outcome.failed
    # translated from chat: the chat error becomes Anthropic's error event, message as it is
    chat_error = encode({"error": {"message": "quota gone", "type": "x"}})
    out, _ = await _relayed(ANTHROPIC_WIRE, MESSAGES_BODY, CHAT, [chat_error])
    assert _data(out[-1]) == {
        "type": "error",
        "error": {"type": "api_error", "message": "quota gone"},
    }


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_translated_responses_stream_fails_the_answer_it_announced(
    anyio_backend: str,
) -> None:
    out, outcome = await _relayed(RESPONSES_WIRE, RESPONSES_BODY, CHAT, [_chat("hi")], True)
    created = _data(out[0])
    failed = _data(out[-1])
    assert failed["type"] == "response.failed"
    assert failed["response"]["id"] == created["response"]["id"] == outcome.answer_id
    # the next place in the stream's own numbering
    assert failed["sequence_number"] == _data(out[-2])["sequence_number"] + 1 == outcome.sent
    # natively, a stream with no end event fails too
    out, _ = await _relayed(RESPONSES_WIRE, RESPONSES_BODY, RESPONSES, [])
    assert _data(out[-1])["type"] == "response.failed"


# -- a stored conversation -------------------------------------------------------------------


class _Chain:
    """A stored conversation as the shell would hand it over (``proxy.wires.base.Stored``)."""

    def __init__(self, prior: list[Any] | None) -> None:
        self.prior = prior

    @property
    def keeping(self) -> bool:
        return True

    def keep(self, response: dict[str, Any], input: list[Any]) -> None:
        raise AssertionError("not answered here")

    async def save(self, response: Any, input: list[Any]) -> None:
        raise AssertionError("not answered here")


def _parsed(body: dict[str, Any], prior: list[Any] | None) -> ResponsesRequest:
    request = RESPONSES_WIRE.parse(RequestContext(body, {}, {}, {}, None, stored=_Chain(prior)))
    assert isinstance(request, ResponsesRequest)
    return request


def test_a_request_continues_the_chain_its_context_resolved() -> None:
    prior = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"}]
    body = {"model": "m", "previous_response_id": "resp_1", "input": "again"}
    request = _parsed(body, prior)
    # the provider gets the whole conversation, never the id it cannot know
    assert "previous_response_id" not in request.body
    assert request.body["input"] == [*prior, {"role": "user", "content": "again"}]
    assert [m.text for m in request.messages] == ["first", "ok", "again"]
    assert request.keeps is not None  # store defaults to true
    assert _parsed({**body, "store": False}, prior).keeps is None


def test_a_request_that_names_no_chain_is_the_clients_own_body() -> None:
    body = {"model": "m", "input": "hi", "previous_response_id": None}
    assert _parsed(body, None).body is body
