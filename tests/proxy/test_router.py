"""The router's policy (proxy.router): pure and clocked, so each property is checked with a
fixed seed and an injected clock, never by timing."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.config import parse_config
from proxy.router import (
    ATTEMPTS_HEADER,
    DEPLOYMENT_HEADER,
    SKIPPED,
    Attempt,
    Backoff,
    Candidate,
    Deployment,
    Health,
    Outcome,
    Plan,
    Policy,
    advance,
    began,
    choose_window,
    classify,
    cooling,
    ended,
    failed,
    headers,
    holding,
    plan,
    rank,
    wait,
    wider,
)

A1, A2, A3 = (Deployment(f"a{i}", "a") for i in (1, 2, 3))
B1, B2 = Deployment("b1", "b"), Deployment("b2", "b")
TABLE = {"a": (A1, A2, A3), "b": (B1, B2)}


def _run(p: Plan | None, outcomes: list[Outcome]) -> list[str]:
    """The deployments a request is sent to, given each attempt's outcome in turn."""
    seen = []
    for outcome in outcomes:
        assert p is not None
        seen.append(p.current.deployment.id)
        p = advance(p, outcome)
    return seen


def test_classify_reads_statuses_as_the_issue_lists_them() -> None:
    for status in (409, 500, 502, 503, 504, 529):
        assert classify(status) == "server"
    assert classify(429) == "rate_limit" and classify(408) == "timeout"
    assert classify(None) == "connection" and classify(None, timed_out=True) == "timeout"
    assert classify(401) == classify(403) == "auth"
    assert classify(400) == "bad_request" and classify(404) == "bad_request"
    assert classify(400, content_policy=True) == "content_policy"


# --- strategies -----------------------------------------------------------------------------------


def test_simple_shuffle_honours_weights_in_distribution() -> None:
    """Chi-square against weights 1:3:6 over 6,000 seeded picks: below 13.8 (p = 0.001, two
    degrees of freedom); a uniform pick scores in the thousands."""
    ds = [Deployment("x", "a", 1), Deployment("y", "a", 3), Deployment("z", "a", 6)]
    rng, n = random.Random(29), 6000
    picks = Counter(rank(ds, {}, Policy(), 0, 0.0, rng)[0].id for _ in range(n))
    expected = {"x": n * 0.1, "y": n * 0.3, "z": n * 0.6}
    chi2 = sum((picks[k] - e) ** 2 / e for k, e in expected.items())
    assert chi2 < 13.8, (picks, chi2)


@given(st.lists(st.integers(0, 50), min_size=1, max_size=6), st.integers(0, 2**32))
def test_least_busy_picks_the_least_busy(busy: list[int], seed: int) -> None:
    ds = [Deployment(f"d{i}", "a") for i in range(len(busy))]
    health = {d.id: Health(in_flight=n) for d, n in zip(ds, busy, strict=True)}
    order = rank(ds, health, Policy("least-busy"), 0, 0.0, random.Random(seed))
    assert health[order[0].id].in_flight == min(busy)
    assert [health[d.id].in_flight for d in order] == sorted(busy)


def test_latency_based_picks_the_fastest_and_tries_the_unmeasured() -> None:
    health = {"a1": Health(latency=2.0), "a2": Health(latency=0.5)}
    order = rank((A1, A2, A3), health, Policy("latency-based-routing"), 0, 0.0, random.Random(1))
    assert [d.id for d in order] == ["a3", "a2", "a1"]


