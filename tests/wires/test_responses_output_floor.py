"""A Responses request's cap is never shrunk below OpenAI's floor of 16.

OpenAI refuses ``max_output_tokens`` below 16 (``integer_below_min_value``). With a small
``min_output_reserve`` the fit shrinks a client's cap to the room the prompt leaves, and a
room of 1-15 tokens went out as a cap the provider refuses; now such a request is refused by
routefit naming the reservation, and every cap sent is at least 16."""

from __future__ import annotations

from gpt4o_route import gpt4o_route

from pricing.meter import measure
from proxy.wires.responses import LEAST_OUTPUT, ResponsesRequest
from proxy.wires.responses_items import parse_responses
from strategies.fit import FitError
from strategies.output import fit_output
from strategies.policy import FitPolicy

WORDS = "the quick brown fox jumps over the lazy dog while routefit counts every token"


def _request(words: int) -> ResponsesRequest:
    text = " ".join(WORDS.split()[i % 14] for i in range(words))
    p = parse_responses({"model": "t", "input": text, "max_output_tokens": 400})
    return ResponsesRequest(p.model, p.messages, p.tools, p.max_output_tokens, p.body)


def test_no_shrunk_cap_is_below_the_providers_floor() -> None:
    r = gpt4o_route(1_000, max_output=400)
    policy = FitPolicy(min_output_reserve=1)
    caps, refused = [], 0
    for words in range(850, 1000, 3):
        request = _request(words)
        try:
            fitted = fit_output(request, r, policy)
        except FitError:
            refused += 1
            continue
        caps.append(fitted.report.output.sent)
    assert min(caps) >= LEAST_OUTPUT
    assert any(cap < 400 for cap in caps)  # some were shrunk: the floor was what held them
    assert refused  # and the room under 16 was refused, not sent


def test_the_sweep_crosses_rooms_under_the_floor() -> None:
    """The sweep above is not vacuous: some prompt of it leaves 1-15 tokens of room."""
    r = gpt4o_route(1_000, max_output=400)
    prompts = [measure(_request(w), r).total for w in range(850, 1000, 3)]
    rooms = [r.context_window - 32 - p for p in prompts]
    assert any(1 <= room < LEAST_OUTPUT for room in rooms)
