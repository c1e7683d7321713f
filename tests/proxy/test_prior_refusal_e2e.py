"""A route that has not learnt its tokenizer refuses only what is known not to fit (issue 31,
item 1): its prior errs high on purpose, so when the prior leaves nothing that fits the request
is fitted at the meter's own count and the provider judges it. Through routefit in-process, at
the simulator, on new routes whose tokenizers routefit does not ship (mystery-1 counts ~1.11×
o200k, mystery-dense 1.5×): a latest message the prior prices over the budget but the provider
takes is served; one the provider refuses with its count is refitted on that count (the meter
scaled to it, not the prior) and served when a cut fits, refused in the client's wire shape when
nothing does; a provider's count of an earlier prefix tightens the meter's price, not the
prior's."""

from __future__ import annotations

import random

import httpx
import pytest
from harness import gateway_config, sim_route
from inprocess import run_inprocess

from pricing.tokenizers import get_tokenizer

WORDS = (
    "the route counts tokens window provider answer session history plan file change test "
    "result error value line read write build check list item order model"
).split()


def message_of(tokens: int, seed: int) -> str:
    """About ``tokens`` o200k tokens of words (the meter's own count)."""
    rng = random.Random(seed)
    words = [rng.choice(WORDS) for _ in range(tokens)]
    o200k = get_tokenizer("o200k_base")
    while o200k.count(" ".join(words)) > tokens:
        words.pop()
    return " ".join(words)


def _info(window: int, output: int) -> dict:
    """The simulator's window for the model (litellm's map does not know it)."""
    return {"max_input_tokens": window, "max_output_tokens": output}


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    routes = [
        sim_route("mystery", sim.base_url, "mystery-1", model_info=_info(32_768, 4096)),
        sim_route("dense", sim.base_url, "mystery-dense", model_info=_info(8192, 2048)),
    ]
    config = gateway_config(tmp_path_factory.mktemp("prior") / "c.yaml", routes)
    with run_inprocess(config) as running:
        yield running


def post(gw, body: dict) -> httpx.Response:
    return httpx.post(gw.v1 + "/chat/completions", json=body, timeout=60)


def budget_of(gw, alias: str) -> int:
    """The route's prompt budget, from a dry run of a small request."""
    body = {"model": alias, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 200}
    r = httpx.post(gw.base_url + "/routefit/fit", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return int(r.json()["report"]["budget"])


def test_a_message_only_the_prior_prices_over_the_budget_is_served(gw, sim):
    budget = budget_of(gw, "mystery")
    # the meter counts 85% of the budget, the provider ~94%, the prior ~1.2x the budget
    text = message_of(int(budget * 0.85), seed=1)
    body = {
        "model": "mystery",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}],
        "max_tokens": 200,
    }
    dry = httpx.post(gw.base_url + "/routefit/fit", json=body, timeout=30).json()["report"]
    assert dry["on_meter"] and dry["transparent"], dry
    r = post(gw, body)
    assert r.status_code == 200, r.text
    assert r.headers["x-routefit-prompt-tokens-kind"] == "meter"
    assert r.json()["usage"]["prompt_tokens"] <= budget  # it did fit: the prior was high


def test_a_message_the_provider_counts_over_the_window_is_refused_once_known(gw, sim):
    budget = budget_of(gw, "dense")
    # the meter counts 80% of the budget; the provider, 1.5x that, over its 8k window
    text = message_of(int(budget * 0.8), seed=2)
    body = {"model": "dense", "messages": [{"role": "user", "content": text}], "max_tokens": 200}
    seen = sim.requests(limit=1)
    since = seen[-1]["id"] if seen else -1
    r = post(gw, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded", error
    refused = [e for e in sim.requests() if e["id"] > since and e["status"] == 400]
    assert len(refused) == 1  # forwarded once on the meter's count, refused on the provider's
    # routefit's own refusal, on the provider's count: the latest message alone does not fit
    assert "do not fit" in error["message"], error


RUSSIAN = "Погода в Москве ясная. Пожалуйста, проверьте материалы встречи до пятницы. "


def test_the_providers_count_not_the_prior_refits_an_overflow(gw, sim):
    """The prior prices Cyrillic for a tokenizer with few pieces for it, ~5x what mystery-dense
    counts, so on its own it would refuse the latest message; the meter's count fits and goes,
    the provider refuses it with its count, and the refit scales the meter to that count (a
    prior scaled to it would still price the message over the budget): the history is elided
    and the request served."""
    budget = budget_of(gw, "dense")
    o200k = get_tokenizer("o200k_base")
    latest = RUSSIAN * max(1, int(budget * 0.3) // o200k.count(RUSSIAN))
    history = []
    for turn in range(12):
        history.append({"role": "user", "content": message_of(budget // 12, seed=10 + turn)})
        history.append({"role": "assistant", "content": message_of(40, seed=40 + turn)})
    messages = [*history, {"role": "user", "content": latest}]
    body = {"model": "dense", "messages": messages, "max_tokens": 200}
    seen = sim.requests(limit=1)
    since = seen[-1]["id"] if seen else -1
    r = post(gw, body)
    assert r.status_code == 200, r.text
    assert "elided_messages=" in r.headers["x-routefit-actions"]
    refused = [e for e in sim.requests() if e["id"] > since and e["status"] == 400]
    assert len(refused) == 1  # the meter's fit, refused with the provider's count


def test_an_anchor_over_the_budget_tightens_the_meter_not_the_prior(gw, sim):
    """The provider's count of a prefix the session sent before (an anchor) can put a request
    fitted at the meter's count over the budget; the fit is then tightened from the meter's
    price by as much, not from the prior's, which would price the Cyrillic message that the
    prior alone could not fit over the budget again and refuse it."""
    budget = budget_of(gw, "dense")
    o200k = get_tokenizer("o200k_base")
    history = [
        {"role": "system", "content": "You are a careful assistant."},
        *(
            {"role": "user" if i % 2 == 0 else "assistant", "content": message_of(budget // 16, i)}
            for i in range(9)
        ),
    ]
    first = {"model": "dense", "messages": history, "max_tokens": 200}
    assert post(gw, first).status_code == 200  # its prefixes' counts become anchors
    latest = RUSSIAN * max(1, int(budget * 0.3) // o200k.count(RUSSIAN))
    messages = [
        *history,
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": latest},
    ]
    r = post(gw, {"model": "dense", "messages": messages, "max_tokens": 200})
    assert r.status_code == 200, r.text