@given(
    st.lists(
        st.tuples(
            st.integers(1, 20), st.integers(0, 25), st.integers(1, 5000), st.integers(0, 6000)
        ),
        min_size=1,
        max_size=5,
    ),
    st.integers(0, 3000),
    st.integers(0, 2**32),
)
def test_usage_based_never_exceeds_rpm_or_tpm_when_another_has_room(
    limits: list[tuple[int, int, int, int]], tokens: int, seed: int
) -> None:
    now = 125.0
    ds = [Deployment(f"d{i}", "a", rpm=r, tpm=t) for i, (r, _, t, _) in enumerate(limits)]
    health = {
        d.id: Health(minute=2, requests=used_r, tokens=used_t)
        for d, (_, used_r, _, used_t) in zip(ds, limits, strict=True)
    }

    def room(d: Deployment) -> bool:
        h = health[d.id]
        assert d.rpm is not None and d.tpm is not None
        return h.requests + 1 <= d.rpm and h.tokens + tokens <= d.tpm

    first = rank(ds, health, Policy("usage-based-routing-v2"), tokens, now, random.Random(seed))[0]
    if any(room(d) for d in ds):
        assert room(first)


def test_usage_counts_belong_to_their_minute() -> None:
    d = Deployment("d", "a", rpm=1)
    other = Deployment("e", "a", rpm=1)
    h = began(Health(), 10, now=59.0)
    policy = Policy("usage-based-routing-v2")
    assert rank([d, other], {"d": h}, policy, 0, 59.5, random.Random(0))[0] is other
    h2 = began(Health(), 10, 59.0)
    assert (h2.requests, h2.tokens) == (1, 10)
    # the next minute, the count is spent: d has room again (tie broken by the seed)
    assert {x.id for x in rank([d], {"d": h}, policy, 0, 60.0, random.Random(0))} == {"d"}
    assert began(h, 5, 60.0).requests == 1


def test_cost_based_picks_the_cheapest_and_unknown_prices_last() -> None:
    ds = [
        Deployment("dear", "a", cost_per_token=3e-5),
        Deployment("unknown", "a"),
        Deployment("cheap", "a", cost_per_token=1e-6),
    ]
    order = rank(ds, {}, Policy("cost-based-routing"), 0, 0.0, random.Random(0))
    assert [d.id for d in order] == ["cheap", "dear", "unknown"]


# --- cooldowns ------------------------------------------------------------------------------------


def test_cooldown_after_allowed_fails_and_recovery_after_cooldown_time() -> None:
    policy = Policy(allowed_fails=2, cooldown_time=30.0)
    h = Health()
    for t in (0.0, 1.0):
        h = failed(h, "server", t, policy)
        assert not cooling(h, t)  # allowed
    h = failed(h, "server", 2.0, policy)
    assert cooling(h, 2.0) and cooling(h, 31.9) and not cooling(h, 32.0)


def test_failures_older_than_a_minute_do_not_count() -> None:
    policy = Policy(allowed_fails=1)
    h = failed(Health(), "rate_limit", 0.0, policy)
    h = failed(h, "rate_limit", 61.0, policy)
    assert not cooling(h, 61.0)


def test_an_auth_failure_cools_at_once_and_a_bad_request_never() -> None:
    policy = Policy(allowed_fails=3)
    assert cooling(failed(Health(), "auth", 0.0, policy), 0.0)
    h = Health()
    for t in range(10):
        h = failed(h, "bad_request", float(t), policy)
    assert not cooling(h, 10.0)
    named = Policy(allowed_fails_policy={"auth": 1, "bad_request": 0})
    assert not cooling(failed(Health(), "auth", 0.0, named), 0.0)
    assert cooling(failed(Health(), "bad_request", 0.0, named), 0.0)


def test_a_cooled_deployment_is_skipped_unless_all_are() -> None:
    health = {"a1": Health(cooldown_until=50.0), "a2": Health(cooldown_until=20.0)}
    for seed in range(20):
        order = rank((A1, A2, A3), health, Policy(), 0, 10.0, random.Random(seed))
        assert [d.id for d in order] == ["a3", "a2", "a1"]
    everyone = {**health, "a3": Health(cooldown_until=90.0)}
    order = rank((A1, A2, A3), everyone, Policy(), 0, 10.0, random.Random(0))
    assert [d.id for d in order] == ["a2", "a1", "a3"]  # the soonest to recover first


def test_ended_averages_latency_and_releases_the_slot() -> None:
    h = ended(began(Health(), 1, 0.0), 1.0)
    assert (h.in_flight, h.latency) == (0, 1.0)
    assert ended(began(h, 1, 0.0), 2.0).latency == pytest.approx(1.3)
    assert ended(Health(), None).in_flight == 0


