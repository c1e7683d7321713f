"""A big prompt of new text that no cheap bound proves is let go on a sample's guess and counted
while the provider reads it (issue 34); its answer is released only once the count proves it
fits, and when it does not, the exact fit goes instead — through routefit (in-process) between
the openai SDK and the simulator.

The simulator's gpt-4o takes 128k tokens; the ``tight`` route tells routefit 12k, so the
simulator answers a request routefit must cut: an answer released before the count agreed
would show there (the provider's count over the budget, no actions)."""

from __future__ import annotations

import httpx
import pytest
from bounded_gateway import chat, proofs, prose, route_report, serving

import pricing.bounds

#: These tests are about the answer held until a count proves its guess.
pytestmark = pytest.mark.usefixtures("every_guess_held")


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    with serving(sim, tmp_path_factory) as running:
        yield running


@pytest.mark.parametrize("stream", [False, True])
def test_new_text_near_no_bound_goes_on_a_sample_and_is_answered_on_its_count(gw, stream):
    # ~200 KB of new text, ~60k tokens: its bytes are over the 126k-token budget, so no cheap
    # bound proves it without counting; a sample of it says it fits
    content = prose(11 + stream, 24_000)
    samples = route_report(gw, "exact", 0).get("samples", 0)
    sampled = proofs(gw, "exact", "sample")
    headers, actual = chat(gw, "exact", [{"role": "user", "content": content}], stream)
    assert proofs(gw, "exact", "sample") == sampled + 1
    assert proofs(gw, "exact", "sample_missed") == 0
    # The answer went out once the texts' counts proved the request fits: on the exact figures
    # when they were in by then, else on the bound those counts proved (never on the guess);
    # what was learnt is exact either way.
    kind, tokens = (
        headers["x-routefit-prompt-tokens-kind"],
        int(headers["x-routefit-prompt-tokens"]),
    )
    assert kind in ("counted", "bound"), kind
    if kind == "counted":
        assert tokens == actual
    else:
        assert int(headers["x-routefit-budget"]) >= tokens >= actual
    assert headers["x-routefit-actions"] == "none"
    report = route_report(gw, "exact", samples + 1)
    assert report["samples"] == samples + 1 and report["relative_error"]["max"] == 0.0


@pytest.mark.parametrize("provider_first", [True, False])
@pytest.mark.parametrize("stream", [False, True])
def test_a_guess_the_count_disproves_sends_the_exact_fit_instead(
    gw, sim, stream, provider_first, monkeypatch
):
    # A sample of one piece a text that reads the rest as nothing (the one way to make a
    # sample of homogeneous text miss) lets go ~30k tokens of new text on a route whose budget
    # is under 11k. The simulator (whose window is 128k) would answer it; the client must get
    # the answer to the fit.
    monkeypatch.setattr(pricing.bounds, "_SAMPLES", 1)
    monkeypatch.setattr(pricing.bounds, "_SAMPLE_EVERY", 10**9)
    monkeypatch.setattr(pricing.bounds, "_SAMPLE_SLACK", 0.0)
    if not provider_first:  # the provider takes a second: the count comes first
        rule = {"fault": "delay:1", "model": "gpt-4o", "count": 1}
        httpx.post(sim.url("/sim/faults"), json={"faults": [rule]}).raise_for_status()
    seed = 100 + 2 * stream + provider_first
    messages = [
        {"role": "user", "content": prose(seed, 12_000)},
        {"role": "assistant", "content": prose(seed + 50, 12_000)},
        {"role": "user", "content": "And now, in one line: what did the two texts say?"},
    ]
    sampled = proofs(gw, "tight", "sample")
    missed = proofs(gw, "tight", "sample_missed")
    headers, actual = chat(gw, "tight", messages, stream)
    assert proofs(gw, "tight", "sample") == sampled + 1
    assert proofs(gw, "tight", "sample_missed") == missed + 1
    budget = int(headers["x-routefit-budget"])
    assert headers["x-routefit-actions"] != "none"
    assert actual <= budget  # the provider's count of what the client was answered
    assert int(headers["x-routefit-prompt-tokens"]) == actual
    assert httpx.get(gw.base_url + "/readyz").status_code == 200
    last = sim.last_request()
    assert last["path"].endswith("/chat/completions") and last["prompt_tokens"] == actual
