"""What ``store`` in a Responses answer promises: true only when routefit keeps the answer, so
that ``previous_response_id`` can name it.

routefit answers ``previous_response_id`` from its own store, not the provider's: when it keeps
nothing (``responses_store_bytes_per_team: 0``, or the client's ``store: false``) or cannot keep
this answer (larger than the team's bound by itself), an answer saying ``store: true`` — the
provider's own words on a passthrough leg, the request's default on a translated one — sends the
client into a 404 it had no reason to expect. Driven end to end: the real openai SDK through
routefit in-process, against the simulator's Responses wire (passthrough) and its chat wire
(a translated route), whole and streamed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from harness import chat_only_route, gateway_config, private_redis, sim_route
from inprocess import run_inprocess

#: A team's bound small enough that one long input's record exceeds it by itself, and large
#: enough that a short exchange's record fits.
BOUND = 10_000
#: A passthrough route (the provider speaks Responses) and a translated one (chat only).
MODELS = ("gpt-4o", "chatonly")


def _routes(url: str) -> list[dict[str, Any]]:
    return [
        sim_route("gpt-4o", url),
        chat_only_route("chatonly", url),
    ]


def _gateway(sim: Any, path: Path, bound: int | None) -> Iterator[openai.OpenAI]:
    extra = {} if bound is None else {"responses_store_bytes_per_team": bound}
    config = gateway_config(path / "routefit.yaml", _routes(sim.base_url), **extra)
    with run_inprocess(config) as gw:
        yield openai.OpenAI(base_url=gw.v1, api_key="x", max_retries=0)


@pytest.fixture(scope="module")
def nothing_kept(sim: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    """A gateway whose operator stores nothing (``responses_store_bytes_per_team: 0``)."""
    yield from _gateway(sim, tmp_path_factory.mktemp("zero"), 0)


@pytest.fixture(scope="module")
def bounded(sim: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    """A gateway whose teams may keep ``BOUND`` bytes of stored responses."""
    yield from _gateway(sim, tmp_path_factory.mktemp("bounded"), BOUND)


@pytest.fixture(scope="module")
def default(sim: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    """A gateway with the default store settings."""
    yield from _gateway(sim, tmp_path_factory.mktemp("default"), None)


def _long_input() -> str:
    rng = random.Random(7)
    return " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(4000))


def _streamed(client: openai.OpenAI, **kwargs: Any) -> dict[str, Any]:
    """Each response-carrying event's ``store`` by event type, and the final response's id."""
    flags: dict[str, Any] = {}
    with client.responses.create(stream=True, **kwargs) as stream:
        for event in stream:
            response = getattr(event, "response", None)
            if response is not None:
                flags[event.type] = response.store
                flags["id"] = response.id
    return flags


@pytest.mark.parametrize("model", MODELS)
def test_a_bound_of_zero_answers_store_false(nothing_kept: openai.OpenAI, model: str) -> None:
    answer = nothing_kept.responses.create(model=model, input="hello")
    assert answer.output_text and answer.store is False
    with pytest.raises(openai.NotFoundError):
        nothing_kept.responses.retrieve(answer.id)


@pytest.mark.parametrize("model", MODELS)
def test_a_bound_of_zero_streams_store_false(nothing_kept: openai.OpenAI, model: str) -> None:
    flags = _streamed(nothing_kept, model=model, input="hello")
    assert flags["response.created"] is False and flags["response.completed"] is False
    assert flags.get("response.in_progress", False) is False


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", [False, True])
def test_the_clients_store_false_is_answered_false(
    default: openai.OpenAI, model: str, stream: bool
) -> None:
    if stream:
        flags = _streamed(default, model=model, input="hello", store=False)
        assert flags["response.created"] is False and flags["response.completed"] is False
        rid = flags["id"]
    else:
        answer = default.responses.create(model=model, input="hello", store=False)
        assert answer.store is False
        rid = answer.id
    with pytest.raises(openai.NotFoundError):
        default.responses.retrieve(rid)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_kept_answer_says_store_true_and_can_be_named(
    bounded: openai.OpenAI, model: str, stream: bool
) -> None:
    """The promise kept: a short exchange fits the bound, says true, and can be continued."""
    if stream:
        flags = _streamed(bounded, model=model, input="hello")
        assert flags["response.created"] is True and flags["response.completed"] is True
        rid = flags["id"]
    else:
        answer = bounded.responses.create(model=model, input="hello")
        assert answer.store is True
        rid = answer.id
    follow = bounded.responses.create(model=model, previous_response_id=rid, input="more")
    assert follow.output_text


@pytest.mark.parametrize("model", MODELS)
def test_an_answer_too_large_for_the_bound_says_store_false(
    bounded: openai.OpenAI, model: str
) -> None:
    """A whole answer is measured when it is handed over, before its body goes out: one that
    exceeds the team's bound by itself is not kept, and says so."""
    answer = bounded.responses.create(model=model, input=_long_input())
    assert answer.output_text and answer.store is False
    with pytest.raises(openai.NotFoundError):
        bounded.responses.retrieve(answer.id)


@pytest.mark.parametrize("model", MODELS)
def test_a_streamed_answer_too_large_for_the_bound_ends_saying_store_false(
    bounded: openai.OpenAI, model: str
) -> None:
    """A stream's answer is whole only at its end: ``response.created`` went out saying true
    before it could be measured, the final ``response.completed`` (the SDK's final response)
    says what became of it."""
    flags = _streamed(bounded, model=model, input=_long_input())
    assert flags["response.completed"] is False
    with pytest.raises(openai.NotFoundError):
        bounded.responses.retrieve(flags["id"])


@pytest.fixture(scope="module")
def store_down(sim: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    """A gateway whose store (a Redis of its own) is gone: what it answers cannot be kept."""
    path = tmp_path_factory.mktemp("outage") / "routefit.yaml"
    with private_redis() as redis:
        config = gateway_config(path, _routes(sim.base_url), redis_url=redis.url)
        with run_inprocess(config) as gw:
            redis.kill()
            yield openai.OpenAI(base_url=gw.v1, api_key="x", max_retries=0)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_the_store_could_not_keep_says_store_false(
    store_down: openai.OpenAI, model: str, stream: bool
) -> None:
    """A store outage loses the record, not the answer: it still goes out, and a whole one (its
    write made after its body was written) says false as a stream's final response does."""
    if stream:
        flags = _streamed(store_down, model=model, input="hello")
        assert flags["response.completed"] is False
    else:
        answer = store_down.responses.create(model=model, input="hello")
        assert answer.output_text and answer.store is False