# --- one request's attempts -----------------------------------------------------------------------

_FAIL = Outcome("server")
_OK = Outcome()


def _plan(policy: Policy, seed: int = 0, alias: str = "a") -> Plan | None:
    return plan(alias, TABLE, {}, policy, 100, 0.0, random.Random(seed))


@pytest.mark.parametrize("kind", ["connection", "timeout", "rate_limit", "server"])
def test_retries_on_a_retryable_failure_each_on_another_deployment(kind: str) -> None:
    seen = _run(_plan(Policy(num_retries=2)), [Outcome(kind), Outcome(kind), _OK])
    assert len(set(seen)) == 3 and set(seen) == {"a1", "a2", "a3"}


@pytest.mark.parametrize("kind", ["bad_request", "content_policy"])
def test_no_retry_on_the_request_s_own_fault(kind: str) -> None:
    p = _plan(Policy(num_retries=3, fallbacks={"a": ("b",)}))
    assert p is not None and advance(p, Outcome(kind)) is None


def test_nothing_is_retried_once_a_byte_reached_the_client() -> None:
    p = _plan(Policy(num_retries=3, fallbacks={"a": ("b",)}))
    assert p is not None and advance(p, Outcome("server", relayed=True)) is None


def test_retries_spent_then_fallbacks_after_the_alias_s_deployments() -> None:
    p = _plan(Policy(num_retries=1, fallbacks={"a": ("b",)}))
    assert p is not None
    reasons = []
    while p is not None:
        reasons.append((p.current.deployment.alias, p.current.reason))
        p = advance(p, _FAIL)
    assert reasons == [("a", "first"), ("a", "retry"), ("b", "fallback"), ("b", "retry")]


def test_default_fallbacks_serve_an_alias_without_its_own() -> None:
    seen = _run(_plan(Policy(default_fallbacks=("b",))), [_FAIL, _OK])
    assert seen[1].startswith("b")
    p = _plan(Policy(default_fallbacks=("a",)), alias="a")
    assert p is not None and advance(p, _FAIL) is None  # an alias never falls back to itself


def test_an_auth_failure_moves_on_spending_no_retry_and_never_returns() -> None:
    p = _plan(Policy(num_retries=0))
    assert p is not None
    first = p.current.deployment.id
    p = advance(p, Outcome("auth"))
    assert p is not None and p.current.reason == "next_deployment"
    assert p.current.deployment.id != first and p.retries == 0
    # retries go around again, but never back to the refused deployment
    p = plan("a", TABLE, {}, Policy(num_retries=5), 1, 0.0, random.Random(3))
    assert p is not None
    refused = p.current.deployment.id
    p = advance(p, Outcome("auth"))
    seen = []
    while p is not None:
        seen.append(p.current.deployment.id)
        p = advance(p, _FAIL)
    assert refused not in seen and len(seen) == 6


def test_every_deployment_refusing_its_key_ends_in_the_fallback_then_none() -> None:
    seen = _run(_plan(Policy(fallbacks={"a": ("b",)})), [Outcome("auth")] * 5)
    assert [s[0] for s in seen] == ["a", "a", "a", "b", "b"]
    p = _plan(Policy())
    for _ in range(3):
        assert p is not None
        p = advance(p, Outcome("auth"))
    assert p is None


def test_with_one_deployment_a_retry_goes_to_the_same_one() -> None:
    p = plan("a", {"a": (A1,)}, {}, Policy(num_retries=2), 0, 0.0, random.Random(0))
    assert _run(p, [_FAIL, _FAIL, _OK]) == ["a1", "a1", "a1"]


def test_retry_policy_per_kind_overrides_num_retries() -> None:
    policy = Policy(num_retries=0, retry_policy={"rate_limit": 2, "bad_request": 1})
    assert len(_run(_plan(policy), [Outcome("rate_limit")] * 3)) == 3
    p = _plan(policy)
    assert p is not None and advance(p, Outcome("server")) is None
    p = _plan(policy)
    assert p is not None and advance(p, Outcome("bad_request")) is not None


