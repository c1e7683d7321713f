"""An assistant message's ``audio: {"id": ...}`` (an earlier spoken answer, which OpenAI re-reads
as that answer's audio tokens) is priced at the route's output cap, the most such an answer can
have held, and never at nothing (docs/pricing.md, "Audio and video")."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from gpt4o_route import gpt4o_route

from pricing.bounds import bound_pressure
from pricing.messages import RequestError, message_wire, parse_request
from pricing.meter import measure
from strategies.fit import fit
from strategies.policy import FitPolicy
from strategies.result import FitError

#: An audio model's route: a window of 128k, answers of at most 16,384 tokens.
AUDIO = gpt4o_route(128_000, 16_384)
ANTHROPIC = replace(AUDIO, provider="anthropic")


def _conversation(*, reference: bool, answers: int = 1) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Answer aloud."}]
    for i in range(answers):
        answer: dict[str, Any] = {"role": "assistant"}
        if reference:
            answer["audio"] = {"id": f"audio_{i:04d}"}
        else:
            answer["content"] = None
        messages += [{"role": "user", "content": f"Question {i}?"}, answer]
    messages.append({"role": "user", "content": "And then?"})
    return {"model": "gpt-audio", "modalities": ["text", "audio"], "messages": messages}


def test_a_reference_costs_the_routes_output_cap() -> None:
    without = measure(parse_request(_conversation(reference=False)), AUDIO)
    priced = measure(parse_request(_conversation(reference=True)), AUDIO)
    assert priced.text + priced.framing == without.text + without.framing
    assert priced.images - without.images == AUDIO.max_output_tokens
    assert priced.defaulted - without.defaulted == AUDIO.max_output_tokens
    assert not priced.exact  # a worst case, not the provider's count


def test_each_reference_costs_its_own_answer() -> None:
    one = measure(parse_request(_conversation(reference=True, answers=1)), AUDIO)
    three = measure(parse_request(_conversation(reference=True, answers=3)), AUDIO)
    assert three.images - one.images == 2 * AUDIO.max_output_tokens


def test_the_message_memo_does_not_price_a_reference_as_its_bare_message() -> None:
    """The same words with and without a reference, one after the other, in one process."""
    measure(parse_request(_conversation(reference=False)), AUDIO)
    priced = measure(parse_request(_conversation(reference=True)), AUDIO)
    assert priced.images == AUDIO.max_output_tokens


def test_the_bound_holds_the_reference_too() -> None:
    request = parse_request(_conversation(reference=True))
    bound = bound_pressure(request.messages, request.tools, AUDIO)
    assert bound is not None
    assert bound.images >= measure(request, AUDIO).images == AUDIO.max_output_tokens


def test_anthropic_routes_drop_the_reference_and_price_nothing_for_it() -> None:
    without = measure(parse_request(_conversation(reference=False)), ANTHROPIC)
    priced = measure(parse_request(_conversation(reference=True)), ANTHROPIC)
    assert priced.images == without.images == 0


def test_references_that_cannot_fit_the_window_are_not_forwarded_as_fitting() -> None:
    """Eight spoken answers may have held 8 × 16,384 tokens: over a 128k window with the
    reply's reservation. Priced at nothing, the request went out as a fit of a few hundred."""
    request = parse_request(_conversation(reference=True, answers=8))
    try:
        fitted = fit(request, AUDIO, FitPolicy())
    except FitError:
        return  # refused: the window cannot hold it
    kept = sum(m.audio is not None for m in fitted.messages)
    assert kept < 8  # or old answers were let go
    assert fitted.report.estimate_after >= kept * AUDIO.max_output_tokens


def test_a_rendered_message_keeps_its_reference() -> None:
    """A message the fit rewrites (a capped text) is rendered from its values: the reference
    goes with it, so what is sent is what was priced."""
    message = parse_request(_conversation(reference=True)).messages[2]
    assert message_wire(replace(message, wire=None))["audio"] == {"id": "audio_0000"}


@pytest.mark.parametrize("audio", ["audio_0000", {}, {"id": 7}, ["audio_0000"]])
def test_a_reference_without_an_id_is_named_in_the_400(audio: Any) -> None:
    body = _conversation(reference=True)
    body["messages"][2]["audio"] = audio
    with pytest.raises(RequestError) as refused:
        parse_request(body)
    assert refused.value.param == "messages[2].audio"


def test_other_roles_audio_field_is_forwarded_unread() -> None:
    body = _conversation(reference=False)
    body["messages"][1]["audio"] = "not ours to read"
    assert measure(parse_request(body), AUDIO).images == 0
