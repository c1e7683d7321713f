"""A big prompt of new text let go on a sample's guess (issue 34), on every client wire —
Messages (anthropic SDK, native leg), Responses (openai SDK), Gemini (raw httpx), streamed and
not — through routefit in process and the provider simulator: the client is answered the
request the count proved (a forced miss sends the exact fit), what is learnt is exact, and the
team's budget is settled to what the provider answered and the prompts it had of attempts the
count abandoned.

The ``*-tight`` routes tell routefit 12k tokens where the simulator's model takes far more, so
the simulator answers a request routefit must cut: an answer to the guess relayed after the
count disproved it would show there (the provider's count over the budget, no actions)."""

from __future__ import annotations

import contextlib
import json
import random
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
import yaml
from harness import claude_route, gateway_config, sim_route
from inprocess import run_inprocess

import pricing.bounds

WORDS = "window provider usage prompt cache budget token turn agent session tool".split()
TEAMS = {"alpha": "sk-team-alpha-0123456789abcdef", "beta": "sk-team-beta-0123456789abcdef"}
#: Teams whose day holds far less than a ``tight`` route's budget (each its own id in a shared
#: store): what one may use is over as soon as one request is sent whole, so each test that
#: spends a day has its own.
QUOTA = "quota-" + uuid.uuid4().hex[:8]
QUOTA_KEY = "sk-team-quota-0123456789abcdef"
#: The team that measures what a prompt sent whole counts (``whole``): its own, so that what it
#: counts is in no other team's memo (a prompt counted before is priced from it, not sampled).
MEASURER_KEY = "sk-team-measurer-0123456789abcdef"
OVER = "over-" + uuid.uuid4().hex[:8]
OVER_KEY = "sk-team-over-0123456789abcdef"
QUOTA_TOKENS = 5_000
ADMIN_KEY = "sk-admin-hunt-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
TIGHT = {"max_input_tokens": 12_000, "max_output_tokens": 1024}
#: (wire, the route that holds the prompt, the route that must cut it)
ROUTES = {
    "messages": ("exact", "tight"),
    "responses": ("exact", "tight"),
    "gemini": ("exact", "tight"),
}


def prose(seed: int, words: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(words))


def two_texts(seed: int, second: int | None = None) -> list[tuple[str, str]]:
    """A conversation of two new texts of 12,000 words (a user's, then an assistant's) and a
    short question about them."""
    return [
        ("user", prose(seed, 12_000)),
        ("assistant", prose(seed + 1 if second is None else second, 12_000)),
        ("user", "In one line: what did the two texts say?"),
    ]