_KINDS = st.sampled_from(
    ["connection", "timeout", "rate_limit", "server", "auth", "bad_request", "content_policy"]
)


@given(
    st.integers(0, 4),
    st.lists(_KINDS, min_size=1, max_size=20),
    st.booleans(),
    st.integers(0, 2**32),
)
def test_attempts_follow_the_rules(
    retries: int, kinds: list[str], fallback: bool, seed: int
) -> None:
    """Whatever the outcomes: a deployment is tried twice in one alias only once every open
    one has been tried; retries never exceed num_retries per alias; fallbacks come after the
    alias's deployments; a refused deployment never comes back; numbers count up from 1."""
    policy = Policy(num_retries=retries, fallbacks={"a": ("b",)} if fallback else {})
    p = plan("a", TABLE, {}, policy, 1, 0.0, random.Random(seed))
    attempts = []
    for kind in kinds:
        if p is None:
            break
        attempts.append((p.current, kind))
        p = advance(p, Outcome(kind))
    numbers = [a.number for a, _ in attempts]
    assert numbers == list(range(1, len(attempts) + 1))
    aliases = [a.deployment.alias for a, _ in attempts]
    assert aliases == sorted(aliases)  # every "a" before any "b"
    refused: set[str] = set()
    for alias in set(aliases):
        mine = [(a, k) for a, k in attempts if a.deployment.alias == alias]
        assert sum(a.reason == "retry" for a, _ in mine) <= retries
        tried: list[str] = []
        for a, kind in mine:
            ident = a.deployment.id
            assert ident not in refused
            if ident in tried:
                assert a.reason == "retry"
                open_ = {d.id for d in TABLE[alias]} - refused
                assert open_ <= set(tried)
            tried.append(ident)
            if kind == "auth":
                refused.add(ident)
    for (_, kind), (b, _) in itertools.pairwise(attempts):
        assert kind in ("connection", "timeout", "rate_limit", "server", "auth")
        if b.reason == "retry":
            assert kind != "auth"


def test_the_same_seed_gives_the_same_plan() -> None:
    one = [_run(_plan(Policy(num_retries=2), seed), [_FAIL] * 3) for seed in range(10)]
    two = [_run(_plan(Policy(num_retries=2), seed), [_FAIL] * 3) for seed in range(10)]
    assert one == two and len({tuple(s) for s in one}) > 1


def test_an_unknown_alias_has_no_plan() -> None:
    assert _plan(Policy(), alias="zz") is None


# --- context-window fallbacks -------------------------------------------------------------------


def test_holding_says_which_candidates_hold_the_conversation_whole() -> None:
    budgets = {"small": 8000, "large": 120000, "mid": 30000}
    assert holding(budgets, 30000) == ("large", "mid")
    assert holding(budgets, {"small": 9000, "large": 200000, "mid": 29000}) == ("mid",)
    assert holding({}, 1) == ()
    assert wider("a", Policy(context_window_fallbacks={"a": ("b",)})) == ("b",)
    assert wider("b", Policy()) == ()


# --- from the config ----------------------------------------------------------------------------


def test_deployments_and_policy_come_from_the_config() -> None:
    entry = {"model_name": "a", "litellm_params": {"model": "openai/gpt-4o", "weight": 2}}
    other = {"model_name": "a", "litellm_params": {"model": "openai/gpt-4o-mini", "tpm": 10}}
    config = parse_config(
        {
            "model_list": [entry, other],
            "router_settings": {"routing_strategy": "cost-based-routing", "num_retries": 1},
        },
        "r.yaml",
        environ={},
    )
    ds = [Deployment.of(rc) for rc in config.deployments("a")]
    assert [d.weight for d in ds] == [2.0, 1.0] and ds[1].tpm == 10
    assert all(d.cost_per_token is not None for d in ds)
    policy = Policy.of(config.router)
    assert (policy.strategy, policy.num_retries) == ("cost-based-routing", 1)
    first = rank(ds, {}, policy, 0, 0.0, random.Random(0))[0]
    assert first.id == config.deployments("a")[1].deployment_id  # mini is the cheaper


