"""A big new prompt goes on a proof (a cheap upper bound under the budget) instead of an exact
count, through routefit (in-process) between the openai SDK and the simulator; calibration still
learns from the exact count, and the budget is settled on the provider's figure."""

from __future__ import annotations

import random
import time

import httpx
import openai
import pytest
from bounded_gateway import ADMIN, TEAM_KEY, chat, metric, route_report, serving
from harness import gateway_config, sim_route
from inprocess import run_inprocess

WORDS = "alpha beta gamma delta tokens window provider usage naïve café 東京 🚀 42".split()


def prose(seed: int, words: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    with serving(sim, tmp_path_factory) as running:
        yield running


def ask(
    gw,
    alias: str,
    content: str,
    stream: bool = False,
    kinds: tuple[str, ...] = ("bound", "counted"),
) -> tuple[int, int]:
    """(the header's prompt tokens, the provider's), once what the header promises is checked:
    the exact count when it says ``counted``; when it says ``bound`` (the count begun beside
    the forward was not in when the provider answered, and the answer does not wait for it),
    an upper bound of it under the budget."""
    headers, actual = chat(gw, alias, [{"role": "user", "content": content}], stream)
    tokens = int(headers["x-routefit-prompt-tokens"])
    kind = headers["x-routefit-prompt-tokens-kind"]
    assert kind in kinds, kind
    if kind == "bound":
        # at least the count: equal when every message was measured before (a memoised
        # message enters a bound at its exact price, pricing.bounds)
        assert int(headers["x-routefit-budget"]) >= tokens >= actual
    else:
        assert tokens == actual
    return tokens, actual


def logged_estimate(gw, actual: int) -> int:
    """The prompt estimate the request log holds for the answer whose provider count was
    ``actual`` (written once the request's exact count is in, after the answer)."""
    deadline = time.monotonic() + 10
    while True:
        data = httpx.get(
            gw.base_url + "/routefit/requests", params={"team": "bounded"}, headers=ADMIN
        ).json()["data"]
        found = [r["prompt_estimate"] for r in data if r["prompt_tokens"] == actual]
        if found or time.monotonic() > deadline:
            assert found, f"no request record with prompt_tokens {actual} after 10 s"
            return found[0]
        time.sleep(0.05)


@pytest.mark.parametrize("stream", [False, True])
def test_a_big_new_prompt_goes_on_the_bound_and_calibration_gets_the_exact_count(gw, stream):
    alias = "exact"
    before = route_report(gw, alias, 0).get("samples", 0)
    estimated = metric(gw, "routefit_prompt_tokens_estimated_total", alias)
    actual_before = metric(gw, "routefit_prompt_tokens_actual_total", alias)
    proofs = metric(gw, "routefit_fit_proofs_total", alias, 'proof="bound"')
    _, actual = ask(gw, alias, prose(1 + stream, 12_000), stream)
    # It went on the bound (UTF-8 bytes, ~2.5x the tokens of this prose, under the budget), and
    # its exact count, begun beside the forward, serves the calibration and the request log.
    assert metric(gw, "routefit_fit_proofs_total", alias, 'proof="bound"') == proofs + 1
    report = route_report(gw, alias, before + 1)
    assert report["samples"] == before + 1
    # The sample, the metrics and the log carry the exact estimate, not the bound: no error.
    assert report["relative_error"]["max"] == 0.0
    assert logged_estimate(gw, actual) == actual
    added = metric(gw, "routefit_prompt_tokens_estimated_total", alias) - estimated
    assert (
        added == metric(gw, "routefit_prompt_tokens_actual_total", alias) - actual_before == actual
    )


def test_a_small_prompt_is_counted_and_says_so(gw):
    tokens, actual = ask(gw, "exact", prose(7, 50), kinds=("counted",))
    assert tokens == actual


@pytest.mark.parametrize("stream", [False, True])
def test_an_operator_can_have_the_answer_wait_for_the_exact_count(sim, tmp_path, stream):
    routes = [sim_route("exact", sim.base_url, "gpt-4o")]
    teams = [{"id": "bounded", "keys": [TEAM_KEY]}]
    config = gateway_config(tmp_path / "c.yaml", routes, teams=teams, exact_prompt_headers=True)
    with run_inprocess(config) as waits:
        proofs = metric(waits, "routefit_fit_proofs_total", "exact", 'proof="bound"')
        # proved by its bound as by default, but answered only once it is counted
        ask(waits, "exact", prose(8 + stream, 12_000), stream, kinds=("counted",))
        assert metric(waits, "routefit_fit_proofs_total", "exact", 'proof="bound"') == proofs + 1


def test_the_dry_run_stays_exact(gw):
    body = {"model": "exact", "messages": [{"role": "user", "content": prose(5, 12_000)}]}
    headers = {"Authorization": f"Bearer {TEAM_KEY}"}
    dry = httpx.post(gw.base_url + "/routefit/fit", json=body, headers=headers, timeout=30)
    assert dry.status_code == 200
    _, actual = ask(gw, "exact", prose(5, 12_000))
    assert int(dry.headers["x-routefit-prompt-tokens"]) == actual


def test_a_bound_over_the_budget_is_tightened_by_counting_part_of_the_prompt(gw):
    # ~9k tokens, ~45 KB: fits the 12k window, its bytes do not; counting a part of it proves it
    content = prose(3, 7_000)
    before = route_report(gw, "tight", 0).get("samples", 0)
    proofs = metric(gw, "routefit_fit_proofs_total", "tight", 'proof="bound"')
    ask(gw, "tight", content)
    assert metric(gw, "routefit_fit_proofs_total", "tight", 'proof="bound"') == proofs + 1
    # the rest was counted after forwarding: the sample carries the exact count
    report = route_report(gw, "tight", before + 1)
    assert report["samples"] == before + 1
    assert report["relative_error"]["max"] == 0.0


def test_a_bound_that_counting_cannot_tighten_falls_back_to_the_exact_count(gw):
    # Many short messages (each left at its bound: counting one saves next to nothing) whose
    # bytes exceed the 12k window though their tokens fit: the exact count decides.
    messages = [{"role": "user", "content": prose(100 + i, 30)} for i in range(150)]
    assert sum(len(m["content"].encode()) for m in messages) > 16_000
    counted = metric(gw, "routefit_fit_proofs_total", "tight", 'proof="count"')
    client = openai.OpenAI(base_url=gw.v1, api_key=TEAM_KEY, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="tight", messages=messages, max_tokens=16
    )
    assert int(raw.headers["x-routefit-prompt-tokens"]) == raw.parse().usage.prompt_tokens
    assert metric(gw, "routefit_fit_proofs_total", "tight", 'proof="count"') == counted + 1


def test_a_known_overflow_is_never_forwarded(gw, sim):
    client = openai.OpenAI(base_url=gw.v1, api_key=TEAM_KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="tight", messages=[{"role": "user", "content": prose(4, 20_000)}], max_tokens=16
        )
    assert caught.value.code == "context_length_exceeded"


def test_the_budget_is_settled_on_the_providers_count(gw):
    def used() -> int:
        r = httpx.get(
            gw.base_url + "/routefit/teams/bounded/usage",
            headers={"Authorization": f"Bearer {TEAM_KEY}"},
        )
        assert r.status_code == 200, r.text
        return next(w["used"] for w in r.json()["windows"] if w["name"] == "tokens_per_day")

    start = used()
    proofs = metric(gw, "routefit_fit_proofs_total", "exact", 'proof="bound"')
    client = openai.OpenAI(base_url=gw.v1, api_key=TEAM_KEY, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="exact", messages=[{"role": "user", "content": prose(6, 12_000)}], max_tokens=16
    )
    usage = raw.parse().usage
    # Reserved on the bound (~2.5x the tokens), settled on the provider's figures.
    assert metric(gw, "routefit_fit_proofs_total", "exact", 'proof="bound"') == proofs + 1
    spent = usage.prompt_tokens + usage.completion_tokens
    deadline = time.monotonic() + 10
    while used() - start != spent and time.monotonic() < deadline:
        time.sleep(0.05)
    assert used() - start == spent