@contextlib.contextmanager
def serving(sim: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    routes = [
        sim_route("exact", sim.base_url, "gpt-4o"),
        sim_route("tight", sim.base_url, "gpt-4o", model_info=TIGHT),
        claude_route("claude", sim.base_url),
        claude_route("claude-tight", sim.base_url, **TIGHT),
    ]
    teams = [
        {"id": name, "keys": [key], "quotas": {"tokens_per_day": 10**10}}
        for name, key in TEAMS.items()
    ]
    teams.append({"id": "measurer", "keys": [MEASURER_KEY]})
    for name, key in ((QUOTA, QUOTA_KEY), (OVER, OVER_KEY)):
        teams.append({"id": name, "keys": [key], "quotas": {"tokens_per_day": QUOTA_TOKENS}})
    # ``wide``: routefit is told 200k where the simulator's gpt-4o takes 128k
    wide = {"max_input_tokens": 200_000, "max_output_tokens": 1024}
    routes.append(sim_route("wide", sim.base_url, "gpt-4o", model_info=wide))
    # ``narrow``: the tight window, with ``exact`` as its context-window fallback
    routes.append(sim_route("narrow", sim.base_url, "gpt-4o", model_info=TIGHT))
    # ``pair``: two deployments of the simulator's gpt-4o, the router retrying on the other
    for name in ("pair-a", "pair-b"):
        entry = sim_route("pair", sim.base_url, "gpt-4o")
        entry["model_info"] = {"id": name}
        routes.append(entry)
    config = gateway_config(
        tmp_path_factory.mktemp("h") / "c.yaml", routes, teams=teams, admin_key=ADMIN_KEY
    )
    data = yaml.safe_load(config.read_text())
    data["router_settings"] = {
        "num_retries": 1,
        "allowed_fails": 100,
        "cooldown_time": 0,
        "context_window_fallbacks": [{"narrow": ["exact"]}],
    }
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    with run_inprocess(config) as running:
        yield running


#: These tests are about the answer held until a count proves its guess.
pytestmark = pytest.mark.usefixtures("every_guess_held")


@pytest.fixture(scope="module")
def gw(sim: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with serving(sim, tmp_path_factory) as running:
        yield running


def metric(gw: Any, name: str, alias: str, label: str = "") -> float:
    for line in httpx.get(gw.base_url + "/metrics", headers=ADMIN).text.splitlines():
        if line.startswith(name) and f'route="{alias}"' in line and label in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def proofs(gw: Any, alias: str, proof: str) -> float:
    return metric(gw, "routefit_fit_proofs_total", alias, f'proof="{proof}"')


def used(gw: Any, team: str) -> int:
    """The team's tokens used today (its usage endpoint)."""
    body = httpx.get(f"{gw.base_url}/routefit/teams/{team}/usage", headers=ADMIN).json()
    return int(next(w["used"] for w in body["windows"] if w["name"] == "tokens_per_day"))


def settled(gw: Any, team: str, expected: int) -> int:
    """The team's usage once it reaches ``expected`` (settled after the answer), or after 5 s."""
    deadline = time.monotonic() + 5
    while (now := used(gw, team)) < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return now


def route_report(gw: Any, alias: str, samples: int) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        routes = httpx.get(gw.base_url + "/routefit/calibration", headers=ADMIN).json()["routes"]
        report = routes.get(alias, {})
        if report.get("samples", 0) >= samples or time.monotonic() > deadline:
            return dict(report)
        time.sleep(0.05)


def ask(
    gw: Any,
    wire: str,
    alias: str,
    turns: list[tuple[str, str]],
    stream: bool,
    team: str = "alpha",
    key: str | None = None,
) -> tuple[dict[str, str], int, int]:
    """(the answer's headers, the provider's prompt and output counts in the answer the client
    got), ``turns`` as (role, text) sent on ``wire`` by ``team`` (or the team of ``key``)."""
    key = key or TEAMS[team]
    if wire == "messages":
        client = anthropic.Anthropic(base_url=gw.base_url, api_key=key, max_retries=0, timeout=60)
        msgs: Any = [{"role": r, "content": t} for r, t in turns]
        raw = client.messages.with_raw_response.create(
            model=alias, messages=msgs, max_tokens=16, stream=stream
        )
        if not stream:
            message = raw.parse()
            return dict(raw.headers), message.usage.input_tokens, message.usage.output_tokens
        prompt = output = 0
        for event in raw.parse():
            if event.type == "message_start":
                prompt = event.message.usage.input_tokens
            elif event.type == "message_delta":  # a chat leg's count comes at the end
                prompt = max(prompt, event.usage.input_tokens or 0)
                output = event.usage.output_tokens
        return dict(raw.headers), prompt, output
    if wire == "responses":
        oclient = openai.OpenAI(base_url=gw.v1, api_key=key, max_retries=0, timeout=60)
        items: Any = [{"role": r, "content": t} for r, t in turns]
        rraw = oclient.responses.with_raw_response.create(
            model=alias, input=items, max_output_tokens=16, stream=stream
        )
        if not stream:
            usage = rraw.parse().usage
            assert usage is not None
            return dict(rraw.headers), usage.input_tokens, usage.output_tokens
        done = [e for e in rraw.parse() if e.type == "response.completed"]
        usage = done[-1].response.usage
        assert usage is not None
        return dict(rraw.headers), usage.input_tokens, usage.output_tokens
    if wire == "chat":
        cclient = openai.OpenAI(base_url=gw.v1, api_key=key, max_retries=0, timeout=60)
        chat: Any = [{"role": r, "content": t} for r, t in turns]
        craw = cclient.chat.completions.with_raw_response.create(
            model=alias, messages=chat, max_tokens=16
        )
        cusage = craw.parse().usage
        assert cusage is not None
        return dict(craw.headers), cusage.prompt_tokens, cusage.completion_tokens
    assert wire == "gemini"
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    body = {
        "contents": [
            {"role": "model" if r == "assistant" else "user", "parts": [{"text": t}]}
            for r, t in turns
        ],
        "generationConfig": {"maxOutputTokens": 16},
    }
    r = httpx.post(
        f"{gw.base_url}/v1beta/models/{alias}:{method}",
        json=body,
        headers={"x-goog-api-key": key},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    if not stream:
        meta = r.json()["usageMetadata"]
    else:
        chunks = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
        meta = [c["usageMetadata"] for c in chunks if "usageMetadata" in c][-1]
    return dict(r.headers), meta["promptTokenCount"], meta.get("candidatesTokenCount", 0)


def force_miss(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample of one piece that reads the rest as nothing: the guess lets go a prompt its
    route must cut (the one way to make a sample of homogeneous text miss)."""
    monkeypatch.setattr(pricing.bounds, "_SAMPLES", 1)
    monkeypatch.setattr(pricing.bounds, "_SAMPLE_EVERY", 10**9)
    monkeypatch.setattr(pricing.bounds, "_SAMPLE_SLACK", 0.0)


def fault(sim: Any, rule: dict[str, Any]) -> None:
    httpx.post(sim.url("/sim/faults"), json={"faults": [rule]}).raise_for_status()


def whole(gw: Any, sim: Any, wire: str, turns: list[tuple[str, str]], stream: bool) -> int:
    """The prompt ``turns`` make on ``wire`` as the provider counts it when it is sent whole
    (to the ``exact`` route, the same model and tokenizer as ``tight``, by a team of its own):
    the simulator's own count, cached tokens included (a Messages client's ``input_tokens``
    leaves out what the provider read from its cache)."""
    ask(gw, wire, "exact", turns, stream, key=MEASURER_KEY)
    return int(sim.last_request()["prompt_tokens"])


WIRES = [(w, s) for w in ROUTES for s in (False, True)]


@pytest.mark.parametrize(("wire", "stream"), WIRES)
def test_every_wire_is_answered_on_the_count_of_a_sampled_request(
    gw: Any, wire: str, stream: bool
) -> None:
    alias = ROUTES[wire][0]
    seed = 1000 + 2 * list(ROUTES).index(wire) + stream
    samples = route_report(gw, alias, 0).get("samples", 0)
    sampled = proofs(gw, alias, "sample")
    before = used(gw, "alpha")
    headers, prompt, output = ask(gw, wire, alias, [("user", prose(seed, 24_000))], stream)
    assert proofs(gw, alias, "sample") == sampled + 1
    assert headers["x-routefit-actions"] == "none"
    assert headers["x-routefit-prompt-tokens-kind"] in ("counted", "bound")
    report = route_report(gw, alias, samples + 1)
    assert report["samples"] == samples + 1 and report["relative_error"]["max"] == 0.0
    # settled once, to what the provider answered
    assert settled(gw, "alpha", before + prompt + output) == before + prompt + output


@pytest.mark.parametrize("provider_first", [True, False])
@pytest.mark.parametrize(("wire", "stream"), WIRES)
def test_every_wire_sends_the_exact_fit_when_the_count_disproves_the_guess(
    gw: Any, sim: Any, wire: str, stream: bool, provider_first: bool, monkeypatch: Any
) -> None:
    force_miss(monkeypatch)
    alias = ROUTES[wire][1]
    if not provider_first:
        fault(sim, {"fault": "delay:1", "count": 1})
    seed = 2000 + 4 * list(ROUTES).index(wire) + 2 * stream + provider_first
    turns = [
        ("user", prose(seed, 12_000)),
        ("assistant", prose(seed + 50, 12_000)),
        ("user", "And now, in one line: what did the two texts say?"),
    ]
    missed = proofs(gw, alias, "sample_missed")
    before = used(gw, "alpha")
    headers, prompt, output = ask(gw, wire, alias, turns, stream)
    assert proofs(gw, alias, "sample_missed") == missed + 1
    assert headers["x-routefit-actions"] != "none"
    assert prompt <= int(headers["x-routefit-budget"])
    assert int(headers["x-routefit-prompt-tokens"]) >= prompt
    assert sim.last_request()["prompt_tokens"] == prompt
    # the answer, and the abandoned attempt's prompt the provider had (docs/security.md,
    # "Charging on every exit"), as routefit counted it: the whole conversation
    spent = prompt + output + whole(gw, sim, wire, turns, stream)
    assert settled(gw, "alpha", before + spent) == before + spent
    assert httpx.get(gw.base_url + "/readyz").status_code == 200


def test_a_guess_the_count_disproves_is_held_to_the_quota_on_the_fit_that_goes_instead(
    gw: Any, sim: Any, monkeypatch: Any
) -> None:
    # The guess (a few tokens) is reserved within the team's day; the exact fit that goes
    # instead (near the tight route's budget) is not: the team is refused as any request over
    # its quota is, not served beyond it.
    force_miss(monkeypatch)
    client = openai.OpenAI(base_url=gw.v1, api_key=QUOTA_KEY, max_retries=0, timeout=60)
    # many turns, so that the fit keeps as many as the budget holds (far over the quota)
    messages: Any = [
        {"role": ("user", "assistant")[i % 2], "content": prose(3000 + i, 600)} for i in range(40)
    ]
    missed = proofs(gw, "tight", "sample_missed")
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="tight", messages=messages, max_tokens=16)
    # over the day's whole limit: the client's 400, as before forwarding (no wait admits it)
    assert refused.value.code == "request_over_quota"
    assert proofs(gw, "tight", "sample_missed") == missed + 1
    # the provider had the prompt that went on the guess: the team is charged it (it was
    # released before, a free provider call for a text whose sample reads cheap)
    sent = whole(gw, sim, "chat", [(m["role"], m["content"]) for m in messages], False)
    assert settled(gw, QUOTA, sent) == sent > QUOTA_TOKENS
    # and the day is spent: a request it held before is refused now
    small: Any = [{"role": "user", "content": "Say hello."}]
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="tight", messages=small, max_tokens=16)
    assert used(gw, QUOTA) == sent


def test_a_client_that_leaves_while_a_sampled_request_is_answered_is_charged_its_prompt(
    gw: Any, sim: Any
) -> None:
    # The provider takes 2 s; the client leaves after half a second, the count long done. The
    # upstream attempt is cancelled, the prompt charged as it was proved (docs/reliability.md:
    # "client leaves while the provider thinks"), no 5xx, and the same request then served.
    content = prose(4000, 24_000)
    body = {"model": "exact", "messages": [{"role": "user", "content": content}], "max_tokens": 16}
    headers = {"Authorization": f"Bearer {TEAMS['beta']}"}
    errors = metric(gw, "routefit_errors_total", "", 'kind="internal"')
    before = used(gw, "beta")
    fault(sim, {"fault": "delay:2", "count": 1})
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(gw.v1 + "/chat/completions", json=body, headers=headers, timeout=0.5)
    charged = settled(gw, "beta", before + 1) - before
    served = httpx.post(gw.v1 + "/chat/completions", json=body, headers=headers, timeout=60)
    assert served.status_code == 200, served.text
    prompt = served.json()["usage"]["prompt_tokens"]
    # the prompt as proved: its count, or the bound those counts proved (never the guess)
    assert prompt <= charged <= int(served.headers["x-routefit-budget"])
    assert metric(gw, "routefit_errors_total", "", 'kind="internal"') == errors
    assert httpx.get(gw.base_url + "/readyz").status_code == 200


FAILURES = ["status:503", "status:429", "reset", "malformed"]


@pytest.mark.parametrize("failure", FAILURES)
def test_a_sampled_request_the_provider_fails_goes_to_the_other_deployment_once(
    gw: Any, sim: Any, failure: str
) -> None:
    # the first attempt fails while (or after) it is counted; the other deployment, priced for
    # itself, answers; the team is charged what the answer used, once, and the prompt of a
    # first attempt the provider had (docs/security.md, "Charging on every exit")
    content = prose(5000 + FAILURES.index(failure), 24_000)
    sampled = proofs(gw, "pair", "sample")
    before = used(gw, "alpha")
    fault(sim, {"fault": failure, "count": 1})
    client = openai.OpenAI(base_url=gw.v1, api_key=TEAMS["alpha"], max_retries=0, timeout=60)
    raw = client.chat.completions.with_raw_response.create(
        model="pair", messages=[{"role": "user", "content": content}], max_tokens=16
    )
    usage = raw.parse().usage
    assert usage is not None
    assert raw.headers["x-routefit-attempts"] == "2"
    assert raw.headers["x-routefit-actions"] == "none"
    # the first attempt went on a guess (the second finds the texts the first counted)
    assert proofs(gw, "pair", "sample") == sampled + 1
    total = usage.prompt_tokens + usage.completion_tokens
    if failure != "malformed":  # refused or never reached: released
        assert settled(gw, "alpha", before + total) == before + total
        return
    # it answered, unusably: its prompt as proved (its count, or a bound over it) is charged too
    least = int(0.95 * usage.prompt_tokens)
    first = settled(gw, "alpha", before + total + least) - before - total
    assert least <= first <= int(raw.headers["x-routefit-budget"])


def test_four_sampled_requests_from_two_teams_at_once_are_each_answered_on_their_own_count(
    gw: Any, sim: Any, monkeypatch: Any
) -> None:
    # two that fit as sent, two whose guess misses (a cut): each client gets the answer to its
    # own request, each team is charged what its answers used and the prompts of its attempts
    # the count abandoned (the provider had them)
    import concurrent.futures

    force_miss(monkeypatch)
    jobs = []
    for i, team in enumerate(("alpha", "beta", "alpha", "beta")):
        if i < 2:
            turns = [("user", prose(6000 + i, 24_000))]
            jobs.append((team, "exact", turns))
        else:
            jobs.append((team, "tight", two_texts(6000 + i, 6100 + i)))
    spent = {t: 0 for t in TEAMS}
    for team, alias, turns in jobs:
        if alias == "tight":
            spent[team] += whole(gw, sim, "chat", turns, False)
    before = {t: used(gw, t) for t in TEAMS}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda job: ask(gw, "chat", job[1], job[2], False, job[0]), jobs))
    for (team, alias, _), (headers, prompt, output) in zip(jobs, answers, strict=True):
        assert prompt <= int(headers["x-routefit-budget"])
        assert (headers["x-routefit-actions"] == "none") == (alias == "exact")
        spent[team] += prompt + output
    for team in TEAMS:
        assert settled(gw, team, before[team] + spent[team]) == before[team] + spent[team]


def test_a_sampled_request_the_provider_refuses_for_its_window_is_refused_as_the_provider_said(
    gw: Any,
) -> None:
    # ~140k tokens: within the window routefit was told, over the simulator's. The count agrees
    # with the provider's (nothing to correct), so its refusal reaches the client in the
    # wire's shape, once, and nothing wrong is learnt from it.
    content = prose(7000, 70_000)
    samples = route_report(gw, "wide", 0).get("samples", 0)
    sampled = proofs(gw, "wide", "sample")
    client = openai.OpenAI(base_url=gw.v1, api_key=TEAMS["alpha"], max_retries=0, timeout=60)
    before = used(gw, "alpha")
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="wide", messages=[{"role": "user", "content": content}], max_tokens=16
        )
    assert refused.value.code == "context_length_exceeded"
    assert proofs(gw, "wide", "sample") == sampled + 1
    report = route_report(gw, "wide", samples)
    assert report.get("samples", 0) == samples  # a refusal is no usage
    assert metric(gw, "routefit_overflow_refits_total", "wide") == 0
    assert used(gw, "alpha") == before  # a refusal is not billed


def test_a_guess_below_the_count_is_held_to_the_quota_on_what_the_count_proved(
    gw: Any, sim: Any, monkeypatch: Any
) -> None:
    # A guess far below the count that still fits the route: the team's day holds the guess,
    # not the prompt. The count proves the request fits the window; the quota is then held to
    # what it proved, and the answer to a request the day cannot hold is not relayed.
    force_miss(monkeypatch)
    client = openai.OpenAI(base_url=gw.v1, api_key=OVER_KEY, max_retries=0, timeout=60)
    before = used(gw, OVER)
    sampled = proofs(gw, "exact", "sample")
    content = prose(8000, 24_000)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="exact", messages=[{"role": "user", "content": content}], max_tokens=16
        )
    # over the day's whole limit: the client's 400, as before forwarding (no wait admits it)
    assert refused.value.code == "request_over_quota"
    assert proofs(gw, "exact", "sample") == sampled + 1
    # refused, but charged the prompt the provider read: as the count proved it (its count, or
    # a bound those counts proved under the route's budget), never the guess nor nothing
    sent = whole(gw, sim, "chat", [("user", content)], False)
    charged = settled(gw, OVER, before + sent) - before
    assert sent <= charged <= sent + sent // 100


def test_a_context_window_fallback_is_decided_on_the_count_not_on_a_guess(
    gw: Any, monkeypatch: Any
) -> None:
    # A guess that says the conversation fits the narrow route, where the count says it must be
    # cut: with a wider alias to keep it whole (keep_more), the client gets it kept, as it
    # would have with no guess — not the narrow route's cut.
    force_miss(monkeypatch)
    turns = two_texts(9000)
    headers, prompt, _ = ask(gw, "chat", "narrow", turns, False)
    assert headers["x-routefit-context"] == "kept"
    assert headers["x-routefit-route"] == "exact"
    assert headers["x-routefit-actions"] == "none"
    assert prompt <= int(headers["x-routefit-budget"])


def test_the_cut_a_missed_guess_sends_instead_is_counted_in_the_fit_metrics(
    gw: Any, monkeypatch: Any
) -> None:
    # The fit's actions are counted when the fit is made before forwarding; the fit that goes
    # instead of a missed guess is counted the same (the guess itself took none).
    force_miss(monkeypatch)
    turns = two_texts(9500)
    name = "routefit_fit_actions_total"
    label = 'action="elided_messages"'
    before = metric(gw, name, "tight", label)
    headers, _, _ = ask(gw, "chat", "tight", turns, False)
    actions = dict(a.split("=") for a in headers["x-routefit-actions"].split(","))
    assert metric(gw, name, "tight", label) == before + int(actions["elided_messages"])
