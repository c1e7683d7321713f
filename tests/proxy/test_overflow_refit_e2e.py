"""A provider overflow is a sample, not a failure: through routefit (in-process), on routes whose
tokenizer counts half again more than routefit can know before it has learnt them (the
simulator's mystery-dense / claude-dense, 8k windows), the first long request passes routefit's
fit, is refused by the provider for context length with its count, and routefit learns that
count, refits and retries once: the client sees a success."""

from __future__ import annotations

import random
import re

import anthropic
import httpx
import openai
import pytest
from harness import gateway_config, sim_route
from inprocess import run_inprocess

WORDS = (
    "the route counts tokens window provider answer session history plan file change test "
    "result error value line read write build check list item order model"
).split()
SMALL = {"max_input_tokens": 8192, "max_output_tokens": 2048}


def text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def session(seed: int, turns: int = 12, words: int = 230) -> list[dict]:
    """A long session routefit believes fits an 8k window (and the provider does not)."""
    rng = random.Random(seed)
    messages = [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": "Task: " + text(rng, 60)},
    ]
    for _ in range(turns):
        messages.append({"role": "assistant", "content": text(rng, words)})
        messages.append({"role": "user", "content": text(rng, words)})
    return messages


def claude_route(alias: str, sim_url: str, model: str) -> dict:
    return {
        "model_name": alias,
        "litellm_params": {
            "model": f"anthropic/{model}",
            "api_base": sim_url,
            "api_key": "sk-ant-sim",
        },
        "model_info": SMALL,
    }


@pytest.fixture(scope="module")
def gw(sim, tmp_path_factory):
    routes = [
        sim_route("dense", sim.base_url, "mystery-dense", model_info=SMALL),
        claude_route("claude-dense", sim.base_url, "claude-dense"),
        # routefit believes in a window the provider does not have, but counts exactly as it
        # does: an overflow there is no under-estimate of routefit's to refit
        sim_route("narrow", sim.base_url, "gpt-4o-small", model_info={"max_input_tokens": 128_000}),
    ]
    # The prior a new route is priced by covers tokenizers up to ~x1.4 (docs/calibration.md);
    # these routes must be ones it does not cover, so that only the provider can say "too long":
    # the prior of a deployment that assumes tokenizers close to the ones routefit ships.
    # (the config takes positive numbers: 0.05 tokens a message is none)
    none = 0.05
    modest = {"prior_inexact": 1.1, "prior_messages": none, "prior_calls": none}
    modest["prior_requests"] = modest["prior_digits"] = none
    config = gateway_config(
        tmp_path_factory.mktemp("overflow") / "c.yaml", routes, calibration=modest
    )
    with run_inprocess(config) as running:
        yield running


def refits(gw, route: str) -> float:
    metrics = httpx.get(gw.base_url + "/metrics").text
    found = re.search(
        rf'^routefit_overflow_refits_total\{{route="{re.escape(route)}"\}} (\S+)$',
        metrics,
        re.MULTILINE,
    )
    return float(found.group(1)) if found else 0.0


def dry_run(gw, path: str, body: dict) -> dict:
    r = httpx.post(gw.base_url + "/routefit/fit" + path, json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["report"]


def last_id(sim) -> int:
    """The simulator's newest request id: its log keeps only the latest requests, so positions in
    it shift once earlier tests have filled it; ids do not."""
    log = sim.requests(limit=1)
    return log[-1]["id"] if log else -1


def overflowed(sim, path: str, since: int) -> list[dict]:
    return [e for e in sim.requests(path=path) if e["id"] > since and e["status"] == 400]


def test_chat_overflow_at_the_provider_is_refitted_and_served(gw, sim):
    messages = session(1)
    body = {"model": "dense", "messages": messages, "max_tokens": 200}
    report = dry_run(gw, "", body)
    # routefit believes the session fits as it is: only the provider can say otherwise.
    assert report["estimate_after"] <= report["budget"]
    assert report["transparent"], report

    before = refits(gw, "dense")
    seen = last_id(sim)
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(**body)
    reply = raw.parse()
    assert reply.choices[0].message.content
    refused = overflowed(sim, "/v1/chat/completions", seen)
    assert len(refused) == 1  # the provider refused the first attempt, and only that one
    assert refits(gw, "dense") == before + 1
    assert "elided_messages=" in raw.headers["x-routefit-actions"]
    # The refitted estimate is at least what the provider then counted.
    assert int(raw.headers["x-routefit-prompt-tokens"]) >= reply.usage.prompt_tokens


def test_chat_stream_overflow_is_refitted_before_the_first_byte(gw, sim):
    body = {"model": "dense", "messages": session(2), "max_tokens": 200, "stream": True}
    before = refits(gw, "dense")
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    chunks = list(client.chat.completions.create(**body))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert refits(gw, "dense") == before + 1


def test_the_count_is_learnt_so_the_same_session_goes_at_once(gw, sim):
    messages = session(3)
    body = {"model": "dense", "messages": messages, "max_tokens": 200}
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    client.chat.completions.create(**body)
    before = refits(gw, "dense")
    # The next turn extends what the provider counted: routefit anchors on that count and fits
    # before sending, so the provider is not refused again.
    messages = [
        *messages,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go"},
    ]
    seen = last_id(sim)
    reply = client.chat.completions.create(**{**body, "messages": messages})
    assert reply.choices
    assert refits(gw, "dense") == before
    assert not overflowed(sim, "/v1/chat/completions", seen)


def test_anthropic_overflow_at_the_provider_is_refitted_and_served(gw, sim):
    messages = session(4)
    system = messages[0]["content"]
    rest = messages[1:]
    before = refits(gw, "claude-dense")
    seen = last_id(sim)
    client = anthropic.Anthropic(base_url=gw.base_url, api_key="unused", max_retries=0)
    raw = client.messages.with_raw_response.create(
        model="claude-dense", max_tokens=200, system=system, messages=rest
    )
    reply = raw.parse()
    assert reply.content
    assert len(overflowed(sim, "/v1/messages", seen)) == 1
    assert refits(gw, "claude-dense") == before + 1
    assert "elided_messages=" in raw.headers["x-routefit-actions"]


def test_an_overflow_routefit_did_not_under_estimate_is_the_providers_answer(gw, sim):
    # Only if the provider counted more than routefit estimated is there a refit; otherwise its
    # 400 reaches the client as it is, and the identical request is not sent a second time.
    body = {"model": "narrow", "messages": session(4, turns=30), "max_tokens": 200}
    before = refits(gw, "narrow")
    seen = last_id(sim)
    client = openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**body)
    assert refused.value.code == "context_length_exceeded"
    assert "maximum context length is 8192 tokens" in refused.value.message
    sent = [e for e in sim.requests(path="/v1/chat/completions") if e["id"] > seen]
    assert len(sent) == 1, sent
    assert refits(gw, "narrow") == before