# --- waits between attempts ---------------------------------------------------------------------


def _one(policy: Policy, failures: int) -> Plan:
    p = plan("a", {"a": (A1,)}, {}, policy, 0, 0.0, random.Random(0))
    for _ in range(failures):
        assert p is not None
        p = advance(p, _FAIL)
    assert p is not None
    return p


def test_another_deployment_is_tried_at_once_the_same_one_after_a_growing_wait() -> None:
    p = _plan(Policy(num_retries=2, retry_after=5.0))
    assert p is not None and wait(p, None, 0.0) == 0.0
    p = advance(p, _FAIL)
    assert p is not None and wait(p, 30.0, 0.0) == 0.0  # another deployment: no wait
    backoff = Backoff(base=1.0, cap=8.0, jitter=0.5, max_wait=60.0)
    policy = Policy(num_retries=5)
    waits = [wait(_one(policy, n), None, 0.0, backoff=backoff) for n in range(1, 6)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert wait(_one(policy, 1), None, 0.999, backoff=backoff) == pytest.approx(0.5005)


def test_a_deployment_tried_again_after_another_waits_as_a_retry_of_it() -> None:
    """A, then B, then A again: the third attempt is a retry of A, spaced as one (its backoff,
    its provider's ``retry-after``), not an attempt on another deployment that goes at once."""
    backoff = Backoff(base=1.0, cap=8.0, jitter=0.5, max_wait=60.0)
    p = plan("a", {"a": (A1, A2)}, {}, Policy(num_retries=2), 0, 0.0, random.Random(0))
    for _ in range(2):
        assert p is not None
        p = advance(p, Outcome("rate_limit"))
    assert p is not None
    assert [a.deployment.id for a in p.attempts] == [
        p.attempts[0].deployment.id,
        p.attempts[1].deployment.id,
        p.attempts[0].deployment.id,
    ]
    assert wait(p, None, 0.0, backoff=backoff) == 1.0
    assert wait(p, 20.0, 0.0, backoff=backoff) == 20.0
    assert wait(p, 90.0, 0.0, backoff=backoff) is None


def test_a_retry_that_cannot_be_waited_for_moves_on_to_the_fallbacks() -> None:
    """``advance(..., retry=False)``: no retry within the alias (its wait is past the cap or
    the client's deadline), the fallback next, as when the retries are spent."""
    policy = Policy(num_retries=2, fallbacks={"a": ("b",)})
    p = plan("a", {"a": (A1,), "b": (B1,)}, {}, policy, 0, 0.0, random.Random(0))
    assert p is not None
    retried = advance(p, Outcome("rate_limit"))
    assert retried is not None and retried.current == Attempt(2, A1, "retry")
    onward = advance(p, Outcome("rate_limit"), retry=False)
    assert onward is not None and onward.current == Attempt(2, B1, "fallback")
    assert advance(p, Outcome("bad_request"), retry=False) is None


@given(st.integers(1, 5), st.floats(0, 0.999), st.none() | st.floats(0, 100))
def test_a_wait_is_within_its_bounds_and_honours_retry_after(
    failures: int, u: float, retry_after: float | None
) -> None:
    backoff = Backoff()
    p = _one(Policy(num_retries=5, retry_after=0.2), failures)
    got = wait(p, retry_after, u, backoff=backoff)
    floor = max(0.2, retry_after or 0.0)
    if floor > backoff.max_wait:
        assert got is None
    else:
        assert got is not None and floor <= got <= max(floor, backoff.cap)


def test_a_wait_past_the_client_s_deadline_is_not_waited() -> None:
    p = _one(Policy(num_retries=1), 1)
    assert wait(p, 3.0, 0.0, deadline=2.0) is None
    assert wait(p, 3.0, 0.0, deadline=10.0) == 3.0
    assert wait(p, 60.0, 0.0) is None  # past max_wait


def test_headers_name_the_deployment_that_answered_and_the_attempts() -> None:
    p = _plan(Policy(num_retries=1))
    assert p is not None
    p = advance(p, _FAIL)
    assert p is not None
    assert headers(p) == {DEPLOYMENT_HEADER: p.current.deployment.id, ATTEMPTS_HEADER: "2"}


def test_a_skipped_deployment_moves_on_but_is_no_attempt() -> None:
    """A deployment that cannot take the request (nothing sent) is left like one that refused
    its key — the next deployment, never this one again — without counting as an attempt."""
    p = _plan(Policy(num_retries=0))
    assert p is not None
    first = p.current.deployment.id
    skipped = advance(p, Outcome(SKIPPED))
    assert skipped is not None and skipped.current.deployment.id != first
    assert first in skipped.refused
    assert headers(skipped)[ATTEMPTS_HEADER] == "1"
    failed = advance(skipped, Outcome("auth"))  # a refused key is an attempt
    assert failed is not None and headers(failed)[ATTEMPTS_HEADER] == "2"


# --- a context-window fallback is a decision ------------------------------------------------------

SMALL = Candidate("small", budget=8000, tokens=12000, cost_per_token=1e-6)
LARGE = Candidate("large", budget=120000, tokens=11000, cost_per_token=3e-6)
MID = Candidate("mid", budget=10000, tokens=11500, cost_per_token=5e-7)


def test_keep_more_sends_the_conversation_where_it_is_held_whole() -> None:
    assert choose_window(SMALL, [MID, LARGE], "keep_more") == (LARGE, "kept")
    assert choose_window(SMALL, [MID], "keep_more") == (MID, "kept")  # less cut
    held = Candidate("small", 20000, 12000, 1e-6)
    assert choose_window(held, [LARGE], "keep_more") == (held, "fits")
    worse = Candidate("worse", 4000, 12000, 1e-7)
    assert choose_window(SMALL, [worse], "keep_more") == (SMALL, "cut")


def test_pay_less_keeps_the_cut_unless_the_wider_one_costs_less() -> None:
    # SMALL cut: 8000 x 1e-6 = 0.008; LARGE whole: 11000 x 3e-6 = 0.033; MID: 10000 x 5e-7
    assert choose_window(SMALL, [LARGE], "pay_less") == (SMALL, "cut")
    assert choose_window(SMALL, [LARGE, MID], "pay_less") == (MID, "kept")
    unknown = Candidate("small", 8000, 12000)
    assert choose_window(unknown, [MID], "pay_less") == (unknown, "cut")
    with pytest.raises(ValueError):
        choose_window(SMALL, [LARGE], "cheapest")


@given(
    st.lists(
        st.tuples(st.integers(1, 10**5), st.integers(1, 10**5), st.floats(1e-8, 1e-4)),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["keep_more", "pay_less"]),
)
def test_the_choice_never_holds_less_than_the_chosen_deployment(
    raw: list[tuple[int, int, float]], choice: str
) -> None:
    chosen, *wider = (Candidate(f"c{i}", b, t, p) for i, (b, t, p) in enumerate(raw))
    picked, word = choose_window(chosen, wider, choice)
    assert picked.kept >= chosen.kept
    assert word == ("fits" if chosen.kept >= 1.0 else "kept" if picked is not chosen else "cut")
    if choice == "pay_less" and picked is not chosen:
        assert picked.cost < chosen.cost


def test_a_fallback_the_team_may_not_use_is_skipped() -> None:
    """The caller passes only the aliases the team may use."""
    policy = Policy(fallbacks={"a": ("b",)})
    p = plan("a", {"a": (A1,)}, {}, policy, 0, 0.0, random.Random(0))
    assert p is not None and advance(p, _FAIL) is None
    p = plan("a", {"a": (A1,), "b": (B1,)}, {}, policy, 0, 0.0, random.Random(0))
    assert _run(p, [_FAIL, _OK]) == ["a1", "b1"]
