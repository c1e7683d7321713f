"""A big prompt of new text let go on a sample's guess far under its budget is answered without
waiting for its count (issue 34: that count is learning, begun beside the forward only when the
pace of such counts allows); when the
guess was wrong and the provider refuses the prompt for its window, the count it went without
judges then and the exact fit goes instead — through routefit (in-process) between the openai
SDK and the simulator. The held guess (within a tenth of the budget) is test_sampled_e2e.py's."""

from __future__ import annotations

import httpx
import pytest
from bounded_gateway import chat, metric, proofs, prose, route_report, serving

import pricing.bounds
from proxy.estimate import LEARN_SHARE
from proxy.pace import Pace


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    with serving(sim, tmp_path_factory) as running:
        yield running


def pace(gw, monkeypatch: pytest.MonkeyPatch, free: bool) -> None:
    """The learning counts' pace, on a clock that stands still: free, or just spent on an hour's
    count (nothing more for four hours)."""
    paced = Pace(LEARN_SHARE, clock=lambda: 0.0)
    if not free:
        paced.take()
        paced.done(3600.0)
    monkeypatch.setattr(gw.app.state.routefit.gateway.estimator, "pace", paced)


@pytest.mark.parametrize("free", [True, False], ids=["counted", "skipped"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_guess_far_under_the_budget_is_answered_without_its_count(gw, stream, free, monkeypatch):
    # ~200 KB of new text, ~60k tokens: its bytes are over the 126k-token budget, so no cheap
    # bound proves it; a sample says about half the budget, far from a close call
    pace(gw, monkeypatch, free)
    content = prose(21 + 2 * stream + free, 24_000)
    sampled = proofs(gw, "exact", "sample")
    missed = proofs(gw, "exact", "sample_missed")
    outcome = "counted" if free else "skipped"
    counts = metric(gw, "routefit_learning_counts_total", "exact", f'outcome="{outcome}"')
    samples = route_report(gw, "exact", 0).get("samples", 0)
    headers, actual = chat(gw, "exact", [{"role": "user", "content": content}], stream)
    assert proofs(gw, "exact", "sample") == sampled + 1
    assert proofs(gw, "exact", "sample_missed") == missed
    assert metric(gw, "routefit_learning_counts_total", "exact", f'outcome="{outcome}"') == (
        counts + 1
    )
    kind = headers["x-routefit-prompt-tokens-kind"]
    budget = int(headers["x-routefit-budget"])
    assert headers["x-routefit-actions"] == "none"
    if free:
        # counted beside the forward, never waited for: the guess, or the count when it was
        # in before the provider answered; learnt either way
        assert kind in ("sampled", "counted"), kind
        report = route_report(gw, "exact", samples + 1)
        assert report["samples"] == samples + 1 and report["relative_error"]["max"] == 0.0
    else:
        # nothing counted it: answered on the guess, and nothing learnt
        assert kind == "sampled"
        assert actual <= int(headers["x-routefit-prompt-tokens"]) <= 0.9 * budget
        assert route_report(gw, "exact", samples + 1).get("samples", 0) == samples


@pytest.fixture
def force_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample of one piece, read with no slack: the rest of each text reads as nothing."""
    monkeypatch.setattr(pricing.bounds, "_SAMPLES", 1)
    monkeypatch.setattr(pricing.bounds, "_SAMPLE_EVERY", 10**9)
    monkeypatch.setattr(pricing.bounds, "_SAMPLE_SLACK", 0.0)


@pytest.mark.parametrize("stream", [False, True])
def test_a_wrong_guess_the_provider_refuses_sends_the_exact_fit(gw, sim, stream, force_miss):
    # ~17k tokens of new text on gpt-4's 8k window, guessed at next to nothing and let go
    # unheld: the simulator refuses it for its window, as OpenAI does; the client must get the
    # answer to the fit, the count made then
    seed = 40 + stream
    messages = [
        {"role": "user", "content": prose(seed, 3_500)},
        {"role": "assistant", "content": prose(seed + 1, 3_500)},
        {"role": "user", "content": "And now, in one line: what did the two texts say?"},
    ]
    missed = proofs(gw, "small", "sample_missed")
    headers, actual = chat(gw, "small", messages, stream)
    assert proofs(gw, "small", "sample_missed") == missed + 1
    assert headers["x-routefit-actions"] != "none"
    assert actual <= int(headers["x-routefit-budget"])
    assert int(headers["x-routefit-prompt-tokens"]) == actual
    last = sim.last_request()
    assert last["path"].endswith("/chat/completions") and last["prompt_tokens"] == actual
    assert httpx.get(gw.base_url + "/readyz").status_code == 200
